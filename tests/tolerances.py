"""Numerical tolerances derived from the problem's conditioning, not from what one machine printed.

Every comparison between two floating-point computations of the same quantity in the suite
takes its tolerance from here (or says next to it why it needs none). The rules, float64
unit round-off ``EPS = 2.2e-16``:

* **Scalar closed forms** (a formula of a few dozen flops, no cancellation, no solve):
  each flop has relative error ≤ EPS, so ``k`` flops give ≤ ``k·EPS`` relative
  (Higham 2002, §3.1).  :func:`scalar_rtol` returns that with a safety factor 4.
* **Solves with a matrix A** (Cholesky, LU, triangular), done by two backward-stable
  implementations (ours and NumPy's / PyMC's, possibly another BLAS build or thread
  count): each has forward error ``‖x̂ − x‖ / ‖x‖ ≤ c·n·κ(A)·EPS`` (Higham 2002,
  Thm 7.2 and §10.1), so the two differ by at most twice that.  :func:`cond_rtol`
  returns ``4·n·κ(A)·EPS`` (``c = 2`` per side), and the comparison is *normwise*
  (:func:`assert_normwise_close`), which is what that theorem bounds — elementwise
  relative error of small entries is not controlled by any such bound.
* **Iterative algorithms with a stopping tolerance** (root finding, optimisers,
  quadrature): the tolerance is the algorithm's own stopping tolerance, stated at
  the call.

Each helper returns a tolerance that a wrong answer still violates: the tests in
``tests/test_tolerances.py`` feed a perturbed result through the same comparison and
check that it fails.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

EPS = float(np.finfo(np.float64).eps)


def scalar_rtol(n_flops: int = 10) -> float:
    """Relative tolerance for a closed-form scalar formula of ``n_flops`` operations."""
    return 4.0 * n_flops * EPS


def condition_number(A: ArrayLike) -> float:
    """2-norm condition number κ(A) = σ_max / σ_min (∞ for a singular matrix)."""
    s = np.linalg.svd(np.asarray(A, dtype=np.float64), compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")


def cond_rtol(A: ArrayLike | float, n: int | None = None, *, factor: float = 4.0) -> float:
    """Normwise relative tolerance ``factor·n·κ(A)·EPS`` for two backward-stable solves.

    ``A`` is the matrix being solved with (or its condition number); ``n`` its order
    (taken from ``A`` when it is a matrix).  The result is capped at 1e-2 so that a
    hopelessly ill-conditioned problem does not silently make the test vacuous: a test
    that hits the cap should use a better-conditioned problem.
    """
    if np.ndim(A) == 0:
        kappa = float(A)
        if n is None:
            raise ValueError("give n with a scalar condition number")
    else:
        A = np.asarray(A, dtype=np.float64)
        kappa = condition_number(A)
        n = A.shape[0] if n is None else n
    tol = factor * n * kappa * EPS
    if not tol < 1e-2:
        raise AssertionError(
            f"κ = {kappa:.3g} (n = {n}) is too ill-conditioned for a meaningful comparison"
        )
    return tol


def normwise_error(actual: ArrayLike, expected: ArrayLike) -> float:
    """``‖actual − expected‖_F / ‖expected‖_F`` (absolute when ``expected`` is 0)."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"shape {a.shape} != {e.shape}")
    denom = float(np.linalg.norm(e))
    diff = float(np.linalg.norm(a - e))
    return diff / denom if denom > 0 else diff


def assert_normwise_close(
    actual: ArrayLike, expected: ArrayLike, rtol: float, what: str = ""
) -> None:
    """Assert ``‖actual − expected‖ ≤ rtol·‖expected‖`` (Frobenius norm)."""
    err = normwise_error(actual, expected)
    assert err <= rtol, f"{what}: normwise relative error {err:.3g} > tolerance {rtol:.3g}"


def summation_atol(n_terms: int, term_bound: float, n_flops_per_term: int = 4) -> float:
    """Absolute tolerance for two float sums of the same ``n_terms`` terms in different orders.

    Each term ``t_i`` (a product of ``n_flops_per_term`` rounded operations) obeys
    ``|t_i| ≤ term_bound``.  Any summation order gives ``|ŝ − s| ≤ γ_{n−1} Σ|t_i|`` with
    ``γ_k = k·EPS/(1 − k·EPS)`` (Higham 2002, eq. 4.4), and each term carries a relative error
    of at most ``n_flops_per_term·EPS``; two orders (chunked in memory vs a Dask tree
    reduction) differ by at most twice the sum of both, times a safety factor 2.
    """
    n = int(n_terms)
    gamma = n * EPS / (1.0 - n * EPS)
    return 4.0 * (gamma + n_flops_per_term * EPS) * n * float(term_bound)


def design_rtol(gap: float, kappa: float, k: int) -> float:
    """Relative tolerance between two certified optimal cloaking covariances (D-optimal designs).

    Both solvers return a feasible ``M`` with a certificate ``log|M| − log|M_opt| ≤ gap``
    (Kiefer–Wolfowitz).  In the whitened basis ``−log det`` is strongly convex: on matrices
    with eigenvalues ≤ ``λ_max`` it has modulus ``1/λ_max²``, and ``M_opt`` minimises it over a
    convex set, so ``‖M − M_opt‖_F ≤ λ_max·sqrt(2·gap)`` (first-order optimality plus strong
    convexity; Boyd & Vandenberghe 2004, §9.1.2).  A quadratic form ``vᵀMv`` (a noise
    variance) then moves by at most ``κ(M_w)·sqrt(2·gap)`` relative, with ``κ(M_w)`` the
    condition number of the whitened optimum; two such solutions differ by twice that.  The
    certificate itself is computed in floating point, so ``gap`` is floored at
    :func:`scalar_rtol` of ``k`` (``k`` terms per gain ``g_i``) times ``k``.
    """
    floor = k * scalar_rtol(k)
    return 2.0 * float(kappa) * float(np.sqrt(2.0 * max(float(gap), floor)))


def projected_map_rtol(rho: float, sing: ArrayLike, k: int) -> float:
    """Normwise relative change of the rank-cut map ``C̃ = U_k U_kᵀ C`` when ``C`` moves by ``E``.

    ``rho = ‖E‖_F / ‖C‖_F`` and ``sing`` are the singular values of ``C`` (descending; those
    beyond the numerical rank may be omitted, which counts them as 0).  With ``P``, ``P'`` the
    projectors on the top-``k`` left singular spaces of ``C`` and ``C + E``,
    ``C̃' − C̃ = P'E + (P' − P)C`` and Wedin's sinΘ theorem (Wedin 1972; Stewart & Sun 1990,
    Thm. V.4.4) gives ``‖P' − P‖₂ ≤ ‖E‖₂ / δ`` with ``δ = σ_k − σ_{k+1} − ‖E‖₂``; ``P' − P`` has
    rank ≤ 2k.  So ``‖C̃' − C̃‖_F ≤ ‖E‖_F (1 + √(2k) σ_1 / δ)``, divided here by ``‖C̃‖_F``, times
    a safety factor 2.  This is the rank cut's amplification of round-off: ``σ_1/δ`` reaches
    ``1/rank_tol`` when a retained singular value sits just above the cut.  Infinite (no
    bound) when ``δ ≤ 0``, i.e. the perturbation can move a singular value across the cut.
    """
    s = np.asarray(sing, dtype=np.float64)
    norm_c = float(np.sqrt(np.sum(s * s)))
    norm_ct = float(np.sqrt(np.sum(s[:k] ** 2)))
    e = float(rho) * norm_c
    delta = s[k - 1] - (s[k] if k < s.size else 0.0) - e
    if not delta > 0.0:
        return float("inf")
    return 2.0 * e * (1.0 + np.sqrt(2.0 * k) * s[0] / delta) / norm_ct
