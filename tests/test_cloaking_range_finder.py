"""Kernels of the cloaking range finder (issue 13): block orthonormalisation and the R-SVD.

Tolerances: Householder and Cholesky QR of an ``m × b`` block are orthonormal to
``O(m b u)`` (Higham 2002, Thm 19.4; Yamamoto et al. 2015 for Cholesky QR of a block with
``κ ≤ 3``), and backward-stable SVDs move singular values by ``≤ c n u σ_1`` (Weyl) and
singular vectors by ``≤ c n u σ_1 / gap`` (Wedin); ``c = 4``.  A wrong answer (a block not
re-orthogonalised, a right instead of a left factor) is off by ``10⁻⁸`` or more.
"""

from __future__ import annotations

import numpy as np
import pytest

import pm_dpgp.mechanisms.label.cloaking as cloaking
from tests.tolerances import EPS, assert_normwise_close, cond_rtol


def _check_block(Qn: np.ndarray, Q: np.ndarray) -> None:
    m, b = Qn.shape
    tol = 4.0 * m * b * EPS
    assert np.abs(Qn.T @ Qn - np.eye(b)).max() <= tol
    assert np.abs(Q.T @ Qn).max() <= tol


@pytest.mark.parametrize("dependent", [False, True])
def test_orthonormal_block_both_factorisations_agree(monkeypatch, dependent):
    """Cholesky QR and its Householder fallback give the same orthonormal complement."""
    rng = np.random.default_rng(3)
    m, ell, b = 400, 60, 20
    Q = np.linalg.qr(rng.standard_normal((m, ell)))[0]
    # a block inside span(Q) up to 1e-9 (the sketch past the numerical rank) or a generic one
    Y = Q @ rng.standard_normal((ell, b)) + (1e-9 if dependent else 1.0) * rng.standard_normal(
        (m, b)
    )
    fast = cloaking._orthonormal_block(Y.copy(), Q)
    with monkeypatch.context() as mp:
        mp.setattr(cloaking, "_cholesky", lambda A: None)  # force the Householder fallback
        slow = cloaking._orthonormal_block(Y.copy(), Q)
    for Qn in (fast, slow):
        _check_block(Qn, Q)
    # same subspace: the projectors agree (the bases may differ by an orthogonal b × b map);
    # past the rank the span is that of rounding noise (1e-9 / ‖Y‖), so only its orthogonality
    # to Q is defined
    if not dependent:
        assert np.abs(fast @ fast.T - slow @ slow.T).max() <= 4.0 * m * b * EPS


def test_left_singular_matches_full_svd():
    """R-SVD of a wide matrix: the left factor and singular values of a direct SVD."""
    rng = np.random.default_rng(4)
    ell, n = 40, 700
    s_true = 0.6 ** np.arange(ell)  # well separated: relative gaps ≥ 0.4
    A = (np.linalg.qr(rng.standard_normal((ell, ell)))[0] * s_true) @ np.linalg.qr(
        rng.standard_normal((n, ell))
    )[0].T
    U, s = cloaking._left_singular(A)
    U_ref, s_ref, _ = np.linalg.svd(A, full_matrices=False)
    tol = 4.0 * n * EPS * s_ref[0]
    assert np.abs(s - s_ref).max() <= tol
    gaps = np.minimum(
        np.abs(np.diff(s_ref, prepend=np.inf)), np.abs(np.diff(s_ref, append=-np.inf))
    )
    signs = np.sign(np.sum(U * U_ref, axis=0))
    err = np.abs(U * signs - U_ref).max(axis=0)
    assert np.all(err <= tol / gaps)
    assert np.abs(U.T @ U - np.eye(ell)).max() <= 4.0 * ell * EPS


# --------------------------------------------------------------------------- sketch of K_sf
def _exact_operator(n: int = 150, side: int = 12, seed: int = 0):
    """``C = K_sf (K_ff + σ²I)⁻¹`` of a 2-D EQ kernel on a grid (numerical rank ≈ 60)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 5.0, (n, 2))
    g = np.linspace(0.0, 5.0, side)
    Xs = np.stack([a.ravel() for a in np.meshgrid(g, g, indexing="ij")], axis=1)

    def eq(A, B):
        return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / 1.5**2)

    A = eq(X, X) + 0.09 * np.eye(n)
    return cloaking.CloakingOperator(eq(Xs, X), np.linalg.cholesky(A)), A


def test_range_factorisation_reproduces_C():
    """``C G = R (F G)`` for every operator (``R = K_sf``, ``F = A⁻¹`` for the exact GP)."""
    op, A = _exact_operator()
    G = np.random.default_rng(1).standard_normal((op.shape[1], 7))
    # two solves with A (condition κ(A)) and one product: backward stable, order n
    tol = cond_rtol(np.linalg.cond(A), op.shape[1])
    assert_normwise_close(op.range_matmat(op.range_factor(G)), op.matmat(G), tol, "C G")
    np.testing.assert_array_equal(op.range_matmat(G), op.K_sf @ G)
    C = op.dense()
    for other in (cloaking._DenseOperator(C), cloaking.LowRankOperator(C[:, :40], np.eye(40))):
        H = G[: other.shape[1]]
        np.testing.assert_array_equal(other.range_factor(H), H)
        np.testing.assert_array_equal(other.range_matmat(H), other.matmat(H))


def test_count_sketch_product_equals_the_dense_product():
    """The CountSketch has one ``±1`` per row, and ``K_sf S`` through ``(Sᵀ K_fs)ᵀ`` is the
    dense product (sums of ≤ n terms: rounding of order n u) for either memory order."""
    op, _ = _exact_operator()
    n = op.shape[1]
    S = cloaking._count_sketch(np.random.default_rng(3), n, 17)
    dense = S.toarray()
    assert S.shape == (n, 17)
    np.testing.assert_array_equal(np.count_nonzero(dense, axis=1), np.ones(n))
    assert set(np.unique(dense[dense != 0])) <= {-1.0, 1.0}
    ref = op.K_sf @ dense
    tol = cond_rtol(1.0, n)
    assert_normwise_close(op.range_matmat(S), ref, tol, "K_sf S")
    fortran = cloaking.CloakingOperator(np.asfortranarray(op.K_sf), op.L)
    assert_normwise_close(fortran.range_matmat(S), ref, tol, "K_sf S (Fortran order)")
    # a wrong sign or column in the sparse path would be an O(1) error
    assert np.linalg.norm(ref) > 1e3 * tol * np.linalg.norm(op.K_sf)


class _SketchThroughC(cloaking.CloakingOperator):
    """The range finder as before: a Gaussian sketch ``C G`` through the triangular solves."""

    sparse_sketch = False

    def range_matmat(self, G):
        return self.matmat(G)

    def range_factor(self, G):
        return G


def test_sketch_of_K_sf_keeps_the_basis_and_solves_only_probes_and_QtC(monkeypatch):
    """The sketch of ``K_sf`` (``range(K_sf) = range(C)``) finds the same numerical range as
    the sketch of ``C``: same rank, same singular values and mean map ``U_k U_kᵀ C`` to the
    accuracy with which they are determined (``u σ_1/σ_k ≤ u / rank_tol``, Wedin).  Only the
    30 probes and ``QᵀC`` go through ``A⁻¹``; the sketch never applies ``C``."""
    op, _ = _exact_operator()
    m = op.shape[0]
    before = _SketchThroughC(op.K_sf, op.L)
    basis0, sing0, proj0 = cloaking._column_space(before, 1e-8)
    solved = []
    solve = cloaking.CloakingOperator._solve

    def counting_solve(self, B):
        solved.append(B.shape[1])
        return solve(self, B)

    def refuse(self, G):
        raise AssertionError("the sketch applied C")

    monkeypatch.setattr(cloaking.CloakingOperator, "_solve", counting_solve)
    monkeypatch.setattr(cloaking.CloakingOperator, "matmat", refuse)
    basis, sing, proj = cloaking._column_space(op, 1e-8)
    assert sing.size == sing0.size
    tol = cond_rtol(1e8, m)
    np.testing.assert_allclose(sing, sing0, rtol=tol)
    assert_normwise_close(basis @ proj, basis0 @ proj0, tol, "U_k U_kᵀ C")
    # probes once, then one solve per block of QᵀC (ℓ columns in all, ℓ ≥ k)
    assert solved[0] == cloaking._PROBES and sum(solved[1:]) >= sing.size
