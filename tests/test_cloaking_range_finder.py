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
from tests.tolerances import EPS


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
