"""Stop-34 mutation testing, round 4: kill tests for the files earlier rounds did not touch.

An independent helper applied 87 privacy-weakening or answer-changing edits to
``selection/{exponential,coinpress,grids,private_data,sample_paths,front}.py``,
``mechanisms/label/cloaking_batch.py``, ``models/*``, ``gp/*``, ``plan.py`` and
``workflow/summary.py``; 22 passed the whole default suite, 16 of them real weaknesses or
silently wrong answers (six were equivalent or harmless).  Each test below fails under the
mutant named in its docstring and passes on the correct code; each asserts a property checked
against an independent computation, not a pinned number.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pm_dpgp.selection.sample_paths as sp_module
from pm_dpgp import plan
from pm_dpgp.accounting import DEFAULT_ORDERS, Ledger
from pm_dpgp.gp.exact import ExactPosterior
from pm_dpgp.mechanisms import noise_aware_release
from pm_dpgp.mechanisms.gaussian import zcdp_rho
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import coinpress as cp
from pm_dpgp.selection import (
    kfold_splits,
    prior_quantile_grid,
    product_grid,
    select_by_sample_paths,
)
from pm_dpgp.selection.exponential import exponential_mechanism_event
from pm_dpgp.selection.private_data import public_split

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# ------------------------------------ exponential mechanism, COINPRESS (EX6, CP4, CP6, CP7)
def _em_probs(u, sens, eps):
    z = eps * np.asarray(u, float) / (2.0 * sens)
    z -= z.max()
    w = np.exp(z)
    return w / w.sum()


def _renyi(p, q, alpha):
    from scipy.special import logsumexp

    return float(logsumexp(alpha * np.log(p) + (1.0 - alpha) * np.log(q))) / (alpha - 1.0)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_em_renyi_curve_bounds_exact_divergence(eps):
    """EX6: the 'renyi' event curve must bound D_alpha between the EM output laws of an
    adversarial neighbouring pair (utilities change by at most Delta_u = 1), at every order."""
    k = 8
    u = np.zeros(k)
    u2 = np.zeros(k)
    u2[0], u2[1:] = 1.0, -1.0  # every |u_r - u'_r| <= 1
    P, Q = _em_probs(u, 1.0, eps), _em_probs(u2, 1.0, eps)
    ev = exponential_mechanism_event(eps, "renyi")
    orders = np.asarray([a for a in DEFAULT_ORDERS if a > 1.0])
    curve = ev.rdp(orders)
    for a, c in zip(orders, curve, strict=True):
        exact = max(_renyi(P, Q, a), _renyi(Q, P, a))
        assert c >= exact * (1 - 1e-12), (a, c, exact)


def test_coinpress_event_is_sum_of_step_rhos():
    """CP7: adaptive composition of T Gaussian steps costs sum(rho_t) (Bun & Steinke, Lemma 1.7)."""
    rng = np.random.default_rng(0)
    res = cp.coinpress_mean(rng.normal(size=200), lower=-5, upper=5, rho=0.3, rng=rng)
    assert res.event.rho * res.event.count >= math.fsum(res.rhos) * (1 - 1e-15)
    assert math.isclose(math.fsum(res.rhos), 0.3, rel_tol=1e-12)


def test_coinpress_nan_record_equals_lower_bound_record():
    """CP6: a NaN record is (documented as) the lower bound: same seed, same output, finite."""
    v = np.random.default_rng(1).normal(size=100)
    v_nan, v_lo = v.copy(), v.copy()
    v_nan[3], v_lo[3] = np.nan, -4.0
    a = cp.coinpress_mean(v_nan, lower=-4, upper=4, rho=0.5, rng=np.random.default_rng(2))
    b = cp.coinpress_mean(v_lo, lower=-4, upper=4, rho=0.5, rng=np.random.default_rng(2))
    assert math.isfinite(a.mean)
    assert a.mean == b.mean


def test_coinpress_secure_noise_is_calibrated_to_the_sensitivity(monkeypatch):
    """CP4: in secure mode every step's discrete Gaussian must be planned for at least the
    replace-one sensitivity Delta_t of its clipped mean, at its rho_t."""
    calls = []
    real = cp.plan_discrete_gaussian

    def spy(sensitivity, dim, rho):
        calls.append((float(sensitivity), float(rho)))
        return real(sensitivity, dim, rho)

    monkeypatch.setattr(cp, "plan_discrete_gaussian", spy)
    v = np.random.default_rng(3).normal(size=50)
    res = cp.coinpress_mean(v, lower=-3.0, upper=3.0, rho=1.0, n_steps=3, rng=None)
    assert len(calls) == 3
    for (lo, hi), rho_t, (s, r) in zip(res.intervals, res.rhos, calls, strict=True):
        # independent replace-one sensitivity of the mean of n values clipped to [lo, hi]
        assert s >= (hi - lo) / v.size
        assert r <= rho_t


@pytest.mark.parametrize("rho", [np.float32(0.5), np.int64(1), np.float64(0.5), 0.5])
def test_coinpress_accepts_any_numeric_scalar_rho(rho):
    """Clean-code bug found by the round-4 helper: a NumPy scalar other than float64 was taken
    for a per-step sequence (``TypeError: 'numpy.float32' object is not iterable``).  Any
    number now gives the schedule of ``float(rho)``."""
    values = np.random.default_rng(0).normal(size=50)
    res = cp.coinpress_mean(values, lower=-3, upper=3, rho=rho, rng=np.random.default_rng(0))
    assert res.rhos == cp.coinpress_rho_schedule(float(rho))
    assert math.fsum(res.rhos) <= float(rho)


# ------------------------------------------------------------------ public splits (PD1, PD2)
@pytest.mark.parametrize("validation", [None, [0, 3, 7], np.array([5, 9])])
def test_public_split_is_a_disjoint_partition(validation):
    """A record is in D1 (the path) or D2 (the COINPRESS score), never both: the accounting
    max(eps_path, eps_CP) instead of their sum relies on it (docs/selection.md §6)."""
    n = 23
    train, val = public_split(n, validation)
    assert np.intersect1d(train, val).size == 0
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(n))


@pytest.mark.parametrize("validation", [[-1], [0, -2], [-23]])
def test_public_split_refuses_negative_indices(validation):
    """A negative index would wrap to a training row (same record in D1 and D2)."""
    with pytest.raises(ValueError):
        public_split(23, validation)


# ------------------------------------------------------------------ folds (GR5, GR7)
def test_kfold_needs_two_folds():
    with pytest.raises(ValueError):
        kfold_splits(10, 1)


def test_permuted_folds_depend_on_the_seed_and_are_not_contiguous():
    n, k = 40, 4
    contiguous = kfold_splits(n, k, order="contiguous")
    a = kfold_splits(n, k, order="permuted", seed=1)
    b = kfold_splits(n, k, order="permuted", seed=2)
    same = lambda f, g: all(np.array_equal(x, y) for x, y in zip(f, g, strict=True))  # noqa: E731
    assert not same(a, contiguous)
    assert not same(a, b)
    for f in (a, b):
        assert np.array_equal(np.sort(np.concatenate(f)), np.arange(n))


# ------------------------------------------------------------------ prior quantiles (GR3, GR4)
def _gp(ls_prior):
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 10))
    y = np.clip(np.sin(X), -1.9, 1.9)
    return gp_regression(X, y, lambda: pm.gp.cov.ExpQuad(1, ls=ls_prior()), noise_sd=0.3)


def test_prior_quantile_grid_gives_each_asked_quantile_in_order_icdf():
    gpr = _gp(lambda: pm.Gamma("ell", 2, 1))
    q = (0.2, 0.6, 0.95)
    grid = prior_quantile_grid(gpr, q)
    np.testing.assert_allclose([c["ell"] for c in grid], stats.gamma(2).ppf(q), rtol=1e-6)


def test_prior_quantile_grid_gives_each_asked_quantile_in_order_draws():
    # no icdf in PyMC for a truncated normal: the prior-draws fallback
    gpr = _gp(lambda: pm.Truncated("ell", pm.Normal.dist(1.0, 1.0), lower=0.0))
    q = (0.2, 0.6)
    grid = prior_quantile_grid(gpr, q, n_draws=40_000, seed=3)
    exact = stats.truncnorm(-1.0, np.inf, loc=1.0, scale=1.0).ppf(q)
    # Monte-Carlo quantiles of 40,000 draws: sd < 0.01 here; 0.05 is > 5 sd
    np.testing.assert_allclose([c["ell"] for c in grid], exact, atol=0.05)


# ------------------------------------------------------------------ COINPRESS budget (SP5)
N, KERNEL_SD, DOMAIN, Y_BOUNDS = 120, 5.0, (0.0, 10.0), (-2.0, 2.0)
GRID = product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]})
X_STAR = np.linspace(0.0, 10.0, 11)[:, None]


def test_sample_path_selection_scores_within_the_charged_coinpress_rho(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.uniform(*DOMAIN, (N, 1))
    y = np.clip(np.sin(X[:, 0]) + 0.5 * rng.standard_normal(N), *Y_BOUNDS)
    model = gp_regression(
        X, y, lambda: KERNEL_SD**2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )  # fmt: skip
    used = []
    real = sp_module.coinpress_mean

    def spy(values, **kw):
        res = real(values, **kw)
        used.append(sum(res.rhos))
        return res

    monkeypatch.setattr(sp_module, "coinpress_mean", spy)
    eps, delta = 1.0, 1e-4
    res = select_by_sample_paths(
        model, GRID, X_star=X_STAR, domain=DOMAIN, y_bounds=Y_BOUNDS, epsilon=eps, delta=delta,
        ledger=None, gamma=0.3, rng=np.random.default_rng(1),
    )  # fmt: skip
    assert used
    rho_charged = zcdp_rho(eps, delta)  # independent: the documented rho_CP
    base = res.event.base
    G = np.asarray(base.orders)
    for r in used:
        assert r <= rho_charged * (1 + 1e-12)
        assert np.all(np.asarray(base.values) >= G * r * (1 - 1e-12))


# ------------------------------------------------------------------ front end (FR1)
def test_smith_refuses_data_it_would_ignore():
    """method='smith' selects from the model's own labels; data passed there would be silently
    ignored (a selection on other labels than the caller's), so it is refused before any spend."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.selection import select_hyperparameters

    gpr = _gp(lambda: pm.Gamma("ell", 2, 1))
    ledger = Ledger(epsilon=5.0, delta=1e-5)
    X = np.linspace(0, 6, 10)[:, None]
    with pytest.raises(ValueError):
        select_hyperparameters(
            gpr, [{"ell": 1.0}, {"ell": 2.0}], data=(X, np.zeros(10)), ledger=ledger,
            method="smith", epsilon=1.0, y_bounds=(-2.0, 2.0),
        )  # fmt: skip
    assert not ledger.history


# ---------------------------------------------- plans (PL3, PL7, PL9)
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("ratio", [3.0, "auto"])
def test_noise_aware_plan_matches_the_release_for_any_ratio(ratio):
    """sigma_a / sigma_b = c (docs/noise_aware.md): the plan must give the release's noise."""
    Z = grid_inducing_points([0.0], [2.0], [6])
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 2, 200)
    model = sparse_gp_regression(
        X, np.sin(3 * X), 4.0 * pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.5
    )
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0), ratio=ratio)
    p = plan.noise_aware(model, secure=False, n_records=len(X), **kw)
    assert p.sigma_a / p.sigma_b == pytest.approx(p.ratio_c, rel=1e-12)
    rel = noise_aware_release(
        model, ledger=Ledger(epsilon=1.0, delta=1e-5), rng=np.random.default_rng(4), **kw
    )
    assert rel.metadata["sigma_b"] == pytest.approx(p.sigma_b, rel=1e-12)
    assert rel.metadata["lambda"] == pytest.approx(p.lam, rel=1e-12)


def test_sample_path_plan_max_n_draws_fits_and_one_more_does_not():
    """PL7: max_n_draws is the largest k whose k-path event costs <= the target (independent:
    the bound's own event at k and k + 1)."""
    common = dict(kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, kappa=0.0)
    sd = 2.0 * plan.sample_path(30, epsilon=2.0, **common).noise_sd
    p = plan.sample_path(30, epsilon=2.0, noise_sd=sd, **common)
    k = p.max_n_draws
    assert k >= 1
    at_k = plan.sample_path(30, noise_sd=sd, n_draws=k, epsilon=2.0, **common)
    assert at_k.fits and p.bound.event(k).epsilon(1e-5) <= 2.0 * (1 + 1e-9)
    above = plan.sample_path(30, noise_sd=sd, n_draws=k + 1, epsilon=2.0, **common)
    assert not above.fits and max(above.epsilon, above.filter_epsilon) > 2.0


def test_thompson_plan_default_bounds_are_the_loops_prior_mean_plus_minus_one():
    """PL9: 'The loop's defaults apply: y_bounds = prior_mean ± 1' (plan.thompson docstring;
    workflow/thompson.py): the plan without y_bounds is the plan with those bounds."""
    kw = dict(epsilon=3.0, delta=1e-5, cov_func=pm.gp.cov.ExpQuad(1, ls=0.2), noise_sd=0.3)
    for m in (0.0, 0.7):
        a = plan.thompson(3, 4, domain=(0.0, 1.0), prior_mean=m, **kw)
        b = plan.thompson(3, 4, domain=(0.0, 1.0), prior_mean=m, y_bounds=(m - 1, m + 1), **kw)
        assert a.M_Y == b.M_Y == 1.0
        assert a.rounds_that_fit == b.rounds_that_fit and a.epsilon == b.epsilon


# ---------------------------------------------- linear algebra and declarations (GL3, MH2)
def test_clearly_asymmetric_kernel_matrix_is_refused():
    """GL3: only the lower triangle is factorised; a matrix whose triangles differ by 1e-4 of its
    scale would be silently read as its lower triangle.  Check: the posterior mean computed from
    it differs from both symmetric readings by far more than round-off, so it must be refused."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 5, 8)
    K = np.exp(-0.5 * (X[:, None] - X[None, :]) ** 2)
    K_bad = K.copy()
    K_bad[0, 3] += 1e-4  # upper triangle only
    with pytest.raises(ValueError):
        ExactPosterior(K_bad, 0.1)
    # symmetric up to rounding still passes
    ExactPosterior(K + 1e-15 * rng.standard_normal(K.shape), 0.1)


@pytest.mark.parametrize("declared", [None, 1, "yes"])
def test_public_hyperparameters_need_an_explicit_true(declared):
    """MH2: the declaration must be exactly True (docstring: 'Must be True')."""
    from pm_dpgp.models import PrivateHyperparameterError
    from pm_dpgp.models.hyperparameters import public_hyperparameters

    with pytest.raises(PrivateHyperparameterError):
        public_hyperparameters({"ell": 1.0}, hyperparameters_are_public=declared)


# ---------------------------------------------- model builders (ME4, MC1, MC2)
def _beta_weighted():
    X = np.linspace(0, 5, 8)
    y = np.sin(X)
    return gp_regression(
        X, y,
        lambda: pm.Beta("w", 2.0, 2.0) * pm.gp.cov.ExpQuad(1, ls=1.0)
        + 0.5 * pm.gp.cov.Matern32(1, ls=1.0),
        noise_sd=0.3,
    )  # fmt: skip


@pytest.mark.parametrize("w", [1.5, -0.2])
def test_hyperparameter_outside_a_beta_support_is_refused(w):
    """ME4: a Beta prior's support is [0, 1] (log-odds transform); 1.5 is not a value of it."""
    gpr = _beta_weighted()
    with pytest.raises(ValueError):
        gpr.public_gp({"w": w})


def test_hyperparameter_inside_a_beta_support_is_accepted():
    assert _beta_weighted().public_gp({"w": 0.7}).hyperparameters["w"] == 0.7


def test_binary_labels_are_zero_or_one_for_any_real_label():
    """MC1: every view (PyMC model, owner's laplace/predict, release) sees labels in {0, 1}:
    the clip to [0, 1] then rounding.  -1/+1 coded labels must map to 0/1, never -1."""
    from pm_dpgp.models.classification import binary_labels

    t = np.array([-1.0, 1.0, 0.3, 0.7, 2.0, -5.0, np.nan, 0.0])
    out = binary_labels(t)
    assert set(np.unique(out)) <= {0.0, 1.0}
    np.testing.assert_array_equal(out, [0, 1, 0, 1, 1, 0, 0, 0])


def test_owner_laplace_of_minus_one_plus_one_labels_equals_zero_one_labels():
    from pm_dpgp.models import gp_classification

    X = np.linspace(0, 5, 12)
    t01 = (np.sin(X) > 0).astype(float)
    tpm = 2.0 * t01 - 1.0
    gpc = gp_classification(X, t01, lambda: pm.gp.cov.ExpQuad(1, ls=1.0))
    pub = gpc.public_gp()
    a, b = pub.laplace(t01), pub.laplace(tpm)
    np.testing.assert_allclose(a.f, b.f, rtol=0, atol=0)


def test_pm_data_labels_reach_the_bernoulli_as_zero_one():
    """MC2: with pm.Data labels the PyMC Bernoulli sees rint(clip(t, 0, 1)) like every other view:
    the model's log density with -1/+1 labels equals the one with 0/1 labels (finite)."""
    from pm_dpgp.models import gp_classification

    X = np.linspace(0, 5, 10)
    t01 = (np.sin(X) > 0).astype(float)
    lps = []
    for t in (t01, 2.0 * t01 - 1.0):
        with pm.Model() as m:
            Xd = pm.Data("X", X[:, None])
            td = pm.Data("t", t)
            gpc = gp_classification(Xd, td, lambda: pm.gp.cov.ExpQuad(1, ls=1.0), model=m)
        lp = gpc.model.compile_logp()(gpc.model.initial_point())
        lps.append(float(lp))
    assert np.isfinite(lps[0])
    assert lps[0] == lps[1]
