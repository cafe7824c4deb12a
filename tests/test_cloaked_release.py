"""End-to-end tests of the cloaked release: privacy, ledger, metadata, bad input.

Tolerances (see ``tests/tolerances.py``): the Mahalanobis checks go through a least-squares
solve with the noise factor, whose condition number is up to ~1/rank_tol (1e8); their slack is
the forward-error bound of that solve plus the error of the vector being whitened
(:func:`_lstsq_error`, :func:`_draw_rounding`), not a fixed number.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import BudgetExceededError, GaussianEvent, Ledger
from pm_dpgp.mechanisms import cloaked_release, cloaking_noise
from pm_dpgp.mechanisms.label.truncation import TruncationSetting
from pm_dpgp.models import PrivateHyperparameterError, gp_regression
from tests.tolerances import EPS, cond_rtol

from .conftest import KUNG_BOUNDS, small_model
from .test_cloaking_solver import scaling_atol


def _whitened(factor: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mahalanobis coordinates of ``vectors`` (columns) w.r.t. ``factor @ factor.T``.

    Returns the whitened coordinates and the residual outside the range of ``factor``.
    """
    coef, *_ = np.linalg.lstsq(factor, vectors, rcond=None)
    return coef, vectors - factor @ coef


def _dense_cloaking_matrix(public_gp, X_star: np.ndarray) -> np.ndarray:
    """Independent reference: C = K*f (K + σ²I)⁻¹ with a dense solve."""
    K = public_gp.kernel(public_gp.X, public_gp.X) + public_gp.noise_var * np.eye(len(public_gp.X))
    return np.linalg.solve(K, public_gp.kernel(public_gp.X, X_star)).T


def _dense_cloaking_error(public_gp, C: np.ndarray) -> float:
    """Bound on ‖C_dense − C_library‖_F: two backward-stable solves with K + σ²I (LU here,
    Cholesky in the library) differ normwise by ≤ cond_rtol(K + σ²I) (Higham 2002, Thm 7.2)."""
    K = public_gp.kernel(public_gp.X, public_gp.X) + public_gp.noise_var * np.eye(len(public_gp.X))
    return cond_rtol(K) * float(np.linalg.norm(C))


def _lstsq_error(factor: np.ndarray, coef: np.ndarray, residual: np.ndarray, vec_err: float):
    """Per column, a bound on |‖coef_j‖ − ‖F⁺ v_j‖| for the exact v_j (F = ``factor``).

    ``lstsq`` is backward stable, so its forward error is ``‖Δx‖ ≤ c·m·κ·EPS·(2‖x‖ +
    (κ + 1)‖r‖ / ‖F‖)`` with κ = κ(F) (Higham 2002, Thm 20.1; Wedin); U_k's loss of
    orthogonality adds ``c·m·k·EPS·‖x‖``; an error ``vec_err`` (2-norm) in v_j adds
    ``vec_err / σ_min(F)``.  κ(F) = κ(chol_k) reaches ~1/rank_tol = 1e8 for smooth kernels.
    """
    m, k = factor.shape
    s = np.linalg.svd(factor, compute_uv=False)
    kappa = s[0] / s[-1]
    x = np.linalg.norm(coef, axis=0)
    r = np.linalg.norm(residual, axis=0)
    solve = cond_rtol(kappa, m) * (2.0 * x + (kappa + 1.0) * r / s[0])
    return solve + 4.0 * m * k * EPS * x + vec_err / s[-1]


def _draw_rounding(release, public_gp, C: np.ndarray, ys, draws) -> float:
    """2-norm bound on the rounding of computed draws (minus μ) that lies outside range(F).

    A draw is fl(fl(μ + fl(U fl(Uᵀ C (y − μ)))) + noise): U·v is in range(F) up to
    γ_k |U||v| ≤ k·EPS·‖v‖, ‖v‖ ≤ ‖C‖₂‖y − μ‖; the additions and the subtraction of μ or of
    another draw add EPS × the size of their results (Higham 2002, §3.5).
    """
    m, k = release.noise_factor.shape
    mu = float(np.max(np.abs(public_gp.mean)))
    v = float(np.linalg.norm(C, 2)) * max(float(np.linalg.norm(y - public_gp.mean)) for y in ys)
    size = mu + v + max(float(np.max(np.abs(d))) for d in draws)
    return 4.0 * (k + 3) * EPS * math.sqrt(m) * size


def _assert_within_sensitivity(release, vectors: np.ndarray, vec_err: float, l2=None):
    """‖M^(-1/2) v_j‖ ≤ l2 (in units of the unit-σ noise) for every column, up to the error of
    evaluating the left side; returns the whitened norms."""
    md = release.metadata
    l2 = md["l2_sensitivity"] if l2 is None else l2
    sigma = md["l2_sensitivity"] * md["noise_multiplier"]
    coef, residual = _whitened(release.noise_factor, vectors)
    norms = np.linalg.norm(coef, axis=0) * sigma
    slack = _lstsq_error(release.noise_factor, coef, residual, vec_err) * sigma
    assert np.all(norms <= l2 + slack), f"max excess {np.max(norms - l2 - slack):.3g}"
    return norms


def _assert_in_noise_range(release, vectors: np.ndarray, rounding: float) -> None:
    """Every column lies in range(noise_factor): the lstsq residual is at most the rounding of
    the vector itself plus the residual error of a backward-stable lstsq,
    ``c·m·EPS·(‖v‖ + ‖F‖‖x‖)`` (no κ: the residual is well conditioned, Higham 2002, §20.1)."""
    F = release.noise_factor
    m, k = F.shape
    coef, residual = _whitened(F, vectors)
    scale = np.linalg.norm(vectors, axis=0) + np.linalg.norm(F, 2) * np.linalg.norm(coef, axis=0)
    allowed = rounding + 8.0 * (m + k) * EPS * scale
    excess = np.linalg.norm(residual, axis=0) - allowed
    assert np.all(excess <= 0.0), f"residual exceeds its rounding bound by {excess.max():.3g}"


def test_kung_release_metadata_and_ledger(kung_model, kung_ages):
    ledger = Ledger(epsilon=1.0, delta=0.01)
    release = cloaked_release(
        kung_model,
        kung_ages,
        epsilon=1.0,
        delta=0.01,
        y_bounds=KUNG_BOUNDS,
        ledger=ledger,
        rng=np.random.default_rng(0),
    )
    assert release.draws.shape == (1, 200)
    md = release.metadata
    assert md["privacy_model"] == "label"
    assert md["data_sensitivity"] == 120.0
    assert md["solver_converged"]
    assert 5 <= md["noise_rank"] < 200  # rank deficient: more test points than directions
    # 1 in exact arithmetic; the solver's rounding is bounded by Skeel's cond(chol_k)
    _, noise = cloaking_noise(kung_model.public_gp(), kung_ages[:, None])
    assert md["max_mahalanobis"] <= 1.0 + scaling_atol(noise)
    assert md["l2_sensitivity"] == pytest.approx(120.0 * np.sqrt(md["max_mahalanobis"]), rel=2e-6)
    assert md["l2_sensitivity"] >= 120.0 * np.sqrt(md["max_mahalanobis"])
    assert ledger.spent_epsilon == pytest.approx(1.0, rel=1e-6)
    assert len(ledger.history) == 1
    # The noise is largest away from the data (Smith et al. 2018, Fig. 1B discussion).
    sd = release.noise_sd
    assert sd[kung_ages > 90].max() > sd[(kung_ages > 10) & (kung_ages < 60)].max()


def test_released_mean_is_projected_and_fully_protected(kung_model, kung_ages):
    """Every component of the released mean lies in the noise's range (nothing unprotected)."""
    public_gp = kung_model.public_gp()
    kwargs = dict(epsilon=1.0, delta=0.01, y_bounds=KUNG_BOUNDS)
    base = cloaked_release(kung_model, kung_ages, rng=np.random.default_rng(5), **kwargs)
    centred = base.draws[0] - public_gp.mean
    C, _ = cloaking_noise(public_gp, kung_ages[:, None])
    y = np.clip(kung_model.y, *KUNG_BOUNDS)
    rounding = _draw_rounding(base, public_gp, C, [y], [base.draws])
    _assert_in_noise_range(base, centred[:, None], rounding)


#: Hypothesis strategies for ``random_gp_case`` (shared with tests/test_cloaking_trace.py).
GP_CASES = dict(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 20),
    m=st.integers(1, 30),
    dim=st.sampled_from([1, 2]),
    kernel=st.sampled_from(["expquad", "matern52", "matern32", "sum"]),
    ls=st.floats(0.2, 5.0),
    noise=st.floats(0.05, 2.0),
    d=st.floats(0.1, 50.0),
)


def random_gp_case(seed, n, m, dim, kernel, ls, noise, d):
    """A random GP regression (labels in ``[0, d]``) and test inputs for the property tests."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, dim))
    X_star = rng.uniform(-2, 12, (m, dim))
    cov = {
        "expquad": pm.gp.cov.ExpQuad(dim, ls=ls),
        "matern52": 2.0 * pm.gp.cov.Matern52(dim, ls=ls),
        "matern32": pm.gp.cov.Matern32(dim, ls=ls),
        "sum": pm.gp.cov.ExpQuad(dim, ls=ls) + 0.5 * pm.gp.cov.Matern12(dim, ls=2 * ls),
    }[kernel]
    y = rng.uniform(0.0, d, n)
    return X, X_star, cov, y, gp_regression(X, y, cov, noise_sd=noise, mean=d / 2)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(**GP_CASES)
def test_mahalanobis_sensitivity_property(seed, n, m, dim, kernel, ls, noise, d):
    """For every single-output change of size d, ‖M^(-1/2) Δf‖ ≤ calibrated sensitivity."""
    X, X_star, cov, y, model = random_gp_case(seed, n, m, dim, kernel, ls, noise, d)
    bounds = (0.0, d)
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=bounds, bounds_are_public=True)
    public_gp = model.public_gp()
    if np.max(np.abs(public_gp.kernel(X_star, public_gp.X))) < np.finfo(np.float64).tiny:
        # Test points so far from the data that k(x*, x) underflows (to 0 or a subnormal): the
        # mean does not representably depend on y, and the release refuses.
        with pytest.raises(ValueError):
            cloaked_release(model, X_star, rng=np.random.default_rng(1), **kw)
        return
    release = cloaked_release(model, X_star, rng=np.random.default_rng(1), **kw)
    C = _dense_cloaking_matrix(public_gp, X_star)
    # Released mean change for y_j → y_j ± d is P C e_j d; P projects on the noise range.
    # Slack: lstsq forward error plus the dense-vs-library difference of C, whitened.
    vec_err = d * _dense_cloaking_error(public_gp, C)
    whitened_norms = _assert_within_sensitivity(release, C * d, vec_err)

    # Adversarial neighbour: the worst column, y_j pushed to the other end of the range.
    j = int(np.argmax(whitened_norms))
    y2 = y.copy()
    y2[j] = 0.0 if y[j] > d / 2 else d
    model2 = gp_regression(X, y2, cov, noise_sd=noise, mean=d / 2)
    release2 = cloaked_release(model2, X_star, rng=np.random.default_rng(1), **kw)
    diff = release2.draws[0] - release.draws[0]  # same seed: the noise cancels
    # diff is known only up to the rounding of the two draws (outside range(F) too)
    rounding = _draw_rounding(release, public_gp, C, [y, y2], [release.draws, release2.draws])
    _assert_in_noise_range(release, diff[:, None], rounding)
    _assert_within_sensitivity(release, diff[:, None], rounding)


def test_sensitivity_checks_reject_near_misses():
    """The slack of the two checks above is not vacuous: 1e-4 relative errors are rejected."""
    model = small_model(0)
    X_star = np.linspace(-1, 7, 20)[:, None]  # more test than training points: rank k < m
    release = cloaked_release(
        model,
        X_star,
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(0),
    )
    public_gp = model.public_gp()
    C = _dense_cloaking_matrix(public_gp, X_star)
    vec_err = 4.0 * _dense_cloaking_error(public_gp, C)
    l2 = release.metadata["l2_sensitivity"]
    _assert_within_sensitivity(release, 4.0 * C, vec_err)
    with pytest.raises(AssertionError):  # the sensitivity understated by 1e-4
        _assert_within_sensitivity(release, 4.0 * C, vec_err, l2=l2 * (1.0 - 1e-4))
    # a release leaking 1e-4 (relative) of an unprotected direction is caught by the range check
    centred = release.draws[0] - public_gp.mean
    y = np.clip(model.y, -2.0, 2.0)
    rounding = _draw_rounding(release, public_gp, C, [y], [release.draws])
    _assert_in_noise_range(release, centred[:, None], rounding)
    F = release.noise_factor
    assert F.shape[1] < F.shape[0]
    outside = np.linalg.svd(F)[0][:, -1]  # unit vector orthogonal to range(F)
    leaked = centred + 1e-4 * np.linalg.norm(centred) * outside
    with pytest.raises(AssertionError):
        _assert_in_noise_range(release, leaked[:, None], rounding)


def _privacy_losses(release, mean_D, mean_D2, n_samples, rng):
    """Privacy loss ln p(o|D) − ln p(o|D') for o drawn from the release's noise law."""
    factor = release.noise_factor
    shift, _ = _whitened(factor, (mean_D2 - mean_D)[:, None])
    shift = shift[:, 0]
    w = rng.standard_normal((n_samples, factor.shape[1]))  # whitened noise of o − mean_D
    return 0.5 * shift @ shift - w @ shift


@pytest.mark.parametrize("calibration", ["classic", "analytic"])
def test_monte_carlo_privacy_loss(kung_model, calibration):
    """Monte-Carlo privacy loss of the actual release on an adversarial neighbour pair."""
    eps, delta = 1.0, 0.01
    ages = np.linspace(0.0, 110.0, 40)
    public_gp = kung_model.public_gp()
    # the release's own rank cut (the default "auto" rule), so j is its most exposed label
    cut = TruncationSetting(eps, delta, public_gp.n, 40, KUNG_BOUNDS, 110.0).auto_rank_tol()
    C, noise = cloaking_noise(public_gp, ages[:, None], rank_tol=cut)
    g = np.einsum("ij,ij->j", *[np.linalg.solve(noise.chol_k, noise.basis.T @ C)] * 2)
    j = int(np.argmax(g))  # the most exposed individual
    # Adversarial neighbours: the most exposed individual at either end of the range (|Δy| = d).
    y_low = np.clip(kung_model.y, *KUNG_BOUNDS)
    y_high = y_low.copy()
    y_low[j], y_high[j] = KUNG_BOUNDS
    kw = dict(
        epsilon=eps,
        delta=delta,
        y_bounds=KUNG_BOUNDS,
        calibration=calibration,
        bounds_are_public=True,
    )
    r1, r2 = (
        cloaked_release(
            gp_regression(
                kung_model.X, yy, 7.72**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=14.0, mean=110.0
            ),
            ages,
            rng=np.random.default_rng(3),
            **kw,
        )
        for yy in (y_low, y_high)
    )
    mean_diff = r2.draws[0] - r1.draws[0]
    n = 400_000
    losses = _privacy_losses(r1, np.zeros(40), mean_diff, n, np.random.default_rng(11))
    # Empirical hockey-stick divergence δ̂(ε) = E[(1 − e^{ε − L})₊] ≤ δ (exact DP criterion).
    hs = np.clip(1.0 - np.exp(eps - losses), 0.0, None)
    margin = 4.0 * hs.std() / np.sqrt(n)
    assert hs.mean() <= delta + margin
    # The adversarial pair is close to tight: the mechanism is not over-noised.
    if calibration == "analytic":
        assert hs.mean() >= delta - margin  # analytic calibration is tight on this pair
    if calibration == "classic":
        # Classic calibration bounds the tail itself: P[L > ε] ≤ δ.
        frac = (losses > eps).mean()
        assert frac <= delta + 4.0 * np.sqrt(delta * (1 - delta) / n)
    # The loss distribution is the Gaussian N(μ²/2, μ²) with μ ≤ 1 / noise multiplier.
    mu = 1.0 / r1.metadata["noise_multiplier"]
    assert losses.mean() <= mu**2 / 2 + 4 * mu / np.sqrt(n)


def test_budget_refuses_before_drawing_noise(kung_model, kung_ages):
    ledger = Ledger(epsilon=1.0, delta=0.01)
    rng = np.random.default_rng(7)
    kw = dict(epsilon=1.0, delta=0.01, y_bounds=KUNG_BOUNDS, ledger=ledger, rng=rng)
    cloaked_release(kung_model, kung_ages, **kw)
    state = rng.bit_generator.state
    with pytest.raises(BudgetExceededError):
        cloaked_release(kung_model, kung_ages, **kw)
    assert rng.bit_generator.state == state  # no randomness consumed
    assert len(ledger.history) == 1


def test_k_draws_charge_k_releases(kung_model, kung_ages):
    ledger = Ledger(epsilon=10.0, delta=0.01)
    release = cloaked_release(
        kung_model,
        kung_ages,
        epsilon=1.0,
        delta=0.01,
        y_bounds=KUNG_BOUNDS,
        n_draws=5,
        ledger=ledger,
        rng=np.random.default_rng(2),
    )
    assert release.draws.shape == (5, 200)
    z = release.metadata["noise_multiplier"]
    expected = GaussianEvent(noise_multiplier=z, count=5).epsilon(0.01)
    # The ledger's GDP bound uses μ = √(5/z²) instead of √5/z (≤ 2 ulps apart) and its own root
    # find: dp_accounting's brentq (xtol 1e-12) + _nudge_up (relative steps 1e-12·2^j) put both
    # within ~1e-11 of the root, far inside 1e-9.  Scalar code, no BLAS: machine independent.
    assert ledger.spent_epsilon == pytest.approx(expected, rel=1e-9)
    assert ledger.spent_epsilon > 1.0  # five releases cost more than one
    # Same event, same function (bitwise equal); rel=1e-9 as above.
    assert release.metadata["epsilon_total"] == pytest.approx(expected, rel=1e-9)


def test_classic_calibration_adds_more_noise(kung_model, kung_ages):
    kw = dict(epsilon=1.0, delta=0.01, y_bounds=KUNG_BOUNDS)
    a = cloaked_release(kung_model, kung_ages, rng=np.random.default_rng(0), **kw)
    c = cloaked_release(
        kung_model, kung_ages, rng=np.random.default_rng(0), calibration="classic", **kw
    )
    ratio = c.noise_sd / a.noise_sd
    assert np.allclose(ratio, np.sqrt(2 * np.log(2 / 0.01)) / 1.8778755609, rtol=1e-6)


def test_bad_input_is_refused(kung_model, kung_ages):
    ok = dict(epsilon=1.0, delta=0.01, y_bounds=KUNG_BOUNDS)
    for bad in (
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"epsilon": float("nan")},
        {"delta": 0.0},
        {"delta": 1.0},
        {"delta": 1.5},
    ):
        with pytest.raises(ValueError):
            cloaked_release(kung_model, kung_ages, **{**ok, **bad})
    with pytest.raises(ValueError, match="analytic"):
        cloaked_release(kung_model, kung_ages, **{**ok, "epsilon": 2.0}, calibration="classic")
    # clip="raise" is refused from the argument alone, whatever the data (docs/errors.md)
    with pytest.raises(ValueError, match="no longer supported"):
        cloaked_release(kung_model, kung_ages, **ok, clip="raise")
    with pytest.raises(ValueError, match="NaN"):
        cloaked_release(kung_model, np.array([1.0, np.nan]), **ok)
    with pytest.raises(ValueError):
        cloaked_release(kung_model, kung_ages, **ok, n_draws=0)


def test_clipping_is_silent_and_bounds_are_not_compared_with_the_data(kung_model, kung_ages):
    """Data outside the bounds are clipped with no warning; a bound equal to min(y) is used.

    The release with bounds (60, 150) equals the release of a model built on the clipped
    heights (same seed): clipping is the only effect, and nothing says whether it happened.
    """
    age, height = kung_model.X[:, 0], kung_model.y
    bounds = (60.0, 150.0)
    assert np.any(height < bounds[0]) or np.any(height > bounds[1])
    clipped = gp_regression(
        age,
        np.clip(height, *bounds),
        7.72**2 * pm.gp.cov.ExpQuad(1, ls=25.0),
        noise_sd=14.0,
        mean=110.0,
    )
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=bounds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = cloaked_release(kung_model, kung_ages, rng=np.random.default_rng(3), **kw)
        b = cloaked_release(clipped, kung_ages, rng=np.random.default_rng(3), **kw)
        r = cloaked_release(
            kung_model, kung_ages, epsilon=1.0, delta=1e-3, y_bounds=(height.min(), 200.0)
        )
    assert np.array_equal(a.draws, b.draws)
    assert r.metadata["clipping_bounds"] == [float(height.min()), 200.0]


def test_hyperparameters_with_priors_need_public_values():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 5, 10)
    y = np.sin(X)

    def cov():
        return pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2.0, 1.0))

    model = gp_regression(X, y, cov, noise_sd=0.3)
    kw = dict(epsilon=1.0, delta=0.01, y_bounds=(-2.0, 2.0))
    with pytest.raises(PrivateHyperparameterError):
        cloaked_release(model, np.linspace(0, 5, 7), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        r = cloaked_release(
            model,
            np.linspace(0, 5, 7),
            hyperparameters={"ell": 1.0},
            rng=np.random.default_rng(0),
            **kw,
        )
    assert r.metadata["hyperparameters"] == {"ell": 1.0}


def test_small_model_release_runs():
    model = small_model(0)
    r = cloaked_release(
        model,
        np.linspace(-1, 7, 9),
        epsilon=0.5,
        delta=1e-3,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(0),
    )
    assert np.all(np.isfinite(r.draws))


def test_the_factorisation_jitter_is_recorded_in_the_release():
    """Stop-31 audit: a noise variance below round-off made the exact posterior add jitter
    (1e-10 = 10⁶ σ_n² here) and the release is the posterior for ``σ_n² + jitter``, but its
    metadata did not say so.  Both exact label-private releases record it now."""
    from pm_dpgp.mechanisms import prior_noise_release

    X = np.linspace(0.0, 10.0, 40)
    y = np.clip(np.sin(X), -1.9, 1.9)
    for noise_sd, jittered in ((1e-8, True), (0.3, False)):
        model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=3.0), noise_sd=noise_sd, mean=0.0)
        jitter = model.public_gp().posterior().jitter
        assert (jitter > 0.0) == jittered
        for release_fn in (cloaked_release, prior_noise_release):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                release = release_fn(
                    model, np.linspace(0.0, 10.0, 5), epsilon=1.0, delta=1e-5,
                    y_bounds=(-2.0, 2.0), rng=np.random.default_rng(0),
                )  # fmt: skip
            assert release.metadata["jitter"] == jitter
