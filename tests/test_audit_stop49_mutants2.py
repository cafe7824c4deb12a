"""Stop-49 mutation campaign, part 2 (model builders, sparse predictions, dp_ppc, exports,
plans, domains): tests that kill mutants no earlier test killed.

Each test names the mutant it kills (a small wrong change applied one at a time in a scratch
copy; see the stop-49 audit report).  References are NumPy/SciPy written here.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from scipy.stats import norm

from pm_dpgp.accounting import Ledger
from pm_dpgp.compat import get_group
from pm_dpgp.gp.sparse import sample_from_qu
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import dp_ppc, holdout_elpd, release_posterior


def _eq(a, b, ls=1.2, var=1.5):
    return var * np.exp(-0.5 * (np.asarray(a)[:, None] - np.asarray(b)[None, :]) ** 2 / ls**2)


def test_sample_from_qu_centres_the_draws_on_a_nonzero_prior_mean():
    # mutant: ``f = mean + u @ W + …`` in ``sample_from_qu`` (the prior mean not subtracted
    # from u before the projection); the library calls it centred (mean=0), so no test used
    # the documented ``mean=``.  Reference (Titsias 2009 eq. 8, Honkela 2024 eq. 17):
    # E[f | u] = μ + K_VZ K⁻¹ (u − μ), so E f = μ + K_VZ K⁻¹ (m − μ).
    Z, V = np.linspace(-2.0, 2.0, 6), np.array([-1.5, 0.1, 2.5])
    Kzz = _eq(Z, Z) + 1e-8 * np.eye(6)
    rng = np.random.default_rng(4)
    A = rng.standard_normal((6, 6))
    S = 0.05 * (A @ A.T) / 6 + 1e-3 * np.eye(6)
    mu = 7.0
    m = mu + rng.standard_normal(6)
    u, f = sample_from_qu(
        Kzz, m, S, _eq(Z, V), _eq(V, V), 20_000, np.random.default_rng(5), mean=mu
    )
    W = np.linalg.solve(Kzz, _eq(Z, V))
    # each f draw given its u draw: the conditional mean is exact, the rest is noise of sd
    # at most sqrt(k(v, v)) = 1.22 around it, so the draw means are within 0.05 of it
    expected = mu + (u - mu) @ W
    assert np.all(np.abs((f - expected).mean(axis=0)) < 0.05)
    assert np.all(np.abs(f.mean(axis=0) - (mu + (m - mu) @ W)) < 0.05)


# ----------------------------------------------------------------------------- dp_ppc
@pytest.fixture(scope="module")
def ppc_setup():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.2)
    X_star = np.linspace(0, 6, 13)
    release = cloaked_release(
        model, X_star, epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), n_draws=3,
        ledger=Ledger(epsilon=5.0, delta=1e-2), rng=np.random.default_rng(1),
    )  # fmt: skip
    X_hold = X_star[[1, 4, 6, 9, 11]]
    y_hold = np.array([0.3, -0.2, 0.9, 0.1, -0.6])
    return model, release, X_hold, y_hold


def test_dp_ppc_log_likelihood_is_the_gaussian_log_density_with_the_combined_sd(ppc_setup):
    # mutants: ``loglik = -0.5 * ((y - f) / sd) ** 2 - 0.5 * log(2π)`` (the ``- log sd`` term
    # dropped) and ``sd = noise_sd + extra`` (not ``hypot``) in ``dp_ppc``: every test read
    # the log-likelihood through differences or with extra_sd = 0.  Reference: scipy's
    # normal log-density at the stored draws of f, sd = √(noise_sd² + extra_sd²).
    model, release, X_hold, y_hold = ppc_setup
    extra = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    idata = dp_ppc(
        release, X_hold, y_hold, noise_sd=0.3, extra_sd=extra, training=model,
        dp_noise="ignore", n_replicates=2, rng=np.random.default_rng(2),
    )  # fmt: skip
    sd = np.sqrt(0.3**2 + extra**2)
    np.testing.assert_allclose(get_group(idata, "constant_data")["predictive_sd"].values, sd)
    f = get_group(idata, "posterior")["f"].values[0]
    loglik = get_group(idata, "log_likelihood")["y"].values[0]
    np.testing.assert_allclose(loglik, norm.logpdf(y_hold, f, sd), rtol=1e-12)
    # and holdout_elpd of these stored draws: Σᵢ log mean_s p(yᵢ | f_s)
    elpd, point = holdout_elpd(idata)
    expected = np.log(np.mean(norm.pdf(y_hold, f, sd), axis=0))
    np.testing.assert_allclose(point, expected, rtol=1e-10)


def test_holdout_elpd_with_a_release_posterior_adds_its_variance(ppc_setup):
    # mutant: the ``+ f_sd²`` term dropped from ``holdout_elpd``'s closed form for a dp_ppc
    # with ``posterior=``.  Reference: log N(yᵢ; mᵢ, noise_sd² + sᵢ²) with m, s the release
    # posterior's own mean and sd.
    model, release, X_hold, y_hold = ppc_setup
    rp = release_posterior(release, model, X_hold)
    idata = dp_ppc(
        release, X_hold, y_hold, noise_sd=0.3, training=model, posterior=rp,
        rng=np.random.default_rng(3),
    )  # fmt: skip
    elpd, point = holdout_elpd(idata)
    expected = norm.logpdf(y_hold, rp.mean, np.sqrt(0.3**2 + rp.sd**2))
    np.testing.assert_allclose(point, expected, rtol=1e-10)
    assert np.max(rp.sd) > 0.1  # the posterior sd is not negligible beside 0.3


def test_dirichlet_ppc_probabilities_log_likelihood_and_draws():
    # mutants in ``_categorical_ppc``: the softmax over the wrong axis (obs_id instead of the
    # classes, in the shift or in the normaliser), the log-likelihood read at other rows'
    # labels, and draws capped at C − 2.  Reference: scipy's softmax over the class axis of
    # the stored f, log p at each hold-out label; the draws' class frequencies near the mean p.
    from scipy.special import softmax

    from tests import releases

    rel = releases.dirichlet()
    X_hold = np.array([-2.5, -1.2, 0.0, 0.4, 2.0, 2.8])
    labels = np.array([0, 0, 1, 1, 2, 2])
    idata = dp_ppc(
        rel, X_hold, labels, training=None, holdout_is_public=True, n_draws=400,
        n_replicates=1, rng=np.random.default_rng(7),
    )  # fmt: skip
    post = get_group(idata, "posterior")
    f = post["f"].transpose("chain", "draw", "output", "obs_id").values[0]  # (S, C, m)
    p = post["p"].transpose("chain", "draw", "output", "obs_id").values[0]
    np.testing.assert_allclose(p, softmax(f, axis=1), rtol=1e-12, atol=1e-300)
    loglik = get_group(idata, "log_likelihood")["y"].values[0]  # (S, m)
    expected = np.log(p[:, labels, np.arange(6)])
    np.testing.assert_allclose(loglik, expected, rtol=1e-12)
    y_rep = get_group(idata, "posterior_predictive")["y"].values[0]  # (S, m)
    freq = np.stack([(y_rep == c).mean(axis=0) for c in range(3)])  # (C, m)
    # 400 categorical draws: the frequency of each class is within 0.1 of its mean p
    # (binomial sd at most 0.025) at every hold-out input
    assert np.all(np.abs(freq - p.mean(axis=0)) < 0.1)


def test_dp_ppc_default_replicates_and_hold_out_coordinate(ppc_setup):
    # mutants: ``n_replicates = max(1, 200 // n_dp)`` (the documented default is "enough for
    # ≥ 200 predictive draws": 3 DP draws × 66 = 198) and ``constant_data.x`` holding
    # positions instead of the 1-D hold-out inputs.
    model, release, X_hold, y_hold = ppc_setup
    idata = dp_ppc(release, X_hold, y_hold, noise_sd=0.3, training=model)
    assert release.n_draws == 3
    assert get_group(idata, "posterior_predictive")["y"].sizes["draw"] == 3 * 67
    np.testing.assert_array_equal(get_group(idata, "constant_data")["x"].values, X_hold)


def test_prior_noise_plan_refuses_the_offset_its_release_refuses():
    # mutant: ``prior_mean=0.0`` in ``plan.prior_noise`` (the model's public mean not passed
    # to ``planned_l2_sensitivity``, whose only use of it is the check of the public offset
    # μ + F (c − μ) W 1): the plan accepted a setting its release refuses (``c − μ``
    # overflows for μ = −1.5e308 and bounds near 1.7e308), where the plan must refuse what its
    # release refuses (``planned_l2_sensitivity``'s docstring).
    from pm_dpgp import plan
    from pm_dpgp.mechanisms import prior_noise_release

    X = np.linspace(0, 5, 8)
    model = gp_regression(X, np.zeros(8), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.2, mean=-1.5e308)
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(1.6999999999e308, 1.7e308))
    with pytest.raises(ValueError, match="offset") as from_release:
        prior_noise_release(
            model, X[:3], ledger=Ledger(epsilon=2.0, delta=1e-3), rng=np.random.default_rng(1), **kw
        )
    with pytest.raises(ValueError, match="offset") as from_plan:
        plan.prior_noise(model, X[:3], secure=False, **kw)
    assert str(from_plan.value) == str(from_release.value)


@pytest.mark.parametrize("kind", ["cloaked", "classification"])
def test_gaussian_plans_follow_the_classic_calibration(kind):
    # mutant: ``"analytic"`` in place of ``calibration`` in ``plan.classification``'s call of
    # ``_gaussian_plan``: the plans were compared with releases at the default calibration
    # only.  Reference: the release itself at calibration="classic" (Dwork & Roth 2014,
    # Thm A.1), whose noise is larger than the analytic one (Balle & Wang 2018).
    from pm_dpgp import plan
    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification

    rng = np.random.default_rng(7)
    X = rng.uniform(0, 2, 30)
    X_star = np.linspace(0, 2, 5)
    kw = dict(epsilon=0.5, delta=1e-3, calibration="classic")
    if kind == "classification":
        t = (rng.uniform(size=30) < 1 / (1 + np.exp(-3 * (X - 1)))).astype(float)
        model = gp_classification(X, t, 2.0 * pm.gp.cov.ExpQuad(1, ls=0.6))
        release, plan_of = classification_release, plan.classification
    else:
        model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.6), noise_sd=0.3)
        release, plan_of = cloaked_release, plan.cloaked
        kw["y_bounds"] = (-1.0, 1.0)
    p = plan_of(model, X_star, secure=False, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = release(
            model, X_star, ledger=Ledger(epsilon=1.0, delta=1e-3),
            rng=np.random.default_rng(8), **kw,
        )  # fmt: skip
    np.testing.assert_array_equal(rel.noise_sd, p.noise_sd)
    analytic = plan_of(model, X_star, secure=False, **{**kw, "calibration": "analytic"})
    assert np.all(p.noise_sd > analytic.noise_sd)


def test_dp_ppc_interpolates_a_first_hold_out_input_off_the_release_grid(ppc_setup):
    # mutant: ``first = np.where(first <= m, first, -1)`` in ``_first_equal_rows`` (the first
    # hold-out row, index m of the stacked rows, taken for a release row): a hold-out set whose
    # first input only lies between the release's inputs then failed with an IndexError.
    # Reference: np.interp of each DP draw (1-D linear interpolation, post-processing).
    model, release, X_hold, y_hold = ppc_setup
    X_new = np.array([0.25, *X_hold[1:]])  # 0.25 is not among X_star = 0, 0.5, …, 6
    idata = dp_ppc(
        release, X_new, y_hold, noise_sd=0.3, training=model, interpolate=True,
        dp_noise="ignore", n_replicates=1,
    )  # fmt: skip
    f = get_group(idata, "posterior")["f"].values[0]
    X_star = np.asarray(release.X_star)[:, 0]
    expected = np.stack([np.interp(X_new, X_star, d) for d in release.draws])
    np.testing.assert_allclose(f, expected, rtol=1e-12, atol=1e-14)


def test_dirichlet_default_prior_mean_is_the_mean_target_under_uniform_classes():
    # mutant: ``(y_in + n_classes * y_out) / n_classes`` in
    # ``DirichletTargets.default_prior_mean``: no test computed the default prior mean.
    # Reference (Milios et al. 2018 §4, Honkela 2024 eq. 21): α = 1{l = c} + α_ε,
    # σ̃² = log(1/α + 1), ỹ = log α − σ̃²/2; the mean of the C targets of one label.
    from pm_dpgp.models.sparse import DirichletTargets, dirichlet_targets

    a, C = 0.01, 4
    targets = [np.log(al) - np.log(1.0 / al + 1.0) / 2.0 for al in (1.0 + a, a)]
    expected = (targets[0] + (C - 1) * targets[1]) / C
    got = DirichletTargets.from_alpha(a).default_prior_mean(C)
    assert abs(got - expected) < 1e-12
    y, _ = dirichlet_targets(np.arange(C), C, a)  # one record of each class
    assert abs(float(y.mean()) - got) < 1e-12


def test_kmeans_inducing_points_are_a_fixed_point_of_lloyds_iteration():
    # mutant: ``np.allclose(new, C, rtol=0.0, atol=1e-1)`` in ``kmeans_inducing_points`` (the
    # documented stop "no centre moves by more than 1e-12 × the scale" loosened): the centres
    # were never checked to be converged.  Reference: at convergence every centre is the mean
    # of the points nearest to it (Lloyd 1982), computed here with NumPy.
    from pm_dpgp.models.sparse import kmeans_inducing_points

    rng = np.random.default_rng(11)
    X = np.concatenate([rng.normal(c, 0.6, size=(60, 2)) for c in ((0, 0), (1.5, 0.2), (0.7, 1.4))])
    C = kmeans_inducing_points(X, 5, rng=np.random.default_rng(2))
    lab = np.argmin(((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2), axis=1)
    for k in range(5):
        assert np.any(lab == k)
        np.testing.assert_allclose(C[k], X[lab == k].mean(axis=0), rtol=0, atol=1e-10)


def test_parse_domain_reads_a_length_two_array_as_one_interval():
    # mutant: ``Box(arr[:1], arr[:1] + 1)`` for a NumPy array of shape (2,) in
    # ``_parse_sequence`` (the tuple (low, high) takes another branch, so no test passed the
    # array form the module docstring lists as ``(low, high)``).
    from pm_dpgp.domain import Box, parse_domain

    assert parse_domain(np.array([-2.0, 6.0])) == Box([-2.0], [6.0])
    assert parse_domain(np.array([-2.0, 6.0]), 3) == Box([-2.0] * 3, [6.0] * 3)


def test_released_mean_draws_have_covariance_G_Gt_over_S_for_a_square_factor():
    # mutant: ``z @ G`` for ``z @ G.T`` in ``released_mean_draws`` when G is square (the
    # covariance GᵀG/S instead of GGᵀ/S): the releases' factors in the tests were symmetric
    # or not square.  Reference: N(d̄, G Gᵀ / S) (the function's docstring), checked on the
    # sample covariance of 200 000 draws (relative sd of an entry ≈ 0.3 %).
    from pm_dpgp.release import released_mean_draws

    G = np.array([[1.0, 0.0, 0.0], [2.0, 0.5, 0.0], [-1.0, 1.5, 0.3]])  # lower triangular
    draws = np.arange(12.0).reshape(4, 3)
    mu = released_mean_draws(draws, G, 200_000, np.random.default_rng(0))
    np.testing.assert_allclose(mu.mean(axis=0), draws.mean(axis=0), atol=0.01)
    np.testing.assert_allclose(np.cov(mu.T), G @ G.T / 4, atol=0.02)


def test_release_noise_covariance_and_band(ppc_setup):
    # mutants: ``noise_cov = Fᵀ F`` (the k × k Gram of the factor, not the m × m covariance of
    # the noise F z) and ``noise_band`` ignoring ``width``.  Reference: Cov(F z) = F Fᵀ, whose
    # diagonal is noise_sd², and the band draws[0] ∓ width · noise_sd (its docstring).
    _, release, _, _ = ppc_setup
    F = np.asarray(release.noise_factor)
    cov = release.noise_cov
    assert cov.shape == (13, 13)
    np.testing.assert_allclose(cov, F @ F.T, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.diag(cov), release.noise_sd**2, rtol=1e-12)
    lo, hi = release.noise_band(2.0)
    np.testing.assert_allclose(lo, release.draws[0] - 2.0 * release.noise_sd, rtol=1e-14)
    np.testing.assert_allclose(hi, release.draws[0] + 2.0 * release.noise_sd, rtol=1e-14)


def test_classification_model_and_views_use_the_same_binary_labels():
    # mutants: ``observed = data.y`` in ``gp_classification`` (the Bernoulli given the raw
    # labels: {−1, 1} labels, which the docstring says work, then have log-probability −inf
    # under PyMC) and ``nan_to_num(arr, nan=1.0)`` in ``binary_labels``.  Reference: clip to
    # [0, 1] and round, NaN → 0 (the docstring of ``binary_labels``).
    from pm_dpgp.models import gp_classification
    from pm_dpgp.models.classification import binary_labels

    got = binary_labels([np.nan, np.inf, -np.inf, -1.0, 0.4, 0.6, 2.0, 1.0])
    np.testing.assert_array_equal(got, [0, 1, 0, 0, 0, 1, 1, 1])
    X = np.linspace(0, 1, 6)
    t = np.array([1, 0, 1, 1, 0, 0])
    gpc = gp_classification(X, np.where(t == 1, 1, -1), pm.gp.cov.ExpQuad(1, ls=0.5))
    observed = gpc.model.rvs_to_values[gpc.model["f_obs"]]
    np.testing.assert_array_equal(np.asarray(observed.data), t)
    assert np.isfinite(gpc.model.compile_logp()(gpc.model.initial_point()))


def test_classification_public_view_evaluates_the_kernel_at_each_named_hyperparameter():
    # mutant: the hyperparameter values passed to the compiled kernel in reverse order in
    # ``GPClassification.public_gp`` (the tests' classification models had at most one free
    # hyperparameter, where the order cannot matter).  Reference: η² exp(−d²/(2ℓ²)) in NumPy.
    from pm_dpgp.models import gp_classification

    def cov():
        eta = pm.HalfNormal("eta", 2.0)
        ell = pm.Gamma("ell", 2.0, 2.0)
        return eta**2 * pm.gp.cov.ExpQuad(1, ls=ell)

    X = np.linspace(0, 2, 5)
    gpc = gp_classification(X, np.array([0, 1, 1, 0, 1]), cov)
    view = gpc.public_gp({"eta": 1.7, "ell": 0.4})
    d2 = (X[:, None] - X[None, :]) ** 2
    expected = 1.7**2 * np.exp(-0.5 * d2 / 0.4**2)
    np.testing.assert_allclose(view.kernel(X), expected, rtol=1e-12)
    np.testing.assert_allclose(view.kernel_diag(X), np.full(5, 1.7**2), rtol=1e-12)


def test_fixed_float_hyperparameters_are_evaluated_in_float64():
    # mutant: ``pt.tensor(dtype=c.type.dtype, …)`` in ``hoist_float_constants`` (the hoisted
    # inputs keep PyTensor's float32 type of a Python float such as ls=15.0, exactly a
    # float32, so 1/ls is computed in float32: relative errors ≈ 1e-7 in every kernel value).
    # Reference: the squared-exponential kernel in float64 NumPy.
    X = np.linspace(0.0, 40.0, 9)
    public = gp_regression(X, np.zeros(9), pm.gp.cov.ExpQuad(1, ls=15.0), noise_sd=0.5).public_gp()
    expected = np.exp(-0.5 * (X[:, None] - X[None, :]) ** 2 / 15.0**2)
    np.testing.assert_allclose(public.kernel(X), expected, rtol=1e-13)


def test_sample_path_plan_max_n_draws_is_the_most_that_fit():
    # mutant: ``max_draws = hi_L`` (one past the bisection's last fitting count) in
    # ``plan.sample_path``.  Reference: the plan's own ``fits`` for n_draws = max_n_draws
    # (True) and max_n_draws + 1 (False), each computed from its event afresh.
    from pm_dpgp import plan

    kw = dict(
        kernel_scale=1.0, y_bounds=(-1.0, 1.0), delta=1e-5, kappa=0.0, noise_sd=5.0, epsilon=3.0
    )
    p = plan.sample_path(50, **kw)
    k = p.max_n_draws
    assert k is not None and k >= 1
    assert plan.sample_path(50, n_draws=k, **kw).fits
    assert not plan.sample_path(50, n_draws=k + 1, **kw).fits


def test_sparse_builder_passes_its_jitter_to_pymc():
    # mutant: ``gp.marginal_likelihood(…)`` without ``jitter=jitter`` in
    # ``sparse_gp_regression`` (PyMC's default 1e-6 then, while ``public_sparse_gp().kzz()``
    # adds the given jitter): the PyMC model and the release used different K_ZZ, silently.
    # Reference: PyMC's own MarginalApprox built with the same jitter.
    from pm_dpgp.models import sparse_gp_regression

    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(0, 4, 15))
    y = np.sin(X) + 0.2 * rng.standard_normal(15)
    Z = np.linspace(0, 4, 4)[:, None]
    cov = pm.gp.cov.ExpQuad(1, ls=0.8)
    reg = sparse_gp_regression(X, y, cov, Z=Z, noise_sd=0.3, jitter=0.05)
    with pm.Model() as ref:
        gp = pm.gp.MarginalApprox(approx="VFE", mean_func=pm.gp.mean.Constant(0.0), cov_func=cov)
        gp.marginal_likelihood("f_obs", X=X[:, None], Xu=Z, y=y, sigma=0.3, jitter=0.05)
    ours = float(reg.model.compile_logp()({}))
    theirs = float(ref.compile_logp()({}))
    assert abs(ours - theirs) < 1e-8 * max(1.0, abs(theirs))


def test_dirichlet_model_leaves_out_records_with_invalid_labels():
    # mutant: ``X_arr, lab = X_arr, lab`` (the valid-label mask not applied) in
    # ``dirichlet_gp_classification``: records whose label is not in 0 … C−1 entered the PyMC
    # model as class 0, while the docstring and the release leave them out.  Reference: the
    # model built on the valid records only has the same log-probability.
    from pm_dpgp.models import dirichlet_gp_classification

    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, 12)
    labels = rng.integers(0, 3, 12).astype(float)
    bad = labels.copy()
    bad[[2, 7]] = [np.nan, 5.0]
    keep = np.ones(12, dtype=bool)
    keep[[2, 7]] = False
    kw = dict(Z=np.linspace(-2, 2, 4), n_classes=3, prior_mean=-1.0)
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with_bad = dirichlet_gp_classification(X, bad, cov, **kw)
    valid_only = dirichlet_gp_classification(X[keep], labels[keep], cov, **kw)
    a = float(with_bad.model.compile_logp()({}))
    b = float(valid_only.model.compile_logp()({}))
    assert abs(a - b) < 1e-8 * max(1.0, abs(b))
