"""Minimum-trace cloaking noise covariance (``design="trace"``).

The cloaking mechanism (Smith et al. 2018, §3) adds ``N(0, σ² M)`` to ``C y``; its privacy
holds for *any* positive semi-definite ``M`` whose range contains every column ``c_i``,
provided ``σ`` is calibrated to the Mahalanobis sensitivity ``d · sqrt(max_i c_iᵀ M⁺ c_i)``
computed for that ``M`` (Hall et al. 2013, Prop. 3; ``docs/cloaking.md`` §1).  The paper picks
the ``M`` of least ``log|M|`` (D-criterion, ``solve_noise_covariance``'s default).  This
module picks the ``M`` of least *trace*,

    minimise tr(M_k)   subject to   a_iᵀ M_k⁻¹ a_i ≤ 1,   a_i = U_kᵀ c_i,

which minimises ``Σ_j Var(noise at test point j) = tr(U_k M_k U_kᵀ) = tr(M_k)``, i.e. the
mean noise variance per test point.  The trace is measured in the coordinates of the test
points (``a_i``, not the whitened ``b_i = S_k⁻¹ a_i`` of the log-det solver: the trace is not
invariant under ``S_k``).

Derivation (``docs/cloaking.md`` §8).  With ``A(λ) = Σ_i λ_i a_i a_iᵀ``, Lagrangian
stationarity gives ``M = A(λ)^{1/2}``; the dual function is the concave

    g(λ) = 2 tr A(λ)^{1/2} − Σ_i λ_i,     ∂g/∂λ_i = h_i − 1,   h_i = a_iᵀ A(λ)^{-1/2} a_i,

and its Hessian is ``−Z Zᵀ`` with ``Z_i = vec(x_i x_iᵀ ∘ Γ^{1/2})``, ``x_i = Vᵀ a_i``,
``A = V diag(r²) Vᵀ``, ``Γ_jl = 1 / (r_j r_l (r_j + r_l))`` (Daleckii–Krein formula for the
derivative of the matrix square root; Higham 2008, *Functions of Matrices*, Thm 3.11).
Certificate (Cauchy–Schwarz): for any ``λ ≥ 0`` and any feasible ``M``,
``tr M ≥ tr(A(λ)^{1/2})² / Σλ``, while ``s·A(λ)^{1/2}`` with ``s = max_i h_i`` is feasible, so

    relative gap = s · Σλ / tr A(λ)^{1/2} − 1 ≥ (tr M_returned − tr M_opt) / tr M_opt.

The dual of the design problem on the simplex is Kiefer's (1974) ``φ_{1/2}``-optimal design:
maximise ``tr A(u)^{1/2}``.

Numerics: ``A(λ)^{1/2}`` comes from a one-sided Jacobi SVD of ``[√λ_i a_i]`` that keeps the
small ``r_j`` to high relative accuracy (``_graded_svd``): at ``rank_tol = 1e-10`` the optimal
``r_1 / r_k`` reaches ``10²⁰``, about ``(σ_1 / σ_k)²``.

Algorithm: multiplicative updates ``λ_i ← λ_i h_i²`` (a warm start; alone they converge
sublinearly), then an active-set Newton method on ``g`` over the support plus the worst
violators (the same Lawson–Hanson-style scheme as the log-det solver, with the Hessian above),
repeated until the certificate holds on *all* columns.  Each Newton step costs
``O(s² k² + s k²)`` for ``s`` candidate columns and each certificate ``O(n k²)``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from pm_dpgp.mechanisms.label.cloaking import (
    _IP_MULTIPLICATIVE_STEPS,
    NoiseCovariance,
    _backtracking_trials,
    _Dual,
    _Factor,
    _initial_design,
    _interior_point_rounds,
    _lower_solve,
    _Reduced,
    _Solve,
)

FloatArray = NDArray[np.float64]

_GEJSV = sla.lapack.get_lapack_funcs("gejsv", dtype=np.float64)

#: Multiplicative warm-start iterations ``λ ← λ h²`` before the Newton polish.
_WARM_STEPS = 30
#: Maximum Newton steps inside one polish round.
_MAX_NEWTON_STEPS = 200
#: Cap on the steps of the trace solver (``min(max_iter, _MAX_STEPS)``): if the interior point
#: fails and the Newton rounds stall, the multiplicative fallback converges sublinearly; the
#: result is then feasible with an honest ``gap_bound``.  (Before ``_graded_svd`` this happened
#: on 57 of 150 random 1-D GP problems at ``rank_tol = 1e-10``, stop-38b audit; now on none.)
_MAX_STEPS = 5_000
#: Entries of the blocked Hessian formed at once (bounds the memory of ``Z``).
_HESSIAN_BLOCK = 4_000_000
#: Numerical rank from which the dual is first solved by interior-point rounds on candidate
#: sets (``_interior_point_rounds`` with ``_TRACE``).  The interior point is faster from
#: ``k = 2`` on (the 84 !Kung Table 1 fold problems, ``k = 5–21``: ≤ 0.2 s each against
#: ≤ 0.6 s for the active-set rounds alone), which remain the fallback.
_IP_MIN_RANK = 2
#: The first interior-point candidate set holds the ``_IP_FIRST · k`` columns of largest
#: ``h_i`` (the trace design's support is smaller than the log det one's: 258 columns for
#: ``k = 193`` against ~3k).
_IP_FIRST = 1.5
#: ``A(λ)`` counts as singular below ``r_k ≤ _RCOND · r_1``.  The optimal ``A^{1/2}`` spreads
#: about as the *square* of the retained singular values of ``C``: ``r_1 / r_k ≈ 4·10¹⁹`` for
#: ``σ_1 / σ_k = 6.7·10⁹`` (a 1-D GP at ``rank_tol = 1e-10``, the public floor), far below the
#: ``k ε`` of an ordinary SVD.  ``trace_point``'s SVD keeps a relative accuracy there, and
#: ``1 / r³`` (``_gamma``) stays finite above this bound.  The relative accuracy needs a
#: well-conditioned core ``B`` of ``Gt = D_1 B D_2`` (``_graded_svd``): a design that is
#: numerically rank deficient in ``B`` itself (stop-38d audit: a 30 × 6 matrix of exact rank 3
#: gave ``r_1/r_k = 4.6e16`` with ``r_k`` 140 % off) is no longer refused as singular.  That
#: costs no privacy and no false certificate: ``gap_bound`` and the charge are recomputed from
#: the returned ``chol_k`` (0 excesses over 521 audited solves), only the solver may then waste
#: steps on such a ``λ``.
_RCOND = 1e-30


def _graded_svd(Gt: FloatArray) -> tuple[FloatArray, FloatArray] | None:
    """Singular values (descending) and right singular vectors of ``Gt`` (``s × k``, ``s ≥ k``)
    to high *relative* accuracy, or ``None`` if ``Gt`` is not finite, LAPACK's Jacobi sweeps do
    not converge or ``σ_1`` overflows.

    ``Gt = [√λ_i a_iᵀ]`` is graded on both sides: ``a_i = S_k v_i / c`` (the singular values of
    ``C``, spanning up to ``1 / rank_tol``) and ``√λ_i`` (spanning ten orders near the
    optimum), i.e. ``Gt = D_1 B D_2`` with diagonal ``D_1, D_2`` and a moderately conditioned
    ``B``.  A bidiagonalising SVD (``gesdd``) determines every singular value only to
    ``O(ε r_1)`` -- relative errors ``10³`` at ``r_k / r_1 ≈ 10⁻²⁰`` (measured) -- whereas the
    preconditioned one-sided Jacobi SVD ``dgejsv`` with ``JOBA = 'F'`` (row-sorted,
    column-pivoted QR, then Jacobi) keeps a relative accuracy of about ``ε κ(B)`` for such
    matrices (Drmač & Veselić 2008, "New fast and accurate Jacobi SVD algorithm", *SIAM J.
    Matrix Anal. Appl.* 29(4); LAPACK's ``dgejsv`` documentation): ``3·10⁻¹⁵`` in ``r`` and
    ``4·10⁻¹⁴`` in ``h`` on the same point (60-digit reference).  Its cost is 1–1.6 × that of
    ``gesdd`` for ``k = 8 … 200`` (one BLAS thread).
    """
    if not np.all(np.isfinite(Gt)):
        # LAPACK's DLASCL would print "parameter number 4 had an illegal value" to the
        # console (stop-38d audit); a non-finite design is singular for the caller
        return None
    # joba=2: 'F' (D1 B D2 scaling), jobu=3: 'N' (no U), jobv=0: 'V', jobr=0: 'N' (no
    # truncation of small singular values), jobt=0: 'N' (no transposition), jobp=0: 'N'
    sva, _, V, work, _, info = _GEJSV(
        np.asfortranarray(Gt), joba=2, jobu=3, jobv=0, jobr=0, jobt=0, jobp=0
    )
    if info != 0 or not np.all(np.isfinite(sva)):
        return None
    # the singular values are SVA · WORK(1)/WORK(2); dgejsv leaves its scaling in WORK when
    # undoing it would overflow (stop-38d audit: entries ~1e307 gave r = inf): None then
    ratio = float(work[0]) / float(work[1])
    if not math.isfinite(ratio * float(sva[0])):
        return None
    return sva * ratio, V


def trace_point(
    At: FloatArray, lam: FloatArray, rcond: float = _RCOND
) -> tuple[FloatArray, FloatArray, FloatArray] | None:
    """``(r, V, h)`` at ``λ``: ``A(λ)^{1/2} = V diag(r) Vᵀ`` and ``h_i = a_iᵀ A^{-1/2} a_i``.

    ``At`` is ``n × k`` (rows ``a_i``).  ``A(λ)^{1/2}`` comes from the SVD of
    ``G = [√λ_i a_i]`` (``A = G Gᵀ``), whose singular values are the eigenvalues of
    ``A^{1/2}``: this avoids squaring the condition number by forming ``A``, and the graded
    SVD (``_graded_svd``) resolves ``r_k`` to high relative accuracy far below ``ε r_1``.
    Returns ``None`` when ``A(λ)`` is numerically singular (fewer than ``k`` positive weights,
    or ``r_k ≤ rcond · r_1``).  Cost ``O(n k²)``.
    """
    support = lam > 0.0
    k = At.shape[1]
    if np.count_nonzero(support) < k:
        return None
    svd = _graded_svd(At[support] * np.sqrt(lam[support])[:, None])
    if svd is None:
        return None
    r, V = svd
    if not r[-1] > rcond * r[0]:
        return None
    X = At @ V
    h = (X * X) @ (1.0 / r)
    return r, V, h


def relative_gap(r: FloatArray, h: FloatArray, lam: FloatArray) -> float:
    """Relative trace gap ``max_i h_i · Σλ / tr A(λ)^{1/2} − 1`` (see the module docstring)."""
    return float(np.max(h)) * float(np.sum(lam)) / float(np.sum(r)) - 1.0


def _dual(At: FloatArray, lam: FloatArray):
    """``(g, grad, r, V)`` of the dual on the rows ``At``, or ``None`` if ``A(λ)`` is singular."""
    point = trace_point(At, lam)
    if point is None:
        return None
    r, V, h = point
    return 2.0 * float(np.sum(r)) - float(np.sum(lam)), h - 1.0, r, V


def _gamma(r: FloatArray) -> FloatArray:
    """Daleckii–Krein weights ``Γ_jl = 1 / (r_j r_l (r_j + r_l))`` of ``d tr A^{1/2}``."""
    return 1.0 / (r[:, None] * r[None, :] * (r[:, None] + r[None, :]))


def _hessian(X: FloatArray, r: FloatArray, dtype: type = np.float64) -> NDArray[np.floating]:
    """Upper triangle of ``Z Zᵀ`` (minus the Hessian of ``g``) for the rows ``X = A_F V``.

    ``(Z Zᵀ)_il = Σ_jl' Γ_jl' x_ij x_il' x_lj x_ll'``.  By the symmetry of ``Γ`` only the
    pairs ``j ≤ l'`` are formed (weight ``2Γ`` off the diagonal), ``O(s² k²/2)`` flops in a
    BLAS ``syrk`` (in ``dtype``), blocked over ``j`` so that ``Z`` holds at most
    ``_HESSIAN_BLOCK`` entries.
    """
    s, k = X.shape
    w = _gamma(r)
    w *= 2.0
    w.flat[:: k + 1] *= 0.5
    w = np.sqrt(np.triu(w))
    H = np.zeros((s, s), dtype=dtype, order="F")
    syrk = sla.blas.dsyrk if dtype == np.float64 else sla.blas.ssyrk
    start = 0
    while start < k:
        stop = start + 1
        while stop < k and (stop + 1 - start) * (k - start) * s <= _HESSIAN_BLOCK:
            stop += 1
        Z = (X[:, start:stop, None] * X[:, None, start:]) * w[start:stop, start:]
        Z = Z.reshape(s, -1).astype(dtype, copy=False)
        H = syrk(1.0, Z.T, beta=1.0, c=H, trans=1, lower=0, overwrite_c=1)
        start = stop
    return H


def _ip_point(
    Bs: FloatArray, lam: FloatArray, z: FloatArray, single: bool
) -> tuple[FloatArray, _Factor] | None:
    """``r_d = h − 1 + z`` on the columns of ``Bs`` (``k × s``) and the factoriser of
    ``ZZᵀ + diag`` (a ``_Point`` of ``_interior_point``; ``h`` is float64 whatever ``single``).

    The interior-point Newton matrix ``ZZᵀ + Λ⁻¹Z`` is Jacobi-scaled before its Cholesky
    factorisation: with ``D = diag(ZZᵀ) + Λ⁻¹Z`` (``diag(ZZᵀ)_i = Σ_jl Γ_jl x_ij² x_il²``,
    ``O(s k²)``), ``Z`` is formed from the rows ``x_i D_i^{-1/4}``, so the factorised matrix
    has a unit diagonal whatever the spread of ``r`` (``Γ`` spans ``1/r_1³ … 1/r_k³``).  With
    ``single`` it is formed and factorised in float32 (the interior point asks for that only
    while its duality measure is large; every residual is evaluated in float64).
    """
    point = trace_point(Bs.T, lam)
    if point is None:
        return None
    r, V, h = point
    X = Bs.T @ V
    X2 = X * X
    hess_diag = np.einsum("ij,ij->i", X2 @ _gamma(r), X2)

    def factor(diag: FloatArray, single: bool) -> _Solve | None:
        scale = 1.0 / (hess_diag + diag)
        if not np.all(np.isfinite(scale)):
            return None
        root = np.sqrt(scale)  # ZZᵀ of the rows x_i root_i^{1/2} is diag(root) ZZᵀ diag(root)
        Xs = X * np.sqrt(root)[:, None]
        for dtype in (np.float32, np.float64) if single else (np.float64,):
            H = _hessian(Xs, r, dtype)
            H.flat[:: H.shape[0] + 1] += (diag * scale).astype(dtype)
            lapack = sla.lapack.spotrf if dtype == np.float32 else sla.lapack.dpotrf
            F, info = lapack(H, lower=0, clean=0, overwrite_a=1)
            if info == 0 and np.all(np.isfinite(F.diagonal())):
                solve = sla.lapack.spotrs if dtype == np.float32 else sla.lapack.dpotrs

                def solved(rhs: FloatArray, F=F, solve=solve, dtype=dtype) -> FloatArray:
                    x, _ = solve(F, (root * rhs).astype(dtype), lower=0)
                    return root * x.astype(np.float64)

                return solved
        return None

    r_d = h + (z - 1.0)
    return r_d, factor


def _multiplicative_start(At: FloatArray) -> tuple[FloatArray, FloatArray, float] | None:
    """``λ`` after a few multiplicative steps ``λ ← λ h²`` from uniform weights, its ``h``
    and ``Σλ`` (the start of ``_interior_point_rounds``).

    The update is scale free (``h`` scales as ``Σλ^{-1/2}``), so one step already fixes the
    scale; the steps only rank the columns for the first interior-point candidate set.
    """
    lam = np.full(At.shape[0], 1.0 / At.shape[0])
    for _ in range(_IP_MULTIPLICATIVE_STEPS):
        point = trace_point(At, lam)
        if point is None:
            return None
        lam = lam * point[2] * point[2]
    point = trace_point(At, lam)
    return None if point is None else (lam, point[2], float(lam.sum()))


def _all_gains(B: FloatArray, S: NDArray[np.intp], lam: FloatArray) -> FloatArray | None:
    """``h_i`` of every column of ``B`` (``k × n``) for the weights ``λ`` on the columns ``S``."""
    weights = np.zeros(B.shape[1])
    weights[S] = lam
    point = trace_point(B.T, weights)
    return None if point is None else point[2]


#: The ``φ_{1/2}`` dual for ``_interior_point_rounds`` (rows ``a_i``).  No active-set polish:
#: the interior point itself reaches ``μ ≤ 10⁻¹⁰`` and the caller's certificate decides; the
#: rounds of ``_newton`` in ``solve_trace_design`` follow only if a gap remains.
_TRACE = _Dual(
    point=_ip_point,
    gains=_all_gains,
    start=_multiplicative_start,
    polish=None,
    first=_IP_FIRST,
)


def _newton(At: FloatArray, lam: FloatArray, max_steps: int) -> tuple[FloatArray, int]:
    """Active-set Newton ascent of ``g(λ)`` over ``λ ≥ 0`` on the candidate rows ``At``.

    The free set holds the positive weights plus, when it is the largest KKT violation, one
    zero weight with positive gradient.  The step ``(Z_F Z_Fᵀ + μI)⁻¹ ∇_F`` is cut at the first
    weight reaching zero (which is dropped) and backtracked until Armijo's condition
    ``g(λ⁺) ≥ g(λ) + ¼ ∇·(λ⁺ − λ)`` holds; once the predicted increase is below the rounding of
    ``g``, a step is accepted if it lowers the KKT residual ``‖λ − max(0, λ + ∇)‖_∞``.
    """
    point = _dual(At, lam)
    if point is None:
        return lam, 0
    value, grad, r, V = point
    rounding = 1e3 * np.finfo(float).eps * max(1.0, abs(value))

    def kkt(lam: FloatArray, grad: FloatArray) -> float:
        return float(np.max(np.abs(np.maximum(lam + grad, 0.0) - lam)))

    residual = kkt(lam, grad)
    steps = 0
    while steps < max_steps and residual > 1e-13:
        steps += 1
        free = lam > 0.0
        outside = np.where(free, -np.inf, grad)
        j = int(np.argmax(outside))
        enter = bool(outside[j] > 0.0 and outside[j] >= np.abs(grad[free]).max())
        if enter:
            free[j] = True
        idx = np.flatnonzero(free)
        H = _hessian(At[idx] @ V, r)
        H = np.triu(H) + np.triu(H, 1).T
        curvature = H.diagonal().copy()
        # Jacobi scaling: the diagonal spans ~1/r_k³ ... 1/r_1³ (many orders of magnitude)
        scale = 1.0 / np.sqrt(np.maximum(H.diagonal(), 1e-300))
        H *= scale[:, None] * scale[None, :]
        H.flat[:: idx.size + 1] += 1e-12
        rhs = scale * grad[idx]
        try:
            step = scale * sla.solve(H, rhs, assume_a="pos")
        except (np.linalg.LinAlgError, ValueError):
            vals, vecs = np.linalg.eigh(H)
            keep = vals > 1e-14 * vals[-1]
            step = scale * (vecs[:, keep] @ ((vecs[:, keep].T @ rhs) / vals[keep]))
        if enter and step[np.searchsorted(idx, j)] <= 0.0:
            # the Newton step would not increase the entering weight: a 1-D Newton step on it
            step = np.zeros(idx.size)
            step[np.searchsorted(idx, j)] = grad[j] / curvature[np.searchsorted(idx, j)]
        accepted = None
        for direction in (step, grad[idx] / curvature):
            for trial in _backtracking_trials(lam, idx, direction):
                predicted = float(grad @ (trial - lam))
                new = _dual(At, trial) if predicted > 0.0 else None
                if new is not None:
                    new_residual = kkt(trial, new[1])
                    if new[0] >= value + 0.25 * predicted or (
                        predicted < rounding and new_residual < residual
                    ):
                        accepted = (trial, new, new_residual)
                        break
            if accepted is not None:
                break
        if accepted is None:
            break
        lam, (value, grad, r, V), residual = accepted
    return lam, steps


def solve_trace_design(
    At: FloatArray, start: FloatArray, tol: float, max_iter: int
) -> tuple[FloatArray, int, bool]:
    """Maximise the dual ``g(λ)`` for the rows ``a_i`` of ``At`` (``n × k``, spanning ``ℝ^k``).

    ``start`` (``≥ 0``, with ``A(start)`` invertible) is the initial support, e.g. the
    ``k`` columns chosen by pivoted QR.  Returns ``(λ, iterations, converged)`` with
    ``converged`` meaning that the relative trace gap (``relative_gap``) is ``≤ tol`` over all
    rows.  Rounds of active-set Newton on the support plus the worst violators must increase
    ``g``; a round that does not is replaced by multiplicative steps ``λ ← λ h²`` from ``λ``
    mixed with a small uniform weight (every column gets a chance to enter), so rounds never
    cycle and ``max_iter`` bounds the total number of steps.
    """
    n, k = At.shape
    iterations = 0
    lam = None
    if k >= _IP_MIN_RANK:
        found, iterations = _interior_point_rounds(At, max_iter, _TRACE)
        if found is not None:
            lam = np.zeros(n)
            lam[found[0]] = found[1]
            if trace_point(At, lam) is None:
                lam = None
    if lam is None:
        point = trace_point(At, start)
        if point is None:
            raise np.linalg.LinAlgError("singular initial trace design in the cloaking solver")
        # rescale: with all h_i = c, λ h² is dual-optimal; not if a weight underflows and the
        # design turns singular (stop-30 review: public inputs 1e-9 apart), then λ = start
        scaled = start * point[2] * point[2]
        lam = scaled if trace_point(At, scaled) is not None else start
    warm = 0
    while True:
        point = trace_point(At, lam)
        if point is None:
            raise np.linalg.LinAlgError("singular trace design in the cloaking solver")
        r, _, h = point
        if relative_gap(r, h, lam) <= tol:
            return lam, iterations, True
        if iterations >= max_iter:
            return lam, iterations, False
        if warm:
            # multiplicative steps from λ mixed with a little of the uniform design; a step
            # whose design is numerically singular (a weight underflowed: stop-30 audit, a
            # public near-duplicate input) is not taken, so λ stays a nonsingular design
            mixed = lam + 1e-3 * float(np.mean(lam))
            mixed_point = trace_point(At, mixed)
            if mixed_point is not None:
                lam, point = mixed, mixed_point
            for _ in range(min(warm, max_iter - iterations)):
                iterations += 1
                stepped = lam * point[2] * point[2]
                stepped_point = trace_point(At, stepped)
                if stepped_point is None:
                    break
                lam, point = stepped, stepped_point
            if iterations >= max_iter:
                continue
            r, _, h = point
        value = 2.0 * float(np.sum(r)) - float(np.sum(lam))
        cand = _candidates(lam, h, k)
        lam_c, steps = _newton(
            np.ascontiguousarray(At[cand]), lam[cand], min(_MAX_NEWTON_STEPS, max_iter - iterations)
        )
        iterations += steps
        new = np.zeros(n)
        new[cand] = lam_c
        new_point = _dual(At, new)
        if new_point is not None and new_point[0] > value:
            lam, warm = new, 0
        else:
            warm = max(2 * warm, _WARM_STEPS)


def _candidates(lam: FloatArray, h: FloatArray, k: int) -> NDArray[np.intp]:
    """Rows with non-negligible weight plus the ``4k`` largest dual-gradient violators."""
    support = np.flatnonzero(lam > 0.0)
    rest = np.setdiff1d(np.flatnonzero(h > 1.0), support, assume_unique=True)
    if rest.size > 4 * k:
        rest = rest[np.argpartition(h[rest], -4 * k)[-4 * k :]]
    return np.concatenate([support, rest])


def trace_factor(At: FloatArray, lam: FloatArray) -> tuple[FloatArray, float]:
    """Lower-triangular ``L`` with ``L Lᵀ = A(λ)^{1/2}`` and ``s = max_i h_i``.

    ``L`` is the transposed R factor of the QR factorisation of ``diag(√r) Vᵀ`` (so
    ``Lᵀ`` has a positive diagonal): ``A^{1/2}`` is never formed and ``L`` is as well
    conditioned as ``A^{1/2}`` allows.  The feasible covariance is ``s · L Lᵀ``.
    """
    point = trace_point(At, lam)
    if point is None:
        raise np.linalg.LinAlgError("singular trace design in the cloaking solver")
    r, V, h = point
    R = np.linalg.qr(np.sqrt(r)[:, None] * V.T, mode="r")
    R = R * np.where(np.diagonal(R) < 0.0, -1.0, 1.0)[:, None]
    return np.ascontiguousarray(R.T), float(np.max(h))


def trace_covariance(red: _Reduced, tol: float, max_iter: int) -> NoiseCovariance:
    """The minimum-trace ``NoiseCovariance`` for the reduced problem ``red`` (see module doc).

    Solves the dual on the distinct projected columns ``a_i = U_kᵀ c_i``, then returns the
    feasible ``M_k = s · A(λ)^{1/2}`` (``s = max_i h_i``), ``λ`` scaled by ``s²`` accordingly
    (``(s²λ)``'s square root is ``s A^{1/2}``).  ``max_mahalanobis`` is recomputed exactly for
    the returned ``chol_k`` from all columns, as in the log-det path, and ``gap_bound`` is the
    relative trace gap ``(tr M_k · max_mahalanobis) / LB − 1`` against the lower bound
    ``LB = tr(A(λ)^{1/2})² / Σλ`` of the certificate, so it also covers the rounding of the
    final scaling.
    """
    # the problem is homogeneous: solve it for ã_i = a_i / c (c = max |a_ij|), so that nothing
    # underflows; with the same λ, A^{1/2} and h scale by c, so M = (c s̃)·c Ã^{1/2}
    c = float(np.max(np.abs(red.proj)))
    At = np.ascontiguousarray(red.proj[:, red.reps].T / c)
    start = _initial_design(np.ascontiguousarray(red.white[:, red.reps].T))
    try:
        lam_reps, iterations, converged = solve_trace_design(
            At, start, tol, min(max_iter, _MAX_STEPS)
        )
        L, s = trace_factor(At, lam_reps)
    except np.linalg.LinAlgError as exc:
        # stop-38b audit: with a rank_tol far below the public floor (1e-15 on GP matrices
        # with repeated inputs) A(λ)^{1/2} spans σ_1/σ_k ≳ 1/(k ε) and every design is
        # numerically singular for the square-root criterion, while the log det design (in
        # whitened coordinates) still works; say so instead of a bare LinAlgError
        spread = float(red.sing[0] / red.sing[-1])
        raise ValueError(
            f"design='trace' cannot be solved at rank_tol={red.rank_tol:g}: the retained "
            f"singular values of C span a factor {spread:.1e} (rank {red.sing.size}), beyond "
            "what the square-root design resolves in float64. Pass a larger rank_tol "
            "(cloaked_release's default 'auto' never goes below 1e-10) or design='logdet'."
        ) from exc
    r = trace_point(At, lam_reps)[0]
    # the duality gap in the units of Ã: tr(M_k) = c² s ‖L‖²_F and the lower bound
    # c² (Σ r)² / Σ λ share the factor c², which underflowed to 0 for c ≈ 1e-197 (test points
    # 30 lengthscales from the data: ZeroDivisionError; stop-43 audit)
    lower_scaled = float(np.sum(r)) ** 2 / float(np.sum(lam_reps))
    chol_k = (c * math.sqrt(s)) * L
    M_k = chol_k @ chol_k.T
    M_k = 0.5 * (M_k + M_k.T)
    W = _lower_solve(chol_k, red.proj)
    max_mahalanobis = float(np.max(np.einsum("ij,ij->j", W, W)))
    gap = max(0.0, s * float(np.sum(L * L)) * max_mahalanobis / lower_scaled - 1.0)
    lam = np.zeros(red.proj.shape[1])
    # (c s)² as a Python float raised OverflowError for |C| ≳ 1e154 (stop-45 audit), where the
    # log det design returns; λ ~ |C|² then overflows as M_k does in both designs (NoiseCovariance)
    with np.errstate(over="ignore"):
        lam[red.reps] = (c * s) * ((c * s) * lam_reps)
    arrays = {"basis": red.basis, "projected": red.proj, "M_k": M_k, "chol_k": chol_k, "lam": lam}
    for arr in arrays.values():
        arr.setflags(write=False)
    return NoiseCovariance(
        **arrays,
        max_mahalanobis=max_mahalanobis,
        rank=red.sing.size,
        rank_tol=red.rank_tol,
        gap_bound=gap,
        iterations=int(iterations),
        converged=bool(converged and gap <= tol),
        design="trace",
    )
