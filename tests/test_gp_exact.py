"""Tests for pm_dpgp.gp.linalg and pm_dpgp.gp.exact (numpy/scipy posterior algebra)."""

from __future__ import annotations

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


# ------------------------------------------------------------------ linalg
def test_cholesky_pd_needs_no_jitter() -> None:
    rng = np.random.default_rng(0)
    B = rng.normal(size=(6, 6))
    A = B @ B.T + 6 * np.eye(6)
    L, j = jittered_cholesky(A)
    assert j == 0.0
    assert np.allclose(np.triu(L, 1), 0.0)
    np.testing.assert_allclose(L @ L.T, A, rtol=1e-12, atol=1e-12)


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
    assert np.allclose(np.triu(L, 1), 0.0)
    np.testing.assert_allclose(L @ L.T, A + j * np.eye(A.shape[0]), atol=1e-12)


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
    np.testing.assert_allclose(cho_solve_lower(L, R), np.linalg.solve(A, R), rtol=1e-10)
    np.testing.assert_allclose(cho_solve_lower(L, R[:, 0]), np.linalg.solve(A, R[:, 0]))
    np.testing.assert_allclose(solve_lower(L, R), np.linalg.solve(L, R), rtol=1e-10)
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
    np.testing.assert_allclose(mu, mu_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cov, cov_ref, rtol=1e-9, atol=1e-12)
    assert np.array_equal(cov, cov.T)
    np.testing.assert_allclose(post.var(Ksf, np.diag(Kss)), np.diag(cov), rtol=1e-10, atol=1e-13)


def test_cloaking_matrix(problem: dict) -> None:
    K, Ksf, y, s2 = (problem[k] for k in ("K_ff", "K_sf", "y", "noise_var"))
    post = ExactPosterior(K, s2)
    C = post.cloaking_matrix(Ksf)
    assert C.shape == (9, 15)
    C_ref = np.linalg.solve(K + s2 * np.eye(15), Ksf.T).T  # dense LU, no Cholesky
    np.testing.assert_allclose(C, C_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cloaking_matrix(K, Ksf, s2), C, rtol=1e-14, atol=0)
    # C (y - m) + m is the posterior mean.
    np.testing.assert_allclose(
        C @ (y - 1.5) + 1.5, post.mean(Ksf, y, mean_f=1.5, mean_s=1.5), rtol=1e-10, atol=1e-12
    )


def test_vector_means_and_convenience(problem: dict) -> None:
    K, Ksf, Kss, y, s2 = (problem[k] for k in ("K_ff", "K_sf", "K_ss", "y", "noise_var"))
    mf, ms = np.linspace(0, 1, 15), np.linspace(-1, 0, 9)
    mu, cov = posterior_mean_cov(K, Ksf, Kss, y, s2, mean_f=mf, mean_s=ms)
    ref = ms + Ksf @ np.linalg.solve(K + s2 * np.eye(15), y - mf)
    np.testing.assert_allclose(mu, ref, rtol=1e-10, atol=1e-12)
    mu2, var = posterior_mean_cov(K, Ksf, np.diag(Kss), y, s2, mean_f=mf, mean_s=ms, full_cov=False)
    np.testing.assert_allclose(mu2, mu)
    np.testing.assert_allclose(var, np.diag(cov), rtol=1e-10, atol=1e-13)
    with pytest.raises(ValueError, match="length"):
        ExactPosterior(K, s2).mean(Ksf, y, mean_s=np.zeros(3))


def test_log_marginal_likelihood(problem: dict) -> None:
    K, y, s2 = problem["K_ff"], problem["y"], problem["noise_var"]
    ref = scipy.stats.multivariate_normal(mean=np.full(15, 0.2), cov=K + s2 * np.eye(15)).logpdf(y)
    assert ExactPosterior(K, s2).log_marginal_likelihood(y, mean_f=0.2) == pytest.approx(
        ref, rel=1e-10
    )


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
    np.testing.assert_allclose(C @ A, Ksf, rtol=1e-7, atol=1e-9 * max(1.0, np.abs(Ksf).max()))
    np.testing.assert_allclose(C @ y, post.mean(Ksf, y), rtol=1e-9, atol=1e-9)
    # The posterior variance never exceeds the prior variance and is >= 0 (up to rounding).
    var = post.var(Ksf, np.ones(m))
    assert np.all(var <= 1.0 + 1e-12) and np.all(var >= -1e-10)
