r"""Multi-resolution partition features: a piecewise-constant GP prior on the public box.

The feature basis of ``docs/thompson_tree.md`` §10.  Level ``j = 1, …, J`` splits every
dimension of the public box ``[a, b]`` into ``2ʲ`` equal intervals, so the box into ``2^{jd}``
cells; the features of ``x`` are the weighted indicators of the cell holding ``x`` at each
level,

.. math:: φ(x) = (w_1 e_{c_1(x)}, …, w_J e_{c_J(x)}),\qquad
          f(x) = μ + φ(x)^\top v,\ v \sim N(0, I),

a Gaussian process with kernel ``k(x, x') = Σ_j w_j² 1[c_j(x) = c_j(x')]`` — the sum of
``J`` positive semi-definite cell-indicator kernels, i.e. a Haar-type (dyadic, Pólya-tree-like)
multi-resolution prior: nearby points share more cells and are more correlated.  Every ``x``
lies in exactly one cell per level, so ``‖φ(x)‖² = Σ_j w_j²`` **exactly**, for every ``x`` in
any dimension, and ``R_φ`` is that norm rounded up (by at most 4 ulps): the public
feature-norm bound the tree loop's sensitivity needs (§3, §9.3) holds, attained up to those
ulps, with no kernel argument and no clipping.

Why this basis for Thompson sampling under DP noise (§10): a posterior sample is constant on
the finest cells, so its maximiser is a whole cell and the candidate chosen there is uniform
in that cell.  When the DP noise keeps the posterior close to the prior, the loop therefore
samples cells, not box edges; a smooth basis (Nyström features) puts the maximiser of a
near-prior draw at the boundary of the box, where the benchmark objectives are low (§8).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_count, check_finite_array, check_scale, public_real_array
from pm_dpgp.gp.linalg import norm_rounded_up

__all__ = ["DyadicPartitionFeatures", "MAX_PARTITION_FEATURES"]

#: Largest number of features (cells over all levels) accepted: the full-privacy loop with
#: ``posterior="prefix"`` releases ``M (M + 3) / 2`` numbers per step (``M`` by default).
MAX_PARTITION_FEATURES = 4096


def _public_box(lower: ArrayLike, upper: ArrayLike) -> tuple[NDArray, NDArray]:
    """The public box's corners as 1-D float64 arrays: finite, ``upper > lower`` and a width
    ``upper − lower`` that is a finite float64 (``cells`` divides by it: at ``(-1e308,
    1e308)`` it overflowed and every point fell into the first cell; stop-46 audit)."""
    # True as 1 and "1" as 1.0 were accepted (stop-44 audit): public_real_array refuses them
    lo = np.atleast_1d(public_real_array(lower, "lower"))
    hi = np.atleast_1d(public_real_array(upper, "upper"))
    if lo.ndim != 1 or lo.shape != hi.shape:
        raise ValueError("lower and upper must be scalars or 1-D arrays of equal length.")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
        raise ValueError("the public box needs finite bounds with upper > lower.")
    with np.errstate(over="ignore"):
        width = hi - lo
    if not np.all(np.isfinite(width)):
        raise ValueError(
            "the public box is so wide that upper - lower overflows float64; rescale the inputs."
        )
    return lo, hi


class DyadicPartitionFeatures:
    """Indicator features of nested dyadic partitions of a public box (module docstring).

    Parameters
    ----------
    lower, upper:
        the public box (one value per input dimension, or scalars).
    levels:
        ``J ≥ 1``: level ``j`` has ``2ʲ`` cells per dimension.
    kernel_scale:
        the prior sd of ``f(x) − μ``, ``R_φ = √Σ w_j²``; the default weights are equal,
        ``w_j = kernel_scale / √J``.
    weights:
        public per-level weights ``w_1, …, w_J`` instead (then ``kernel_scale`` must be None).
    """

    name = "dyadic partition"

    def __init__(
        self,
        lower: ArrayLike,
        upper: ArrayLike,
        levels: int,
        kernel_scale: float | None = 1.0,
        weights: ArrayLike | None = None,
    ) -> None:
        lo, hi = _public_box(lower, upper)
        J = check_count(levels, "levels")
        d = int(lo.size)
        # the finest level alone has 2^(J d) cells: decided before the list is built
        # (levels=10**400 built it for ever; stop-40 fuzz)
        too_many = J * d > MAX_PARTITION_FEATURES.bit_length()
        cells = [] if too_many else [2 ** (j * d) for j in range(1, J + 1)]
        if too_many or sum(cells) > MAX_PARTITION_FEATURES:
            count = f"at least 2^{J * d}" if too_many else str(sum(cells))
            raise ValueError(
                f"{J} levels in {d} dimension(s) give {count} features (more than "
                f"{MAX_PARTITION_FEATURES}); use fewer levels."
            )
        if weights is None:
            if kernel_scale is None:
                raise ValueError("give kernel_scale or weights.")
            w = np.full(J, check_scale(kernel_scale, "kernel_scale") / math.sqrt(J))
        else:
            if kernel_scale is not None and kernel_scale != 1.0:
                raise ValueError("give kernel_scale or weights, not both.")
            # a private read-only copy: R_φ below is charged for these weights, so a later
            # change to the caller's array must not change the features (stop-26 audit)
            w = np.array(np.atleast_1d(public_real_array(weights, "weights")), copy=True)
            if w.shape != (J,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w):
                raise ValueError(f"weights must be {J} finite non-negative values, not all 0.")
        lo, hi = np.array(lo, copy=True), np.array(hi, copy=True)
        for arr in (w, lo, hi):
            arr.flags.writeable = False
        self.lower, self.upper, self.levels, self.weights = lo, hi, J, w
        self.d = d
        offsets = np.concatenate([[0], np.cumsum(cells)]).astype(np.intp)
        offsets.flags.writeable = False
        self.offsets = offsets
        self.R = norm_rounded_up(w)  # ‖w‖, never below the exact norm of these weights
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        # immutable once built: the loop charges R_φ for these weights and cells, so a later
        # assignment (``f.weights = …``) must not change the features (stop-27 audit)
        if getattr(self, "_frozen", False):
            raise AttributeError(
                f"DyadicPartitionFeatures is immutable (the charged norm bound depends on it); "
                f"build a new one instead of setting {name!r}."
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"DyadicPartitionFeatures is immutable; cannot delete {name!r}.")

    def __reduce__(self) -> tuple[Any, ...]:
        # copies and pickles go through __init__: read-only arrays and R recomputed
        return (
            DyadicPartitionFeatures,
            (self.lower, self.upper, self.levels, None, np.array(self.weights)),
        )

    @classmethod
    def from_lengthscale(
        cls,
        lower: ArrayLike,
        upper: ArrayLike,
        lengthscale: ArrayLike,
        kernel_scale: float = 1.0,
    ) -> DyadicPartitionFeatures:
        """Levels from a public lengthscale: the finest cells at most half a lengthscale wide.

        ``J = max(1, ⌈log₂(2 max_i (b_i − a_i)/ℓ_i)⌉)`` — features of size ``ℓ`` are then
        resolved by at least two finest cells per dimension (docs/thompson_tree.md §10).
        """
        lo, hi = _public_box(lower, upper)
        ell = public_real_array(lengthscale, "lengthscale")
        if ell.ndim > 1 or ell.size not in (1, lo.size):  # NumPy's broadcast message before
            raise ValueError(
                f"lengthscale must be one value or one per dimension ({lo.size}), got shape "
                f"{ell.shape}."
            )
        ell = np.broadcast_to(ell.reshape(-1), lo.shape)
        if not (np.all(np.isfinite(ell)) and np.all(ell > 0)):
            raise ValueError("lengthscale must be positive and finite.")
        with np.errstate(over="ignore"):
            ratio = float(np.max(2.0 * (hi - lo) / ell))
        if not math.isfinite(ratio):  # ceil(log2(inf)) raised OverflowError (stop-46 audit)
            raise ValueError(
                f"the box is more than 1e308 lengthscales wide (lengthscale {lengthscale!r}): "
                f"its levels would give more than {MAX_PARTITION_FEATURES} features; use a "
                "larger lengthscale or a smaller box."
            )
        levels = max(1, math.ceil(math.log2(ratio) - 1e-12)) if ratio > 1 else 1
        return cls(lo, hi, levels, kernel_scale=kernel_scale)

    @property
    def M(self) -> int:
        """Number of features: the cells of all levels."""
        return int(self.offsets[-1])

    @property
    def description(self) -> str:
        w = ", ".join(f"{v:.6g}" for v in self.weights)
        return (
            f"dyadic partition of the box [{self.lower.tolist()}, {self.upper.tolist()}], "
            f"levels 1..{self.levels} (2^j cells per dimension), weights ({w}); kernel "
            "sum_j w_j^2 1[same cell at level j]"
        )

    def cells(self, X: ArrayLike) -> NDArray[np.intp]:
        """``(n, J)`` flat cell index of each row at each level (points outside the box go to
        the nearest cell; the upper bound belongs to the last cell)."""
        X = check_finite_array(X, "X", ndim=2)
        if X.shape[1] != self.d:
            raise ValueError(f"X must have {self.d} column(s), got {X.shape[1]}.")
        unit = (X - self.lower) / (self.upper - self.lower)
        out = np.empty((len(X), self.levels), dtype=np.intp)
        for j in range(self.levels):  # J ≤ 12 levels, vectorised over the points
            g = 2 ** (j + 1)
            idx = np.clip(np.floor(unit * g), 0, g - 1).astype(np.intp)
            out[:, j] = np.ravel_multi_index(tuple(idx.T), (g,) * self.d)
        return out

    def __call__(self, X: ArrayLike) -> NDArray[np.float64]:
        """``(n, M)`` features: ``w_j`` at the cell of each level, 0 elsewhere (rows of norm
        exactly ``‖w‖ ≤ R_φ``)."""
        cells = self.cells(X)
        Phi = np.zeros((len(cells), self.M))
        rows = np.arange(len(cells))[:, None]
        Phi[rows, self.offsets[:-1] + cells] = self.weights
        return Phi

    def kernel(self, X: ArrayLike, X2: ArrayLike) -> NDArray[np.float64]:
        """Prior covariance ``Σ_j w_j² 1[c_j(x) = c_j(x')]`` (the GP of the module docstring)."""
        a, b = self.cells(X), self.cells(X2)
        same = a[:, None, :] == b[None, :, :]
        return same.astype(np.float64) @ (self.weights**2)

    def metadata(self) -> dict[str, Any]:
        """Public description for the InferenceData attributes."""
        return {
            "feature_basis": self.name,
            "partition_levels": self.levels,
            "partition_weights": self.weights.tolist(),
        }
