"""RFP triangles (``pm_dpgp.gp.rfp``): layout, Cholesky, solves, products, rank updates.

Every operation is checked against the dense LAPACK/NumPy computation of the same quantity,
for even and odd orders and with strips narrow enough that both halves of the packed
layout hold several strips (the strip bookkeeping is where a layout error would hide).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import pm_dpgp.gp.rfp as rfp
from pm_dpgp.gp.rfp import RFPTriangle
from tests.tolerances import assert_normwise_close, cond_rtol, scalar_rtol

ORDERS = [0, 1, 2, 5, 6, 7, 10, 13]


@pytest.fixture(autouse=True)
def narrow_strips(monkeypatch):
    monkeypatch.setattr(rfp, "_STRIP", 3)


def _spd(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, n + 2))
    return M @ M.T + np.eye(n)


@pytest.mark.parametrize("n", ORDERS)
def test_strip_filling_is_lapacks_layout(n):
    """``from_columns`` (strip views) writes exactly what LAPACK ``dtrttf`` writes, and the
    packed triangle converts back to the lower triangle bit for bit."""
    A = _spd(n)
    T = RFPTriangle.from_columns(n, lambda c0, c1: A[c0:, c0:c1])
    np.testing.assert_array_equal(T.data, RFPTriangle.from_dense(A).data)
    np.testing.assert_array_equal(T.to_dense(), np.tril(A))
    np.testing.assert_array_equal(T.diagonal(), np.diag(A))
    assert len(T) == n and T.nbytes == 8 * n * (n + 1) // 2
    if n > 1:  # one wrong entry in the last strip is seen
        bad = RFPTriangle.from_columns(n, lambda c0, c1: A[c0:, c0:c1] + (c1 == n))
        assert not np.array_equal(bad.data, T.data)


def test_a_triangle_within_one_strip_is_one_call():
    """Up to the strip width the whole triangle comes from one ``columns(0, n)`` call (the
    RFP layout alone would ask for two half-width strips); beyond it, strip by strip."""
    for n, calls_expected in ((3, 1), (7, 3)):  # strips of width 3 (fixture): 7 → 2 + 2 cols
        A = _spd(n)
        calls: list[tuple[int, int]] = []

        def columns(c0: int, c1: int, A: np.ndarray = A, calls: list = calls) -> np.ndarray:
            calls.append((c0, c1))
            return A[c0:, c0:c1]

        T = RFPTriangle.from_columns(n, columns)
        np.testing.assert_array_equal(T.data, RFPTriangle.from_dense(A).data)
        assert len(calls) == calls_expected, calls


@pytest.mark.parametrize("n", [n for n in ORDERS if n])
def test_cholesky_solves_and_products_match_dense(n):
    """``dpftrf`` / ``dtfsm`` / ``dpftrs`` / strip products against ``cholesky`` /
    ``solve_triangular``: two backward-stable computations, normwise within
    ``cond_rtol(A)`` (Higham 2002, Thm 10.3 and §8.2); products within ``γ_n`` per entry."""
    A = _spd(n, seed=n)
    L = scipy.linalg.cholesky(A, lower=True)
    T = RFPTriangle.from_dense(A)
    T.add_to_diagonal(0.0)
    assert T.cholesky()
    tol = cond_rtol(A)
    assert_normwise_close(T.to_dense(), L, tol, "factor")
    B = np.asfortranarray(np.random.default_rng(1).standard_normal((n, 4)))
    assert_normwise_close(T.solve(B), scipy.linalg.solve_triangular(L, B, lower=True), tol, "L⁻¹B")
    assert_normwise_close(
        T.solve(B, trans=True), scipy.linalg.solve_triangular(L, B, lower=True, trans="T"),
        tol, "L⁻ᵀB",
    )  # fmt: skip
    assert_normwise_close(T.cho_solve(B[:, 0]), np.linalg.solve(A, B[:, 0]), tol, "A⁻¹b")
    assert_normwise_close(T.matmul(B), L @ B, tol + scalar_rtol(n), "L B")
    with pytest.raises(AssertionError):  # a factor off by 1e-6 in one entry is caught
        L_bad = L.copy()
        L_bad[-1, 0] += 1e-6 * np.abs(L).max()
        assert_normwise_close(T.matmul(B), L_bad @ B, tol + scalar_rtol(n), "L B")
    # overwrite_b: the result is in B's memory
    B2 = B.copy(order="F")
    out = T.solve(B2, overwrite_b=True)
    assert np.shares_memory(out, B2)


@pytest.mark.parametrize("n", [0, 6, 7])
def test_rank_update_is_syrk(n):
    """``dsfrk``: ``C := α AᵀA + β C`` equals the dense ``α AᵀA + β C`` (lower triangle), to
    ``γ_k`` per entry (k = 3 terms)."""
    C = _spd(n)
    A = np.asfortranarray(np.random.default_rng(2).standard_normal((3, n)))
    T = RFPTriangle.from_dense(C)
    T.rank_update(A, -0.25, beta=2.0)
    expected = np.tril(2.0 * C - 0.25 * A.T @ A)
    np.testing.assert_allclose(
        T.to_dense(), expected, rtol=0, atol=scalar_rtol(8) * (1 + np.abs(C).sum())
    )
    with pytest.raises(ValueError, match="columns"):
        T.rank_update(np.ones((2, n + 1)), 1.0)


def test_failed_cholesky_is_reported():
    """An indefinite matrix fails (``False``, no exception)."""
    T = RFPTriangle.from_dense(np.diag([1.0, -1.0, 2.0]))
    assert not T.cholesky()
