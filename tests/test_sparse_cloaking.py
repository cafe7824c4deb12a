"""Sparse (FITC) and non-stationary (Gibbs) cloaking (Smith et al. 2021, §3.1–3.2).

Privacy: the Mahalanobis sensitivity property test of ``test_cloaked_release`` (hypothesis:
random public inputs, inducing inputs, kernels, test sets; every single-label change of size
``d``, and the adversarial neighbour released with the same seed) for each new cloaking
matrix, against an INDEPENDENT dense ``C`` (the paper's eq. 9 with ``np.linalg.solve``; the
Gibbs kernel of eq. 8 written in NumPy here), plus the Monte-Carlo hockey-stick check.
Fidelity: FITC with ``Z = X`` is exact cloaking; FITC predictions equal PyMC's
``MarginalApprox(approx="FITC")`` predictions.  Tolerances: ``tests/tolerances.py``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp.accounting import Ledger
from pm_dpgp.audit import scan_for_values
from pm_dpgp.datasets import load_kung_women
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import (
    GibbsKernel,
    KDELengthscale,
    fitc_gp_regression,
    gp_regression,
    kmeans_public_inducing,
    nonstationary_gp_regression,
)
from tests.tolerances import assert_normwise_close, cond_rtol, normwise_error

from .test_cloaked_release import (
    _assert_in_noise_range,
    _assert_within_sensitivity,
    _draw_rounding,
    _privacy_losses,
)

KW = dict(epsilon=1.0, delta=1e-3, bounds_are_public=True)


def _kernels(dim: int, ls: float):
    return {
        "expquad": pm.gp.cov.ExpQuad(dim, ls=ls),
        "matern52": 2.0 * pm.gp.cov.Matern52(dim, ls=ls),
        "sum": pm.gp.cov.ExpQuad(dim, ls=ls) + 0.5 * pm.gp.cov.Matern12(dim, ls=2 * ls),
    }


def _fitc_reference(view, X_star):
    """Eq. 9 literally: C = k*M Q⁻¹ K_MN (Λ + σ²I)⁻¹, Q = K_MM + K_MN (Λ + σ²I)⁻¹ K_NM.

    Returns C and a bound on ‖C − C_library‖_F: both are backward-stable evaluations, the
    reference through Q and K_MM, the library through their Cholesky factors (Higham 2002,
    Thm 7.2), so they differ by at most (cond_rtol(Q) + cond_rtol(K_MM)) ‖C‖.
    """
    Z, X = view.Z, view.X
    K_MM = view.kernel(Z) + view.posterior().jitter * np.eye(len(Z))
    K_MN = view.kernel(Z, X)
    lam = np.clip(view.kernel_diag(X) - np.sum(K_MN * np.linalg.solve(K_MM, K_MN), 0), 0, None)
    D = lam + view.noise_var
    Q = K_MM + (K_MN / D) @ K_MN.T
    C = view.kernel(X_star, Z) @ np.linalg.solve(Q, K_MN / D)
    return C, (cond_rtol(Q) + cond_rtol(K_MM)) * float(np.linalg.norm(C))


def _kde_lengthscale_numpy(lf, X):
    """§3.1's r(x) = s [1/r_max + ρ_min(x)/n_target]⁻¹ written in NumPy (independent of
    :class:`KDELengthscale`'s PyTensor graph), from the object's public parameters."""
    U = X / lf.scales
    d = U.shape[1]
    h2 = lf.bandwidth**2
    shifts = [np.zeros(d)] + [
        sign * lf.neighbourhood * np.eye(d)[j]
        for sign in (-1.0, 1.0)
        for j in range(d)
        if lf.neighbourhood > 0
    ]
    norm = (2 * np.pi * h2) ** (d / 2)
    dens = [
        np.exp(-0.5 * np.sum(((U + t)[:, None, :] - lf.centres[None]) ** 2, axis=2) / h2).sum(1)
        / norm
        for t in shifts
    ]
    rho = np.min(dens, axis=0)
    return (1.0 / (1.0 / lf.max_lengthscale + rho / lf.n_target))[:, None] * lf.scales


def _gibbs_numpy(lf, A, B):
    """Eq. 8 in NumPy (unit variance), from the lengthscale values."""
    ra, rb = _kde_lengthscale_numpy(lf, A)[:, None, :], _kde_lengthscale_numpy(lf, B)[None, :, :]
    s2 = ra**2 + rb**2
    pref = np.prod(np.sqrt(2 * ra * rb / s2), axis=2)
    return pref * np.exp(-np.sum((A[:, None, :] - B[None, :, :]) ** 2 / s2, axis=2))


def _check_sensitivity(build, reference, X_star, y, d, worst_to_other_end=True):
    """The property check shared by both families; ``build(y)`` gives a model."""
    model = build(y)
    view = model.public_cloaking()
    release = cloaked_release(model, X_star, y_bounds=(0.0, d), rng=np.random.default_rng(1), **KW)
    C, C_err = reference(view)
    norms = _assert_within_sensitivity(release, C * d, d * C_err)
    j = int(np.argmax(norms))
    y2 = y.copy()
    y2[j] = 0.0 if y[j] > d / 2 else d
    release2 = cloaked_release(
        build(y2), X_star, y_bounds=(0.0, d), rng=np.random.default_rng(1), **KW
    )
    diff = release2.draws[0] - release.draws[0]  # same seed: the noise cancels
    rounding = _draw_rounding(release, view, C, [y, y2], [release.draws, release2.draws])
    _assert_in_noise_range(release, diff[:, None], rounding)
    _assert_within_sensitivity(release, diff[:, None], rounding)
    return release


def _fitc_property(seed, n, n_inducing, m, dim, kernel, ls, noise, d):
    """Every single-label change of size d moves the FITC release by ≤ the calibrated
    sensitivity in the noise's Mahalanobis norm, and the worst neighbour attains no more."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, dim))
    Z = rng.uniform(0, 10, (n_inducing, dim))
    X_star = rng.uniform(-1, 11, (m, dim))
    y = rng.uniform(0.0, d, n)
    cov = _kernels(dim, ls)[kernel]

    def build(yy):
        return fitc_gp_regression(X, yy, cov, noise_sd=noise, Z=Z, mean=d / 2)

    view = build(y).public_cloaking()
    if np.max(np.abs(view.kernel(X_star, Z))) < 1e-250:
        return  # k(x*, Z) underflows: the release does not depend on y (tested for exact GP)
    release = _check_sensitivity(build, lambda v: _fitc_reference(v, X_star), X_star, y, d)
    assert release.metadata["noise_rank"] <= n_inducing  # rank C ≤ M


def _gibbs_property(seed, n, m, dim, bandwidth, max_ls, noise, d):
    """The same property for the non-stationary (Gibbs, eq. 8) cloaking matrix."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, dim))
    X_star = rng.uniform(-1, 11, (m, dim))
    y = rng.uniform(0.0, d, n)
    lf = KDELengthscale(
        X, n_target=3.0, max_lengthscale=max_ls, bandwidth=bandwidth, neighbourhood=1.0
    )

    def build(yy):
        return nonstationary_gp_regression(X, yy, lf, kernel_scale=1.5, noise_sd=noise, mean=d / 2)

    def reference(view):
        K = 2.25 * _gibbs_numpy(lf, X, X) + noise**2 * np.eye(n)
        C = np.linalg.solve(K, 2.25 * _gibbs_numpy(lf, X, X_star)).T
        return C, cond_rtol(K) * float(np.linalg.norm(C))

    _check_sensitivity(build, reference, X_star, y, d)


_SETTINGS = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
_COMMON = dict(
    seed=st.integers(0, 10_000),
    m=st.integers(1, 30),
    noise=st.floats(0.05, 2.0),
    d=st.floats(0.1, 50.0),
)
# Each kernel structure (kernel × input dimension; for Gibbs also the number of public KDE
# centres, which are constants of the compiled graph) costs one PyTensor compilation of a few
# seconds: the default run keeps two structures, the slow run explores all.
_FITC = dict(n=st.integers(3, 25), n_inducing=st.integers(1, 6), ls=st.floats(0.5, 5.0))
_GIBBS = dict(bandwidth=st.floats(0.2, 2.0), max_ls=st.floats(1.0, 6.0))


@settings(max_examples=8, **_SETTINGS)
@given(**_COMMON, **_FITC, dim=st.sampled_from([1, 2]), kernel=st.just("expquad"))
def test_fitc_mahalanobis_sensitivity_property(**kw):
    _fitc_property(**kw)


@pytest.mark.slow
@settings(max_examples=60, **_SETTINGS)
@given(
    **_COMMON, **_FITC, dim=st.sampled_from([1, 2]), kernel=st.sampled_from(list(_kernels(1, 1)))
)
def test_fitc_mahalanobis_sensitivity_property_all_kernels(**kw):
    _fitc_property(**kw)


@settings(max_examples=5, **_SETTINGS)
@given(**_COMMON, **_GIBBS, n=st.just(6), dim=st.just(1))
def test_gibbs_mahalanobis_sensitivity_property(**kw):
    _gibbs_property(**kw)


@pytest.mark.slow
@settings(max_examples=30, **_SETTINGS)
@given(**_COMMON, **_GIBBS, n=st.sampled_from([5, 12]), dim=st.sampled_from([1, 2]))
def test_gibbs_mahalanobis_sensitivity_property_2d(**kw):
    _gibbs_property(**kw)


def test_gibbs_kernel_matches_pymc_and_expquad():
    """1-d: PyMC's own Gibbs; constant lengthscale: ExpQuad(ls); always PSD with unit diagonal."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (30, 1))
    lf = KDELengthscale(X, n_target=4.0, max_lengthscale=3.0, bandwidth=0.7, neighbourhood=0.5)
    ours = GibbsKernel(1, lf)(X).eval()
    theirs = pm.gp.cov.Gibbs(1, lambda x: lf(x)[:, 0])(X).eval()
    # PyMC squares distances via ‖x‖² + ‖x'‖² − 2xx' (cancellation: absolute error ~ |x|² EPS)
    assert np.max(np.abs(ours - theirs)) <= 1e3 * 100 * np.finfo(float).eps
    ls = np.float64(1.7)  # float64: PyMC 6 would take 1/ls in float32 (see below)
    const = GibbsKernel(2, lambda x: ls * pm.math.ones_like(x))
    X2 = rng.uniform(0, 5, (20, 2))
    assert_normwise_close(const(X2).eval(), pm.gp.cov.ExpQuad(2, ls=ls)(X2).eval(), 1e-13)
    X2d = rng.uniform(0, 10, (25, 2))
    lf2 = KDELengthscale(X2d, n_target=3.0, max_lengthscale=4.0, bandwidth=1.0)
    K = GibbsKernel(2, lf2)(X2d).eval()
    assert np.allclose(np.diag(K), 1.0) and np.linalg.eigvalsh(K).min() > -1e-12
    assert_normwise_close(K, _gibbs_numpy(lf2, X2d, X2d), 1e-13)


def test_fitc_with_inducing_equal_to_training_inputs_is_exact_cloaking():
    X = np.linspace(0.0, 10.0, 9)[:, None]
    y = np.sin(X[:, 0])
    X_star = np.linspace(-1.0, 11.0, 15)[:, None]
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    fitc = fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=X, jitter=0.0).public_cloaking()
    exact = gp_regression(X, y, cov, noise_sd=0.3).public_gp()
    assert fitc.posterior().jitter == 0.0
    K = exact.kernel(X)
    tol = cond_rtol(K) + cond_rtol(K + 0.09 * np.eye(9))
    C_exact = exact.cloaking_operator(X_star).dense()
    assert_normwise_close(fitc.cloaking_operator(X_star).dense(), C_exact, tol, "C")
    assert_normwise_close(fitc.predict(y, X_star)[0], exact.predict(y, X_star)[0], tol, "mean")
    # not vacuous: dropping one inducing input changes C by far more than the tolerance
    fewer = fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=X[:-1], jitter=0.0).public_cloaking()
    assert normwise_error(fewer.cloaking_operator(X_star).dense(), C_exact) > 1e3 * tol
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), rng=np.random.default_rng(4))
    a = cloaked_release(fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=X, jitter=0.0), X_star, **kw)
    kw["rng"] = np.random.default_rng(4)
    b = cloaked_release(gp_regression(X, y, cov, noise_sd=0.3), X_star, **kw)
    assert a.metadata["noise_rank"] == b.metadata["noise_rank"]
    # same mechanism up to the rounding of C (the solver's design is a continuous function of C
    # near a unique optimum; 1e-6 relative is far above tol·κ of the k × k problem here)
    assert_normwise_close(a.noise_cov, b.noise_cov, 1e-6, "noise covariance")


def test_fitc_predictions_match_pymc():
    age, height = load_kung_women()
    X = age[:, None]
    Z = kmeans_public_inducing(X, 5, seed=3)
    # float64 hyperparameters: with Python floats PyMC 6 computes 1/ls in float32 in its own
    # graph (kernel off by ~2e-8), which the tight comparison below would (rightly) catch
    f64 = np.float64
    model = fitc_gp_regression(
        X, height, f64(10.0) * pm.gp.cov.ExpQuad(1, ls=f64(15.0)), noise_sd=5.0, Z=Z, mean=108.0
    )
    X_star = np.linspace(0.0, 100.0, 40)[:, None]
    mu, var = model.public_cloaking().predict(height, X_star)
    with model.model:
        mu_pm, var_pm = model.gp.predict(X_star, point={}, diag=True)
    post = model.public_cloaking().posterior()
    tol = cond_rtol(post.L_M @ post.L_M.T) + cond_rtol(post.L_B @ post.L_B.T)
    assert_normwise_close(mu, mu_pm, tol, "mean")
    assert_normwise_close(var, var_pm, tol * np.max(np.abs(10.0)) / np.min(var_pm), "variance")
    # the non-private mean is the cloaking matrix applied to the centred labels
    C = model.public_cloaking().cloaking_operator(X_star).dense()
    assert_normwise_close(108.0 + C @ (height - 108.0), mu_pm, tol, "C y")


@pytest.mark.parametrize("family", ["fitc", "gibbs"])
def test_release_metadata_ledger_and_leak_scan(family):
    age, height = load_kung_women()
    X = age[:, None]
    if family == "fitc":
        model = fitc_gp_regression(
            X,
            height,
            10.0 * pm.gp.cov.ExpQuad(1, ls=15.0),
            noise_sd=5.0,
            n_inducing=5,
            seed=7,
            mean=108.0,
        )
    else:
        lf = KDELengthscale(X / 15.0, n_target=60.0, max_lengthscale=2.5, bandwidth=1 / 3)
        model = nonstationary_gp_regression(
            X,
            height,
            lambda x: 15.0 * lf(x / 15.0),
            kernel_scale=10**0.5,
            noise_sd=5.0,
            mean=108.0,
        )
    ledger = Ledger(epsilon=2.0, delta=0.02)
    X_star = np.linspace(0.0, 100.0, 30)
    with pytest.warns(Warning):  # δ > 1/n: warned, as in the paper's setting
        release = cloaked_release(
            model, X_star, epsilon=1.0, delta=0.01, y_bounds=(58.0, 158.0), ledger=ledger
        )  # secure noise by default
        exact = gp_regression(X, height, pm.gp.cov.ExpQuad(1, ls=15.0), noise_sd=5.0, mean=108.0)
        cloaked_release(
            exact, X_star, epsilon=1.0, delta=0.01, y_bounds=(58.0, 158.0), ledger=ledger
        )
    md = release.metadata
    assert md["noise_source"].startswith("opendp")
    assert len(ledger.history) == 2  # composes with the exact release in one ledger
    if family == "fitc":
        assert md["approximation"] == "FITC" and md["inducing_seed"] == 7
        assert np.array_equal(np.array(md["inducing_inputs"]), model.Z)
        assert np.array_equal(model.Z, kmeans_public_inducing(X, 5, seed=7))
        assert md["noise_rank"] <= 5
    else:
        assert "Gibbs" in md["kernel"]
    idata = release.to_inference_data()
    private = np.concatenate([height, np.clip(height, 58.0, 158.0)])
    private = private[(private != 58.0) & (private != 158.0)]  # clipped to the public bounds
    assert scan_for_values(idata, private) == []


def test_bad_input_is_refused_before_spending():
    X = np.linspace(0, 10, 12)
    y = np.sin(X)
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with pytest.raises(ValueError, match="n_inducing and seed"):
        fitc_gp_regression(X, y, cov, noise_sd=0.3)
    with pytest.raises(ValueError, match="either Z"):
        fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=X[:3], n_inducing=3, seed=0)
    with pytest.raises(ValueError, match="n_inducing"):
        fitc_gp_regression(X, y, cov, noise_sd=0.3, n_inducing=13, seed=0)
    with pytest.raises(ValueError, match="seed"):
        fitc_gp_regression(X, y, cov, noise_sd=0.3, n_inducing=3, seed=1.5)
    with pytest.raises(ValueError, match="column"):
        fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=np.zeros((3, 2)))
    model = fitc_gp_regression(X, y, cov, noise_sd=0.3, n_inducing=4, seed=0)
    ledger = Ledger(epsilon=1.0, delta=1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    ok = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), ledger=ledger, rng=rng)
    for bad in (
        {"X_star": np.array([1.0, np.nan])},
        {"X_star": np.zeros((3, 2))},
        {"epsilon": 0.0},
        {"delta": 1.0},
        {"y_bounds": (2.0, -2.0)},
        {"n_draws": 0},
    ):
        args = {"X_star": np.linspace(0, 10, 5), **ok, **bad}
        with pytest.raises(ValueError):
            cloaked_release(model, **args)
    with pytest.raises(ValueError):
        KDELengthscale(X[:, None], n_target=0.0, max_lengthscale=1.0, bandwidth=1.0)
    assert ledger.history == [] and rng.bit_generator.state == state


@pytest.mark.parametrize("calibration", ["classic", "analytic"])
def test_fitc_monte_carlo_privacy_loss(calibration):
    """Hockey-stick divergence of the FITC release on its most exposed neighbour pair ≤ δ."""
    eps, delta, bounds = 1.0, 0.01, (58.0, 158.0)
    age, height = load_kung_women()
    X = age[:, None]
    Z = kmeans_public_inducing(X, 5, seed=0)
    cov = 10.0 * pm.gp.cov.ExpQuad(1, ls=15.0)
    X_star = np.linspace(0.0, 100.0, 40)[:, None]
    view = fitc_gp_regression(X, height, cov, noise_sd=5.0, Z=Z, mean=108.0).public_cloaking()
    C = view.cloaking_operator(X_star).dense()
    y_low = np.clip(height, *bounds)
    r0 = cloaked_release(
        fitc_gp_regression(X, y_low, cov, noise_sd=5.0, Z=Z, mean=108.0),
        X_star,
        epsilon=eps,
        delta=delta,
        y_bounds=bounds,
        calibration=calibration,
        bounds_are_public=True,
        rng=np.random.default_rng(3),
    )
    coef, *_ = np.linalg.lstsq(r0.noise_factor, C, rcond=None)
    j = int(np.argmax(np.sum(coef**2, 0)))  # the most exposed individual
    y_high = y_low.copy()
    y_low[j], y_high[j] = bounds
    r1, r2 = (
        cloaked_release(
            fitc_gp_regression(X, yy, cov, noise_sd=5.0, Z=Z, mean=108.0),
            X_star,
            epsilon=eps,
            delta=delta,
            y_bounds=bounds,
            calibration=calibration,
            bounds_are_public=True,
            rng=np.random.default_rng(3),
        )
        for yy in (y_low, y_high)
    )
    n = 400_000
    losses = _privacy_losses(
        r1, np.zeros(40), r2.draws[0] - r1.draws[0], n, np.random.default_rng(11)
    )
    hs = np.clip(1.0 - np.exp(eps - losses), 0.0, None)
    margin = 4.0 * hs.std() / np.sqrt(n)
    assert hs.mean() <= delta + margin
    if calibration == "analytic":
        assert hs.mean() >= delta - margin  # tight: the FITC release is not over-noised


@pytest.mark.parametrize("shape", [(40, 3, 200), (2, 5, 30), (30, 6, 4)])
def test_low_rank_operator_gives_the_dense_solution(shape):
    """The exact low-rank range (QR + core SVD) equals the dense path's: same rank, same M."""
    from pm_dpgp.mechanisms.label.cloaking import LowRankOperator, solve_noise_covariance

    m, r, n = shape
    rng = np.random.default_rng(m + n)
    A, B = rng.standard_normal((m, r)), rng.standard_normal((r, n))
    low = solve_noise_covariance(LowRankOperator(A, B))
    dense = solve_noise_covariance(A @ B)
    assert low.rank == dense.rank == min(m, r, n)
    # both certified within tol = 1e-9 of the optimum: log-dets agree to k·tol
    assert abs(low.log_det_k - dense.log_det_k) <= 2 * low.rank * 1e-9 + 1e-10
    assert_normwise_close(low.M, dense.M, 1e-6, "M")  # near-unique optimum, κ small here
    W = np.linalg.lstsq(low.basis @ low.chol_k, A @ B, rcond=None)[0]
    assert np.max(np.sum(W**2, 0)) <= 1.0 + 1e-9  # every column inside the ellipsoid
    with pytest.raises(ValueError, match="nothing to cloak"):
        solve_noise_covariance(LowRankOperator(np.zeros((m, r)), B))


def test_a_vfe_model_has_no_cloaked_release_and_smith_refuses_approximate_models():
    """Stop-26 audit: ``cloaked_release`` accepted a VFE ``sparse_gp_regression`` model and
    released exact-GP cloaking for it; Smith's CV-SSE selection scored a FITC model with
    exact-GP fold matrices (bitwise the exact GP's utilities)."""
    from pm_dpgp.models import fitc_gp_regression, sparse_gp_regression
    from pm_dpgp.selection import select_by_cross_validated_sse

    X = np.linspace(0.0, 10.0, 30)[:, None]
    y = np.sin(X[:, 0])
    vfe = sparse_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=2.0), Z=X[::6], noise_sd=0.3)
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    with pytest.raises(TypeError, match="VFE"):
        cloaked_release(
            vfe,
            X[:5],
            epsilon=1.0,
            delta=1e-5,
            y_bounds=(-2, 2),
            ledger=ledger,
            rng=np.random.default_rng(0),
        )
    fitc = fitc_gp_regression(
        X, y, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)), Z=X[::6], noise_sd=0.3
    )
    with pytest.raises(TypeError, match="exact-GP cloaking"):
        select_by_cross_validated_sse(
            fitc,
            [{"ell": 1.0}, {"ell": 3.0}],
            epsilon=0.5,
            y_bounds=(-2, 2),
            ledger=ledger,
            n_folds=3,
            rng=np.random.default_rng(1),
        )
    assert ledger.history == []
