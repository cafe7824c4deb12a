"""Sample-path RDP bound (Maciazek; REFERENCE §4; docs/sample_paths.md).

Every inequality of the derivation is checked against exact computations: the variance scale V,
the residual bounds B, the RKHS mean sensitivity Δ, ψ's endpoint property, and the full bound
against the exact Rényi divergence of neighbouring posteriors (random and adversarial pairs
are in tests/test_audit.py).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import DEFAULT_ORDERS, Ledger, RdpCurveEvent, rdp_to_epsilon
from pm_dpgp.audit.renyi import (
    constant_kernel,
    eq_kernel,
    exponential_kernel,
    matern32_kernel,
    posterior_renyi_terms,
)
from pm_dpgp.mechanisms.sample_path_bounds import (
    SamplePathBound,
    check_kappa,
    feasible_configurations,
    kernel_lower_bound,
    path_costs,
    paths_affordable,
    psi,
    psi_parts,
)


def _author(*args, **kw) -> SamplePathBound:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return SamplePathBound(*args, constant="author", **kw)


def _core_posterior(kernel, Xc, yc, r2):
    """Core posterior kernel k_c and mean m_c as functions (kernel scale 1)."""
    if len(Xc) == 0:
        return (lambda A, B: kernel(A, B)), (lambda A: np.zeros(len(A)))
    A = kernel(Xc, Xc) + r2 * np.eye(len(Xc))
    Lc = np.linalg.cholesky(A)

    def kc(P, Q):
        WP = np.linalg.solve(Lc, kernel(Xc, P))
        WQ = np.linalg.solve(Lc, kernel(Xc, Q))
        return kernel(P, Q) - WP.T @ WQ

    def mc(P):
        return kernel(P, Xc) @ np.linalg.solve(A, yc)

    return kc, mc


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        {"n": 0},
        {"n": 2.5},
        {"n": True},
        {"sigma": 0.0},
        {"sigma": -1.0},
        {"sigma": math.nan},
        {"r2": 0.0},
        {"r2": math.inf},
        {"y_bound": 0.0},
        {"kappa": -0.1},
        {"kappa": 1.1},
        {"kappa": math.nan},
        {"eta": -0.5},
        {"kernel_class": "rbf"},
        {"constant": "two"},
        {"cov_bound": "tight"},
    ],
)
def test_invalid_parameters_are_refused(kw):
    base = {"n": 10, "sigma": 1.0, "r2": 1.0, "y_bound": 1.0, "kappa": 0.2}
    with pytest.raises(ValueError):
        SamplePathBound(**{**base, **kw})


def test_check_kappa():
    assert check_kappa(0) == 0.0 and check_kappa(1) == 1.0
    for bad in (-1e-9, 1.0 + 1e-9, "x", None):
        with pytest.raises(ValueError):
            check_kappa(bad)


def test_author_constant_warns():
    with pytest.warns(PrivacyWarning, match="not proved"):
        SamplePathBound(5, 1.0, 1.0, 1.0, 0.0, constant="author")


@pytest.mark.parametrize("eta", [0.0, 0.7])
def test_orders_outside_the_valid_range_are_refused(eta):
    b = SamplePathBound(20, 1.3, 0.5, 1.0, 0.3, eta)
    a_max = b.alpha_max
    assert a_max == pytest.approx(1.0 + 1.0 / b.tau)
    if eta == 0.0:
        assert a_max == pytest.approx(1.0 + b.r2 / b.V)
    for bad in (1.0, 0.5, a_max, a_max + 1.0, math.inf, math.nan, [1.5, a_max + 0.1]):
        with pytest.raises(ValueError, match="outside the valid range"):
            b.rdp(bad)
        with pytest.raises(ValueError):
            b.mean_term(bad)
    ok = np.array([1.0 + 1e-6, 0.5 * (1 + a_max), a_max - 1e-9 * (a_max - 1)])
    assert np.all(np.isfinite(b.rdp(ok)))
    # ledger events carry the range: orders outside are refused, the curve is +inf there
    with pytest.raises(ValueError):
        b.event(orders=[1.5 * a_max])
    with pytest.raises(ValueError):
        RdpCurveEvent((1.1, a_max + 0.5), (1.0, 2.0), alpha_max=a_max)
    ev = b.event(L=3)
    assert ev.alpha_max == a_max and ev.count == 3
    assert np.isinf(ev.rdp([a_max, a_max * 2])).all()


# --------------------------------------------------------------------------------------------
# the building blocks
# --------------------------------------------------------------------------------------------
def test_closed_forms():
    b = SamplePathBound(11, 0.8, 0.5, 2.0, 0.4)
    V = 1 - 0.16 * 10 / 10.5
    assert b.V == pytest.approx(V)
    assert b.Phi == pytest.approx(1 / (4 * 0.5))  # V ≥ r²
    assert b.B == pytest.approx(2.0 * (1 + math.sqrt(10) / math.sqrt(0.5)))
    assert b.Delta == pytest.approx(2 * b.B * math.sqrt(b.Phi))
    assert b.tau == pytest.approx(V / 0.5)
    small_v = SamplePathBound(11, 0.8, 5.0, 2.0, 0.9)
    assert small_v.V < 5.0 and small_v.Phi == pytest.approx(small_v.V / (small_v.V + 5.0) ** 2)
    assert _author(11, 0.8, 0.5, 2.0, 0.4).Delta == pytest.approx(b.Delta / math.sqrt(2))
    # exponential kernel: B = min(2M, generic); constant kernel: B = M
    assert SamplePathBound(11, 1, 0.5, 2.0, 0.4, kernel_class="exponential_1d").B == 4.0
    assert SamplePathBound(1, 1, 0.5, 2.0, 0.4, kernel_class="exponential_1d").B == 2.0
    assert SamplePathBound(11, 1, 0.5, 2.0, 1.0, kernel_class="constant").B == 2.0
    # extra noise: τ = σ²V/(σ²r² + η²(V+r²))
    e = SamplePathBound(11, 0.8, 0.5, 2.0, 0.4, eta=1.5)
    assert e.tau == pytest.approx(0.64 * V / (0.64 * 0.5 + 2.25 * (V + 0.5)))


@pytest.mark.parametrize("tau", [1e-3, 0.2, 1.0, 7.0])
def test_psi_is_the_maximum_over_the_eigenvalue_range(tau):
    """g(λ) is maximised over [1/(1+τ), 1+τ] at an endpoint (docs, SP6)."""
    for frac in (0.01, 0.3, 0.9, 0.999):
        alpha = 1.0 + frac / tau
        lam = np.linspace(1.0 / (1.0 + tau), 1.0 + tau, 20001)
        g = (alpha * np.log(lam) - np.log(1.0 + alpha * (lam - 1.0))) / (2.0 * (alpha - 1.0))
        assert psi(alpha, tau) == pytest.approx(g.max(), rel=1e-9, abs=1e-15)
        hi, lo = psi_parts(alpha, tau)
        assert hi == pytest.approx(g[-1], rel=1e-9, abs=1e-15)
        assert lo == pytest.approx(g[0], rel=1e-9, abs=1e-15)
        # REFERENCE's formula written literally
        ref = max(
            0.5 * math.log(1 + tau) - math.log((1 + alpha * tau) / (1 + tau)) / (2 * (alpha - 1)),
            -0.5 * math.log(1 + tau) - math.log(1 - tau * (alpha - 1)) / (2 * (alpha - 1)),
        )
        assert psi(alpha, tau) == pytest.approx(ref, rel=1e-7, abs=1e-12)


def test_rdp_formula_and_reduction_at_eta_zero():
    b = SamplePathBound(30, 0.7, 2.0, 1.0, 0.2)
    a = np.linspace(1.01, b.alpha_max - 1e-3, 50)
    literal = (
        2 * psi(a, b.V / b.r2)
        + a / 2 * (b.V + b.r2) / (b.r2 - (a - 1) * b.V) * (b.Delta / b.sigma) ** 2
    )
    np.testing.assert_allclose(b.rdp(a), literal, rtol=1e-12)
    np.testing.assert_allclose(b.rdp(a), b.cov_term(a) + b.mean_term(a), rtol=1e-14)
    inert = SamplePathBound(30, 0.7, 2.0, 1.0, 0.2, cov_bound="inertia")
    assert np.all(inert.cov_term(a) <= b.cov_term(a) + 1e-15)
    assert np.all(inert.cov_term(a) >= 0.5 * b.cov_term(a) - 1e-15)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 12),
    r2=st.floats(0.01, 10.0),
    ls=st.floats(0.1, 3.0),
    kernel=st.sampled_from(["eq", "matern32", "exponential"]),
)
def test_variance_scale_and_residual_bounds(seed, n, r2, ls, kernel):
    """k_c(x,x) ≤ V, |y − m_c(x)| ≤ B, and the RKHS norm of Δm is ≤ Δ (SP1, SP3, SP4)."""
    rng = np.random.default_rng(seed)
    k = {
        "eq": eq_kernel(ls),
        "matern32": matern32_kernel(ls),
        "exponential": exponential_kernel(ls),
    }[kernel]
    cls = "exponential_1d" if kernel == "exponential" else "generic"
    kappa = kernel_lower_bound(k, (0.0, 1.0), assume_monotone=True)
    b = SamplePathBound(n, 1.0, r2, 1.0, kappa, kernel_class=cls)
    Xc = rng.uniform(0, 1, (n - 1, 1))
    if n > 2 and seed % 3 == 0:
        Xc[: n // 2] = Xc[0]  # repeated inputs
    yc = rng.choice([-1.0, 1.0], n - 1) if seed % 2 else rng.uniform(-1, 1, n - 1)
    kc, mc = _core_posterior(k, Xc, yc, r2)
    P = rng.uniform(0, 1, (2, 1))
    v = np.diag(kc(P, P))
    assert np.all(v <= b.V * (1 + 1e-10) + 1e-12)
    y = rng.choice([-1.0, 1.0], 2)
    resid = np.abs(y - mc(P))
    assert np.all(resid <= b.B * (1 + 1e-10))
    # Δm = a k_c(·,x) − b k_c(·,x'): ‖Δm‖² = a²v + b²v' − 2ab k_c(x,x')
    coef = (y - mc(P)) / (v + r2)
    c = kc(P, P)[0, 1]
    norm2 = coef[0] ** 2 * v[0] + coef[1] ** 2 * v[1] - 2 * coef[0] * coef[1] * c
    assert math.sqrt(max(norm2, 0.0)) <= b.Delta * (1 + 1e-10)
    if cls == "exponential_1d":  # Lemma B.6: the OU posterior mean is bounded by max |y|
        grid = np.linspace(-0.5, 1.5, 201)[:, None]
        assert np.all(np.abs(mc(grid)) <= 1.0 + 1e-10)


def test_variance_scale_is_attained():
    """V is exact when k(x,x) = 1: n−1 core copies at one end, x at the other (SP1)."""
    k = eq_kernel(0.4)
    kappa = kernel_lower_bound(k, (0.0, 1.0))
    for n, r2 in [(2, 0.3), (10, 1.0), (50, 4.0)]:
        kc, _ = _core_posterior(k, np.zeros((n - 1, 1)), np.zeros(n - 1), r2)
        v = kc(np.ones((1, 1)), np.ones((1, 1)))[0, 0]
        assert v == pytest.approx(SamplePathBound(n, 1, r2, 1, kappa).V, rel=1e-10)


def test_constant_kernel_mean_sensitivity_is_exact():
    """k ≡ 1: Δm is the constant V(y−y')/(V+r²), RKHS norm |y−y'|√V/(V+r²) = 2M√Φ at y=−y'=M."""
    for n, r2 in [(1, 2.0), (5, 0.5), (40, 3.0)]:
        b = SamplePathBound(n, 1.0, r2, 1.5, 1.0, kernel_class="constant")
        kc, _ = _core_posterior(constant_kernel(), np.zeros((n - 1, 1)), np.zeros(n - 1), r2)
        V = kc(np.zeros((1, 1)), np.zeros((1, 1)))[0, 0]
        sens = 3.0 * math.sqrt(V) / (V + r2)
        if V <= r2:
            assert b.Delta == pytest.approx(sens, rel=1e-10)
        else:  # n = 1, r² < 1: Φ = 1/(4r²) is an upper bound
            assert b.Delta >= sens
        assert _author(n, 1.0, r2, 1.5, 1.0, kernel_class="constant").Delta < sens


# --------------------------------------------------------------------------------------------
# the bound against exact divergences (structured worst cases; search: tests/test_audit.py)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kernel", "cls", "n", "sigma", "r2"),
    [
        (eq_kernel(0.3), "generic", 1, 0.5, 4.0),
        (exponential_kernel(0.3), "exponential_1d", 1, 0.5, 4.0),
        (constant_kernel(), "constant", 6, 0.5, 2.0),
        (constant_kernel(), "constant", 30, 0.3, 1.0),
    ],
)
def test_mean_term_is_tight_and_the_author_constant_is_violated(kernel, cls, n, sigma, r2):
    """Same input, opposite responses y = −y' = M_Y, T = {x}: the covariances coincide, the
    exact divergence is all mean part, and → the proved mean term as α → 1.  The author's
    √2 constant falls below the exact divergence (documented counter-example)."""
    kappa = 1.0 if cls == "constant" else kernel_lower_bound(kernel, (0.0, 1.0))
    proved = SamplePathBound(n, sigma, r2, 1.0, kappa, kernel_class=cls)
    author = _author(n, sigma, r2, 1.0, kappa, kernel_class=cls)
    Xc = np.ones((n - 1, 1))  # core far from x = 0 (for the constant kernel it does not matter)
    X1 = np.vstack([Xc, [[0.0]]])
    yc = np.zeros(n - 1)
    alpha = 1.0 + 0.02 * (proved.alpha_max - 1.0)
    t = posterior_renyi_terms(
        kernel, X1, np.append(yc, 1.0), X1, np.append(yc, -1.0), [[0.0]],
        alpha=alpha, sigma=sigma, r2=r2,
    )  # fmt: skip
    assert t.cov == pytest.approx(0.0, abs=1e-12)
    assert t.total <= proved.rdp(alpha)
    assert t.mean <= proved.mean_term(alpha)
    assert t.mean >= 0.95 * proved.mean_term(alpha)  # tight
    assert t.total > author.rdp(alpha)  # the author's constant is violated
    assert t.mean > 1.9 * author.mean_term(alpha)


def test_inertia_covariance_term_is_attained():
    """x, x' far apart (k ≈ 0), T = {x, x'}, n = 1: one eigenvalue at each end of
    [1/(1+τ), 1+τ]; the exact covariance part reaches g(1+τ) + g(1/(1+τ)) < 2ψ."""
    k = eq_kernel(0.05)
    b = SamplePathBound(1, 1.0, 0.5, 1.0, 0.0, cov_bound="inertia")
    paper = SamplePathBound(1, 1.0, 0.5, 1.0, 0.0)
    for frac in (0.05, 0.5, 0.9):
        alpha = 1.0 + frac * (b.alpha_max - 1.0)
        t = posterior_renyi_terms(
            k, [[0.0]], [0.0], [[1.0]], [0.0], [[0.0], [1.0]], alpha=alpha, sigma=1.0, r2=0.5
        )
        assert t.mean == 0.0
        assert t.cov <= b.cov_term(alpha) * (1 + 1e-9)
        assert t.cov >= 0.999 * b.cov_term(alpha)
        assert t.cov < 0.9 * paper.cov_term(alpha)  # the paper's 2ψ is loose here


# --------------------------------------------------------------------------------------------
# monotonicity and conversion
# --------------------------------------------------------------------------------------------
def _eps(delta=1e-5, L=1, **kw):
    base = {"n": 50, "sigma": 1.0, "r2": 5.0, "y_bound": 1.0, "kappa": 0.1, "eta": 0.0}
    return SamplePathBound(**{**base, **kw}, kernel_class="exponential_1d").epsilon(delta, L)


def test_monotonicity():
    r2s = [0.5, 1.0, 2.0, 5.0, 20.0, 100.0]
    e = [_eps(r2=r) for r in r2s]
    assert all(a > b for a, b in zip(e, e[1:], strict=False)), e
    etas = [0.0, 0.1, 0.5, 1.0, 3.0]
    e = [_eps(eta=h) for h in etas]
    assert all(a > b for a, b in zip(e, e[1:], strict=False)), e
    sigmas = [0.1, 0.3, 1.0, 3.0, 10.0]
    e = [_eps(sigma=s) for s in sigmas]
    assert all(a > b for a, b in zip(e, e[1:], strict=False)), e
    Ls = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    e = [_eps(L=L) for L in Ls]
    assert all(a < b for a, b in zip(e, e[1:], strict=False)), e
    # sub-linear growth after the optimal conversion
    assert all(e2 < 2 * e1 for e1, e2 in zip(e, e[1:], strict=False))
    per_path = [x / L for x, L in zip(e, Ls, strict=True)]
    assert all(a > b for a, b in zip(per_path, per_path[1:], strict=False))
    # the RDP curve itself is pointwise monotone
    b1 = SamplePathBound(50, 1.0, 5.0, 1.0, 0.1)
    b2 = SamplePathBound(50, 1.0, 6.0, 1.0, 0.1, eta=0.3)
    a = np.linspace(1.01, b1.alpha_max - 1e-6, 100)
    assert np.all(b2.rdp(a) < b1.rdp(a))


def test_sigma_monotonicity_needs_eta_zero():
    """With extra noise, a larger σ raises the covariance share τ and can raise ε (docs)."""
    e = [_eps(sigma=s, eta=2.0, r2=2.0) for s in (0.3, 3.0)]
    assert e[1] > e[0]


def test_epsilon_is_the_optimal_conversion():
    b = SamplePathBound(100, 1.0, 10.0, 1.0, 0.05, kernel_class="exponential_1d")
    for L in (1, 7):
        eps, a_star = b.epsilon_and_order(1e-6, L)
        assert 1.0 < a_star < b.alpha_max
        dense = np.linspace(1.0101, b.alpha_max * (1 - 1e-9), 20000)
        brute = rdp_to_epsilon(dense, L * b.rdp(dense), 1e-6)
        assert eps <= brute + 1e-9
        assert eps >= brute - 1e-3 * brute
        # Mironov's conversion (the paper's) is never better
        mironov = np.min(L * b.rdp(dense) + math.log(1e6) / (dense - 1))
        assert eps <= mironov
        # the ledger composes the event to (nearly) the same ε: its grid is coarser
        ledger = Ledger(delta=1e-6)
        ledger.spend(b.event(L, label="paths"))
        assert ledger.epsilon() >= eps - 1e-9
        assert ledger.epsilon() <= 1.05 * eps
        assert b.event(L).epsilon(1e-6) == pytest.approx(ledger.epsilon(), rel=1e-9)


def test_tiny_valid_range_gives_infinite_epsilon():
    """α_max ≤ 1.01: dp_accounting's conversion has no order there; ε = +inf, not an error."""
    b = SamplePathBound(5, 1.0, 0.005, 1.0, 0.0)
    assert b.alpha_max < 1.01
    assert math.isinf(b.epsilon(1e-5))
    assert np.all(np.isinf(b.event().rdp(DEFAULT_ORDERS)))


def test_adaptive_composition_in_the_ledger():
    """L paths (e.g. Thompson sampling rounds) = L spends of the one-path event = count L."""
    b = SamplePathBound(40, 2.0, 8.0, 1.0, 0.1, kernel_class="exponential_1d")
    one_by_one = Ledger(delta=1e-5)
    for _ in range(5):
        one_by_one.spend(b.event(1))
    at_once = Ledger(delta=1e-5)
    at_once.spend(b.event(5))
    assert one_by_one.epsilon() == pytest.approx(at_once.epsilon(), rel=1e-12)


# --------------------------------------------------------------------------------------------
# planning helpers
# --------------------------------------------------------------------------------------------
def test_feasible_configurations():
    sigmas, r2s, etas = [0.5, 1.0, 2.0], [1.0, 5.0, 20.0, 80.0], [0.0, 1.0]
    out = feasible_configurations(
        n=100, y_bound=1.0, kappa=0.05, epsilon=3.0, delta=1e-5,
        sigmas=sigmas, r2s=r2s, etas=etas, L=2, kernel_class="exponential_1d",
    )  # fmt: skip
    got = {(c.sigma, c.r2, c.eta) for c in out}
    assert got, "some configuration must be feasible"
    for s in sigmas:
        for r2 in r2s:
            for eta in etas:
                b = SamplePathBound(100, s, r2, 1.0, 0.05, eta, "exponential_1d")
                eps = b.epsilon(1e-5, 2)
                assert ((s, r2, eta) in got) == (eps <= 3.0)
    for c in out:
        assert c.epsilon <= 3.0 and 1.0 < c.alpha < c.bound.alpha_max
    with pytest.raises(ValueError):
        feasible_configurations(
            n=10, y_bound=1, kappa=0, epsilon=1, delta=1e-5, sigmas=[], r2s=[1.0]
        )
    with pytest.raises(ValueError):
        feasible_configurations(
            n=10, y_bound=1, kappa=0, epsilon=1, delta=1e-5, sigmas=[1.0], r2s=[-1.0]
        )


def test_paths_affordable():
    b = SamplePathBound(200, 1.0, 30.0, 1.0, 0.05, kernel_class="exponential_1d")
    L = paths_affordable(b, 4.0, 1e-5)
    assert L >= 1
    assert b.epsilon(1e-5, L) <= 4.0 < b.epsilon(1e-5, L + 1)
    assert paths_affordable(b, 1e-3, 1e-5) == 0
    assert paths_affordable(b, 1e6, 1e-5, L_max=50) == 50
    costs = path_costs(b, 1e-5, [1, L, L + 1])
    assert costs[1] <= 4.0 < costs[2] and costs[0] < costs[1]


# --------------------------------------------------------------------------------------------
# κ from a kernel and a domain
# --------------------------------------------------------------------------------------------
def test_kernel_lower_bound():
    assert kernel_lower_bound(eq_kernel(0.5), (0, 1)) == pytest.approx(math.exp(-2))
    ard = kernel_lower_bound(eq_kernel([0.5, 2.0]), [(0, 1), (0, 2)])
    assert ard == pytest.approx(math.exp(-0.5 * (4 + 1)))
    iso = kernel_lower_bound(matern32_kernel(1.0), [(0, 1), (0, 1)], assume_monotone=True)
    s = math.sqrt(3) * math.sqrt(2)
    assert iso == pytest.approx((1 + s) * math.exp(-s))
    assert kernel_lower_bound(exponential_kernel(0.25), (2, 3)) == pytest.approx(math.exp(-4))
    assert kernel_lower_bound(constant_kernel(), [(0, 5), (0, 5)]) == 1.0

    def cos5(A, B):
        return np.cos(5 * (np.asarray(A)[:, None, 0] - np.asarray(B)[None, :, 0]))

    with pytest.raises(ValueError, match="not minimised at a corner"):
        kernel_lower_bound(cos5, (0, 1))

    def non_stationary(A, B):
        return np.exp(-np.abs(np.asarray(A)[:, None, 0] ** 2 - np.asarray(B)[None, :, 0] ** 2))

    with pytest.raises(ValueError, match="stationary"):
        kernel_lower_bound(non_stationary, (0, 2))
    with pytest.raises(ValueError, match="k\\(x, x\\) <= 1"):
        kernel_lower_bound(lambda A, B: 2 * eq_kernel(1.0)(A, B), (0, 2))
    with pytest.raises(ValueError, match="domain"):
        kernel_lower_bound(eq_kernel(1.0), (1, 0))
    with pytest.raises(ValueError, match="domain"):
        kernel_lower_bound(eq_kernel(1.0), (0, math.inf))


def test_metadata_is_json():
    import json

    b = SamplePathBound(10, 1.0, 2.0, 1.0, 0.3, eta=0.5, kernel_class="exponential_1d")
    meta = json.loads(json.dumps(b.to_metadata()))
    assert meta["alpha_max"] == pytest.approx(b.alpha_max)
    assert meta["constant"] == "proved" and meta["privacy_model"].startswith("full")
