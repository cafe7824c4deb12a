r"""Lower triangles in LAPACK's Rectangular Full Packed (RFP) format.

A lower-triangular ``n × n`` matrix (a Cholesky factor, or the lower triangle of a symmetric
matrix) held in ``n(n + 1)/2`` doubles instead of ``n²``, with BLAS-3 speed: LAPACK's RFP
routines (Gustavson, Waśniewski, Dongarra & Langou 2010, "Rectangular full packed format for
Cholesky's algorithm: factorization, solution, and inversion", *ACM TOMS* 37(2), art. 18;
LAPACK Working Note 199) split the triangle into two triangles ``T1`` (order ``n1``), ``T2``
(order ``n2 = n − n1``) and the rectangle ``R = A[n1:, :n1]``, and run ``?potrf`` / ``?trsm``
/ ``?syrk`` / ``?gemm`` on those pieces.  SciPy wraps the routines used here: ``dtrttf`` /
``dtfttr`` (conversion), ``dpftrf`` (Cholesky), ``dtfsm`` (triangular solve), ``dpftrs``
(Cholesky solve) and ``dsfrk`` (symmetric rank-k update).

Layout (``TRANSR='N'``, ``UPLO='L'``), the packed vector read as a column-major
``lda × n_cols`` array ``AP``, with ``off = lda − n``:

* ``n`` even (``n1 = n2 = n/2``, ``lda = n + 1``, ``off = 1``); ``n`` odd
  (``n1 = (n + 1)/2``, ``n2 = n1 − 1``, ``lda = n``, ``off = 0``);
* column ``j < n1`` of the lower triangle, ``A[j:, j]``, is ``AP[off + j : off + n, j]``
  (``T1`` and ``R``);
* column ``j ≥ n1``, ``A[j:, j]``, is the row segment
  ``AP[j − n1, j − n1 + 1 − off : n2 + 1 − off]`` (``T2`` stored transposed in the upper
  triangle of ``AP``'s first ``n2`` rows).

Column strips of the triangle therefore map to rectangular views of ``AP`` (transposed in the
second half), which is how a triangle is filled strip by strip without an ``n × n`` array
(``RFPTriangle.from_columns``) and multiplied by a matrix (``RFPTriangle.matmul``; LAPACK has
no RFP ``trmm``).  No privacy logic lives here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import numpy as np
import scipy.linalg.lapack as lapack
from numpy.typing import NDArray

__all__ = ["RFPTriangle"]

#: Columns per strip when filling or multiplying a triangle strip by strip.
_STRIP = 256

_RFP = {"transr": "N", "uplo": "L"}


class RFPTriangle:
    """A lower-triangular ``n × n`` matrix stored in ``n(n + 1)/2`` doubles (RFP format).

    ``data`` is the packed vector (``TRANSR='N'``, ``UPLO='L'``); it is owned by the object
    and modified in place by ``add_to_diagonal``, ``rank_update`` and ``cholesky``.
    """

    __slots__ = ("data", "n")

    def __init__(self, data: NDArray[np.float64], n: int) -> None:
        if data.shape != (n * (n + 1) // 2,) or data.dtype != np.float64:
            raise ValueError(f"an RFP triangle of order {n} needs {n * (n + 1) // 2} doubles")
        self.data = data
        self.n = n

    # ------------------------------------------------------------------ layout
    @property
    def _n1(self) -> int:
        return self.n - self.n // 2

    @property
    def _off(self) -> int:
        return 1 - self.n % 2

    def _ap(self) -> NDArray[np.float64]:
        """The packed vector as the column-major ``lda × n_cols`` array (a view)."""
        lda = self.n + self._off
        return self.data.reshape((lda, self.data.size // lda if lda else 0), order="F")

    def _strips(self) -> Iterator[tuple[int, int, NDArray[np.float64], NDArray[np.float64]]]:
        """``(c0, c1, D, R)``: views of the strip ``A[c0:, c0:c1]`` of the triangle.

        ``D`` is the ``(c1 − c0)²`` diagonal block ``A[c0:c1, c0:c1]`` (only its lower
        triangle belongs to the matrix: the rest of that view holds other entries) and ``R``
        the rectangle ``A[c1:, c0:c1]``; both are views of ``data`` (transposed views in the
        second half).  Strips do not cross the column ``n1``.
        """
        n, n1, off = self.n, self._n1, self._off
        ap = self._ap()
        for c0 in [*range(0, n1, _STRIP), *range(n1, n, _STRIP)]:
            c1 = min(c0 + _STRIP, n1 if c0 < n1 else n)
            if c0 < n1:
                yield c0, c1, ap[off + c0 : off + c1, c0:c1], ap[off + c1 : off + n, c0:c1]
            else:
                r0, r1, s = c0 - n1, c1 - n1, 1 - off - n1
                yield c0, c1, ap[r0:r1, c0 + s : c1 + s].T, ap[r0:r1, c1 + s : n + s].T

    def _diagonal_index(self) -> NDArray[np.intp]:
        """Positions of ``A[j, j]`` in ``data``."""
        return _diagonal_positions(self.n, self._n1, self._off)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dense(cls, A: NDArray[np.float64]) -> RFPTriangle:
        """The lower triangle of the square ``A`` (LAPACK ``dtrttf``; ``A`` is not changed)."""
        arf, info = lapack.dtrttf(np.asfortranarray(A, dtype=np.float64), **_RFP)
        if info != 0:  # pragma: no cover - only for invalid arguments
            raise ValueError(f"dtrttf failed (info = {info})")
        return cls(arf, A.shape[0])

    @classmethod
    def from_columns(
        cls, n: int, columns: Callable[[int, int], NDArray[np.float64]]
    ) -> RFPTriangle:
        """Fill the lower triangle strip by strip: ``columns(c0, c1)`` returns ``A[c0:, c0:c1]``.

        Only one strip (``(n − c0) × 256`` doubles) exists besides the packed result, so a
        kernel matrix is evaluated into ``n(n + 1)/2`` doubles without an ``n × n`` array.
        For ``n ≤ 256`` the whole ``A[:, :n]`` is one call of ``columns`` (no larger than one
        strip) packed by ``dtrttf``: the RFP layout would otherwise split it into two
        half-width strips, i.e. two kernel calls where one suffices (a DP Thompson round
        builds two such small triangles).
        """
        if n <= _STRIP:
            return cls.from_dense(columns(0, n))
        out = cls(np.empty(n * (n + 1) // 2), n)
        for c0, c1, D, R in out._strips():
            strip = columns(c0, c1)
            w = c1 - c0
            low = _lower_indices(w)
            D[low] = strip[:w][low]
            R[...] = strip[w:]
        return out

    # ------------------------------------------------------------------ inspection
    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def diagonal(self) -> NDArray[np.float64]:
        """The diagonal ``A[j, j]`` (a copy)."""
        return self.data[self._diagonal_index()]

    def to_dense(self) -> NDArray[np.float64]:
        """The triangle as a dense lower-triangular ``n × n`` array (``dtfttr``; used by tests
        and by ``matmul`` for triangles within one strip)."""
        if self.n == 0:
            return np.zeros((0, 0))
        A, info = lapack.dtfttr(self.n, self.data, **_RFP)
        if info != 0:  # pragma: no cover - only for invalid arguments
            raise ValueError(f"dtfttr failed (info = {info})")
        return np.tril(A)

    # ------------------------------------------------------------------ algebra
    def add_to_diagonal(self, value: float | NDArray[np.float64]) -> None:
        """``A[j, j] += value`` in place."""
        self.data[self._diagonal_index()] += value

    def rank_update(self, A: NDArray[np.float64], alpha: float, beta: float = 1.0) -> None:
        """``C := alpha·AᵀA + beta·C`` on this (symmetric, lower-stored) ``C``, in place.

        LAPACK ``dsfrk`` (``TRANS='T'``): ``A`` is ``k × n``; a Fortran-ordered ``A`` is read
        in its own memory.
        """
        if A.shape[1] != self.n:
            raise ValueError(f"A must have {self.n} columns, got shape {A.shape}")
        if self.n == 0 or A.shape[0] == 0:
            self.data *= beta
            return
        out = lapack.dsfrk(
            self.n, A.shape[0], alpha, A, beta, self.data, trans="T", overwrite_c=1, **_RFP
        )
        if not np.shares_memory(out, self.data):  # pragma: no cover - f2py works in place
            self.data[...] = out

    def cholesky(self) -> bool:
        """Factorise this symmetric matrix in place (``dpftrf``): ``True`` on success.

        On success the object holds the lower Cholesky factor (positive, finite diagonal).
        On failure its content is destroyed and ``False`` is returned.
        """
        if self.n == 0:
            return True
        out, info = lapack.dpftrf(self.n, self.data, overwrite_a=1, **_RFP)
        if not np.shares_memory(out, self.data):  # pragma: no cover - f2py works in place
            self.data[...] = out
        d = self.diagonal()
        return bool(info == 0 and np.all(d > 0.0) and np.all(np.isfinite(d)))

    def solve(
        self, B: NDArray[np.float64], *, trans: bool = False, overwrite_b: bool = False
    ) -> NDArray[np.float64]:
        """``L⁻¹ B`` (or ``L⁻ᵀ B`` with ``trans``) for ``B`` of shape ``(n, k)`` (``dtfsm``).

        With ``overwrite_b`` and a Fortran-ordered float64 ``B`` the result is in ``B``'s
        memory.
        """
        if B.ndim != 2 or B.shape[0] != self.n:
            raise ValueError(f"B must have shape ({self.n}, k), got {B.shape}")
        if self.n == 0 or B.shape[1] == 0:
            return B if overwrite_b else B.copy()
        return lapack.dtfsm(
            1.0,
            self.data,
            B,
            side="L",
            trans="T" if trans else "N",
            overwrite_b=int(overwrite_b),
            **_RFP,
        )

    def cho_solve(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """``(L Lᵀ)⁻¹ b`` for this Cholesky factor ``L`` (``dpftrs``); ``b`` of shape ``(n,)``."""
        x, info = lapack.dpftrs(self.n, self.data, np.array(b, dtype=np.float64)[:, None], **_RFP)
        if info != 0:  # pragma: no cover - only for invalid arguments
            raise ValueError(f"dpftrs failed (info = {info})")
        return x[:, 0]

    def matmul(self, Z: NDArray[np.float64]) -> NDArray[np.float64]:
        """``L Z`` for ``Z`` of shape ``(n, k)``: one GEMM per column strip (views, no copy
        of the triangle), ``n² k`` flops as a triangular product.  A triangle within one
        strip (``n ≤ 256``) is unpacked instead (``to_dense``, at most 512 KiB) and
        multiplied once."""
        if Z.ndim != 2 or Z.shape[0] != self.n:
            raise ValueError(f"Z must have shape ({self.n}, k), got {Z.shape}")
        if self.n <= _STRIP:  # within one strip: unpack (dtfttr) and one product
            return self.to_dense() @ Z
        out = np.zeros((self.n, Z.shape[1]))
        for c0, c1, D, R in self._strips():
            Zs = Z[c0:c1]
            out[c0:c1] += np.tril(D) @ Zs
            out[c1:] += R @ Zs
        return out


@functools.lru_cache(maxsize=64)
def _diagonal_positions(n: int, n1: int, off: int) -> NDArray[np.intp]:
    """Positions of ``A[j, j]`` in the RFP array of order ``n`` (read-only, memoised: a
    DP Thompson loop factorises matrices of the same few orders every round)."""
    lda = n + off
    j = np.arange(n)
    first = (off + j) + j * lda
    second = (j - n1) + (j - n1 + 1 - off) * lda
    out = np.where(j < n1, first, second)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=64)
def _lower_indices(w: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """``np.tril_indices(w)``, read-only and memoised (one per strip width)."""
    rows, cols = np.tril_indices(w)
    rows.flags.writeable = False
    cols.flags.writeable = False
    return rows, cols
