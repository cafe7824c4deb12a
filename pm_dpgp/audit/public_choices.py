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

import numpy as np
from numpy.typing import ArrayLike

from pm_dpgp.gp.sparse import count_matching_rows
from pm_dpgp.models.sparse import InducingFromDataError

__all__ = ["DataDerivedChoiceError", "check_public_choices"]


class DataDerivedChoiceError(ValueError):
    """A value meant to be public coincides with a statistic of the private data."""


def check_public_choices(
    X: ArrayLike | None = None,
    y: ArrayLike | None = None,
    *,
    Z: ArrayLike | None = None,
    y_bounds: tuple[float, float] | None = None,
    y_bound: float | None = None,
    mean: float | None = None,
    holdout: tuple[ArrayLike, ArrayLike] | None = None,
) -> None:
    """Refuse public choices that coincide with the private data (data owner only).

    * ``Z``: a row equal to a row of the private inputs ``X`` raises
      :class:`~pm_dpgp.models.InducingFromDataError`;
    * ``y_bounds = (lower, upper)``: ``lower == min(y)`` or ``upper == max(y)``;
      ``y_bound`` with ``mean``: ``y_bound == max|y − mean|``;
    * ``mean``: a non-zero mean equal to the mean or median of ``y``;
    * ``holdout = (X_h, y_h)``: a hold-out ``(x, y)`` pair equal to a training pair.

    The last four raise :class:`DataDerivedChoiceError`.  Returns ``None`` when nothing
    coincides.  The answer depends on the private data: keep it to yourself.
    """
    Xa = None if X is None else np.asarray(X, dtype=np.float64)
    if Xa is not None and Xa.ndim == 1:
        Xa = Xa[:, None]
    ya = None if y is None else np.asarray(y, dtype=np.float64).reshape(-1)
    if Z is not None and Xa is not None and count_matching_rows(Z, Xa):
        raise InducingFromDataError(
            "some inducing inputs Z coincide exactly with rows of the private inputs X: Z "
            "looks chosen from the data, and the release publishes Z. Use a public grid "
            "(grid_inducing_points), domain knowledge, or k-means of public data."
        )
    if ya is None or ya.size == 0:
        return
    if y_bounds is not None:
        lower, upper = (float(b) for b in y_bounds)
        if lower == float(np.min(ya)) or upper == float(np.max(ya)):
            raise DataDerivedChoiceError(
                "y_bounds equals the minimum or maximum of the private y: it looks computed "
                "from the data. Choose bounds from public knowledge."
            )
    if y_bound is not None:
        centre = 0.0 if mean is None else float(mean)
        if float(y_bound) == float(np.max(np.abs(ya - centre))):
            raise DataDerivedChoiceError(
                "y_bound equals max|y - mean| of the private data: it looks computed from the "
                "data. Choose the bound from public knowledge."
            )
    if mean is not None and float(mean) != 0.0:
        for label, stat in (("mean", float(np.mean(ya))), ("median", float(np.median(ya)))):
            if math.isclose(float(mean), stat, rel_tol=1e-9, abs_tol=0.0):
                raise DataDerivedChoiceError(
                    f"mean equals the {label} of the private y: it looks computed from the "
                    "data. Use a public value (domain knowledge, public data)."
                )
    if holdout is not None and Xa is not None:
        Xh = np.asarray(holdout[0], dtype=np.float64)
        Xh = Xh[:, None] if Xh.ndim == 1 else Xh
        yh = np.asarray(holdout[1], dtype=np.float64).reshape(-1, 1)
        if Xh.shape[1] == Xa.shape[1] and count_matching_rows(
            np.column_stack([Xh, yh]), np.column_stack([Xa, ya[:, None]])
        ):
            raise DataDerivedChoiceError(
                "some hold-out (x, y) pairs are private training pairs. Use a hold-out set "
                "that was not used to fit the released model."
            )
