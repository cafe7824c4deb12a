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
import scipy.linalg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import DEFAULT_ORDERS, Ledger, RdpCurveEvent, rdp_to_epsilon
from pm_dpgp.audit.renyi import (
    constant_kernel,
    eq_kernel,
    exponential_kernel,
    matern32_kernel,
    posterior_mean_cov,
    posterior_renyi_terms,
)
from pm_dpgp.mechanisms.full.sample_path_bounds import (
    SamplePathBound,
    check_kappa,
    coupled_sensitivity,
    feasible_configurations,
    kernel_lower_bound,
    path_costs,
    paths_affordable,
    psi,
    psi_parts,
)
from tests.tolerances import cond_rtol, scalar_rtol


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
# round-off bounds for comparisons with the bound and with exact divergences (also used by
# tests/test_audit.py); the rules are those of tests/tolerances.py
# --------------------------------------------------------------------------------------------
def g_roundoff(alpha, lam):
    """Absolute round-off bound of ``g(λ) = [α ln λ − ln(1 + α(λ−1))] / (2(α−1))``.

    Valid however ``g`` is written (ψ's log1p form, the grid formula, REFERENCE's literal
    form): each logarithm is off by a few EPS times its value plus the relative rounding of
    its argument (``λ`` itself, ``2·EPS``, amplified by ``α λ / (1 + α(λ−1))``), and the
    difference is divided by ``2(α−1)``.  That tracks the two cancellations of the formula:
    near ``α = 1`` and near ``1 + α(λ−1) = 0`` (``β = (α−1)τ → 1`` at ``λ = 1/(1+τ)``).
    ``scalar_rtol(4)`` per term: a handful of flops each.
    """
    a = np.asarray(alpha, dtype=np.float64)
    lam = np.asarray(lam, dtype=np.float64)
    arg = 1.0 + a * (lam - 1.0)
    mags = a * np.abs(np.log(lam)) + np.abs(np.log(arg)) + a
    mags = mags + (1.0 + a * lam + a * np.abs(lam - 1.0)) / arg
    return scalar_rtol(4) * mags / (2.0 * (a - 1.0))


def bound_roundoff(b: SamplePathBound, alpha):
    """``(err_mean, err_cov)``: absolute round-off bounds of ``b.mean_term(α)``, ``b.cov_term(α)``.

    ``V = 1 − κ²m/(m+r²)`` cancels (condition ``(1 + κ²m/(m+r²))/V``) and ``τ = σ²V/A``
    inherits it; ``g`` at the endpoints ``(1+τ)^{±1}`` moves with τ at rate
    ``ατ/(2(1+τ)(1+ατ))`` resp. ``ατ/(2(1+τ)(1−β))``; the mean term
    ``(α/2)(V+r²)/(A(1−β))Δ²`` is ~20 flops with ``1 − β`` cancelling (condition
    ``(1+β)/(1−β)``).  Any other evaluation of the same formulas (the literal ones below) obeys
    the same bound.
    """
    a = np.asarray(alpha, dtype=np.float64)
    tau, m = b.tau, b.n - 1
    e_tau = scalar_rtol(8) * (1.0 + b.kappa**2 * m / (m + b.r2)) / b.V
    beta = (a - 1.0) * tau
    e_hi = g_roundoff(a, 1.0 + tau) + e_tau * tau * a * tau / (2 * (1 + tau) * (1 + a * tau))
    e_lo = g_roundoff(a, 1.0 / (1.0 + tau)) + e_tau * tau * a * tau / (2 * (1 + tau) * (1 - beta))
    err_cov = 2.0 * np.maximum(e_hi, e_lo) if b.cov_bound == "paper" else e_hi + e_lo
    cancel = (1.0 + beta) / (1.0 - beta)
    err_mean = b.mean_term(a) * (scalar_rtol(20) + 3 * e_tau + (scalar_rtol(2) + e_tau) * cancel)
    return err_mean, err_cov


def gaussian_renyi_roundoff(mu1, S1, mu2, S2, alpha, *, err_mu=0.0, err_S=(0.0, 0.0)):
    """``(err_mean, err_cov)``: first-order round-off bounds of the parts of
    :func:`pm_dpgp.audit.renyi.gaussian_renyi_terms`, given input errors ``‖δμ_1‖ + ‖δμ_2‖ ≤
    err_mu`` and ``‖δΣ_i‖ ≤ err_S[i]``.

    * Evaluation (Cholesky of ``Σ_1``, whitening, ``eigh``; on the common support when a
      test point is repeated): backward stable, i.e. ``4k·EPS·(‖Σ_1‖+‖Σ_2‖)(1+‖E‖)`` more on
      each ``δΣ_i`` (``E`` the whitened difference, eigenvalues ``δ_j``, ``k`` the dimension).
    * Sensitivities (exact first-order derivatives): the mean part ``(α/2)dᵀΣ_α⁻¹d`` moves by
      ``α‖Σ_α⁻¹d‖‖δd‖ + (α/2)‖Σ_α⁻¹d‖²‖δΣ_α‖``; the covariance part has gradients
      ``(α/2)Σ_α⁻¹(Σ_1−Σ_2)Σ_1⁻¹`` and ``(α/2)Σ_α⁻¹(Σ_2−Σ_1)Σ_2⁻¹`` (no ``1/(α−1)``: it
      cancels), and its evaluation ``Σ_j[α log1p δ_j − log1p(αδ_j)]/(2(α−1))`` adds the
      rounding of the logarithms divided by ``2(α−1)``.
    """
    a = float(alpha)
    mu1, mu2 = np.asarray(mu1, dtype=np.float64), np.asarray(mu2, dtype=np.float64)
    S1, S2 = np.asarray(S1, dtype=np.float64), np.asarray(S2, dtype=np.float64)
    S1, S2 = 0.5 * (S1 + S1.T), 0.5 * (S2 + S2.T)
    # the common support, as gaussian_renyi_terms takes it (all of R^m unless Σ_1 is singular)
    lam, U = np.linalg.eigh(0.5 * (S1 + S2))
    try:
        piv = np.diag(np.linalg.cholesky(S1)) ** 2
        full = np.min(piv) > 1e-11 * np.max(piv)
    except np.linalg.LinAlgError:
        full = False
    if not full:
        U = U[:, lam > 1e-11 * lam[-1]]
    P1, P2, d = U.T @ S1 @ U, U.T @ S2 @ U, U.T @ (mu1 - mu2)
    k = P1.shape[0]
    delta = scipy.linalg.eigh(P2, P1, eigvals_only=True) - 1.0
    alg = scalar_rtol(k) * (np.linalg.norm(P1, 2) + np.linalg.norm(P2, 2))
    alg *= 1.0 + np.max(np.abs(delta))
    e1, e2 = err_S[0] + alg, err_S[1] + alg
    Sa = a * P2 + (1.0 - a) * P1
    v = np.linalg.solve(Sa, d)
    err_mean = a * np.linalg.norm(v) * err_mu + 0.5 * a * (v @ v) * (a * e2 + (a - 1) * e1)
    mean = 0.5 * a * (d @ v)
    err_mean += mean * scalar_rtol(k + 4) * np.max(1.0 + a * np.abs(delta) / (1.0 + a * delta))
    G1 = np.linalg.solve(Sa, (P1 - P2) @ np.linalg.inv(P1))
    G2 = np.linalg.solve(Sa, (P2 - P1) @ np.linalg.inv(P2))
    err_cov = 0.5 * a * k * (np.linalg.norm(G1, 2) * e1 + np.linalg.norm(G2, 2) * e2)
    # second order (the first vanishes at Σ_1 = Σ_2): |h''(δ)| ≤ α(1 + αδ²)/(2γ²), with
    # γ = (1+δ)(1+αδ) and |δδ_j| ≤ ‖δE‖ ≤ ((1+‖E‖)‖δΣ_1‖ + ‖δΣ_2‖)/λ_min(Σ_1) (Weyl)
    e_E = ((1.0 + np.max(np.abs(delta))) * e1 + e2) / np.linalg.eigvalsh(P1)[0]
    gamma = np.min((1.0 + delta) * (1.0 + a * delta))
    err_cov += 0.25 * a * k * (1.0 + a * np.max(delta**2)) * e_E**2 / gamma**2
    logs = a * np.abs(np.log1p(delta)) + np.abs(np.log1p(a * delta))
    logs = logs + 2.0 * a * (np.abs(delta) + e_E) / (1.0 + a * delta)
    err_cov += scalar_rtol(2) * np.sum(logs) / (2.0 * (a - 1.0))
    return float(err_mean), float(err_cov)


def renyi_roundoff(kernel, data1, data2, X_test, *, alpha, kernel_scale, r2, eta=0.0, L=1):
    """``(err_mean, err_cov)``: round-off bounds of the exact divergence parts computed by
    :func:`pm_dpgp.audit.renyi.posterior_renyi_terms` (``L`` paths); a list of them if
    ``alpha`` is a sequence of orders (the posteriors are computed once).

    The posteriors come from one Cholesky solve with ``A_i = K_i + r²I`` each, forward error
    ``ρ_i = cond_rtol(A_i)`` (Higham 2002, Thms 7.2, 10.4) plus ``(n+m)`` flops of products:
    ``‖δμ_i‖ ≤ ρ_i ‖K_TX‖ ‖A_i⁻¹y_i‖`` and ``‖δΣ_i‖ ≤ (σ²+η²) ρ_i ‖K_TT‖``
    (``K_TX A⁻¹ K_XT ≼ K_TT``); :func:`gaussian_renyi_roundoff` carries them through.
    """
    sigma = kernel_scale
    T = np.asarray(X_test, dtype=np.float64).reshape(len(X_test), -1)
    K_tt = kernel(T, T)
    mus, covs, err_mu, err_S = [], [], 0.0, []
    for X, y in (data1, data2):
        X = np.asarray(X, dtype=np.float64).reshape(len(y), -1)
        A = kernel(X, X) + r2 * np.eye(len(y))
        rho = cond_rtol(A) + scalar_rtol(len(y) + len(T))
        mu, S = posterior_mean_cov(kernel, X, y, T, kernel_scale=sigma, r2=r2, eta=eta)
        mus.append(mu)
        covs.append(S)
        err_mu += rho * np.linalg.norm(kernel(T, X), 2) * np.linalg.norm(np.linalg.solve(A, y))
        err_S.append((sigma**2 + eta**2) * rho * np.linalg.norm(K_tt, 2))
    out = []
    for a in np.atleast_1d(alpha):
        err_mean, err_cov = gaussian_renyi_roundoff(
            mus[0], covs[0], mus[1], covs[1], a, err_mu=err_mu, err_S=err_S
        )
        out.append((L * err_mean, L * err_cov))
    return out if np.ndim(alpha) else out[0]


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        {"n": 0},
        {"n": 2.5},
        {"n": True},
        {"kernel_scale": 0.0},
        {"kernel_scale": -1.0},
        {"kernel_scale": math.nan},
        {"r2": 0.0},
        {"r2": math.inf},
        {"M_Y": 0.0},
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
    base = {"n": 10, "kernel_scale": 1.0, "r2": 1.0, "M_Y": 1.0, "kappa": 0.2}
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
    b = SamplePathBound(11, 0.8, 0.5, 2.0, 0.4, sensitivity="paper")
    assert SamplePathBound(11, 0.8, 0.5, 2.0, 0.4).sensitivity == "coupled"  # the default
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
        # Scalar formulas with cancellation (near α = 1 and near β = 1): ψ's log1p form and
        # the grid formula are two evaluations of g at the endpoints, each within g_roundoff
        # of the exact value; max is 1-Lipschitz, so ψ and the grid maximum obey the larger.
        tol_hi, tol_lo = 2 * g_roundoff(alpha, lam[-1]), 2 * g_roundoff(alpha, lam[0])
        tol = max(tol_hi, tol_lo)
        assert abs(psi(alpha, tau) - g.max()) <= tol
        hi, lo = psi_parts(alpha, tau)
        assert abs(hi - g[-1]) <= tol_hi
        assert abs(lo - g[0]) <= tol_lo
        # REFERENCE's formula written literally (the same g, so the same bound)
        ref = max(
            0.5 * math.log(1 + tau) - math.log((1 + alpha * tau) / (1 + tau)) / (2 * (alpha - 1)),
            -0.5 * math.log(1 + tau) - math.log(1 - tau * (alpha - 1)) / (2 * (alpha - 1)),
        )
        assert abs(psi(alpha, tau) - ref) <= tol
        # not vacuous: ψ off by 1e-4 (relative) fails both comparisons
        for other in (g.max(), ref):
            assert abs(psi(alpha, tau) * (1 + 1e-4) - other) > tol


def test_rdp_formula_and_reduction_at_eta_zero():
    b = SamplePathBound(30, 0.7, 2.0, 1.0, 0.2, cov_bound="paper")
    a = np.linspace(1.01, b.alpha_max - 1e-3, 50)
    literal = (
        2 * psi(a, b.V / b.r2)
        + a / 2 * (b.V + b.r2) / (b.r2 - (a - 1) * b.V) * (b.Delta / b.kernel_scale) ** 2
    )
    # two evaluations of one closed form (τ = σ²V/(σ²r²) vs V/r², 1 − β vs r² − (α−1)V): each
    # within bound_roundoff (cancellation in V, near α = 1 and in 1 − β → 0 at α → α_max)
    err_mean, err_cov = bound_roundoff(b, a)
    tol = 2 * (err_mean + err_cov)
    assert np.all(np.abs(b.rdp(a) - literal) <= tol)
    assert np.all(np.abs(b.rdp(a) * (1 + 1e-4) - literal) > tol)  # a 1e-4 error is caught
    # rdp is cov_term + mean_term by the same operations: bitwise equal on any machine
    np.testing.assert_allclose(b.rdp(a), b.cov_term(a) + b.mean_term(a), rtol=1e-14)
    inert = SamplePathBound(30, 0.7, 2.0, 1.0, 0.2)  # the default covariance term
    assert inert.cov_bound == "inertia"
    # exact in floating point, no slack: both use the same psi_parts values hi, lo ≥ 0, and
    # rounding is monotone, so max ≤ fl(hi + lo) ≤ 2·max (×2 and ×0.5 are exact)
    assert np.all(inert.cov_term(a) <= b.cov_term(a))
    assert np.all(inert.cov_term(a) >= 0.5 * b.cov_term(a))


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
    # Slack = round-off of the computed side (class: "bound ≥ value from a solve").  k_c and
    # m_c come from one solve with A = k(X_c, X_c) + r²I: forward error ρ = cond_rtol(A)
    # (+ products); |k| ≤ 1 and k_xᵀA⁻¹k_x ≤ 1 give |δk_c| ≤ 2ρ, and |δm_c(x)| ≤ ρ‖k_x‖‖A⁻¹y_c‖.
    # The bound's own round-off: V = 1 − κ²m/(m+r²) cancels (absolute error e_V); B, Δ are a
    # few flops on top (scalar_rtol).
    if n > 1:
        A = k(Xc, Xc) + r2 * np.eye(n - 1)
        rho = cond_rtol(A) + scalar_rtol(n)
        a_norm = np.linalg.norm(np.linalg.solve(A, yc))
    else:
        rho, a_norm = scalar_rtol(1), 0.0
    e_V = scalar_rtol(8) * (1.0 + kappa**2 * (n - 1) / (n - 1 + r2))
    P = rng.uniform(0, 1, (2, 1))
    v = np.diag(kc(P, P))
    assert np.all(v <= b.V + e_V + 2 * rho)
    y = rng.choice([-1.0, 1.0], 2)
    e_m = rho * math.sqrt(max(n - 1, 1)) * a_norm  # ‖k_x‖ ≤ √(n−1)
    resid = np.abs(y - mc(P))
    assert np.all(resid <= b.B * (1 + scalar_rtol(6)) + e_m)
    # Δm = a k_c(·,x) − b k_c(·,x'): ‖Δm‖² = a²v + b²v' − 2ab k_c(x,x')
    coef = (y - mc(P)) / (v + r2)
    c = kc(P, P)[0, 1]
    norm2 = coef[0] ** 2 * v[0] + coef[1] ** 2 * v[1] - 2 * coef[0] * coef[1] * c
    # first-order propagation: δcoef ≤ (e_m + |coef|·2ρ)/(v + r²), δG ≤ 2ρ per entry of the
    # 2×2 Gram matrix G = k_c(P, P) (Frobenius ≤ 4ρ); |√a − √b| ≤ |a − b| / max(√a, √|a − b|)
    G = kc(P, P)
    d_coef = (e_m + np.abs(coef) * 2 * rho) / (v + r2)
    coef_n = np.linalg.norm(coef)
    d_norm2 = 2 * coef_n * np.linalg.norm(G, 2) * np.linalg.norm(d_coef) + coef_n**2 * 4 * rho
    d_norm2 += scalar_rtol(8) * (np.abs(coef) @ np.abs(G) @ np.abs(coef))  # its evaluation
    d_norm = d_norm2 / max(math.sqrt(max(norm2, 0.0)), math.sqrt(d_norm2))
    e_Delta = scalar_rtol(12) + e_V / b.V  # Δ = 2B√Φ, Φ = V/(V+r²)² or 1/(4r²)
    assert math.sqrt(max(norm2, 0.0)) <= b.Delta * (1 + e_Delta) + d_norm
    if cls == "exponential_1d":  # Lemma B.6: the OU posterior mean is bounded by max |y|
        grid = np.linspace(-0.5, 1.5, 201)[:, None]
        assert np.all(np.abs(mc(grid)) <= 1.0 + e_m)


def test_variance_scale_is_attained():
    """V is exact when k(x,x) = 1: n−1 core copies at one end, x at the other (SP1)."""
    k = eq_kernel(0.4)
    kappa = kernel_lower_bound(k, (0.0, 1.0))
    for n, r2 in [(2, 0.3), (10, 1.0), (50, 4.0)]:
        Xc = np.zeros((n - 1, 1))
        kc, _ = _core_posterior(k, Xc, np.zeros(n - 1), r2)
        v = kc(np.ones((1, 1)), np.ones((1, 1)))[0, 0]
        V = SamplePathBound(n, 1, r2, 1, kappa).V
        # v from a solve with A = k(X_c, X_c) + r²I: |δv| ≤ 2ρ, ρ = cond_rtol(A) (+ products);
        # V's closed form cancels: absolute error ≤ scalar_rtol(8)(1 + κ²m/(m+r²))
        rho = cond_rtol(k(Xc, Xc) + r2 * np.eye(n - 1)) + scalar_rtol(n)
        tol = 2 * rho + scalar_rtol(8) * (1 + kappa**2 * (n - 1) / (n - 1 + r2))
        assert abs(v - V) <= tol
        assert abs(v * (1 + 1e-4) - V) > tol  # a 1e-4 error in V would be caught


def test_constant_kernel_mean_sensitivity_is_exact():
    """k ≡ 1: Δm is the constant V(y−y')/(V+r²), RKHS norm |y−y'|√V/(V+r²) = 2M√Φ at y=−y'=M."""
    for n, r2 in [(1, 2.0), (5, 0.5), (40, 3.0)]:
        b = SamplePathBound(n, 1.0, r2, 1.5, 1.0, kernel_class="constant")
        kc, _ = _core_posterior(constant_kernel(), np.zeros((n - 1, 1)), np.zeros(n - 1), r2)
        V = kc(np.zeros((1, 1)), np.zeros((1, 1)))[0, 0]
        sens = 3.0 * math.sqrt(V) / (V + r2)
        if V <= r2:
            # V = 1 − 1ᵀA⁻¹1 from a solve with A = 11ᵀ + r²I: |δV| ≤ 2ρ, ρ = cond_rtol(A), and
            # b.V = 1 − m/(m+r²) cancels the same way (|δ| ≤ e_V); |∂ln sens/∂ln V| ≤ ½, Δ's
            # own formula is a few flops.  Relative to V ≈ r²/(m+r²) this is the tolerance.
            rho = scalar_rtol(n)  # n = 1: no core, no solve
            if n > 1:
                rho += cond_rtol(np.ones((n - 1, n - 1)) + r2 * np.eye(n - 1))
            e_V = scalar_rtol(8) * (1 + (n - 1) / (n - 1 + r2))
            rtol = (2 * rho + e_V) / V + scalar_rtol(12)
            assert b.Delta == pytest.approx(sens, rel=rtol, abs=0)
            assert b.Delta * (1 + 1e-4) != pytest.approx(sens, rel=rtol, abs=0)
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
    D1, D2 = (X1, np.append(yc, 1.0)), (X1, np.append(yc, -1.0))
    t = posterior_renyi_terms(kernel, *D1, *D2, [[0.0]], alpha=alpha, kernel_scale=sigma, r2=r2)
    # slack = round-off of the computed exact parts (conditioning of the posterior solve and of
    # Σ, renyi_roundoff) + the closed form's own (bound_roundoff)
    err_mean, err_cov = renyi_roundoff(
        kernel, D1, D2, [[0.0]], alpha=alpha, kernel_scale=sigma, r2=r2
    )
    b_mean, b_cov = bound_roundoff(proved, alpha)
    # the exact covariance part is 0 (same inputs, Σ does not depend on y): only round-off
    assert t.cov <= err_cov
    assert t.total <= proved.rdp(alpha) + b_mean + b_cov + err_mean + err_cov
    assert t.mean <= proved.mean_term(alpha) + b_mean + err_mean
    assert t.mean >= 0.95 * proved.mean_term(alpha)  # tight
    assert t.total > author.rdp(alpha)  # the author's constant is violated
    assert t.mean > 1.9 * author.mean_term(alpha)


def test_inertia_covariance_term_is_attained():
    """x, x' far apart (k ≈ 0), T = {x, x'}, n = 1: one eigenvalue at each end of
    [1/(1+τ), 1+τ]; the exact covariance part reaches g(1+τ) + g(1/(1+τ)) < 2ψ."""
    k = eq_kernel(0.05)
    b = SamplePathBound(1, 1.0, 0.5, 1.0, 0.0, cov_bound="inertia")
    paper = SamplePathBound(1, 1.0, 0.5, 1.0, 0.0, cov_bound="paper")
    D1, D2, T = ([[0.0]], [0.0]), ([[1.0]], [0.0]), [[0.0], [1.0]]
    for frac in (0.05, 0.5, 0.9):
        alpha = 1.0 + frac * (b.alpha_max - 1.0)
        t = posterior_renyi_terms(k, *D1, *D2, T, alpha=alpha, kernel_scale=1.0, r2=0.5)
        assert t.mean == 0.0  # y = 0 in both datasets: both means are exactly 0
        # slack = round-off of the computed exact part (renyi_roundoff: conditioning of the
        # posterior solves and of Σ_1, Σ_α) + that of the closed form (bound_roundoff)
        slack = renyi_roundoff(k, D1, D2, T, alpha=alpha, kernel_scale=1.0, r2=0.5)[1]
        slack += bound_roundoff(b, alpha)[1]
        assert t.cov <= b.cov_term(alpha) + slack
        # attained up to k(0, 1) = e^{-200}: a bound 1e-4 too small would be caught
        assert t.cov > b.cov_term(alpha) * (1 - 1e-4) + slack
        assert t.cov >= 0.999 * b.cov_term(alpha)
        assert t.cov < 0.9 * paper.cov_term(alpha)  # the paper's 2ψ is loose here


# --------------------------------------------------------------------------------------------
# monotonicity and conversion
# --------------------------------------------------------------------------------------------
def _eps(delta=1e-5, L=1, **kw):
    base = {"n": 50, "kernel_scale": 1.0, "r2": 5.0, "M_Y": 1.0, "kappa": 0.1, "eta": 0.0}
    return SamplePathBound(**{**base, **kw}, kernel_class="exponential_1d").epsilon(delta, L)


def test_monotonicity():
    r2s = [0.5, 1.0, 2.0, 5.0, 20.0, 100.0]
    e = [_eps(r2=r) for r in r2s]
    assert all(a > b for a, b in zip(e, e[1:], strict=False)), e
    etas = [0.0, 0.1, 0.5, 1.0, 3.0]
    e = [_eps(eta=h) for h in etas]
    assert all(a > b for a, b in zip(e, e[1:], strict=False)), e
    sigmas = [0.1, 0.3, 1.0, 3.0, 10.0]
    e = [_eps(kernel_scale=s) for s in sigmas]
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
    e = [_eps(kernel_scale=s, eta=2.0, r2=2.0) for s in (0.3, 3.0)]
    assert e[1] > e[0]


def _conversion(b, L, delta, a):
    """dp_accounting's ε(α) = Lρ(α) + ln(1 − 1/α) − ln(δα)/(α − 1) of ``L`` paths at one order."""
    return rdp_to_epsilon([a], [L * float(b.rdp(a))], delta)


def _conversion_roundoff(b, L, delta, a):
    """Round-off of :func:`_conversion`: a few flops on terms of total size M (scalar_rtol; the
    terms have mixed signs) plus ``L`` times the round-off of ρ itself (bound_roundoff)."""
    mags = L * float(b.rdp(a)) + abs(math.log1p(-1.0 / a)) + abs(math.log(delta * a)) / (a - 1)
    return scalar_rtol(6) * mags + L * float(sum(bound_roundoff(b, a)))


def test_epsilon_is_the_optimal_conversion():
    b = SamplePathBound(100, 1.0, 10.0, 1.0, 0.05, kernel_class="exponential_1d")
    for L in (1, 7):
        eps, a_star = b.epsilon_and_order(1e-6, L)
        assert 1.0 < a_star < b.alpha_max
        dense = np.linspace(1.0101, b.alpha_max * (1 - 1e-9), 20000)
        brute = rdp_to_epsilon(dense, L * b.rdp(dense), 1e-6)
        # eps ≤ brute up to (i) the stopping tolerance of the bounded scalar search: the
        # minimiser is within r = 2·tol2 = 4(√2.2e-16·α + xatol/3) of α* (scipy's fminbound
        # test), and by local convexity ε(α*) − min ε ≤ max_± ε(α* ± r) − ε(α*); (ii) the
        # round-off of the conversion at α* and at the brute-force order
        conv = L * b.rdp(dense) + np.log1p(-1 / dense) - np.log(1e-6 * dense) / (dense - 1)
        a_brute = dense[np.argmin(conv)]
        r = 4 * (math.sqrt(2.2e-16) * a_star + 1e-10 / 3)
        stop = max(_conversion(b, L, 1e-6, a_star + s) - eps for s in (-r, r))
        slack = max(stop, 0.0) + sum(_conversion_roundoff(b, L, 1e-6, x) for x in (a_star, a_brute))
        assert eps <= brute + slack
        assert eps * (1 + 1e-4) > brute + slack  # an ε 1e-4 too large would be caught
        assert eps >= brute - 1e-3 * brute
        # Mironov's conversion (the paper's) is never better
        mironov = np.min(L * b.rdp(dense) + math.log(1e6) / (dense - 1))
        assert eps <= mironov
        # the ledger composes the event to (nearly) the same ε: its grid is coarser.  Same
        # per-order values (the event tabulates b.rdp on b.orders(); the ledger's orders are a
        # subset) and the same scalar conversion, so ≥ eps exactly, up to the conversion's
        # round-off (a curve that is non-monotone at the rounding level)
        conv_err = _conversion_roundoff(b, L, 1e-6, a_star)
        ledger = Ledger(delta=1e-6)
        ledger.spend(b.event(L, label="paths"))
        assert ledger.epsilon() >= eps - conv_err
        assert ledger.epsilon() <= 1.05 * eps
        # bookkeeping: the same values and conversion, and the minimising order (mid-range)
        # is a DEFAULT_ORDERS point on both grids, so the two agree bitwise on any machine
        assert b.event(L).epsilon(1e-6) == pytest.approx(ledger.epsilon(), rel=0, abs=conv_err)


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
    # bookkeeping: per order, five float additions of ρ vs one product 5ρ differ by ≤ 4 ulps
    # of 5ρ; at the minimising order 5ρ ≤ ε + |ln(1 − 1/α)| ≤ ε + ln 101 (α ≥ 1.01), and the
    # conversion adds the same terms to both: |Δε| ≤ scalar_rtol(5)(ε + ln 101)
    eps = at_once.epsilon()
    tol = scalar_rtol(5) * (eps + math.log(101))
    assert one_by_one.epsilon() == pytest.approx(eps, rel=0, abs=tol)


# --------------------------------------------------------------------------------------------
# planning helpers
# --------------------------------------------------------------------------------------------
def test_feasible_configurations():
    sigmas, r2s, etas = [0.5, 1.0, 2.0], [1.0, 5.0, 20.0, 80.0], [0.0, 1.0]
    out = feasible_configurations(
        n=100, y_bounds=(-1.0, 1.0), kappa=0.05, epsilon=3.0, delta=1e-5,
        kernel_scales=sigmas, r2s=r2s, etas=etas, L=2, kernel_class="exponential_1d",
    )  # fmt: skip
    got = {(c.kernel_scale, c.r2, c.eta) for c in out}
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
            n=10, y_bounds=(-1, 1), kappa=0, epsilon=1, delta=1e-5, kernel_scales=[], r2s=[1.0]
        )
    with pytest.raises(ValueError):
        feasible_configurations(
            n=10, y_bounds=(-1, 1), kappa=0, epsilon=1, delta=1e-5, kernel_scales=[1.0], r2s=[-1.0]
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


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 10_000),
    r2=st.floats(1e-4, 1e4),
    kappa=st.floats(0.0, 1.0),
    eta=st.one_of(st.just(0.0), st.floats(1e-3, 3.0)),
    kernel_class=st.sampled_from(["generic", "exponential_1d", "constant"]),
)
def test_order_grid_and_coupled_delta_equal_their_defining_formulas(
    n, r2, kappa, eta, kernel_class
):
    """The order grid is ``np.unique`` of the adapted pattern and the default orders inside
    (1, α_max) (computed by a merge of presorted parts), and ``Δ_cpl`` is the cell maximum of
    eq. (SP11) on the grid ``V (i/G)²`` (with the squared unit grid computed once): both
    bitwise, so the curves the ledger charges are the ones the docs define."""
    from pm_dpgp.mechanisms.full import sample_path_bounds as spb

    b = SamplePathBound(
        n=n, kernel_scale=1.0, r2=r2, M_Y=1.0, kappa=kappa, eta=eta, kernel_class=kernel_class
    )
    grid = np.concatenate([1.0 + (b.alpha_max - 1.0) * spb._ORDER_PATTERN, DEFAULT_ORDERS])
    keep = (grid > 1.0) & (grid < b.alpha_max) & ((grid - 1.0) * b.tau < 1.0)
    np.testing.assert_array_equal(b.orders(), np.unique(grid[keep]))
    V = b.V
    if V == 0.0:
        return
    edges = V * np.linspace(0.0, 1.0, spb._COUPLED_GRID + 1) ** 2
    lo, hi = edges[:-1], edges[1:]
    c = np.clip(r2, lo, hi)
    s = math.sqrt((n - 1) / r2)
    h = s * np.sqrt(hi * np.minimum(1.0 - lo, (n - 1) / (n - 1 + r2)))
    for bounded in (False, True):
        hb = np.minimum(h, 1.0) if bounded else h
        expected = 2.0 * np.max(np.sqrt(c) / (c + r2) * (1.0 + hb))
        expected *= 1.0 + 16.0 * np.finfo(float).eps
        assert coupled_sensitivity(n, r2, V, 1.0, mean_bounded=bounded) == float(expected)
