"""Input checks shared by every public function.

Bad input must produce a clear error that says what to do, never a silent wrong
answer (developers' guide, "Standards").  Each check returns the validated value
so it can be used inline: ``epsilon = check_epsilon(epsilon)``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "PrivacyWarning",
    "check_epsilon",
    "check_delta",
    "check_positive",
    "check_finite_array",
    "check_rng",
    "check_public_bounds",
    "clip_to_bounds",
]


class PrivacyWarning(UserWarning):
    """Warns about something that changes what the release means (e.g. clipping)."""


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float, raising ``ValueError`` unless 0 < ε < ∞."""
    try:
        value = float(epsilon)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a positive number, got {epsilon!r}.") from err
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(
            f"{name} must be a finite number > 0, got {epsilon!r}. "
            "Differential privacy needs a positive privacy-loss bound; choose e.g. epsilon=1."
        )
    return value


def check_delta(delta: float, name: str = "delta") -> float:
    """Return ``delta`` as a float, raising ``ValueError`` unless 0 < δ < 1."""
    try:
        value = float(delta)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a number in (0, 1), got {delta!r}.") from err
    if not (0.0 < value < 1.0) or not math.isfinite(value):
        raise ValueError(
            f"{name} must lie strictly between 0 and 1, got {delta!r}. "
            "The Gaussian mechanism needs delta > 0; a common choice is delta << 1/n."
        )
    return value


def check_positive(value: float, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float that is > 0 (or >= 0 with ``allow_zero``)."""
    try:
        v = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a number, got {value!r}.") from err
    if not math.isfinite(v) or v < 0.0 or (v == 0.0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}.")
    return v


def check_finite_array(x: ArrayLike, name: str, *, ndim: int | None = None) -> NDArray[np.float64]:
    """Return ``x`` as a float64 array, raising ``ValueError`` on NaN/inf or wrong rank."""
    arr = np.asarray(x, dtype=np.float64)
    if ndim is not None:
        if ndim == 2 and arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError(f"{name} is empty.")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(
            f"{name} contains {int(bad.sum())} NaN or infinite value(s). "
            "Remove or impute them with a public rule before a private release."
        )
    return arr


def check_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """Return a ``numpy.random.Generator``; ``None`` means fresh OS entropy.

    Global NumPy random state is never used.
    """
    if rng is None:
        return np.random.default_rng()
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            "rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed)), "
            f"got {type(rng).__name__}."
        )
    return rng


def check_public_bounds(
    bounds: tuple[float, float],
    private_values: NDArray[np.float64] | None = None,
    *,
    name: str = "y_bounds",
    bounds_are_public: bool = False,
) -> tuple[float, float]:
    """Validate a public clipping range ``(lower, upper)``.

    A range that coincides with the minimum or maximum of the private values is
    almost certainly computed from them; using it as if it were public leaks
    those extremes (REFERENCE §1).  Such a range is refused unless the caller
    states ``bounds_are_public=True``.
    """
    try:
        lower, upper = (float(b) for b in bounds)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name} must be a pair (lower, upper) of numbers, got {bounds!r}."
        ) from err
    if not (math.isfinite(lower) and math.isfinite(upper)) or not lower < upper:
        raise ValueError(f"{name} must be finite with lower < upper, got {bounds!r}.")
    if private_values is not None and not bounds_are_public:
        vmin, vmax = float(np.min(private_values)), float(np.max(private_values))
        if lower == vmin or upper == vmax:
            raise ValueError(
                f"{name}={bounds!r} equals the minimum or maximum of the private data: it looks "
                "computed from the data, and using it as public would leak those values. Choose "
                "bounds from public knowledge (e.g. plausible human heights), or pass "
                "bounds_are_public=True if they really are public."
            )
    return lower, upper


def clip_to_bounds(
    values: NDArray[np.float64], bounds: tuple[float, float], *, name: str = "y"
) -> NDArray[np.float64]:
    """Clip ``values`` to the public ``bounds``, warning with how many were changed.

    Clipping is what makes the data sensitivity ``d = upper - lower`` a true bound;
    the warning tells the user the release describes the clipped data.
    """
    lower, upper = bounds
    outside = (values < lower) | (values > upper)
    n_out = int(outside.sum())
    if n_out:
        warnings.warn(
            f"{n_out} of {values.size} {name} values lie outside the public range "
            f"[{lower}, {upper}] and were clipped to it; the release describes the clipped data.",
            PrivacyWarning,
            stacklevel=3,
        )
    return np.clip(values, lower, upper)
