"""Tests for the cloaking noise-covariance solver (pm_dpgp.mechanisms.cloaking).

The optimality tests check the Kiefer–Wolfowitz (1960) certificate independently of the
solver: with ``u = λ / Σλ`` and ``M_k = Σ λ_i a_i a_iᵀ`` scaled so that ``max a_iᵀ M_k⁻¹ a_i = 1``,
the design gains are ``g_i = Σλ · a_iᵀ M_k⁻¹ a_i`` and optimality means ``max g_i = k``,
``g_i = k`` wherever ``λ_i > 0``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from pm_dpgp.mechanisms.cloaking import (
    NoiseCovariance,
    gradient_ascent_reference,
    solve_noise_covariance,
)

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


def assert_kiefer_wolfowitz(res: NoiseCovariance, C: np.ndarray, tol: float = TOL) -> None:
    """Independent check of feasibility, the KW certificate and complementary slackness."""
    k = res.rank
    lam = res.lam
    assert lam.shape == (C.shape[1],)
    assert np.all(lam >= 0.0)
    mahal = mahalanobis_via_chol(res, C)
    assert np.max(mahal) <= 1.0 + 1e-8
    assert res.max_mahalanobis == pytest.approx(np.max(mahal), rel=1e-9)
    g = lam.sum() * mahal  # design gains of u = λ / Σλ
    assert np.max(g) <= k * (1.0 + tol) + 1e-9
    support = lam > 1e-8 * lam.max()
    np.testing.assert_allclose(g[support], k, rtol=1e-6)
    # M_k = Σ λ_i a_i a_iᵀ (compare after scaling by the diagonal: M_k may be ill conditioned)
    A = res.basis.T @ C
    rebuilt = (A * lam) @ A.T
    d = np.sqrt(np.diag(res.M_k))
    np.testing.assert_allclose(rebuilt / np.outer(d, d), res.M_k / np.outer(d, d), atol=1e-8)
    assert res.converged
    assert 0.0 <= res.gap_bound <= k * tol + 1e-12


def assert_structure(res: NoiseCovariance, m: int, n: int) -> None:
    k = res.rank
    assert res.basis.shape == (m, k)
    assert res.M.shape == (m, m)
    assert res.M_k.shape == res.chol_k.shape == (k, k)
    np.testing.assert_allclose(res.basis.T @ res.basis, np.eye(k), atol=1e-12)
    np.testing.assert_array_equal(res.chol_k, np.tril(res.chol_k))
    assert np.all(np.diag(res.chol_k) > 0.0)
    scale = np.max(np.abs(res.M_k))
    np.testing.assert_allclose(res.chol_k @ res.chol_k.T, res.M_k, atol=1e-13 * scale)
    np.testing.assert_allclose(res.basis @ res.M_k @ res.basis.T, res.M, atol=1e-13 * scale)
    np.testing.assert_array_equal(res.M, res.M.T)


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


def test_certificate_gp_cloaking_matrix() -> None:
    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(0.0, 80.0, 90))
    x_test = np.linspace(0.0, 110.0, 150)
    C = gp_cloaking_matrix(x, x_test)
    res = solve_noise_covariance(C)
    s = np.linalg.svd(C, compute_uv=False)
    threshold = res.rank_tol * s[0]
    assert np.count_nonzero(s > threshold) <= res.rank <= np.count_nonzero(s > 0.98 * threshold)
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
    assert independent == pytest.approx(res.max_mahalanobis, rel=1e-9)
    assert res.max_mahalanobis <= 1.0 + 1e-8
    assert res.max_mahalanobis == pytest.approx(1.0, abs=1e-12)


def test_max_mahalanobis_independent_gp() -> None:
    # M has condition number ~ (σ_1/σ_k)² here, far beyond what pinv(M) resolves, so the
    # independent check goes through the Cholesky factor and the projected columns.
    C = gp_cloaking_matrix(np.linspace(1.0, 70.0, 50), np.linspace(0.0, 110.0, 120))
    res = solve_noise_covariance(C)
    independent = float(np.max(mahalanobis_via_chol(res, C)))
    assert independent == pytest.approx(res.max_mahalanobis, rel=1e-9)
    assert res.max_mahalanobis <= 1.0 + 1e-8
    # with a coarse rank tolerance M is well enough conditioned for pinv
    coarse = solve_noise_covariance(C, rank_tol=1e-4)
    independent = float(np.max(mahalanobis_via_pinv(coarse, C)))
    assert independent == pytest.approx(coarse.max_mahalanobis, rel=1e-6)


@pytest.mark.parametrize("rank_tol", [1e-10, 1e-6, 1e-3])
def test_projector_and_discarded_directions(rank_tol: float) -> None:
    C = gp_cloaking_matrix(np.linspace(0.0, 60.0, 40), np.linspace(0.0, 100.0, 70))
    res = solve_noise_covariance(C, rank_tol=rank_tol)
    P = res.projector()
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    np.testing.assert_allclose(P, P.T, atol=1e-15)
    assert np.trace(P) == pytest.approx(res.rank)
    assert res.rank_tol == rank_tol
    s = np.linalg.svd(C, compute_uv=False)
    assert np.all(s[res.rank :] <= rank_tol * s[0])
    # retained: above the threshold up to the (≤ 1 %) slack of the range finder's residual
    assert np.all(s[: res.rank] > 0.98 * rank_tol * s[0])
    # what is projected away is exactly the discarded spectrum
    discarded = np.linalg.norm(C - P @ C, 2)
    assert discarded <= rank_tol * s[0] * (1.0 + 1e-6) + 1e-14 * s[0]


def test_duplicate_negated_and_zero_columns_are_harmless() -> None:
    rng = np.random.default_rng(11)
    C = rng.standard_normal((5, 15))
    padded = np.hstack([C, C[:, :4], -C[:, 4:7], np.zeros((5, 3))])
    base = solve_noise_covariance(C)
    res = solve_noise_covariance(padded)
    assert res.log_det_k == pytest.approx(base.log_det_k, abs=1e-10)
    np.testing.assert_allclose(res.M, base.M, atol=1e-10 * np.abs(base.M).max())
    assert np.all(res.lam[-3:] == 0.0)
    assert_kiefer_wolfowitz(res, padded)


def test_scale_equivariance() -> None:
    C = np.random.default_rng(5).standard_normal((4, 25))
    res = solve_noise_covariance(C)
    scaled = solve_noise_covariance(1e-3 * C)
    np.testing.assert_allclose(scaled.M, 1e-6 * res.M, rtol=1e-8, atol=1e-14 * np.abs(res.M).max())


def test_rank_one() -> None:
    rng = np.random.default_rng(6)
    v = rng.standard_normal(30)
    C = np.outer(rng.standard_normal(8), v)
    res = solve_noise_covariance(C)
    assert res.rank == 1
    j = int(np.argmax(np.abs(v)))
    np.testing.assert_allclose(res.M, np.outer(C[:, j], C[:, j]), atol=1e-12)
    assert res.max_mahalanobis == pytest.approx(1.0)
    assert_kiefer_wolfowitz(res, C)


# ----------------------------------------------------------------------------------------------
# honesty when stopped early, and the gradient-ascent baseline
# ----------------------------------------------------------------------------------------------


def test_max_iter_returns_feasible_and_honest_gap() -> None:
    C = np.random.default_rng(8).standard_normal((10, 120))
    best = solve_noise_covariance(C)
    early = solve_noise_covariance(C, max_iter=1)
    assert not early.converged
    assert early.iterations <= 1
    # still private: scaled to the achieved maximum
    assert early.max_mahalanobis == pytest.approx(1.0, abs=1e-12)
    assert np.max(mahalanobis_via_chol(early, C)) <= 1.0 + 1e-8
    # the certificate really bounds the excess log-determinant
    excess = early.log_det_k - best.log_det_k
    assert -1e-9 <= excess <= early.gap_bound + 1e-12
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
    assert ref.max_mahalanobis <= 1.0 + 1e-8
    assert float(np.max(mahalanobis_via_chol(ref, C))) == pytest.approx(ref.max_mahalanobis)
    assert ref.log_det_k >= best.log_det_k - 1e-9
    assert ref.log_det_k - best.log_det_k <= ref.gap_bound + 1e-12


def test_gradient_ascent_reference_time_cap() -> None:
    C = np.random.default_rng(9).standard_normal((6, 40))
    ref = gradient_ascent_reference(C, rng=np.random.default_rng(1), max_seconds=1e-9)
    assert not ref.converged
    assert ref.iterations == 1
    assert ref.max_mahalanobis <= 1.0 + 1e-8


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
