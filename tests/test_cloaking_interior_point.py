"""Tests for the interior-point design solver of the cloaking noise covariance (issue 13).

``solve_noise_covariance`` solves the D-optimal design for numerical ranks
``k ≥ _IP_MIN_RANK`` by primal–dual interior-point rounds on candidate sets
(``_interior_point_design``), and below that by Frank–Wolfe plus active-set Newton.  The
optimum ``M`` is unique (strict concavity of ``log det P``), so both paths must give the same
``M`` up to the conditioning-derived tolerance of ``near_optimal_rtol`` and the same ``log|M|``
within their certified gaps, and the interior-point result must pass the independent
Kiefer–Wolfowitz check (``assert_kiefer_wolfowitz``).  Problems: random Gaussian columns,
rank-deficient products, columns spread over a sphere (every point nearly on the optimal
ellipsoid: the degenerate case that made the active-set method slow), near-duplicate and exact
duplicate columns, and a 2-D GP cloaking matrix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.linalg as sla

from pm_dpgp import ConvergenceWarning
from pm_dpgp.mechanisms.label import cloaking as cl
from pm_dpgp.mechanisms.label.cloaking import NoiseCovariance, solve_noise_covariance
from tests.test_cloaking_solver import (
    assert_kiefer_wolfowitz,
    assert_structure,
    dual_optimum_slsqp,
    logdet_slack,
    low_rank,
    near_optimal_rtol,
)
from tests.tolerances import assert_normwise_close


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas() -> Iterator[None]:
    """One BLAS thread (small matrices on a shared machine), as in test_cloaking_solver."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        limits: contextlib.AbstractContextManager = contextlib.nullcontext()
    else:
        limits = threadpool_limits(limits=1, user_api="blas")
    with limits:
        yield


def _sphere(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """``n`` columns uniform on the unit sphere of ``R^k``: the optimal ellipsoid is close to
    the sphere and nearly every column is close to active (degenerate complementarity)."""
    C = rng.standard_normal((k, n))
    return C / np.linalg.norm(C, axis=0)


def _gp_2d(n: int, side: int, lengthscale: float) -> np.ndarray:
    """Whitened cloaking matrix of an EQ kernel on [0, 10]² (test grid side²): ``V_kᵀ`` from
    the SVD ``C = U S Vᵀ`` of ``C = K_sf (K_ff + σ²I)⁻¹``, keeping ``σ_j > 10⁻⁸ σ_1``.

    This is exactly the design problem the solver faces for ``C`` (it whitens the columns the
    same way), with orthonormal rows: well conditioned, so the comparison tolerances below are
    tight, whereas on ``C`` itself the directions down to ``10⁻⁸ σ_1`` make them vacuous.
    """
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 10.0, (n, 2))
    g = np.linspace(0.0, 10.0, side)
    Xs = np.stack([a.ravel() for a in np.meshgrid(g, g, indexing="ij")], axis=1)

    def k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-d2 / (2.0 * lengthscale**2))

    A = k(X, X) + 0.09 * np.eye(n)
    C = sla.cho_solve(sla.cho_factor(A, lower=True), k(X, Xs)).T
    _, s, Vt = np.linalg.svd(C, full_matrices=False)
    return Vt[s > 1e-8 * s[0]]


def _near_duplicates(rng: np.random.Generator) -> np.ndarray:
    """70 × 300 Gaussian columns plus 60 copies perturbed by 1e-9 and 20 exact copies."""
    C = rng.standard_normal((70, 300))
    near = C[:, :60] * (1.0 + 1e-9 * rng.standard_normal((70, 60)))
    return np.hstack([C, near, C[:, 100:120], -C[:, 200:210]])


CASES = {
    "gaussian 80x300": lambda: np.random.default_rng(0).standard_normal((80, 300)),
    "rank-deficient 100x400 r=70": lambda: low_rank(np.random.default_rng(1), 100, 400, 70),
    "sphere k=64 n=600": lambda: _sphere(np.random.default_rng(2), 64, 600),
    "near-duplicate columns": lambda: _near_duplicates(np.random.default_rng(4)),
    "GP 2-D 400 x 20^2, whitened": lambda: _gp_2d(400, 20, 1.5),
}


def _legacy(C: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> NoiseCovariance:
    """The same problem through Frank–Wolfe plus active-set Newton only."""
    with monkeypatch.context() as patch:
        patch.setattr(cl, "_IP_MIN_RANK", 10**9)
        return solve_noise_covariance(C)


@pytest.fixture
def ip_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the rank of every call of the interior-point design solver."""
    calls: list[int] = []
    original = cl._interior_point_design

    def spy(Bt: np.ndarray, max_steps: int):
        calls.append(Bt.shape[1])
        return original(Bt, max_steps)

    monkeypatch.setattr(cl, "_interior_point_design", spy)
    return calls


@pytest.mark.parametrize("name", list(CASES))
def test_interior_point_agrees_with_active_set_and_certificate(
    name: str, monkeypatch: pytest.MonkeyPatch, ip_calls: list[int]
) -> None:
    C = CASES[name]()
    res = solve_noise_covariance(C)
    assert res.rank >= cl._IP_MIN_RANK
    assert ip_calls == [res.rank]  # the interior-point path was taken
    assert_structure(res, *C.shape)
    assert_kiefer_wolfowitz(res, C)
    ref = _legacy(C, monkeypatch)
    assert len(ip_calls) == 1  # ... and not by the reference
    assert np.array_equal(ref.basis, res.basis)
    slack = res.gap_bound + ref.gap_bound + logdet_slack(res, C) + logdet_slack(ref, C)
    assert res.log_det_k == pytest.approx(ref.log_det_k, abs=slack)
    tol = near_optimal_rtol((res, C), (ref, C))
    assert_normwise_close(res.M_k, ref.M_k, tol, "M_k, interior point vs active set")
    assert tol < 1e-3
    with pytest.raises(AssertionError):  # not vacuous: a 1e-3 relative error is rejected
        assert_normwise_close(res.M_k * (1.0 + 1e-3), ref.M_k, tol)


def test_interior_point_matches_slsqp_on_a_small_dual() -> None:
    """``_interior_point`` alone on a small full-rank problem reaches the SLSQP optimum."""
    rng = np.random.default_rng(7)
    B = rng.standard_normal((4, 12))
    lam0 = np.full(12, 4.0 / 12)
    lam, z, steps, ok = cl._interior_point(B, lam0, np.ones(12), 100)
    assert ok and 0 < steps < 100
    value = float(np.linalg.slogdet((B * lam) @ B.T)[1])  # log det M* = φ* + k, Σλ* = k
    # IP stops at duality measure and residual ≤ _IP_TOL: φ is within s·_IP_TOL of optimal
    assert value == pytest.approx(dual_optimum_slsqp(B), abs=1e-8)
    assert np.sum(lam) == pytest.approx(4.0, abs=1e-8)
    g = np.einsum("ij,ij->j", B, np.linalg.solve((B * lam) @ B.T, B))
    assert np.max(g) <= 1.0 + 1e-8  # the ellipsoid contains every column
    assert np.all(lam > 0.0) and np.all(z > 0.0)


def test_design_certificate_and_sparse_support(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_interior_point_design`` returns a simplex design whose KW gap is at round-off and
    whose support is exact (the active-set polish zeroes the interior point's O(μ) weights),
    also when the first candidate set misses support points (several rounds)."""
    B = _sphere(np.random.default_rng(9), 64, 900)
    Bt = np.ascontiguousarray(B.T)
    sizes: list[int] = []
    original = cl._interior_point

    def spy(Bs: np.ndarray, *args: object):
        sizes.append(Bs.shape[1])
        return original(Bs, *args)

    monkeypatch.setattr(cl, "_interior_point", spy)
    u, steps = cl._interior_point_design(Bt, 10_000)
    assert len(sizes) > 1 and max(sizes) < 900  # rounds on candidate sets, never all columns
    assert u is not None and steps > 0
    assert np.all(u >= 0.0) and u.sum() == pytest.approx(1.0, abs=1e-12)
    g, _ = cl._gains(Bt, u)
    assert g.max() / 64 - 1.0 <= 1e-9
    support = u > 0.0
    assert 64 <= support.sum() < 900
    np.testing.assert_allclose(g[support], 64.0, rtol=1e-9)


def test_failed_interior_point_falls_back(
    monkeypatch: pytest.MonkeyPatch, ip_calls: list[int]
) -> None:
    """If the interior point gives up, Frank–Wolfe plus active-set Newton still solve it."""
    monkeypatch.setattr(cl, "_interior_point", lambda Bs, lam, z, *args: (lam, z, 1, False))
    C = np.random.default_rng(0).standard_normal((70, 250))
    res = solve_noise_covariance(C)
    assert ip_calls == [70]
    assert_kiefer_wolfowitz(res, C)


def test_small_ranks_keep_the_active_set_path(ip_calls: list[int]) -> None:
    C = np.random.default_rng(1).standard_normal((20, 300))
    res = solve_noise_covariance(C)
    assert res.rank == 20 < cl._IP_MIN_RANK
    assert ip_calls == []
    assert_kiefer_wolfowitz(res, C)


def test_max_iter_caps_the_interior_point(ip_calls: list[int]) -> None:
    """A tiny ``max_iter`` stops the rounds; the result is still feasible and honest."""
    C = _sphere(np.random.default_rng(2), 64, 600)
    with pytest.warns(ConvergenceWarning):
        res = solve_noise_covariance(C, max_iter=3)
    assert ip_calls == [64]
    assert not res.converged
    assert res.iterations <= 3
    assert res.max_mahalanobis == pytest.approx(1.0, abs=1e-9)


def test_same_seed_same_release_through_either_design_solver(
    monkeypatch: pytest.MonkeyPatch, ip_calls: list[int]
) -> None:
    """A 2-D cloaked release with ``k ≥ _IP_MIN_RANK``: same seed, same release up to the
    conditioning of the retained subspace (as in test_cloaking_scale), whichever solver."""
    import pymc as pm

    from pm_dpgp.mechanisms import cloaked_release
    from pm_dpgp.models import gp_regression
    from tests.tolerances import cond_rtol

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 5.0, (300, 2))
    y = np.clip(np.sin(X).sum(axis=1) + 0.3 * rng.standard_normal(300), -2.0, 2.0)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(2, ls=1.0), noise_sd=0.3, mean=0.0)
    g = np.linspace(0.0, 5.0, 14)
    X_star = np.stack([a.ravel() for a in np.meshgrid(g, g, indexing="ij")], axis=1)
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), bounds_are_public=True, n_draws=3)
    fast = cloaked_release(model, X_star, rng=np.random.default_rng(11), **kw)
    assert fast.metadata["noise_rank"] >= cl._IP_MIN_RANK
    assert ip_calls == [fast.metadata["noise_rank"]]
    with monkeypatch.context() as patch:
        patch.setattr(cl, "_IP_MIN_RANK", 10**9)
        ref = cloaked_release(model, X_star, rng=np.random.default_rng(11), **kw)
    assert len(ip_calls) == 1
    tol = cond_rtol(1.0 / fast.metadata["rank_tol"], X_star.shape[0])
    assert_normwise_close(fast.draws, ref.draws, tol, "draws")
    assert fast.metadata["l2_sensitivity"] == pytest.approx(ref.metadata["l2_sensitivity"], rel=tol)
    with pytest.raises(AssertionError):  # not vacuous
        assert_normwise_close(fast.draws * (1.0 + 10.0 * tol), ref.draws, tol)


@pytest.mark.parametrize("tol", [cl._IP_ROUND_TOL, cl._IP_TOL])
def test_float32_phase_converges_on_float64_residuals(
    tol: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While ``μ > _IP_SINGLE`` the residuals are float32; convergence is only declared on
    float64 residuals, so the returned ``(λ, z)`` meet the tolerance in float64."""
    B = _sphere(np.random.default_rng(5), 64, 300)
    dtypes: list[np.dtype] = []
    original = cl._ip_residual

    def spy(Bs: np.ndarray, *args: np.ndarray):
        dtypes.append(Bs.dtype)
        return original(Bs, *args)

    monkeypatch.setattr(cl, "_ip_residual", spy)
    lam0 = np.full(300, 64.0 / 300)
    lam, z, steps, ok = cl._interior_point(B, lam0, np.ones(300), 100, tol)
    assert ok and 0 < steps < 100
    assert dtypes[0] == np.float32 and dtypes[-1] == np.float64  # both phases ran
    g = np.einsum("ij,ij->j", B, np.linalg.solve((B * lam) @ B.T, B))
    assert float(lam @ z) / 300 < tol
    assert np.max(np.abs(g - 1.0 + z)) < tol
    assert np.all(lam > 0.0) and np.all(z > 0.0)


@pytest.mark.parametrize("name", ["sphere k=64 n=600", "GP 2-D 400 x 20^2, whitened"])
def test_centrality_correctors_do_not_change_the_optimum(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gondzio's correctors and the 0.999 step fraction change the path, not the optimum:
    the same ``M_k`` as plain Mehrotra steps at 0.99 within the certified-gap tolerance."""
    C = CASES[name]()
    res = solve_noise_covariance(C)
    with monkeypatch.context() as patch:
        patch.setattr(cl, "_IP_CORRECTORS", 0)
        patch.setattr(cl, "_IP_STEP", 0.99)
        ref = solve_noise_covariance(C)
    assert_kiefer_wolfowitz(res, C)
    tol = near_optimal_rtol((res, C), (ref, C))
    assert_normwise_close(res.M_k, ref.M_k, tol, "M_k, with vs without correctors")
    with pytest.raises(AssertionError):  # not vacuous
        assert_normwise_close(res.M_k * (1.0 + 1e-3), ref.M_k, tol)
