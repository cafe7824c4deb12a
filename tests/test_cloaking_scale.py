"""The restructured cloaked release: same release, no m×m M, one n×n matrix (issue 13)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
import scipy.linalg as sla

import pm_dpgp.gp.exact as exact_gp_module
import pm_dpgp.mechanisms.label.cloaking as cloaking
import pm_dpgp.models.exact as exact_models_module
from pm_dpgp.gp.exact import ExactPosterior
from pm_dpgp.gp.linalg import (
    CholeskyError,
    check_square_symmetric,
    jittered_cholesky,
    symmetrise_inplace,
)
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.mechanisms.label.cloaking import CloakingOperator, solve_noise_covariance
from pm_dpgp.models import gp_regression
from tests.conftest import KUNG_BOUNDS
from tests.tolerances import assert_normwise_close, cond_rtol


def _model_2d(n: int = 150, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 5.0, (n, 2))
    y = np.clip(np.sin(X).sum(axis=1) + 0.3 * rng.standard_normal(n), -2.0, 2.0)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(2, ls=1.5), noise_sd=0.3, mean=0.0)


def _grid_2d(side: int = 12) -> np.ndarray:
    g = np.linspace(0.0, 5.0, side)
    return np.stack([a.ravel() for a in np.meshgrid(g, g, indexing="ij")], axis=1)


def _reference_release(monkeypatch, model, X_star, **kw):
    """The release as before the restructuring: explicit m×n C and its full thin SVD."""
    with monkeypatch.context() as mp:
        mp.setattr(
            exact_models_module,  # where the exact GP's public view builds its operator
            "CloakingOperator",
            lambda K_sf, L: CloakingOperator(K_sf, L).dense(),
        )
        mp.setattr(cloaking, "_SKETCH_START", 10**9)  # no sketch: full SVD of C
        return cloaked_release(model, X_star, **kw)


@pytest.mark.parametrize("case", ["kung", "2d"])
def test_same_seed_same_release_as_full_svd_of_explicit_C(monkeypatch, kung_model, case):
    if case == "kung":
        model, X_star, kw = kung_model, np.linspace(0.0, 110.0, 200), {"y_bounds": KUNG_BOUNDS}
    else:
        model, X_star, kw = _model_2d(), _grid_2d(), {"y_bounds": (-2.0, 2.0)}
    kw.update(epsilon=1.0, delta=1e-3, bounds_are_public=True, n_draws=3)
    fast = cloaked_release(model, X_star, rng=np.random.default_rng(11), **kw)
    ref = _reference_release(monkeypatch, model, X_star, rng=np.random.default_rng(11), **kw)
    assert fast.metadata["noise_rank"] == ref.metadata["noise_rank"]
    # The retained subspace is determined to u·σ_1/σ_k ≤ u/rank_tol (Wedin); the release is
    # a backward-stable function of it: a solve with condition ≤ 1/rank_tol, order m.
    tol = cond_rtol(1.0 / fast.metadata["rank_tol"], X_star.shape[0])
    assert_normwise_close(fast.draws, ref.draws, tol, "draws")
    assert fast.metadata["l2_sensitivity"] == pytest.approx(ref.metadata["l2_sensitivity"], rel=tol)


def test_release_never_forms_C_for_a_smooth_kernel(monkeypatch, kung_model):
    def refuse(self):
        raise AssertionError("the m×n cloaking matrix was formed")

    monkeypatch.setattr(CloakingOperator, "dense", refuse)
    rel = cloaked_release(
        kung_model,
        np.linspace(0.0, 110.0, 200),
        epsilon=1.0,
        delta=1e-3,
        y_bounds=KUNG_BOUNDS,
        rng=np.random.default_rng(0),
    )
    assert rel.metadata["noise_rank"] >= 5


def test_noise_covariance_M_is_formed_only_when_asked() -> None:
    rng = np.random.default_rng(3)
    C = rng.standard_normal((30, 8)) @ rng.standard_normal((8, 50))
    res = solve_noise_covariance(C)
    assert "M" not in vars(res)
    M = res.M
    assert "M" in vars(res) and res.M is M and not M.flags.writeable
    np.testing.assert_array_equal(M, M.T)
    assert_normwise_close(M, res.basis @ res.M_k @ res.basis.T, cond_rtol(1.0, 30))
    # two products over ≤ 50 terms with an orthonormal basis: ≤ γ_50·‖C‖ ≈ 1e-14·max|C| apart
    np.testing.assert_allclose(res.projected, res.basis.T @ C, rtol=0, atol=1e-12 * abs(C).max())


# --------------------------------------------------------------------------- one n×n matrix
def _spd(n: int, seed: int = 0) -> np.ndarray:
    x = np.sort(np.random.default_rng(seed).uniform(0, 10, n))
    return np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)


def test_symmetrise_inplace_is_bitwise_half_sum() -> None:
    A = np.random.default_rng(0).standard_normal((600, 600))
    expected = 0.5 * (A + A.T)
    out = symmetrise_inplace(A)
    assert out is A
    np.testing.assert_array_equal(A, expected)


def test_blocked_symmetry_check_finds_one_bad_entry_anywhere() -> None:
    K = _spd(700)
    check_square_symmetric(K)
    for i, j in [(3, 650), (699, 0), (300, 301)]:
        bad = K.copy()
        bad[i, j] += 1e-3
        with pytest.raises(ValueError, match="not symmetric"):
            check_square_symmetric(bad)


def test_posterior_factorised_in_place_equals_the_copying_path() -> None:
    K = _spd(500)
    ref = ExactPosterior(K, 0.1)
    work = K.copy()
    post = ExactPosterior(work, 0.1, overwrite_K=True)
    assert np.shares_memory(post.L, work)
    np.testing.assert_array_equal(post.L, ref.L)  # the same dpotrf on the same numbers
    np.testing.assert_array_equal(np.triu(post.L, 1), 0.0)
    expected = sla.cholesky(K + 0.1 * np.eye(500), lower=True)
    assert_normwise_close(post.L, expected, cond_rtol(K + 0.1 * np.eye(500)))


def test_public_gp_checks_its_kernel_matrix_once(monkeypatch) -> None:
    """``PublicGP`` symmetrises and checks its kernel matrix itself, so ``ExactPosterior``
    skips its own pass (``validated``); the factor is bitwise the one of the checked path."""
    model = _model_2d(n=120)
    calls = []
    monkeypatch.setattr(
        exact_gp_module,
        "check_square_symmetric",
        lambda A, name: calls.append(name) or check_square_symmetric(A, name),
    )
    L = model.public_gp().posterior().L
    assert calls == []
    K = model.public_gp().kernel(model.public_gp().X)
    ref = ExactPosterior(K.copy(), model.public_gp().noise_var)
    assert calls == ["K_ff"]
    np.testing.assert_array_equal(L, ref.L)


def test_failed_attempts_are_undone_and_jitter_added() -> None:
    K = _spd(400)  # numerically singular: needs jitter
    original = K.copy()
    L, jitter = jittered_cholesky(K)
    np.testing.assert_array_equal(K, original)  # not overwritten without overwrite_a
    assert jitter > 0.0
    assert_normwise_close(L @ L.T, K + jitter * np.eye(400), cond_rtol(1.0, 400))
    work = K.copy()
    L2, jitter2 = jittered_cholesky(work, overwrite_a=True)
    assert jitter2 == jitter
    np.testing.assert_array_equal(L2, L)
    indefinite = -np.eye(50)
    indefinite_copy = indefinite.copy()
    with pytest.raises(CholeskyError):
        jittered_cholesky(indefinite, overwrite_a=True)
    np.testing.assert_array_equal(indefinite, indefinite_copy)  # restored after failing
