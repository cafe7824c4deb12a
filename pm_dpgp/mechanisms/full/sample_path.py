"""Posterior sample-path release (Maciazek): the posterior's own randomness as mechanism.

Full privacy: inputs and outputs are private, neighbours replace one ``(x, y)``.
The prior is ``f ~ GP(μ₀, σ² k)`` with ``k(x, x) ≤ 1`` and the observation noise
variance is ``σ² r²`` (``r²`` the effective ridge), all public (``docs/sample_paths.md``, §1).  The
release is ``L`` independent draws of the posterior process, optionally plus
``η g`` with ``g ~ GP(0, k)`` independent (extra prior-GP noise).  Its Rényi-DP
curve comes from ``pm_dpgp.mechanisms.full.sample_path_bounds``; the ledger is
charged before any path is drawn.

The release is *function-valued*: ``SamplePathRelease.evaluate`` draws the
released paths at new inputs conditionally on every value released so far, so
the joint law of all values ever released is the posterior joint — this costs no
extra privacy (the paths were released as whole functions; evaluating them is
post-processing).  Only the data owner (curator) holds this object, because it
needs the private data to condition; what is published is
``SamplePathRelease.to_inference_data``.

Randomness: with ``rng=None`` (default) the paths are drawn from a NumPy Generator seeded
from OS entropy (``noise_source = "numpy_os_entropy"``); a Generator passed by the caller is
the simulation mode (``"numpy_simulation"``).  Either way the sampler is floating point; see
``docs/secure_noise.md`` ("Sample paths") for what this does and does not protect.

Numerics: the posterior covariance at many nearby inputs is numerically
singular.  A nugget ``j`` (relative to ``σ²``) is added to the covariance of the
released values: the release is then ``f(x) + e(x)`` with ``e`` independent white
noise of variance ``j``, i.e. data-independent noise added after the private
draw (post-processing, so the guarantee is unchanged).  The nugget actually used
is recorded in the metadata and the statistics ``evaluate`` returns are exact for
that law.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import eigh, qr

from pm_dpgp._progress import progress_bar
from pm_dpgp._validation import (
    bounds_from_centred,
    centred_bound,
    check_clip_option,
    check_count,
    check_delta,
    check_doubles_fit,
    check_draws_fit,
    check_epsilon,
    check_finite_array,
    check_flag,
    check_positive,
    check_rng,
    check_scale,
    private_array,
    reject_unexpected,
    renamed,
    require,
    row_labels,
    warn_public_settings,
)
from pm_dpgp.accounting import BUDGET_RTOL, Ledger, RdpCurveEvent
from pm_dpgp.gp.rfp import RFPTriangle
from pm_dpgp.mechanisms.full.sample_path_bounds import (
    CovBound,
    SamplePathBound,
    Sensitivity,
    check_kappa,
    kernel_lower_bound,
    parse_domain,
    paths_affordable,
)
from pm_dpgp.mechanisms.noise import SEED_POLICY_SIMULATION, SIMULATION
from pm_dpgp.models import GPRegression, PublicGP
from pm_dpgp.models._common import _eval_kernel, check_input_columns, input_columns_record
from pm_dpgp.models.guards import require_exact_regression
from pm_dpgp.models.sparse import (
    KernelStructure,
    is_scaled_constant,
    is_scaled_exponential_1d,
    is_stationary_decreasing,
    kernel_structure_at,
)
from pm_dpgp.release import RemembersTraining, refuse_training_inputs

#: ``noise_source`` of a sample-path release drawn without a caller's Generator.
SAMPLE_PATH_OS_ENTROPY = "numpy_os_entropy"
#: ``seed_policy`` of paths drawn with ``rng=None``.
SEED_POLICY_OS_ENTROPY = (
    "no stored seed: numpy Generator seeded from OS entropy (float sampler; see "
    "docs/secure_noise.md, 'Sample paths')"
)

__all__ = [
    "PrivateRows",
    "SamplePathRelease",
    "capped_public_gp",
    "certified_kappa",
    "check_mean_resolvable",
    "resolve_kappa",
    "sample_path_event",
    "sample_path_release",
]

KernelClass = Literal["generic", "exponential_1d", "constant"]

#: Doubles per block of ``k(X_o, X)`` when conditioning on released values (8 MiB).
_BLOCK_DOUBLES = 2**20
#: Up to this many new inputs, ``k(X_new, [X; X_new])`` is one kernel call (if it fits a block).
_ONE_CALL_POINTS = 256
#: The release's pre-spend kernel check and its first draw share one call ``k(probes,
#: [probes; X])`` up to this many doubles (1 MiB; ``_check_public_kernel``).
_FUSED_DOUBLES = 2**17
#: Smallest nugget (relative to ``σ²``) a release accepts: later rounds condition on the
#: factor of ``Σ + jI``, whose round-off is amplified by ``1/√j``; ``j = 0`` and ``10⁻²⁰``
#: released values of order 10⁴² and 10¹¹ after two or three rounds, ``10⁻¹⁴`` behaved
#: (stop-35 audit), so ``10⁻¹²`` leaves two orders of margin below the default ``10⁻¹⁰``.
NUGGET_FLOOR = 1e-12

#: Largest ``u·n(n + r²)/r²`` (``u = 2⁻⁵³``) a release accepts (``check_mean_resolvable``).
ROUNDOFF_LIMIT = 1e-6


def check_mean_resolvable(n: int, r2: float) -> None:
    """Refuse, from public ``n`` and ``r²`` only, a setting whose posterior mean float64 cannot
    resolve (``docs/sample_paths.md``, "Conditioning of the training system").

    ``K + r²I`` (normalised kernel, ``k(x, x) ≤ 1``) has condition number up to ``1 + n/r²``,
    and the computed posterior mean inherits a data-dependent round-off of that order: the
    change of the computed mean between neighbours was measured up to about ``u n²/r²``
    relative to the exact change (EQ and constant kernels).  That error is not in the bound.
    Stop-47 audit: a constant kernel of variance ``1/r²``, noise sd 1, n = 101,
    r² = 2.124·10⁻¹⁴ (u n²/r² ≈ 5·10⁻²): the computed neighbouring means differed by 0.172
    against an exact 0.0198, and the exact divergence of the computed release on 3000 lazily
    evaluated points was 7.2 times the charge.  Settings with ``u n(n + r²)/r² > 10⁻⁶`` are
    refused before any spend (a measured limit, not a proof: the residual round-off, about
    10⁻⁶ of the mean change at the limit, is not charged).  Only near-constant kernels
    (κ near 1) reach such a ridge with a finite ε; elsewhere ``α_max = 1 + r²/V`` is below
    1.01 long before.
    """
    level = 2.0**-53 * n * (n + r2) / r2
    if not level <= ROUNDOFF_LIMIT:
        smallest = 2.0**-53 * n * n / (ROUNDOFF_LIMIT - 2.0**-53 * n)
        raise ValueError(
            f"n = {n} records with effective ridge r2 = noise variance / kernel_scale^2 = "
            f"{r2:.4g}: the training system K + r2 I can have condition number up to "
            f"1 + n/r2 = {1.0 + n / r2:.3g}, and the round-off of the computed posterior mean "
            "(data-dependent, about u n^2/r2 of the mean sensitivity) is not covered by the "
            f"bound. Use r2 >= {smallest:.3g} (a larger noise_sd relative to kernel_scale). "
            "Nothing was spent or drawn."
        )


class PrivateRows:
    """Private rows ``(X, y)`` and the public GP they enter, read by ``sample_path_release``
    as it reads a ``GPRegression`` (``unchecked_data``, ``public_gp_without_data``), without
    a PyMC model or a compilation: the DP Thompson loop's growing dataset and a selection's
    training rows.  ``public`` holds the kernel (its own inputs are replaced by the rows)."""

    def __init__(
        self,
        public: PublicGP,
        X: ArrayLike,
        y: ArrayLike,
        cov_func: Any = None,
        *,
        proved_kappa: float | None = None,
        structure: KernelStructure | None = None,
    ) -> None:
        self._public = public
        self._X = X
        self._y = y
        # a κ the caller has already checked for this public GP (``_check_given_kappa``): the
        # Thompson loop checks its κ once, not once per round (one kernel call each)
        self._proved_kappa = proved_kappa
        # ``kernel_structure_at(cov_func, public.hyperparameters)`` if the caller has it (the
        # Thompson loop derives it once: ≈ 0.13 ms per round otherwise); the same value the
        # release would derive, since ``cov_func`` and the public hyperparameters are fixed
        self._kernel_structure = structure
        # the PyMC covariance ``public`` was compiled from, if the caller has it: the release
        # then knows a decreasing stationary kernel (constant diagonal, proved κ); without it
        # the release treats the kernel as general (diagonal cap, κ = 0 by default)
        self.cov_func = cov_func

    def unchecked_data(self) -> tuple[ArrayLike, ArrayLike]:
        """The rows as given (the release checks their shapes and maps bad records)."""
        return self._X, self._y

    def public_gp_without_data(self, hyperparameters: Mapping[str, Any] | None = None) -> PublicGP:
        """The public GP; its hyperparameters are fixed, so none may be given."""
        if hyperparameters:
            raise ValueError("PrivateRows holds a public GP with fixed hyperparameters.")
        return self._public


class _PathState:
    """All values released so far: ``μ₀ + F``, ``F = m + L W`` with ``L`` their joint lower
    factor and ``m`` the posterior mean minus the public prior mean ``μ₀`` (``offset``).

    The noise ``L W`` is added to the centred mean ``m`` and ``μ₀`` last, so the rounding of
    ``μ₀ + …`` is post-processing of the noisy value.  Adding the noise to ``μ₀ + m`` instead
    rounded the private mean at ``μ₀``'s magnitude first (stop-30 review: with
    ``μ₀ = 10¹⁵ + ½`` a one-label neighbour moved it by 20 times the mean sensitivity, an
    empirical hockey-stick δ of 0.03 where 10⁻⁵ was charged).

    ``L`` (``q × q``, lower triangular) is stored as block rows, one per call that
    released new inputs: block ``b`` holds ``L[r_b, :s_b]`` (``off``) and the diagonal
    block ``L[r_b, r_b]`` (``diag``, an ``RFPTriangle``: ``k_b(k_b + 1)/2`` doubles), where
    ``r_b`` are its rows and ``s_b`` the number of values released before it.  A lazy round
    appends one block row, so nothing already stored is copied or recomputed, and the
    factor takes exactly ``q(q + 1)/2`` doubles (its lower triangle), never a grown ``q × q``
    copy.  The released values ``F`` (``q × L``) are kept, so asking for them again costs
    nothing; the standard normals ``W`` behind them are kept for the next conditional draw.
    """

    def __init__(self, input_dim: int, n_draws: int, offset: float) -> None:
        self.offset = offset  # μ₀, the public prior mean
        self.X = np.empty((0, input_dim))  # (q, d) released inputs
        self.mean = np.empty(0)  # (q,) posterior mean − μ₀ there (private; never published)
        self.W = np.empty((0, n_draws))  # (q, L) standard normals behind the values
        self.F = np.empty((0, n_draws))  # (q, L) the released values minus μ₀: m + L W
        self.blocks: list[tuple[NDArray[np.float64], RFPTriangle]] = []
        # (q,) rows declared public: the release's X_star and to_inference_data(X_star=...);
        # evaluate()'s inputs stay with the owner unless exported (stop-42 audit)
        self.published = np.empty(0, dtype=bool)

    @property
    def q(self) -> int:
        return len(self.X)

    def append(
        self,
        X_new: NDArray[np.float64],
        mean_new: NDArray[np.float64],
        off: NDArray[np.float64],
        diag: RFPTriangle,
        Z: NDArray[np.float64],
    ) -> None:
        """Add the block row ``[off, diag]`` for the values ``mean_new + off W + diag Z``.

        Atomic: every new array is built before any is stored, so a failure part-way (a
        ``MemoryError`` in a stack, ``KeyboardInterrupt``) leaves the state as it was
        (stop-35 audit: the block list had grown while the arrays had not, and every later
        ``evaluate`` failed).  The stored arrays are read-only, so a view handed out by
        ``released_inputs`` cannot rewrite the inputs the next conditional draw uses.
        """
        F_new = diag.matmul(Z)
        if self.q:
            F_new += off @ self.W
        F_new += mean_new[:, None]
        grown = (
            np.vstack([self.X, X_new]),
            np.concatenate([self.mean, mean_new]),
            np.vstack([self.W, Z]),
            np.vstack([self.F, F_new]),
        )
        for arr in grown:
            arr.flags.writeable = False
        published = np.concatenate([self.published, np.zeros(len(X_new), dtype=bool)])
        self.X, self.mean, self.W, self.F = grown
        self.published = published
        self.blocks.append((off, diag))

    def _refuse_copy(self, *_: Any) -> Any:
        raise TypeError(
            "the state of a released sample path cannot be copied (it continues one charged "
            "path: see SamplePathRelease)."
        )

    __copy__ = __deepcopy__ = __reduce_ex__ = __reduce__ = _refuse_copy

    def solve(self, B: NDArray[np.float64]) -> NDArray[np.float64]:
        """``L⁻¹ B`` by block forward substitution (one triangular solve per block row)."""
        out = np.empty_like(B)
        start = 0
        for off, diag in self.blocks:
            stop = start + len(diag)
            rhs = B[start:stop] - off @ out[:start] if start else B[start:stop]
            out[start:stop] = diag.solve(np.asfortranarray(rhs), overwrite_b=True)
            start = stop
        return out

    def values(self, rows: NDArray[np.intp] | None = None) -> NDArray[np.float64]:
        """``μ₀ + (m + L W)[rows]``, shape ``(len(rows), L)`` (all rows when ``rows`` is None)."""
        return self.offset + (self.F if rows is None else self.F[rows])

    @property
    def L(self) -> NDArray[np.float64]:
        """The joint factor as one dense ``q × q`` matrix (for inspection and tests only)."""
        L = np.zeros((self.q, self.q))
        start = 0
        for off, diag in self.blocks:
            stop = start + len(diag)
            L[start:stop, :start] = off
            L[start:stop, start:stop] = diag.to_dense()
            start = stop
        return L


class _PathStream:
    """The Generator that continues the released paths, behind a wall against copies.

    ``SamplePathRelease`` refuses ``copy``/``pickle`` itself, but ``dataclasses.asdict`` /
    ``astuple`` deep-copy its fields one by one, which gave an independent Generator in the
    same state (stop-35 audit: the copy then drew the original's normals at other inputs,
    the noise-cancelling attack of docs/sample_paths.md §9).  This wrapper refuses to be
    copied, so those calls fail.  In simulation mode it also refuses a round that starts
    from a Generator state an earlier round (or the release's first draw) started from: a
    caller who restored ``rng.bit_generator.state`` between rounds replayed the same normals
    and made a later value an exact affine function of earlier ones (the intercept, a
    function of the private means, without noise).  States are compared by SHA-256 of
    ``bit_generator.state``; a stream advanced by a different amount (overlapping streams)
    is not detected, as for the ledger's seed check (docs/secure_noise.md).
    """

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._seen: set[str] = set()

    def _fingerprint(self) -> str:
        state = json.dumps(self._rng.bit_generator.state, sort_keys=True, default=str)
        return hashlib.sha256(state.encode()).hexdigest()

    def standard_normal(self, shape: tuple[int, int]) -> NDArray[np.float64]:
        start = self._fingerprint()
        if start in self._seen:
            raise ValueError(
                "the Generator of this release is in a state it was in before (was its "
                "bit_generator.state restored?): drawing again would replay normals that "
                "already went into released values. Nothing was drawn."
            )
        z = self._rng.standard_normal(shape)
        self._seen.add(start)
        return z

    def _refuse_copy(self, *_: Any) -> Any:
        raise TypeError(
            "the Generator of a SamplePathRelease cannot be copied: a copy would continue the "
            "charged path with the same noise (see SamplePathRelease)."
        )

    __copy__ = __deepcopy__ = __reduce_ex__ = __reduce__ = _refuse_copy


@dataclass(repr=False)
class SamplePathRelease(RemembersTraining):
    """``L`` released posterior paths, evaluable anywhere (curator-side object).

    Attributes
    ----------
    bound:
        the public Rényi-DP bound of one path (``SamplePathBound``).
    n_draws:
        ``L``, the number of released paths (all charged to the ledger at once).
    delta:
        δ at which ``epsilon`` is reported.
    epsilon:
        ε of the ``L`` paths at ``delta`` (optimal RDP conversion).
    event:
        the privacy event charged to the ledger for the ``L`` paths (public).
    """

    public_gp: PublicGP
    bound: SamplePathBound
    n_draws: int
    delta: float
    epsilon: float
    eta: float
    _alpha: NDArray[np.float64] = field(repr=False)  # (K + σ²r²I)⁻¹ (y − μ₀): private
    _factor: RFPTriangle = field(repr=False)  # Cholesky factor of K + σ²r²I, RFP: private
    _rng: np.random.Generator | _PathStream = field(repr=False)
    _state: _PathState | None = field(default=None, repr=False)
    metadata: dict[str, Any] = field(default_factory=dict)
    event: RdpCurveEvent | None = field(default=None, repr=False)
    #: nugget variance of every conditional draw, fixed at release (the public ``metadata``
    #: was a mutable dict until stop 49, and a nugget of 0 set there made the next rounds blow
    #: up, stop 35)
    _nugget_variance: float = field(default=math.nan, repr=False)
    #: the row index of a pandas ``X_star`` of the release (public labels; ``None`` otherwise):
    #: the default export, when it is exactly that ``X_star``, refuses an ``observed_data``
    #: Series with other labels (stop-42 review)
    _x_star_rows: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One line of public settings (the dataclass repr printed the public GP and its
        inputs, 8.6 kB; stop-39 walkthrough).  Nothing private: no path value, no data."""
        return (
            f"SamplePathRelease(n_draws={self.n_draws}, epsilon={self.epsilon!r} at "
            f"delta={self.delta!r}, eta={self.eta!r}, kernel: {self.public_gp.description!r}, "
            f"metadata: {len(self.metadata)} keys)"
        )

    def __post_init__(self) -> None:
        if not isinstance(self._rng, _PathStream):
            self._rng = _PathStream(self._rng)
        if not math.isfinite(self._nugget_variance):
            self._nugget_variance = float(self.metadata["nugget_variance"])
        self._freeze()  # the metadata as a read-only copy (stop-49 audit)

    def __setattr__(self, name: str, value: Any) -> None:
        # the record of what was charged is set once: replacing the whole metadata
        # (``release.metadata = {...}``) passed the read-only mapping by (stop-49 audit)
        if name in ("metadata", "event") and name in self.__dict__:
            raise AttributeError(
                f"a release's {name} is read-only: it is the record of what was charged."
            )
        super().__setattr__(name, value)

    # ------------------------------------------------------------------ no copies
    def _refuse_copy(self, *_: Any) -> Any:
        raise TypeError(
            "a SamplePathRelease cannot be copied or pickled: it holds the state of the one "
            "charged path (the values released so far and the Generator that continues them), "
            "and two copies would extend that path with the same noise at different inputs, "
            "which cancels it (a noise-free function of the private data). Evaluate the path "
            "at every input you need (evaluate(X_new), free), and publish or store those values "
            "(published_values, to_inference_data) instead of the object."
        )

    __copy__ = __deepcopy__ = __reduce_ex__ = __reduce__ = _refuse_copy

    @property
    def n_paths(self) -> int:
        """Deprecated alias of ``n_draws`` (removed in the next release)."""
        import warnings

        warnings.warn(
            "SamplePathRelease.n_paths is renamed n_draws.", DeprecationWarning, stacklevel=2
        )
        return self.n_draws

    # ------------------------------------------------------------------ algebra
    def _cross_kernel(self, X_new: NDArray[np.float64]) -> NDArray[np.float64]:
        """``k(X, X_new)`` as a Fortran-ordered ``n × k`` array, evaluated in row blocks of
        ``X_new`` (8 MiB each), so no second ``n × k`` array exists."""
        gp = self.public_gp
        out = np.empty((gp.n, len(X_new)), order="F")
        step = max(1, _BLOCK_DOUBLES // max(gp.n, 1))
        for i in range(0, len(X_new), step):
            out[:, i : i + step] = gp.kernel(X_new[i : i + step], gp.X).T
        return out

    def _conditional_covariance(
        self,
        X_new: NDArray[np.float64],
        blocks: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> tuple[RFPTriangle, NDArray[np.float64], NDArray[np.float64]]:
        """Covariance at ``X_new`` given every value released so far, the new block row, and
        the posterior mean at ``X_new`` minus the prior mean ``μ₀`` (``k(X_new, X) α``).

        With ``V = L_K⁻¹ k(X, X_new)`` (``L_K`` the factor of ``K + r²I``, kernel ``σ² k``),
        the posterior covariance is ``s·k(X_new, X_new) − VᵀV`` with ``s = 1 + η²/σ²``
        (R&W 2006, eq. 2.24, plus the independent ``η g``) and the mean is
        ``μ₀ + k(X_new, X) α`` (eq. 2.23).  Conditioning on the ``q``
        released values ``F_o = μ_o + L_o W_o`` subtracts ``L_noᵀ L_no`` with
        ``L_no = L_o⁻¹ S_on`` and ``S_on = s·k(X_o, X_new) − k(X_o, X)(K + r²I)⁻¹ k(X, X_new)``
        (block Cholesky of the joint covariance; ``L_noᵀ`` is the new block row's
        off-diagonal part).  Cost ``O(n² k + n q k + q² k)`` for ``k`` new inputs; nothing
        about earlier inputs is solved again, and ``k(X_o, X)`` is evaluated one row block
        at a time.  The covariance is built in RFP format (``k(k + 1)/2`` doubles, its lower
        triangle filled strip by strip from the kernel) and updated in place by LAPACK
        ``dsfrk``; ``V`` overwrites ``k(X, X_new)`` (``dtfsm`` with the RFP factor ``L_K``).
        """
        gp = self.public_gp
        scale = 1.0 + self.eta**2 / self.bound.kernel_scale**2
        k = len(X_new)
        if blocks is not None:  # k(X_new, X) and k(X_new, X_new), evaluated by the caller
            V = np.asfortranarray(blocks[0].T)
            S = RFPTriangle.from_dense(blocks[1])
        elif k <= _ONE_CALL_POINTS and (gp.n + k) * k <= _BLOCK_DOUBLES:
            # small: k(X_new, [X; X_new]) in ONE kernel call (a Thompson round's 64
            # candidates), no larger than one row block of ``_cross_kernel``
            both = gp.kernel(X_new, np.vstack([gp.X, X_new]))
            V = np.asfortranarray(both[:, : gp.n].T)
            S = RFPTriangle.from_dense(both[:, gp.n :])
            del both
        else:
            V = self._cross_kernel(X_new)
            S = RFPTriangle.from_columns(k, lambda c0, c1: gp.kernel(X_new[c0:], X_new[c0:c1]))
        mean = V.T @ self._alpha  # centred: μ₀ is added to the noisy values (_PathState)
        V = self._factor.solve(V, overwrite_b=True)
        S.rank_update(V, -1.0, beta=scale)
        state = self._state
        if state is None:
            return S, np.empty((len(X_new), 0)), mean
        G = self._factor.solve(V, trans=True, overwrite_b=True)
        del V  # its memory now holds G = (K + r²I)⁻¹ k(X, X_new)
        S_on = np.empty((state.q, len(X_new)), order="F")
        step = max(1, _BLOCK_DOUBLES // max(gp.n, 1))
        for i in range(0, state.q, step):
            X_o = state.X[i : i + step]
            S_on[i : i + step] = scale * gp.kernel(X_o, X_new) - gp.kernel(X_o, gp.X) @ G
        L_no = state.solve(S_on)
        S.rank_update(L_no, -1.0)
        return S, L_no.T, mean

    # ------------------------------------------------------------------ release
    def evaluate(self, X_new: ArrayLike) -> NDArray[np.float64]:
        """Values of the ``L`` released paths at ``X_new``, shape ``(L, m)``.

        Drawn from the posterior conditional on every value released so far
        (block-Cholesky extension of the joint factor), so repeated and lazy
        evaluations are consistent with one path per draw.  No privacy cost.
        ``X_new`` stays with this object: ``to_inference_data()`` exports the release's
        ``X_star`` and the inputs passed to it as ``X_star=``, not these, unless
        ``include_evaluated=True`` (under full privacy the owner may evaluate the paths at
        the private training inputs, e.g. for residuals).
        """
        return self._state.values(self._rows_of(X_new, "X_new")).T

    def _rows_of(self, X_new: ArrayLike, name: str) -> NDArray[np.intp]:
        """Rows of the path state holding ``X_new`` (drawn now if new), in its order."""
        check_input_columns(X_new, self, name)  # a DataFrame in another column order
        X_new = check_finite_array(X_new, name, ndim=2)
        if X_new.shape[1] != self.public_gp.input_dim:
            raise ValueError(
                f"{name} must have {self.public_gp.input_dim} column(s), got {X_new.shape}."
            )
        known = np.zeros(len(X_new), dtype=bool)
        if self._state is not None:
            known, where = _match_rows(X_new, self._state.X)
        if self._state is None or not known.all():  # one match when every row is known
            self._extend(_distinct_rows(X_new[~known]))
            _, where = _match_rows(X_new, self._state.X)
        return where

    def _extend(
        self,
        X_new: NDArray[np.float64],
        blocks: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> None:
        """Draw the paths at new, distinct inputs conditionally on all released values
        (``blocks``: ``k(X_new, X)`` and ``k(X_new, X_new)`` if already evaluated)."""
        S_cond, off, mean = self._conditional_covariance(X_new, blocks)
        diag = _nugget_cholesky(
            S_cond, self._nugget_variance, lambda: self._conditional_covariance(X_new)[0]
        )
        Z = self._rng.standard_normal((len(X_new), self.n_draws))
        if self._state is None:
            self._state = _PathState(X_new.shape[1], self.n_draws, self.public_gp.mean)
        self._state.append(X_new, mean, off, diag, Z)

    @property
    def released_inputs(self) -> NDArray[np.float64]:
        """All inputs at which path values were drawn so far, ``evaluate()``'s included
        (read-only; owner-side: see ``published_inputs`` for what ``to_inference_data()``
        exports)."""
        return np.empty((0, self.public_gp.input_dim)) if self._state is None else self._state.X

    @property
    def published_inputs(self) -> NDArray[np.float64]:
        """The inputs declared public: the release's ``X_star`` and every ``X_star=`` passed
        to ``to_inference_data`` (what ``to_inference_data()`` exports by default)."""
        if self._state is None:
            return np.empty((0, self.public_gp.input_dim))
        return self._state.X[self._state.published]

    @property
    def published_values(self) -> NDArray[np.float64]:
        """``(L, p)``: the values at ``published_inputs`` (what ``to_inference_data()``
        exports), in query order."""
        if self._state is None:
            return np.empty((self.n_draws, 0))
        return self._state.values(np.flatnonzero(self._state.published)).T

    @property
    def released_values(self) -> NDArray[np.float64]:
        """``(L, q)``: all values drawn so far, ``evaluate()``'s included, in query order
        (owner-side, like ``released_inputs``; ``published_values`` is what is exported)."""
        if self._state is None:
            return np.empty((self.n_draws, 0))
        return self._state.values().T

    def to_inference_data(
        self,
        variable_name: str = "f_path",
        *,
        X_star: ArrayLike | None = None,
        var_name: str | None = None,
        dims: Mapping[str, Sequence[str]] | None = None,
        coords: Mapping[str, ArrayLike] | None = None,
        observed_data: Mapping[str, ArrayLike] | None = None,
        observed_is_public: bool = False,
        predictive_sd: float | ArrayLike | None = None,
        rng: np.random.Generator | None = None,
        include_evaluated: bool = False,
    ) -> Any:
        """Released path values as ``InferenceData`` / ``DataTree`` (DP content only).

        ``posterior[variable_name]`` has dims ``(chain, draw, x_star)`` with one draw per
        released path (a posterior sample path: its spread is posterior uncertainty plus the
        privacy widening ``η``), at ``X_star`` (evaluated lazily first, free; these inputs are
        then public; the training input array itself is refused by identity) or, by default,
        at the inputs declared public so far
        (``published_inputs``: the release's ``X_star`` and earlier ``X_star=`` of this
        method).  Inputs given only to ``evaluate()`` are exported only with
        ``include_evaluated=True`` (every input drawn so far, ``released_inputs``): under
        full privacy the owner may have evaluated the paths at private inputs (stop-42
        audit: the default published them).  A copy stays in ``posterior_predictive``
        (deprecated location).  ``dims``/``coords``, ``observed_data`` (public hold-out at
        ``X_star``, ``observed_is_public=True``) and ``predictive_sd`` (``y = f + e`` in
        ``posterior_predictive``) as in ``pm_dpgp.release.release_to_inference_data``.
        The query inputs are published in ``constant_data`` (and as the coordinate): under
        full privacy pass public inputs, never the private training inputs.  ``var_name=`` is
        the keyword the other exports (``SparseQuRelease.to_inference_data``, ``dp_ppc``) use
        for the same thing; either name works.
        """
        import xarray as xr

        from pm_dpgp.release import draws_to_inference_data, flat_attrs

        if var_name is not None:  # the keyword of the other exports
            if variable_name not in ("f_path", var_name):
                raise TypeError(
                    f"got both variable_name={variable_name!r} and var_name={var_name!r}; "
                    "pass one of them."
                )
            variable_name = var_name
        if not isinstance(variable_name, str):  # e.g. to_inference_data(X_new), as for q(u)
            raise TypeError(
                "the first argument of SamplePathRelease.to_inference_data is the variable "
                f"name (a str), got {type(variable_name).__name__}; pass the inputs by "
                "keyword: to_inference_data(X_star=X_new)."
            )
        # identity only, before the path is extended (stop-45 audit: the training X passed
        # as X_star was published, as dp_ppc refuses it)
        refuse_training_inputs(X_star, self.training_source(), "X_star")
        every = check_flag(include_evaluated, "include_evaluated")
        if X_star is not None:
            rows = self._rows_of(X_star, "X_star")  # column order checked (stop 42)
        elif self._state is None:
            rows = np.empty(0, dtype=np.intp)
        else:
            rows = np.arange(self._state.q) if every else np.flatnonzero(self._state.published)
        # the row labels of the release's pandas X_star, when the export is exactly it
        labels = row_labels(X_star) if X_star is not None else None
        first = self._x_star_rows
        if X_star is None and first is not None and np.array_equal(rows, np.arange(len(first))):
            labels = first
        if len(rows) == 0:
            raise ValueError(
                "no public inputs to export: pass X_star= (public inputs), or "
                "include_evaluated=True to export the inputs given to evaluate()."
            )
        X, values = self._state.X[rows], self._state.values(rows).T
        attrs = flat_attrs("sample_path", self.metadata, n_draws=int(values.shape[0]))
        idata = draws_to_inference_data(
            {variable_name: (("x_star",), values)},
            X_star=X,
            attrs=attrs,
            constant_data=xr.Dataset({"X_star": (("x_star", "input_dim"), X)}),
            dims=dims,
            coords=coords,
            observed_data=observed_data,
            observed_is_public=observed_is_public,
            training=self.training_source(),  # identity only (RemembersTraining)
            x_star_rows=labels,
            predictive_sd=predictive_sd,
            rng=rng,
            legacy_predictive=(variable_name,),
        )
        if X_star is not None:  # exported: declared public from now on
            self._state.published[rows] = True
        return idata


def certified_kappa(
    kernel_fn: Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]],
    domain: ArrayLike,
    cov_func: Any,
) -> float:
    """The default κ of a sample-path release: a *proved* lower bound of ``k`` on the box.

    For a kernel recognised as built from decreasing stationary kernels
    (``is_stationary_decreasing``: EQ, Matérn, exponential, rational quadratic, their sums,
    products and scalings) ``k₀`` is non-increasing in every ``|h_j|`` and the minimum over
    the box is at the corner difference (``kernel_lower_bound``, ``docs/sample_paths.md`` §1).
    For any other kernel a grid check is evidence, not a proof (stop-26 audit: a scaled kernel
    peaking between the grid points), so the default is ``κ = 0``, which is always valid.  A
    caller's ``kappa=`` is checked against the same proved bound (``_check_given_kappa``).
    """
    if is_stationary_decreasing(cov_func):
        # the structure proves monotonicity; the corner-and-grid check is kept as evidence up
        # to d = 12 (same value, bit for bit) and skipped beyond (too many corners)
        box = parse_domain(domain)  # once: passed on as a Box (one warning, if any)
        return kernel_lower_bound(kernel_fn, box, assume_monotone=box.dim > 12)
    return 0.0


def require_domain_unless_stationary(stationary: bool) -> None:
    """Without a public domain only a recognised stationary kernel can be checked (the
    release's rule; ``plan.sample_path`` applies it too)."""
    if not stationary:
        raise ValueError(
            "the kernel is not recognised as stationary, so k(x, x) <= 1 cannot be checked "
            "from public information alone; give the public input domain (domain=(low, high))."
        )


def _check_given_kappa(
    kappa: float, public_gp: PublicGP, kernel_scale: float, domain: ArrayLike | None, cov: Any
) -> float:
    """A caller's κ, checked against what can be proved for the kernel the release uses.

    κ > 0 needs the public domain (without one, private inputs are not confined and a
    decreasing kernel has no positive lower bound) and must not exceed the proved bound on it:
    for a decreasing stationary kernel the value at the corner difference, ``k(lower, upper)``
    (its exact minimum over the box, evaluated now, at the kernel's current hyperparameters);
    for any other kernel 0, since its diagonal is capped and a true bound of ``k`` is not one
    of the capped ``k̃`` (stop-26 review: κ = 0.98 with a bump gave exact divergence 818 against
    a charge of 3.5 at α = 2).  A κ within 1e-9 relative above the proved value (a closed form
    against PyMC's rounded distances) is accepted, and the smaller of the two is used, so the
    bound never rests on more than the proved value.
    """
    kappa = check_kappa(kappa)
    if kappa == 0.0:
        return kappa
    if domain is None:
        raise ValueError(
            f"kappa={kappa} > 0 needs the public input domain (domain=(low, high)): without it "
            "private inputs are not confined and no positive lower bound of the kernel holds. "
            "Nothing was spent."
        )
    stationary = is_stationary_decreasing(cov)
    if stationary:
        lower, upper = parse_domain(domain)
        corner = np.asarray(public_gp._kernel(lower[None, :], upper[None, :]), dtype=np.float64)
        proved = min(1.0, max(0.0, float(corner[0, 0]) / kernel_scale**2))
    else:
        proved = 0.0
    if kappa > proved * (1.0 + 1e-9):
        why = (
            "the kernel's value at the corner difference of the domain, its minimum"
            if stationary
            else "0: the kernel is not recognised as decreasing-stationary, so no positive "
            "lower bound is proved (and its diagonal is capped at kernel_scale²)"
        )
        raise ValueError(
            f"kappa={kappa:.6g} exceeds the proved lower bound {proved:.6g} of the normalised "
            f"kernel on the domain ({why}); pass kappa <= {proved:.6g} or None. Nothing was "
            "spent."
        )
    return min(kappa, proved)


def resolve_kappa(
    kappa: float | None,
    public_gp: PublicGP,
    kernel_scale: float,
    domain: ArrayLike | None,
    cov: Any,
) -> float:
    """The κ a sample-path bound may use: ``certified_kappa`` when none is given (needs the
    domain), else the caller's κ checked by ``_check_given_kappa``.  One rule for the release,
    the Thompson loop and the selection.  ``public_gp`` is the uncapped public GP."""
    if kappa is not None:
        return _check_given_kappa(kappa, public_gp, kernel_scale, domain, cov)
    if domain is None:
        raise ValueError(
            "Give the public input domain (domain=(lower, upper)) or a kernel lower bound "
            "kappa in [0, 1] (kappa=0 is always valid but gives a weaker bound)."
        )
    return certified_kappa(lambda A, B: public_gp.kernel(A, B) / kernel_scale**2, domain, cov)


class _CappedKernel:
    """``k̃(x, x') = k(x, x') s(x) s(x')``, ``s(x) = min(1, σ/√k(x, x))``: ``k̃(x, x) ≤ σ²``.

    The sample-path bounds need ``k(x, x) ≤ kernel_scale²`` at every input, the private ones
    included, but a general kernel can only be checked at public probes (stop-26 audit: a
    scaled kernel with ``k(x, x) = 1.6·10⁵`` between probes where it is 1 gave an infinite
    Rényi divergence).  The rescaling by a positive diagonal keeps ``k̃`` positive semi-
    definite, does not depend on the data, and is the identity wherever ``k(x, x) ≤ σ²``:
    for every kernel that satisfies the bound (all stationary ones that pass the probe
    check) the values are bitwise unchanged.  ``diag=True`` gives ``min(k(x, x), σ²)``.
    """

    def __init__(self, kernel: Any, kernel_diag: Any, sigma2: float, *, diag: bool = False):
        self.kernel, self.kernel_diag, self.sigma2, self.diag = kernel, kernel_diag, sigma2, diag

    def _scale(self, X: NDArray[np.float64]) -> NDArray[np.float64] | None:
        d = np.asarray(self.kernel_diag(X), dtype=np.float64)
        over = d > self.sigma2
        if not over.any():
            return None
        out = np.ones_like(d)
        out[over] = np.sqrt(self.sigma2 / d[over])
        return out

    def __call__(self, Xa: NDArray[np.float64], *Xb: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.diag:
            return np.minimum(np.asarray(self.kernel_diag(Xa), dtype=np.float64), self.sigma2)
        K = np.asarray(self.kernel(Xa, *Xb), dtype=np.float64)
        sa = self._scale(Xa)
        sb = sa if not Xb or Xb[0] is Xa else self._scale(Xb[0])
        if sa is None and sb is None:
            return K
        ones_a = np.ones(K.shape[0]) if sa is None else sa
        ones_b = np.ones(K.shape[1]) if sb is None else sb
        return K * ones_a[:, None] * ones_b[None, :]


def capped_public_gp(public_gp: PublicGP, kernel_scale: float) -> PublicGP:
    """``public_gp`` with its kernel capped at ``kernel_scale²`` on the diagonal
    (``_CappedKernel``)."""
    s2 = float(kernel_scale) ** 2
    return dataclasses.replace(
        public_gp,
        _kernel=_CappedKernel(public_gp._kernel, public_gp._kernel_diag, s2),
        _kernel_diag=_CappedKernel(public_gp._kernel, public_gp._kernel_diag, s2, diag=True),
    )


def _public_probes(
    X_star: NDArray[np.float64], domain: ArrayLike | None, n_grid: int = 33
) -> NDArray[np.float64]:
    """Public points at which the kernel is checked: ``X_star`` and a grid over the domain.

    Never the private training inputs (``docs/errors.md``): a check on them would answer a
    question about the private data.  Repeated points are kept (every check is a maximum or
    holds pointwise; ``_check_kernel_class`` removes them itself).
    """
    if domain is None:
        return X_star
    lower, upper = parse_domain(domain)
    return np.vstack([X_star, _domain_grid(lower.tobytes(), upper.tobytes(), n_grid)])


@functools.lru_cache(maxsize=16)
def _domain_grid(lower: bytes, upper: bytes, n_grid: int) -> NDArray[np.float64]:
    """About ``n_grid`` points on a regular grid over the box (read-only, memoised per box: a
    DP Thompson loop checks the same public domain every round)."""
    lo_arr, hi_arr = np.frombuffer(lower), np.frombuffer(upper)
    d = lo_arr.size
    per_dim = max(2, int(round(n_grid ** (1.0 / d)))) if d > 1 else n_grid
    axes = [np.linspace(lo, hi, per_dim) for lo, hi in zip(lo_arr, hi_arr, strict=True)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, d)
    grid.flags.writeable = False
    return grid


_PROBE_KERNEL_MESSAGE = (
    "the kernel is NaN or infinite between public points (X_star and the domain grid, or "
    "without a domain two corners of the ±1e100 box private inputs are clipped to): check "
    "X_star (e.g. coordinates so large that squared distances overflow) and the "
    "hyperparameters, or give domain=; nothing was spent or drawn."
)


def _check_public_kernel(
    public_gp: PublicGP,
    kernel_scale: float,
    kernel_class: str,
    probes: NDArray[np.float64],
    *,
    unboxed: bool = False,
    columns: NDArray[np.float64] | None = None,
    first: int = 0,
    cov: Any = None,
    structure: KernelStructure | None = None,
) -> tuple[float, tuple[NDArray[np.float64], NDArray[np.float64]] | None]:
    """The release's checks of its public kernel setting, at the PUBLIC ``probes`` only.

    ``k(x, x) = kernel(x, x)/kernel_scale² ≤ 1`` (up to 1e-9 relative, ``docs/sample_paths.md``
    §1) and the ``kernel_class`` (``_check_kernel_class``).  ``sample_path_release`` runs it
    before its spend, and ``pm_dpgp.selection.plan_sample_path_selection`` for every candidate
    before the selection's spend, so a public setting the release would refuse is never
    charged (audit D2).  ``public_gp`` may hold no inputs (``public_gp_without_data``).
    The kernel matrix among the probes must also be finite (checked in strips, one
    ``O(p²)`` kernel evaluation, no ``p × p`` array): the release evaluates it at ``X_star``
    after its spend, so an input such as ``X_star = [[1e308]]``, whose squared distances
    overflow, is refused here instead (stop-30 audit).
    ``unboxed`` (no domain): the kernel must also be finite between two opposite corners of
    the ``±1e100`` box ``_mapped_inputs`` maps the private inputs into, or the training factor
    would fail after the spend for a dataset holding a non-finite input and not for its
    neighbour (stop-32 audit: a Matérn lengthscale of 1e-55).  The corners are not probes of
    the other checks (the exponential class check would pass on them vacuously).
    ``columns`` (the release's mapped private inputs ``X``) with ``first``, the number of
    distinct rows of ``X_star`` (which lead the probes): when ``first ≤ _ONE_CALL_POINTS`` and
    ``k(probes, [probes; X])`` has at most ``_FUSED_DOUBLES`` entries, the finiteness check is
    made on the probes' columns of that ONE kernel call, and the rows of ``X_star`` are
    returned, ``(k(X_star, X), k(X_star, X_star))`` (copies; the rest is freed), for the
    release's first values: one kernel call less per DP Thompson round (issue 13).  The
    private columns are not looked at here: the caller checks them after its spend, as the
    evaluation after the spend always did, so no refusal before the spend depends on the
    private inputs.  The call's array and the kept rows exist together for a moment (at most
    2 MiB, less than one of the 8 MiB strips of the unfused check), and the caller holds
    ``first · (n + first)`` doubles (≤ 1 MiB) through its training factor, which the
    evaluation after the spend allocates anyway.
    The kernel must be a covariance (stop-42 proof audit: ``-1 * ExpQuad`` was released with
    only the nugget as noise): ``k(x, x) ≥ 0`` at the probes, and unless ``cov`` (the PyMC
    kernel) is a covariance by construction at the public hyperparameter values
    (``kernel_structure_at``; a kernel built from the recognised decreasing stationary
    kernels that is not one is refused outright), its matrix on up
    to ``_PSD_PROBES`` distinct probes (the domain grid first) has no eigenvalue below
    ``−1e-8`` × its largest: evidence on public points, not a proof, for kernels the
    package does not recognise.
    ``structure``: ``kernel_structure_at(cov, public_gp.hyperparameters)`` when the caller
    has already derived it (the DP Thompson loop, once per run); ignored without ``cov``.
    Returns ``(max kernel(x, x)`` over the probes (the prior variance the release's warning
    on the public range uses), those two blocks or ``None)``.
    """
    # the structure at the PUBLIC hyperparameter values (stop-44 audit): a kernel built from
    # the recognised decreasing stationary kernels is trusted below (no PSD evidence, no
    # diagonal cap, no domain, the corner kappa), which only a covariance by construction at
    # these values earns; ExpQuad(1) + h ExpQuad(10) with public h = -0.7 or RatQuad with
    # public alpha = -1 passed, and exact neighbouring divergences reached 8002 and 15515
    # against a charge of 39.3 at order 1.2
    if cov is None:
        structure = None
    elif structure is None:
        structure = kernel_structure_at(cov, public_gp.hyperparameters)
    if structure is not None and not structure.covariance and is_stationary_decreasing(cov):
        raise ValueError(_NOT_PROVED_COVARIANCE)
    if unboxed:
        probes = np.vstack([probes, np.array([[-_UNBOXED], [_UNBOXED]]) * np.ones(probes.shape[1])])
    distinct = _distinct_rows(probes)
    p = len(distinct)
    blocks = None
    fused = columns is not None and 0 < first <= _ONE_CALL_POINTS
    if fused and p * (p + len(columns)) <= min(_FUSED_DOUBLES, _BLOCK_DOUBLES):
        # one call for the check and the release's k(X_star, X): only the public part (the
        # first p columns) is checked here; the caller checks the rest after its spend
        K = _eval_kernel(
            public_gp,
            distinct,
            np.vstack([distinct, columns]),
            symmetrise_equal=False,
            check_finite=False,
        )
        if not np.all(np.isfinite(K[:, :p])):
            raise ValueError(_PROBE_KERNEL_MESSAGE)
        blocks = (np.array(K[:first, p:]), np.array(K[:first, :first]))
        del K
    else:
        step = max(1, _BLOCK_DOUBLES // p)
        for i in range(0, p, step):
            try:
                public_gp.kernel(distinct[i : i + step], distinct)
            except ValueError as err:  # NaN/inf (the probes are public: so is the message)
                raise ValueError(_PROBE_KERNEL_MESSAGE) from err
    if unboxed:
        probes = probes[:-2]
    diag = public_gp.kernel_diag(probes)
    ratio = diag / kernel_scale**2
    if np.any(ratio < 0.0):
        raise ValueError(_NOT_A_COVARIANCE)
    if structure is None or not structure.covariance:
        _check_psd_at(public_gp, distinct[-_PSD_PROBES:])
    if np.any(ratio > 1 + 1e-9):
        raise ValueError(
            f"k(x, x) = kernel(x, x) / kernel_scale² reaches {ratio.max():.4g} > 1 at public "
            "points (X_star and the domain): pass kernel_scale equal to the kernel's public "
            "amplitude sd (k(x, x) <= 1, docs/sample_paths.md §1)."
        )
    _check_kernel_class(public_gp, kernel_class, kernel_scale, probes, cov)
    return float(np.max(diag)), blocks


#: At most this many public probes (the domain grid ends the probes) in the PSD evidence of
#: a kernel not recognised as a covariance (an eigenvalue problem of this size, ~1 ms).
_PSD_PROBES = 128

_NOT_A_COVARIANCE = (
    "the kernel is not a covariance (a negative variance k(x, x) or a kernel matrix with a "
    "negative eigenvalue at public points: X_star and the domain grid), e.g. a negative "
    "scale factor; the sample-path bound assumes a positive semi-definite kernel. Nothing "
    "was spent or drawn."
)


_NOT_PROVED_COVARIANCE = (
    "the kernel is not a covariance by construction at these public hyperparameter values "
    "(a scalar or constant of a sum with a negative public value, a product whose scalars "
    "are not positive, or a RatQuad alpha <= 0): the sample-path bound assumes a positive "
    "semi-definite kernel, and such a kernel need not be one (e.g. ExpQuad(1) + h "
    "ExpQuad(10) with h = -0.7). Choose hyperparameter values that make it one. Nothing was "
    "spent or drawn."
)


def _check_psd_at(public_gp: PublicGP, points: NDArray[np.float64]) -> None:
    """Refuse a kernel whose matrix at the PUBLIC ``points`` is not numerically PSD."""
    K = public_gp.kernel(points, points)
    w = np.linalg.eigvalsh(0.5 * (K + K.T))
    if w[0] < -1e-8 * max(abs(w[-1]), np.finfo(float).tiny):
        raise ValueError(_NOT_A_COVARIANCE)


def _check_kernel_class(
    public_gp: PublicGP,
    kernel_class: str,
    kernel_scale: float,
    points: NDArray[np.float64],
    cov: Any = None,
) -> None:
    """Refuse a kernel class whose sensitivity bound does not apply to this kernel.

    ``"exponential_1d"`` relies on the Markov property of ``exp(−|x − x'|/ℓ)`` in 1-D,
    ``k(a, c) = k(a, b) k(b, c)`` for ``a ≤ b ≤ c``; ``"constant"`` on ``k`` being constant.
    Both are properties of the kernel's STRUCTURE (``cov``, the PyMC kernel:
    ``is_scaled_exponential_1d``, ``is_scaled_constant``); a kernel known only as a
    function (``cov=None``) cannot use them.  Stop-42 proof audit: the numerical check at
    public points alone accepted ``Cosine(ls=1/32)``, which is 1 at every grid point, as
    constant (exact Rényi divergence 1.2× the charge), and any kernel whose two extreme
    probes are uncorrelated (EQ with ``ℓ ≤ 0.07`` on [0, 1]) as exponential.  The numerical
    check at the PUBLIC ``points`` (``_public_probes``; never the private training inputs)
    is kept on top, for the hyperparameter values.
    """
    if kernel_class == "generic":
        return
    if kernel_class not in ("exponential_1d", "constant"):
        raise ValueError(
            "kernel_class must be 'generic', 'exponential_1d' or 'constant', got "
            f"{kernel_class!r}; use one of them."
        )
    structural = is_scaled_constant if kernel_class == "constant" else is_scaled_exponential_1d
    if cov is None or not structural(cov):
        raise ValueError(
            f"kernel_class={kernel_class!r} needs a kernel built as "
            + (
                "pm.gp.cov.Constant (times positive numbers)"
                if kernel_class == "constant"
                else "one pm.gp.cov.Exponential (or Matern12) of one input dimension, times "
                "positive numbers or constants"
            )
            + "; its sensitivity bound would not hold for this one. Use kernel_class='generic'."
        )
    x = np.unique(points, axis=0)
    K = public_gp.kernel(x, x) / kernel_scale**2
    if kernel_class == "constant":
        ok = np.allclose(K, K[0, 0], rtol=1e-9, atol=1e-12)
    else:
        if x.shape[1] != 1:
            raise ValueError(
                "kernel_class='exponential_1d' needs one-dimensional inputs; use "
                "kernel_class='generic'."
            )
        if len(x) < 3:
            raise ValueError(
                "kernel_class='exponential_1d' is checked at public points (X_star and the "
                "domain), and fewer than 3 were given; pass domain=(low, high)."
            )
        a, b, c = 0, np.arange(1, len(x) - 1), len(x) - 1  # sorted: x[a] <= x[b] <= x[c]
        ok = np.allclose(K[a, c], K[a, b] * K[b, c], rtol=1e-7, atol=1e-12)
        ok = ok and np.allclose(np.diag(K), K[0, 0], rtol=1e-9)
    if not ok:
        raise ValueError(
            f"The kernel is not of class {kernel_class!r} (checked numerically at public "
            "points: X_star and the domain); its sensitivity bound would not hold. Use "
            "kernel_class='generic'."
        )


def _nugget_cholesky(
    S: RFPTriangle, nugget: float, rebuild: Callable[[], RFPTriangle]
) -> RFPTriangle:
    """Lower factor ``L`` with ``L Lᵀ = S₊ + nugget·I``, ``S₊`` the PSD part of ``S``.

    ``S`` (symmetric, RFP) is factorised in its own memory (``dpftrf``).  The nugget is
    fixed in advance (data-independent), never grown on failure: a jitter chosen by trial on
    a matrix that depends on private inputs would make the added noise data-dependent.  When
    the Cholesky factorisation of ``S + nugget·I`` fails because round-off made ``S``
    slightly indefinite, ``S`` is computed again (``rebuild``: the failed factorisation
    destroyed it and RFP keeps no second triangle), its negative eigenvalues (zero in exact
    arithmetic) are clipped and the factor is re-triangularised by a QR decomposition.
    """
    S.add_to_diagonal(nugget)
    if S.cholesky():
        return S
    w, V = eigh(rebuild().to_dense())  # eigh reads the lower triangle
    F = V * np.sqrt(np.clip(w, 0.0, None) + nugget)
    R = qr(F.T, mode="r")[0]
    L = R.T
    return RFPTriangle.from_dense(L * np.sign(np.diag(L))[None, :])


def _distinct_rows(X: NDArray[np.float64]) -> NDArray[np.float64]:
    """The rows of ``X`` without repeats, each at its first occurrence, in the original order
    (``np.unique(axis=0)`` would sort them; a stable lexicographic sort finds the same groups
    at a quarter of its cost)."""
    if len(X) < 2:
        return X
    order = np.lexsort(X.T[::-1])  # stable: each group of equal rows starts at its first row
    Xs = X[order]
    starts = np.ones(len(X), dtype=bool)
    starts[1:] = np.any(Xs[1:] != Xs[:-1], axis=1)
    return X[np.sort(order[starts])]


def _row_keys(X: NDArray[np.float64]) -> NDArray[Any]:
    """One opaque key per row, equal exactly when the rows compare equal (``−0.0`` is mapped to
    ``0.0`` first; the rows are finite)."""
    Xc = np.ascontiguousarray(X + 0.0, dtype=np.float64)
    return Xc.view(np.dtype((np.void, Xc.dtype.itemsize * Xc.shape[1]))).ravel()


def _match_rows(
    X_new: NDArray[np.float64], X_old: NDArray[np.float64]
) -> tuple[NDArray[np.bool_], NDArray[np.intp]]:
    """For each row of ``X_new``: is it a row of ``X_old``, and which one (the first).

    By sorted row keys, ``O((m_new + m_old) log m_old)`` time and linear memory (stop-32 audit:
    the ``(m_new, m_old, d)`` comparison array ran out of memory at m = 20,000 after the
    release had been charged and its paths drawn)."""
    if len(X_old) == 0 or len(X_new) == 0:
        return np.zeros(len(X_new), dtype=bool), np.zeros(len(X_new), dtype=np.intp)
    old = _row_keys(X_old)
    order = np.argsort(old, kind="stable")  # equal keys keep their original order
    keys = old[order]
    new = _row_keys(X_new)
    pos = np.minimum(np.searchsorted(keys, new), len(keys) - 1)
    found = keys[pos] == new
    return found, np.where(found, order[pos], 0).astype(np.intp)


#: What a sample-path release protects (``docs/sample_paths.md``).
PRIVACY_MODEL = "full"
NEIGHBOURING_RELATION = "replace-one (x, y); inputs and outputs private"


def _event_cost(bound: SamplePathBound, delta: float, L: int) -> float:
    """ε at ``delta`` of ``L`` paths as the ledger and the release metadata compute it (the
    event's conversion on its order grid; ``SamplePathBound.epsilon`` may be a little lower)."""
    return bound.event(L).epsilon(delta)


def _fitting_setting(bound: SamplePathBound, target: float, delta: float) -> str:
    """Say which public setting would meet ``target``: fewer paths, or a narrower ``y_bounds``.

    Public only.  The cost is non-decreasing in L (the RDP curve scales with L) and grows with
    M_Y (the mean term of eq. SP8 grows with Δ = 2B√Φ, and B with M_Y).  The planning helper
    ``paths_affordable`` gives an upper bound on L
    (its conversion is at least as tight as the event's); a binary search with the event's own
    cost finds the answer.  Every value suggested was evaluated and fits.
    """
    hi_L = paths_affordable(bound, target, delta)
    if hi_L >= 1 and _event_cost(bound, delta, 1) <= target:
        lo, hi = 1, hi_L + 1  # invariant: lo fits, hi does not (or is beyond the helper's L)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _event_cost(bound, delta, mid) <= target else (lo, mid)
        return f"Pass n_draws={lo} (the most that fit), or choose a larger epsilon."

    def fits(m: float) -> bool:
        return _event_cost(dataclasses.replace(bound, M_Y=m), delta, 1) <= target

    tiny = bound.M_Y * 1e-9
    if not fits(tiny):
        return (
            "Not even one path fits with any y_bounds: the covariance term alone costs more. "
            "Use more noise (a larger noise_sd, i.e. r2, or eta > 0; pm_dpgp.plan.sample_path "
            "gives the noise_sd needed, feasible_configurations lists (kernel_scale, r2, eta) "
            "that fit) or choose a larger epsilon."
        )
    lo_m, hi_m = tiny, bound.M_Y  # invariant: lo_m fits, hi_m does not (geometric bisection)
    for _ in range(60):
        mid_m = math.sqrt(lo_m * hi_m)
        lo_m, hi_m = (mid_m, hi_m) if fits(mid_m) else (lo_m, mid_m)
    # printed with 4 significant digits, rounded *down* so that the printed value fits too
    exact = Decimal(lo_m)
    shown = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 3), rounding=ROUND_FLOOR)
    return (
        f"One path fits with max |y - prior mean| <= {shown} over y_bounds: pass "
        f"y_bounds=(prior_mean - {shown}, prior_mean + {shown}) if that range is still publicly "
        "plausible, or use more noise (pm_dpgp.plan.sample_path gives the noise_sd needed, "
        "feasible_configurations lists (kernel_scale, r2, eta) that fit), or choose a larger "
        "epsilon."
    )


def sample_path_release(
    gpr: GPRegression,
    X_star: ArrayLike,
    *,
    n_draws: int | None = None,
    kernel_scale: float | None = None,
    y_bounds: tuple[float, float] | None = None,
    delta: float,
    epsilon: float | None = None,
    kappa: float | None = None,
    domain: ArrayLike | None = None,
    eta: float = 0.0,
    kernel_class: KernelClass = "generic",
    constant: Literal["proved", "author"] = "proved",
    sensitivity: Sensitivity = "coupled",
    cov_bound: CovBound = "inertia",
    hyperparameters: dict[str, float] | None = None,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    clip: Literal["warn"] = "warn",
    nugget: float = 1e-10,
    progressbar: bool = False,
    **deprecated: Any,
) -> SamplePathRelease:
    """Release ``n_draws`` GP posterior sample paths of a fully private dataset.

    Parameters
    ----------
    gpr:
        model from ``pm_dpgp.models.gp_regression`` with kernel ``σ² k``
        (``k(x,x) ≤ 1``), noise sd ``σ r`` and public prior mean ``μ₀``.
    X_star:
        public inputs at which the paths are first evaluated (more later, for free,
        with ``SamplePathRelease.evaluate``).
    n_draws:
        ``L``, the number of paths released (default 1; formerly ``n_paths``).
    kernel_scale:
        the public kernel scale (amplitude sd) ``σ``; ``k = kernel / σ²`` must satisfy
        ``k(x, x) ≤ 1`` (formerly ``sigma``).
    y_bounds:
        public range ``(lower, upper)`` of the responses; they are clipped to it, so the
        centred responses satisfy ``|y − μ₀| ≤ M_Y = max(|lower − μ₀|, |upper − μ₀|)``, the
        bound of Maciazek's Thm. (``M_Y`` is the half-width when the prior mean ``μ₀`` is the
        midpoint).  Formerly ``y_bound=M``, i.e. ``y_bounds=(μ₀ − M, μ₀ + M)``.
    delta:
        δ at which ε is reported (the ledger composes the RDP curve itself).
    epsilon:
        target ε at ``delta`` for the ``n_draws`` paths.  Here ε is an *output* of the public
        setting (n, σ, r², M_Y, κ, η, L); a setting that costs more is refused with
        ``ValueError`` before anything is spent or drawn, and the message says what would fit
        (the largest affordable ``n_draws`` from
        ``paths_affordable``, or the largest
        centred bound); ``pm_dpgp.plan.sample_path`` answers this before any data.
        ``epsilon`` or ``ledger`` (or both) must be given: with neither the
        release is refused (issue 15).
    kappa, domain:
        lower bound ``κ`` of ``k`` on the public input domain, or the domain from which
        it is computed: an interval ``(low, high)`` or one ``(low, high)`` pair per input
        dimension; private inputs outside the box are clipped into it and NaN coordinates
        set to its centre, silently (how many depends on the private data,
        ``docs/errors.md``), so that the bound holds.  For a
        kernel not recognised as stationary the domain is required: ``k(x, x) ≤ 1`` is
        checked on it, never at the private inputs, and the diagonal is capped at
        ``kernel_scale²`` everywhere (``capped_public_gp``).  Default κ: ``certified_kappa``
        (the corner value for a decreasing stationary kernel, else 0).  A given κ > 0 needs
        the domain and must not exceed that proved value (``ValueError`` before any spend).
    eta:
        extra prior-GP noise scale ``η`` (0 for none).
    kernel_class:
        which mean-sensitivity bound applies.
    constant:
        must be ``"proved"`` (``Δ = 2 B √Φ``).  ``"author"`` (``√2 B √Φ``, the author's code
        constant) is **refused** with ``ValueError`` before anything is computed, spent or
        drawn: exact neighbouring pairs violate it (``docs/sample_paths.md`` §6).  It stays
        available as ``SamplePathBound(..., constant="author")`` for comparison.
    sensitivity:
        which proved mean-sensitivity bound the accounting uses: ``"coupled"`` (default;
        eq. SP11, ``docs/sample_paths.md`` §3.11: never larger,
        e.g. ε 4.52 → 2.54 at n = 100, σ = 1, r = 3, κ = √0.1, δ = 1e-4) or the paper's
        ``"paper"`` (``Δ = 2B√Φ``, eq. SP4).
    cov_bound:
        covariance term: ``"inertia"`` (default, eq. SP10) or the paper's ``"paper"`` (2ψ).
    hyperparameters:
        public values for any hyperparameter that has a prior in ``gpr``.
    ledger:
        charged with the ``RdpCurveEvent`` of the ``n_draws`` paths before any path is drawn;
        a setting it cannot afford is refused with ``BudgetExceededError``.
    rng:
        ``None`` (default): the paths are drawn from a fresh Generator seeded from OS entropy
        (``noise_source = "numpy_os_entropy"``; float code, ``docs/secure_noise.md``, "Sample
        paths").  A NumPy Generator: the simulation mode, for tests and reproducible
        notebooks; its seed is never stored.
    clip:
        ``"warn"`` (clip to the public bounds, silently); ``"raise"`` is refused.
    nugget:
        relative white-noise variance added to the released values for numerical
        stability (post-processing; recorded).
    progressbar:
        show a progress bar over the stages (factorisation, draw), as PyMC's samplers do.
    """
    check_input_columns(X_star, gpr)  # a DataFrame in another column order
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    # parsed once and passed on as a Box: a 2 × 2 array read both ways warns once, not at
    # each of the five places that read the box
    domain = None if domain is None else parse_domain(domain)
    func = "sample_path_release"
    n_draws = renamed("n_paths", "n_draws", deprecated, n_draws, func=func)
    kernel_scale = require(
        renamed("sigma", "kernel_scale", deprecated, kernel_scale, func=func),
        "kernel_scale",
        func=func,
    )
    y_bound_old = deprecated.pop("y_bound", None)  # centred at the prior mean: converted below
    if y_bound_old is not None and y_bounds is not None:
        raise TypeError(
            f"{func}() got both 'y_bound' (deprecated) and 'y_bounds'; pass only y_bounds=."
        )
    reject_unexpected(deprecated, func=func)
    if y_bound_old is None:
        require(y_bounds, "y_bounds", func=func)
    if constant != "proved":
        raise ValueError(
            f"sample_path_release needs constant='proved', got {constant!r}. The author's "
            "constant sqrt(2)*B*sqrt(Phi) is not a valid bound (exact neighbouring pairs exceed "
            "it, docs/sample_paths.md section 6), so it cannot be used for a release; nothing "
            "was spent or drawn. For comparison use SamplePathBound(..., constant='author')."
        )
    require_exact_regression(gpr, "sample_path_release")
    if epsilon is None and ledger is None:
        raise ValueError(
            "sample_path_release needs a target epsilon= or a ledger=: its cost is an output of "
            "the public setting and can be enormous (e.g. epsilon in the thousands for a few "
            "paths of a small dataset). Pass e.g. epsilon=1.0 (the setting is refused if it "
            "costs more, with a setting that fits), or a Ledger with a budget; nothing was "
            "spent or drawn."
        )
    target = None if epsilon is None else check_epsilon(epsilon)
    # The posterior draw *is* the mechanism, so there is no discretised form of it: without a
    # Generator, use a fresh one seeded from OS entropy (np.random.default_rng() does so),
    # never a fixed or global seed.  Float caveat: docs/secure_noise.md, "Sample paths".
    noise_source = SAMPLE_PATH_OS_ENTROPY if rng is None else SIMULATION
    rng = np.random.default_rng() if rng is None else check_rng(rng)
    delta = check_delta(delta)
    kernel_scale = check_scale(kernel_scale, "kernel_scale")
    eta = check_positive(eta, "eta", allow_zero=True)
    n_draws = check_count(1 if n_draws is None else n_draws, "n_draws")
    nugget = check_positive(nugget, "nugget")
    if nugget < NUGGET_FLOOR:
        raise ValueError(
            f"nugget must be at least {NUGGET_FLOOR:g} (relative to the kernel scale squared), "
            f"got {nugget:g}: conditioning later rounds on a (nearly) singular factor amplifies "
            "round-off without bound; nothing was spent."
        )
    # full privacy: X_star is published (the release's inputs and every export), so the
    # training input array itself is refused, by identity or shared memory only, before
    # anything is read, spent or drawn (as the export and dp_ppc do; stop 45)
    refuse_training_inputs(X_star, gpr, "X_star")
    x_star_rows = row_labels(X_star)  # a hold-out Series must match them (stop 42)
    X_star = check_finite_array(X_star, "X_star", ndim=2)
    check_clip_option(clip)
    # full privacy: the inputs and outputs are read as stored, unchecked (a refusal on a
    # non-finite value, before or after the spend, would depend on one private record); only
    # their shapes are checked here, and bad records are mapped record by record
    X_raw, y_raw = gpr.unchecked_data()
    X_raw = private_array(X_raw, "X", ndim=2)
    y_raw = private_array(y_raw, "y", ndim=1)
    if X_raw.shape[0] != y_raw.shape[0]:
        raise ValueError(
            f"X has {X_raw.shape[0]} rows but y has {y_raw.shape[0]}; nothing was spent."
        )
    public_gp = dataclasses.replace(
        gpr.public_gp_without_data(hyperparameters), X=_mapped_inputs(X_raw, domain)
    )
    X = public_gp.X
    if X_star.shape[1] != X.shape[1]:
        raise ValueError(
            f"X_star must have {X.shape[1]} column(s) like the inputs, got shape "
            f"{X_star.shape}; pass inputs with that many columns."
        )
    cov = getattr(gpr, "cov_func", None)
    # one answer for the three uses below: a domain is required otherwise, the kernel check
    # shares its call with the first draw only then, and every other kernel is capped
    stationary = is_stationary_decreasing(cov)
    if domain is not None:
        lower, upper = parse_domain(domain)
        if lower.size != X.shape[1]:
            raise ValueError(
                f"domain has {lower.size} dimension(s) but the inputs have {X.shape[1]}; give "
                "one (low, high) pair per input dimension."
            )
        # private inputs are clipped into the public domain, silently (docs/errors.md)
        public_gp = dataclasses.replace(public_gp, X=np.clip(X, lower, upper))
        X = public_gp.X
    else:
        require_domain_unless_stationary(stationary)
    probes = _public_probes(X_star, domain)
    X_first = _distinct_rows(X_star)  # where the first values are drawn
    # the release's peak, n(n+1)/2 + n m + m(m+1)/2 doubles (the packed training factor,
    # V = L_K⁻¹k(X, X*) and the packed covariance; docs/sample_paths.md, "Memory"): refused
    # here, before the spend and before the O(m²) kernel check (stop-44 audit: 8·10⁴ rows of
    # X_star were charged, then MemoryError).  n and m are public
    n_rows, m_first = X.shape[0], len(X_first)
    check_doubles_fit(
        n_rows * (n_rows + 1) // 2 + n_rows * m_first + m_first * (m_first + 1) // 2,
        f"a sample-path release of n = {n_rows} records at {m_first} distinct X_star rows",
    )
    prior_var, blocks = _check_public_kernel(
        public_gp,
        kernel_scale,
        kernel_class,
        probes,
        unboxed=domain is None,
        columns=X if stationary else None,  # capped below otherwise: a different kernel
        first=len(X_first),
        cov=cov,
        structure=getattr(gpr, "_kernel_structure", None),
    )
    # k(x, x) <= kernel_scale² at every input, not only at the probes.  A decreasing
    # stationary kernel has a constant diagonal, so the probe check above proves it; any
    # other kernel is capped (the identity wherever the bound holds)
    proved = getattr(gpr, "_proved_kappa", None)
    if kappa is not None and proved is not None and check_kappa(kappa) <= proved:
        kappa = float(kappa)  # checked by the caller (the Thompson loop) for this public GP
    else:
        kappa = resolve_kappa(kappa, public_gp, kernel_scale, domain, cov)
    if not stationary:
        public_gp = capped_public_gp(public_gp, kernel_scale)
    r2 = public_gp.noise_var / kernel_scale**2
    mu0 = public_gp.mean
    if y_bound_old is not None:  # deprecated centred bound M: the interval (μ₀ − M, μ₀ + M)
        y_bounds = bounds_from_centred("y_bound", {"y_bound": y_bound_old}, None, mu0, func=func)
    lower, upper, M_Y = centred_bound(y_bounds, mu0)
    bound = SamplePathBound(
        n=X.shape[0],
        kernel_scale=kernel_scale,
        r2=r2,
        M_Y=M_Y,
        kappa=float(kappa),
        eta=eta,
        kernel_class=kernel_class,
        constant=constant,
        cov_bound=cov_bound,
        sensitivity=sensitivity,
    )
    check_mean_resolvable(bound.n, bound.r2)  # public; before the spend
    event = sample_path_event(bound, n_draws)
    cost = event.epsilon(delta)
    if target is not None and cost > target * (1.0 + BUDGET_RTOL):
        raise ValueError(
            f"{n_draws} sample path(s) with this public setting cost epsilon={cost:.6g} at "
            f"delta={delta:.3g}, above the target epsilon={target:.6g}; nothing was spent or "
            f"drawn. {_fitting_setting(bound, target, delta)}"
        )
    # public settings only (n is public under replace-one neighbours), before any spend
    check_draws_fit(n_draws, len(X_first))  # 10**13 paths were charged, then MemoryError
    warn_public_settings(
        epsilon=cost,
        delta=delta,
        n_records=X.shape[0],
        range_width=upper - lower,
        prior_sd=float(np.sqrt(prior_var + public_gp.noise_var)),
        range_name="y_bounds",
        bounds=(lower, upper),
        centre=mu0,
    )
    if ledger is not None:  # refuses before any path is drawn (and a reused Generator state)
        ledger.spend(
            event,
            privacy_model=PRIVACY_MODEL,
            neighbouring_relation=NEIGHBOURING_RELATION,
            rng=rng if noise_source == SIMULATION else None,
        )
    # responses are clipped to the public range, silently (non-finite ones to the prior mean,
    # then into the range), so |y − μ₀| <= M_Y holds for every record
    y = np.asarray(y_raw, dtype=np.float64)
    y = np.clip(np.where(np.isfinite(y), y, mu0), lower, upper)
    with progress_bar(3, "Sample paths", enabled=progressbar) as bar:
        factor = _training_factor(public_gp)  # the O(n³) factorisation
        bar.advance("factorised")
        alpha = factor.cho_solve(y - mu0)
        bar.advance("solved")
        release = _finish_sample_path_release(
            public_gp,
            factor,
            bound,
            event,
            delta,
            n_draws,
            eta,
            alpha,
            rng,
            noise_source,
            kappa=float(kappa),
            kernel_class=kernel_class,
            constant=constant,
            kernel_scale=kernel_scale,
            r2=r2,
            y_bounds=(lower, upper),
            nugget=nugget,
            input_columns=input_columns_record(gpr),
            domain=None if domain is None else domain.pairs.tolist(),
        )
        # the values at X_star (``evaluate(X_star)``), from the check's kernel call if it
        # made k(X_star, X) and k(X_star, X_star); their private part is checked only now
        if blocks is not None and not np.all(np.isfinite(blocks[0])):
            raise ValueError(
                "The kernel evaluated to NaN/inf between X_star and the (clipped) training "
                f"inputs at these hyperparameters ({public_gp.hyperparameters})."
            )
        release._extend(X_first, blocks)
        release._state.published[:] = True  # X_star was declared public
        if len(X_first) == len(X_star):  # the default export is X_star, row for row
            release._x_star_rows = x_star_rows
        bar.advance(f"drew {n_draws} path(s)")
    # weak reference (identity only): to_inference_data refuses the training outputs as
    # observed_data (stop-45 audit)
    return release.remember_training(gpr)


#: Without a domain, input coordinates are clipped to ``±_UNBOXED`` (squared distances stay
#: finite in the kernel; any real data lie far inside).
_UNBOXED = 1e100


def _mapped_inputs(X: NDArray[np.float64], domain: ArrayLike | None) -> NDArray[np.float64]:
    """The private inputs after the release's record-wise map (``docs/errors.md``).

    With a public ``domain``: a NaN coordinate becomes the box's centre, then every coordinate
    is clipped into the box (±inf to its faces).  Without one (a stationary kernel and a given
    ``kappa``): NaN becomes 0 and coordinates are clipped to ``±1e100``.  A record-wise map
    keeps neighbouring datasets neighbours, so the guarantee is unchanged; with ``kappa > 0``
    and no domain it still rests on the caller's claim that ``k ≥ κ`` between the (mapped)
    records, which is why a domain is the recommended input.  Never reported.
    """
    if domain is None:
        return np.clip(np.where(np.isnan(X), 0.0, X), -_UNBOXED, _UNBOXED)
    lower, upper = parse_domain(domain)
    if lower.size != X.shape[1]:  # reported, with the same message, by the caller's check
        return X
    return np.clip(np.where(np.isnan(X), 0.5 * (lower + upper), X), lower, upper)


@functools.lru_cache(maxsize=32)
def sample_path_event(bound: SamplePathBound, n_draws: int = 1) -> RdpCurveEvent:
    """The privacy event ``sample_path_release`` charges for ``n_draws`` paths under ``bound``.

    Memoised per (immutable, hashable) bound: a DP Thompson round asks the ledger whether it
    can afford this very object before the release spends it, so the ledger composes it
    once (``Ledger.can_afford`` then ``Ledger.spend``) and its ε is converted once.
    """
    return bound.event(n_draws, label=f"{n_draws} GP posterior sample path(s) (Maciazek)")


def _training_factor(public_gp: PublicGP) -> RFPTriangle:
    """Lower Cholesky factor of ``k(X, X) + σ_n² I`` in RFP format (``n(n + 1)/2`` doubles).

    The kernel matrix's lower triangle is evaluated strip by strip straight into the packed
    array and factorised there (``dpftrf``), so no ``n × n`` array exists unless the
    factorisation fails.  The inputs ``X`` are private here, so no jitter is chosen by trial
    (stop-31 audit: the retry schedule of ``PublicGP.posterior`` added ``10⁻¹⁰·mean diag ·
    10ᵏ`` depending on whether the private inputs made the computed matrix indefinite, i.e. a
    data-dependent ridge); as for the nugget (``_nugget_cholesky``), a failure means round-off
    made the computed ``K`` slightly indefinite, and its negative eigenvalues (zero in exact
    arithmetic) are clipped before the fixed, public ``σ_n²`` is added.
    """
    X = public_gp.X

    def build() -> RFPTriangle:
        return RFPTriangle.from_columns(len(X), lambda c0, c1: public_gp.kernel(X[c0:], X[c0:c1]))

    return _nugget_cholesky(build(), public_gp.noise_var, build)


def _finish_sample_path_release(
    public_gp: PublicGP,
    factor: RFPTriangle,
    bound: SamplePathBound,
    event: RdpCurveEvent,
    delta: float,
    n_draws: int,
    eta: float,
    alpha: NDArray[np.float64],
    rng: np.random.Generator,
    noise_source: str,
    *,
    kappa: float,
    kernel_class: str,
    constant: str,
    kernel_scale: float,
    r2: float,
    y_bounds: tuple[float, float],
    nugget: float,
    input_columns: list[str] | None = None,
    domain: list[list[float]] | None = None,
) -> SamplePathRelease:
    """The release object and its public metadata (nothing private but ``alpha``), complete
    here: the metadata is read-only once the release exists (stop-49 audit)."""
    epsilon = event.epsilon(delta)
    metadata = {
        "privacy_model": PRIVACY_MODEL,
        "neighbouring_relation": NEIGHBOURING_RELATION,
        "n_draws": n_draws,
        "epsilon": epsilon,
        "delta": delta,
        "alpha_max": bound.alpha_max,
        "kappa": kappa,
        "V": bound.V,
        "Phi": bound.Phi,
        "mean_sensitivity": bound.Delta,
        "tau": bound.tau,
        "kernel_class": kernel_class,
        "sensitivity_constant": constant,
        "sensitivity_bound": bound.sensitivity,
        "cov_bound": bound.cov_bound,
        "kernel_scale": kernel_scale,
        "r2": r2,
        "eta": eta,
        "y_bounds": y_bounds,
        "M_Y": bound.M_Y,
        # the model's public noise variance (r2 = noise_var / kernel_scale**2), under the key
        # every other regression release uses (docs/workflow.md; missing until stop 47)
        "noise_var": public_gp.noise_var,
        "prior_mean": public_gp.mean,
        "kernel": public_gp.description,
        "hyperparameters": public_gp.hyperparameters,
        "hyperparameter_source": public_gp.hyperparameter_source,
        "nugget_variance": nugget * kernel_scale**2,
        "privacy_event": event.to_metadata(),
        "noise_source": noise_source,
        "seed_policy": SEED_POLICY_SIMULATION
        if noise_source == SIMULATION
        else SEED_POLICY_OS_ENTROPY,
        # a DataFrame's column names (schema), so that evaluate() can refuse another order,
        # and the box the inputs were clipped into and κ computed on (a reader could not
        # recover it; stop-41 walkthrough)
        "input_columns": input_columns,
        "domain": domain,
    }
    return SamplePathRelease(
        public_gp=public_gp,
        bound=bound,
        n_draws=n_draws,
        delta=delta,
        epsilon=epsilon,
        eta=eta,
        _alpha=alpha,
        _factor=factor,
        _rng=rng,
        metadata=metadata,
        event=event,
        _nugget_variance=nugget * kernel_scale**2,
    )
