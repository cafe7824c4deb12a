"""The data owner's own check that "public" choices were not taken from the private data.

Releases and model builders never compare a public choice (inducing inputs ``Z``, a clipping
range, a prior mean, a hold-out set) with the private data: the answer of such a comparison
is a function of the private data, and a caller who picks the value could use the refusal
as a free oracle (e.g. search for ``max(y)`` with the bound, or test whether ``z`` is a
private input).  ``docs/errors.md`` lists every check in the release paths.

The comparisons are still useful to the *data owner*, who holds the data anyway: this
function runs them on request.  Its answer depends on the private data: do not show it to
anyone who may not see the data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import bounds_from_centred, real_or_nan, reject_unexpected
from pm_dpgp.gp.sparse import count_matching_rows
from pm_dpgp.models.sparse import InducingFromDataError

__all__ = ["DEFAULT_RTOL", "DEFAULT_Z_RTOL", "DataDerivedChoiceError", "check_public_choices"]


class DataDerivedChoiceError(ValueError):
    """A value meant to be public coincides with a statistic of the private data."""


#: Default tolerance of ``check_public_choices`` for values of y, relative to the public range.
DEFAULT_RTOL: float = 1e-3
#: Default tolerance for inducing inputs, relative to the span of ``Z``: much tighter, because
#: inputs fill their domain and a public grid often passes close to some private input (with
#: 1e-3, a 15-point grid over 40 uniform inputs on the same interval is flagged in about 2 of 3
#: draws).  1e-9 catches copies
#: with round-off (``X[:5] + 1e-12``, a float32 round trip is *not* caught: rounded to ~1e-7).
DEFAULT_Z_RTOL: float = 1e-9


def _near_rows(Z: NDArray[np.float64], X: NDArray[np.float64], tol: NDArray[np.float64]) -> bool:
    """Whether some row of ``Z`` lies within ``tol`` (per column, max-norm) of a row of ``X``."""
    step = max(1, 2_000_000 // max(X.shape[0] * X.shape[1], 1))
    for i in range(0, Z.shape[0], step):
        diff = np.abs(Z[i : i + step, None, :] - X[None, :, :])
        if np.any(np.all(diff <= tol[None, None, :], axis=2)):
            return True
    return False


def _scale(*candidates: float | None) -> float:
    """The first finite positive candidate (the public range the tolerance refers to)."""
    for c in candidates:
        if c is not None and math.isfinite(c) and c > 0.0:
            return float(c)
    return 1.0


def check_public_choices(
    X: ArrayLike | None = None,
    y: ArrayLike | None = None,
    *,
    Z: ArrayLike | None = None,
    y_bounds: tuple[float, float] | None = None,
    mean: float | None = None,
    holdout: tuple[ArrayLike, ArrayLike] | None = None,
    rtol: float = DEFAULT_RTOL,
    z_rtol: float = DEFAULT_Z_RTOL,
    **deprecated: Any,
) -> None:
    """Refuse public choices that look computed from the private data (data owner only).

    **A heuristic.**  The guarantee of every release rests on the user's declaration that
    these values were fixed without looking at the private data; this check can only catch
    values that land *near* a statistic of the data.  It flags a value within a tolerance
    ``rtol`` × (a public range) of the statistic, so that rounded values
    (``mean=round(y.mean(), 2)``) and nudged ones (``y_bounds=(min(y) − 1e-9, …)``) are
    caught as well as exact copies (issue 15, point 4).  It has false positives (a genuinely
    public value may by chance fall within the tolerance: then keep it, if you can say where
    it came from) and false negatives (a statistic rounded coarser than the tolerance, or
    transformed, passes).  The scale of each comparison:

    * ``y_bounds = (lower, upper)``: flagged if ``|lower − min(y)|`` or ``|upper − max(y)|``
      is ≤ ``rtol · (upper − lower)``;
      (the deprecated centred ``y_bound=M`` is checked as ``y_bounds=(mean − M, mean + M)``);
    * ``mean`` (non-zero): within ``rtol · w`` of the mean or median of ``y``, ``w`` the
      width of ``y_bounds``, else the data's range;
    * ``Z``: a row within ``z_rtol · span`` of a row of the private ``X`` in every column
      (``span`` the column's range over ``Z``, else over ``X``; ``z_rtol`` is much smaller
      than ``rtol`` because inputs fill their domain, see ``DEFAULT_Z_RTOL``), raising
      ``InducingFromDataError``;
    * ``holdout = (X_h, y_h)``: a hold-out ``(x, y)`` pair *equal* to a training pair
      (exact: a hold-out set is data, and near-equal records may be legitimate).

    ``rtol=0`` and ``z_rtol=0`` restore exact comparisons.  The others raise
    ``DataDerivedChoiceError``.  Returns ``None`` when nothing is flagged.  The answer
    depends on the private data: keep it to yourself (``docs/errors.md``); this is never run
    inside a release.
    """
    func = "check_public_choices"
    y_bounds = bounds_from_centred(
        "y_bound", deprecated, y_bounds, 0.0 if mean is None else mean, func=func
    )
    reject_unexpected(deprecated, func=func)
    rtol, z_rtol = real_or_nan(rtol, "rtol"), real_or_nan(z_rtol, "z_rtol")  # no text
    for name, value in (("rtol", rtol), ("z_rtol", z_rtol)):
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}; pass e.g. 1e-3.")
    Xa = None if X is None else np.asarray(X, dtype=np.float64)
    if Xa is not None and Xa.ndim == 1:
        Xa = Xa[:, None]
    ya = None if y is None else np.asarray(y, dtype=np.float64).reshape(-1)
    if Z is not None and Xa is not None and Xa.size:
        Za = np.asarray(Z, dtype=np.float64)
        Za = Za[:, None] if Za.ndim == 1 else Za
        if Za.ndim != 2 or Za.shape[1] != Xa.shape[1]:  # (a 1-column Z was compared with
            # every column of X, and X[:3, :1] was "found" in a 2-column X; stop-45 audit)
            raise ValueError(
                f"Z must have one column per input dimension of X ({Xa.shape[1]}), got shape "
                f"{Za.shape}."
            )
        span = np.ptp(Za, axis=0) if Za.shape[0] > 1 else np.zeros(Za.shape[1])
        span = np.where(span > 0, span, np.ptp(Xa, axis=0))
        if count_matching_rows(Za, Xa) or (z_rtol > 0 and _near_rows(Za, Xa, z_rtol * span)):
            raise InducingFromDataError(
                "some inducing inputs Z coincide (within z_rtol of the span of Z) with rows of "
                "the private inputs X: Z looks chosen from the data, and the release publishes "
                "Z. Use a public grid (grid_inducing_points), domain knowledge, or k-means of "
                "public data. This is a heuristic: if Z is public, say where it came from."
            )
    y_pairs = ya  # every record, paired with X, for the hold-out check
    if ya is not None:
        # the releases drop non-finite records; so do the statistics here (one NaN made every
        # statistic NaN and every comparison False: "nothing found"; stop-40 fuzz)
        ya = ya[np.isfinite(ya)]
    if ya is None or ya.size == 0:
        return
    y_min, y_max = float(np.min(ya)), float(np.max(ya))
    width = None
    if y_bounds is not None:
        lower, upper = (float(b) for b in y_bounds)
        width = upper - lower
        tol = rtol * _scale(width)
        if abs(lower - y_min) <= tol or abs(upper - y_max) <= tol:
            raise DataDerivedChoiceError(
                f"y_bounds lies within rtol={rtol:g} of the range width of the minimum or "
                "maximum of the private y: it looks computed from the data. Choose bounds "
                "from public knowledge (a heuristic check: if they are public, keep them)."
            )
    if mean is not None and float(mean) != 0.0:
        scale = _scale(width, y_max - y_min)
        for label, stat in (("mean", float(np.mean(ya))), ("median", float(np.median(ya)))):
            if abs(float(mean) - stat) <= rtol * scale:
                raise DataDerivedChoiceError(
                    f"mean lies within rtol={rtol:g} of the range of the {label} of the "
                    "private y: it looks computed from the data. Use a public value (domain "
                    "knowledge, public data); a heuristic check: if it is public, keep it."
                )
    if holdout is not None and Xa is not None:
        Xh = np.asarray(holdout[0], dtype=np.float64)
        Xh = Xh[:, None] if Xh.ndim == 1 else Xh
        yh = np.asarray(holdout[1], dtype=np.float64).reshape(-1, 1)
        if Xh.ndim != 2 or Xh.shape[1] != Xa.shape[1] or yh.shape[0] != Xh.shape[0]:
            # a hold-out of another width was skipped: "nothing flagged" (stop-45 audit)
            raise ValueError(
                f"holdout must be (X_h, y_h) with one column per input dimension of X "
                f"({Xa.shape[1]}) and one y per row, got shapes {Xh.shape} and {yh.shape[:1]}."
            )
        if count_matching_rows(np.column_stack([Xh, yh]), np.column_stack([Xa, y_pairs[:, None]])):
            raise DataDerivedChoiceError(
                "some hold-out (x, y) pairs are private training pairs. Use a hold-out set "
                "that was not used to fit the released model."
            )
