"""The public input box: one parser for every ``domain=`` argument.

Two array layouts were in use for the same argument: the Thompson-sampling loops read
``domain=(lower, upper)`` (two corners, each a number or a length-``d`` vector), the sample-path
release, its planner and selection read ``domain=[(low_1, high_1), …]`` (one pair per input
dimension).  In 2-D both are 2 × 2, and each entry point silently read the other's form
(stop-41 fuzz): ``sample_path_release(domain=([0, 0], [6, 6]))`` became the single point
``(0, 6)``, every private input was clipped onto it and ε was computed for that point (19.5
instead of 14,995); ``dp_thompson_sampling(domain=[(0, 1), (2, 3)])`` searched
``[0, 2] × [1, 3]`` instead of ``[0, 1] × [2, 3]``.

``parse_domain`` now accepts either layout wherever the shape or the values decide it, and
refuses the one case they do not: a 2 × 2 array whose two readings are both boxes, and
different ones.  Such a box is given unambiguously as ``Box(lower, upper)`` or as
``{"lower": …, "upper": …}``.  Every box has ``low < high`` in every dimension: a zero-width
dimension is what a misread layout produced, and no kernel bound or search needs one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pm_dpgp._validation import public_real_array

__all__ = ["Box", "parse_domain"]


@dataclass(frozen=True)
class Box:
    """A public box ``[lower_1, upper_1] × … × [lower_d, upper_d]``.

    ``lower`` and ``upper`` are length-``d`` arrays of finite numbers with
    ``lower < upper``; a number is one dimension.  Pass a ``Box`` as ``domain=`` to any
    entry point; it is never misread.
    """

    lower: NDArray[np.float64]
    upper: NDArray[np.float64]

    def __post_init__(self) -> None:
        lo = np.atleast_1d(public_real_array(self.lower, "Box.lower")).astype(np.float64)
        hi = np.atleast_1d(public_real_array(self.upper, "Box.upper")).astype(np.float64)
        if lo.ndim != 1 or lo.shape != hi.shape or lo.size == 0:
            raise ValueError(
                "Box(lower, upper) needs two 1-D arrays of the same length (one entry per "
                f"input dimension), got shapes {lo.shape} and {hi.shape}."
            )
        _check_corners(lo, hi, f"Box({lo.tolist()}, {hi.tolist()})")
        lo.flags.writeable = False
        hi.flags.writeable = False
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @property
    def dim(self) -> int:
        """The number of input dimensions ``d``."""
        return int(self.lower.size)

    @property
    def pairs(self) -> NDArray[np.float64]:
        """``(d, 2)`` array of ``(low, high)`` rows."""
        return np.column_stack([self.lower, self.upper])

    def __iter__(self) -> Iterator[NDArray[np.float64]]:
        """``lower, upper = box``: writable copies of the two corners."""
        return iter((self.lower.copy(), self.upper.copy()))

    def __repr__(self) -> str:
        return f"Box(lower={self.lower.tolist()}, upper={self.upper.tolist()})"


def _check_corners(lo: NDArray[np.float64], hi: NDArray[np.float64], shown: str) -> None:
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError(
            f"domain must be a finite box with low < high in every dimension, got {shown}. For "
            "an unbounded domain use kappa = 0."
        )


def _is_box(lo: NDArray[np.float64], hi: NDArray[np.float64]) -> bool:
    return bool(np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi))


def _from_array(arr: NDArray[np.float64], domain: Any) -> Box:
    """A box from a 2-D array in either layout (module docstring)."""
    rows, cols = arr.shape
    pairs_ok = cols == 2 and _is_box(arr[:, 0], arr[:, 1])
    corners_ok = rows == 2 and _is_box(arr[0], arr[1])
    if pairs_ok and corners_ok and not np.array_equal(arr[:, 0], arr[0]):
        raise ValueError(
            f"domain {arr.tolist()} is ambiguous in 2-D: read as (low, high) pairs it is the "
            f"box {arr[:, 0].tolist()} to {arr[:, 1].tolist()}, read as (lower, upper) "
            f"corners the box {arr[0].tolist()} to {arr[1].tolist()}. Pass "
            "domain=Box(lower=[...], upper=[...]) (pm_dpgp.Box) or "
            "{'lower': [...], 'upper': [...]}; nothing was spent or drawn."
        )
    if pairs_ok:
        return Box(arr[:, 0], arr[:, 1])
    if corners_ok:
        return Box(arr[0], arr[1])
    if cols == 2 or rows == 2:
        _check_corners(arr[:, 0] if cols == 2 else arr[0], arr[:, 1] if cols == 2 else arr[1],
                       repr(domain))  # fmt: skip
    raise ValueError(
        "domain must be (low, high), (lower, upper) corners of length d, a sequence of d "
        f"(low, high) pairs, or a pm_dpgp.Box; got shape {arr.shape}."
    )


def parse_domain(domain: Any, d: int | None = None) -> Box:
    """The public box of ``domain`` (module docstring), in ``d`` dimensions when given.

    Accepted: a ``Box``; ``{"lower": …, "upper": …}``; ``(low, high)`` with two numbers (one
    interval, repeated in every dimension when ``d`` is given); ``(lower, upper)`` corners,
    each a number or a length-``d`` vector; a sequence of ``(low, high)`` pairs (a ``(d, 2)``
    array).  A 2 × 2 array whose two readings are different boxes is refused.
    """
    if isinstance(domain, Box):
        box = domain
    elif isinstance(domain, Mapping):
        if set(domain) != {"lower", "upper"}:
            raise ValueError(
                f"a domain given as a mapping needs exactly the keys 'lower' and 'upper', got "
                f"{sorted(map(str, domain))}."
            )
        box = Box(domain["lower"], domain["upper"])
    else:
        box = _parse_sequence(domain)
    if d is not None and box.dim != d:
        if box.dim == 1:  # one interval for every dimension
            return Box(np.repeat(box.lower, d), np.repeat(box.upper, d))
        raise ValueError(f"domain has {box.dim} dimension(s), the inputs have {d}: {box!r}.")
    return box


def _parse_sequence(domain: Any) -> Box:
    if isinstance(domain, tuple | list) and len(domain) == 2:
        parts = [public_real_array(b, "domain") for b in domain]
        if any(p.ndim == 0 for p in parts):  # (lower, upper) with a number: broadcast
            if any(p.ndim > 1 for p in parts):
                raise ValueError(f"domain corners must be numbers or 1-D vectors, got {domain!r}.")
            try:
                lo, hi = np.broadcast_arrays(*(np.atleast_1d(p) for p in parts))
            except ValueError:
                raise ValueError(f"domain corners have different lengths: {domain!r}.") from None
            return Box(lo, hi)
    arr = public_real_array(domain, "domain")
    if arr.ndim == 1 and arr.shape == (2,):
        return Box(arr[:1], arr[1:])
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(
            "domain must be (low, high), (lower, upper) corners of length d, a sequence of d "
            f"(low, high) pairs, or a pm_dpgp.Box; got shape {np.shape(arr)}."
        )
    return _from_array(arr, domain)
