r"""Binning baselines of Smith, Álvarez, Zwiessele & Lawrence (AISTATS 2018, §4).

The paper compares cloaking with "a DP query using the Laplace mechanism on bin means
[Dwork and Roth, 2014, §3.4]": "we bin the data, and add samples from the Laplace distribution
with scale Δf/ε where Δf is the bin sensitivity (equal to the maximum change possible in height,
divided by the number of data points in that bin), then fit a GP to these, now noisy, bin
values", with an EQ kernel or "a kernel that models a latent function which treats the
observations as integrals over each bin".

**Privacy model: label privacy.**  The sensitivity ``d / n_j`` uses the bin count ``n_j``, which is
public only if the inputs are: the paper's baselines are label-private (inputs public, outputs
private), like cloaking, and compose on the same ledger.

**Mechanism** (``binned_release``).  Public bins ``B_1..B_K`` (axis-aligned boxes from public
edges), public counts ``n_j``, labels clipped to the public ``y_bounds`` (width ``d``).  For each
non-empty bin, ``m̃_j = m_j + Lap(b_j)`` with ``b_j = Δ_j / ε``, ``Δ_j = d / n_j``.  Proof:
changing one label changes only the mean of its own bin, by at most ``d / n_j``; so the vector
``u = (m_j / Δ_j)_j`` has L1 sensitivity 1 and ``ũ = u + Lap(1/ε)^K`` is ε-DP (Dwork & Roth 2014,
Thm. 3.6); ``m̃ = Δ ⊙ ũ`` is post-processing.  Pure ε-DP, charged as a
``pm_dpgp.accounting.LaplaceEvent`` (noise multiplier 1/ε) per draw.  Empty bins hold no
label: their value is the public ``empty_value`` (no noise, no cost).  Inputs outside the bins
are public; ``out_of_range`` decides: ``"raise"`` (default), ``"drop"`` (those records are not
used) or ``"clip"`` (assigned to the nearest edge bin).

**Noise source** (as ``pm_dpgp.mechanisms.noise`` for the Gaussian releases).  A NumPy
Generator (``rng=``) is the simulation mode: continuous ``rng.laplace`` at the scale ``S/ε``
added to the computed sums ``s_j`` (below), ``S = simulation_unit_sensitivity(r) ≥ 1 + 4u +
2r``, then divided by the public ``n_j``, i.e. ``b_j = d S/(n_j ε)``.  ``rng=None``
(default) is secure: the centred sums ``s_j = Σ_{i∈B_j} (y_i − c)/d`` (``c`` the midpoint;
``|s_j − s′_j| ≤ 1 + 4u``, plus twice a public round-off bound ``r``, ``summation_rounding``:
``math.fsum`` for bins above 256 records, so ``r ≤ 2u·n_max``) are rounded to the grid
``γ`` (``2^(⌊log₂(1/ε)⌋ − 20)`` for ε > 1, ``2^-20`` for 2^-31 < ε ≤ 1, coarser below),
OpenDP's discrete Laplace on ``i64`` vectors (Canonne, Kamath & Steinke 2020) is added with
its privacy map at the integer L1 sensitivity ``⌈(1 + 4u + 2r)/γ⌉ + 1`` (``u`` the unit
round-off: the computed width may round below ``hi − lo``), and ``m̃_j = c + d γ ñ_j / n_j``.
The event is then a ``pm_dpgp.accounting.PureDpEvent`` at the map's ε (≤ the requested ε);
the Laplace scale actually used exceeds ``d/(n_j ε)`` by a relative ``≈ 2γ``: ``2^-19`` for
2^-31 < ε ≤ 1, less for ε > 1, whatever the bin counts (stop-43 audit: it was 127× at
ε = 10⁻⁸, and 222 % at n_max = 10⁸; ``docs/binning.md``).  A width ``d``, sensitivity or
scale below the normal float64 range is refused before any charge.

**GP on the DP bin means** (``binned_gp``): post-processing.  ``method="integral"`` models
``m̃_j`` as the average of ``f`` over ``B_j`` (``pm_dpgp.gp.integral``), ``"point"`` as
``f`` at the bin centre; the observation variance is ``noise_sd²/n_j + 2 b_j²`` (the
averaged observation noise plus the Laplace variance, moment-matched by a Gaussian).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import (
    check_count,
    check_draws_fit,
    check_epsilon,
    check_finite_array,
    check_finite_number,
    check_flag,
    check_positive,
    check_public_bounds,
    check_scale,
    clip_to_bounds,
    library_instance,
    private_array,
    public_real_array,
    real_or_nan,
    refuse_misaligned_rows,
    row_labels,
    warn_public_settings,
)
from pm_dpgp.accounting import LaplaceEvent, Ledger, PrivacyEvent, PureDpEvent
from pm_dpgp.gp.integral import box_box_kernel, point_box_kernel, point_point_kernel
from pm_dpgp.gp.linalg import cho_solve_lower, jittered_cholesky
from pm_dpgp.mechanisms.label.output_perturbation import LABEL_PRIVACY_MODEL, LABEL_RELATION
from pm_dpgp.mechanisms.noise import (
    GRID_BITS,
    INT_LIMIT,
    SEED_POLICY_SECURE,
    SEED_POLICY_SIMULATION,
    SIMULATION,
    discretise,
    simulation_rng,
)
from pm_dpgp.models._common import check_input_columns, input_columns_record
from pm_dpgp.release import Release

__all__ = [
    "BinningNoise",
    "Bins",
    "binned_gp",
    "binned_predict",
    "binned_release",
    "binning_noise",
    "make_bins",
    "occupied_bins",
    "simulation_unit_sensitivity",
    "summation_rounding",
]

OutOfRange = Literal["raise", "drop", "clip"]
_U = float(np.finfo(np.float64).eps) / 2.0
#: The smallest normal float64: below it a quotient keeps no relative precision (stop-43 audit:
#: y_bounds = (0, 5e-324) gave the Laplace scale 0, i.e. no noise, charged ε).
_TINY = float(np.finfo(np.float64).tiny)
#: Bins with more records than this are summed with ``math.fsum`` (correctly rounded), the
#: others by ``np.bincount`` (recursive summation, error ≤ γ_{255}·256 < 10⁻¹¹): the round-off
#: bound of the secure mode no longer grows like n_max² u (stop-43 audit; docs/binning.md).
_FSUM_FROM = 256
#: The secure grid's integer noise scale stays below about 2^_SCALE_BITS (module docstring).
_SCALE_BITS = 50
SECURE_LAPLACE = "opendp_discrete_laplace"


@dataclass(frozen=True)
class Bins:
    """A public grid of axis-aligned boxes: strictly increasing ``edges`` per input dimension.

    Bin ``j`` (row-major over the dimensions) is ``Π_d [e_d[i_d], e_d[i_d + 1])``; the last
    interval of each dimension is closed on the right.
    """

    edges: tuple[NDArray[np.float64], ...]

    def __post_init__(self) -> None:
        # every Bins is checked, also one built directly (stop-36 audit: list edges failed in
        # centres() after the spend, duplicate or NaN edges were charged, then refused)
        if not isinstance(self.edges, tuple) or not self.edges:
            raise ValueError("Bins.edges must be a non-empty tuple of edge arrays (make_bins).")
        checked = []
        for e in self.edges:
            arr = check_finite_array(e, "edges", ndim=1).copy()
            if arr.size < 2 or np.any(np.diff(arr) <= 0):
                raise ValueError("each edge array needs >= 2 strictly increasing values.")
            arr.setflags(write=False)
            checked.append(arr)
        object.__setattr__(self, "edges", tuple(checked))

    @property
    def dim(self) -> int:
        return len(self.edges)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(e) - 1 for e in self.edges)

    @property
    def n_bins(self) -> int:
        return int(np.prod(self.shape))

    def boxes(
        self, index: NDArray[np.intp] | None = None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(lower, upper)`` corners, each ``(n_bins, dim)`` in bin order, or of the bins
        with the flat indices ``index`` only (e.g. the occupied ones)."""
        if index is None:
            idx = np.indices(self.shape).reshape(self.dim, -1)
        else:
            idx = np.stack(np.unravel_index(np.asarray(index, dtype=np.intp), self.shape))
        lower = np.stack([e[i] for e, i in zip(self.edges, idx, strict=True)], axis=1)
        upper = np.stack([e[i + 1] for e, i in zip(self.edges, idx, strict=True)], axis=1)
        return lower, upper

    def centres(self) -> NDArray[np.float64]:
        lower, upper = self.boxes()
        return _midpoint(lower, upper)

    def counts(
        self, X: ArrayLike, out_of_range: OutOfRange = "raise"
    ) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """``(index, counts)`` of the PUBLIC ``X``: ``index`` and the number of rows per bin.

        Refuses inputs of which none falls in a bin (nothing to release).
        """
        idx = self.index(X, out_of_range)
        counts = np.bincount(idx[idx >= 0], minlength=self.n_bins)  # public (inputs public)
        if not (counts > 0).any():
            raise ValueError("no input falls in any bin: nothing to release.")
        return idx, counts

    def index(self, X: ArrayLike, out_of_range: OutOfRange = "raise") -> NDArray[np.intp]:
        """Flat bin index of each row of the PUBLIC ``X``; ``-1`` for dropped rows.

        ``out_of_range``: ``"raise"`` refuses inputs outside the grid (they are public, so the
        error may name them), ``"drop"`` returns -1 for them, ``"clip"`` uses the nearest bin.
        """
        if out_of_range not in ("raise", "drop", "clip"):
            raise ValueError(
                f"out_of_range must be 'raise', 'drop' or 'clip', got {out_of_range!r}."
            )
        X = check_finite_array(X, "X", ndim=2)
        if X.shape[1] != self.dim:
            raise ValueError(f"X has {X.shape[1]} column(s), the bins {self.dim}.")
        inside = np.ones(X.shape[0], dtype=bool)
        per_dim = []
        for d, e in enumerate(self.edges):
            inside &= (X[:, d] >= e[0]) & (X[:, d] <= e[-1])
            per_dim.append(np.clip(np.searchsorted(e, X[:, d], side="right") - 1, 0, len(e) - 2))
        if out_of_range == "raise" and not inside.all():
            bad = np.flatnonzero(~inside)
            raise ValueError(
                f"{bad.size} public input row(s) lie outside the bin edges (first: row {bad[0]}, "
                f"{X[bad[0]].tolist()}); widen the edges or pass out_of_range='drop' or 'clip'."
            )
        flat = np.ravel_multi_index(tuple(per_dim), self.shape)
        if out_of_range == "drop":
            flat = np.where(inside, flat, -1)
        return flat


def _midpoint(lower: NDArray[np.float64], upper: NDArray[np.float64]) -> NDArray[np.float64]:
    """``(lower + upper)/2`` of finite edges, finite: where the sum overflows (edges beyond
    ~9e307), ``lower/2 + upper/2`` (stop-47 audit: the bin [1e308, 1.5e308] had the centre
    inf, the ``X_star`` of a charged release, and ``binned_gp(method="point")`` refused it)."""
    with np.errstate(over="ignore"):
        total = lower + upper
    return np.where(np.isfinite(total), 0.5 * total, 0.5 * lower + 0.5 * upper)


def make_bins(edges: Sequence[ArrayLike] | ArrayLike) -> Bins:
    """Public bins from edges: one increasing array per input dimension (or one array for 1-D)."""
    if library_instance(edges, "pandas", "Series", "Index"):  # read as scalars (stop 41)
        edges = edges.to_numpy()
    if isinstance(edges, Iterator):  # a generator was "a number of bins" (stop-41 fuzz)
        raise ValueError(
            "make_bins takes the bin edges as an array or a list of arrays, got an iterator; "
            "pass list(...) of it."
        )
    # a list or tuple is never one number; np.ndim of it would build one array of all the
    # edges and fail on a grid with different numbers of edges per dimension (stop-45 audit)
    if not isinstance(edges, Sequence) and np.ndim(edges) == 0:
        raise ValueError(
            f"make_bins takes the bin edges, not a number of bins (got {edges!r}); pass e.g. "
            "np.linspace(low, high, k + 1) for k bins on [low, high]."
        )
    if (
        isinstance(edges, np.ndarray)
        and edges.ndim == 1
        or (isinstance(edges, Sequence) and edges and np.ndim(edges[0]) == 0)
    ):
        edges = [edges]  # type: ignore[list-item]
    out = tuple(edges)  # type: ignore[arg-type]
    if not out:
        raise ValueError("edges must hold at least one dimension.")
    return Bins(out)  # checked in Bins.__post_init__


@dataclass(frozen=True)
class BinningNoise:
    """The Laplace noise of ``binned_release`` for given public bin counts (no label touched).

    ``scale[j]`` is the Laplace scale of bin mean ``j`` (0 for an empty bin): ``d S/(n_j ε)``
    in simulation mode (``S = simulation_unit_sensitivity``), ``d/n_j`` times the discrete
    Laplace's unit scale on its grid in secure mode; ``event`` is what the ledger is
    charged for ``n_draws`` draws.
    """

    event: PrivacyEvent
    sensitivity: NDArray[np.float64]  # Δ_j = d / n_j, 0 for an empty bin
    scale: NDArray[np.float64]
    info: dict[str, object]
    measurement: object | None  # the OpenDP measurement (secure mode), None in simulation
    grid: float  # the discrete Laplace's grid γ (secure mode), 0.0 in simulation


#: The largest integer sensitivity handed to OpenDP's i64 discrete Laplace (below 2⁶³, where
#: its conversion fails with a raw "not representable by i64").
_I64_SAFE = 2**62


def _secure_laplace(
    size: int, epsilon: float, rounding: float, n_max: int
) -> tuple[object, float, float, float, dict[str, object]]:
    """The discrete Laplace on the grid (module docstring): measurement, γ, ε, unit scale.

    The centred sums ``|s_j| ≤ n_j/2`` on the grid must stay below ``INT_LIMIT``, where
    ``discretise`` clamps them (a projection: private, but a silently wrong mean; the
    stop-30 review released 0.04 for a bin whose labels all sat at the upper bound 2):
    with ``n_max/(2γ)`` above it the setting is refused before any charge (public counts).
    """
    import opendp.prelude as dp

    dp.enable_features("contrib")
    gamma = _grid(epsilon)
    if (0.5 * n_max + 1.0) / gamma > INT_LIMIT:
        raise ValueError(
            f"epsilon={epsilon!r} with {n_max} records in a bin is too large for the secure "
            "discrete Laplace: the bin sums on its grid (step 2^-20 for epsilon <= 1, "
            "~2^-20 / epsilon above) would not fit 64-bit integers. Use a smaller epsilon or "
            "the simulation mode (rng=np.random.default_rng(seed)); nothing was spent or drawn."
        )
    # 1 + 4u: the computed width d may round below hi − lo (relative u)
    d_int = math.ceil((1.0 + 4.0 * _U + 2.0 * rounding) / gamma) + 1
    if d_int > _I64_SAFE:  # OpenDP's i64 vectors: a public setting, refused before any charge
        raise ValueError(
            f"epsilon={epsilon!r} is too large for the secure discrete Laplace: its integer "
            "sensitivity on the grid would not fit OpenDP's 64-bit integers. Use a smaller "
            "epsilon (the noise is then already far below the grid's resolution) or the "
            "simulation mode (rng=np.random.default_rng(seed)); nothing was spent or drawn."
        )
    scale = d_int / epsilon
    if _TAIL_SCALES * scale > 2.0**62:  # the noisy sums would saturate OpenDP's i64
        raise ValueError(
            f"epsilon={epsilon!r} is too small for the secure discrete Laplace: its integer "
            "noise would exceed OpenDP's 64-bit integers, which saturate (stop-43 audit: "
            "epsilon=1e-20 released the clamp value, 6.5e32, instead of Laplace noise). Use a "
            "larger epsilon or the simulation mode (rng=np.random.default_rng(seed)); nothing "
            "was spent or drawn."
        )
    meas = None
    for _ in range(80):
        meas = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T="i64"), size=int(size)),
            dp.l1_distance(T="i64"),
            scale,
        )
        if float(meas.map(d_int)) <= epsilon:
            break
        scale *= 1.0 + 1e-12
    eps_map = float(meas.map(d_int))  # type: ignore[union-attr]
    info: dict[str, object] = {
        "noise_source": SECURE_LAPLACE,
        "sampler": f"opendp {version('opendp')} make_laplace on i64 vectors (discrete Laplace, "
        "Canonne, Kamath & Steinke 2020), OS entropy",
        "grid": gamma,
        "integer_sensitivity": d_int,
        "integer_scale": scale,
        "seed_policy": SEED_POLICY_SECURE,
    }
    return meas, gamma, eps_map, gamma * scale, info


def _grid(epsilon: float) -> float:
    """The secure grid γ, a power of two: ``2^(⌊log₂(1/ε)⌋ − 20)`` for ε > 1 (the noise, of
    scale 1/ε, is then below the unit sensitivity), ``2^-20`` for ε ≤ 1 as long as the integer
    noise scale ``≈ 1/(γε)`` stays below ``2^_SCALE_BITS`` (ε > 2^-31), coarser beyond.

    Before the stop-43 audit γ followed 1/ε for every ε: at ε = 10⁻⁸ the grid step was 64
    and the scale used 128× the closed form; now it exceeds it by 2^-19.
    """
    e = math.frexp(1.0 / epsilon)[1] - 1  # ⌊log₂(1/ε)⌋, exact
    return math.ldexp(1.0, e - GRID_BITS if e < 0 else max(-GRID_BITS, e - _SCALE_BITS))


def simulation_unit_sensitivity(rounding: float) -> float:
    """``S ≥ 1 + 4u + 2r``: the most two neighbours' *computed* normalised bin sums ``ŝ_j``
    differ by (``docs/binning.md``), rounded up (the factor ``1 + 2u`` covers the float
    evaluation).  The simulation mode draws ``Laplace(S/ε)`` on ``ŝ_j`` and divides by the
    public ``n_j`` afterwards (post-processing), so its loss is ε for the computed sums."""
    return (1.0 + 4.0 * _U + 2.0 * float(rounding)) * (1.0 + 2.0 * _U)


def summation_rounding(counts: NDArray[np.int64]) -> float:
    """Public bound ``r`` on the round-off of every bin's computed sum ``ŝ_j`` (docs/binning.md).

    The terms satisfy ``|t_i| ≤ 1``.  A bin with ``n ≤ _FSUM_FROM`` records is summed by
    ``np.bincount`` (recursive summation in data order): ``|ŝ − s| ≤ γ_{n−1} n`` (Higham 2002,
    eq. 4.4); a larger bin by ``math.fsum``, correctly rounded (Shewchuk 1997), within one ulp
    even on a platform that double-rounds (Python docs): ``|ŝ − s| ≤ 2u|s| ≤ 2u n``.
    """
    n_max = int(counts.max())
    n_small = int(counts[counts <= _FSUM_FROM].max(initial=0))
    k = max(n_small - 1, 0)
    r_small = k * _U / (1.0 - k * _U) * n_small
    r_fsum = 2.0 * _U * n_max if n_max > _FSUM_FROM else 0.0
    return max(r_small, r_fsum)


def _bin_sums(
    idx: NDArray[np.intp], terms: NDArray[np.float64], counts: NDArray[np.int64]
) -> NDArray[np.float64]:
    """``Σ_{i∈B_j} terms_i`` for the occupied bins, within ``summation_rounding(counts)``.

    ``np.bincount`` for all bins, then the bins above ``_FSUM_FROM`` records again with
    ``math.fsum`` after one sort of their records by bin (a loop over those bins only, at
    most ``n/_FSUM_FROM`` of them).
    """
    sums = np.bincount(idx, weights=terms, minlength=counts.size)
    big = np.flatnonzero(counts > _FSUM_FROM)
    if big.size:
        in_big = counts[idx] > _FSUM_FROM
        order = np.argsort(idx[in_big])  # any order within a bin: fsum rounds the exact sum
        parts = np.split(terms[in_big][order], np.cumsum(counts[big])[:-1])
        # the array itself, not a list: no Python float per record (fsum rounds once either
        # way; a list of a 10⁸-record bin would take 3 GB)
        sums[big] = [math.fsum(part) for part in parts]
    return sums[counts > 0]


def binning_noise(
    counts: NDArray[np.int64],
    epsilon: float,
    y_bounds: tuple[float, float],
    n_draws: int,
    *,
    secure: bool,
) -> BinningNoise:
    """Laplace scales and privacy event of the bin means for public ``counts``.

    Shared by ``binned_release`` and ``pm_dpgp.plan.binned`` (the plan's event is the
    release's).  Δ_j = d / n_j for an occupied bin (Smith et al. 2018 §4).
    """
    lower, upper = float(y_bounds[0]), float(y_bounds[1])
    d = upper - lower
    offset = abs(lower + 0.5 * d) + 0.5 * d  # |public part| of a released mean: |c| + d/2
    occupied = counts > 0
    sens = np.where(occupied, d / np.maximum(counts, 1), 0.0)  # Δ_j = d / n_j
    label = "Laplace bin means (Smith et al. 2018 §4)"
    n_max = int(counts.max())
    # the closed-form scale is the smaller of the two modes': refused here, before OpenDP.
    # Smallest: Δ_j, b_j = Δ_j/ε and the normalised scale 1/(n_j ε) the simulation draws at;
    # a subnormal one has lost its relative precision (stop-43 audit: d = 5e-324 gave b = 0)
    sens_min, sens_max = d / n_max, float(np.max(sens))
    _check_scale(
        min(sens_min, sens_min / epsilon, 1.0 / (n_max * epsilon)), sens_max / epsilon, offset
    )
    rounding = summation_rounding(counts)
    if not check_flag(secure, "secure"):
        info: dict[str, object] = {
            "noise_source": SIMULATION,
            "seed_policy": SEED_POLICY_SIMULATION,
            "summation_rounding": rounding,
        }
        # b_j = Δ_j S / ε with S = simulation_unit_sensitivity: the computed sums of
        # neighbours differ by up to 1 + 4u + 2r, not 1 (stop-47 audit)
        unit = simulation_unit_sensitivity(rounding)
        return BinningNoise(
            LaplaceEvent(1.0 / epsilon, label, count=n_draws),
            sens,
            sens * (unit / epsilon),
            info,
            None,
            0.0,
        )
    meas, gamma, eps_map, unit_scale, info = _secure_laplace(
        int(occupied.sum()), epsilon, rounding, n_max
    )
    info["summation_rounding"] = rounding
    _check_scale(sens_min * unit_scale, sens_max * unit_scale, offset)
    return BinningNoise(
        PureDpEvent(eps_map, label, count=n_draws), sens, sens * unit_scale, info, meas, gamma
    )


#: Laplace draws beyond this many scales have probability e^-40 (4e-18) per coordinate.
_TAIL_SCALES = 40.0


def _check_scale(b_min: float, b_max: float, offset: float = 0.0) -> None:
    """Refuse, before any charge, Laplace scales that are not normal positive floats, or whose
    draws would overflow float64.

    ``b_min`` is the smallest scale (or sensitivity) computed, ``b_max`` the largest and
    ``offset`` bounds the public part of a released value (``|centre| + d/2``).  Stop-36
    audit: bounds of ±8e307 or ε = 1e-300 were charged and released only ``inf``; stop-43
    audit: a subnormal y_bounds width gave the scale 0 (no noise) or rounded it down by 33 %.
    """
    if not b_min >= _TINY:  # also NaN
        raise ValueError(
            f"a bin sensitivity or Laplace scale of the bin means would be {b_min:.3g}, below "
            f"the smallest normal float64 ({_TINY:.3g}): it would lose its relative precision "
            "(a subnormal scale rounds down, to 0 at worst: too little noise). Use wider "
            "y_bounds (rescale the outputs, e.g. multiply y and y_bounds by 1e300) or a "
            "smaller epsilon; nothing was spent or drawn."
        )
    if not (math.isfinite(b_max) and offset + _TAIL_SCALES * b_max < 1e300):
        raise ValueError(
            f"the Laplace scale of the bin means would be {b_max:.3g}, beyond float64 "
            "arithmetic: use a larger epsilon or narrower y_bounds (rescale the outputs); "
            "nothing was spent or drawn."
        )


def binned_release(
    X: ArrayLike,
    y: ArrayLike,
    bins: Bins,
    *,
    epsilon: float,
    y_bounds: tuple[float, float],
    bounds_are_public: bool = False,
    out_of_range: OutOfRange = "raise",
    empty_value: float | None = None,
    n_draws: int = 1,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
) -> Release:
    """ε-DP Laplace bin means (Smith et al. 2018, §4; Dwork & Roth 2014, §3.4).

    ``X`` public inputs ``(n, dim)``, ``y`` private outputs clipped silently to ``y_bounds``.
    Returns a ``pm_dpgp.release.Release`` at the bin centres (``variable_name =
    "bin_mean_dp"``) whose ``noise_factor`` holds the columns of ``diag(√2 b_j)`` for the
    occupied bins (the Laplace noise covariance ``diag(2 b_j²)``; empty bins have none) and
    whose metadata holds the public edges and, for the occupied bins only, their flat indices,
    counts, sensitivities and scales (``occupied_bins``, ``occupied_counts``,
    ``occupied_sensitivity``, ``occupied_laplace_scale``; read them with ``occupied_bins``).
    Everything is validated before the ledger is charged; the ledger is charged before any noise.
    """
    # rows are paired by position: a DataFrame X and a Series y with different indexes were
    # paired silently (stop-41 fuzz; every other entry point refused them)
    refuse_misaligned_rows((X, y), ("X", "y"))
    epsilon = check_epsilon(epsilon)
    n_draws = check_count(n_draws, "n_draws")
    rng = simulation_rng(rng)
    if not isinstance(bins, Bins):
        raise TypeError("bins must come from make_bins(edges).")
    lo, hi = check_public_bounds(y_bounds, bounds_are_public=bounds_are_public)
    d = hi - lo
    centre = lo + 0.5 * d
    fill = centre if empty_value is None else check_finite_number(empty_value, "empty_value")
    X_arr = check_finite_array(X, "X", ndim=2)
    y_arr = private_array(y, "y", ndim=1)
    if X_arr.shape[0] != y_arr.shape[0]:
        raise ValueError(
            f"X and y must have the same number of rows, got {X_arr.shape[0]} and {y_arr.shape[0]}."
        )
    idx, counts = bins.counts(X_arr, out_of_range)
    used = idx >= 0
    occ = np.flatnonzero(counts > 0)  # the occupied bins: only they carry data and noise
    warn_public_settings(epsilon=epsilon)
    check_draws_fit(n_draws, bins.n_bins)  # a clear refusal, not MemoryError (stop 40)
    noise = binning_noise(counts, epsilon, (lo, hi), n_draws, secure=rng is None)
    event, scale = noise.event, noise.scale
    # everything public the release returns is built before the spend: a failure here (e.g.
    # memory for the n_bins × n_bins noise factor, or the metadata) spends nothing (stop-36
    # audit; stop 43: the per-bin metadata lists were built after the spend and failed with
    # MemoryError on a 4000 × 4000 grid, charged; they now hold the occupied bins only)
    X_star = bins.centres()
    # one column per occupied bin (empty bins carry no noise): the covariance diag(2 b²)
    # without the zero columns of np.diag (10⁴ bins, 3,858 occupied: 309 MB instead of 800)
    noise_factor = np.zeros((bins.n_bins, occ.size))
    noise_factor[occ, np.arange(occ.size)] = math.sqrt(2.0) * scale[occ]
    draws = np.full((n_draws, bins.n_bins), fill)
    n_occ = counts[occ].astype(np.float64)
    # the whole release's guarantee, under the keys of every release type: pure DP, so the
    # n_draws Laplace releases compose to n_draws · ε; then the per-draw calibration
    total = float(event.count * event.eps)  # type: ignore[attr-defined]
    metadata: dict[str, object] = {
        "privacy_model": LABEL_PRIVACY_MODEL,
        "neighbouring_relation": LABEL_RELATION,
        "epsilon": total,
        "delta": 0.0,
        "epsilon_per_draw": float(event.eps),  # type: ignore[attr-defined]  # OpenDP's map (secure)
        "delta_per_draw": 0.0,
        "epsilon_total": total,
        "input_columns": input_columns_record((X, y)),  # a DataFrame's column names, or None
        "data_sensitivity": d,
        "clipping_bounds": [lo, hi],
        "bin_edges": [np.asarray(e).tolist() for e in bins.edges],
        # lists, not arrays: metadata holds JSON-serialisable values only (Release docstring;
        # stop-30 serialisation audit: json.dumps(release.metadata) raised TypeError); for the
        # occupied bins only, in flat bin order (stop 43: one Python object per bin of the
        # grid, 1.6·10⁷ of them, failed after the spend); empty bins have count 0, no noise
        "occupied_bins": occ.tolist(),
        "occupied_counts": counts[occ].tolist(),
        "occupied_sensitivity": noise.sensitivity[occ].tolist(),
        "occupied_laplace_scale": scale[occ].tolist(),
        "empty_value": fill,
        "out_of_range": out_of_range,
        "privacy_event": event.to_metadata(),
        **noise.info,
    }
    y_c = clip_to_bounds(y_arr[used], (lo, hi))
    # centred, normalised sums s_j = Σ (y_i − c)/d, |terms| ≤ 1 (≤ ½ unless the midpoint
    # rounds): sensitivity 1 + 4u in one coordinate, round-off ≤ summation_rounding(counts)
    # no floating-point error state may depend on the labels: a label within 1e-308 of the
    # centre underflowed in the division, FloatingPointError under np.seterr(all="raise")
    # before the spend (stop 48); the sums' round-off, underflow included, is in S
    with np.errstate(under="ignore"):
        s = _bin_sums(idx[used], (y_c - centre) / d, counts)
    if ledger is not None:
        ledger.spend(
            event,
            label=event.label,
            privacy_model=LABEL_PRIVACY_MODEL,
            neighbouring_relation=LABEL_RELATION,
            rng=rng,
        )
    if rng is not None:
        # the noise is drawn on the centred normalised sums ŝ_j at S/ε (their computed
        # values move by up to S = 1 + 4u + 2r, round-off included; stop-47 audit), computed
        # without d; the division by the public n_j, the centre and the width come last, as
        # post-processing.  Adding the noise after the centre rounded the private mean at the
        # centre's magnitude first (stop-30 audit: 12.5× the sensitivity at y_bounds =
        # (1e15, 1e15 + 1)); drawing it at b_j/d lost b_j's precision for a subnormal d
        # (stop-43 audit)
        unit = simulation_unit_sensitivity(float(noise.info["summation_rounding"]))
        noisy = (s + rng.laplace(0.0, unit / epsilon, (n_draws, occ.size))) / n_occ
        draws[:, occ] = centre + d * noisy
    else:
        with np.errstate(under="ignore"):  # s is private (above)
            ints = discretise(s, noise.grid).tolist()
        meas = noise.measurement
        sums = noise.grid * np.array([meas(ints) for _ in range(n_draws)], dtype=np.float64)  # type: ignore[operator]
        draws[:, occ] = centre + d * sums / n_occ[None, :]
    return Release(
        mechanism="laplace_binning",
        draws=draws,
        X_star=X_star,
        noise_factor=noise_factor,
        metadata=metadata,
        variable_name="bin_mean_dp",
    ).remember_training((X, y))  # identity only (Release.remember_training)


def _bins_of(release: Release) -> Bins:
    if release.mechanism != "laplace_binning":
        raise ValueError(f"expected a binned release, got {release.mechanism!r}.")
    return make_bins([np.asarray(e, dtype=np.float64) for e in release.metadata["bin_edges"]])


def occupied_bins(
    release: Release,
) -> tuple[NDArray[np.intp], NDArray[np.int64], NDArray[np.float64]]:
    """``(index, counts, laplace_scale)`` of the occupied bins of a binned release.

    The metadata keys ``occupied_bins`` / ``occupied_counts`` / ``occupied_laplace_scale``
    (since stop 43); a release written before, with one ``bin_counts`` / ``laplace_scale``
    entry per bin of the grid, is read too.
    """
    md = release.metadata
    if "occupied_bins" in md:
        index = np.asarray(md["occupied_bins"], dtype=np.intp)
        counts = np.asarray(md["occupied_counts"], dtype=np.int64)
        scale = np.asarray(md["occupied_laplace_scale"], dtype=np.float64)
    else:  # the dense lists of a release from before stop 43
        dense = np.asarray(md["bin_counts"], dtype=np.int64)
        index = np.flatnonzero(dense > 0)
        counts = dense[index]
        scale = np.asarray(md["laplace_scale"], dtype=np.float64)[index]
    return index, counts, scale


def binned_predict(
    release: Release, X_star: ArrayLike, *, out_of_range: OutOfRange = "clip"
) -> NDArray[np.float64]:
    """Simple binning: each test point gets its bin's DP mean (``(n_draws, m)``; post-processing).

    Empty bins give the release's public ``empty_value``; test points outside the grid are
    assigned the nearest bin (``"clip"``, default), refused (``"raise"``) or NaN (``"drop"``).
    """
    bins = _bins_of(release)
    check_input_columns(X_star, release)  # a DataFrame in another column order (stop 43)
    idx = bins.index(X_star, out_of_range)
    out = release.draws[:, np.maximum(idx, 0)]
    out[:, idx < 0] = np.nan
    return out


def binned_gp(
    release: Release,
    X_star: ArrayLike,
    *,
    lengthscale: ArrayLike,
    kernel_scale: float,
    noise_sd: float,
    mean: float | None = None,
    method: Literal["integral", "point"] = "integral",
) -> Release:
    """GP regression on the DP bin means, predicted at public ``X_star`` (post-processing).

    ``method="integral"``: ``m̃_j = mean of f over B_j + e_j``; ``"point"``: ``m̃_j = f(centre_j) +
    e_j``; ``e_j ~ N(0, noise_sd²/n_j + 2 b_j²)``.  The prior is ``GP(mean, EQ(lengthscale,
    kernel_scale))`` with a public ``mean`` (default the midpoint of the clipping bounds).  Empty
    bins are not used.  The posterior mean is linear in the DP means, ``μ + A (m̃ − μ)``, so the
    returned release's ``noise_factor`` is ``A diag(√2 b)`` (the propagated DP-noise covariance).
    """
    bins = _bins_of(release)
    Xs = check_finite_array(X_star, "X_star", ndim=2)
    if Xs.shape[1] != bins.dim:
        raise ValueError(f"X_star has {Xs.shape[1]} column(s), the bins {bins.dim}.")
    kernel_scale = check_scale(kernel_scale, "kernel_scale")
    noise_sd = check_positive(noise_sd, "noise_sd")
    if method not in ("integral", "point"):
        raise ValueError(f"method must be 'integral' or 'point', got {method!r}.")
    check_input_columns(X_star, release)  # a DataFrame in another column order
    x_star_rows = row_labels(X_star)  # a hold-out Series must match them (stop 42)
    md = release.metadata
    lo, hi = md["clipping_bounds"]  # type: ignore[misc]
    mu = 0.5 * (lo + hi) if mean is None else real_or_nan(mean, "mean")
    if not math.isfinite(mu):
        raise ValueError(f"mean must be a finite number (the public prior mean), got {mean!r}.")
    ls = np.atleast_1d(public_real_array(lengthscale, "lengthscale"))  # True was 1 (stop 40)
    if ls.ndim != 1 or ls.size not in (1, bins.dim) or not np.all(np.isfinite(ls) & (ls > 0)):
        raise ValueError(
            f"lengthscale must be one positive number or one per input dimension ({bins.dim}), "
            f"got {lengthscale!r}."
        )
    lengthscale = ls if ls.size > 1 else float(ls[0])
    occ, counts, b = occupied_bins(release)
    lower, upper = bins.boxes(occ)
    if method == "integral":
        K = box_box_kernel(lower, upper, lower, upper, lengthscale, kernel_scale)
        K_sb = point_box_kernel(Xs, lower, upper, lengthscale, kernel_scale)
    else:
        centres = _midpoint(lower, upper)
        K = point_point_kernel(centres, centres, lengthscale, kernel_scale)
        K_sb = point_point_kernel(Xs, centres, lengthscale, kernel_scale)
    if not (np.isfinite(K).all() and np.isfinite(K_sb).all()):  # public values only
        raise ValueError(
            f"the {method} kernel between the bins (and X_star) is not finite for these edges "
            f"and lengthscale={lengthscale!r}: bins far wider than ~1e300 times the "
            "lengthscale overflow the box integrals. Rescale the inputs (the "
            "bin edges and X_star) or choose a lengthscale comparable to the bin widths; "
            "method='point' avoids the box integrals."
        )
    K = 0.5 * (K + K.T)
    K[np.diag_indices_from(K)] += noise_sd**2 / counts + 2.0 * b**2
    L, jitter = jittered_cholesky(K, overwrite_a=True)
    A = cho_solve_lower(L, K_sb.T).T  # (m, K_occ)
    draws = mu + (release.draws[:, occ] - mu) @ A.T
    metadata = dict(md)
    metadata.update(
        {
            "post_processing": f"GP on DP bin means ({method} EQ kernel)",
            "gp_lengthscale": np.broadcast_to(
                np.asarray(lengthscale, dtype=float), (bins.dim,)
            ).tolist(),
            "gp_kernel_scale": kernel_scale,
            "gp_noise_sd": noise_sd,
            "gp_mean": mu,
            "gp_jitter": jitter,
        }
    )
    return Release(
        mechanism=f"laplace_binning_{method}_gp",
        draws=draws,
        X_star=Xs,
        noise_factor=A * (math.sqrt(2.0) * b)[None, :],
        metadata=metadata,
        x_star_rows=x_star_rows,
    ).remember_training(release.training_source())  # the bin release's data, identity only
