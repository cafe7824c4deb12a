r"""Cloaking matrices as linear operators (numpy/scipy only; no privacy logic).

The cloaking mechanism (Smith et al. 2018 §3; 2021 §2.3, §3.2) needs the column space of an
``m × n`` cloaking matrix ``C`` (test points × training points) and the projected columns
``U_kᵀ C``; it never needs ``C`` itself.  An operator exposes ``C G`` (``matmat``) and
``Qᵀ C`` (``rmatmat``), so that the noise-covariance solver
(``pm_dpgp.mechanisms.label.cloaking.solve_noise_covariance``) works on any family
whose ``C`` is cheap to apply:

* ``CloakingOperator`` — the exact GP, ``C = K_sf (K_ff + σ² I)⁻¹`` through the Cholesky
  factor of the ``n × n`` matrix;
* ``LowRankOperator`` — ``C = A B`` with ``A`` ``m × r`` and ``B`` ``r × n``, e.g. the
  FITC cloaking matrix ``C = k_*M Q⁻¹ K_MN (Λ + σ² I)⁻¹`` (Smith et al. 2021, eq. 9 and
  §3.2; ``pm_dpgp.gp.fitc``) with ``r = M`` inducing inputs: ``O((m + n) r ℓ)`` per
  product of ``ℓ`` columns, no ``n × n`` or ``m × n`` matrix.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numpy.typing import NDArray

__all__ = ["CloakingOperator", "LinearCloakingOperator", "LowRankOperator"]

FloatArray = NDArray[np.float64]


class LinearCloakingOperator(ABC):
    """An ``m × n`` cloaking matrix ``C`` applied without being formed.

    Subclasses set ``shape`` and implement ``matmat``, ``rmatmat`` and
    ``dense`` (the last only for the solver's fallback on slowly decaying spectra).
    """

    shape: tuple[int, int]

    @abstractmethod
    def matmat(self, G: FloatArray) -> FloatArray:
        """``C G`` (``m × ℓ``) for ``G`` of shape ``n × ℓ``."""

    @abstractmethod
    def rmatmat(self, Q: FloatArray) -> FloatArray:
        """``Qᵀ C`` (``ℓ × n``) for ``Q`` of shape ``m × ℓ``."""

    @abstractmethod
    def dense(self) -> FloatArray:
        """``C`` itself (``m × n``)."""

    def range_matmat(self, G: FloatArray) -> FloatArray:
        """``R G`` for a factorisation ``C = R F`` with ``F`` invertible (``m × ℓ``).

        ``range(R) = range(C)`` exactly, so a randomised range finder may sketch ``R``
        instead of ``C`` where ``R`` is cheaper to apply.  Default ``R = C``, ``F = I``.
        """
        return self.matmat(G)

    def range_factor(self, G: FloatArray) -> FloatArray:
        """``F G`` for the same factorisation, so that ``C G = R (F G)`` (default ``G``)."""
        return G

    #: ``True`` if ``range_matmat`` accepts a SciPy sparse test matrix and is then much
    #: cheaper than with a dense one: the range finder sketches with a CountSketch
    #: (``docs/cloaking.md`` §4).
    sparse_sketch: bool = False


class CloakingOperator(LinearCloakingOperator):
    r"""The cloaking matrix ``C = K_sf (K_ff + σ_n² I)⁻¹`` as a linear operator, never formed.

    ``C G = K_sf (A⁻¹ G)`` and ``Qᵀ C = (A⁻¹ (K_fs Q))ᵀ`` cost ``O(n² ℓ + m n ℓ)`` for ``ℓ``
    columns with the Cholesky factor ``L`` of ``A = K_ff + σ_n² I``, against ``O(n² m)`` to
    form the ``m × n`` matrix ``C``.  ``solve_noise_covariance`` accepts it in place of
    ``C`` (only public quantities: inputs and hyperparameters).

    ``K_sf`` is best given in Fortran order (``k(X, X*).T``): the sparse sketch of the range
    finder then reads ``K_fs`` row by row.
    """

    sparse_sketch = True

    def __init__(self, K_sf: FloatArray, L: FloatArray) -> None:
        self.K_sf = np.asarray(K_sf, dtype=np.float64)
        self.L = L
        self.shape = (self.K_sf.shape[0], self.K_sf.shape[1])

    def _solve(self, B: FloatArray) -> FloatArray:
        return sla.cho_solve((self.L, True), B, check_finite=False)

    def matmat(self, G: FloatArray) -> FloatArray:
        """``C G`` (``m × ℓ``)."""
        return self.K_sf @ self._solve(G)

    def rmatmat(self, Q: FloatArray) -> FloatArray:
        """``Qᵀ C`` (``ℓ × n``); ``A`` is symmetric."""
        return self._solve(self.K_sf.T @ Q).T

    def dense(self) -> FloatArray:
        """``C`` itself (``O(n² m)``): only for the fallback of slowly decaying spectra."""
        return self._solve(self.K_sf.T).T

    def range_matmat(self, G: FloatArray | sp.sparray | sp.spmatrix) -> FloatArray:
        """``K_sf G``: ``C = K_sf A⁻¹`` with ``A`` invertible, so ``range(K_sf) = range(C)``.

        ``2 m n`` flops per column instead of ``2 m n + 2 n²`` for ``C G`` (no triangular
        solves): the sketch of the range finder (``docs/cloaking.md`` §4).  A sparse ``G``
        (a CountSketch: one ``±1`` per row) costs ``m n`` additions, computed as
        ``(Gᵀ K_fs)ᵀ``, which reads ``K_fs`` row by row once (``K_sf`` in Fortran order).
        """
        if sp.issparse(G):
            return np.asarray((sp.csr_matrix(G.T) @ self.K_sf.T).T)
        return self.K_sf @ G

    def range_factor(self, G: FloatArray) -> FloatArray:
        """``A⁻¹ G`` (``C G = K_sf (A⁻¹ G)``)."""
        return self._solve(G)


class LowRankOperator(LinearCloakingOperator):
    """``C = left @ right`` with ``left`` ``m × r`` and ``right`` ``r × n`` (rank ≤ ``r``).

    Column ``i`` of ``C`` is ``left @ right[:, i]``; products cost ``O((m + n) r ℓ)``.
    """

    def __init__(self, left: FloatArray, right: FloatArray) -> None:
        self.left = np.asarray(left, dtype=np.float64)
        self.right = np.asarray(right, dtype=np.float64)
        if self.left.ndim != 2 or self.right.ndim != 2 or self.left.shape[1] != self.right.shape[0]:
            raise ValueError(
                f"left ({self.left.shape}) and right ({self.right.shape}) must be 2-D with "
                "matching inner dimension."
            )
        self.shape = (self.left.shape[0], self.right.shape[1])

    @property
    def rank_bound(self) -> int:
        """The inner dimension ``r`` (an upper bound on the rank of ``C``)."""
        return int(self.left.shape[1])

    def matmat(self, G: FloatArray) -> FloatArray:
        """``C G = left (right G)``."""
        return self.left @ (self.right @ G)

    def rmatmat(self, Q: FloatArray) -> FloatArray:
        """``Qᵀ C = (leftᵀ Q)ᵀ right``."""
        return (self.left.T @ Q).T @ self.right

    def dense(self) -> FloatArray:
        """``C = left @ right`` (``m × n``)."""
        return self.left @ self.right
