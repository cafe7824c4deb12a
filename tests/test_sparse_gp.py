"""Sparse GP builder (pm.gp.MarginalApprox), Titsias q(u), sufficient statistics, eq. (17)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.audit import DataDerivedChoiceError, check_public_choices
from pm_dpgp.gp.sparse import (
    chunk_statistics,
    count_matching_rows,
    default_chunk_size,
    predict_from_qu,
    sufficient_statistics,
    titsias_qu,
)
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import (
    InducingFromDataError,
    PrivateHyperparameterError,
    PublicSparseGP,
    SparseGPRegression,
    gp_regression,
    grid_inducing_points,
    kmeans_inducing_points,
    sparse_gp_regression,
)
from tests.titsias_reference import summation_atol, titsias_eq2_exact, whitened_rtol
from tests.tolerances import EPS, assert_normwise_close, cond_rtol

Z15 = grid_inducing_points(-3.5, 3.5, 15)


def _data(seed: int = 0, n: int = 300, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-4, 4, n)
    y = np.sin(2 * X) + noise * rng.standard_normal(n)
    return X, y


@pytest.fixture(scope="module")
def reg() -> SparseGPRegression:
    X, y = _data()
    return sparse_gp_regression(X, y, 0.8**2 * pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, noise_sd=0.1)


@pytest.fixture(scope="module")
def pub(reg: SparseGPRegression) -> PublicSparseGP:
    return reg.public_sparse_gp()


# --------------------------------------------------------------------------- tolerances
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
    # K is symmetrised exactly (½(K + Kᵀ)) before the jitter is added: bitwise symmetric
    assert np.allclose(K, K.T) and np.all(np.linalg.eigvalsh(K) > 0)
    assert pub.jitter == 1e-6 and "ExpQuad" in pub.description


def test_z_from_private_x_is_caught_by_the_owners_check_only() -> None:
    """The builder never compares Z with the private X (a refusal would reveal private
    inputs to whoever runs the code, docs/errors.md); the data owner's check does."""
    X, y = _data(1, 40)
    Z = np.concatenate([X[:5], [10.0]])
    m = sparse_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.1)
    assert not m.public_sparse_gp().z_is_public
    with pytest.raises(InducingFromDataError, match="coincide"):
        check_public_choices(X, y, Z=Z)
    check_public_choices(X, y, Z=Z15)  # a public grid passes
    m = sparse_gp_regression(
        X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.1, z_is_public=True
    )
    assert m.public_sparse_gp().z_is_public


def test_free_hyperparameters_need_public_values() -> None:
    X, y = _data(2, 50)
    reg = sparse_gp_regression(
        X,
        y,
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=Z15,
        noise_sd=lambda: pm.HalfNormal("s", 1),
    )
    with pytest.raises(PrivateHyperparameterError):
        reg.public_sparse_gp()
    pub = reg.public_sparse_gp({"ell": 1.0, "s": 0.2})
    assert pub.noise_var == pytest.approx(0.04)


def test_mean_from_data_is_caught_by_the_owners_check_only() -> None:
    X, y = _data(3, 50)
    m = sparse_gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, noise_sd=0.1, mean=y.mean())
    assert m.mean == y.mean()
    with pytest.raises(DataDerivedChoiceError, match="mean"):
        check_public_choices(X, y, mean=y.mean())


def test_dataless_model_for_streams() -> None:
    reg = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, noise_sd=0.1)
    assert reg.X.shape == (0, 1)
    assert reg.public_sparse_gp().n_inducing == 15
    with pytest.raises(ValueError, match="both"):
        sparse_gp_regression(np.ones(3), None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z15, noise_sd=0.1)


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
    # 200-term sums by different BLAS calls (gemm/syrk vs gemv/gemm): summation bound
    aK = np.abs(K)
    A, B = chunk_statistics(K, y[:, None])
    assert np.all(np.abs(A[:, 0] - K @ y) <= summation_atol(200, aK @ np.abs(y)))
    assert np.all(np.abs(B[0] - K @ K.T) <= summation_atol(200, aK @ aK.T))
    w = np.random.default_rng(0).uniform(0.1, 1, 200)
    A, B = chunk_statistics(K, y[:, None], w[:, None])
    # the weighted B is a syrk of K·√w: the square root and its square add 2 roundings per term
    assert np.all(np.abs(A[:, 0] - K @ (w * y)) <= summation_atol(201, aK @ np.abs(w * y)))
    assert np.all(np.abs(B[0] - (K * w) @ K.T) <= summation_atol(203, (aK * w) @ aK.T))


def test_statistics_chunked_iterator_and_dask_agree(pub: PublicSparseGP) -> None:
    da = pytest.importorskip("dask.array")
    X, y = _data(5, 1000)
    K = pub.kernel(Z15, X)
    full = sufficient_statistics(pub.kernel, Z15, (X, y), chunk_size=10**6)
    # every comparison below: the same 1000 terms summed in another order (chunks, Dask tree)
    atol_A = summation_atol(1000, np.abs(K) @ np.abs(y))[:, None]
    atol_B = summation_atol(1000, np.abs(K) @ np.abs(K).T)[None]
    assert np.all(np.abs(full.A - (K @ y)[:, None]) <= atol_A)
    assert np.all(np.abs(full.B - (K @ K.T)[None]) <= atol_B)
    chunked = sufficient_statistics(pub.kernel, Z15, (X, y), chunk_size=97)
    sizes = [0, 13, 400, 1000]
    gen = ((X[a:b], y[a:b]) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    streamed = sufficient_statistics(pub.kernel, Z15, gen, chunk_size=128)
    dasked = sufficient_statistics(
        pub.kernel, Z15, (da.from_array(X, chunks=111), da.from_array(y, chunks=111))
    )
    for s in (chunked, streamed, dasked):
        assert s.n == 1000
        assert np.all(np.abs(s.A - full.A) <= atol_A)
        # + one rounding for Dask's ½(B + Bᵀ)
        assert np.all(np.abs(s.B - full.B) <= atol_B + EPS * np.abs(full.B))
    # a chunking bug that drops (or repeats) one point of 1000 is far outside the bound
    dropped = sufficient_statistics(pub.kernel, Z15, (X[1:], y[1:]), chunk_size=97)
    assert not np.all(np.abs(dropped.A - full.A) <= atol_A)
    assert not np.all(np.abs(dropped.B - full.B) <= atol_B + EPS * np.abs(full.B))


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
    beta = 1.0 / pub.noise_var
    m, S = titsias_qu(K, s.A[:, 0], s.B[0], beta)
    # Literal eq. (2) in long form.  κ(K + K_ZX K_XZ/σ²) ≈ 1e10 here, so it is evaluated in
    # 40 digits (titsias_eq2_exact) and only our whitened float64 error remains.
    # (1) the statistics are K_ZX y and K_ZX K_XZ up to summation rounding (300 terms) ...
    Kzx = pub.kernel(Z15, X)
    aK = np.abs(Kzx)
    assert np.all(np.abs(s.A[:, 0] - Kzx @ y) <= summation_atol(300, aK @ np.abs(y)))
    assert np.all(np.abs(s.B[0] - Kzx @ Kzx.T) <= summation_atol(300, aK @ aK.T))
    # (2) ... and q(u) is eq. (2) of those statistics within the whitened bound.
    tol = whitened_rtol(K, s.B[0], beta)
    m_ex, S_ex = titsias_eq2_exact(K, s.A[:, 0], s.B[0], beta)
    assert_normwise_close(m, m_ex, tol, "m")
    assert_normwise_close(S, S_ex, tol, "S")
    # a noise precision off by 1e-4 (relative) is rejected
    m_bad, S_bad = titsias_qu(K, s.A[:, 0], s.B[0], beta * (1 + 1e-4))
    for got, ref in ((m_bad, m_ex), (S_bad, S_ex)):
        with pytest.raises(AssertionError):
            assert_normwise_close(got, ref, tol)
    Xs = np.linspace(-5, 5, 41)
    mu, var = predict_from_qu(K, m, S, pub.kernel(Z15, Xs), pub.kernel_diag(Xs))
    with reg.model:
        mu_pm, var_pm = reg.gp.predict(Xs[:, None], point={}, diag=True)
        mu_pn, var_pn = reg.gp.predict(Xs[:, None], point={}, diag=True, pred_noise=True)
    # PyMC's MarginalApprox uses the same whitened form (plus one more solve with K for
    # K_VZ K⁻¹), so the same conditioning bound applies to the predictions (both sides).
    # The variance is k(x, x) minus terms of the same size: its error scales with ‖k(x, x)‖.
    assert_normwise_close(mu, mu_pm, tol, "predictive mean")
    tol_var = tol * max(1.0, np.linalg.norm(pub.kernel_diag(Xs)) / np.linalg.norm(var_pm))
    assert_normwise_close(var, var_pm, tol_var, "predictive variance")
    assert_normwise_close(var + pub.noise_var, var_pn, tol_var, "predictive variance + noise")


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
    # mu: the same code on the same numbers (bitwise equal).  var vs diag(cov): the same
    # A = L⁻¹K_ZV, W = L⁻ᵀA, SW; only the 15-term sums (ΣA², Σ W·SW) run in another order.
    assert np.allclose(mu, mu2)
    W = np.linalg.solve(K, Kzv)
    A = np.linalg.solve(np.linalg.cholesky(K), Kzv)
    terms = np.abs(kd) + (A * A).sum(0) + (np.abs(W) * np.abs(S @ W)).sum(0)
    assert np.all(np.abs(np.diag(cov) - var) <= summation_atol(17, terms))
    # W by LU here, by two triangular solves in predict_from_qu: forward errors ≤ cond_rtol(K)
    # relative to ‖W‖ on each side, passed on through the products with m, K_VZ, S.
    tol_W = cond_rtol(K)
    amp = np.linalg.norm(W, 2) * np.linalg.norm(m - 0.5) / np.linalg.norm(mu - 0.5)
    assert_normwise_close(mu - 0.5, W.T @ (m - 0.5), tol_W * max(1.0, amp), "mean")
    cov_ref = pub.kernel(Xs) - Kzv.T @ W + W.T @ S @ W
    nW = np.linalg.norm(W, 2)
    size = nW * np.linalg.norm(Kzv) + 2 * nW**2 * np.linalg.norm(S)
    assert_normwise_close(cov, cov_ref, tol_W * max(1.0, size / np.linalg.norm(cov_ref)), "cov")
    muT, varT = predict_from_qu(K, np.stack([m, -m]), np.stack([S, S]), Kzv, kd)
    mu0, _ = predict_from_qu(K, m, S, Kzv, kd)
    # batched vs single call: the same operations except BLAS's choice of kernel for 15-term
    # dot products (≲ 1e-15 relative); the default rtol = 1e-5 only has to catch a mix-up.
    assert muT.shape == (2, 7) and np.allclose(varT[0], var) and np.allclose(muT[0], mu0)
    assert np.allclose(muT[1], -mu0)


def test_dask_containers_stay_lazy_and_empty_blocks_count_zero(pub, monkeypatch) -> None:
    """Stop-31 audit of the Dask path: (a) a Dask-backed ``xarray.DataArray`` was not
    recognised (module-name test) and ``np.asarray`` gathered all of X and y on the client;
    (b) an empty block crashed (``finite_rows`` reshaped 0 rows to ``(0, -1)``); (c) unknown
    chunk sizes got "must have the same number of rows" for arrays of equal length; (d) an
    ``(n, 1, 1)`` X was reshaped silently where the in-memory path refuses it."""
    import pm_dpgp.gp.sparse as sparse_module

    da = pytest.importorskip("dask.array")
    xr = pytest.importorskip("xarray")
    X, y = _data(5, 100)
    ref = sufficient_statistics(pub.kernel, Z15, (X, y))
    calls = []
    real = sparse_module._dask_statistics
    monkeypatch.setattr(
        sparse_module, "_dask_statistics", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    wrapped = (
        xr.DataArray(da.from_array(X, chunks=30), dims=("obs",)),
        xr.DataArray(da.from_array(y, chunks=30), dims=("obs",)),
    )
    lazy = sufficient_statistics(pub.kernel, Z15, wrapped)
    assert calls == [1]  # the Dask path (reduced on the workers), not np.asarray
    assert lazy.n == 100 and np.allclose(lazy.A, ref.A, rtol=1e-12, atol=1e-12)
    empty = sufficient_statistics(
        pub.kernel,
        Z15,
        (da.from_array(X, chunks=((50, 0, 50),)), da.from_array(y, chunks=((50, 0, 50),))),
    )
    assert empty.n == 100 and np.allclose(empty.B, ref.B, rtol=1e-12, atol=1e-12)
    unknown = da.from_array(X, chunks=50)[da.from_array(y, chunks=50) > -np.inf]
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        sufficient_statistics(pub.kernel, Z15, (unknown, da.from_array(y, chunks=50)))
    with pytest.raises(ValueError, match="1- or 2-dimensional"):
        sufficient_statistics(pub.kernel, Z15, (da.from_array(X[:, None, None]), da.from_array(y)))


def test_dask_data_are_never_gathered_on_the_client(pub) -> None:
    """Stop-35 audit: a list ``[(X, y)]``, ``zip(X.blocks, y.blocks)`` and the model builder
    converted Dask arrays with ``np.asarray`` (320 kB of private rows pulled from the workers);
    a mixed tuple put the in-memory ``y`` into the task graph.  All are refused now, before
    anything is computed (``dask.compute`` is not called)."""
    da = pytest.importorskip("dask.array")
    X, y = _data(5, 100)
    Xd, yd = da.from_array(X, chunks=25), da.from_array(y, chunks=25)
    for data in ([(Xd, yd)], zip(Xd.blocks, yd.blocks, strict=True)):
        with pytest.raises(TypeError, match="gathered on the client"):
            sufficient_statistics(pub.kernel, Z15, data)
    with pytest.raises(TypeError, match="mixes Dask and in-memory"):
        sufficient_statistics(pub.kernel, Z15, (Xd, y))
    with pytest.raises(TypeError, match="Dask collection"):
        sparse_gp_regression(Xd, yd, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.1, Z=Z15)
    # nor wrapped in a list (converted block by block on the client; stop-35 review)
    with pytest.raises(TypeError, match="Dask collection"):
        sparse_gp_regression(
            [Xd[i] for i in range(5)], [yd[i] for i in range(5)], pm.gp.cov.ExpQuad(1, ls=1.0),
            noise_sd=0.1, Z=Z15,
        )  # fmt: skip
    # public test inputs may be Dask arrays: gathering them leaks nothing
    model = gp_regression(X[:30], y[:30], pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.1)
    rel = cloaked_release(
        model, da.from_array(np.linspace(-2, 2, 7), chunks=3), epsilon=1.0, delta=1e-5,
        y_bounds=(-3.0, 3.0), rng=np.random.default_rng(0),
    )  # fmt: skip
    assert rel.draws.shape == (1, 7)
    with pytest.raises(TypeError, match="dtype"):
        sufficient_statistics(pub.kernel, Z15, (Xd, da.from_array(y.astype(complex), chunks=25)))


def test_nullable_dataframe_columns_drop_missing_records_like_the_in_memory_path(pub) -> None:
    """A pandas ``Float64`` column with one ``pd.NA`` refused the whole Dask release (its
    blocks were object arrays) while the in-memory path dropped the record: a refusal that
    depended on the private data.  Now NA becomes NaN on the workers and the record is
    dropped; an object column is refused by its (public) dtype."""
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    X, y = _data(5, 100)
    y_na = pd.Series(y, dtype="Float64")
    y_na[37] = pd.NA
    frame = dd.from_pandas(pd.DataFrame({"x": X, "y": y_na}), npartitions=4)

    def finite_rows(Xc, yc):  # what the release's preprocessing does with missing values
        Xc, yc = np.asarray(Xc, float).reshape(len(Xc), -1), np.asarray(yc, float)
        ok = np.isfinite(yc)
        return Xc[ok], yc[ok], None, np.zeros(0)

    got = sufficient_statistics(pub.kernel, Z15, (frame["x"], frame["y"]), preprocess=finite_rows)
    keep = np.arange(100) != 37
    ref = sufficient_statistics(pub.kernel, Z15, (X[keep], y[keep]))
    assert got.n == 99
    np.testing.assert_allclose(got.A, ref.A, rtol=1e-12, atol=1e-12)
    text = dd.from_pandas(pd.DataFrame({"x": X, "y": y.astype(str)}), npartitions=4)
    for column in (text["y"].astype(object), text["y"]):  # object, and pandas' text dtype
        with pytest.raises(TypeError, match="dtype"):
            sufficient_statistics(pub.kernel, Z15, (text["x"], column))
