"""Many small cloaking noise covariances at once: ``solve_noise_covariances``.

Private hyperparameter selection (Smith et al. 2021, §5, Algorithm 1; ``docs/selection.md``)
needs the optimal cloaking noise of every fold of every configuration: on !Kung with Table 2's
grid and 14 folds, 490 matrices of 20 × 267 with numerical rank ``k ≤ 21``.  Each solve of
``pm_dpgp.mechanisms.label.cloaking.solve_noise_covariance`` costs a few milliseconds, nearly
all of it Python overhead of small NumPy/LAPACK calls.  This module solves the same problems
with the same algorithm, stacked over a leading batch axis (NumPy's batched ``svd``,
``cholesky``, ``solve`` and ``matmul`` loop in C):

1. **Reduction** (``_reduce_many``): for an explicit ``C`` with ``min(m, n) < 2·32`` the
   serial solver goes straight to a thin SVD (``_column_space``); here the SVDs of all
   matrices of one shape are one batched call, which is bitwise the per-matrix LAPACK call,
   and the basis signs, retained rank, projected and whitened columns and the distinct-column
   representatives are computed with the serial code's own operations, so the reduced problem
   is **bitwise** that of ``solve_noise_covariance`` (tested).  Larger matrices use the
   serial ``_reduce``.
2. **Design** (``_solve_group``): problems whose ranks lie within a factor 1.5 (a rank
   ``k < K`` padded as ``A(λ) ⊕ I``, which has the same ``log det``, gains and Newton steps)
   run the active-set Newton method of ``cloaking._active_set_newton`` on the dual
   ``φ(λ) = log det Σ λ_i b_i b_iᵀ − Σ λ_i`` in lockstep (one Newton step of every unfinished
   problem per pass; backtracking only for those whose step was rejected; the last
   ``_SERIAL_TAIL`` problems finish with the serial method), in rounds over the support plus
   the ``4k`` worst Kiefer–Wolfowitz violators, as ``cloaking._solve_design`` does after its
   Frank–Wolfe phase.  It starts from the same pivoted-QR design (Kumar & Yildirim 2005)
   without Frank–Wolfe steps: Newton with the Armijo backtracking and the ratio test
   increases the concave ``φ`` at every accepted step.  A problem whose Newton round does not
   increase ``log det A(u)``, or that is not certified after ``_MAX_ROUNDS`` rounds, is handed
   to the serial ``_solve_design`` (whose Frank–Wolfe phase always converges), so every
   problem ends with the serial solver's guarantee.
3. **Certificate** (``_assemble_group``): the formulas of ``cloaking._assemble``, stacked:
   ``M_k`` is scaled to be feasible from a fresh computation of every ``g_i`` over all
   columns, ``max_mahalanobis`` is recomputed on the projected columns and
   ``gap_bound = k log(max g / k)``.

The optimum ``M`` is unique (the minimum-volume enclosing ellipsoid of ``±c_i``; John 1948,
Todd 2016, Thm. 2.1), both solvers certify the relative Kiefer–Wolfowitz gap ``≤ tol`` and both
polish the dual to a KKT residual ``≤ 1e-13`` on the candidate set, so the two results differ
by round-off propagated through the dual's conditioning (``tests/test_cloaking_batch.py``
states and checks the tolerance).  Privacy does not depend on which solver ran: the release's
sensitivity is computed from the returned ``M`` (``max_mahalanobis``), whatever it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray

from pm_dpgp.gp.linalg import sign_reference
from pm_dpgp.mechanisms.label.cloaking import (
    _MAX_NEWTON_STEPS,
    _SKETCH_START,
    NoiseCovariance,
    _active_set_newton,
    _assemble,
    _check_max_iter,
    _check_positive,
    _distinct_columns,
    _initial_design,
    _reduce,
    _Reduced,
    _solve_design,
    _validate_matrix,
    check_certified,
    warn_unconverged,
)
from pm_dpgp.mechanisms.label.truncation import check_rank_tol

__all__ = ["solve_noise_covariances"]

FloatArray = NDArray[np.float64]

#: Newton rounds (candidate sets) before a problem is handed to the serial solver.
_MAX_ROUNDS = 12
#: Violators entering the free set together with the serial method's entering weight.
_CAND = 4
#: Unfinished problems at or below this count leave the lockstep for the serial Newton method.
_SERIAL_TAIL = 4
#: KKT residual at which a Newton round stops (``cloaking._active_set_newton``'s value).
_KKT_TOL = 1e-13


def solve_noise_covariances(
    Cs: Sequence[ArrayLike],
    *,
    tol: float = 1e-9,
    rank_tol: float = 1e-10,
    max_iter: int = 100_000,
    svd: Literal["gesdd", "r_svd"] = "gesdd",
) -> list[NoiseCovariance]:
    """``[solve_noise_covariance(C) for C in Cs]``, batched over the matrices.

    Each result is the minimum-``log|M|`` cloaking noise covariance of Smith et al. (2018,
    §3 eq. 5 and supplement) for its ``C``, with the same reduction, tolerances and
    certificate as ``solve_noise_covariance`` (see there for the parameters); only the design
    iterations are run in lockstep over the batch (module docstring).  ``iterations`` counts
    the Newton steps of the batched phase (plus the serial solver's steps for a problem handed
    to it).  Every matrix is validated before any is solved.

    ``svd``: ``"gesdd"`` (default) reduces every matrix bitwise as the serial solver does;
    ``"r_svd"`` takes the left singular vectors of a wide ``C`` from a QR factor of ``Cᵀ``
    (``_left_svd``: equal up to round-off, ``≈ 2×`` cheaper; ``docs/selection.md`` §9).
    Privacy does not depend on it: each result's ``max_mahalanobis`` is computed from its
    own basis and projected columns.
    """
    if svd not in ("gesdd", "r_svd"):
        raise ValueError(f"svd must be 'gesdd' or 'r_svd', got {svd!r}.")
    tol = _check_positive(tol, "tol")
    rank_tol = check_rank_tol(rank_tol)
    max_iter = _check_max_iter(max_iter)
    mats = [_validate_matrix(C) for C in Cs]
    reds = _reduce_many(mats, rank_tol, exact=svd == "gesdd")
    for red in reds:
        if not np.all(np.isfinite(red.proj)) or not np.any(red.proj):
            raise ValueError("C is zero or not finite: there is nothing to cloak.")
    Bts = [np.ascontiguousarray(red.white[:, red.reps].T) for red in reds]
    designs = _solve_designs(Bts, tol, max_iter)
    out: list[NoiseCovariance | None] = [None] * len(mats)
    for group in _rank_groups([red.sing.size for red in reds]):
        members = []
        for i in group:
            u_reps, iterations, converged = designs[i]
            weights = np.zeros(mats[i].shape[1])
            weights[reds[i].reps] = u_reps
            members.append((reds[i], weights, iterations, converged))
        for i, nc in zip(group, _assemble_group(members, tol), strict=True):
            out[i] = nc
    check_certified(out)  # type: ignore[arg-type]
    warn_unconverged(out, "logdet", tol, stacklevel=3)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


def _assemble_group(
    members: list[tuple[_Reduced, FloatArray, int, bool]], tol: float
) -> list[NoiseCovariance]:
    """``cloaking._assemble`` for problems of ranks ``k ≤ K``, stacked (``A ⊕ I`` padding).

    Per problem, with ``u = weights / Σ weights`` and ``γ = max_i g_i(u)`` over every column
    (recomputed from scratch): ``chol(M_k) = S_k · sqrt(γ) L`` with ``L = chol(A_b(u))``,
    ``max_mahalanobis = max_i ‖chol(M_k)⁻¹ a_i‖²`` on the projected columns, ``λ = γ u``,
    ``gap_bound = max(0, k log(γ / k))`` and ``converged`` also requires ``γ / k − 1 ≤ tol``.
    A problem whose ``A_b(u)`` is not positive definite takes ``cloaking._assemble`` (which
    raises, as the serial solver would).
    """
    q = len(members)
    kk = np.array([red.sing.size for red, *_ in members])
    K = int(kk.max())
    n_max = max(red.proj.shape[1] for red, *_ in members)
    white = np.zeros((q, K, n_max))
    proj = np.zeros((q, K, n_max))
    sing = np.ones((q, K))
    u = np.zeros((q, n_max))
    for p, (red, weights, _, _) in enumerate(members):
        k, n = red.proj.shape
        white[p, :k, :n], proj[p, :k, :n], sing[p, :k] = red.white, red.proj, red.sing
        u[p, :n] = weights / np.sum(weights)
    pad = (np.arange(K)[None, :] >= kk[:, None]).astype(np.float64)
    A = (white * u[:, None, :]) @ white.transpose(0, 2, 1)
    np.einsum("qii->qi", A)[:] += pad
    L, ok = _batch_cholesky(A)
    W = _lower_solve(L, white)
    gamma = np.einsum("qkn,qkn->qn", W, W).max(axis=1)
    chol = sing[:, :, None] * (np.sqrt(gamma)[:, None, None] * L)
    W = _lower_solve(chol, proj)
    max_mahalanobis = np.einsum("qkn,qkn->qn", W, W).max(axis=1)
    out = []
    for p, (red, weights, iterations, converged) in enumerate(members):
        if not ok[p]:
            out.append(_assemble(red, weights, iterations, converged, tol=tol))
            continue
        k = int(kk[p])
        chol_k = np.array(chol[p, :k, :k])
        M_k = chol_k @ chol_k.T
        arrays = {
            "basis": red.basis,
            "projected": red.proj,
            "M_k": 0.5 * (M_k + M_k.T),
            "chol_k": chol_k,
            "lam": gamma[p] * (weights / np.sum(weights)),
        }
        for arr in arrays.values():
            arr.setflags(write=False)
        out.append(
            NoiseCovariance(
                **arrays,
                max_mahalanobis=float(max_mahalanobis[p]),
                rank=k,
                rank_tol=red.rank_tol,
                gap_bound=max(0.0, k * math.log(gamma[p] / k)),
                iterations=int(iterations),
                converged=bool(converged and gamma[p] / k - 1.0 <= tol),
            )
        )
    return out


# ----------------------------------------------------------------------------------------------
# Reduction: batched thin SVDs, bitwise the serial path
# ----------------------------------------------------------------------------------------------


def _left_svd(stack: FloatArray, *, exact: bool) -> tuple[FloatArray, FloatArray]:
    """Left singular vectors and singular values of a stack of ``m × n`` matrices.

    ``exact=True``: NumPy's batched thin ``svd`` (LAPACK ``gesdd`` per matrix, bitwise the
    serial solver's call).  ``exact=False`` and ``m < n``: ``Cᵀ = QR`` (Householder, ``Q``
    never formed) and the SVD of the ``m × m`` factor, ``C = Rᵀ Qᵀ = U Σ (QV)ᵀ``, which skips
    the right singular vectors that the reduction does not use (Golub & Van Loan 2013,
    §8.6.3, "R-SVD").  Both are backward stable: the singular values agree within
    ``O(u σ_1)`` and the retained subspaces within ``O(u σ_1 / gap)`` (Weyl; Davis–Kahan),
    so only a singular value within that distance of the rank cut can be kept by one and
    dropped by the other.
    """
    m, n = stack.shape[1:]
    if exact or m >= n:
        U, s, _ = np.linalg.svd(stack, full_matrices=False)
        return U, s
    R = np.linalg.qr(stack.transpose(0, 2, 1), mode="r")
    U, s, _ = np.linalg.svd(R.transpose(0, 2, 1))
    return U, s


def _reduce_many(mats: list[FloatArray], rank_tol: float, exact: bool = True) -> list[_Reduced]:
    """``[cloaking._reduce(C, rank_tol) for C in mats]`` with one SVD call per shape.

    ``cloaking._column_space`` computes a thin SVD of ``C`` directly when its range finder
    would not start (``2·_SKETCH_START > min(m, n)``); those matrices are stacked by shape
    (NumPy's batched ``svd`` runs the same LAPACK ``gesdd`` on each; with ``exact=False``
    the cheaper R-SVD of ``_left_svd``) and post-processed with the serial code's operations;
    the others take ``_reduce`` itself.  With ``exact=True`` the reduction is bitwise the
    serial one.
    """
    out: list[_Reduced | None] = [None] * len(mats)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, C in enumerate(mats):
        if 2 * _SKETCH_START <= min(C.shape):
            out[i] = _reduce(C, rank_tol)
        else:
            by_shape.setdefault(C.shape, []).append(i)
    for (m, _), members in by_shape.items():
        stack = np.stack([mats[i] for i in members])
        U_all, s_all = _left_svd(stack, exact=exact)
        w = sign_reference(m)  # the vector of canonical_signs
        if not exact:
            for i, red in zip(
                members, _post_process(stack, U_all, s_all, w, rank_tol), strict=True
            ):
                out[i] = red
            continue
        for i, U, s in zip(members, U_all, s_all, strict=True):
            k = int(np.count_nonzero(s > rank_tol * s[0]))
            Uk = U[:, :k]
            basis = np.ascontiguousarray(Uk * np.where(w @ Uk < 0.0, -1.0, 1.0))
            sing = s[:k].copy()
            proj = basis.T @ mats[i]
            out[i] = _Reduced(
                basis, sing, proj, proj / sing[:, None], _distinct_columns(proj), rank_tol
            )
    return out  # type: ignore[return-value]


def _post_process(
    stack: FloatArray, U: FloatArray, s: FloatArray, w: FloatArray, rank_tol: float
) -> list[_Reduced]:
    """The serial reduction's steps after the SVD, stacked over ``q`` matrices ``m × n``.

    Rank ``k = #{σ_j > rank_tol σ_1}``, canonical signs (``w`` of ``gp.linalg.canonical_signs``),
    ``proj = U_kᵀ C``, ``white = proj / σ`` and the distinct columns of ``proj`` up to sign
    (``cloaking._distinct_columns``: canonical sign at the largest entry, a linear key, exact
    comparison of neighbours in key order), on ``r``-row arrays (``r = min(m, n)`` singular
    vectors) whose rows ``k, …, r − 1`` are zero (they change no pivot, key or comparison).
    Equal to the serial steps up to the summation order of the sort key, which decides only
    which exact duplicates are found.
    """
    q, m, n = stack.shape
    r = U.shape[2]  # singular vectors per matrix: min(m, n) (a thin SVD of a tall C has n)
    kk = np.count_nonzero(s > rank_tol * s[:, :1], axis=1)
    live = np.arange(r)[None, :] < kk[:, None]  # (q, r): retained directions
    signs = np.where(np.einsum("m,qmj->qj", w, U) < 0.0, -1.0, 1.0) * live
    basis = U * signs[:, None, :]
    proj = basis.transpose(0, 2, 1) @ stack  # rows ≥ k are zero
    white = proj / np.where(live, s, 1.0)[:, :, None]
    # distinct columns up to sign, all matrices at once
    pivot = np.abs(proj).argmax(axis=1)
    peak = np.take_along_axis(proj, pivot[:, None, :], axis=1)[:, 0, :]
    valid = peak != 0.0
    sgn = np.sign(peak)
    key = np.where(
        valid, sgn * np.einsum("qmn,m->qn", proj, np.sqrt(np.arange(2.0, r + 2.0))), np.inf
    )
    order = np.argsort(key, axis=1, kind="stable")
    sorted_key = np.take_along_axis(key, order, axis=1)
    keep = np.take_along_axis(valid, order, axis=1)
    qi, ti = np.nonzero((sorted_key[:, 1:] == sorted_key[:, :-1]) & keep[:, 1:])
    if qi.size:
        a, b = order[qi, ti], order[qi, ti + 1]
        same = np.all(
            proj[qi, :, b] * sgn[qi, b][:, None] == proj[qi, :, a] * sgn[qi, a][:, None], axis=1
        )
        keep[qi[same], ti[same] + 1] = False
    out = []
    for p in range(q):
        k = int(kk[p])
        out.append(
            _Reduced(
                np.ascontiguousarray(basis[p, :, :k]),
                s[p, :k].copy(),
                np.ascontiguousarray(proj[p, :k]),
                np.ascontiguousarray(white[p, :k]),
                np.sort(order[p][keep[p]]),
                rank_tol,
            )
        )
    return out


# ----------------------------------------------------------------------------------------------
# Design: lockstep active-set Newton over problems of equal rank
# ----------------------------------------------------------------------------------------------


def _solve_designs(
    Bts: list[FloatArray], tol: float, max_iter: int
) -> list[tuple[FloatArray, int, bool]]:
    """``cloaking._solve_design`` for every ``Bt`` (``n_p × k_p``), batched by ``k``."""
    out: list[tuple[FloatArray, int, bool] | None] = [None] * len(Bts)
    multi = []
    for i, Bt in enumerate(Bts):
        if Bt.shape[1] == 1:
            out[i] = _solve_design(Bt, tol, max_iter)  # a closed form there
        else:
            multi.append(i)
    for group in _rank_groups([Bts[i].shape[1] for i in multi]):
        members = [multi[g] for g in group]
        results = _solve_group([Bts[i] for i in members], tol, max_iter)
        for i, res in zip(members, results, strict=True):
            out[i] = res if res is not None else _solve_design(Bts[i], tol, max_iter)
    return out  # type: ignore[return-value]


def _rank_groups(ranks: list[int]) -> list[list[int]]:
    """Positions of the problems solved together: ranks sorted, a group spans ``K ≤ 1.5 k``.

    Fewer groups mean fewer lockstep passes (Python overhead); a problem of rank ``k`` padded
    to ``K`` costs ``O(K²)`` per column instead of ``O(k²)``.  Depends on the list of ranks
    only, so the same list of matrices is always solved the same way.
    """
    order = sorted(range(len(ranks)), key=lambda i: (ranks[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and 2 * ranks[i] <= 3 * ranks[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [sorted(g) for g in groups]


def _batch_cholesky(A: FloatArray) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Lower Cholesky factors of a stack ``A`` and which exist (identity where one fails)."""
    try:
        return np.linalg.cholesky(A), np.ones(A.shape[0], dtype=bool)
    except np.linalg.LinAlgError:
        L = np.empty_like(A)
        ok = np.ones(A.shape[0], dtype=bool)
        for q in range(A.shape[0]):
            Lq, info = sla.lapack.dpotrf(A[q], lower=1, clean=1)
            ok[q] = info == 0
            L[q] = Lq if ok[q] else np.eye(A.shape[1])
        return L, ok


def _lower_inverse(L: FloatArray) -> FloatArray:
    """``L⁻¹`` for a stack of lower-triangular ``L`` (``q × k × k``), by forward substitution.

    Row ``i`` of ``X = L⁻¹`` is ``(e_iᵀ − L[i, :i] X[:i]) / L[i, i]`` (Higham 2002, §8.1;
    backward stable like LAPACK's ``dtrtri``), vectorised over the stack: ``k`` small batched
    products instead of NumPy's ``inv``, whose LU with pivoting per ``k × k`` matrix costs
    several times more for the ``k ≤ 21`` of the selection.
    """
    q, k, _ = L.shape
    X = np.zeros_like(L)
    d = 1.0 / np.einsum("qii->qi", L)
    for i in range(k):
        row = -(L[:, i : i + 1, :i] @ X[:, :i, :])[:, 0, :]
        row[:, i] += 1.0
        X[:, i, :] = row * d[:, i, None]
    return X


def _lower_solve(L: FloatArray, B: FloatArray) -> FloatArray:
    """``L⁻¹ B`` for a stack of lower-triangular ``L`` (``k × k``, well conditioned here).

    NumPy has no batched triangular solve; the batched triangular inverse
    (``_lower_inverse``) followed by one batched product costs ``O(k³ + k² s)`` per problem
    (the whitened systems are well conditioned, ``docs/cloaking.md``).
    """
    return _lower_inverse(L) @ B


@dataclass
class _Points:
    """The dual at ``λ`` for a stack of problems (``cloaking._NewtonPoint``, batched)."""

    ok: NDArray[np.bool_]
    value: FloatArray  # φ(λ)
    W: FloatArray  # L⁻¹ B_s, (q, k, s)
    grad: FloatArray  # γ_i = b_iᵀ A⁻¹ b_i − 1, (q, s)
    residual: FloatArray  # ‖λ − max(0, λ + γ)‖_∞

    def take(self, rows: NDArray[np.intp]) -> _Points:
        return _Points(
            self.ok[rows], self.value[rows], self.W[rows], self.grad[rows], self.residual[rows]
        )

    def put(self, rows: NDArray[np.intp], other: _Points) -> None:
        self.ok[rows] = other.ok
        self.value[rows] = other.value
        self.W[rows] = other.W
        self.grad[rows] = other.grad
        self.residual[rows] = other.residual


def _points(Bs: FloatArray, lam: FloatArray, pad: FloatArray) -> _Points:
    """``φ(λ) = log det A(λ) − Σ λ``, ``W = L⁻¹ B_s``, ``γ`` and the KKT residual, stacked.

    ``Bs`` is ``(q, K, s)``, ``lam`` ``(q, s)``; padding columns of ``Bs`` are zero (``γ = −1``,
    ``λ = 0``: they never enter and add nothing).  A problem of rank ``k < K`` has zero rows
    ``k, …, K − 1`` and ``pad = 1`` there: ``A(λ) ⊕ I`` has the same ``log det``, ``γ`` and
    Newton steps as ``A(λ)`` (the blocks decouple exactly).
    """
    A = (Bs * lam[:, None, :]) @ Bs.transpose(0, 2, 1)
    np.einsum("qii->qi", A)[:] += pad
    L, ok = _batch_cholesky(A)
    W = _lower_solve(L, Bs)
    grad = np.einsum("qks,qks->qs", W, W)
    grad -= 1.0
    diag = np.einsum("qii->qi", L)
    if not ok.all():
        diag = np.where(ok[:, None], diag, 1.0)
    value = 2.0 * np.log(diag).sum(axis=1) - lam.sum(axis=1)
    kkt = np.maximum(lam + grad, 0.0)
    kkt -= lam
    return _Points(ok, value, W, grad, np.abs(kkt).max(axis=1))


def _newton_steps(W: FloatArray, grad: FloatArray, free: NDArray[np.bool_]) -> FloatArray:
    """Newton steps ``(G_FF ∘ G_FF + μI)⁻¹ γ_F`` on each problem's free set, scattered to ``s``.

    ``G = Wᵀ W``; ``μ = 1e-12 · max diag`` as in ``cloaking._active_set_newton``.  Free sets
    of different sizes are padded with an identity block and a zero right-hand side (a zero
    step there).  One batched LU solve (the serial code's ``dposv`` is a Cholesky solve; the
    matrix is positive definite up to rounding either way); if a matrix is exactly singular
    the batch takes the serial fallback, a pseudo-inverse from ``eigh``.
    """
    q, _, s = W.shape
    nfree = free.sum(axis=1)
    F = int(nfree.max())
    idx = np.argsort(~free, axis=1, kind="stable")[:, :F]
    fmask = np.arange(F)[None, :] < nfree[:, None]
    idx = np.where(fmask, idx, s - 1)  # column s − 1 is padding (zero), never free
    Wf = np.take_along_axis(W, idx[:, None, :], axis=2)
    H = Wf.transpose(0, 2, 1) @ Wf
    H *= H
    diag = np.einsum("qii->qi", H)
    diag += (1e-12 * np.max(np.where(fmask, diag, 0.0), axis=1))[:, None] * fmask
    diag += ~fmask
    rhs = np.where(fmask, np.take_along_axis(grad, idx, axis=1), 0.0)
    try:
        step = np.linalg.solve(H, rhs[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        step = np.empty_like(rhs)
        for r in range(q):
            vals, vecs = np.linalg.eigh(H[r])
            keep = vals > 1e-14 * vals[-1]
            step[r] = vecs[:, keep] @ ((vecs[:, keep].T @ rhs[r]) / vals[keep])
    out = np.zeros((q, s))
    np.put_along_axis(out, idx, np.where(fmask, step, 0.0), axis=1)
    out[:, s - 1] = 0.0
    return out


def _active_set_newton_batch(
    Bs: FloatArray, lam: FloatArray, pad: FloatArray, max_steps: NDArray[np.intp]
) -> tuple[FloatArray, NDArray[np.intp]]:
    """``cloaking._active_set_newton`` on a stack of problems, one step of each per pass.

    ``Bs`` is ``(q, k, s)`` with at least one zero (padding) column last; ``lam`` ``(q, s)``.
    The entering rule, the coordinate step for an entering weight the Newton step would not
    increase, the ratio test, the Armijo backtracking (halving ``t``) with its round-off
    escape and the stopping rules are those of the serial method, per problem.  Returns the
    final ``λ`` and the steps taken per problem.
    """
    q, _, s = Bs.shape
    lam = lam.copy()
    steps = np.zeros(q, dtype=np.intp)
    pt = _points(Bs, lam, pad)
    rounding = 1e3 * np.finfo(float).eps * np.maximum(1.0, np.abs(pt.value))
    running = pt.ok & (pt.residual > _KKT_TOL) & (steps < max_steps)
    while running.any():
        R = np.flatnonzero(running)
        if R.size <= _SERIAL_TAIL:
            # the last few problems: a lockstep pass costs more Python overhead than a
            # serial step, so they finish with the serial method from where they are
            for r in R:
                k = Bs.shape[1] - int(pad[r].sum())
                lam[r], more = _active_set_newton(
                    np.ascontiguousarray(Bs[r, :k]), lam[r], int(max_steps[r] - steps[r])
                )
                steps[r] += more
            break
        lamR, cur = lam[R], pt.take(R)
        steps[R] += 1
        ar = np.arange(R.size)
        free = lamR > 0.0
        outside = np.where(free, -np.inf, cur.grad)
        j = outside.argmax(axis=1)
        oj = outside[ar, j]
        enter = (oj > 0.0) & (oj >= np.max(np.where(free, np.abs(cur.grad), -np.inf), axis=1))
        free[ar[enter], j[enter]] = True
        step = _newton_steps(cur.W, cur.grad, free)
        stop = np.zeros(R.size, dtype=bool)
        # an entering weight the Newton step would not increase enters by a coordinate step
        coord = enter & (step[ar, j] <= 0.0)
        if coord.any():
            c = np.flatnonzero(coord)
            trial = lamR[c].copy()
            gj = cur.grad[c, j[c]]
            trial[np.arange(c.size), j[c]] = 1.0 - 1.0 / (1.0 + gj)
            new = _points(Bs[R[c]], trial, pad[R[c]])
            good = c[new.ok]
            lam[R[good]] = trial[new.ok]
            pt.put(R[good], new.take(np.flatnonzero(new.ok)))
            stop[c[~new.ok]] = True
        # Newton steps with the ratio test and backtracking
        nwt = np.flatnonzero(~coord)
        shrinking = step[nwt] < 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(shrinking, lamR[nwt] / -step[nwt], np.inf)
        blocking = ratios.argmin(axis=1)
        t_bound = ratios[np.arange(nwt.size), blocking]
        t = np.minimum(1.0, t_bound)
        t_min = 1e-12 * np.minimum(1.0, t_bound)
        pending = np.arange(nwt.size)
        while pending.size:
            rows = nwt[pending]
            trial = lamR[rows] + t[pending, None] * step[rows]
            at_bound = np.flatnonzero(t[pending] == t_bound[pending])
            trial[at_bound, blocking[pending[at_bound]]] = 0.0
            np.maximum(trial, 0.0, out=trial)
            predicted = np.einsum("qs,qs->q", cur.grad[rows], trial - lamR[rows])
            accept = np.zeros(pending.size, dtype=bool)
            tried = np.flatnonzero(predicted > 0.0)
            if tried.size:
                new = _points(Bs[R[rows[tried]]], trial[tried], pad[R[rows[tried]]])
                old_val, old_res = cur.value[rows[tried]], cur.residual[rows[tried]]
                good = new.ok & (
                    (new.value >= old_val + 0.25 * predicted[tried])
                    | ((predicted[tried] < rounding[R[rows[tried]]]) & (new.residual < old_res))
                )
                acc = tried[good]
                accept[acc] = True
                lam[R[rows[acc]]] = trial[acc]
                pt.put(R[rows[acc]], new.take(np.flatnonzero(good)))
            rejected = pending[~accept]
            t[rejected] *= 0.5
            gone = rejected[t[rejected] <= t_min[rejected]]
            stop[nwt[gone]] = True
            pending = rejected[t[rejected] > t_min[rejected]]
        running[R[stop]] = False
        running &= (pt.residual > _KKT_TOL) & (steps < max_steps)
    return lam, steps


def _states(
    Ball: FloatArray, u: FloatArray, pad: FloatArray
) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """``g_i = b_iᵀ A(u)⁻¹ b_i`` over every column and ``log det A(u)``, stacked.

    ``Ball`` is ``(q, n + 1, K)`` (rows ``b_iᵀ``, zero padding), ``u`` ``(q, n + 1)``; ``pad``
    as in ``_points``.
    """
    Bk = Ball.transpose(0, 2, 1)
    A = (Bk * u[:, None, :]) @ Ball
    np.einsum("qii->qi", A)[:] += pad
    L, ok = _batch_cholesky(A)
    W = _lower_solve(L, Bk)
    g = np.einsum("qkn,qkn->qn", W, W)
    logdet = 2.0 * np.sum(np.log(np.diagonal(L, axis1=1, axis2=2)), axis=1)
    return g, logdet, ok


def _solve_group(
    Bts: list[FloatArray], tol: float, max_iter: int
) -> list[tuple[FloatArray, int, bool] | None]:
    """Rounds of batched active-set Newton for problems of ranks ``2 ≤ k ≤ K``.

    Mirrors ``cloaking._solve_design`` after its Frank–Wolfe phase: stop when the relative
    Kiefer–Wolfowitz gap is ``≤ tol``; otherwise Newton on the support plus the ``4k`` largest
    violators (``cloaking._candidates``); keep the result if it increases ``log det A(u)`` by
    more than ``1e-14 k``.  ``None`` marks a problem for the serial solver.
    """
    q = len(Bts)
    kk = np.array([Bt.shape[1] for Bt in Bts])
    K = int(kk.max())
    n_max = max(Bt.shape[0] for Bt in Bts)
    Ball = np.zeros((q, n_max + 1, K))  # row n_max stays zero: the padding column
    u = np.zeros((q, n_max + 1))
    for p, Bt in enumerate(Bts):
        Ball[p, : Bt.shape[0], : Bt.shape[1]] = Bt
        u[p, : Bt.shape[0]] = _initial_design(Bt)
    pad = (np.arange(K)[None, :] >= kk[:, None]).astype(np.float64)
    iterations = np.zeros(q, dtype=np.intp)
    status = np.zeros(q, dtype=np.int8)  # 0 running, 1 done, −1 to the serial solver
    converged = np.zeros(q, dtype=bool)
    g, logdet, ok = _states(Ball, u, pad)
    status[~ok] = -1
    for _ in range(_MAX_ROUNDS):
        run = status == 0
        gap_ok = run & (g.max(axis=1) / kk - 1.0 <= tol)
        status[gap_ok], converged[gap_ok] = 1, True
        status[(status == 0) & (iterations >= max_iter)] = 1
        A = np.flatnonzero(status == 0)
        if A.size == 0:
            break
        # candidates: the support, then the 4k largest violators g_i > k (cloaking._candidates)
        uA, gA, kA = u[A], g[A], kk[A]
        score = np.where(uA > 0.0, np.inf, np.where(gA > kA[:, None], gA, -np.inf))
        count = np.count_nonzero(uA > 0.0, axis=1) + np.minimum(
            np.count_nonzero(np.isfinite(score), axis=1), _CAND * kA
        )
        S = int(count.max()) + 1
        cand = np.argsort(-score, axis=1, kind="stable")[:, :S]
        cand = np.where(np.arange(S)[None, :] < count[:, None], cand, n_max)
        Bs = np.take_along_axis(Ball[A], cand[:, :, None], axis=1).transpose(0, 2, 1)
        lam0 = kA[:, None] * np.take_along_axis(uA, cand, axis=1)
        budget = np.minimum(_MAX_NEWTON_STEPS, max_iter - iterations[A])
        lam, steps = _active_set_newton_batch(Bs, lam0, pad[A], budget)
        iterations[A] += steps
        u_new = np.zeros((A.size, n_max + 1))
        np.put_along_axis(u_new, cand, lam / lam.sum(axis=1, keepdims=True), axis=1)
        u_new[:, n_max] = 0.0
        g_new, logdet_new, ok_new = _states(Ball[A], u_new, pad[A])
        better = ok_new & (logdet_new > logdet[A] + 1e-14 * kA)
        keep = A[better]
        u[keep], g[keep], logdet[keep] = u_new[better], g_new[better], logdet_new[better]
        status[A[~better]] = -1
    out: list[tuple[FloatArray, int, bool] | None] = []
    for p, Bt in enumerate(Bts):
        if status[p] == 1:
            out.append((u[p, : Bt.shape[0]].copy(), int(iterations[p]), bool(converged[p])))
        else:
            out.append(None)
    return out
