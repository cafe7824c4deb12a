"""Cholesky factorisation and solves for GP posterior algebra.

Everything in :mod:`pm_dpgp.gp` goes through these helpers: a (possibly jittered)
lower Cholesky factor and triangular / Cholesky solves.  No explicit inverse is
ever formed (Rasmussen & Williams 2006, *Gaussian Processes for Machine
Learning*, §2.2 and Algorithm 2.1; Golub & Van Loan 2013, §4.2).

Jitter changes the matrix that is factorised, and therefore the released
quantity; :func:`jittered_cholesky` returns the jitter it actually used so callers
can record it in the release metadata instead of hiding it.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_finite_array, check_positive

__all__ = [
    "CholeskyError",
    "check_square_symmetric",
    "jittered_cholesky",
    "cho_solve_lower",
    "solve_lower",
]

#: First jitter tried when the caller gives none, relative to the mean diagonal.
_RELATIVE_JITTER_START = 1e-10


class CholeskyError(np.linalg.LinAlgError):
    """The matrix could not be Cholesky-factorised even with the largest jitter tried.

    Subclasses :class:`numpy.linalg.LinAlgError` (itself a ``ValueError``), so
    existing ``except LinAlgError`` handlers still catch it.
    """


def check_square_symmetric(
    A: ArrayLike, name: str = "A", *, rtol: float = 1e-8
) -> NDArray[np.float64]:
    """Return ``A`` as a finite, square, (numerically) symmetric float64 matrix.

    Raises ``ValueError`` otherwise.  The tolerance is relative to the largest
    absolute entry, so kernel matrices that are symmetric up to rounding pass.
    """
    arr = check_finite_array(A, name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {arr.shape}.")
    scale = float(np.max(np.abs(arr))) if arr.size else 0.0
    if not np.allclose(arr, arr.T, rtol=0.0, atol=rtol * max(scale, np.finfo(float).tiny)):
        raise ValueError(
            f"{name} is not symmetric (max |A - A^T| = {np.max(np.abs(arr - arr.T)):.3g}); "
            "a covariance matrix must be symmetric."
        )
    return arr


def jittered_cholesky(
    A: ArrayLike, *, jitter: float = 0.0, max_tries: int = 6
) -> tuple[NDArray[np.float64], float]:
    r"""Lower Cholesky factor of ``A + jitter·I``, adding more jitter only if needed.

    First tries ``A + jitter·I`` (``jitter`` may be 0).  If that is not
    numerically positive definite, retries with jitter
    ``j_k = s · 10^k`` for ``k = 0, 1, …`` (at most ``max_tries`` attempts in
    total), where ``s = max(jitter, 1e-10 · mean(diag A))`` times 10 when
    ``jitter > 0``.  This is the usual "jitchol" strategy for kernel matrices
    (cf. GPy's ``jitchol``; Rasmussen & Williams 2006, §A.4 / Algorithm 2.1).

    Parameters
    ----------
    A
        Symmetric positive semi-definite matrix (only the lower triangle is read by
        the factorisation, but symmetry is checked).
    jitter
        Jitter to add on the first attempt (absolute, >= 0).
    max_tries
        Maximum number of factorisation attempts (>= 1).

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
    arr = check_square_symmetric(A, "A")
    jitter = check_positive(jitter, "jitter", allow_zero=True)
    if isinstance(max_tries, bool) or not isinstance(max_tries, (int, np.integer)) or max_tries < 1:
        raise ValueError(f"max_tries must be a positive integer, got {max_tries!r}.")

    mean_diag = float(np.mean(np.diag(arr)))
    scale = mean_diag if (math.isfinite(mean_diag) and mean_diag > 0.0) else 1.0
    if jitter > 0.0:
        step = max(10.0 * jitter, _RELATIVE_JITTER_START * scale)
    else:
        step = _RELATIVE_JITTER_START * scale
    schedule = [jitter] + [step * 10.0**k for k in range(max_tries - 1)]

    eye = np.eye(arr.shape[0])
    for j in schedule:
        try:
            L = scipy.linalg.cholesky(
                arr + j * eye if j > 0.0 else arr, lower=True, check_finite=False
            )
        except np.linalg.LinAlgError:
            continue
        if np.all(np.isfinite(L)) and np.all(np.diag(L) > 0.0):
            return L, float(j)
    min_eig = float(np.linalg.eigvalsh(arr)[0])
    raise CholeskyError(
        f"Cholesky factorisation failed for a {arr.shape[0]}x{arr.shape[0]} matrix even with "
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
