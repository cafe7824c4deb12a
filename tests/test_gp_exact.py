"""Tests for pm_dpgp.gp.linalg and pm_dpgp.gp.exact (numpy/scipy posterior algebra)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from pm_dpgp.gp.exact import ExactPosterior, cloaking_matrix, posterior_mean_cov
from pm_dpgp.gp.linalg import (
    CholeskyError,
    cho_solve_lower,
    jittered_cholesky,
    solve_lower,
)
from tests.tolerances import EPS, assert_normwise_close, cond_rtol, scalar_rtol


def rbf(A: np.ndarray, B: np.ndarray, ls: float = 0.7, var: float = 1.3) -> np.ndarray:
    """Reference squared-exponential kernel (R&W eq. 2.16), written independently."""
    A = np.atleast_2d(A.T).T
    B = np.atleast_2d(B.T).T
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return var * np.exp(-0.5 * d2 / ls**2)


@pytest.fixture(scope="module")
def problem() -> dict[str, np.ndarray | float]:
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(15, 2))
    Xs = rng.uniform(-2.5, 2.5, size=(9, 2))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=15)
    return {
        "K_ff": rbf(X, X),
        "K_sf": rbf(Xs, X),
        "K_ss": rbf(Xs, Xs),
        "y": y,
        "noise_var": 0.05,
    }


# ------------------------------------------------------------------ tolerances
def _cholesky_residual_rtol(n: int) -> float:
    """Normwise bound on ``‖L Lᵀ − A‖_F / ‖A‖_F`` for a computed Cholesky factor ``L`` of ``A``.

    Backward error ``L Lᵀ = A + ΔA``, ``|ΔA| ≤ γ_{n+1}|L||Lᵀ|`` (Higham 2002, Thm 10.3), plus
    ``γ_n|L||Lᵀ|`` for forming ``L Lᵀ`` again; ``‖|L||Lᵀ|‖_F ≤ ‖L‖_F² = tr A ≤ √n‖A‖_F``.
    Safety factor 2.  Independent of κ(A): a residual check, not a forward-error check.
    """
    return 2 * (2 * n + 1) * math.sqrt(n) * EPS


def _product_rtol(A: np.ndarray, left: np.ndarray, x: np.ndarray, result: np.ndarray) -> float:
    """Normwise tolerance for ``result = left @ x`` (+ terms computed alike), ``x = A⁻¹b``.

    Two backward-stable solves give ``‖δx‖_F ≤ cond_rtol(A)·‖x‖_F``, and the products with
    ``left`` add ``γ_n`` per side (≤ ``scalar_rtol(n)``, Higham 2002 §3.5), so the two
    ``result``s differ by ``≤ ‖left‖₂·(cond_rtol(A) + scalar_rtol(n))·‖x‖_F``; relative to
    ``‖result‖_F`` this is amplified by ``‖left‖₂‖x‖_F / ‖result‖_F`` when ``result`` is small
    through cancellation (e.g. ``K_ss − K_sf A⁻¹ K_fs``).
    """
    rel = cond_rtol(A) + scalar_rtol(A.shape[0])
    bound = np.linalg.norm(left, 2) * np.linalg.norm(x)
    size = np.linalg.norm(result)  # normwise_error is absolute when the reference is 0
    return rel * (max(1.0, bound / size) if size > 0 else bound)


def _reduction_atol(n: int, *terms: np.ndarray) -> np.ndarray:
    """Componentwise bound on the difference of two sums of the same ``n`` numbers in any order.

    ``|fl(Σ xᵢ) − Σ xᵢ| ≤ γ_{n−1} Σ|xᵢ|`` (Higham 2002, §4.2) for each side, plus one rounding
    per extra addition of the given ``terms`` (each the sum of absolute values it bounds).
    """
    return 2 * (n + len(terms)) * EPS * sum(np.abs(t) for t in terms)


# ------------------------------------------------------------------ linalg
def test_cholesky_pd_needs_no_jitter() -> None:
    rng = np.random.default_rng(0)
    B = rng.normal(size=(6, 6))
    A = B @ B.T + 6 * np.eye(6)
    L, j = jittered_cholesky(A)
    assert j == 0.0
    assert np.allclose(np.triu(L, 1), 0.0)  # LAPACK writes exact zeros above the diagonal
    # backward error of Cholesky (κ-independent residual bound)
    assert_normwise_close(L @ L.T, A, _cholesky_residual_rtol(6), "L Lᵀ")
    with pytest.raises(AssertionError):  # a factor off by 1e-4 in one entry is rejected
        L_bad = L.copy()
        L_bad[3, 1] *= 1 + 1e-4
        assert_normwise_close(L_bad @ L_bad.T, A, _cholesky_residual_rtol(6))


@pytest.mark.parametrize(
    "A",
    [
        np.ones((4, 4)),  # rank one
        rbf(np.array([0.0, 0.0, 1.0, 1.0, 2.0]), np.array([0.0, 0.0, 1.0, 1.0, 2.0])),  # duplicates
    ],
    ids=["ones", "duplicated-inputs"],
)
def test_cholesky_singular_psd_uses_positive_jitter(A: np.ndarray) -> None:
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(A)
    L, j = jittered_cholesky(A)
    assert j > 0.0
    assert j <= 1e-5 * np.mean(np.diag(A))
    assert np.all(np.isfinite(L)) and np.all(np.diag(L) > 0)
    assert np.allclose(np.triu(L, 1), 0.0)  # LAPACK writes exact zeros above the diagonal
    # backward error of Cholesky of the jittered matrix (κ-independent residual bound)
    n = A.shape[0]
    assert_normwise_close(L @ L.T, A + j * np.eye(n), _cholesky_residual_rtol(n), "L Lᵀ")


def test_cholesky_initial_jitter_is_used_and_reported() -> None:
    A = np.eye(3)
    L, j = jittered_cholesky(A, jitter=0.5)
    assert j == 0.5
    np.testing.assert_allclose(L @ L.T, 1.5 * np.eye(3))


def test_cholesky_indefinite_raises_linalg_error() -> None:
    A = np.diag([1.0, -1.0])
    with pytest.raises(CholeskyError, match="not positive semi-definite") as info:
        jittered_cholesky(A)
    assert isinstance(info.value, np.linalg.LinAlgError)


@pytest.mark.parametrize(
    ("A", "kwargs"),
    [
        (np.array([[1.0, np.nan], [np.nan, 1.0]]), {}),
        (np.array([[1.0, 0.5], [0.0, 1.0]]), {}),  # not symmetric
        (np.ones((2, 3)), {}),  # not square
        (np.eye(2), {"jitter": -1.0}),
        (np.eye(2), {"max_tries": 0}),
    ],
)
def test_cholesky_bad_input(A: np.ndarray, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        jittered_cholesky(A, **kwargs)


def test_solves_match_dense() -> None:
    rng = np.random.default_rng(3)
    B = rng.normal(size=(5, 5))
    A = B @ B.T + np.eye(5)
    L, _ = jittered_cholesky(A)
    R = rng.normal(size=(5, 3))
    # Cholesky vs LU solves: normwise forward error ≤ cond_rtol(A) (tests/tolerances.py);
    # triangular solves with L: the same with κ(L).
    tol_A, tol_L = cond_rtol(A), cond_rtol(L)
    assert_normwise_close(cho_solve_lower(L, R), np.linalg.solve(A, R), tol_A, "cho_solve")
    assert_normwise_close(cho_solve_lower(L, R[:, 0]), np.linalg.solve(A, R[:, 0]), tol_A, "vec")
    assert_normwise_close(solve_lower(L, R), np.linalg.solve(L, R), tol_L, "solve_lower")
    # ... and a solve with A off by 1e-4 (relative, one entry pair) is rejected
    A_bad = A.copy()
    A_bad[0, 1] = A_bad[1, 0] = A[0, 1] * (1 + 1e-4)
    with pytest.raises(AssertionError):
        assert_normwise_close(cho_solve_lower(L, R), np.linalg.solve(A_bad, R), tol_A)
    with pytest.raises(ValueError, match="rows"):
        cho_solve_lower(L, np.ones(4))


# ------------------------------------------------------------------ posterior
def test_posterior_matches_dense_reference(problem: dict) -> None:
    K, Ksf, Kss, y, s2 = (problem[k] for k in ("K_ff", "K_sf", "K_ss", "y", "noise_var"))
    A = K + s2 * np.eye(K.shape[0])
    post = ExactPosterior(K, s2)
    assert post.jitter == 0.0 and post.n == 15
    mu_ref = 0.4 + Ksf @ np.linalg.solve(A, y - 0.4)
    cov_ref = Kss - Ksf @ np.linalg.solve(A, Ksf.T)
    mu = post.mean(Ksf, y, mean_f=0.4, mean_s=0.4)
    cov = post.cov(Ksf, Kss)
    # Cholesky (ours) vs LU (reference) solves with A, then a product with K_sf.
    alpha, X = np.linalg.solve(A, y - 0.4), np.linalg.solve(A, Ksf.T)
    assert_normwise_close(mu, mu_ref, _product_rtol(A, Ksf, alpha, mu_ref), "mean")
    assert_normwise_close(cov, cov_ref, _product_rtol(A, Ksf, X, cov_ref), "cov")
    assert np.array_equal(cov, cov.T)  # ½(S + Sᵀ) is bitwise symmetric
    # var and diag(cov) use the same V = L⁻¹K_fs; only the order of the 15-term sums differs.
    V = solve_lower(post.L, Ksf.T)
    var = post.var(Ksf, np.diag(Kss))
    assert np.all(np.abs(var - np.diag(cov)) <= _reduction_atol(15, np.diag(Kss), (V * V).sum(0)))
    # a wrong answer is rejected: posterior mean with the noise variance off by 1e-4
    mu_bad = 0.4 + Ksf @ np.linalg.solve(K + s2 * (1 + 1e-4) * np.eye(15), y - 0.4)
    with pytest.raises(AssertionError):
        assert_normwise_close(mu_bad, mu_ref, _product_rtol(A, Ksf, alpha, mu_ref))


def test_cloaking_matrix(problem: dict) -> None:
    K, Ksf, y, s2 = (problem[k] for k in ("K_ff", "K_sf", "y", "noise_var"))
    post = ExactPosterior(K, s2)
    C = post.cloaking_matrix(Ksf)
    assert C.shape == (9, 15)
    A = K + s2 * np.eye(15)
    C_ref = np.linalg.solve(A, Ksf.T).T  # dense LU, no Cholesky
    assert_normwise_close(C, C_ref, cond_rtol(A), "C")  # two backward-stable solves with A
    # the wrapper runs the same code on the same numbers: equal to the last bit
    np.testing.assert_allclose(cloaking_matrix(K, Ksf, s2), C, rtol=1e-14, atol=0)
    # C (y - m) + m is the posterior mean: C = (A⁻¹K_fs)ᵀ vs K_sf (A⁻¹(y − m)), two solves.
    mean = post.mean(Ksf, y, mean_f=1.5, mean_s=1.5)
    tol = _product_rtol(A, Ksf, np.linalg.solve(A, y - 1.5), mean - 1.5)
    assert_normwise_close(C @ (y - 1.5), mean - 1.5, tol, "C (y - m)")


def test_vector_means_and_convenience(problem: dict) -> None:
    K, Ksf, Kss, y, s2 = (problem[k] for k in ("K_ff", "K_sf", "K_ss", "y", "noise_var"))
    mf, ms = np.linspace(0, 1, 15), np.linspace(-1, 0, 9)
    mu, cov = posterior_mean_cov(K, Ksf, Kss, y, s2, mean_f=mf, mean_s=ms)
    A = K + s2 * np.eye(15)
    alpha = np.linalg.solve(A, y - mf)
    ref = ms + Ksf @ alpha
    assert_normwise_close(mu, ref, _product_rtol(A, Ksf, alpha, ref - ms), "mean")  # LU vs Cholesky
    mu2, var = posterior_mean_cov(K, Ksf, np.diag(Kss), y, s2, mean_f=mf, mean_s=ms, full_cov=False)
    np.testing.assert_allclose(mu2, mu)  # same code on the same numbers: bitwise equal
    # same V = L⁻¹K_fs on both sides; only the order of the 15-term sums differs
    V = solve_lower(ExactPosterior(K, s2).L, Ksf.T)
    assert np.all(np.abs(var - np.diag(cov)) <= _reduction_atol(15, np.diag(Kss), (V * V).sum(0)))
    with pytest.raises(ValueError, match="length"):
        ExactPosterior(K, s2).mean(Ksf, y, mean_s=np.zeros(3))


def test_log_marginal_likelihood(problem: dict) -> None:
    K, y, s2 = problem["K_ff"], problem["y"], problem["noise_var"]
    A = K + s2 * np.eye(15)
    ref = scipy.stats.multivariate_normal(mean=np.full(15, 0.2), cov=A).logpdf(y)
    # SciPy: eigh; ours: Cholesky.  The quadratic form rᵀA⁻¹r has relative error ≤ cond_rtol(A);
    # log det = Σ log λᵢ has absolute error ≤ Σ |δλᵢ|/λᵢ ≤ n·cond_rtol(A) (|δλᵢ| ≤ c·n·EPS‖A‖).
    r = y - 0.2
    quad = float(r @ np.linalg.solve(A, r))
    tol = 0.5 * cond_rtol(A) * (quad + 15)
    lml = ExactPosterior(K, s2).log_marginal_likelihood(y, mean_f=0.2)
    assert lml == pytest.approx(ref, abs=tol)
    assert lml != pytest.approx(ref - 0.5e-4 * quad, abs=tol)  # rᵀA⁻¹r off by 1e-4 is seen


def test_posterior_jitter_recorded_for_noise_free_singular_kernel() -> None:
    x = np.array([0.0, 0.0, 1.0])
    post = ExactPosterior(rbf(x, x), 0.0)
    assert post.jitter > 0.0


def test_posterior_validation(problem: dict) -> None:
    K, Ksf, y = problem["K_ff"], problem["K_sf"], problem["y"]
    with pytest.raises(ValueError, match="noise_var"):
        ExactPosterior(K, -0.1)
    with pytest.raises(ValueError, match="noise_var"):
        ExactPosterior(K, float("nan"))
    bad = K.copy()
    bad[0, 1] = bad[1, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        ExactPosterior(bad, 0.1)
    post = ExactPosterior(K, 0.1)
    with pytest.raises(ValueError, match="K_sf"):
        post.cloaking_matrix(Ksf[:, :-1])
    with pytest.raises(ValueError, match="length 15"):
        post.mean(Ksf, y[:-1])
    y_nan = y.copy()
    y_nan[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        post.mean(Ksf, y_nan)
    with pytest.raises(ValueError, match="K_ss"):
        post.cov(Ksf, np.eye(4))


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 12),
    m=st.integers(1, 6),
    ls=st.floats(0.1, 5.0),
    noise_var=st.floats(1e-3, 10.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_cloaking_property(n: int, m: int, ls: float, noise_var: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X, Xs, y = rng.normal(size=(n, 1)), rng.normal(size=(m, 1)), rng.normal(size=n)
    K, Ksf = rbf(X, X, ls=ls, var=1.0), rbf(Xs, X, ls=ls, var=1.0)
    post = ExactPosterior(K, noise_var)
    C = post.cloaking_matrix(Ksf)
    A = K + noise_var * np.eye(n)
    # Residual of a backward-stable Cholesky solve (Higham 2002, Thm 10.4, ‖|L||Lᵀ|‖ ≤ n‖A‖)
    # plus forming C A: ‖C A − K_sf‖_F ≤ 4(n + 1)·n·EPS·‖A‖₂‖C‖_F, whatever κ(A) is.
    resid = np.linalg.norm(C @ A - Ksf)
    assert resid <= 4 * (n + 1) * n * EPS * np.linalg.norm(A, 2) * np.linalg.norm(C)
    mean = post.mean(Ksf, y)
    assert_normwise_close(C @ y, mean, _product_rtol(A, Ksf, np.linalg.solve(A, y), mean), "C y")
    # The posterior variance never exceeds the prior variance and is >= 0 (up to rounding):
    # 1 − (a sum of squares) rounds to ≤ 1 exactly; kᵀA⁻¹k ≤ 1 has error ≤ cond_rtol(A).
    var = post.var(Ksf, np.ones(m))
    assert np.all(var <= 1.0) and np.all(var >= -cond_rtol(A))
