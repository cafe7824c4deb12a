"""Sparse GP builder (pm.gp.MarginalApprox), Titsias q(u), sufficient statistics, eq. (17)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.gp.sparse import (
    chunk_statistics,
    count_matching_rows,
    default_chunk_size,
    predict_from_qu,
    sufficient_statistics,
    titsias_qu,
)
from pm_dpgp.models import (
    InducingFromDataError,
    PrivateHyperparameterError,
    PublicSparseGP,
    SparseGPRegression,
    grid_inducing_points,
    kmeans_inducing_points,
    sparse_gp_regression,
)

Z15 = grid_inducing_points(-3.5, 3.5, 15)


def _data(seed: int = 0, n: int = 300, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-4, 4, n)
    y = np.sin(2 * X) + noise * rng.standard_normal(n)
    return X, y


@pytest.fixture(scope="module")
def reg() -> SparseGPRegression:
    X, y = _data()
    return sparse_gp_regression(X, y, 0.8**2 * pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, sigma=0.1)


@pytest.fixture(scope="module")
def pub(reg: SparseGPRegression) -> PublicSparseGP:
    return reg.public_sparse_gp()


# --------------------------------------------------------------------------- builder
def test_builder_uses_marginal_approx_vfe(reg: SparseGPRegression) -> None:
    assert isinstance(reg.gp, pm.gp.MarginalApprox)
    assert reg.gp.approx == "VFE"
    assert reg.Z.shape == (15, 1)
    assert any("marginalapprox_loglik" in p.name for p in reg.model.potentials)


def test_public_sparse_gp_holds_no_data(pub: PublicSparseGP) -> None:
    assert not hasattr(pub, "X") and not hasattr(pub, "y")
    assert pub.n_inducing == 15 and pub.noise_var == pytest.approx(0.01)
    assert pub.stationary
    K = pub.kzz()
    assert np.allclose(K, K.T) and np.all(np.linalg.eigvalsh(K) > 0)
    assert pub.jitter == 1e-6 and "ExpQuad" in pub.description


def test_z_from_private_x_refused() -> None:
    X, y = _data(1, 40)
    Z = np.concatenate([X[:5], [10.0]])
    with pytest.raises(InducingFromDataError, match="coincide"):
        sparse_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, sigma=0.1)
    m = sparse_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, sigma=0.1, z_is_public=True)
    assert m.public_sparse_gp().z_is_public


def test_free_hyperparameters_need_public_values() -> None:
    X, y = _data(2, 50)
    reg = sparse_gp_regression(
        X,
        y,
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=Z15,
        sigma=lambda: pm.HalfNormal("s", 1),
    )
    with pytest.raises(PrivateHyperparameterError):
        reg.public_sparse_gp()
    pub = reg.public_sparse_gp({"ell": 1.0, "s": 0.2})
    assert pub.noise_var == pytest.approx(0.04)


def test_mean_from_data_refused() -> None:
    X, y = _data(3, 50)
    with pytest.raises(ValueError, match="mean"):
        sparse_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, sigma=0.1, mean=y.mean())


def test_dataless_model_for_streams() -> None:
    reg = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, sigma=0.1)
    assert reg.X.shape == (0, 1)
    assert reg.public_sparse_gp().n_inducing == 15
    with pytest.raises(ValueError, match="both"):
        sparse_gp_regression(np.ones(3), None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, sigma=0.1)


def test_inducing_helpers() -> None:
    G = grid_inducing_points([-1, 0], [1, 2], [3, 2])
    assert G.shape == (6, 2)
    assert set(G[:, 0]) == {-1.0, 0.0, 1.0}
    pub_data = np.random.default_rng(0).normal(size=(500, 2))
    C1 = kmeans_inducing_points(pub_data, 8, rng=np.random.default_rng(1))
    C2 = kmeans_inducing_points(pub_data, 8, rng=np.random.default_rng(1))
    assert C1.shape == (8, 2) and np.array_equal(C1, C2)
    with pytest.raises(ValueError):
        grid_inducing_points(1, 0, 3)


def test_count_matching_rows() -> None:
    X = np.array([[0.0, 1.0], [2.0, 3.0]])
    assert count_matching_rows(np.array([[0.0, 1.0], [5.0, 5.0]]), X) == 1
    assert count_matching_rows(np.array([[-0.0, 1.0]]), X) == 1
    assert count_matching_rows(np.array([[0.0, 3.0]]), X) == 0


# --------------------------------------------------------------------------- statistics
def test_chunk_statistics_matches_eq3(pub: PublicSparseGP) -> None:
    X, y = _data(4, 200)
    K = pub.kernel(Z15, X)
    A, B = chunk_statistics(K, y[:, None])
    assert np.allclose(A[:, 0], K @ y)
    assert np.allclose(B[0], K @ K.T)
    w = np.random.default_rng(0).uniform(0.1, 1, 200)
    A, B = chunk_statistics(K, y[:, None], w[:, None])
    assert np.allclose(A[:, 0], K @ (w * y))
    assert np.allclose(B[0], (K * w) @ K.T)


def test_statistics_chunked_iterator_and_dask_agree(pub: PublicSparseGP) -> None:
    da = pytest.importorskip("dask.array")
    X, y = _data(5, 1000)
    K = pub.kernel(Z15, X)
    full = sufficient_statistics(pub.kernel, Z15, (X, y), chunk_size=10**6)
    assert np.allclose(full.A[:, 0], K @ y) and np.allclose(full.B[0], K @ K.T)
    chunked = sufficient_statistics(pub.kernel, Z15, (X, y), chunk_size=97)
    sizes = [0, 13, 400, 1000]
    gen = ((X[a:b], y[a:b]) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    streamed = sufficient_statistics(pub.kernel, Z15, gen, chunk_size=128)
    dasked = sufficient_statistics(
        pub.kernel, Z15, (da.from_array(X, chunks=111), da.from_array(y, chunks=111))
    )
    for s in (chunked, streamed, dasked):
        assert s.n == 1000
        assert np.allclose(s.A, full.A, rtol=1e-12, atol=1e-10)
        assert np.allclose(s.B, full.B, rtol=1e-12, atol=1e-10)


def test_statistics_memory_independent_of_n(pub: PublicSparseGP) -> None:
    """Chunks are processed one at a time: a generator is consumed lazily."""
    seen = []

    def gen():
        rng = np.random.default_rng(0)
        for _ in range(5):
            seen.append(1)
            x = rng.uniform(-4, 4, 300)
            yield x, np.sin(x)

    s = sufficient_statistics(pub.kernel, Z15, gen())
    assert s.n == 1500 and len(seen) == 5
    assert default_chunk_size(100) * 100 * 8 <= 40 * 2**20


def test_bad_data_forms(pub: PublicSparseGP) -> None:
    with pytest.raises(TypeError):
        sufficient_statistics(pub.kernel, Z15, 3.0)
    with pytest.raises(ValueError, match="same number of rows"):
        sufficient_statistics(pub.kernel, Z15, (np.ones(3), np.ones(4)))


# --------------------------------------------------------------------------- Titsias q(u)
def test_titsias_matches_eq2_and_pymc_predictions(reg: SparseGPRegression, pub) -> None:
    X, y = reg.X[:, 0], reg.y
    K = pub.kzz()
    s = sufficient_statistics(pub.kernel, Z15, (X, y))
    m, S = titsias_qu(K, s.A[:, 0], s.B[0], 1.0 / pub.noise_var)
    # Literal eq. (2) in long form (well-conditioned enough at this size).
    Kzx = pub.kernel(Z15, X)
    Sig = np.linalg.inv(K + Kzx @ Kzx.T / pub.noise_var)
    assert np.allclose(m, K @ Sig @ Kzx @ y / pub.noise_var, atol=1e-6)
    assert np.allclose(S, K @ Sig @ K, atol=1e-8)
    Xs = np.linspace(-5, 5, 41)
    mu, var = predict_from_qu(K, m, S, pub.kernel(Z15, Xs), pub.kernel_diag(Xs))
    with reg.model:
        mu_pm, var_pm = reg.gp.predict(Xs[:, None], point={}, diag=True)
        mu_pn, var_pn = reg.gp.predict(Xs[:, None], point={}, diag=True, pred_noise=True)
    assert np.allclose(mu, mu_pm, rtol=1e-7, atol=1e-8)
    assert np.allclose(var, var_pm, rtol=1e-6, atol=1e-9)
    assert np.allclose(var + pub.noise_var, var_pn, rtol=1e-6, atol=1e-9)


def test_predict_full_cov_and_multi_output(pub: PublicSparseGP) -> None:
    K = pub.kzz()
    rng = np.random.default_rng(0)
    F = rng.normal(size=(15, 15))
    S = 0.01 * F @ F.T
    m = rng.normal(size=15)
    Xs = np.linspace(-3, 3, 7)
    Kzv, kd = pub.kernel(Z15, Xs), pub.kernel_diag(Xs)
    mu, var = predict_from_qu(K, m, S, Kzv, kd, mean=0.5)
    mu2, cov = predict_from_qu(K, m, S, Kzv, pub.kernel(Xs), mean=0.5, full_cov=True)
    assert np.allclose(mu, mu2) and np.allclose(np.diag(cov), var)
    W = np.linalg.solve(K, Kzv)
    assert np.allclose(mu, 0.5 + W.T @ (m - 0.5))
    assert np.allclose(cov, pub.kernel(Xs) - Kzv.T @ W + W.T @ S @ W, atol=1e-10)
    muT, varT = predict_from_qu(K, np.stack([m, -m]), np.stack([S, S]), Kzv, kd)
    mu0, _ = predict_from_qu(K, m, S, Kzv, kd)
    assert muT.shape == (2, 7) and np.allclose(varT[0], var) and np.allclose(muT[0], mu0)
    assert np.allclose(muT[1], -mu0)
