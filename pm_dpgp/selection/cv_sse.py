"""Smith et al.'s selection utility: negative cross-validated SSE of *cloaked* predictions.

Label privacy (inputs public, labels private, neighbours differ in one clipped label by at most
``d``).  For a configuration θ and a public κ-fold split, fold k predicts its test labels from
its training labels with the cloaking matrix ``C_k`` (Smith et al. 2021, Algorithm 1, lines
5–7), and the utility is

    u(θ) = −Σ_k Σ_{i ∈ test_k} E_z[ min((f_{k,i} + z_{k,i} − y_i)², c²) ],   c = 4d by default,

where ``f_k = μ + P_k C_k (y_train − μ)`` is the cloaked mean of the release and ``z_k`` its
Gaussian noise at the release's (ε, δ) (Algorithm 1: "we include the effect of the DP noise").
The expectation is computed in closed form (``expected_clipped_square``), which is the
paper's Monte-Carlo average with infinitely many draws.

Sensitivity (``docs/selection.md`` §2).  Eq. (13) as printed, ``9d² + Σ_{κ−1 largest}
d² max_j ‖c_jk‖²``, bounds how far one label moves the *distance* between predictions and test
labels, not the squared distance the SSE sums: with errors clipped at ``c`` a move of ``t`` in
one prediction changes its clipped squared error by up to ``g(t) = 2ct − t²`` (t ≤ c), ``c²``
beyond, which exceeds ``t²`` by ``2c·t``.  A hypothesis search finds neighbours that break
eq. (13) (``tests/test_selection.py``).  The bound used here, proved in the docs, is

    Δ(θ) = g(d) + max_j Σ_{k : j ∈ train_k} Σ_{i ∈ test_k} g(d |C̃_k[i, j]|)

(label j is a test label in exactly one fold — where it moves only its own clipped error, by at
most ``g(d) = 2cd − d²`` — and a training label in all others), and ``Δu = max_θ Δ(θ)`` over the
kept configurations, eq. (14).  Configurations with ``Δ(θ)`` above a public threshold are
dropped before the labels are read (§5 of the paper).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr

from pm_dpgp._progress import progress_bar
from pm_dpgp._validation import (
    check_delta,
    check_epsilon,
    check_flag,
    check_positive,
    private_array,
)
from pm_dpgp.gp.exact import cloaking_matrix
from pm_dpgp.gp.linalg import check_square_symmetric
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
from pm_dpgp.mechanisms.label.cloaking import NoiseCovariance, solve_noise_covariance
from pm_dpgp.mechanisms.label.cloaking_batch import solve_noise_covariances
from pm_dpgp.mechanisms.label.cloaking_release import SENSITIVITY_SAFETY
from pm_dpgp.models.classification import GPClassification
from pm_dpgp.models.exact import GPRegression
from pm_dpgp.selection.grids import check_folds

__all__ = [
    "CvFold",
    "CvSsePlan",
    "clipped_square_change_bound",
    "cv_sse_utilities",
    "expected_clipped_square",
    "paper_sse_sensitivity",
    "plan_cv_sse",
]

_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(32)
NoiseSolver = Literal["batched", "per_fold"]
FoldLinalg = Literal["fast", "reference"]


def clipped_square_change_bound(t: ArrayLike, clip: float) -> NDArray[np.float64]:
    """``g(t) = max |a² − b²|`` over ``|a|, |b| ≤ c`` with ``|a − b| ≤ t``: ``2ct − t²`` or ``c²``.

    Attained at ``a = c, b = max(c − t, 0)``.  Clipping ``clip(e, −c, c)`` is 1-Lipschitz, so a
    change of at most ``t`` in an error changes its clipped square by at most ``g(t)``.
    """
    t = np.abs(np.asarray(t, dtype=np.float64))
    return np.where(t < clip, 2.0 * clip * t - t * t, clip * clip)


def expected_clipped_square(mean: ArrayLike, var: ArrayLike, clip: float) -> NDArray[np.float64]:
    """``E[min(X², c²)]`` for ``X ~ N(mean, var)`` elementwise (var = 0 allowed).

    Worked in units of ``c`` (``m = mean/c``, ``s = sd/c``) so that no square overflows.  For
    ``s ≤ 1``, with ``a = (−1 − m)/s`` and ``b = (1 − m)/s``, the closed form
    ``E[X² 1{|X| < 1}] = (m² + s²)(Φ(b) − Φ(a)) + 2ms(φ(a) − φ(b)) + s²(aφ(a) − bφ(b))`` plus
    ``1 − Φ(b) + Φ(a)``.  For ``s > 1`` its terms are of order ``s`` each while the result is at
    most 1 (they cancel: at ``s = 10⁸`` the closed form is off by O(1)), so there
    ``E[min(X², 1)] = 1 − ∫_{−1}^{1} (1 − x²) φ((x − m)/s)/s dx``, the integral by 32-point
    Gauss–Legendre: on ``[−1, 1]`` the density's log-slope is at most ``(|m| + 1)/s²``, ≤ 10
    wherever the integral is above 10⁻¹⁷, which such a rule integrates to round-off.

    Every input gives a value in ``[0, c²]``, never NaN or an overflow: a mean or variance that
    is not finite, or an interval more than 40 sd from the mean, gives ``c²`` (the utilities are
    computed from private labels after the spend, where a failure would reveal a label;
    audit, stop 32).  ``clip = inf`` gives ``mean² + var``.
    """
    mu = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    if not np.isfinite(clip):
        return mu * mu + var
    shape = np.broadcast_shapes(mu.shape, var.shape)
    with np.errstate(all="ignore"):
        m = np.broadcast_to(mu / clip, shape).ravel()
        s = np.broadcast_to(np.sqrt(np.maximum(var, 0.0)) / clip, shape).ravel()
        out = np.ones(m.size)  # c² in units of c²: non-finite inputs and the far tails
        usable = np.isfinite(m) & np.isfinite(s)
        a, b = (-1.0 - m) / s, (1.0 - m) / s  # ±inf where s = 0
        far = (s > 0) & ((np.minimum(a, b) > 40.0) | (np.maximum(a, b) < -40.0))
        point = usable & (s == 0)
        out[point] = np.minimum(m[point] * m[point], 1.0)
        narrow = usable & (s > 0) & (s <= 1.0) & ~far
        if np.any(narrow):
            mn, sn, an, bn = m[narrow], s[narrow], a[narrow], b[narrow]
            pa, pb = _INV_SQRT_2PI * np.exp(-0.5 * an * an), _INV_SQRT_2PI * np.exp(-0.5 * bn * bn)
            inside = ndtr(bn) - ndtr(an)
            out[narrow] = (
                (mn * mn + sn * sn) * inside
                + 2.0 * mn * sn * (pa - pb)
                + sn * sn * (an * pa - bn * pb)
                + (1.0 - inside)
            )
        wide = usable & (s > 1.0) & ~far
        if np.any(wide):
            mw, sw = m[wide, None], s[wide, None]
            z = (_GL_NODES[None, :] - mw) / sw
            density = _INV_SQRT_2PI * np.exp(-0.5 * z * z) / sw
            out[wide] = 1.0 - (density * (1.0 - _GL_NODES**2)) @ _GL_WEIGHTS
    return (np.clip(out, 0.0, 1.0) * (clip * clip)).reshape(shape)


@dataclass(frozen=True, eq=False)
class CvFold:
    """Public ingredients of one fold at one configuration (no labels)."""

    test: NDArray[np.intp]
    train: NDArray[np.intp]
    C: NDArray[np.float64] = field(repr=False)  # projected cloaking matrix U_k U_kᵀ C_k
    noise_var: NDArray[np.float64] = field(repr=False)  # release noise variance per test point


@dataclass(frozen=True, eq=False)
class CvSsePlan:
    """Everything about Algorithm 1 that depends on public information only.

    ``sensitivities[θ]`` is Δ(θ) of ``docs/selection.md`` §2, ``paper_sensitivities[θ]`` eq. (13)
    as printed (for comparison only), ``kept`` the configurations whose Δ(θ) is at most the
    public threshold, and ``sensitivity`` = Δu = max over the kept ones (eq. 14).
    """

    configs: list[dict[str, float]]
    folds: list[NDArray[np.intp]]
    data_sensitivity: float
    error_clip: float
    y_bounds: tuple[float, float]
    prior_mean: float
    fold_plans: list[list[CvFold] | None] = field(repr=False)
    sensitivities: NDArray[np.float64]
    paper_sensitivities: NDArray[np.float64]
    kept: NDArray[np.bool_]
    sensitivity: float
    release_epsilon: float | None
    release_delta: float | None
    n_plans_computed: int = 0  # configurations whose fold plans were computed (not shared)
    release_calibration: str | None = None  # the release noise's calibration in the utility

    def metadata(self) -> dict[str, Any]:
        """Public description (all derived from public inputs)."""
        return {
            "n_configurations": len(self.configs),
            "n_kept": int(self.kept.sum()),
            "n_folds": len(self.folds),
            "data_sensitivity": self.data_sensitivity,
            "error_clip": self.error_clip,
            "utility_sensitivity": self.sensitivity,
            "release_epsilon_in_utility": self.release_epsilon,
            "release_delta_in_utility": self.release_delta,
            "release_calibration_in_utility": (
                self.release_calibration if self.release_epsilon is not None else None
            ),
        }


def _checked_kernel_matrix(K: ArrayLike) -> NDArray[np.float64]:
    """``K`` as a finite, square, symmetric float64 matrix (once per configuration).

    A public GP's ``kernel(X)`` is already symmetrised exactly and checked finite, so the
    common case is one comparison ``K == Kᵀ`` (which a NaN fails) and one finiteness test;
    anything else takes ``check_square_symmetric``'s full validation pass and its errors.
    Folds take principal blocks of ``K``, which inherit the checks.
    """
    arr = np.asarray(K, dtype=np.float64)
    if (
        arr.ndim == 2
        and arr.shape[0] == arr.shape[1]
        and np.array_equal(arr, arr.T)
        and np.isfinite(arr).all()
    ):
        return arr
    return check_square_symmetric(arr, "K")


def _kernel_key(
    values: dict[str, Any], kernel_names: tuple[str, ...] | None
) -> tuple[Any, ...] | None:
    """The values of the kernel's own hyperparameters (``None``: the model does not say)."""
    if kernel_names is None:
        return None
    key = []
    for nm in kernel_names:
        arr = np.asarray(values[nm], dtype=np.float64)
        key.append((nm, arr.shape, arr.tobytes()))
    return tuple(key)


def _fold_cloaking_matrix(
    K: NDArray[np.float64],
    noise_var: float,
    test: NDArray[np.intp],
    train: NDArray[np.intp],
) -> NDArray[np.float64]:
    """``C_k = K_te,tr (K_tr,tr + σ² I)⁻¹``: bitwise what ``cloaking_matrix`` computes.

    ``K`` was checked once (finite, symmetric) by the caller and a principal block of it is
    too, so the per-fold validation passes are skipped.  The fast path is the first attempt of
    ``jittered_cholesky`` (LAPACK ``dpotrf`` of the same Fortran-ordered
    matrix, no jitter) followed by the same ``cho_solve``, which reads the lower triangle only;
    a block that needs jitter takes the general path.
    """
    # K is exactly symmetric (checked once by the caller), so the transpose of the C-ordered
    # block is the same matrix in Fortran order: one copy instead of two
    A = K[np.ix_(train, train)].T
    np.einsum("ii->i", A)[:] += noise_var
    L, info = sla.lapack.dpotrf(A, lower=1, clean=0, overwrite_a=1)
    d = np.diag(L)
    if info != 0 or not (np.all(d > 0.0) and np.all(np.isfinite(d))):
        return cloaking_matrix(K[np.ix_(train, train)], K[np.ix_(test, train)], noise_var)
    # ``cho_solve((L, True), B, check_finite=False)`` is this ``dpotrs`` call on the same
    # Fortran-ordered arrays (bitwise), without its wrapper's argument checks
    C_t, info = sla.lapack.dpotrs(L, K[np.ix_(test, train)].T, lower=1)
    if info != 0:  # pragma: no cover - dpotrs fails only on invalid arguments
        raise np.linalg.LinAlgError(f"dpotrs failed (info={info}).")
    return C_t.T


def _fold_cloaking_matrices(
    K: NDArray[np.float64],
    noise_var: float,
    folds: Sequence[NDArray[np.intp]],
    trains: Sequence[NDArray[np.intp]],
    fold_linalg: FoldLinalg,
) -> list[NDArray[np.float64]]:
    """Every fold's ``C_k = K_te,tr (K_tr,tr + σ² I)⁻¹``, directly or from one block inverse.

    ``"reference"``: one Cholesky factor of ``K_tr,tr + σ² I`` per fold
    (``_fold_cloaking_matrix``).  ``"fast"``, the block inverse (``docs/selection.md`` §9): with
    ``P = (K + σ² I)⁻¹`` on all points, the partitioned inverse (Rasmussen & Williams 2006,
    §A.3; their §5.4.2 uses it for leave-out predictions) gives ``C_k = −P_te,te⁻¹ P_te,tr``: one
    Cholesky factor and inverse of the ``n × n`` matrix per configuration (LAPACK ``dpotrf``,
    ``dpotri``) and one ``|te| × |te|`` Cholesky solve per fold, instead of one factor of
    ``n − |te|`` per fold.  Equal in exact arithmetic; in floating point both are
    backward-stable solves with ``K + σ² I`` or a principal block of it, and they differ by
    ``O(κ(K + σ² I)·u)`` normwise (measured ≤ 1.9 κu on Table 2's grid; tested against
    ``tests/tolerances.py::cond_rtol``).  Whichever maps are returned, the utility and
    Δ(θ) are computed from the same ``C̃_k`` (the theorem of §2 holds for any linear maps).
    A factorisation that fails (numerically indefinite) takes the direct path.
    """
    if fold_linalg == "fast" and len(folds) > 1:
        n = K.shape[0]
        A = np.array(K, dtype=np.float64, order="F")  # symmetric: F order is the same matrix
        np.einsum("ii->i", A)[:] += noise_var
        L, info = sla.lapack.dpotrf(A, lower=1, clean=0, overwrite_a=1)
        d = np.diag(L)
        if info == 0 and np.all(d > 0.0) and np.all(np.isfinite(d)):
            P, info = sla.lapack.dpotri(L, lower=1, overwrite_c=1)
            if info == 0:
                # dpotri fills the lower triangle of P (column-major); row i of the symmetric
                # P is its lower part on columns j ≤ i and the transposed one on j > i
                cols = np.arange(n)
                out = []
                for te, tr in zip(folds, trains, strict=True):
                    rows = np.where(cols[None, :] <= te[:, None], P[te, :], P[:, te].T)
                    Phh = np.array(rows[:, te], order="F")
                    Lh, info_h = sla.lapack.dpotrf(Phh, lower=1, clean=0, overwrite_a=1)
                    dh = np.diag(Lh)
                    if info_h != 0 or not (np.all(dh > 0.0) and np.all(np.isfinite(dh))):
                        out.append(_fold_cloaking_matrix(K, noise_var, te, tr))
                        continue
                    X, info_h = sla.lapack.dpotrs(Lh, rows[:, tr], lower=1)
                    if info_h != 0:  # pragma: no cover - dpotrs fails only on bad arguments
                        raise np.linalg.LinAlgError(f"dpotrs failed (info={info_h}).")
                    X *= -1.0
                    out.append(X)
                return out
    return [
        _fold_cloaking_matrix(K, noise_var, te, tr) for te, tr in zip(folds, trains, strict=True)
    ]


def _fold_release(
    noise: NoiseCovariance, unit_scale: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """What a release of a fold with this noise covariance would use: ``C̃_k = U_k U_kᵀ C_k``
    and the release noise variance per test point (functions of the fold matrix only)."""
    Cp = noise.basis @ noise.projected  # what a release of this fold would compute
    sigma = unit_scale * float(np.sqrt(noise.max_mahalanobis)) * SENSITIVITY_SAFETY
    var = sigma * sigma * np.einsum("ij,jk,ik->i", noise.basis, noise.M_k, noise.basis)
    return Cp, var


#: Fold matrices held back for one batched noise solve, at most this many bytes at a time.
_BATCH_BYTES = 64 * 2**20


def _lookup(
    store: dict[bytes, list[tuple[NDArray[np.float64], Any]]], C: NDArray[np.float64], key: bytes
) -> Any:
    """The value stored with a matrix equal to ``C`` (``key`` its digest), or ``None``."""
    for C_old, value in store.get(key, []):
        if C_old.shape == C.shape and np.array_equal(C_old, C):
            return value
    return None


@dataclass(eq=False)
class _NoiseQueue:
    """Configurations whose fold matrices wait for one batched noise solve (docs §9).

    ``noise_solver="batched"`` solves the noise covariances of every queued fold of every queued
    configuration in one ``solve_noise_covariances`` call (lockstep over all of them);
    ``"per_fold"`` calls ``solve_noise_covariance`` matrix by matrix.  A fold matrix equal, byte
    for byte, to one solved before reuses that solution (per fold, the solve is a function of
    the matrix; in a batch, the other members change its last bits, ≤ 1e-13 relative, through
    the padding and the serial tail, and every result is certified on its own: stop-38 audit);
    only the solution is shared, each fold's plan keeps its own test and training indices (two
    folds of a replicated design can have the same matrix).
    """

    folds: Sequence[NDArray[np.intp]]
    trains: Sequence[NDArray[np.intp]]
    unit_scale: float
    rank_tol: float
    noise_solver: NoiseSolver
    svd: Literal["gesdd", "r_svd"]
    finish: Any  # callable(entry) computing Δ(θ) and eq. (13) once its fold plans are set
    # solved matrices → (C̃_k, release noise variance), shared by every queue of one plan
    seen: dict[bytes, list[tuple[NDArray[np.float64], tuple[NDArray, NDArray]]]]
    before: _NoiseQueue | None = None  # flushed before this one
    # (configuration, its fold matrices, their SHA-256 digests: each matrix is hashed once)
    items: list[tuple[_SharedPlan, list[NDArray[np.float64]], list[bytes]]] = field(
        default_factory=list
    )
    nbytes: int = 0

    def add(self, entry: _SharedPlan, Cs: list[NDArray[np.float64]]) -> None:
        self.items.append((entry, Cs, [hashlib.sha256(C.tobytes()).digest() for C in Cs]))
        self.nbytes += sum(C.nbytes for C in Cs)
        if self.nbytes > _BATCH_BYTES:
            self.flush()

    def _known(
        self, C: NDArray[np.float64], key: bytes
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
        return _lookup(self.seen, C, key)

    def flush(self) -> None:
        if self.before is not None:
            self.before.flush()
        # each distinct matrix once: not solved before, nor earlier in this flush
        todo: list[tuple[NDArray[np.float64], bytes]] = []
        pending: dict[bytes, list[tuple[NDArray[np.float64], bool]]] = {}
        for _, Cs, keys in self.items:
            for C, key in zip(Cs, keys, strict=True):
                if self._known(C, key) is not None:
                    continue
                if not C.any():
                    # C_k = 0 (e.g. a kernel that underflows between folds): the fold's
                    # prediction is the prior mean and its release would need no noise;
                    # the solver refuses an all-zero matrix, so record that case directly
                    # (stop-26 audit: one such candidate refused the whole grid)
                    zero = (np.zeros_like(C), np.zeros(C.shape[0]))
                    self.seen.setdefault(key, []).append((C, zero))
                elif _lookup(pending, C, key) is None:
                    pending.setdefault(key, []).append((C, True))
                    todo.append((C, key))
        mats = [C for C, _ in todo]
        if self.noise_solver == "batched":
            noises = (
                solve_noise_covariances(mats, rank_tol=self.rank_tol, svd=self.svd) if mats else []
            )
        else:
            noises = [solve_noise_covariance(C, rank_tol=self.rank_tol) for C in mats]
        for (C, key), noise in zip(todo, noises, strict=True):
            self.seen.setdefault(key, []).append((C, _fold_release(noise, self.unit_scale)))
        for entry, Cs, keys in self.items:
            plans = []
            for f, (C, key) in enumerate(zip(Cs, keys, strict=True)):
                solved = self._known(C, key)
                assert solved is not None  # every matrix of the queue was solved above
                plans.append(CvFold(self.folds[f], self.trains[f], *solved))
            entry.fold_plans = plans
            self.finish(entry)
        self.items, self.nbytes = [], 0


#: Two configurations share their fold plans when their normalised kernel matrices ``K/s``
#: (entries in [−1, 1]) and noise ratios ``σ²/s`` agree to this many units of rounding.
_SHARE_ULPS = 16.0
_SHARE_TOL = _SHARE_ULPS * float(np.finfo(np.float64).eps)
#: Relative allowance on Δu for the round-off of Δ(θ) itself (computed from the fold maps).
SENSITIVITY_ROUNDING = 1e-9
#: Assumed accuracy of one computed ``E[min(X², c²)]`` (``expected_clipped_square``): within
#: this many units of rounding of ``c²`` (docs/selection.md §2, "Round-off": the one ingredient
#: of the round-off bound that is an assumption about SciPy's ``ndtr``/``exp``, not a proof).
TERM_ULPS = 64.0
_U = float(np.finfo(np.float64).eps) / 2.0  # unit roundoff


def _gamma(k: int) -> float:
    """Higham's ``γ_k = k u / (1 − k u)`` (2002, Lemma 3.1)."""
    return k * _U / (1.0 - k * _U)


def utility_rounding_bound(
    fold_plans: Sequence[CvFold],
    n: int,
    clip: float,
    y_bounds: tuple[float, float],
    prior_mean: float,
) -> float:
    """Absolute bound on ``|û − u|`` for one computed utility (docs/selection.md §2).

    ``u = −Σᵢ E[min((eᵢ + ξᵢ)², c²)]`` over the ``n`` test rows, ``eᵢ = Cᵢ·(y_tr − μ) + μ − yᵢ``.
    With labels in ``[lo, hi]``, ``R = max(hi − μ, μ − lo)`` and ``Y = max(|lo|, |hi|)``:
    the computed error is within ``γ_{n_tr+3} (‖Cᵢ‖₁ R + |μ| + Y)`` of ``eᵢ`` (Higham 2002,
    eq. 3.5, for the dot product and the three additions), the clipped square is
    ``2c``-Lipschitz in the mean, its evaluation errs by at most ``TERM_ULPS·u·c²``
    (assumed), and the sum of ``n`` terms in ``[0, c²(1 + TERM_ULPS u)]`` errs by at most
    ``γ_n n c² (1 + TERM_ULPS u)`` (recursive summation; NumPy's pairwise sum is tighter).
    """
    lo, hi = y_bounds
    R = max(hi - prior_mean, prior_mean - lo, 0.0)
    offset = abs(prior_mean) + max(abs(lo), abs(hi))
    total = _gamma(n) * n * clip * clip * (1.0 + TERM_ULPS * _U)
    for fp in fold_plans:
        row_l1 = np.abs(fp.C).sum(axis=1)
        total += 2.0 * clip * _gamma(fp.train.size + 3) * float(np.sum(row_l1 * R + offset))
        total += fp.test.size * TERM_ULPS * _U * clip * clip
    return total * (1.0 + 1e-6)  # the bound's own evaluation in floating point


@dataclass(eq=False)
class _SharedPlan:
    """The fold plans of one configuration, reused by later ones of the same normalised form."""

    Kn: NDArray[np.float64]  # K / s, s = max |K|
    ratio: float  # σ² / s
    fold_plans: list[CvFold] | None = None  # set once its noise covariances are solved
    sensitivity: float = math.nan
    paper_sensitivity: float = math.nan
    rounding: float = math.nan  # utility_rounding_bound of these fold plans


def _same_normalised_form(entry: _SharedPlan, Kn: NDArray[np.float64], ratio: float) -> bool:
    """Whether ``(Kn, ratio)`` equals the entry's normalised form up to rounding.

    ``C_k = K_te,tr (K_tr,tr + σ² I)⁻¹`` is unchanged when ``K`` and ``σ²`` are multiplied by
    the same ``s > 0`` (for ``η² k(·; ℓ)`` it depends on ℓ and σ²/η² only); so are the
    release noise of a fold and Δ(θ), which depend on the ``C_k`` only.  The comparison
    allows ``_SHARE_ULPS`` units of rounding because configurations that are equal in exact
    arithmetic (``η = √5, σ = 1`` and ``η = 1, σ = √0.2``) evaluate to ratios and normalised
    kernels that differ in their last bits.
    """
    if abs(ratio - entry.ratio) > _SHARE_TOL * max(ratio, entry.ratio):
        return False
    # the first row decides most comparisons (another ℓ differs there already); the answer
    # is the same as the full comparison's, which runs only if the first row agrees
    if np.max(np.abs(Kn[0] - entry.Kn[0])) > _SHARE_TOL:
        return False
    return bool(np.max(np.abs(Kn - entry.Kn)) <= _SHARE_TOL)


def paper_sse_sensitivity(
    fold_matrices: Sequence[ArrayLike], data_sensitivity: float, error_clip: float = 4.0
) -> float:
    """Eq. (13) of Smith et al. (2021) as printed: ``9d² + Σ_{κ−1 largest} d² max_j ‖c_jk‖²``.

    With errors clipped at ``error_clip · d`` the test-fold term ``d² + 2·4d·d = 9d²`` of the
    paper becomes ``d² + 2·error_clip·d²``.  Kept to reproduce §5.1 (Δu = 116); it is **not** a
    valid sensitivity of the clipped SSE (``docs/selection.md`` §2) and no mechanism uses it.
    """
    d = check_positive(data_sensitivity, "data_sensitivity")
    test_term = (1.0 + 2.0 * check_positive(error_clip, "error_clip")) * d * d
    alphas = sorted(
        (
            float(np.max(np.sum(np.asarray(C, dtype=np.float64) ** 2, axis=0)))
            for C in fold_matrices
        ),
        reverse=True,
    )
    return test_term + d * d * float(sum(alphas[: len(alphas) - 1]))


def _sensitivity(fold_plans: list[CvFold], n: int, d: float, clip: float) -> float:
    per_label = np.zeros(n)
    for fp in fold_plans:
        per_label[fp.train] += clipped_square_change_bound(d * fp.C, clip).sum(axis=0)
    return float(clipped_square_change_bound(d, clip)) + float(per_label.max())


def plan_cv_sse(
    gpr: Any,
    configs: Sequence[dict[str, float]],
    folds: Sequence[NDArray[np.intp]],
    *,
    y_bounds: tuple[float, float],
    release_epsilon: float | None,
    release_delta: float | None,
    error_clip: float = 4.0,
    max_sensitivity: float | None = None,
    calibration: Literal["analytic", "classic"] = "analytic",
    rank_tol: float = 1e-8,
    share_plans: bool = True,
    noise_solver: NoiseSolver = "batched",
    fold_linalg: FoldLinalg = "fast",
    progressbar: bool = False,
) -> CvSsePlan:
    """Public planning of Algorithm 1: cloaking matrices, noise, Δ(θ), the drop, Δu.

    Reads ``gpr.X`` and the priors' support only, never ``gpr.y``.  ``error_clip`` is the
    clipping of prediction errors in units of ``d`` (the paper's 4).  ``release_epsilon``/
    ``release_delta``: the budget of the release that will follow, whose cloaking noise the
    utility includes; ``None`` leaves the noise out.  ``max_sensitivity``: configurations with
    Δ(θ) above it are dropped (public threshold; ``None`` keeps all).

    ``share_plans``: a configuration whose kernel matrix and noise variance are those of an
    earlier one times a common factor ``s > 0`` (up to rounding: ``_same_normalised_form``;
    e.g. ``η² k(·; ℓ)`` with the same ℓ and σ²/η²) has the same cloaking matrices, release
    noise and Δ(θ), and reuses that configuration's fold plans, Δ(θ) and eq. (13)
    (``docs/selection.md`` §9).  ``False`` recomputes every configuration.

    ``noise_solver``: ``"batched"`` (default) solves the release-noise covariances of a
    configuration's folds together (``pm_dpgp.mechanisms.label.cloaking_batch``), ``"per_fold"``
    one by one; both give the unique optimum to the solver's round-off (``docs/selection.md``
    §9), and Δ(θ) does not depend on the noise.

    ``fold_linalg``: the linear algebra of the fold maps (public; equal in exact arithmetic,
    ``docs/selection.md`` §9).  ``"fast"`` (default): every ``C_k`` of a configuration from one
    inverse of ``K + σ² I`` (``_fold_cloaking_matrices``) and the batched noise solver's
    bases from R-SVDs (``cloaking_batch._left_svd``).  ``"reference"``: one Cholesky factor per
    fold and LAPACK ``gesdd`` per fold matrix, bitwise the previous path and the serial
    solver's reduction.  The two differ by ``O(κ(K + σ² I)·u)`` in ``C_k``, amplified in the
    utilities by the rank cut (≤ 7.2·10⁻⁶ relative on the benchmark).  Δ(θ) and the utility
    always use the same maps, whichever is chosen.
    """
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    if isinstance(gpr, GPClassification):  # its public_cloaking refuses, since stop 42
        raise TypeError(
            "the CV-SSE selection scores regression cloaking, which does not apply to binary "
            "labels (their release is pm_dpgp.mechanisms.classification_release): choose a "
            "classification model's hyperparameters publicly. Nothing was spent."
        )
    cloaking = getattr(type(gpr), "public_cloaking", GPRegression.public_cloaking)
    if cloaking is not GPRegression.public_cloaking:
        # the utilities are built from exact-GP fold cloaking matrices: they would score a
        # different mechanism than the model's own cloaked release (stop-26 audit: FITC)
        raise TypeError(
            f"the CV-SSE selection scores exact-GP cloaking; a {type(gpr).__name__} releases "
            "through another cloaking matrix. Select with an exact gp_regression model of the "
            "same kernel, or choose the hyperparameters publicly."
        )
    if noise_solver not in ("batched", "per_fold"):
        raise ValueError(f"noise_solver must be 'batched' or 'per_fold', got {noise_solver!r}.")
    if fold_linalg not in ("fast", "reference"):
        raise ValueError(f"fold_linalg must be 'fast' or 'reference', got {fold_linalg!r}.")
    svd: Literal["gesdd", "r_svd"] = "r_svd" if fold_linalg == "fast" else "gesdd"
    lo, hi = (float(b) for b in y_bounds)
    d = hi - lo
    clip = check_positive(error_clip, "error_clip") * d
    if calibration not in ("analytic", "classic"):
        raise ValueError(f"calibration must be 'analytic' or 'classic', got {calibration!r}.")
    unit_scale = None
    if release_epsilon is not None or release_delta is not None:
        if release_epsilon is None or release_delta is None:
            raise ValueError("give both release_epsilon and release_delta, or neither.")
        release_epsilon = check_epsilon(release_epsilon, "release_epsilon")
        release_delta = check_delta(release_delta, "release_delta")
        unit_scale = gaussian_sigma(release_epsilon, release_delta, d, method=calibration)
    X = np.asarray(gpr.X, dtype=np.float64)
    n = X.shape[0]
    # Δ(θ) and the rounding bound assume each row is a test row exactly once (stop-34 review:
    # only the Smith front end checked it)
    folds = check_folds(folds, n)
    # float64 range, from public values only: a utility is a sum of ≤ n clipped squares
    # (each ≤ c²) and Δu ≤ (n + 1)c²; an overflow after the spend would fail there, in some
    # cases depending on the labels (stop-26 audit: y_bounds = ±2e153)
    if not math.isfinite(4.0 * (n + 1) * clip * clip):
        raise ValueError(
            f"y_bounds width {d:.3g} with error_clip={error_clip} is too large for float64 "
            f"utilities over {n} records; rescale the outputs (nothing was spent)."
        )
    plans: list[list[CvFold] | None] = []
    sens = np.empty(len(configs))
    paper = np.empty(len(configs))
    rounding = np.empty(len(configs))
    all_idx = np.arange(n)
    trains = [np.setdiff1d(all_idx, te) for te in folds]
    classes: list[_SharedPlan] = []  # the first configuration of each normalised form
    per_config: list[_SharedPlan] = []
    n_computed = 0

    def finish(entry: _SharedPlan) -> None:
        fps = entry.fold_plans
        entry.sensitivity = _sensitivity(fps, n, d, clip)
        entry.rounding = utility_rounding_bound(fps, n, clip, (lo, hi), float(gpr.mean))
        entry.paper_sensitivity = paper_sse_sensitivity([fp.C for fp in fps], d, error_clip)

    # Two queues: the first configuration of each normalised form, and (share_plans=False
    # only) the others.  The first queue then holds the same matrices in the same order with
    # or without sharing, so a shared plan is bitwise its recomputation (a batched solve is
    # not independent of the other problems in its batch at the last bit).
    seen: dict[bytes, list[tuple[NDArray[np.float64], tuple[NDArray, NDArray]]]] = {}
    first_queue = _NoiseQueue(
        folds, trains, unit_scale or 0.0, rank_tol, noise_solver, svd, finish, seen
    )
    queues = {
        True: first_queue,
        False: _NoiseQueue(
            folds,
            trains,
            unit_scale or 0.0,
            rank_tol,
            noise_solver,
            svd,
            finish,
            seen,
            first_queue,
        ),
    }
    # configurations that agree on the hyperparameters the kernel depends on (Table 2: the
    # noise is not one of them) have the same kernel matrix, bit for bit: evaluated once
    names_of = getattr(gpr, "kernel_hyperparameter_names", None)
    kernel_names = names_of() if callable(names_of) else None
    kernels: dict[tuple[Any, ...], NDArray[np.float64]] = {}
    with progress_bar(len(configs), "Selection: planning", enabled=progressbar) as bar:
        for cfg in configs:
            public = gpr.public_gp(cfg)
            key = _kernel_key(public.hyperparameters, kernel_names)
            K = kernels.get(key) if key is not None else None
            if K is None:
                K = _checked_kernel_matrix(public.kernel(X))
                if key is not None:
                    kernels[key] = K
            scale = float(np.max(np.abs(K)))
            if not scale > 0.0:
                raise ValueError("the kernel matrix of a configuration is zero.")
            Kn, ratio = K / scale, public.noise_var / scale
            cls = next((e for e in classes if _same_normalised_form(e, Kn, ratio)), None)
            if share_plans and cls is not None:
                per_config.append(cls)
                bar.advance()
                continue
            entry = _SharedPlan(Kn, ratio)
            if cls is None:
                classes.append(entry)
            Cs = _fold_cloaking_matrices(K, public.noise_var, folds, trains, fold_linalg)
            n_computed += 1
            if unit_scale is None:
                entry.fold_plans = [
                    CvFold(te, tr, C, np.zeros(te.size))
                    for te, tr, C in zip(folds, trains, Cs, strict=True)
                ]
                finish(entry)
            else:
                queues[cls is None].add(entry, Cs)
            per_config.append(entry)
            bar.advance()
    queues[True].flush()
    queues[False].flush()
    for t, entry in enumerate(per_config):
        # public: the release noise at these bounds must be a float64 variance (stop-32 audit:
        # y_bounds = ±1e152 at release ε = 1 gave inf, and every selection failed after its spend)
        if not all(np.isfinite(fp.noise_var).all() for fp in entry.fold_plans or ()):
            raise ValueError(
                f"the release noise at y_bounds width {d:.3g} overflows float64 for "
                f"configuration {configs[t]}; rescale the outputs (nothing was spent)."
            )
        plans.append(entry.fold_plans)
        sens[t], paper[t], rounding[t] = entry.sensitivity, entry.paper_sensitivity, entry.rounding
    kept = np.ones(len(configs), dtype=bool)
    if max_sensitivity is not None:
        kept = sens <= check_positive(max_sensitivity, "max_sensitivity")
        if not kept.any():
            raise ValueError(
                f"max_sensitivity={max_sensitivity} drops every configuration (the smallest "
                f"sensitivity is {sens.min():.6g}); raise it or change the grid."
            )
        plans = [p if k else None for p, k in zip(plans, kept, strict=True)]
    # Δ(θ) can be attained exactly (e.g. C_k underflowing to 0), and the utilities are
    # computed in floating point (an audit measured a change 2.2e-15 above Δ(θ)): the
    # computed change is within Δ(θ) + 2·utility_rounding_bound, and Δ(θ) itself is
    # computed to far better than 1e-9 relative (docs/selection.md §2, "Round-off").
    sensitivity = float(sens[kept].max()) * (1.0 + SENSITIVITY_ROUNDING) + 2.0 * float(
        rounding[kept].max()
    )
    if not (math.isfinite(sensitivity) and sensitivity > 0.0):
        # public: error_clip·d so small that c² and every bound underflow to 0 (stop-47 audit:
        # error_clip = 1e-320, or y_bounds = ±1e-165, was charged, then the sampler refused
        # the sensitivity 0.0)
        raise ValueError(
            f"the utility sensitivity is {sensitivity!r} at error_clip={error_clip!r} and "
            f"y_bounds width {d:.3g}: the clipped errors underflow float64; rescale the "
            "outputs (and use error_clip around 1-4, the paper's 4). Nothing was spent."
        )
    return CvSsePlan(
        configs=list(configs),
        folds=list(folds),
        data_sensitivity=d,
        error_clip=clip,
        y_bounds=(lo, hi),
        prior_mean=float(gpr.mean),
        fold_plans=plans,
        sensitivities=sens,
        paper_sensitivities=paper,
        kept=kept,
        sensitivity=sensitivity,
        release_epsilon=release_epsilon,
        release_delta=release_delta,
        n_plans_computed=n_computed,
        release_calibration=calibration,
    )


def cv_sse_utilities(plan: CvSsePlan, y: ArrayLike) -> NDArray[np.float64]:
    """Utilities ``−E[clipped CV SSE]`` of the kept configurations (private: owner's view only).

    ``y`` is clipped to the plan's public ``y_bounds`` first (what makes ``d`` a bound).
    Dropped configurations get ``−inf`` (they are never selected).
    """
    lo, hi = plan.y_bounds
    yv = private_array(y, "y", ndim=1)  # text refused by type, never quoted
    n = sum(len(f) for f in plan.folds)  # the folds partition the records (public)
    if yv.shape[0] != n:
        # a longer y was read by its first n entries, a shorter one raised IndexError
        raise ValueError(f"y has {yv.shape[0]} records, the plan's folds {n}; pass the plan's y.")
    yv = np.clip(np.where(np.isfinite(yv), yv, 0.5 * (lo + hi)), lo, hi)
    mu = plan.prior_mean
    u = np.full(len(plan.configs), -np.inf)
    done: dict[int, float] = {}  # a shared list of fold plans (``share_plans``) gives the same u
    for t, fps in enumerate(plan.fold_plans):
        if fps is None:
            continue
        if id(fps) in done:
            u[t] = done[id(fps)]
            continue
        # every fold's errors and noise variances, then one closed-form expectation
        err = np.concatenate([fp.C @ (yv[fp.train] - mu) + mu - yv[fp.test] for fp in fps])
        var = np.concatenate([fp.noise_var for fp in fps])
        u[t] = done[id(fps)] = -float(expected_clipped_square(err, var, plan.error_clip).sum())
    return u
