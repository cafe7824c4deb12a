"""Tests for the cloaking noise-covariance solver (pm_dpgp.mechanisms.label.cloaking).

The optimality tests check the Kiefer–Wolfowitz (1960) certificate independently of the
solver: with ``u = λ / Σλ`` and ``M_k = Σ λ_i a_i a_iᵀ`` scaled so that ``max a_iᵀ M_k⁻¹ a_i = 1``,
the design gains are ``g_i = Σλ · a_iᵀ M_k⁻¹ a_i`` and optimality means ``max g_i = k``,
``g_i = k`` wherever ``λ_i > 0``.

Tolerances (see ``tests/tolerances.py``): comparisons of recomputed Mahalanobis values, log
determinants and covariances take their slack from the conditioning of the problem at hand
(:func:`mahalanobis_tol`, :func:`scaling_atol`, :func:`logdet_slack`, :func:`near_optimal_rtol`)
or from the solver's own stopping tolerance, never from what one machine printed.  The random
test matrices are well conditioned (slack ~1e-13); the GP cloaking matrices keep directions down
to ``rank_tol · σ₁`` and so are ill conditioned by design (slack up to ~1e-3 there).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from pm_dpgp import ConvergenceWarning
from pm_dpgp.mechanisms.label.cloaking import (
    NoiseCovariance,
    gradient_ascent_reference,
    solve_noise_covariance,
)
from tests.tolerances import EPS, assert_normwise_close, cond_rtol, condition_number, scalar_rtol

#: The solver's default stopping tolerance (relative Kiefer–Wolfowitz gap ``max g / k − 1``): the
#: certificate checks use the algorithm's own bar, plus the rounding of the recomputation.
TOL = 1e-9


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas() -> Iterator[None]:
    """Run on one BLAS thread: these are small matrices, where a multi-threaded BLAS on a busy
    machine mostly waits for a free core (tests slowed down ~100x under load)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        limits: contextlib.AbstractContextManager = contextlib.nullcontext()
    else:
        limits = threadpool_limits(limits=1, user_api="blas")
    with limits:
        yield


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def eq_kernel(a: np.ndarray, b: np.ndarray, variance: float, lengthscale: float) -> np.ndarray:
    """Exponentiated-quadratic kernel on 1-D inputs."""
    return variance * np.exp(-((a[:, None] - b[None, :]) ** 2) / (2.0 * lengthscale**2))


def gp_cloaking_matrix(
    x: np.ndarray,
    x_test: np.ndarray,
    variance: float = 7.72**2,
    lengthscale: float = 25.0,
    noise_var: float = 14.0**2,
) -> np.ndarray:
    """C = K_sf (K_ff + σ² I)⁻¹ via a Cholesky solve (K_ff + σ²I is symmetric)."""
    K = eq_kernel(x, x, variance, lengthscale) + noise_var * np.eye(x.size)
    K_fs = eq_kernel(x, x_test, variance, lengthscale)
    return sla.cho_solve(sla.cho_factor(K, lower=True), K_fs).T


def low_rank(rng: np.random.Generator, m: int, n: int, r: int) -> np.ndarray:
    return rng.standard_normal((m, r)) @ rng.standard_normal((r, n))


def mahalanobis_via_chol(res: NoiseCovariance, C: np.ndarray) -> np.ndarray:
    """a_iᵀ M_k⁻¹ a_i for the projected columns, via the reported Cholesky factor."""
    W = sla.solve_triangular(res.chol_k, res.basis.T @ C, lower=True)
    return np.sum(W * W, axis=0)


def mahalanobis_via_pinv(res: NoiseCovariance, C: np.ndarray) -> np.ndarray:
    """c̃_iᵀ M⁺ c̃_i with c̃_i = U_k U_kᵀ c_i and M⁺ from numpy's pinv of the m × m matrix."""
    projected = res.projector() @ C
    return np.einsum("ij,ij->j", projected, np.linalg.pinv(res.M, hermitian=True) @ projected)


# ----------------------------------------------------------------------------------------------
# tolerances from the conditioning of the computed quantities (Higham 2002)
# ----------------------------------------------------------------------------------------------


def skeel_condition(L: np.ndarray) -> float:
    """Skeel's condition number ``‖ |L⁻¹| |L| ‖_∞`` of a triangular factor (row-scaling
    invariant)."""
    Linv = sla.solve_triangular(L, np.eye(L.shape[0]), lower=True)
    return float(np.max(np.abs(Linv) @ np.abs(L) @ np.ones(L.shape[0])))


def scaling_atol(res: NoiseCovariance) -> float:
    """Bound on ``|res.max_mahalanobis − 1|``: 1 exactly in exact arithmetic.

    The solver scales ``M`` by ``γ = max_i ‖L_b⁻¹ b_i‖²`` (whitened columns) and then evaluates
    ``‖chol_k⁻¹ a_i‖²`` with ``chol_k = S·√γ·L_b``, ``a_i = S b_i``: the same triangular solve up
    to a row scaling.  Triangular solves are componentwise backward stable, so both agree to
    ``c·(k+3)·cond(L)·EPS`` with Skeel's row-scaling-invariant ``cond(L)`` (Higham 2002, Thm 8.5);
    squaring doubles it.
    """
    return 2.0 * cond_rtol(skeel_condition(res.chol_k), res.rank + 3)


def mahalanobis_tol(res: NoiseCovariance, C: np.ndarray) -> float:
    """Bound on the error of ``a_iᵀ M_k⁻¹ a_i`` recomputed from ``C`` (relative to its max, ≈ 1).

    ``w_i = chol_k⁻¹ (U_kᵀ c_i)``: forming ``U_kᵀ c_i`` perturbs it by ``≲ m·EPS·‖c_i‖`` and the
    solve by ``≲ k·EPS·‖chol_k‖‖w_i‖`` (backward stable), so ``‖Δw_i‖ ≤ c·m·κ·EPS`` with
    ``κ = κ(chol_k) + max_i ‖c_i‖ / σ_min(chol_k)`` (``‖w_i‖ ≤ 1``); two such computations (the
    solver's and the test's, possibly another BLAS) differ by twice that, squaring doubles it
    (:func:`cond_rtol` has the factor 2 per side).  Plus the solver's own scaling error.  For the
    GP cloaking matrices κ ~ 1/rank_tol: rounding in the weak directions of ``C`` is amplified
    that much, and an independent route there really differs by ~1e-8 (not machine noise).
    """
    s = np.linalg.svd(res.chol_k, compute_uv=False)
    kappa = s[0] / s[-1] + float(np.max(np.linalg.norm(C, axis=0))) / s[-1]
    return 2.0 * cond_rtol(kappa, C.shape[0]) + scaling_atol(res)


def pinv_tol(res: NoiseCovariance, C: np.ndarray) -> float:
    """Error of ``c̃ᵀ M⁺ c̃`` via numpy's pinv of the ``m × m`` ``M``: ``M⁺`` is only as accurate
    as ``κ(M_k)·m·EPS`` (rounding of ``M`` relative to its small nonzero eigenvalues; Higham
    2002, §20.1), on top of :func:`mahalanobis_tol` for the route through ``chol_k``."""
    return mahalanobis_tol(res, C) + 2.0 * cond_rtol(condition_number(res.M_k), C.shape[0])


def logdet_slack(res: NoiseCovariance, C: np.ndarray) -> float:
    """Rounding in ``log det M_k`` of a computed solution, as an absolute bound.

    ``M`` is feasible only up to :func:`mahalanobis_tol` (η): ``(1 + η) M`` is feasible, which
    moves ``log det`` by ``k·η``; evaluating ``2 Σ log diag(chol_k)`` adds ``scalar_rtol(2k)``
    relative to the size of its terms.
    """
    k = res.rank
    terms = float(np.sum(np.abs(np.log(np.diag(res.chol_k))))) + k
    return k * mahalanobis_tol(res, C) + scalar_rtol(2 * k) * terms


def near_optimal_rtol(*solutions: tuple[NoiseCovariance, np.ndarray]) -> float:
    """Normwise relative distance allowed between near-optimal ``M`` of the same problem.

    In ``P = M⁻¹`` the problem maximises the strongly concave ``log det P`` over a convex set,
    so a feasible ``M`` whose ``log det`` exceeds the optimum by ``δ`` satisfies
    ``‖M*^{-1/2}(M − M*)M*^{-1/2}‖_F ≤ √(2δ)(1 + O(√δ))``, hence
    ``‖M − M*‖_F ≤ ‖M*‖₂ √(2δ) ≤ ‖M*‖_F √(2δ)``.  ``δ`` is the certified ``gap_bound`` plus
    :func:`logdet_slack` (which also covers an ``O(EPS)`` rounding of the data); factor 2 for
    the ``O(√δ)`` term.  Note the square root: ``δ ~ 1e-14`` allows ~1e-7.
    """
    return sum(2.0 * math.sqrt(2.0 * (r.gap_bound + logdet_slack(r, C))) for r, C in solutions)


def ortho_atol(m: int, n: int) -> float:
    """``‖U_kᵀU_k − I‖`` for a basis from Householder QR / SVD of ≤ min(m, n) columns.

    Loss of orthogonality ``≤ c·m·min(m, n)·EPS``, independent of ``C``'s conditioning
    (Higham 2002, Thm 19.4 and §20.1).
    """
    return 4.0 * m * min(m, n) * EPS


def svd_atol(C: np.ndarray) -> float:
    """Absolute error of computed singular values: ``c·max(m, n)·EPS·σ₁`` (Weyl; SVD is
    backward stable)."""
    return 4.0 * max(C.shape) * EPS * float(np.linalg.norm(C, 2))


def assert_kiefer_wolfowitz(res: NoiseCovariance, C: np.ndarray, tol: float = TOL) -> None:
    """Independent check of feasibility, the KW certificate and complementary slackness."""
    k = res.rank
    lam = res.lam
    assert lam.shape == (C.shape[1],)
    assert np.all(lam >= 0.0)
    mahal = mahalanobis_via_chol(res, C)
    # Recomputed a_iᵀ M_k⁻¹ a_i: exact max is 1; slack = error bound of the two computations.
    m_tol = mahalanobis_tol(res, C)
    assert np.max(mahal) <= 1.0 + m_tol
    assert res.max_mahalanobis == pytest.approx(np.max(mahal), rel=m_tol)
    g = lam.sum() * mahal  # design gains of u = λ / Σλ
    # solver's stopping bar max g ≤ k(1 + tol), recomputed with relative error m_tol (+ Σλ: n·EPS)
    assert np.max(g) <= k * (1.0 + tol) * (1.0 + m_tol + scalar_rtol(C.shape[1]))
    # support threshold (a classification, not an error bound); complementary slackness to the
    # solver's accuracy 1e-6 plus the recomputation error of g
    support = lam > 1e-8 * lam.max()
    np.testing.assert_allclose(g[support], k, rtol=1e-6 + m_tol)
    # M_k = Σ λ_i a_i a_iᵀ, compared after scaling by D = diag(M_k)^½ (unit diagonal, so the
    # normwise error is meaningful even though M_k itself may be ill conditioned).  Rounding in
    # a_i = U_kᵀc_i (≤ m·EPS·‖c_i‖) is amplified by ‖D⁻¹‖ in D⁻¹a_i: κ = max‖c_i‖ / min d.
    A = res.basis.T @ C
    rebuilt = (A * lam) @ A.T
    d = np.sqrt(np.diag(res.M_k))
    kappa_d = float(np.max(np.linalg.norm(C, axis=0))) / d.min()
    assert_normwise_close(
        rebuilt / np.outer(d, d),
        res.M_k / np.outer(d, d),
        2.0 * cond_rtol(kappa_d, sum(C.shape)),
        "M_k = Σ λ a aᵀ",
    )
    assert res.converged
    # gap_bound = k·log(γ/k) with fl(γ/k) − 1 ≤ tol (checked by the solver, exact subtraction):
    # ≤ k·tol up to 3 roundings (divide, log, multiply) — the stopping tolerance itself.
    assert 0.0 <= res.gap_bound <= k * tol * (1.0 + scalar_rtol(3))


def assert_structure(res: NoiseCovariance, m: int, n: int) -> None:
    k = res.rank
    assert res.basis.shape == (m, k)
    assert res.M.shape == (m, m)
    assert res.M_k.shape == res.chol_k.shape == (k, k)
    np.testing.assert_allclose(res.basis.T @ res.basis, np.eye(k), atol=ortho_atol(m, n))
    np.testing.assert_array_equal(res.chol_k, np.tril(res.chol_k))
    assert np.all(np.diag(res.chol_k) > 0.0)
    scale = np.max(np.abs(res.M_k))  # = max diag: |M_ij| ≤ √(M_ii M_jj) for PSD M
    # fl(L Lᵀ) errs by ≤ γ_k |L||L|ᵀ ≤ k·EPS·scale (Higham 2002, §3.5), on each side, +symmetrising
    np.testing.assert_allclose(
        res.chol_k @ res.chol_k.T, res.M_k, atol=2 * (2 * k + 1) * EPS * scale
    )
    # fl(U M_k Uᵀ): |U||M_k||U|ᵀ ≤ k·scale (rows of U have norm ≤ 1), two products, two sides
    np.testing.assert_allclose(
        res.basis @ res.M_k @ res.basis.T, res.M, atol=8 * k * k * EPS * scale
    )
    np.testing.assert_array_equal(res.M, res.M.T)  # symmetrised: ½(M + Mᵀ) is exactly symmetric


def dual_optimum_slsqp(A: np.ndarray) -> float:
    """max_{λ ≥ 0} log det(A Λ Aᵀ) − Σλ by SLSQP; returns log det M* = φ* + k."""
    k, n = A.shape

    def negative_dual(lam: np.ndarray) -> tuple[float, np.ndarray]:
        S = (A * lam) @ A.T
        sign, logdet = np.linalg.slogdet(S)
        if sign <= 0:
            return 1e10, np.zeros(n)
        G = A.T @ np.linalg.solve(S, A)
        return -(logdet - lam.sum()), -(np.diag(G) - 1.0)

    result = minimize(
        negative_dual,
        np.full(n, k / n),
        jac=True,
        method="SLSQP",
        bounds=[(0.0, None)] * n,
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    assert result.success, result.message
    return -result.fun + k


# ----------------------------------------------------------------------------------------------
# optimality certificate
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "n", "seed"), [(3, 20, 0), (8, 8, 1), (12, 40, 2), (25, 300, 3)])
def test_certificate_full_rank(m: int, n: int, seed: int) -> None:
    C = np.random.default_rng(seed).standard_normal((m, n))
    res = solve_noise_covariance(C)
    assert res.rank == min(m, n)
    assert_structure(res, m, n)
    assert_kiefer_wolfowitz(res, C)


@pytest.mark.parametrize(
    ("m", "n", "r", "seed"),
    [
        (40, 10, 10, 0),  # more test than training points: rank n < m
        (60, 25, 5, 1),  # m > n and rank deficient
        (20, 50, 6, 2),  # m < n and rank deficient
        (7, 200, 3, 3),
    ],
)
def test_certificate_rank_deficient(m: int, n: int, r: int, seed: int) -> None:
    C = low_rank(np.random.default_rng(seed), m, n, r)
    res = solve_noise_covariance(C)
    assert res.rank == r
    assert_structure(res, m, n)
    assert_kiefer_wolfowitz(res, C)


def test_certificate_checks_reject_near_misses() -> None:
    """The tolerances above are not vacuous: 1e-4 relative errors are rejected.

    Each near miss perturbs one thing by a relative 1e-4 (what a real bug, e.g. a wrong scaling
    or a stale factor, would plausibly produce) on a well-conditioned problem (slack ~1e-13).
    """
    C = np.random.default_rng(2).standard_normal((12, 40))
    res = solve_noise_covariance(C)
    assert_kiefer_wolfowitz(res, C)
    shrink = 1.0 - 1e-4  # M too small: the worst column sticks out of the ellipsoid by ~1e-4
    # (M = U_k M_k U_kᵀ is formed from M_k on demand, so scaling M_k and chol_k scales it too)
    too_small = replace(res, M_k=res.M_k * shrink, chol_k=res.chol_k * math.sqrt(shrink))
    too_heavy = replace(res, lam=res.lam * (1.0 + 1e-4))  # KW gains above k, M_k ≠ Σ λ a aᵀ
    misreported = replace(res, max_mahalanobis=res.max_mahalanobis * (1.0 + 1e-4))
    for bad in (too_small, too_heavy, misreported):
        with pytest.raises(AssertionError):
            assert_kiefer_wolfowitz(bad, C)
    with pytest.raises(AssertionError):
        assert misreported.max_mahalanobis == pytest.approx(1.0, abs=scaling_atol(res))
    with pytest.raises(AssertionError):
        # a stale factor: M_k changed by 1e-4 without refactorising
        assert_structure(replace(res, M_k=res.M_k * (1.0 + 1e-4)), *C.shape)


def test_certificate_gp_cloaking_matrix() -> None:
    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(0.0, 80.0, 90))
    x_test = np.linspace(0.0, 110.0, 150)
    C = gp_cloaking_matrix(x, x_test)
    res = solve_noise_covariance(C)
    s = np.linalg.svd(C, compute_uv=False)
    threshold = res.rank_tol * s[0]
    ds = svd_atol(C)  # numpy's singular values are only known to ± ds
    assert (
        np.count_nonzero(s > threshold + ds)
        <= res.rank
        <= np.count_nonzero(s > 0.98 * threshold - ds)
    )
    assert res.rank < min(C.shape)  # numerically rank deficient
    assert_structure(res, *C.shape)
    assert_kiefer_wolfowitz(res, C)


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 15),
    n=st.integers(1, 40),
    r=st.integers(1, 15),
    seed=st.integers(0, 2**32 - 1),
)
def test_certificate_property(m: int, n: int, r: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    C = low_rank(rng, m, n, min(r, m, n))
    res = solve_noise_covariance(C)
    assert_kiefer_wolfowitz(res, C)


# ----------------------------------------------------------------------------------------------
# agreement with a general-purpose convex solver
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n", "seed"), [(2, 6, 0), (3, 9, 1), (4, 12, 2), (4, 10, 3)])
def test_log_det_matches_slsqp_full_rank(k: int, n: int, seed: int) -> None:
    C = np.random.default_rng(seed).standard_normal((k, n))
    res = solve_noise_covariance(C)
    expected = dual_optimum_slsqp(C)  # the basis is orthogonal: log det is basis invariant
    assert res.log_det_k == pytest.approx(expected, rel=1e-6)
    assert np.linalg.slogdet(res.M)[1] == pytest.approx(expected, rel=1e-6)


def test_log_det_matches_slsqp_rank_deficient() -> None:
    C = low_rank(np.random.default_rng(4), 6, 11, 3)
    res = solve_noise_covariance(C)
    assert res.rank == 3
    expected = dual_optimum_slsqp(res.basis.T @ C)
    assert res.log_det_k == pytest.approx(expected, rel=1e-6)


# ----------------------------------------------------------------------------------------------
# achieved sensitivity, projector, rank handling
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "n", "r"), [(6, 30, 6), (30, 12, 12), (25, 40, 7)])
def test_max_mahalanobis_independent_pinv(m: int, n: int, r: int) -> None:
    C = low_rank(np.random.default_rng(m * n), m, n, r)
    res = solve_noise_covariance(C)
    independent = float(np.max(mahalanobis_via_pinv(res, C)))
    assert independent == pytest.approx(res.max_mahalanobis, rel=pinv_tol(res, C))
    assert res.max_mahalanobis <= 1.0 + scaling_atol(res)
    assert res.max_mahalanobis == pytest.approx(1.0, abs=scaling_atol(res))


def test_max_mahalanobis_independent_gp() -> None:
    # M has condition number ~ (σ_1/σ_k)² here, far beyond what pinv(M) resolves, so the
    # independent check goes through the Cholesky factor and the projected columns.
    C = gp_cloaking_matrix(np.linspace(1.0, 70.0, 50), np.linspace(0.0, 110.0, 120))
    res = solve_noise_covariance(C)
    independent = float(np.max(mahalanobis_via_chol(res, C)))
    # κ ~ 1e9 here (directions down to 1e-10·σ₁ are kept): the bound is ~4e-4, and an
    # independent route to U_kᵀC really moves this value by ~1e-8
    assert independent == pytest.approx(res.max_mahalanobis, rel=mahalanobis_tol(res, C))
    assert res.max_mahalanobis <= 1.0 + scaling_atol(res)
    # with a coarse rank tolerance M is well enough conditioned for pinv (κ(M_k) ~ 8e7)
    coarse = solve_noise_covariance(C, rank_tol=1e-4)
    independent = float(np.max(mahalanobis_via_pinv(coarse, C)))
    assert independent == pytest.approx(coarse.max_mahalanobis, rel=pinv_tol(coarse, C))


@pytest.mark.parametrize("rank_tol", [1e-10, 1e-6, 1e-3])
def test_projector_and_discarded_directions(rank_tol: float) -> None:
    C = gp_cloaking_matrix(np.linspace(0.0, 60.0, 40), np.linspace(0.0, 100.0, 70))
    res = solve_noise_covariance(C, rank_tol=rank_tol)
    P = res.projector()
    m, n, k = *C.shape, res.rank
    # P P − P = U(UᵀU − I)Uᵀ + rounding of the two products (|P| rows have norm ≤ 1)
    np.testing.assert_allclose(P @ P, P, atol=ortho_atol(m, n) + 4 * (m + 2 * k) * EPS)
    # fl(U Uᵀ)_ij and _ji: each within γ_k (|U||U|ᵀ)_ij ≤ k·EPS of the exact symmetric value
    np.testing.assert_allclose(P, P.T, atol=4 * k * EPS)
    assert np.trace(P) == pytest.approx(res.rank)
    assert res.rank_tol == rank_tol
    s = np.linalg.svd(C, compute_uv=False)
    ds = svd_atol(C)  # numpy's singular values are only known to ± ds
    assert np.all(s[res.rank :] <= rank_tol * s[0] + ds)
    # retained: above the threshold up to the (≤ 1 %) slack of the range finder's residual
    assert np.all(s[: res.rank] > 0.98 * rank_tol * s[0] - ds)
    # what is projected away is exactly the discarded spectrum, up to the rounding of C − P C:
    # P's loss of orthogonality (ortho_atol·σ₁) and fl(P C) (≤ m·√k·EPS·‖C‖_F), plus ds
    discarded = np.linalg.norm(C - P @ C, 2)
    m, n = C.shape
    rounding = ortho_atol(m, n) * s[0] + 4 * m * math.sqrt(res.rank) * EPS * np.linalg.norm(C)
    assert discarded <= rank_tol * s[0] * (1.0 + 1e-6) + rounding + ds


def test_duplicate_negated_and_zero_columns_are_harmless() -> None:
    rng = np.random.default_rng(11)
    C = rng.standard_normal((5, 15))
    padded = np.hstack([C, C[:, :4], -C[:, 4:7], np.zeros((5, 3))])
    base = solve_noise_covariance(C)
    res = solve_noise_covariance(padded)
    # same optimum: each log det is within its certified gap (plus rounding) of it
    slack = res.gap_bound + base.gap_bound + logdet_slack(res, padded) + logdet_slack(base, C)
    assert res.log_det_k == pytest.approx(base.log_det_k, abs=slack)
    tol = near_optimal_rtol((res, padded), (base, C))
    assert_normwise_close(res.M, base.M, tol, "M with padded columns")
    assert np.all(res.lam[-3:] == 0.0)
    assert_kiefer_wolfowitz(res, padded)
    # not vacuous: a 1e-4 relative change of M or 1e-4 of log det is rejected
    with pytest.raises(AssertionError):
        assert_normwise_close(res.M * (1.0 + 1e-4), base.M, tol)
    assert res.log_det_k + 1e-4 != pytest.approx(base.log_det_k, abs=slack)


def test_scale_equivariance() -> None:
    C = np.random.default_rng(5).standard_normal((4, 25))
    res = solve_noise_covariance(C)
    scaled = solve_noise_covariance(1e-3 * C)
    # M(1e-3 C) = 1e-6 M(C) exactly; fl(1e-3 C) is an O(EPS) change of the data and each run is
    # near optimal within its certificate, so the two agree to near_optimal_rtol (normwise)
    tol = near_optimal_rtol((res, C), (scaled, 1e-3 * C))
    assert_normwise_close(scaled.M, 1e-6 * res.M, tol, "scaled M")
    with pytest.raises(AssertionError):  # not vacuous: a 1e-4 relative error is rejected
        assert_normwise_close(scaled.M * (1.0 + 1e-4), 1e-6 * res.M, tol)


def test_rank_one() -> None:
    rng = np.random.default_rng(6)
    v = rng.standard_normal(30)
    C = np.outer(rng.standard_normal(8), v)
    res = solve_noise_covariance(C)
    assert res.rank == 1
    j = int(np.argmax(np.abs(v)))
    # rank one: u₁ moves by ≤ ‖E‖/σ₁ (gap σ₁ − σ₂ = σ₁, Wedin), E the rounding of np.outer and
    # of the SVD (≤ c·(m + n)·EPS·σ₁), so M = c_j c_jᵀ holds normwise to c·(m + n)·EPS
    assert_normwise_close(res.M, np.outer(C[:, j], C[:, j]), cond_rtol(1.0, sum(C.shape)), "M")
    assert res.max_mahalanobis == pytest.approx(1.0)
    assert_kiefer_wolfowitz(res, C)


# ----------------------------------------------------------------------------------------------
# honesty when stopped early, and the gradient-ascent baseline
# ----------------------------------------------------------------------------------------------


def test_max_iter_returns_feasible_and_honest_gap() -> None:
    C = np.random.default_rng(8).standard_normal((10, 120))
    best = solve_noise_covariance(C)
    with pytest.warns(ConvergenceWarning, match=r"logdet noise design stopped after 1 steps"):
        early = solve_noise_covariance(C, max_iter=1)
    assert not early.converged
    assert early.iterations <= 1
    # still private: scaled to the achieved maximum
    assert early.max_mahalanobis == pytest.approx(1.0, abs=scaling_atol(early))
    assert np.max(mahalanobis_via_chol(early, C)) <= 1.0 + mahalanobis_tol(early, C)
    # the certificate really bounds the excess log-determinant: best is within its gap of the
    # optimum and both are feasible, up to their rounding (logdet_slack)
    excess = early.log_det_k - best.log_det_k
    slack = logdet_slack(early, C) + logdet_slack(best, C)
    assert -(best.gap_bound + slack) <= excess <= early.gap_bound + slack
    gains = early.lam.sum() * mahalanobis_via_chol(early, C)
    assert early.gap_bound == pytest.approx(early.rank * math.log(gains.max() / early.rank))


@pytest.mark.parametrize(
    "C",
    [
        gp_cloaking_matrix(np.linspace(0.0, 50.0, 8), np.linspace(0.0, 60.0, 6), lengthscale=10.0),
        np.random.default_rng(3).standard_normal((3, 10)),
        low_rank(np.random.default_rng(4), 9, 12, 4),
    ],
)
def test_gradient_ascent_reference_is_feasible_and_not_better(C: np.ndarray) -> None:
    best = solve_noise_covariance(C)
    ref = gradient_ascent_reference(C, rng=np.random.default_rng(0), max_iter=50_000)
    assert ref.converged
    np.testing.assert_array_equal(ref.basis, best.basis)  # same basis: log dets comparable
    assert np.all(ref.lam >= 0.0)
    assert ref.max_mahalanobis <= 1.0 + scaling_atol(ref)
    assert float(np.max(mahalanobis_via_chol(ref, C))) == pytest.approx(ref.max_mahalanobis)
    # ref is feasible, best within best.gap_bound of the optimum (both up to logdet_slack)
    slack = logdet_slack(ref, C) + logdet_slack(best, C)
    assert ref.log_det_k >= best.log_det_k - best.gap_bound - slack
    assert ref.log_det_k - best.log_det_k <= ref.gap_bound + slack


def test_gradient_ascent_reference_time_cap() -> None:
    C = np.random.default_rng(9).standard_normal((6, 40))
    ref = gradient_ascent_reference(C, rng=np.random.default_rng(1), max_seconds=1e-9)
    assert not ref.converged
    assert ref.iterations == 1
    assert ref.max_mahalanobis <= 1.0 + scaling_atol(ref)


# ----------------------------------------------------------------------------------------------
# input validation
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("C", "match"),
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN or infinite"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), "NaN or infinite"),
        (np.zeros((0, 4)), "non-empty"),
        (np.zeros((3, 0)), "non-empty"),
        (np.zeros((3, 4)), "all zero"),
        (np.ones(5), "2-dimensional"),
        (np.ones((2, 2, 2)), "2-dimensional"),
        (np.ones((2, 2), dtype=complex), "real floating-point"),
        (np.array([["a", "b"]]), "real floating-point"),
    ],
)
def test_bad_matrix_raises(C: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        solve_noise_covariance(C)
    with pytest.raises(ValueError, match=match):
        gradient_ascent_reference(C, rng=np.random.default_rng(0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tol": 0.0},
        {"tol": -1.0},
        {"tol": float("nan")},
        {"rank_tol": 0.0},
        {"rank_tol": 1.0},
        {"max_iter": 0},
        {"max_iter": 2.5},
    ],
)
def test_bad_parameters_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        solve_noise_covariance(np.eye(3), **kwargs)


def test_baseline_requires_generator() -> None:
    with pytest.raises(ValueError, match="Generator"):
        gradient_ascent_reference(np.eye(3), rng=0)  # type: ignore[arg-type]
