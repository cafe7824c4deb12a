"""Stop-49 audit: an end-to-end statistical check of the noise the releases actually draw.

The exact-divergence tests compare charged sensitivities with formulas; they cannot see a
sampler that draws the wrong law (a variance used as a standard deviation, a transposed
factor, a secure sampler at the wrong scale, noise reused across draws).  Here every release
function is run thousands of times at small n, in both noise modes where it has them, and

1. the released values, minus the non-private value (computed independently where possible),
   are whitened with the release's own ``noise_factor`` / metadata and tested against N(0, 1)
   (Kolmogorov–Smirnov per coordinate, the squared norm against χ²_k, the empirical
   covariance against I), Laplace noise against the Laplace CDF at the claimed scale,
   selections' frequencies against the claimed probabilities (χ²);
2. on an adversarial neighbouring pair (one label moved across the whole public range, the
   label whose change moves the release most in whitened units) the likelihood-ratio test's
   empirical FPR/TPR, with Clopper–Pearson bounds, respects ``TPR ≤ e^ε FPR + δ`` for the
   release's own per-draw (ε, δ);
3. two calls never share noise, and a seeded Generator reproduces (simulation mode only).

The simulation-mode tests are deterministic (seeded); the secure ones draw from OS entropy,
so their thresholds are set for a false-alarm rate below 1e-6 per CI run (three stacks) over
all of them: about 45 p-values per stack in the default (not slow) run at ``P_MIN`` each, and
6-sd bounds on sample covariances.  No power check on OS-entropy draws uses the empirical-ε
lower bound, whose lower tail is heavy (see the worst-neighbours test).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import stats

from pm_dpgp.mechanisms import cloaked_release, prior_noise_release
from pm_dpgp.models import gp_regression
from pm_dpgp.models.fitc import fitc_gp_regression
from pm_dpgp.models.nonstationary import nonstationary_gp_regression

# p-value below which a law is rejected: ~45 OS-entropy p-values per stack × 3 stacks per CI
# run give a false-alarm rate ≤ 1.4e-7 per run (KS is exact, and conservative on the secure
# grid); a wrong scale still fails (a 2× sd gives KS p ≈ e⁻²⁰⁰ at N = 3000)
P_MIN = 1e-9
BOUNDS = (-2.0, 2.0)
XS = np.array([[0.7], [2.9], [5.1]])


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# statistics (written here, not taken from pm_dpgp.audit)


def whiten(draws: np.ndarray, mean: np.ndarray, factor: np.ndarray) -> tuple[np.ndarray, float]:
    """``z`` with ``draws = mean + factor z`` (least squares), and the largest residual outside
    the column space of ``factor`` relative to the noise sd (0 for a correct release)."""
    resid = np.asarray(draws, dtype=np.float64) - mean[None, :]
    Q, R = np.linalg.qr(factor)
    coef = resid @ Q
    z = np.linalg.solve(R, coef.T).T
    outside = resid - coef @ Q.T
    sd = np.sqrt(np.sum(factor**2, axis=1)).max()
    return z, float(np.abs(outside).max() / sd)


def assert_standard_normal(z: np.ndarray) -> dict[str, float]:
    """Each column N(0, 1) (KS), the rows' squared norms χ²_k (KS), covariance ≈ I."""
    N, k = z.shape
    ps = {f"ks{j}": stats.kstest(z[:, j], "norm").pvalue for j in range(k)}
    ps["chi2"] = stats.kstest(np.sum(z**2, axis=1), stats.chi2(k).cdf).pvalue
    for name, p in ps.items():
        assert p > P_MIN, (name, p, z.std(axis=0))
    cov = np.cov(z, rowvar=False).reshape(k, k)
    # entries of the sample covariance of N(0, I) have sd ≤ sqrt(2/N)
    assert np.abs(cov - np.eye(k)).max() < 6.0 * math.sqrt(2.0 / N), cov
    return ps


def assert_pooled_standard_normal(z: np.ndarray, what: str) -> None:
    """``assert_standard_normal`` per column, and all entries pooled N(0, 1) (KS)."""
    ps = assert_standard_normal(z)
    pooled = stats.kstest(z.ravel(), "norm").pvalue
    assert pooled > P_MIN
    print(f"{what}: {z.shape[0]} × {z.shape[1]}, min p {min(ps.values()):.3g}, pooled {pooled:.3g}")


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    lo = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes, trials - successes + 1)
    hi = (
        1.0
        if successes == trials
        else stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes)
    )
    return float(lo), float(hi)


def empirical_epsilon(
    stat0: np.ndarray, stat1: np.ndarray, delta: float, thresholds: np.ndarray, alpha: float = 1e-6
) -> float:
    """Largest lower confidence bound on ε over the tests ``stat > t`` (reject D for D′):
    ``log((TPR_lo − δ)/FPR_hi)``, Clopper–Pearson at level α split over the thresholds."""
    a = alpha / (2 * len(thresholds))
    best = 0.0
    for t in thresholds:
        fpr_hi = clopper_pearson(int(np.sum(stat0 > t)), stat0.size, a)[1]
        tpr_lo = clopper_pearson(int(np.sum(stat1 > t)), stat1.size, a)[0]
        if tpr_lo > delta and fpr_hi > 0:
            best = max(best, math.log((tpr_lo - delta) / fpr_hi))
    return best


def gaussian_lr_audit(
    z0: np.ndarray, z1: np.ndarray, shift: np.ndarray, epsilon: float, delta: float
) -> float:
    """The optimal (Neyman–Pearson) test between two Gaussians with identity covariance in
    whitened units: project on the mean shift; returns the empirical ε lower bound."""
    mu = float(np.linalg.norm(shift))
    u = shift / mu
    s0, s1 = z0 @ u, z1 @ u
    eps_hat = empirical_epsilon(s0, s1, delta, mu / 2 + np.linspace(0.0, 3.0, 7))
    assert eps_hat <= epsilon, (eps_hat, epsilon)
    return eps_hat


# ---------------------------------------------------------------------------------------------
# label privacy: cloaking (exact, FITC, non-stationary) and prior noise


def _data(n: int = 8):
    rng = np.random.default_rng(49)
    X = np.sort(rng.uniform(0, 6, n))[:, None]
    y = np.clip(np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n), -1.9, 1.9)
    return X, y


def _model(kind: str, X: np.ndarray, y: np.ndarray):
    if kind == "exact":
        return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.2)
    if kind == "fitc":
        Z = np.linspace(0.5, 5.5, 4)[:, None]
        return fitc_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, Z=Z, mean=0.2)
    import pytensor.tensor as pt

    return nonstationary_gp_regression(
        X, y, lambda Xt: 0.8 + 0.2 * pt.abs(Xt[:, 0]), kernel_scale=1.0, noise_sd=0.3, mean=0.2
    )


def _posterior_mean(model, y: np.ndarray) -> np.ndarray:
    """The non-DP posterior mean at ``XS`` (the model's own ``predict``)."""
    return np.asarray(model.public_cloaking().predict(y, XS)[0], dtype=np.float64)


def _released_mean(model, y: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """The mean the release perturbs: the posterior mean with the directions outside the noise's
    column space (the rank cut) replaced by the prior mean's (``docs/cloaking.md`` §4)."""
    full = _posterior_mean(model, y)
    mu = float(model.public_cloaking().mean)
    Q, _ = np.linalg.qr(factor)
    return mu + Q @ (Q.T @ (full - mu))


LABEL_FUNCS = {"cloaking": cloaked_release, "prior_noise": prior_noise_release}
LABEL_CASES = [
    ("cloaking", "exact"),
    ("cloaking", "fitc"),
    ("cloaking", "nonstationary"),
    ("prior_noise", "exact"),
]


@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
@pytest.mark.parametrize(("mech", "kind"), LABEL_CASES)
def test_label_release_draws_have_the_claimed_gaussian_law(mech, kind, secure) -> None:
    X, y = _data()
    model = _model(kind, X, y)
    fn = LABEL_FUNCS[mech]
    eps, delta, N = 1.0, 1e-3, 3000
    kw = dict(epsilon=eps, delta=delta, y_bounds=BOUNDS)
    rng = None if secure else np.random.default_rng(4901)
    rel = _quiet(fn, model, XS, n_draws=N, rng=rng, **kw)
    assert rel.metadata["noise_source"] == (
        "opendp_discrete_gaussian" if secure else "numpy_simulation"
    )
    G = np.asarray(rel.noise_factor)
    mean = _released_mean(model, y, G)
    z, outside = whiten(rel.draws, mean, G)
    assert outside < 1e-8  # no noise or mean outside the claimed noise's column space
    ps = assert_standard_normal(z)
    print(f"{mech}-{kind}-{secure}: N={N}, min p {min(ps.values()):.3g}, sd {z.std(axis=0)}")
    # the metadata's marginal sd is the factor's
    np.testing.assert_allclose(rel.noise_sd, np.sqrt(np.sum(G**2, axis=1)), rtol=1e-12)
    # fresh noise: no two draws coincide, and a second call draws other noise (whole rows: the
    # secure draws lie on a grid of spacing ≈ σ·2⁻²⁰, so single coordinates can repeat)
    assert np.unique(rel.draws, axis=0).shape[0] == N
    rel2 = _quiet(
        fn, model, XS, n_draws=2, rng=None if secure else np.random.default_rng(4902), **kw
    )
    assert not (rel2.draws[:, None, :] == rel.draws[None, :, :]).all(axis=2).any()


@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
@pytest.mark.parametrize(("mech", "kind"), LABEL_CASES)
def test_label_release_worst_neighbours_respect_the_claimed_epsilon(mech, kind, secure) -> None:
    X, y = _data()
    fn = LABEL_FUNCS[mech]
    eps, delta, N = 1.0, 1e-3, 4000
    kw = dict(epsilon=eps, delta=delta, y_bounds=BOUNDS, n_draws=N)
    model = _model(kind, X, y)
    probe = _quiet(
        fn,
        model,
        XS,
        n_draws=1,
        rng=None if secure else np.random.default_rng(0),
        **{k: v for k, v in kw.items() if k != "n_draws"},
    )
    G = np.asarray(probe.noise_factor)
    Q, R = np.linalg.qr(G)
    # the record whose change across the whole range moves the whitened mean most
    best = None
    for j in range(len(y)):
        lo, hi = y.copy(), y.copy()
        lo[j], hi[j] = BOUNDS
        shift = np.linalg.solve(R, Q.T @ (_posterior_mean(model, hi) - _posterior_mean(model, lo)))
        if best is None or np.linalg.norm(shift) > np.linalg.norm(best[2]):
            best = (lo, hi, shift)
    lo, hi, _ = best
    m0, m1 = _model(kind, X, lo), _model(kind, X, hi)
    r0 = _quiet(fn, m0, XS, rng=None if secure else np.random.default_rng(11), **kw)
    r1 = _quiet(fn, m1, XS, rng=None if secure else np.random.default_rng(12), **kw)
    np.testing.assert_array_equal(r0.noise_factor, G)  # public: the same for both
    mean0, mean1 = _released_mean(m0, lo, G), _released_mean(m1, hi, G)
    z0, _ = whiten(r0.draws, mean0, G)
    z1, _ = whiten(r1.draws, mean0, G)  # both whitened about D's mean
    shift = np.linalg.solve(R, Q.T @ (mean1 - mean0))
    # exact: the whitened shift is within the charged sensitivity (Δ/σ = 1/noise_multiplier)
    assert np.linalg.norm(shift) <= 1.0 / rel_multiplier(r0) * (1 + 1e-9)
    eps_draw = float(r0.metadata["epsilon_per_draw"])
    eps_hat = gaussian_lr_audit(z0, z1, shift, eps_draw, float(r0.metadata["delta_per_draw"]))
    print(
        f"{mech}-{kind}-{secure}: |shift| {np.linalg.norm(shift):.4f} vs Δ/σ "
        f"{1 / rel_multiplier(r0):.4f}; empirical ε ≥ {eps_hat:.3f} (claimed {eps_draw:.3f})"
    )
    if mech == "cloaking" and not secure:  # charged sensitivity attained: the audit has power
        assert eps_hat > 0.1  # seeded: 0.17-0.21 here
    elif mech == "cloaking":
        # OS entropy: the bound ε̂ has a heavy lower tail (|shift| = 0.345, N = 4000: mean 0.146,
        # sd 0.038; 1 of 6·10⁴ simulated audits fell below the former floor 0.02, min 0.0067;
        # 0.099 on one CI run), too often below any useful floor.  The power's sources are
        # checked instead, each with false-alarm rate 2e-9: along the shift the two releases'
        # means differ by |shift| (sd √(2/N)) and the noise has unit sd (sd of the sample sd
        # ≈ 1/√(2N) = 0.011); a release that does not move (0 vs 0.345, bound 0.134) or noise
        # 10 % above its claim (9 sd off, bound 6 sd) fails.
        u = shift / np.linalg.norm(shift)
        s0, s1 = z0 @ u, z1 @ u
        moved = float(s1.mean() - s0.mean())
        assert abs(moved - np.linalg.norm(shift)) < 6.0 * math.sqrt(2.0 / N), moved
        for s in (s0, s1):
            assert abs(float(s.std()) - 1.0) < 6.0 / math.sqrt(2.0 * N), s.std()


def rel_multiplier(rel) -> float:
    """σ/Δ in whitened units (``noise_multiplier``; secure: the grid-unit scale/Δ_int)."""
    md = rel.metadata
    if md["noise_source"] == "opendp_discrete_gaussian":
        return md["integer_scale"] * md["grid"] / md["l2_sensitivity"]
    return float(md["noise_multiplier"])


# ---------------------------------------------------------------------------------------------
# Laplace bin means


def _binned(y, secure, N, seed, eps=0.7):
    from pm_dpgp.mechanisms import binned_release, make_bins

    X = np.array([0.5, 1.5, 1.7, 2.5, 2.6, 2.9, 3.5, 3.6, 3.7, 3.8])
    rng = None if secure else np.random.default_rng(seed)
    bins = make_bins(np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]))
    rel = _quiet(binned_release, X, y, bins, epsilon=eps, y_bounds=BOUNDS, n_draws=N, rng=rng)
    return X, rel


@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_binned_release_noise_is_laplace_at_the_claimed_scale(secure) -> None:
    from pm_dpgp.mechanisms.label.binning import occupied_bins

    y = np.array([1.0, -0.5, 1.9, 0.3, -1.2, 2.0, -2.0, 0.4, 0.1, 1.1])
    N = 4000
    X, rel = _binned(y, secure, N, 4903)
    idx, counts, scale = occupied_bins(rel)
    np.testing.assert_array_equal(idx, [0, 1, 2, 3])  # the bin [4, 5) is empty
    np.testing.assert_array_equal(counts, [1, 2, 3, 4])
    which = np.digitize(X, [1.0, 2.0, 3.0, 4.0])
    true = np.array([y[which == j].mean() for j in range(4)])
    # the claimed scale: b_j = d/(n_j ε) up to the rounding margins (module docstring)
    np.testing.assert_allclose(scale, 4.0 / (counts * 0.7), rtol=1e-5)
    pmin = 1.0
    for j in range(4):
        u = (rel.draws[:, idx[j]] - true[j]) / scale[j]
        p = stats.kstest(u, stats.laplace.cdf).pvalue
        pmin = min(pmin, p)
        assert p > P_MIN, (j, p, np.mean(np.abs(u)))
    # the noise factor is diag(√2 b_j): the Laplace sd
    np.testing.assert_allclose(rel.noise_sd[idx], math.sqrt(2) * scale, rtol=1e-12)
    # the empty bin: public empty value, no noise
    assert np.unique(rel.draws[:, 4]).size == 1
    # independent coordinates and fresh draws
    u = (rel.draws[:, idx] - true) / scale
    assert np.abs(np.corrcoef(u, rowvar=False) - np.eye(4)).max() < 6 / math.sqrt(N)
    assert np.unique(rel.draws[:, :4], axis=0).shape[0] == N
    print(f"binned {secure}: N={N}, min KS p {pmin:.3g}")


@pytest.mark.slow  # 5–10 s per case: run with -m slow
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_binned_release_neighbours_respect_pure_epsilon(secure) -> None:
    y = np.array([1.0, -0.5, 1.9, 0.3, -1.2, 2.0, -2.0, 0.4, 0.1, 1.1])
    y0, y1 = y.copy(), y.copy()
    y0[0], y1[0] = BOUNDS  # the single record of bin 0 across the whole range: shift d/1
    N = 12000
    _, r0 = _binned(y0, secure, N, 21)
    _, r1 = _binned(y1, secure, N, 22)
    eps = float(r0.metadata["epsilon_per_draw"])
    assert eps <= 0.7
    s0, s1 = r0.draws[:, 0], r1.draws[:, 0]
    b = float(r0.metadata["occupied_laplace_scale"][0])
    eps_hat = empirical_epsilon(s0, s1, 0.0, -2.0 + b * np.linspace(0.5, 3.0, 6) + 4.0)
    print(f"binned {secure}: empirical ε ≥ {eps_hat:.3f} (claimed {eps:.3f})")
    assert eps_hat <= eps
    # the audit has power (0.46 seeded; secure noise is OS entropy: a looser floor there)
    assert eps_hat > (0.15 if secure else 0.3)


# ---------------------------------------------------------------------------------------------
# one-step Laplace classification


@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_classification_release_law_and_neighbours(secure) -> None:
    from scipy.special import expit

    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification

    X, _ = _data()
    t = np.array([0, 0, 1, 1, 0, 1, 1, 0])
    ls, mu = 1.2, 0.0

    def kern(a, b):
        return np.exp(-0.5 * (a[:, None, 0] - b[None, :, 0]) ** 2 / ls**2)

    def one_step_mean(labels):
        # f̄* = μ + K*f (I + W₀K)⁻¹ (W₀(f₀ − μ) − π₀ + t), f₀ = μ (module docstring)
        pi0 = expit(mu)
        W0 = pi0 * (1 - pi0)
        K = kern(X, X)
        return mu + kern(XS, X) @ np.linalg.solve(np.eye(len(X)) + W0 * K, labels - pi0)

    N = 3000

    def run(labels, seed):
        model = gp_classification(X, labels, pm.gp.cov.ExpQuad(1, ls=ls), mean=mu)
        rng = None if secure else np.random.default_rng(seed)
        return _quiet(
            classification_release, model, XS, epsilon=1.0, delta=1e-3, n_draws=N, rng=rng
        )

    rel = run(t, 4904)
    G = np.asarray(rel.noise_factor)
    Q, R = np.linalg.qr(G)

    def released(labels):
        full = one_step_mean(labels.astype(float))
        return mu + Q @ (Q.T @ (full - mu))

    z, outside = whiten(rel.draws, released(t), G)
    assert outside < 1e-8
    ps = assert_standard_normal(z)
    # worst flip
    shifts = []
    for j in range(len(t)):
        t0, t1 = t.copy(), t.copy()
        t0[j], t1[j] = 0, 1
        shifts.append(np.linalg.solve(R, Q.T @ (released(t1) - released(t0))))
    j = int(np.argmax([np.linalg.norm(s) for s in shifts]))
    t0, t1 = t.copy(), t.copy()
    t0[j], t1[j] = 0, 1
    assert np.linalg.norm(shifts[j]) <= 1.0 / rel_multiplier(rel) * (1 + 1e-9)
    z0, _ = whiten(run(t0, 31).draws, released(t0), G)
    z1, _ = whiten(run(t1, 32).draws, released(t0), G)
    md = rel.metadata
    eps_hat = gaussian_lr_audit(
        z0, z1, shifts[j], float(md["epsilon_per_draw"]), float(md["delta_per_draw"])
    )
    print(
        f"classification {secure}: N={N}, min p {min(ps.values()):.3g}; |shift| "
        f"{np.linalg.norm(shifts[j]):.4f} vs Δ/σ {1 / rel_multiplier(rel):.4f}; "
        f"empirical ε ≥ {eps_hat:.3f}"
    )


# ---------------------------------------------------------------------------------------------
# full privacy: noise-aware sparse GP and Dirichlet classification (the noisy statistics)


@pytest.fixture
def captured_statistics(monkeypatch):
    """The exact statistics and their noisy versions of every release made in the test
    (``dp_qu`` receives the noisy ones; ``_account_draw_release`` the exact ones)."""
    import pm_dpgp.mechanisms.full.dirichlet as dirichlet_module
    import pm_dpgp.mechanisms.full.noise_aware as na

    exact, noisy = [], []
    dp_qu, account = na.dp_qu, na._account_draw_release

    def capture_noisy(Kzz, a, B, **kw):
        noisy.append((np.array(a), np.array(B)))
        return dp_qu(Kzz, a, B, **kw)

    def capture_exact(cls, public, stats, **kw):
        exact.append((np.array(stats.A), np.array(stats.B)))
        return account(cls, public, stats, **kw)

    monkeypatch.setattr(na, "dp_qu", capture_noisy)
    monkeypatch.setattr(na, "_account_draw_release", capture_exact)
    monkeypatch.setattr(dirichlet_module, "_account_draw_release", capture_exact)
    return exact, noisy


def _sparse_public():
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

    Z = grid_inducing_points(-3.0, 3.0, 3)
    model = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=Z, noise_sd=0.3)
    return model.public_sparse_gp(), Z


def _upper(B: np.ndarray) -> np.ndarray:
    """``B̂``: the diagonal, then the strict upper triangle times √2 (``docs/noise_aware.md``
    §2: the noise is iid σ_b on ``B̂``, so σ_b/√2 on the off-diagonal entries of ``B``)."""
    iu = np.triu_indices(B.shape[-1], 1)
    return np.concatenate([np.diag(B), math.sqrt(2.0) * B[iu]])


def _statistics_noise(exact, noisy, md, n_outputs):
    """Whitened noise (N, n_outputs·(M + M(M+1)/2)) from the captured statistics."""
    rows = []
    for r in range(len(exact)):
        A, B = exact[r]
        row = []
        for t in range(n_outputs):
            a_t, B_t = noisy[r * n_outputs + t]
            row.append((a_t - A[:, t]) / md["sigma_a"])
            row.append((_upper(B_t) - _upper(B[t])) / md["sigma_b"])
        rows.append(np.concatenate(row))
    return np.array(rows)


@pytest.mark.slow  # 5–10 s per case: run with -m slow
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_noise_aware_statistics_noise_has_the_claimed_law(secure, captured_statistics) -> None:
    from pm_dpgp.mechanisms import noise_aware_release

    exact, noisy = captured_statistics
    pub, Z = _sparse_public()
    X = np.array([-2.5, -1.7, -0.9, -0.2, 0.4, 1.1, 1.8, 2.6])
    y = np.clip(np.sin(X) + 0.1, -2, 2)
    rng = None if secure else np.random.default_rng(4905)
    N = 400
    for _ in range(N):
        rel = _quiet(
            noise_aware_release, pub, (X, y), epsilon=1.0, delta=1e-4, y_bounds=BOUNDS, rng=rng
        )
    md = rel.metadata
    # the exact statistics, independently: A = Σ (y_i − μ) k(Z, x_i), B = Σ k kᵀ (eq. 3)
    K = np.exp(-0.5 * (Z[:, None, 0] - X[None, :]) ** 2 / 1.5**2)
    np.testing.assert_allclose(exact[0][0][:, 0], K @ y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(exact[0][1][0], K @ K.T, rtol=1e-12, atol=1e-12)
    z = _statistics_noise(exact, noisy, md, 1)
    assert z.shape == (N, 9)
    # the statistics' noise sd: σ_a = σ_b·c, σ_a/Δ the noise multiplier of the event
    assert md["sigma_a"] == pytest.approx(md["ratio_c"] * md["sigma_b"], rel=1e-12)
    assert rel_multiplier_full(md) == pytest.approx(md["noise_multiplier"], rel=1e-9)
    assert_pooled_standard_normal(z, f"noise-aware {secure}")


def rel_multiplier_full(md) -> float:
    if md["noise_source"] == "opendp_discrete_gaussian":
        return md["integer_scale"] / md["integer_sensitivity"]
    return md["sigma_a"] / md["charged_sensitivity"]


@pytest.mark.slow  # 5–10 s per case: run with -m slow
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_dirichlet_statistics_noise_has_the_claimed_law(secure, captured_statistics) -> None:
    from pm_dpgp.mechanisms import dirichlet_release

    exact, noisy = captured_statistics
    pub, _ = _sparse_public()
    X = np.array([-2.5, -1.7, -0.9, -0.2, 0.4, 1.1, 1.8, 2.6])
    lab = np.array([0, 0, 1, 1, 0, 1, 1, 0])
    rng = None if secure else np.random.default_rng(4906)
    N = 300
    for _ in range(N):
        rel = _quiet(
            dirichlet_release, pub, (X, lab), n_classes=2, epsilon=1.0, delta=1e-4, rng=rng
        )
    z = _statistics_noise(exact, noisy, rel.metadata, 2)
    assert z.shape == (N, 18)
    assert_pooled_standard_normal(z, f"dirichlet {secure}")


# ---------------------------------------------------------------------------------------------
# posterior sample paths (the draw is the mechanism)


@pytest.mark.parametrize("eta", [0.0, 0.7])
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "os_entropy"])
def test_sample_paths_have_the_posterior_law(secure, eta) -> None:
    """Posterior paths plus η g, g ~ GP(0, k) with the normalised k (docs/sample_paths.md §1)."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import sample_path_release

    X, y = _data()
    sigma, ls, noise, mu = 1.3, 1.5, 0.6, 0.2
    model = gp_regression(X, y, sigma**2 * pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=noise, mean=mu)
    N = 3000
    rel = _quiet(
        sample_path_release,
        model,
        XS,
        n_draws=N,
        kernel_scale=sigma,
        y_bounds=BOUNDS,
        delta=1e-5,
        ledger=Ledger(),
        domain=(0.0, 6.0),
        eta=eta,
        rng=None if secure else np.random.default_rng(4907),
    )
    vals = rel.evaluate(XS)
    assert vals.shape == (N, 3)

    def k(a, b):
        return sigma**2 * np.exp(-0.5 * (a[:, None, 0] - b[None, :, 0]) ** 2 / ls**2)

    Ky = k(X, X) + noise**2 * np.eye(len(X))
    mean = mu + k(XS, X) @ np.linalg.solve(Ky, y - mu)
    cov = k(XS, XS) - k(XS, X) @ np.linalg.solve(Ky, k(X, XS))
    cov += eta**2 * k(XS, XS) / sigma**2 + rel.metadata["nugget_variance"] * np.eye(3)
    z, _ = whiten(vals, mean, np.linalg.cholesky(cov))
    ps = assert_standard_normal(z)
    # later evaluations at new points are conditionally drawn: the joint law holds too
    X2 = np.array([[1.8], [4.0]])
    v2 = rel.evaluate(X2)
    Xa = np.vstack([XS, X2])
    mean_a = mu + k(Xa, X) @ np.linalg.solve(Ky, y - mu)
    cov_a = k(Xa, Xa) - k(Xa, X) @ np.linalg.solve(Ky, k(X, Xa))
    cov_a += eta**2 * k(Xa, Xa) / sigma**2 + rel.metadata["nugget_variance"] * np.eye(5)
    za, _ = whiten(np.hstack([vals, v2]), mean_a, np.linalg.cholesky(cov_a))
    ps2 = assert_standard_normal(za)
    # re-evaluation returns the same path values (lazy evaluation of one path)
    np.testing.assert_array_equal(rel.evaluate(XS), vals)
    print(
        f"sample paths {secure}: N={N}, min p {min(ps.values()):.3g}, joint {min(ps2.values()):.3g}"
    )


# ---------------------------------------------------------------------------------------------
# selections: the exponential mechanism and the random stopping time


def _em_draws(u, sens, eps, N, secure, seed):
    from pm_dpgp.selection import sample_exponential_mechanism

    rng = None if secure else np.random.default_rng(seed)
    picks = [sample_exponential_mechanism(u, sens, eps, rng=rng) for _ in range(N)]
    return np.bincount(picks, minlength=len(u))


@pytest.mark.slow  # 5–10 s per case: run with -m slow
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_exponential_mechanism_frequencies_and_neighbours(secure) -> None:
    u = np.array([0.0, -0.7, -1.5, -1.0, -0.2])
    sens, eps, N = 0.5, 1.2, 6000 if secure else 12000  # OpenDP: about 1.3 ms a draw
    counts = _em_draws(u, sens, eps, N, secure, 4908)
    w = np.exp(eps * u / (2 * sens))  # eq. (12), written out here
    p = w / w.sum()
    chi = stats.chisquare(counts, N * p)
    assert chi.pvalue > P_MIN, (counts / N, p)
    # adversarial neighbours: candidate 3 gains Δu, every other loses Δu (|u − u′| ≤ Δu):
    # P(3) moves by the largest ratio, at most e^ε
    u1 = u - sens
    u1[3] = u[3] + sens
    c0, c1 = counts, _em_draws(u1, sens, eps, N, secure, 4909)
    a = 1e-6
    fpr_hi = clopper_pearson(int(c0[3]), N, a)[1]
    tpr_lo = clopper_pearson(int(c1[3]), N, a)[0]
    eps_hat = math.log(tpr_lo / fpr_hi)
    assert eps_hat <= eps
    w1 = np.exp(eps * u1 / (2 * sens))
    true = math.log(w1[3] / w1.sum() / p[3])  # 0.97 here
    assert eps_hat > true - 0.6  # the audit has power
    print(
        f"exp mech {secure}: N={N}, chi2 p {chi.pvalue:.3g}; empirical ε ≥ {eps_hat:.3f} "
        f"(true log-ratio {true:.3f}, ε {eps})"
    )


@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_random_stopping_time_is_geometric(secure) -> None:
    from pm_dpgp.selection.liu_talwar import sample_stopping_time, stopping_pmf

    gamma, N = 0.3, 20000
    rng = None if secure else np.random.default_rng(4910)
    k = np.array([sample_stopping_time(gamma, rng) for _ in range(N)])
    edges = np.arange(1, 13)
    obs = np.array([np.sum(k == j) for j in edges[:-1]] + [np.sum(k >= edges[-1])])
    pmf = gamma * (1 - gamma) ** (edges[:-1] - 1.0)  # written out: γ(1 − γ)^{k−1}
    np.testing.assert_allclose(stopping_pmf(edges[:-1], gamma), pmf, rtol=1e-12)
    exp = N * np.append(pmf, 1 - pmf.sum())
    chi = stats.chisquare(obs, exp)
    assert chi.pvalue > P_MIN
    print(
        f"stopping {secure}: N={N}, chi2 p {chi.pvalue:.3g}, mean {k.mean():.3f} "
        f"(1/γ {1 / gamma:.3f})"
    )


# ---------------------------------------------------------------------------------------------
# the tree aggregation of the Thompson-sampling loop (Chan, Shi & Song 2011, Alg. 2)


@pytest.mark.slow  # 5–10 s per case: run with -m slow
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_tree_nodes_and_prefixes_have_the_claimed_noise(secure) -> None:
    from pm_dpgp.mechanisms.full.tree_aggregation import TreeAggregator, plan_tree

    T, dim, N = 4, 3, 1500
    plan = plan_tree(1.0, 1e-5, 2.0, T, dim, secure=secure)
    assert plan.nodes_per_leaf == 3  # ⌈log₂ 4⌉ + 1 nodes contain any one leaf
    leaves = np.arange(T * dim, dtype=np.float64).reshape(T, dim) / 7.0 - 0.4
    rng = None if secure else np.random.default_rng(4911)
    node_z, prefix_z = [], []
    for _ in range(N):
        agg = TreeAggregator(plan, rng)
        pz = []
        for t in range(1, T + 1):
            est, pop = agg.add(leaves[t - 1])
            assert pop == bin(t).count("1")
            pz.append((est - leaves[:t].sum(axis=0)) / (plan.sigma * math.sqrt(pop)))
        W, Y = agg.release_weights()
        node_z.append(((Y - W @ leaves) / plan.sigma).ravel())
        prefix_z.append(np.concatenate(pz))
    node_z, prefix_z = np.array(node_z), np.array(prefix_z)
    ps = assert_standard_normal(node_z)  # 4 nodes × 3: iid N(0, σ²), independent of each other
    for j in range(prefix_z.shape[1]):  # each prefix N(0, popcount σ²)
        assert stats.kstest(prefix_z[:, j], "norm").pvalue > P_MIN
    print(f"tree {secure}: N={N} runs × {T} leaves, node min p {min(ps.values()):.3g}")


@pytest.mark.slow  # 5–10 s per case: run with -m slow
@pytest.mark.parametrize("secure", [False, True], ids=["simulation", "secure"])
def test_one_thompson_tree_round_draws_the_planned_node_noise(secure, monkeypatch) -> None:
    """End to end: the node the loop's first round releases is its leaf plus N(0, σ² I) at the
    σ of the run's metadata, fresh in every run."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms.full import tree_aggregation
    from pm_dpgp.workflow import dp_thompson_sampling_tree

    seen = []
    noisy = tree_aggregation.TreeAggregator._noisy

    def record(self, v):
        out = noisy(self, v)
        seen.append((np.array(v), np.array(out), self.plan.sigma))
        return out

    monkeypatch.setattr(tree_aggregation.TreeAggregator, "_noisy", record)
    N = 40
    for i in range(N):
        res = _quiet(
            dp_thompson_sampling_tree,
            lambda X: np.sin(6 * X[:, 0]),
            pm.gp.cov.ExpQuad(1, ls=0.3),
            domain=(0.0, 1.0),
            X_init=np.array([[0.2], [0.7]]),
            n_rounds=1,
            noise_sd=0.1,
            y_bounds=(-1.0, 1.0),
            ledger=Ledger(epsilon=1.0, delta=1e-5),
            candidates=16,
            progressbar=False,
            rng=None if secure else np.random.default_rng(4912 + i),
        )
    assert len(seen) == N
    sigma = seen[0][2]
    md = res.metadata if hasattr(res, "metadata") else {}
    if "tree_node_sigma" in md:
        assert md["tree_node_sigma"] == sigma
    z = np.array([(out - v) / s for v, out, s in seen])
    np.testing.assert_array_equal(np.array([v for v, _, _ in seen]), np.tile(seen[0][0], (N, 1)))
    p = stats.kstest(z.ravel(), "norm").pvalue
    assert p > P_MIN, (p, z.std())
    assert stats.kstest(np.sum(z**2, axis=1), stats.chi2(z.shape[1]).cdf).pvalue > P_MIN
    assert np.unique(z, axis=0).shape[0] == N  # fresh noise in every run
    print(f"thompson tree {secure}: {N} runs × {z.shape[1]}, pooled KS p {p:.3g}, sd {z.std():.3f}")


# ---------------------------------------------------------------------------------------------
# the Generator behaviour the docs promise (simulation mode)


def test_generator_reproduces_and_never_replays_on_a_ledger() -> None:
    from pm_dpgp.accounting import Ledger

    X, y = _data()
    model = _model("exact", X, y)
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=BOUNDS, n_draws=2)
    a = _quiet(cloaked_release, model, XS, rng=np.random.default_rng(5), **kw)
    b = _quiet(cloaked_release, model, XS, rng=np.random.default_rng(5), **kw)
    np.testing.assert_array_equal(a.draws, b.draws)  # reproducible notebooks
    g = np.random.default_rng(6)
    c = _quiet(cloaked_release, model, XS, rng=g, **kw)
    d = _quiet(cloaked_release, model, XS, rng=g, **kw)
    assert not np.isin(c.draws, d.draws).any()  # one Generator, two calls: fresh noise
    # on a ledger, a Generator state restored to one already used is refused, before any spend
    ledger = Ledger(epsilon=10.0, delta=1e-2)
    g = np.random.default_rng(7)
    state = g.bit_generator.state
    _quiet(cloaked_release, model, XS, rng=g, ledger=ledger, **kw)
    spent = len(ledger.history)
    g.bit_generator.state = state
    with pytest.raises(ValueError):
        _quiet(cloaked_release, model, XS, rng=g, ledger=ledger, **kw)
    assert len(ledger.history) == spent
    assert g.bit_generator.state == state  # nothing drawn
