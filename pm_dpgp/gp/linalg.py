"""Cholesky factorisation and solves for GP posterior algebra.

Everything in ``pm_dpgp.gp`` goes through these helpers: a (possibly jittered)
lower Cholesky factor and triangular / Cholesky solves.  No explicit inverse is
ever formed (Rasmussen & Williams 2006, *Gaussian Processes for Machine
Learning*, §2.2 and Algorithm 2.1; Golub & Van Loan 2013, §4.2).

Jitter changes the matrix that is factorised, and therefore the released
quantity; ``jittered_cholesky`` returns the jitter it actually used so callers
can record it in the release metadata instead of hiding it.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import scipy.linalg
import scipy.linalg.lapack
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_finite_array, check_positive

__all__ = [
    "CholeskyError",
    "canonical_signs",
    "fill_upper_from_lower",
    "sign_reference",
    "check_square_symmetric",
    "jitter_schedule",
    "jittered_cholesky",
    "psd_eigen_root",
    "symmetrise_inplace",
    "cho_solve_lower",
    "solve_lower",
    "norm_rounded_up",
    "unit_scaled",
]


def unit_scaled(X: NDArray[np.float64]) -> tuple[NDArray[np.float64], int]:
    """``(X · 2⁻ᵉ, e)`` with ``max |X · 2⁻ᵉ|`` in ``[0.5, 1)`` (``e = 0`` when ``X`` is all 0 or
    not finite): an exact rescaling (short of entries far below the largest, which may
    underflow, silently) under which squares and squared distances neither over- nor
    underflow.  Used for the rounded-up norms (``norm_rounded_up``, the whitening's column
    norms) and for k-means on public inputs of any magnitude, which is equivariant under it
    (k-means++ draws in proportion to squared distances, Lloyd's step takes means), so
    ``2ᵉ ×`` the centres of the scaled inputs are the centres of ``X`` itself, bit for bit,
    wherever ``X``'s own squared distances are finite and normal.  Beyond that they were not:
    at 1e160 the squared distances overflowed (SciPy's ``kmeans2`` crashed the interpreter,
    the sparse k-means raised "Probabilities contain NaN"), at 1e-200 they underflowed to 0
    (coinciding centres refused, or centres that were no k-means solution returned
    silently); stop-48 audit.
    """
    m = float(np.max(np.abs(X))) if np.size(X) else 0.0
    e = int(np.frexp(m)[1]) if 0.0 < m < math.inf else 0
    with np.errstate(under="ignore"):
        return np.ldexp(X, -e), e


def norm_rounded_up(values: NDArray[np.float64]) -> float:
    """``‖values‖₂`` of the given floats, rounded up: never below the exact norm.

    ``math.fsum`` and ``sqrt`` are correctly rounded (the squares add one rounding each), so
    the exact norm is at most ``ŝ/(1 − u)²`` for the computed ``ŝ``, which
    ``fl(ŝ (1 + 2⁻⁵¹))`` exceeds; a BLAS dot could leave the norm ``γ_n`` below it.  Used where
    a public bound must hold for the floats actually used (the square-root counter's column
    norm, the dyadic partition basis's ``R_φ``).  The values are first scaled by the power of
    two ``2⁻ᵉ`` that brings the largest into ``[½, 1)`` (exact), and the result scaled back and
    rounded up by one subnormal step when it is subnormal: squares of values below ``2⁻⁵¹¹``
    underflow, and ``[1.5e-162] * 2`` had the norm 0, ``[3.5e-162] * 2`` 10% below the exact
    one (stop-48 audit; the partition basis charged that ``R_φ``).
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    top = float(np.max(np.abs(v), initial=0.0))
    if not (top > 0.0 and math.isfinite(top)):
        return math.sqrt(math.fsum(v * v)) * (1.0 + 2.0**-51)  # 0, or inf / nan as given
    s, e = unit_scaled(v)  # the largest in [1/2, 1): its square and the sum are normal
    # squares of entries below 2⁻⁵¹¹ (relative to the largest) err by ≤ 2⁻¹⁰⁷⁵ absolutely,
    # far inside the allowance (2⁻⁵¹ against the 2⁻⁵² the roundings need, of a sum ≥ ¼);
    # that underflow is expected, so it neither warns nor raises under np.seterr(all="raise")
    with np.errstate(under="ignore"):
        squares = s * s
    try:
        r = math.ldexp(math.sqrt(math.fsum(squares)) * (1.0 + 2.0**-51), e)
    except OverflowError:  # the norm exceeds float64
        return math.inf
    return math.nextafter(r, math.inf) if r < sys.float_info.min else r


#: First jitter tried when the caller gives none, relative to the mean diagonal.
_RELATIVE_JITTER_START = 1e-10


class CholeskyError(np.linalg.LinAlgError):
    """The matrix could not be Cholesky-factorised even with the largest jitter tried.

    Subclasses ``numpy.linalg.LinAlgError`` (itself a ``ValueError``), so
    existing ``except LinAlgError`` handlers still catch it.
    """


#: Seed of the fixed public Gaussian vector that decides the signs of basis vectors
#: (``canonical_signs``); a constant, so every stack and every algorithm uses the same vector.
SIGN_REFERENCE_SEED = 20180409


def sign_reference(m: int) -> NDArray[np.float64]:
    """The fixed public Gaussian vector ``w`` (length ``m``) of ``canonical_signs``."""
    return np.random.default_rng(SIGN_REFERENCE_SEED).standard_normal(m)


def canonical_signs(U: NDArray[np.float64]) -> NDArray[np.float64]:
    """Flip columns of ``U`` so that ``wᵀ u_j > 0`` for a fixed public Gaussian ``w``.

    Singular vectors and eigenvectors are defined up to sign, and the sign LAPACK returns
    depends on the algorithm (a full SVD of ``C``, an SVD of a sketch) and on the build
    (OpenBLAS versions, MKL, Accelerate).  Noise of the form ``U diag(s) z`` depends on the
    signs, so the same seed would give different releases on two machines; fixing the signs
    by a rule that only depends on the directions makes the draw a function of the matrix
    and the seed alone.  (A random ``w`` rather than the largest entry: symmetric test grids
    give vectors with ties in ``|u_ij|``; ``wᵀu = 0`` has probability zero.)  Directions in a
    repeated eigenspace are not unique beyond their signs, so this canonicalises only
    well-separated spectra.
    """
    w = sign_reference(U.shape[0])
    return U * np.where(w @ U < 0.0, -1.0, 1.0)


def psd_eigen_root(S: NDArray[np.float64]) -> NDArray[np.float64]:
    """``R = V diag(√λ₊)`` with ``R Rᵀ = S₊``: the eigen-root of the symmetrised ``S`` with
    negative (round-off) eigenvalues clipped at 0 and canonical eigenvector signs
    (``canonical_signs``), for draws ``m + R z`` from a possibly singular covariance that a
    seed fixes on every LAPACK build."""
    w, V = np.linalg.eigh(0.5 * (S + S.T))
    return canonical_signs(V) * np.sqrt(np.clip(w, 0.0, None))


#: Rows per block in the blocked passes over an n×n matrix: each pass holds O(n · block)
#: temporaries instead of several n×n ones, and reads the transpose block-wise (cache friendly).
_BLOCK = 256


def _blocks(n: int) -> range:
    return range(0, n, _BLOCK)


def check_square_symmetric(
    A: ArrayLike, name: str = "A", *, rtol: float = 1e-8
) -> NDArray[np.float64]:
    """Return ``A`` as a finite, square, (numerically) symmetric float64 matrix.

    Raises ``ValueError`` otherwise.  The tolerance is relative to the largest
    absolute entry, so kernel matrices that are symmetric up to rounding pass.
    One blocked pass over ``A`` (``max |A − Aᵀ|`` and ``max |A|`` strip by strip, O(n · 256)
    temporary memory); no copy of a float64 input.
    """
    arr = check_finite_array(A, name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {arr.shape}.")
    n = arr.shape[0]
    scale = 0.0
    asym = 0.0
    for i in _blocks(n):
        j = min(n, i + _BLOCK)
        strip = arr[i:j, i:]  # rows i..j, columns i.. (upper part of the strip)
        scale = max(scale, float(np.max(np.abs(arr[i:j]))))
        asym = max(asym, float(np.max(np.abs(strip - arr[i:, i:j].T))))
    if not asym <= rtol * max(scale, np.finfo(float).tiny):
        raise ValueError(
            f"{name} is not symmetric (max |A - A^T| = {asym:.3g}); "
            "a covariance matrix must be symmetric."
        )
    return arr


def symmetrise_inplace(A: NDArray[np.float64]) -> NDArray[np.float64]:
    """Replace the square matrix ``A`` by ``½(A + Aᵀ)`` in place (blocked); return it.

    Bitwise the same numbers as ``0.5 * (A + A.T)`` (each entry is ``0.5·(a_ij + a_ji)``,
    one addition and one exact halving), without the two n×n temporaries.
    """
    n = A.shape[0]
    for i in _blocks(n):
        j = min(n, i + _BLOCK)
        avg = 0.5 * (A[i:j, i:] + A[i:, i:j].T)
        A[i:j, i:] = avg
        A[i:, i:j] = avg.T
    return A


def _restore_lower_from_upper(W: NDArray[np.float64]) -> None:
    """``W``'s lower triangle (strict) := its upper triangle transposed (blocked, in place)."""
    n = W.shape[0]
    for i in _blocks(n):
        j = min(n, i + _BLOCK)
        W[j:, i:j] = W[i:j, j:].T
        blk = W[i:j, i:j]
        low = np.tril_indices(j - i, -1)
        blk[low] = blk.T[low]


def fill_upper_from_lower(W: NDArray[np.float64]) -> NDArray[np.float64]:
    """Make the square ``W`` symmetric from its lower triangle, in place (blocked); return it.

    For results of BLAS ``?syrk`` / ``?potrf``-style routines that write one triangle only.
    """
    _restore_lower_from_upper(W.T)  # W.T's lower triangle is W's upper one
    return W


def _zero_upper(W: NDArray[np.float64]) -> None:
    """Zero the strict upper triangle of ``W`` in place (blocked)."""
    n = W.shape[0]
    for i in _blocks(n):
        j = min(n, i + _BLOCK)
        W[i:j, j:] = 0.0
        blk = W[i:j, i:j]
        blk[np.triu_indices(j - i, 1)] = 0.0


def jitter_schedule(diag: NDArray[np.float64], jitter: float, max_tries: int) -> list[float]:
    """The jitters ``jittered_cholesky`` tries, in order, for a matrix with diagonal ``diag``.

    ``[jitter, s, 10 s, 100 s, …]`` (``max_tries`` values) with
    ``s = max(10·jitter, 1e-10 · mean(diag))`` (``1e-10 · mean(diag)`` when ``jitter`` is 0;
    the mean is replaced by 1 when it is not a positive finite number).
    """
    mean_diag = float(np.mean(diag)) if len(diag) else 0.0
    scale = mean_diag if (math.isfinite(mean_diag) and mean_diag > 0.0) else 1.0
    if jitter > 0.0:
        step = max(10.0 * jitter, _RELATIVE_JITTER_START * scale)
    else:
        step = _RELATIVE_JITTER_START * scale
    return [jitter] + [step * 10.0**k for k in range(max_tries - 1)]


def jittered_cholesky(
    A: ArrayLike,
    *,
    jitter: float = 0.0,
    max_tries: int = 6,
    overwrite_a: bool = False,
    check: bool = True,
) -> tuple[NDArray[np.float64], float]:
    r"""Lower Cholesky factor of ``A + jitter·I``, adding more jitter only if needed.

    First tries ``A + jitter·I`` (``jitter`` may be 0).  If that is not
    numerically positive definite, retries with jitter
    ``j_k = s · 10^k`` for ``k = 0, 1, …`` (at most ``max_tries`` attempts in
    total), where ``s = max(10·jitter, 1e-10 · mean(diag A))`` (``1e-10 · mean(diag A)``
    when ``jitter`` is 0; ``jitter_schedule``).  This is the usual "jitchol" strategy for
    kernel matrices
    (cf. GPy's ``jitchol``; Rasmussen & Williams 2006, §A.4 / Algorithm 2.1).

    The factorisation is LAPACK ``dpotrf`` on one working matrix: a copy of ``A``, or with
    ``overwrite_a=True`` and a contiguous float64 ``A`` the memory of ``A`` itself (``A`` is
    destroyed and the factor is returned in its memory, as a Fortran-ordered view).  Only one
    triangle is factorised, so a failed attempt is undone from the other one; jitter is added
    to the diagonal only (no ``n × n`` identity is formed).

    Parameters
    ----------
    A
        Symmetric positive semi-definite matrix (only the lower triangle is read by
        the factorisation, but symmetry is checked).
    jitter
        Jitter to add on the first attempt (absolute, >= 0).
    max_tries
        Maximum number of factorisation attempts (>= 1).
    overwrite_a
        Factorise in the memory of ``A`` (peak memory one ``n × n`` matrix instead of two).
    check
        Check that ``A`` is finite, square and symmetric (``check_square_symmetric``);
        pass ``False`` only when the caller has just checked it.

    Returns
    -------
    L, jitter_used
        ``L`` lower triangular with ``L @ L.T == A + jitter_used * I`` and the
        jitter actually added (0.0 when ``A`` factorised as given).  Record
        ``jitter_used``: it changes the matrix the result describes.

    Raises
    ------
    ValueError
        ``A`` is not a finite square symmetric matrix, or bad ``jitter``/``max_tries``.
    CholeskyError
        No attempt succeeded (``A`` is far from positive semi-definite).
    """
    arr = check_square_symmetric(A, "A") if check else np.asarray(A, dtype=np.float64)
    jitter = check_positive(jitter, "jitter", allow_zero=True)
    if isinstance(max_tries, bool) or not isinstance(max_tries, (int, np.integer)) or max_tries < 1:
        raise ValueError(f"max_tries must be a positive integer, got {max_tries!r}.")

    diag0 = np.diag(arr).copy()
    mean_diag = float(np.mean(diag0)) if len(diag0) else 0.0
    schedule = jitter_schedule(diag0, jitter, max_tries)

    # A Fortran-ordered working matrix; for a symmetric A, A.T is the same matrix.
    if overwrite_a and arr.flags.f_contiguous and arr.flags.writeable:
        W = arr
    elif overwrite_a and arr.flags.c_contiguous and arr.flags.writeable:
        W = arr.T
    else:
        W = np.array(arr, dtype=np.float64, order="F", copy=True)
    n = W.shape[0]
    diag = np.einsum("ii->i", W)  # writeable view of the diagonal
    for attempt, j in enumerate(schedule):
        if attempt:
            _restore_lower_from_upper(W)  # undo the failed attempt (upper triangle untouched)
        diag[:] = diag0 + j if j > 0.0 else diag0
        L, info = scipy.linalg.lapack.dpotrf(W, lower=1, clean=0, overwrite_a=1)
        if info == 0 and np.all(np.diag(L) > 0.0) and np.all(np.isfinite(np.diag(L))):
            if not np.shares_memory(L, W):  # pragma: no cover - f2py always works in place here
                W[...] = L
            _zero_upper(W)
            return W, float(j)
    _restore_lower_from_upper(W)
    diag[:] = diag0
    min_eig = float(scipy.linalg.eigvalsh(W, subset_by_index=[0, 0])[0]) if n else 0.0
    raise CholeskyError(
        f"Cholesky factorisation failed for a {n}x{n} matrix even with "
        f"jitter up to {schedule[-1]:.3g} (mean diagonal {mean_diag:.3g}, smallest eigenvalue "
        f"{min_eig:.3g}). The matrix is not positive semi-definite: check the kernel and its "
        "hyperparameters, remove duplicated inputs, or increase the noise variance."
    )


def _check_factor_and_rhs(L: ArrayLike, B: ArrayLike) -> tuple[NDArray[np.float64], NDArray]:
    L_arr = np.asarray(L, dtype=np.float64)
    if L_arr.ndim != 2 or L_arr.shape[0] != L_arr.shape[1]:
        raise ValueError(f"L must be a square matrix, got shape {L_arr.shape}.")
    B_arr = check_finite_array(B, "B")
    if B_arr.ndim not in (1, 2) or B_arr.shape[0] != L_arr.shape[0]:
        raise ValueError(
            f"B must have {L_arr.shape[0]} rows to match L {L_arr.shape}, got shape {B_arr.shape}."
        )
    return L_arr, B_arr


def cho_solve_lower(L: ArrayLike, B: ArrayLike) -> NDArray[np.float64]:
    r"""Solve ``(L Lᵀ) X = B`` given the lower Cholesky factor ``L``.

    Two triangular solves, ``X = L⁻ᵀ (L⁻¹ B)`` (Rasmussen & Williams 2006,
    Algorithm 2.1, line 3: ``α = Lᵀ \ (L \ y)``).  ``B`` may be a vector or a matrix.
    """
    L_arr, B_arr = _check_factor_and_rhs(L, B)
    return scipy.linalg.cho_solve((L_arr, True), B_arr, check_finite=False)


def solve_lower(L: ArrayLike, B: ArrayLike) -> NDArray[np.float64]:
    r"""Solve the lower-triangular system ``L X = B`` (forward substitution).

    Used for ``V = L \ K_fs`` in the predictive covariance
    ``K_ss − Vᵀ V`` (Rasmussen & Williams 2006, Algorithm 2.1, line 5).
    """
    L_arr, B_arr = _check_factor_and_rhs(L, B)
    return scipy.linalg.solve_triangular(L_arr, B_arr, lower=True, check_finite=False)
