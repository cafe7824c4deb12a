"""Optimal noise covariance for the cloaking mechanism.

The cloaking mechanism (Smith, Álvarez, Zwiessele & Lawrence, "Differentially private
regression with Gaussian processes", AISTATS 2018, §3 and supplement) releases the GP
posterior mean at fixed test inputs, ``f* = C y``, plus Gaussian noise with covariance
proportional to ``M``.  Changing one private label ``y_i`` by at most ``d`` moves the mean by
``d c_i`` (column ``i`` of the cloaking matrix ``C``), so by Hall et al. (2013, Prop. 3),
Smith et al. (2018, eq. 5 of the arXiv text; eq. 6 of the AISTATS one) the Mahalanobis
sensitivity is

    Δ = d · sqrt(max_i c_iᵀ M⁺ c_i).

The best ``M`` minimises ``log|M|`` subject to ``c_iᵀ M⁺ c_i ≤ 1`` (supplement, "Deriving and
optimising the cloaking variables").  Its Lagrangian stationarity condition gives
``M = Σ_i λ_i c_i c_iᵀ`` with ``λ ≥ 0`` maximising the concave dual

    φ(λ) = log det(Σ_i λ_i a_i a_iᵀ) − Σ_i λ_i,

where ``a_i`` are the columns expressed in an orthonormal basis ``U_k`` of the column space of
``C``.  This is the minimum-volume origin-centred ellipsoid enclosing ``±c_i`` and is dual to
D-optimal experimental design: ``λ = k·u`` where ``u`` (``Σu = 1``) maximises
``log det A(u)``, ``A(u) = Σ u_i a_i a_iᵀ``.  By Kiefer & Wolfowitz (1960) ``u`` is optimal iff
``max_i g_i(u) = k`` with ``g_i(u) = a_iᵀ A(u)⁻¹ a_i``; for any design ``u`` the scaled
covariance ``M(u) = (max_i g_i) · A(u)`` is feasible and

    log|M(u)| − log|M_opt| ≤ k · log(max_i g_i / k)          (duality-gap certificate).

``solve_noise_covariance`` solves the design problem with

1. a Kumar & Yildirim (2005)-style initialisation on ``k`` points chosen greedily by
   column-pivoted QR (largest residual volume);
2. Frank–Wolfe / Fedorov–Wynn steps with Wolfe–Atwood away steps and the Todd & Yildirim (2007)
   exact line search, using Sherman–Morrison rank-one updates of ``A(u)⁻¹`` and of all ``g_i``
   (``O(nk + k²)`` per step, refreshed from a Cholesky factorisation every ``_REFRESH`` steps);
3. once the relative Kiefer–Wolfowitz gap is below ``_POLISH_GAP``, an active-set Newton
   method on ``φ`` (Lawson & Hanson's NNLS scheme adapted to this concave dual) over the
   support plus the worst violators, repeated with new violators until the certificate holds;
   it reaches machine precision in a few dozen steps.

For numerical ranks ``k ≥ _IP_MIN_RANK`` (64; 2-D inputs give ``k`` in the hundreds) the
optimal support has hundreds of points (894 for ``k = 313``) and the active-set method, which
lets one weight enter per ``O(f³)`` step, needs ~1,000 steps.  There the design is first
solved by a primal–dual interior-point method (Mehrotra predictor–corrector on the dual, all
weights of a candidate set moving at once; ``_interior_point``) in rounds on candidate sets
that gain the violators of the previous round's optimum (``_interior_point_design``), then
polished by a few active-set Newton steps from its support; steps 1–3 follow only if that
leaves a gap (or as the fallback if the interior point fails).  ``n = 3,000``, ``m = 5,041``,
2-D (``k = 313``): the design solve went from 25–36 s to ~3.5–4 s CPU, with the same support
and ``A(u)`` equal to ``≤ 2.1e-15`` relative; Gondzio (1996) centrality correctors and float32
residuals and start values then cut it by another ~35 % (53 → 42 interior-point steps,
1.8–2.1 s CPU; the same release to 1e-15; docs/cloaking.md §5).

Numbers (shared 2-core machine, one BLAS thread; ``benchmarks/bench_cloaking.py``): !Kung
(``C`` 200 × 287, ``k = 14``) in ~5 ms CPU against ~0.5 s for the papers' gradient ascent,
which also stops ``~3e-3`` above the optimal ``log|M|``; ``n = 2000, m = 500`` (``k = 15``)
in ~35–45 ms.  See ``docs/cloaking.md`` for the derivation.

``gradient_ascent_reference`` is the fixed-rate projected gradient ascent of Smith et al.
(2018, supplement Algorithm 1, ``FINDLAMBDAS``), kept only as a benchmark baseline.

Numerical rank.  ``C`` is often numerically rank deficient (more test than training points,
smooth kernels).  Both solvers work in an orthonormal basis ``U_k`` of the left singular
directions whose singular values exceed ``rank_tol · σ_max`` (every discarded singular value is
``≤ rank_tol · σ_max``; see ``_column_space``).  The discarded directions carry no noise, so
the caller must release ``U_k U_kᵀ C y`` (see ``NoiseCovariance.projector``), never
``C y``, and in floating point must add the noise to the whitened mean
``chol_k⁻¹ U_kᵀ C y`` before mapping it back (``docs/cloaking.md`` §7,
``pm_dpgp.mechanisms.whitening``).  Inside the basis the solvers use the whitened columns
``b_i = S_k⁻¹ U_kᵀ c_i`` (the design problem is invariant under invertible linear maps), which
keeps every ``k × k`` system well conditioned even when the retained singular values span ten
orders of magnitude.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import ConvergenceWarning, check_count, real_or_nan
from pm_dpgp.gp.linalg import canonical_signs, sign_reference
from pm_dpgp.gp.operators import CloakingOperator, LinearCloakingOperator, LowRankOperator
from pm_dpgp.mechanisms.label.truncation import check_rank_tol

__all__ = [
    "CloakingOperator",
    "LinearCloakingOperator",
    "LowRankOperator",
    "NoiseCovariance",
    "solve_noise_covariance",
    "gradient_ascent_reference",
]

FloatArray = NDArray[np.float64]

#: Recompute ``A(u)⁻¹`` and all ``g_i`` from a fresh Cholesky factorisation this often.
_REFRESH = 100
#: Relative Kiefer–Wolfowitz gap at which the Newton polish on the support is attempted.
_POLISH_GAP = 0.1
#: Maximum Newton steps inside one polish round.
_MAX_NEWTON_STEPS = 300
#: Numerical rank from which the design is first solved by interior-point rounds on candidate
#: sets (``_interior_point_design``); below it Frank–Wolfe plus active-set Newton is faster.
_IP_MIN_RANK = 64
#: Multiplicative (Titterington) steps over all columns that rank the first candidate set.
_IP_MULTIPLICATIVE_STEPS = 5
#: The first candidate set holds ``_IP_START · k`` columns, each later round adds at most
#: ``_IP_ADD · k`` violators and keeps the columns within ``_IP_BAND`` of the constraint.
_IP_START = 4.0
_IP_ADD = 1.5
_IP_BAND = 3e-4
#: Interior-point stopping tolerance (duality measure and dual residual) and step caps.
_IP_TOL = 1e-10
#: Looser interior-point tolerance of the rounds before the set is final (no violators).
_IP_ROUND_TOL = 1e-5
#: Duality measure above which the interior-point Newton system is factorised in float32.
_IP_SINGLE = 1e-6
_IP_MAX_STEPS = 100
#: Gondzio (1996) centrality correctors per interior-point step and the fraction of the step
#: to the boundary taken.
_IP_CORRECTORS = 2
_IP_STEP = 0.999
_IP_MAX_ROUNDS = 30


# Thin LAPACK wrappers: the Newton and Frank–Wolfe loops call these on small matrices many times,
# where the argument checking of the high-level scipy/numpy front ends dominates the cost.


def _cholesky(A: FloatArray) -> FloatArray | None:
    """Lower Cholesky factor of ``A``, or ``None`` if ``A`` is not numerically positive definite."""
    L, info = sla.lapack.dpotrf(A, lower=1, clean=1)
    return L if info == 0 else None


def _lower_solve(L: FloatArray, B: FloatArray) -> FloatArray:
    """``L⁻¹ B`` for lower-triangular ``L`` (LAPACK ``dtrtrs``)."""
    X, info = sla.lapack.dtrtrs(L, B, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular triangular factor in the cloaking solver")
    return X


@dataclass(frozen=True, eq=False)
class NoiseCovariance:
    """Cloaking noise covariance ``M`` and its optimality certificate.

    Attributes
    ----------
    M:
        ``m × m`` positive semi-definite noise covariance ``basis @ M_k @ basis.T``, scaled so
        that ``max_i c_iᵀ M⁺ c_i`` equals ``max_mahalanobis`` (1 up to rounding).  A
        lazy property: formed only when asked for.
    basis:
        ``m × k`` orthonormal basis ``U_k`` of the retained column space of ``C``.
    projected:
        ``k × n`` projected columns ``a_i = U_kᵀ c_i``.  A release computes its mean as
        ``U_k (A r)`` with this very matrix, so the change caused by one label is
        ``t · U_k a_i``, whose Mahalanobis norm is what ``max_mahalanobis`` bounds.
    M_k:
        ``k × k`` positive-definite covariance in that basis, formed as ``chol_k @ chol_k.T``
        for inspection only: no release uses it.  It squares the scale of ``C`` and the
        condition of ``chol_k``, so it underflows to 0 for ``|C| ≲ 1e-154`` (test points far
        from the data), overflows for ``|C| ≳ 1e154`` (as ``lam`` does for the trace design),
        and its Mahalanobis values match ``max_mahalanobis`` only up to the rounding of forming
        it, which grows with ``cond(M_k)`` (stop-45 audit: ``4·10⁻⁴`` relative at
        ``cond(M_k) ≈ 10¹⁹``, against ``4·10⁻¹⁶`` from ``chol_k``).
    chol_k:
        Lower Cholesky factor of ``M_k``; draw noise as ``basis @ chol_k @ N(0, I_k)``.
        ``max_mahalanobis`` is computed from it exactly as a release whitens with it.
    lam:
        ``n`` weights ``λ_i ≥ 0`` with ``M_k = Σ_i λ_i (U_kᵀ c_i)(U_kᵀ c_i)ᵀ`` (Smith et al.
        2018, supplement: ``P⁻¹ = C Λ Cᵀ``), restricted to the basis.
    max_mahalanobis:
        Achieved ``max_i c_iᵀ M⁺ c_i`` on the projected columns ``U_k U_kᵀ c_i`` (what the
        caller releases).  The L2 sensitivity in the ``M``-whitened space is
        ``d · sqrt(max_mahalanobis)``.
    rank:
        Numerical rank ``k`` of ``C``.
    rank_tol:
        Relative singular-value tolerance used: singular values ``≤ rank_tol · σ_max`` are
        treated as zero.
    gap_bound:
        Certified upper bound on ``log|M| − log|M_opt|`` (log pseudo-determinants after both
        are scaled to ``max c_iᵀ M⁺ c_i = 1``): ``k · log(max_i g_i / k)``.
    iterations:
        Iterations used (Frank–Wolfe plus Newton steps, or gradient steps for the baseline).
    converged:
        Whether the requested tolerance (or the baseline's stopping rule) was met.
    design:
        ``"logdet"`` (least ``log|M|``, Smith et al. 2018) or ``"trace"`` (least ``tr M``,
        ``pm_dpgp.mechanisms.label.cloaking_trace``; then ``gap_bound`` is the certified
        relative excess ``tr M / tr M_opt − 1`` instead).
    """

    basis: FloatArray
    projected: FloatArray
    M_k: FloatArray
    chol_k: FloatArray
    lam: FloatArray
    max_mahalanobis: float
    rank: int
    rank_tol: float
    gap_bound: float
    iterations: int
    converged: bool
    design: Literal["logdet", "trace"] = "logdet"

    @functools.cached_property
    def M(self) -> FloatArray:
        """The ``m × m`` noise covariance ``U_k M_k U_kᵀ`` (exactly symmetric, read-only).

        Formed on first access only (``2 m²`` doubles): a release needs only
        ``basis`` and ``chol_k``.
        """
        M = self.basis @ self.M_k @ self.basis.T
        M = 0.5 * (M + M.T)
        M.setflags(write=False)
        return M

    def projector(self) -> FloatArray:
        """Return ``U_k U_kᵀ``, the orthogonal projector onto the noise-carrying subspace.

        The release is ``projector() @ C @ y`` plus noise in exact arithmetic: the directions
        outside ``span(U_k)`` receive no noise and so must not be released.  In floating point
        the rounding of that product differs between neighbours, also outside ``span(U_k)``
        (stop-47 audit: ``3·10⁵`` times the sensitivity at labels near ``10¹²``); add the noise
        to the whitened mean and map back afterwards, as ``docs/cloaking.md`` §7 and
        ``cloaked_release`` do.
        """
        return self.basis @ self.basis.T

    @property
    def log_det_k(self) -> float:
        """``log det M_k``: the log pseudo-determinant of ``M`` in the retained basis."""
        return float(2.0 * np.sum(np.log(np.diag(self.chol_k))))


# ----------------------------------------------------------------------------------------------
# Input handling and reduction to the k-dimensional whitened problem
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Reduced:
    """The cloaking problem restricted to the numerical column space of ``C``."""

    basis: FloatArray  # m × k, orthonormal
    sing: FloatArray  # k retained singular values (descending)
    proj: FloatArray  # k × n, U_kᵀ C  (the projected columns a_i)
    white: FloatArray  # k × n, S_k⁻¹ U_kᵀ C  (whitened columns b_i)
    reps: NDArray[np.intp]  # indices of the distinct, non-zero columns (up to sign)
    rank_tol: float


def _validate_matrix(C: ArrayLike) -> FloatArray:
    """Return ``C`` as a finite, non-empty, not-all-zero 2-D float64 array or raise ValueError."""
    arr = np.asarray(C)
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"C must be a real floating-point matrix, got dtype {arr.dtype}. "
            "Pass the cloaking matrix K_*f (K_ff + σ²I)⁻¹ as a float array."
        )
    arr = np.array(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"C must be 2-dimensional (test points × training points), got shape {arr.shape}."
        )
    if arr.size == 0:
        raise ValueError(f"C must be non-empty, got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError("C contains NaN or infinite entries; the cloaking matrix must be finite.")
    if not np.any(arr):
        raise ValueError(
            "C is all zero: the release does not depend on the training labels, so there is "
            "nothing to cloak (and no noise covariance to optimise)."
        )
    return arr


def _check_positive(value: float, name: str, upper: float = math.inf) -> float:
    v = real_or_nan(value, name)  # tol=True was 1 and "1e-9" parsed; None a TypeError (stop 40)
    if not (math.isfinite(v) and 0.0 < v < upper):
        bound = "" if upper == math.inf else f" and < {upper}"
        raise ValueError(f"{name} must be a finite number > 0{bound}, got {value!r}.")
    return v


def _check_max_iter(max_iter: int) -> int:
    return check_count(max_iter, "max_iter")


def _distinct_columns(C: FloatArray) -> NDArray[np.intp]:
    """Indices of the non-zero columns of ``C`` that are distinct up to sign (first occurrence).

    ``c`` and ``−c`` give the same constraint, duplicates give identical ones and zero columns
    give none, so the design problem only needs one representative of each.  Columns are put in
    a canonical sign, sorted by a deterministic linear key and compared exactly with their
    neighbours (``O(n m + n log n)``).  Exact duplicates that the key fails to make adjacent are
    merely kept, which is harmless: the solver copes with (near-)duplicate columns.
    """
    m, n = C.shape
    pivot = np.argmax(np.abs(C), axis=0)
    peak = C[pivot, np.arange(n)]
    nonzero = np.flatnonzero(peak != 0.0)
    cols = C if nonzero.size == n else C[:, nonzero]
    signs = np.sign(peak[nonzero])
    key = signs * np.sum(cols * np.sqrt(np.arange(2.0, m + 2.0))[:, None], axis=0)
    order = np.argsort(key, kind="stable")
    tied = np.flatnonzero(key[order[1:]] == key[order[:-1]])
    if tied.size == 0:
        return nonzero
    first, second = order[tied], order[tied + 1]
    repeat = np.zeros(order.size, dtype=bool)
    repeat[tied + 1] = np.all(
        cols[:, second] * signs[second] == cols[:, first] * signs[first], axis=0
    )
    return nonzero[np.sort(order[~repeat])]


class _DenseOperator(LinearCloakingOperator):
    """An explicit matrix ``C`` behind the operator interface of ``CloakingOperator``."""

    def __init__(self, C: FloatArray) -> None:
        self.C = C
        self.shape = C.shape

    def matmat(self, G: FloatArray) -> FloatArray:
        return self.C @ G

    def rmatmat(self, Q: FloatArray) -> FloatArray:
        return Q.T @ self.C

    def dense(self) -> FloatArray:
        return self.C


#: Columns of the first range-finder sketch (doubled until the residual test passes).
_SKETCH_START = 32
#: Gaussian probes of the a-posteriori residual estimate (Halko et al. 2011, §4.3).
_PROBES = 30
#: ``α·sqrt(2/π)`` with ``α = 2``: ``‖(I − QQᵀ)C‖₂ ≤ _PROBE_FACTOR · max_j ‖(I − QQᵀ)C ω_j‖``
#: with probability ``≥ 1 − α^-_PROBES = 1 − 2⁻³⁰`` (Halko, Martinsson & Tropp 2011, Lemma 4.1
#: and eq. 4.3, which states it for α = 10).
_PROBE_FACTOR = 2.0 * math.sqrt(2.0 / math.pi)
#: Accept the sketch when the residual is below this fraction of ``rank_tol · σ_1``.
_ACCEPT = 0.1


def _column_space(
    op: LinearCloakingOperator, rank_tol: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Basis ``U_k``, singular values ``σ_1 ≥ … ≥ σ_k`` and ``U_kᵀ C`` of the numerical range.

    Keeps the directions with ``σ_j > rank_tol · σ_1``.  Cloaking matrices of smooth kernels
    have rapidly decaying spectra, so a randomised range finder (Halko, Martinsson & Tropp
    2011, Alg. 4.2, blocked: ``ℓ`` = 32 columns, then blocks sized by extrapolating the
    residual, each re-orthogonalised after QR; fixed-seed Gaussian test matrices,
    so results are reproducible) builds an orthonormal ``Q`` until the residual
    ``ρ ≥ ‖C − QQᵀC‖₂`` is small: exactly ``‖C − QQᵀC‖_F`` for an explicit ``C``, and the
    probabilistic bound of Halko et al. (Lemma 4.1, eq. 4.3 with α = 2) from 30 extra
    Gaussian probes for a ``CloakingOperator`` (``C`` never formed; it holds with
    probability ``1 − 2⁻³⁰``).  The sketch is accepted when
    ``ρ ≤ max(0.1 rank_tol σ_1, ρ_round)``, where ``ρ_round = 10 √m u ‖QᵀC‖_F`` is the
    rounding level of the residual itself (the old test ``ρ ≤ min(10⁻² rank_tol, 10⁻¹²) σ_1``
    was below the rounding level of ``C`` and of the operator, so it always failed).  The SVD
    of the small ``QᵀC`` gives the basis, keeping
    ``σ_j(QᵀC) > rank_tol σ_1 − ρ``: by Weyl's inequality every discarded singular value of
    ``C`` is ``≤ rank_tol σ_1(C)`` (up to ``ρ_round``).  A full thin SVD of ``C`` is used once
    ``ℓ`` would exceed half of ``min(m, n)``.

    The sketch blocks apply ``op.range_matmat``, a factor ``R`` of ``C = R F`` with ``F``
    invertible, so ``range(R) = range(C)`` exactly: for the exact GP ``R = K_sf`` (``2mn``
    flops per column instead of ``2mn + 2n²``; ``C = K_sf A⁻¹``).  The probes and ``QᵀC``
    still go through ``C`` itself (the probes as ``R (F Ω)`` in the first product), so the
    acceptance test and the SVD are those of ``C``; only the test matrix of the sketch
    changes, to ``F⁻¹ G`` in effect, and with it ``U_k`` within the accuracy to which the
    weakest retained directions are determined (docs/cloaking.md §4).  Operators with
    ``sparse_sketch`` (the exact GP) take CountSketch blocks (``_count_sketch``) instead of
    Gaussian ones: ``m n`` additions per block instead of ``2 m n ℓ`` flops; the probes are
    then applied on their own.

    **Privacy does not depend on this test** (docs/cloaking.md §4): the release is
    ``U_k (U_kᵀ C r) + U_k L_k ξ`` for the basis returned here, and its sensitivity is
    computed from ``U_kᵀ c_i``, the exact change of that release, for whatever orthonormal
    ``U_k``.  The test only bounds the utility loss: the projected-out part of the mean,
    ``‖(I − U_kU_kᵀ) C r‖ ≤ (rank_tol σ_1 + ρ) ‖r‖``.
    """
    if isinstance(op, LowRankOperator):
        return _low_rank_column_space(op, rank_tol)
    m, n = op.shape
    rng = np.random.default_rng(20180409)
    probes = np.random.default_rng(19601215).standard_normal((n, _PROBES))
    exact = isinstance(op, _DenseOperator)
    rows: list[FloatArray] = []
    ell, new = 0, _SKETCH_START
    # all blocks side by side, so that every projection against the earlier blocks is one
    # matrix product (``_orthonormal_block``)
    Q = np.empty((m, 0))
    left = None  # (I − QQᵀ) C Ω, updated block by block (operator only)
    sigma_1 = 0.0  # σ_1(QᵀC) ≤ σ_1(C), non-decreasing in Q: a conservative scale
    frob2 = 0.0  # ‖QᵀC‖_F²
    history: list[tuple[int, float]] = []
    while 2 * (ell + new) <= min(m, n):
        if op.sparse_sketch:
            Y = np.ascontiguousarray(op.range_matmat(_count_sketch(rng, n, new)))
            if left is None:
                left = op.range_matmat(op.range_factor(probes))  # C Ω
        else:
            G = rng.standard_normal((n, new))
            if exact or left is not None:
                Y = op.range_matmat(G)
            else:  # first block and the probes in one product: [R G, R F Ω] = [R G, C Ω]
                Y = op.range_matmat(np.hstack((G, op.range_factor(probes))))
                Y, left = np.ascontiguousarray(Y[:, :new]), Y[:, new:]
        Qn = _orthonormal_block(Y, Q)
        Q = np.hstack((Q, Qn))
        rows.append(op.rmatmat(Qn))
        ell += new
        frob2 += float(rows[-1].ravel() @ rows[-1].ravel())
        if len(rows) == 1:
            sigma_1 = float(np.linalg.norm(rows[0], 2))
        if exact:
            gap = Q @ np.vstack(rows)
            gap -= op.C
            residual = math.sqrt(float(gap.ravel() @ gap.ravel()))  # ‖C − QQᵀC‖_F
            del gap
        else:
            left -= Qn @ (Qn.T @ left)
            residual = _PROBE_FACTOR * float(np.max(np.linalg.norm(left, axis=0)))
        rounding = 10.0 * math.sqrt(m) * np.finfo(float).eps * math.sqrt(frob2)
        target = max(_ACCEPT * rank_tol * sigma_1, rounding)
        if residual <= target:
            small = np.vstack(rows)
            U, s = _left_singular(small)
            k = int(np.count_nonzero(s > rank_tol * s[0] - residual))
            Uk = _canonical_signs_small(Q, U[:, :k])
            basis = np.ascontiguousarray(Q @ Uk)
            # U_kᵀ C: for an explicit C the product itself (O(m n k)); for the operator
            # U_sᵀ (QᵀC), which needs no further solve with the n×n factor
            return basis, s[:k].copy(), (basis.T @ op.C if exact else Uk.T @ small)
        history.append((ell, residual))
        new = _next_block(history, target, ell)
    C = op.dense()
    U, s, _ = np.linalg.svd(C, full_matrices=False)
    k = int(np.count_nonzero(s > rank_tol * s[0]))
    basis = canonical_signs(U[:, :k])
    return np.ascontiguousarray(basis), s[:k].copy(), basis.T @ C


def _count_sketch(rng: np.random.Generator, n: int, ell: int) -> sp.csr_matrix:
    """``n × ℓ`` CountSketch test matrix: one ``±1`` per row, in a uniformly random column.

    The sparse sign embedding of Clarkson & Woodruff (2013) and Tropp, Yurtsever, Udell &
    Cevher (2019, §3.3) with one non-zero per row *per block*; the blocks of the range finder
    together give several per row.  ``K_sf G`` then costs ``m n`` additions that read
    ``K_sf`` once, against ``2 m n ℓ`` flops for a Gaussian ``G``.
    """
    cols = rng.integers(0, ell, size=n)
    signs = rng.choice(np.array([-1.0, 1.0]), size=n)
    return sp.csr_matrix((signs, cols, np.arange(n + 1)), shape=(n, ell))


def _orthonormal_block(Y: FloatArray, Q: FloatArray) -> FloatArray:
    """Orthonormal basis of ``Y`` after removing ``span`` of the earlier orthonormal ``Q``.

    Block Gram–Schmidt twice (Giraud et al. 2005), Householder QR, then once more
    Gram–Schmidt and QR: when ``Y`` lies almost inside the earlier span (the sketch has
    passed the numerical rank) its remainder is rounding noise, ``R`` is ill-conditioned and
    the first QR factor loses orthogonality to the earlier blocks by ``u κ(R)`` (seen as
    ``1e-7`` at 1,024 columns); the second pass restores it to working precision.  ``Q`` is
    all earlier blocks side by side, so each pass is two matrix products (BLAS 3).  The last
    factorisation is of a nearly orthonormal ``Qn`` (``‖QnᵀQn − I‖_F ≤ 1/2``, checked), where
    Cholesky QR (``Qn L⁻ᵀ`` with ``L Lᵀ = QnᵀQn``) is as accurate as Householder QR: its loss
    of orthogonality is ``O(u κ(Qn)²) ≤ O(3u)`` (Stathopoulos & Wu 2002; Yamamoto et al. 2015,
    "CholeskyQR2"), at a quarter of the cost; otherwise Householder QR again.
    """
    if Q.shape[1] == 0:
        return np.linalg.qr(Y)[0]
    for _ in range(2):
        Y -= Q @ (Q.T @ Y)
    Qn = np.linalg.qr(Y)[0]
    Qn -= Q @ (Q.T @ Qn)
    gram = Qn.T @ Qn
    deviation = gram - np.eye(gram.shape[0])
    if float(np.sqrt(deviation.ravel() @ deviation.ravel())) <= 0.5:
        L = _cholesky(gram)  # QnᵀQn = L Lᵀ, so Qn L⁻ᵀ = (L⁻¹ Qnᵀ)ᵀ is orthonormal
        if L is not None:
            return np.ascontiguousarray(_lower_solve(L, Qn.T).T)
    return np.linalg.qr(Qn)[0]


def _left_singular(small: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Left singular vectors and singular values of a wide ``ℓ × n`` matrix (``ℓ ≤ n``).

    ``smallᵀ = Q_B R`` (Householder QR) gives ``small = Rᵀ Q_Bᵀ``, so the SVD of the
    ``ℓ × ℓ`` factor ``Rᵀ = U S Wᵀ`` is ``small = U S (Q_B W)ᵀ`` (Golub & Van Loan 2013, §5.4.5,
    "R-SVD"): the same ``U`` and ``S`` without forming the ``ℓ × n`` right factor.
    """
    R = sla.qr(small.T, mode="r", check_finite=False)[0][: small.shape[0]]
    U, s, _ = np.linalg.svd(R.T)
    return U, s


def _next_block(history: list[tuple[int, float]], target: float, ell: int) -> int:
    """Columns to add to the sketch: extrapolate the residual's decay, at most doubling ``ℓ``.

    The residual of a smooth kernel's sketch decays about geometrically in ``ℓ``, so the
    ``ℓ`` that reaches ``target`` is extrapolated from the last two sketches (log-linear),
    with 10 % plus 16 columns of margin.  The result only decides how much work the next
    sketch does; the acceptance test itself is unchanged.
    """
    if len(history) < 2:
        return ell
    (l0, r0), (l1, r1) = history[-2], history[-1]
    if not (0.0 < r1 < r0 and target > 0.0):
        return ell
    slope = (math.log(r1) - math.log(r0)) / (l1 - l0)
    needed = math.log(target / r1) / slope  # > 0 columns, since r1 > target
    return int(min(ell, max(16, math.ceil(1.1 * needed) + 16)))


def _low_rank_column_space(
    op: LowRankOperator, rank_tol: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Exact numerical range of ``C = A B`` (``A`` ``m × r``, ``B`` ``r × n``, small ``r``).

    With thin QR factorisations ``A = Q_A R_A`` and ``Bᵀ = Q_B R_B`` and the SVD of the
    ``r × r`` core ``R_A R_Bᵀ = U S Wᵀ``, ``C = (Q_A U) S (Q_B W)ᵀ`` is an SVD of ``C``
    (Golub & Van Loan 2013, §2.4 and §5.2), computed in ``O((m + n) r²)`` with no ``m × n``
    matrix and no randomised range finder.  Keeps ``σ_j > rank_tol · σ_1`` as
    ``_column_space`` does; the basis signs follow ``canonical_signs``
    (``pm_dpgp.gp.linalg``), and ``U_kᵀ C = S_k (Q_B W_k)ᵀ``.
    """
    Qa, Ra = np.linalg.qr(op.left)
    Qb, Rb = np.linalg.qr(op.right.T)
    U, s, Wt = np.linalg.svd(Ra @ Rb.T)
    if not (s.size and s[0] > 0.0 and np.isfinite(s[0])):
        raise ValueError("C is zero or not finite: there is nothing to cloak.")
    k = int(np.count_nonzero(s > rank_tol * s[0]))
    basis = canonical_signs(Qa @ U[:, :k])
    signs = np.sign(np.sum(basis * (Qa @ U[:, :k]), axis=0))
    proj = (s[:k, None] * signs[:, None]) * (Qb @ Wt[:k].T).T
    return np.ascontiguousarray(basis), s[:k].copy(), proj


def _canonical_signs_small(Q: FloatArray, Us: FloatArray) -> FloatArray:
    """``Us`` with column signs such that ``Q Us`` has the signs of ``canonical_signs``."""
    w = sign_reference(Q.shape[0])
    return Us * np.where((w @ Q) @ Us < 0.0, -1.0, 1.0)


def _reduce(C: FloatArray | LinearCloakingOperator, rank_tol: float) -> _Reduced:
    """Basis of the numerical column space of ``C`` and the projected / whitened columns."""
    op = C if isinstance(C, LinearCloakingOperator) else _DenseOperator(C)
    basis, sing, proj = _column_space(op, rank_tol)
    if sing.size == 0:  # e.g. test points so far from the data that every kernel value is 0
        raise ValueError(
            "C is zero at this precision (numerical rank 0): the release does not depend on "
            "the training labels at these test points, so there is nothing to cloak; move the "
            "test points nearer the data (or use the prior, which needs no privacy)."
        )
    white = proj / sing[:, None]
    return _Reduced(basis, sing, proj, white, _distinct_columns(proj), rank_tol)


# ----------------------------------------------------------------------------------------------
# D-optimal design in the whitened basis
# ----------------------------------------------------------------------------------------------


def _gains(Bt: FloatArray, u: FloatArray) -> tuple[FloatArray, FloatArray] | None:
    """Return ``(g, L)`` with ``g_i = b_iᵀ A(u)⁻¹ b_i`` and ``L`` = chol(A(u)), or ``None``.

    ``Bt`` is ``n × k`` (rows are the whitened columns ``b_i``).  Cost ``O(n k²)``.
    """
    support = u > 0.0
    Bs = Bt[support]
    L = _cholesky((Bs.T * u[support]) @ Bs)
    if L is None:
        return None
    W = _lower_solve(L, Bt.T)
    return np.einsum("ij,ij->j", W, W), L


def _initial_design(Bt: FloatArray, single: bool = False) -> FloatArray:
    """Uniform weights on ``k`` columns chosen by column-pivoted QR (Kumar & Yildirim 2005).

    Pivoted QR greedily picks the column with the largest residual norm after projecting out
    the columns already chosen: a deterministic variant of the Kumar–Yildirim initialisation
    that yields ``k`` linearly independent points, so ``A(u)`` is invertible.  ``single``
    pivots in float32 (half the time; the interior point only adds these columns to a larger
    candidate set).
    """
    n, k = Bt.shape
    geqp3 = sla.lapack.sgeqp3 if single else sla.lapack.dgeqp3
    _, jpvt, _, _, info = geqp3(np.array(Bt.T, order="F", dtype=np.float32 if single else None))
    if info != 0:
        raise np.linalg.LinAlgError("pivoted QR failed in the cloaking solver")
    u = np.zeros(n)
    u[jpvt[:k] - 1] = 1.0 / k  # LAPACK pivots are 1-based
    return u


@dataclass
class _FWState:
    """Frank–Wolfe state: design ``u``, ``A(u)⁻¹``, ``g_i = b_iᵀ A(u)⁻¹ b_i``, ``log det A(u)``."""

    u: FloatArray
    Ainv: FloatArray
    g: FloatArray
    logdet: float


def _fw_state(Bt: FloatArray, u: FloatArray) -> _FWState:
    """Build the Frank–Wolfe state from scratch (Cholesky of ``A(u)``)."""
    res = _gains(Bt, u)
    if res is None:
        raise np.linalg.LinAlgError("singular design in the cloaking solver")
    g, L = res
    Linv = _lower_solve(L, np.eye(L.shape[0]))
    logdet = float(2.0 * np.sum(np.log(np.diag(L))))
    return _FWState(u=u, Ainv=Linv.T @ Linv, g=g, logdet=logdet)


def _relative_gap(g: FloatArray, k: int) -> float:
    """Relative Kiefer–Wolfowitz gap ``max_i g_i / k − 1``."""
    return float(np.max(g)) / k - 1.0


def _frank_wolfe(
    Bt: FloatArray, state: _FWState, stop_gap: float, max_steps: int
) -> tuple[_FWState, int]:
    """Fedorov–Wynn / Wolfe–Atwood steps with the Todd–Yildirim line search.

    Stops when the relative gap ``max g / k − 1 ≤ stop_gap`` (confirmed on a fresh
    factorisation) or after ``max_steps`` steps.

    A step moves ``u ← (1 − τ) u + τ e_j``.  The exact line search of
    ``log det A`` gives ``τ = (g_j − k) / (k (g_j − 1))`` (Atwood 1973; Todd & Yildirim 2007);
    ``τ > 0`` is a toward step to the most violated point, ``τ < 0`` an away step from the
    least useful support point, clipped at ``−u_j / (1 − u_j)`` (a drop step).  With
    ``w = A⁻¹ b_j`` and ``D = 1 − τ + τ g_j`` the Sherman–Morrison update is

        A⁻¹ ← (A⁻¹ − τ w wᵀ / D) / (1 − τ),   g ← (g − τ (Bᵀ w)² / D) / (1 − τ),

    and ``log det A ← log det A + (k − 1) log(1 − τ) + log D``, so each step costs
    ``O(n k + k²)``.
    """
    n, k = Bt.shape
    u, Ainv, g, logdet = state.u.copy(), state.Ainv, state.g, state.logdet
    steps = 0
    since_refresh = 0
    while steps < max_steps:
        j_plus = int(np.argmax(g))
        eps_plus = g[j_plus] / k - 1.0
        if eps_plus <= stop_gap:
            if since_refresh == 0:
                break
            state = _fw_state(Bt, u)
            Ainv, g, logdet, since_refresh = state.Ainv, state.g, state.logdet, 0
            continue
        g_support = np.where(u > 0.0, g, np.inf)
        j_minus = int(np.argmin(g_support))
        eps_minus = 1.0 - g_support[j_minus] / k
        if eps_plus >= eps_minus:
            j = j_plus
            gj = g[j]
            tau = (gj - k) / (k * (gj - 1.0))
            drop = False
        else:
            j = j_minus
            gj = g[j]
            tau_drop = -u[j] / (1.0 - u[j])
            tau = tau_drop if gj <= 1.0 else max((gj - k) / (k * (gj - 1.0)), tau_drop)
            drop = tau == tau_drop
        denom = 1.0 - tau + tau * gj  # = g_j / k for a line-search step (> 0)
        u *= 1.0 - tau
        u[j] = 0.0 if drop else u[j] + tau
        steps += 1
        since_refresh += 1
        if since_refresh >= _REFRESH or denom < 1e-8:
            state = _fw_state(Bt, u)
            Ainv, g, logdet, since_refresh = state.Ainv, state.g, state.logdet, 0
            continue
        w = Ainv @ Bt[j]
        v = Bt @ w
        g = (g - (tau / denom) * v * v) / (1.0 - tau)
        Ainv = (Ainv - (tau / denom) * np.outer(w, w)) / (1.0 - tau)
        logdet += (k - 1) * math.log1p(-tau) + math.log(denom)
    return _FWState(u=u, Ainv=Ainv, g=g, logdet=logdet), steps


@dataclass(frozen=True, eq=False)
class _NewtonPoint:
    """The dual at ``λ``: value ``φ``, ``W = L⁻¹ B_s`` (``A(λ) = L Lᵀ``), gradient, KKT residual."""

    lam: FloatArray
    value: float
    W: FloatArray
    grad: FloatArray
    residual: float


def _newton_point(Bs: FloatArray, lam: FloatArray) -> _NewtonPoint | None:
    """Evaluate the dual ``φ(λ) = log det A(λ) − Σ λ_i`` and its gradient, or ``None``.

    ``A(λ) = Σ λ_i b_i b_iᵀ`` over the columns of ``Bs`` (``k × s``); ``γ_i = b_iᵀ A⁻¹ b_i − 1``
    and the KKT residual is ``‖λ − max(0, λ + γ)‖_∞``.  Cost ``O(k² s + k³)``; written with
    direct LAPACK calls because it runs once per Newton step on small matrices.
    """
    L, info = sla.lapack.dpotrf((Bs * lam) @ Bs.T, lower=1)
    if info != 0:
        return None
    W, info = sla.lapack.dtrtrs(L, Bs, lower=1)  # reads the lower triangle only
    if info != 0:
        return None
    grad = np.einsum("ij,ij->j", W, W)
    grad -= 1.0
    value = 2.0 * float(np.log(L.diagonal()).sum()) - float(lam.sum())
    kkt = np.maximum(lam + grad, 0.0)
    kkt -= lam
    residual = float(np.abs(kkt).max())
    return _NewtonPoint(lam=lam, value=value, W=W, grad=grad, residual=residual)


def _backtracking_trials(
    lam: FloatArray, idx: NDArray[np.intp], direction: FloatArray
) -> Iterator[FloatArray]:
    """Trial weights ``λ + t·d`` on ``idx`` for a backtracking search that keeps ``λ ≥ 0``.

    ``t`` starts at ``min(1, t_max)`` (ratio test: ``t_max`` is the largest step keeping every
    shrinking weight non-negative; the blocking weight is set to exactly 0 at ``t = t_max``)
    and halves down to ``1e-12 · min(1, t_max)``.  Shared by the active-set Newton methods of
    the log det and the trace designs.
    """
    shrinking = direction < 0.0
    if shrinking.any():
        ratios = lam[idx[shrinking]] / -direction[shrinking]
        pick = int(np.argmin(ratios))
        t_bound = float(ratios[pick])
        blocking = int(idx[np.flatnonzero(shrinking)[pick]])
    else:
        t_bound, blocking = np.inf, -1
    t = min(1.0, t_bound)
    while t > 1e-12 * min(1.0, t_bound):
        trial = lam.copy()
        trial[idx] += t * direction
        if t == t_bound:
            trial[blocking] = 0.0
        np.maximum(trial, 0.0, out=trial)
        yield trial
        t *= 0.5


def _active_set_newton(Bs: FloatArray, lam: FloatArray, max_steps: int) -> tuple[FloatArray, int]:
    """Maximise the dual ``φ(λ)`` over ``λ ≥ 0`` on a candidate set by active-set Newton.

    ``Bs`` is ``k × s`` (candidate columns), ``lam ≥ 0`` a start with ``A(λ) ≻ 0``.  With
    ``G = B_sᵀ A(λ)⁻¹ B_s`` the gradient is ``γ = diag(G) − 1`` and the Hessian ``−G ∘ G``
    (negative semi-definite by the Schur product theorem), so ``φ`` is concave.  The method
    follows Lawson & Hanson's NNLS active-set scheme, adapted to a concave objective.  The
    free set ``F`` holds the positive weights and, if the largest KKT violation is a zero weight
    with ``γ_j > 0``, that entering weight ``j``.  A Newton step ``(G∘G + μI)⁻¹ γ`` is taken on
    ``F`` (only ``G_FF`` is formed), up to the first weight that reaches zero, which is then
    dropped.  ``G ∘ G`` is numerically singular when columns nearly coincide; the tiny ``μ``
    turns such flat directions into long steps that end by dropping a redundant weight, so an
    entering column that nearly duplicates a support column swaps with it in one step.  If the
    Newton step would not increase the entering weight, it enters by an exact coordinate step
    instead: ``φ(λ + t e_j) − φ(λ) = log(1 + t g_j) − t`` is maximised at ``t = 1 − 1/g_j``.

    Newton steps are backtracked until ``φ(λ(t)) ≥ φ(λ) + ¼ γᵀ(λ(t) − λ)`` (Armijo); once the
    predicted increase is below the rounding error of ``φ`` a step is accepted when it reduces
    the KKT residual ``‖λ − max(0, λ + γ)‖_∞`` instead.  Stops when that residual is below
    ``1e-13``, after ``max_steps`` steps, or when no step is accepted.  Each step costs
    ``O(k² s + k |F|² + |F|³)``.

    Returns the final ``λ`` and the number of steps taken.
    """
    point = _newton_point(Bs, lam)
    if point is None:
        return lam, 0
    rounding = 1e3 * np.finfo(float).eps * max(1.0, abs(point.value))
    steps = 0
    while steps < max_steps and point.residual > 1e-13:
        lam, grad = point.lam, point.grad
        steps += 1
        free = lam > 0.0
        outside = grad.copy()
        outside[free] = -np.inf
        j = int(outside.argmax())
        enter = bool(outside[j] > 0.0 and outside[j] >= np.abs(grad[free]).max())
        if enter:
            free[j] = True
        idx = np.flatnonzero(free)
        Wf = point.W[:, idx]
        H = Wf.T @ Wf
        H *= H
        diag = H.diagonal()
        H.flat[:: idx.size + 1] += 1e-12 * diag.max()
        _, step, info = sla.lapack.dposv(H, grad[idx], lower=1)
        if info != 0:
            vals, vecs = np.linalg.eigh(H)
            keep = vals > 1e-14 * vals[-1]
            step = vecs[:, keep] @ ((vecs[:, keep].T @ grad[idx]) / vals[keep])
        if enter and step[np.searchsorted(idx, j)] <= 0.0:
            trial = lam.copy()
            trial[j] = 1.0 - 1.0 / (1.0 + grad[j])
            new = _newton_point(Bs, trial)
            if new is None:
                break
            point = new
            continue
        accepted = None
        for trial in _backtracking_trials(lam, idx, step):
            predicted = float(grad @ (trial - lam))
            new = _newton_point(Bs, trial) if predicted > 0.0 else None
            if new is not None and (
                new.value >= point.value + 0.25 * predicted
                or (predicted < rounding and new.residual < point.residual)
            ):
                accepted = new
                break
        if accepted is None:
            break
        point = accepted
    return point.lam, steps


def _multiplicative_design(Bt: FloatArray, steps: int) -> tuple[FloatArray, FloatArray] | None:
    """``steps`` multiplicative updates ``u_i ← u_i g_i(u) / k`` from the uniform design.

    Titterington (1976); Silvey, Titterington & Torsney (1978): monotone in ``log det A(u)``,
    ``O(n k²)`` per step.  Used only to rank the columns for the first interior-point
    candidate set, so a handful of steps suffices, computed in float32 (an error ``~10⁻⁶``
    in ``g`` does not matter for a ranking; half the time of float64).  Returns ``u`` and
    ``g(u)``, or ``None`` if ``A(u)`` is singular (in float64).
    """
    n, k = Bt.shape
    for dtype in (np.float32, np.float64):  # float64 only if float32 finds A(u) singular
        B = np.ascontiguousarray(Bt.T, dtype=dtype)
        u = np.full(n, 1.0 / n)
        for step in range(steps + 1):
            res = _gains_low(B, u, B)
            if res is None:
                break
            g = res[1]
            if step == steps:
                return u, g
            u = u * g / k
            u /= u.sum()
    return None


def _max_step(x: FloatArray, dx: FloatArray) -> float:
    """Largest ``α ≤ 1`` with ``x + α dx ≥ 0`` (``x > 0``)."""
    neg = dx < 0.0
    return min(1.0, float(np.min(-x[neg] / dx[neg]))) if neg.any() else 1.0


def _ip_factor(W: FloatArray, diag: FloatArray, single: bool) -> NDArray[np.floating] | None:
    """Upper Cholesky factor of ``(WᵀW) ∘ (WᵀW) + diag(diag)``, or ``None`` if not PD.

    With ``single`` the Gram matrix and the factorisation are computed in float32 (half the
    time of the two ``O(k s²)`` and ``O(s³)`` kernels); the interior point uses it only while
    its duality measure is large, where a direction accurate to ``~10⁻⁶`` suffices (every
    residual is evaluated in float64, so the iteration corrects the error), and falls back
    to float64 if the float32 factorisation fails.
    """
    s = W.shape[1]
    if single:
        H32 = sla.blas.ssyrk(1.0, W.astype(np.float32, copy=False), trans=1, lower=0)
        H32 *= H32
        H32.flat[:: s + 1] += diag.astype(np.float32)
        F32, info = sla.lapack.spotrf(H32, lower=0, clean=0)
        if info == 0 and np.all(np.isfinite(F32.diagonal())):
            return F32
    W = W.astype(np.float64, copy=False)
    H = sla.blas.dsyrk(1.0, W, trans=1, lower=0)  # upper triangle of G = WᵀW
    H *= H
    H.flat[:: s + 1] += diag
    F, info = sla.lapack.dpotrf(H, lower=0, clean=0)
    return F if info == 0 else None


#: Solves ``(H + Λ⁻¹Z) Δλ = rhs`` with a factorisation of the interior-point Newton matrix.
_Solve = Callable[[FloatArray], FloatArray]
#: ``factor(diag, single)``: a ``_Solve`` for ``H + diag(diag)``, or ``None`` if not PD.
_Factor = Callable[[FloatArray, bool], "_Solve | None"]
#: ``point(Bs, λ, z, single)``: the dual residual ``r_d = g − 1 + z`` on the columns of ``Bs``
#: and the factoriser of the Newton matrix, or ``None`` if ``A(λ)`` is singular.
_Point = Callable[[FloatArray, FloatArray, FloatArray, bool], "tuple[FloatArray, _Factor] | None"]


def _ip_direction(
    solve: _Solve, lam: FloatArray, z: FloatArray, r_d: FloatArray, r_c: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``(Δλ, Δz)`` from a factorisation ``solve`` of ``H + Λ⁻¹Z`` (``_interior_point``)."""
    d_lam = solve(r_d + r_c / lam)
    return d_lam, (r_c - z * d_lam) / lam


def _gains_low(
    Bs: NDArray[np.floating], lam: FloatArray, columns: NDArray[np.floating]
) -> tuple[NDArray[np.floating], FloatArray] | None:
    """``(W, g)``: ``W = L⁻¹ columns`` with ``A(λ) = Σ λ_i b_i b_iᵀ = L Lᵀ`` over ``Bs``.

    ``g_j = ‖W_j‖²`` in float64.  Computed in the precision of ``Bs`` and ``columns`` (float32
    where an error ``~10⁻⁶`` in ``g`` is harmless: rankings and the interior point's large-
    ``μ`` phase); ``None`` if ``A(λ)`` is not numerically positive definite.

    ``W`` is ``L⁻¹`` (LAPACK ``trtri``, ``k³/3`` flops) times ``columns`` (BLAS ``trmm``)
    rather than a triangular solve: the same ``k²·s`` flops, but ``trmm`` runs 1.5–1.8× faster
    than ``trsm`` here (OpenBLAS, one thread, ``k = 313``, ``s`` = 1,300–3,000).  Both have a
    forward error of order ``u·κ(L)`` (Higham 2002, §8.1 and §14.2); on the ``k = 313``
    benchmark problem the design has the same support and ``A(u)`` to ``1.1·10⁻¹⁵`` relative
    (docs/cloaking.md §6, stop 24).  Only the solver's path uses these gains: the released
    ``M`` is scaled and certified by ``_assemble`` from ``_gains`` (triangular solves), so
    privacy never depends on this function's accuracy.
    """
    potrf = sla.lapack.spotrf if Bs.dtype == np.float32 else sla.lapack.dpotrf
    A = sla.blas.get_blas_funcs("syrk", (Bs,))(1.0, Bs * np.sqrt(lam).astype(Bs.dtype), lower=1)
    L, info = potrf(A, lower=1, clean=1)
    if info != 0 or not np.all(np.isfinite(L.diagonal())):
        return None
    Linv, info = sla.lapack.get_lapack_funcs("trtri", (L,))(L, lower=1)
    if info != 0:
        return None
    W = sla.blas.get_blas_funcs("trmm", (Linv,))(1.0, Linv, columns, lower=1)
    return W, np.einsum("ij,ij->j", W, W).astype(np.float64)


def _ip_residual(
    Bs: NDArray[np.floating], lam: FloatArray, z: FloatArray
) -> tuple[NDArray[np.floating], FloatArray] | None:
    """``(W, r_d)`` with ``W = L⁻¹ B_s`` (``A(λ) = L Lᵀ``) and ``r_d = g − 1 + z``, or ``None``.

    Computed in the precision of ``Bs``: float32 while the interior point's duality measure
    is above ``_IP_SINGLE`` (``g`` then carries an error ``~10⁻⁶``, well below ``μ``, which
    the next float64 residuals correct, as for ``_ip_factor``), float64 otherwise.
    """
    res = _gains_low(Bs, lam, Bs)
    if res is None:
        return None
    W, r_d = res
    r_d += z - 1.0
    return W, r_d


def _logdet_point(
    Bs: FloatArray, lam: FloatArray, z: FloatArray, single: bool
) -> tuple[FloatArray, _Factor] | None:
    """The log det dual's ``r_d = g − 1 + z`` (``_ip_residual``, float32 with ``single``) on
    the columns of ``Bs`` and the factoriser of ``G ∘ G + diag`` (``_ip_factor``), or ``None``."""
    res = _ip_residual(Bs.astype(np.float32) if single else Bs, lam, z)
    if res is None:
        return None
    W, r_d = res

    def factor(diag: FloatArray, single: bool) -> _Solve | None:
        F = _ip_factor(W, diag, single)
        if F is None:
            return None
        if F.dtype == np.float32:
            return lambda rhs: sla.lapack.spotrs(F, rhs.astype(np.float32), lower=0)[0].astype(
                np.float64
            )
        return lambda rhs: sla.lapack.dpotrs(F, rhs, lower=0)[0]

    return r_d, factor


def _interior_point(
    Bs: FloatArray,
    lam: FloatArray,
    z: FloatArray,
    max_steps: int,
    tol: float = _IP_TOL,
    point: _Point = _logdet_point,
    single_residuals: bool = True,
) -> tuple[FloatArray, FloatArray, int, bool]:
    """Primal–dual interior-point method for the dual ``max φ(λ)`` over ``λ ≥ 0`` on ``Bs``.

    ``Bs`` is ``k × s`` (candidate columns spanning ``R^k``), ``lam > 0`` and ``z > 0`` a
    start.  The KKT conditions of ``max φ(λ) = log det A(λ) − Σ λ_i``, ``λ ≥ 0``
    (``A(λ) = Σ λ_i b_i b_iᵀ``) with multipliers ``z`` are

        g_i(λ) − 1 + z_i = 0,    λ_i z_i = 0,    λ, z ≥ 0,     g_i = b_iᵀ A(λ)⁻¹ b_i,

    (``z_i = 1 − g_i`` is the slack of the ellipsoid constraint ``c_iᵀ M⁻¹ c_i ≤ 1``).  The
    Jacobian of ``g`` is ``−H`` with ``H = G ∘ G``, ``G = B_sᵀ A⁻¹ B_s`` (positive
    semi-definite by the Schur product theorem), so the Newton system of the perturbed
    conditions ``λ_i z_i = σμ`` reduces to the ``s × s`` positive-definite system

        (H + Λ⁻¹ Z) Δλ = r_d + Λ⁻¹ r_c,    Δz = Λ⁻¹ (r_c − Z Δλ),

    with ``r_d = g − 1 + z`` and ``r_c = σμ1 − Λz``; the right-hand side is the gradient of the
    log-barrier function ``φ(λ) + σμ Σ log λ_i``, so ``Δλ`` is an ascent direction for it.
    Mehrotra's (1992) predictor–corrector chooses ``σ = (μ_aff / μ)³`` and reuses the
    Cholesky factor of ``H + Λ⁻¹Z`` for both solves (Nocedal & Wright 2006, §14.2 and §19.3;
    for the minimum-volume ellipsoid, Sun & Freund 2004).  Up to ``_IP_CORRECTORS`` Gondzio
    (1996) centrality correctors follow, one more solve with the same factor each: the
    complementarity products at the enlarged step ``α̃ = min(1, 1.5α + 0.1)`` are projected
    on ``[0.1σμ, 10σμ]`` and the correction is kept if the step grows by ``0.1(α̃ − α)``.
    Both variables take the step ``_IP_STEP·`` the largest that keeps them positive.  Each
    step costs ``O(k² s + k s² + s³)``; while ``μ > _IP_SINGLE`` the residual
    (``_ip_residual``) and the factorisation (``_ip_factor``) are float32, and convergence
    is only declared on float64 residuals.  Stops when ``μ = λᵀz / s`` and ``‖r_d‖_∞`` are
    below ``tol``; returns ``(λ, z, steps, converged)`` (``converged`` is ``False`` after
    ``max_steps`` steps, on a vanishing step or a failed factorisation).

    ``point(Bs, λ, z, single)`` supplies ``r_d`` (in float32 with ``single``) and the
    factorisation of ``H + diag``: the default is the log det dual above; any concave dual
    ``ψ(λ) − Σλ`` with gradient ``g − 1`` and Hessian ``−H`` fits (the trace design's
    ``φ_{1/2}`` dual, ``cloaking_trace``).  ``single_residuals=False`` asks ``point`` for
    float64 residuals only (its factorisation may still be float32 while ``μ > _IP_SINGLE``).
    """
    k, s = Bs.shape
    single = single_residuals and float(lam @ z) / s > _IP_SINGLE
    step = 0
    while True:
        evaluated = point(Bs, lam, z, single)
        if evaluated is None:
            if single:  # float32 factorisation failed: redo in float64
                single = False
                continue
            return lam, z, step, False
        r_d, factor = evaluated
        mu = float(lam @ z) / s
        if mu < tol and float(np.abs(r_d).max()) < tol:
            if single:  # confirm convergence on float64 residuals
                single = False
                continue
            return lam, z, step, True
        if step == max_steps:
            break
        solve = factor(z / lam, mu > _IP_SINGLE)
        if solve is None:
            return lam, z, step, False
        single = single_residuals and mu > _IP_SINGLE
        d_lam, d_z = _ip_direction(solve, lam, z, r_d, -lam * z)  # predictor (affine scaling)
        mu_aff = float((lam + _max_step(lam, d_lam) * d_lam) @ (z + _max_step(z, d_z) * d_z))
        sigma = (mu_aff / s / mu) ** 3
        r_c = sigma * mu - lam * z - d_lam * d_z
        d_lam, d_z = _ip_direction(solve, lam, z, r_d, r_c)  # corrector
        alpha = min(1.0, _max_step(lam, d_lam), _max_step(z, d_z))
        for _ in range(_IP_CORRECTORS):  # Gondzio (1996) centrality correctors
            if alpha >= 1.0:
                break
            target = min(1.0, 1.5 * alpha + 0.1)
            v = (lam + target * d_lam) * (z + target * d_z)
            mu_t = sigma * mu
            corr = np.clip(v, 0.1 * mu_t, 10.0 * mu_t) - v
            np.maximum(corr, -10.0 * mu_t, out=corr)
            c_lam, c_z = _ip_direction(solve, lam, z, np.zeros(s), corr)
            n_lam, n_z = d_lam + c_lam, d_z + c_z
            a_new = min(1.0, _max_step(lam, n_lam), _max_step(z, n_z))
            if a_new < alpha + 0.1 * (target - alpha):
                break
            d_lam, d_z, alpha = n_lam, n_z, a_new
        alpha = min(1.0, _IP_STEP * alpha)
        step += 1
        if alpha < 1e-10:
            return lam, z, step, False
        lam = lam + alpha * d_lam
        z = z + alpha * d_z
    return lam, z, max_steps, False


@dataclass(frozen=True)
class _Dual:
    """A concave design dual ``ψ(λ) − Σλ`` (``λ ≥ 0``, gradient ``g − 1``) for the rounds.

    ``point``: the interior point's residual and Newton factoriser on candidate columns
    (``_Point``); ``gains``: ``(B, S, λ) ↦`` the gains of every column of ``B`` (``k × n``,
    float32 or float64) for the weights ``λ`` on the columns ``S``, or ``None`` if ``A(λ)`` is
    singular; ``start``: ``Bt ↦ (λ, ranking, Σλ)``, a cheap start ranking all columns;
    ``polish``: ``(Bs, λ, steps) ↦ (λ, steps taken)``, active-set Newton from an identified
    support, or ``None`` if that support's ``A(λ)`` is singular (``polish=None``: keep the
    interior point); ``first``: the first candidate set holds the ``first · k`` best-ranked
    columns; ``single``: float32 where only a start or a candidate choice depends on it (the
    interior point's residuals while ``μ > _IP_SINGLE``, the pivoted QR of the first set,
    the restart multipliers ``z`` and the violators of a non-final round; float64 decides).
    """

    point: _Point
    gains: Callable[[NDArray[np.floating], NDArray[np.intp], FloatArray], FloatArray | None]
    start: Callable[[FloatArray], tuple[FloatArray, FloatArray, float] | None]
    polish: Callable[[FloatArray, FloatArray, int], tuple[FloatArray, int] | None] | None
    first: float = _IP_START
    single: bool = False


def _interior_point_rounds(
    Bt: FloatArray, max_steps: int, dual: _Dual
) -> tuple[tuple[NDArray[np.intp], FloatArray] | None, int]:
    """``((S, λ_S), steps)``: weights on the columns ``S`` from interior-point rounds on
    candidate sets, or ``(None, steps)`` on failure.

    See ``_interior_point_design``; ``dual`` selects the objective (log det or trace).
    """
    n, k = Bt.shape
    started = dual.start(Bt)
    if started is None:
        return None, 0
    lam_all, g, total = started
    first = np.argsort(-g, kind="stable")[: min(n, int(dual.first * k))]
    S = np.union1d(np.flatnonzero(_initial_design(Bt, single=dual.single)), first)
    lam = np.maximum(lam_all[S], 1e-3 * total / S.size)
    steps = 0
    restart, final = True, False
    Bt32 = Bt.T.astype(np.float32) if dual.single else None
    for _ in range(_IP_MAX_ROUNDS):
        Bs = np.ascontiguousarray(Bt[S].T)
        if restart:  # z from the new weights' gains (a start: float32 unless singular there)
            zero = np.zeros(S.size)
            res = dual.point(Bs, lam, zero, True) if dual.single else None
            if res is None:
                res = dual.point(Bs, lam, zero, False)
                if res is None:
                    return None, steps
            z = np.maximum(-res[0], 0.0) + 0.1  # r_d = g − 1 at z = 0
        lam, z, taken, ok = _interior_point(
            Bs,
            lam,
            z,
            min(_IP_MAX_STEPS, max_steps - steps),
            _IP_TOL if final else _IP_ROUND_TOL,
            dual.point,
            dual.single,
        )
        steps += taken
        if not ok:
            return None, steps
        outside = np.ones(n, dtype=bool)
        outside[S] = False
        # g_i of the round's optimum for every column: float32 to pick the next set, float64
        # to decide that there is no violator (the set is final)
        for B_all in (Bt32, Bt.T) if Bt32 is not None and not final else (Bt.T,):
            g_all = dual.gains(B_all, S, lam)
            if g_all is None:
                return None, steps
            viol = np.flatnonzero(outside & (g_all > 1.0 + _IP_TOL))
            if viol.size:
                break
        if viol.size == 0:
            if final:
                break
            restart, final = False, True  # same set: continue to the tight tolerance
            continue
        if viol.size > _IP_ADD * k:
            viol = viol[np.argsort(-g_all[viol], kind="stable")[: int(_IP_ADD * k)]]
        kept = (lam > z) | (g_all[S] > 1.0 - _IP_BAND)
        floor = 0.1 * float(lam.mean())
        weights = np.zeros(n)
        weights[S] = np.maximum(lam, floor)
        weights[viol] = floor
        S = np.union1d(S[kept], viol)
        lam = weights[S]
        restart, final = True, False
    else:
        return None, steps
    polish_steps = min(_MAX_NEWTON_STEPS, max_steps - steps)
    if dual.polish is None or polish_steps <= 0:
        return (S, lam), steps
    support = np.where(lam > z, lam, 0.0)
    polished = dual.polish(np.ascontiguousarray(Bt[S].T), support, polish_steps)
    if polished is None:
        return (S, lam), steps  # keep the interior point (its support's A(λ) is singular)
    return (S, polished[0]), steps + polished[1]


def _logdet_start(Bt: FloatArray) -> tuple[FloatArray, FloatArray, float] | None:
    """``λ = k u`` after a few multiplicative steps (``_multiplicative_design``), the gains
    ``g(u)`` ranking the columns, and ``Σλ = k``."""
    k = Bt.shape[1]
    ranked = _multiplicative_design(Bt, _IP_MULTIPLICATIVE_STEPS)
    return None if ranked is None else (k * ranked[0], ranked[1], float(k))


def _logdet_gains(
    B: NDArray[np.floating], S: NDArray[np.intp], lam: FloatArray
) -> FloatArray | None:
    res = _gains_low(B[:, S], lam, B)
    return None if res is None else res[1]


def _logdet_polish(
    Bs: FloatArray, support: FloatArray, steps: int
) -> tuple[FloatArray, int] | None:
    if _cholesky((Bs * support) @ Bs.T) is None:
        return None
    return _active_set_newton(Bs, support, steps)


_LOGDET = _Dual(
    point=_logdet_point,
    gains=_logdet_gains,
    start=_logdet_start,
    polish=_logdet_polish,
    single=True,
)


def _interior_point_design(Bt: FloatArray, max_steps: int) -> tuple[FloatArray | None, int]:
    """A design ``u`` from interior-point rounds on candidate sets; ``(None, steps)`` on failure.

    The first candidate set ``S`` is the ``k`` columns of ``_initial_design`` (so that
    ``A(λ) ≻ 0``) and the ``_IP_START · k`` columns with the largest ``g_i`` after a few
    multiplicative steps.  Each round solves the dual on ``S`` by ``_interior_point`` (all
    weights of ``S`` move at once), then computes ``g_i`` for every column (``O(n k²)``);
    columns outside ``S`` with ``g_i > 1`` violate the ellipsoid of the round's optimum, and
    the next ``S`` keeps the columns of ``S`` with ``λ_i > z_i`` (the estimated support) or
    ``g_i > 1 − _IP_BAND`` and adds the ``_IP_ADD · k`` largest violators.  The optimum on a
    set without violators is the optimum over all columns (Kiefer–Wolfowitz), so the rounds
    stop there.  Then the active-set Newton method polishes the weights on that set from the
    interior point's support (zeroing the ``O(μ)`` weights of the other columns), which takes
    a few steps since the support is identified.  The caller certifies the result
    (``max g_i`` over all columns), so a wrong support costs time, never privacy.
    """
    found, steps = _interior_point_rounds(Bt, max_steps, _LOGDET)
    if found is None:
        return None, steps
    S, lam = found
    u = np.zeros(Bt.shape[0])
    u[S] = lam / lam.sum()
    return u, steps


def _candidates(state: _FWState, k: int) -> NDArray[np.intp]:
    """Support of the current design plus the ``4k`` largest KW violators.

    (Was ``min(4k, 64)``; identical for ``k ≤ 16``.  For the FITC cloaking matrix with
    ``k = M = 100`` inducing inputs and ``n = 10⁵`` columns the cap made the solver take ~65
    Newton rounds, each refreshing the ``O(n k²)`` state; ``4k`` cuts its CPU time by a third,
    ``benchmarks/bench_sparse_cloaking.py``.)
    """
    support = np.flatnonzero(state.u > 0.0)
    outside = np.flatnonzero((state.u == 0.0) & (state.g > k))
    extra = 4 * k
    if outside.size > extra:
        outside = outside[np.argpartition(state.g[outside], -extra)[-extra:]]
    return np.concatenate([support, outside])


def _solve_design(Bt: FloatArray, tol: float, max_iter: int) -> tuple[FloatArray, int, bool]:
    """Maximise ``log det A(u)`` over the simplex; return ``(u, iterations, converged)``.

    For ``k ≥ _IP_MIN_RANK`` the start is the design of ``_interior_point_design`` (if it
    succeeds), otherwise the pivoted-QR design.  Frank–Wolfe with away steps brings the
    relative Kiefer–Wolfowitz gap below ``_POLISH_GAP``; then rounds of active-set Newton on
    the support plus the worst violators finish the job.  Every phase increases
    ``log det A(u)`` (so rounds cannot cycle); a Newton round that fails to increase it
    tightens the Frank–Wolfe target tenfold instead, so in the worst case Frank–Wolfe alone
    (which always converges) reaches ``tol``.
    """
    n, k = Bt.shape
    if k == 1:
        u = np.zeros(n)
        u[int(np.argmax(np.abs(Bt[:, 0])))] = 1.0
        return u, 0, True
    state = None
    iterations = 0
    if k >= _IP_MIN_RANK:
        u_ip, iterations = _interior_point_design(Bt, max_iter)
        if u_ip is not None:
            try:
                state = _fw_state(Bt, u_ip)
            except np.linalg.LinAlgError:
                state = None
    if state is None:
        state = _fw_state(Bt, _initial_design(Bt))
    fw_target = _POLISH_GAP
    while True:
        if _relative_gap(state.g, k) <= tol:
            return state.u, iterations, True
        if iterations >= max_iter:
            return state.u, iterations, False
        state, steps = _frank_wolfe(
            Bt, state, stop_gap=max(tol, fw_target), max_steps=max_iter - iterations
        )
        iterations += steps
        if _relative_gap(state.g, k) <= tol or iterations >= max_iter or fw_target <= tol:
            continue
        cand = _candidates(state, k)
        lam, newton_steps = _active_set_newton(
            np.ascontiguousarray(Bt[cand].T),
            k * state.u[cand],
            max_steps=min(_MAX_NEWTON_STEPS, max_iter - iterations),
        )
        iterations += newton_steps
        u_new = np.zeros(n)
        u_new[cand] = lam / np.sum(lam)
        try:
            candidate = _fw_state(Bt, u_new)
        except np.linalg.LinAlgError:
            candidate = None
        if candidate is not None and candidate.logdet > state.logdet + 1e-14 * k:
            state = candidate
        else:
            fw_target *= 0.1


# ----------------------------------------------------------------------------------------------
# Assembling the result
# ----------------------------------------------------------------------------------------------


def _assemble(
    red: _Reduced,
    weights: FloatArray,
    iterations: int,
    converged: bool,
    tol: float | None = None,
) -> NoiseCovariance:
    """Scale the design ``weights`` (``n``, ≥ 0) to a feasible ``M`` and certify it.

    With ``u = weights / Σ weights`` and ``γ = max_i g_i(u)`` (recomputed from scratch),
    ``M_k = γ · S_k A_b(u) S_k`` is feasible with ``max_i a_iᵀ M_k⁻¹ a_i = 1`` and ``λ = γ u``;
    ``gap_bound = k log(γ / k)``.  If ``tol`` is given, ``converged`` also requires the fresh
    relative gap ``γ / k − 1`` to be ``≤ tol``.
    """
    k = red.sing.size
    Bt = red.white.T
    total = float(np.sum(weights))
    res = _gains(Bt, weights / total) if total > 0.0 else None
    if res is None:
        raise np.linalg.LinAlgError(
            "The weights leave part of the column space of C uncovered (singular M); "
            "this should not happen for solve_noise_covariance."
        )
    g, L = res
    u = weights / total
    gamma = float(np.max(g))
    chol_k = red.sing[:, None] * (math.sqrt(gamma) * L)  # chol(S · γA_b · S) = S · sqrt(γ) L
    M_k = chol_k @ chol_k.T
    M_k = 0.5 * (M_k + M_k.T)
    W = _lower_solve(chol_k, red.proj)
    max_mahalanobis = float(np.max(np.einsum("ij,ij->j", W, W)))
    gap_bound = max(0.0, k * math.log(gamma / k))
    if tol is not None:
        converged = converged and gamma / k - 1.0 <= tol
    arrays = {
        "basis": red.basis,
        "projected": red.proj,
        "M_k": M_k,
        "chol_k": chol_k,
        "lam": gamma * u,
    }
    for arr in arrays.values():
        arr.setflags(write=False)
    return NoiseCovariance(
        **arrays,
        max_mahalanobis=max_mahalanobis,
        rank=k,
        rank_tol=red.rank_tol,
        gap_bound=gap_bound,
        iterations=int(iterations),
        converged=bool(converged),
    )


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def solve_noise_covariance(
    C: ArrayLike | LinearCloakingOperator,
    *,
    tol: float = 1e-9,
    rank_tol: float = 1e-10,
    max_iter: int = 100_000,
    design: Literal["logdet", "trace"] = "logdet",
) -> NoiseCovariance:
    """Minimum-``log|M|`` cloaking noise covariance with an optimality certificate.

    Solves ``min log|M|`` subject to ``c_iᵀ M⁺ c_i ≤ 1`` for every column ``c_i`` of the
    cloaking matrix (Smith et al. 2018, §3 eq. 5 and supplement), i.e. the minimum-volume
    origin-centred ellipsoid enclosing ``±c_i``, through its D-optimal-design dual
    (Kiefer & Wolfowitz 1960): ``M = Σ λ_i c_i c_iᵀ`` with ``λ = k u``.

    Parameters
    ----------
    C:
        ``m × n`` cloaking matrix (test points × training points), finite; or a
        ``pm_dpgp.gp.operators.LinearCloakingOperator`` (``C`` applied, never formed:
        ``CloakingOperator`` for the exact GP through its Cholesky factor,
        ``LowRankOperator`` for the FITC cloaking matrix of Smith et al. 2021, §3.2).
    tol:
        Relative Kiefer–Wolfowitz tolerance: stop when ``max_i g_i / k − 1 ≤ tol``; the
        returned ``gap_bound = k log(max g / k) ≤ k · tol`` then bounds the excess of ``log|M|``
        over the optimum.  For ``k ≥ 64`` the interior-point rounds solve to round-off
        whatever ``tol`` is (their intermediate optima have gaps of ``10⁻³`` to ``1``), so a
        larger ``tol`` does not make them faster (docs/cloaking.md §6, stop 29).
    rank_tol:
        Singular values of ``C`` ``≤ rank_tol · σ_max`` are treated as zero (default 1e-10
        here; ``cloaking_noise`` passes 1e-8, ``cloaked_release`` the public rule of
        ``pm_dpgp.mechanisms.label.truncation``).  The noise
        lives in
        the span of the remaining left singular vectors; the caller must project the released
        mean onto it (``NoiseCovariance.projector``).
    max_iter:
        Cap on Frank–Wolfe plus Newton steps.  If hit, ``converged`` is ``False`` and
        ``gap_bound`` is the honest certificate; ``M`` is still feasible (scaled to
        ``max c_iᵀ M⁺ c_i = max_mahalanobis``), so privacy holds and only utility is lost.
    design:
        ``"logdet"`` (default): the paper's least ``log|M|``.  ``"trace"``: least ``tr M``
        under the same constraints, i.e. the least mean noise variance over the test points
        (``pm_dpgp.mechanisms.label.cloaking_trace``, ``docs/cloaking.md`` §8); ``tol`` is
        then the relative trace gap.  Privacy holds for either (the sensitivity is computed
        for the returned ``M``).

    Returns
    -------
    NoiseCovariance
        ``M`` scaled so that ``max_mahalanobis = max_i c_iᵀ M⁺ c_i ≈ 1`` (exactly as computed on
        the projected columns).  Use L2 sensitivity ``d · sqrt(max_mahalanobis)``.

    Raises
    ------
    ValueError
        If ``C`` is not a finite, non-empty, not-all-zero real 2-D array, or a parameter is out
        of range, or if ``max_mahalanobis`` is not finite in float64 (subnormal singular values
        of ``C``: ``check_certified``).

    Warns
    -----
    pm_dpgp.ConvergenceWarning
        If the design stops before ``tol`` (``converged`` is ``False``): the result is
        feasible (privacy holds), but its noise may exceed the optimum by ``gap_bound``.

    Notes
    -----
    Cost: a randomised range finder with an exact residual check (``O(m n ℓ)``, ``ℓ ≈ 2k``) or,
    for slowly decaying spectra, a thin SVD (``O(m n min(m, n))``); then ``O(n k + k²)`` per
    Frank–Wolfe step and ``O(k² s + k f² + f³)`` per Newton step (``s`` candidate columns,
    ``f`` free weights), plus ``O(n k²)`` per certificate check; for ``k ≥ 64``
    ``O(k² s + k s² + s³)`` per interior-point step on ``s`` candidates (``s ≈ 3–4 k``).
    """
    arr = C if isinstance(C, LinearCloakingOperator) else _validate_matrix(C)
    tol = _check_positive(tol, "tol")
    rank_tol = check_rank_tol(rank_tol)
    max_iter = _check_max_iter(max_iter)
    if design not in ("logdet", "trace"):
        raise ValueError(f"design must be 'logdet' or 'trace', got {design!r}.")
    red = _reduce(arr, rank_tol)
    if not np.all(np.isfinite(red.proj)) or not np.any(red.proj):
        raise ValueError("C is zero or not finite: there is nothing to cloak.")
    if design == "trace":
        from pm_dpgp.mechanisms.label.cloaking_trace import trace_covariance

        result = trace_covariance(red, tol, max_iter)
    else:
        Bt = np.ascontiguousarray(red.white[:, red.reps].T)
        u_reps, iterations, converged = _solve_design(Bt, tol, max_iter)
        weights = np.zeros(arr.shape[1])
        weights[red.reps] = u_reps
        result = _assemble(red, weights, iterations, converged, tol=tol)
    check_certified([result])
    warn_unconverged([result], design, tol, stacklevel=3)
    return result


def check_certified(results: list[NoiseCovariance]) -> None:
    """Refuse a design whose ``max_mahalanobis`` is not finite (public: ``C`` only).

    When the retained singular values of ``C`` are subnormal (test points ~38 lengthscales
    from every training input), ``chol_k`` is subnormal, LAPACK's triangular solve takes its
    reciprocal (``inf``) and ``max_mahalanobis`` came out ``inf`` or NaN, with
    ``converged=True`` and no warning (stop-45 audit: ``C = [[1e-320, 0]]`` gave NaN).  The
    release refused later, at its whitening map; a direct caller of the solver got a
    non-finite sensitivity.
    """
    for result in results:
        if not math.isfinite(result.max_mahalanobis):
            raise ValueError(
                "the Mahalanobis sensitivity max_i c_i' M+ c_i of C is not finite in float64: "
                "the noise factor chol(M_k) is subnormal, so the whitening map W = "
                "chol(M_k)^-1 U_k' C overflows; typically the test points are so far from every "
                "training input that C is nearly zero and the release says almost nothing "
                "about the labels; drop those test points (their prior is public) or rescale "
                "the inputs and outputs. Nothing was spent or drawn."
            )


def warn_unconverged(
    results: list[NoiseCovariance], design: str, tol: float, *, stacklevel: int
) -> None:
    """One ``ConvergenceWarning`` if any design in ``results`` stopped before ``tol``.

    Public (the designs depend on the public cloaking matrices only).  The trace design also
    stops at its own step cap (``cloaking_trace._MAX_STEPS``) whatever ``max_iter`` is, so
    the advice names ``tol`` first (the only setting ``cloaked_release`` takes).
    """
    stopped = [r for r in results if not r.converged]
    if not stopped:
        return
    worst = max(stopped, key=lambda r: r.gap_bound)
    subject = (
        f"The {design} noise design"
        if len(results) == 1
        else f"{len(stopped)} of {len(results)} {design} noise designs"
    )
    warnings.warn(
        f"{subject} stopped after {worst.iterations} steps with certified gap "
        f"{worst.gap_bound:.3g} (tol {tol:g}): the noise covariance is feasible, so privacy "
        "holds, but it may be larger than the optimum. Pass a larger tol (cloaked_release, "
        "solve_noise_covariance) or, to solve_noise_covariance, a larger max_iter (the trace "
        "design stops at its own step cap whatever max_iter is).",
        ConvergenceWarning,
        stacklevel=stacklevel,
    )


def gradient_ascent_reference(
    C: ArrayLike,
    *,
    rate: float = 0.05,
    stop: float = 1e-5,
    rng: np.random.Generator,
    max_iter: int = 1_000_000,
    rank_tol: float = 1e-10,
    max_seconds: float | None = None,
    space: Literal["basis", "full"] = "basis",
) -> NoiseCovariance:
    """The papers' fixed-rate gradient ascent for ``λ`` (benchmark baseline only).

    Smith et al. (2018, supplement Algorithm 1, ``FINDLAMBDAS``): ``λ ~ Uniform(0.1, 0.9)``,
    then ``λ ← max(0, λ + rate · (c_iᵀ M⁺ c_i − 1))`` with ``M = Σ λ_i c_i c_iᵀ`` (projected
    gradient ascent on the dual ``log|Σ λ c cᵀ| − Σ λ``, eq. 6) until ``max |Δλ| < stop``.
    ``M⁺`` is evaluated in the same retained basis (and whitened coordinates) as
    ``solve_noise_covariance``, which changes nothing in exact arithmetic.

    With ``space="full"`` the step is the papers' literal one: ``M`` is the ``m × m`` matrix
    ``C Λ Cᵀ`` and ``M⁺`` its pseudo-inverse (``numpy.linalg.pinv``), ``O(m³ + n m²)`` per
    step; the final ``M`` is assembled in the retained basis as above.

    Each step costs ``O(n k²)`` (``space="basis"``).  ``max_seconds`` optionally caps the
    wall-clock time (the result then has ``converged=False``).  The returned ``M`` is scaled
    to be feasible exactly as in ``solve_noise_covariance``, so ``log|M|`` values are
    comparable.
    """
    arr = _validate_matrix(C)
    rate = _check_positive(rate, "rate")
    stop = _check_positive(stop, "stop")
    rank_tol = check_rank_tol(rank_tol)
    max_iter = _check_max_iter(max_iter)
    if max_seconds is not None:
        max_seconds = _check_positive(max_seconds, "max_seconds")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator, e.g. np.random.default_rng(0).")
    if space not in ("basis", "full"):
        raise ValueError(f"space must be 'basis' or 'full', got {space!r}.")
    red = _reduce(arr, rank_tol)
    B = red.white
    lam = rng.uniform(0.1, 0.9, size=arr.shape[1])
    gains = (lambda w: _pinv_gains(B, w)) if space == "basis" else (lambda w: _full_gains(arr, w))
    start = time.perf_counter()
    converged = False
    iterations = 0
    while iterations < max_iter:
        g = gains(lam)
        new = np.maximum(0.0, lam + rate * (g - 1.0))
        change = float(np.max(np.abs(new - lam)))
        lam = new
        iterations += 1
        if change < stop:
            converged = True
            break
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    return _assemble(red, lam, iterations, converged)


def _full_gains(C: FloatArray, lam: FloatArray) -> FloatArray:
    """``g_i = c_iᵀ M⁺ c_i`` with ``M = C Λ Cᵀ`` and its pseudo-inverse (papers' literal step)."""
    M_plus = np.linalg.pinv((C * lam) @ C.T, hermitian=True)
    return np.einsum("ij,ij->j", C, M_plus @ C)


def _pinv_gains(B: FloatArray, lam: FloatArray) -> FloatArray:
    """``g_i = b_iᵀ (Σ λ_j b_j b_jᵀ)⁺ b_i`` (Cholesky, falling back to a pseudo-inverse)."""
    A = (B * lam) @ B.T
    L = _cholesky(A)
    if L is not None:
        W = _lower_solve(L, B)
    else:
        vals, vecs = np.linalg.eigh(A)
        keep = vals > vals[-1] * A.shape[0] * np.finfo(float).eps
        W = (vecs[:, keep] / np.sqrt(vals[keep])).T @ B
    return np.einsum("ij,ij->j", W, W)
