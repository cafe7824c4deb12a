"""The public input box: one parser for every ``domain=`` argument.

Two array layouts were in use for the same argument: the Thompson-sampling loops read
``domain=(lower, upper)`` (two corners, each a number or a length-``d`` vector), the sample-path
release, its planner and selection read ``domain=[(low_1, high_1), …]`` (one pair per input
dimension).  In 2-D both are 2 × 2, and each entry point silently read the other's form
(stop-41 fuzz): ``sample_path_release(domain=([0, 0], [6, 6]))`` became the single point
``(0, 6)``, every private input was clipped onto it and ε was computed for that point (19.5
instead of 14,995); ``dp_thompson_sampling(domain=[(0, 1), (2, 3)])`` searched
``[0, 2] × [1, 3]`` instead of ``[0, 1] × [2, 3]``.

``parse_domain`` now accepts either layout wherever the shape or the values decide it.  A
reading is a box when ``low ≤ high`` in every dimension and it is not a single point
(flat dimensions, ``low == high``, are allowed as the sample-path functions always allowed
them; the Thompson loops ask for ``strict=True``, ``low < high`` everywhere).  So
``([0, 0], [6, 6])``, which read as pairs is the point (0, 6), is read as corners
everywhere, and ``[(0, 6), (0, 6)]`` as pairs.  When both readings of a 2 × 2 array are
boxes, every entry point keeps its own documented layout (``layout="pairs"`` for the
sample-path functions, ``"corners"`` for the Thompson loops), so no call that worked
changes meaning, and warns (``UserWarning``) naming the other reading when the two boxes
differ; it warns too when the caller's own reading reverses a dimension (``low > high``) and
the other reading is taken (stop 44).  ``Box(lower, upper)`` or
``{"lower": …, "upper": …}`` is never misread and never warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from pm_dpgp._validation import public_real_array

__all__ = ["Box", "parse_domain"]

#: which reading of a 2 × 2 array an entry point takes when both are boxes
Layout = Literal["pairs", "corners"]
_LAYOUT_TEXT = {"pairs": "(low, high) pairs", "corners": "(lower, upper) corners"}


@dataclass(frozen=True, eq=False)
class Box:
    """A public box ``[lower_1, upper_1] × … × [lower_d, upper_d]``.

    ``lower`` and ``upper`` are length-``d`` arrays of finite numbers with
    ``lower ≤ upper``, not all equal (a point is no box); a number is one dimension.  Pass a
    ``Box`` as ``domain=`` to any entry point; it is never misread.  Two boxes are equal when
    their corners are.
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

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Box):
            return NotImplemented
        return bool(
            np.array_equal(self.lower, other.lower) and np.array_equal(self.upper, other.upper)
        )

    def __hash__(self) -> int:
        # + 0.0 maps -0.0 to 0.0: equal boxes hash equally (stop-44 audit: Box([-0.0], [1]) ==
        # Box([0.0], [1]) but their hashes differed)
        return hash(((self.lower + 0.0).tobytes(), (self.upper + 0.0).tobytes()))

    @property
    def is_flat(self) -> bool:
        """Whether some dimension has ``low == high``."""
        return bool(np.any(self.lower == self.upper))

    def __iter__(self) -> Iterator[NDArray[np.float64]]:
        """``lower, upper = box``: writable copies of the two corners."""
        return iter((self.lower.copy(), self.upper.copy()))

    def __repr__(self) -> str:
        return f"Box(lower={self.lower.tolist()}, upper={self.upper.tolist()})"


def _check_corners(lo: NDArray[np.float64], hi: NDArray[np.float64], shown: str) -> None:
    if not _is_box(lo, hi):
        raise ValueError(
            f"domain must be a finite box with low <= high in every dimension, a finite width "
            f"(high - low) and some width, "
            f"got {shown}. For an unbounded domain use kappa = 0."
        )


def _is_box(lo: NDArray[np.float64], hi: NDArray[np.float64]) -> bool:
    """Finite corners and widths, ``lo ≤ hi`` everywhere, and not a single point.

    A width ``hi − lo`` that overflows (``(−1e308, 1e308)``) is no finite box: every use of
    the box divides by or scales with it (stop-46 audit: the partition features put every
    point in the first cell, the Thompson loop refused with a NaN-kernel message)."""
    with np.errstate(over="ignore", invalid="ignore"):
        width_finite = np.all(np.isfinite(hi - lo))
    finite = bool(np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and width_finite)
    return finite and bool(np.all(lo <= hi)) and bool(np.any(lo < hi))


def _proper(lo: NDArray[np.float64], hi: NDArray[np.float64]) -> bool:
    return _is_box(lo, hi) and bool(np.all(lo < hi))


def _from_array(arr: NDArray[np.float64], domain: Any, layout: Layout, strict: bool) -> Box:
    """A box from a 2-D array in either layout (module docstring); ``layout`` decides a
    2 × 2 array whose two readings are both boxes."""
    rows, cols = arr.shape
    ok = _proper if strict else _is_box
    readings = {
        "pairs": (arr[:, 0], arr[:, 1]) if cols == 2 else None,
        "corners": (arr[0], arr[1]) if rows == 2 else None,
    }
    valid = {k: r for k, r in readings.items() if r is not None and ok(*r)}
    if layout in valid:
        other = "corners" if layout == "pairs" else "pairs"
        # the other reading as a box with width everywhere (a flat one is no likely intent:
        # [(0, 1), (0, 2)] as corners is {0} × [1, 2], which needs no warning)
        if (
            other in valid
            and _proper(*valid[other])
            and not np.array_equal(valid[other][0], valid[layout][0])
        ):
            warnings.warn(  # the layout of the other entry points, misread (stop-41 fuzz)
                f"domain {arr.tolist()} is read as {_LAYOUT_TEXT[layout]}: the box "
                f"{valid[layout][0].tolist()} to {valid[layout][1].tolist()}. Read as "
                f"{_LAYOUT_TEXT[other]} it would be {valid[other][0].tolist()} to "
                f"{valid[other][1].tolist()}; pass domain=pm_dpgp.Box(lower=..., upper=...) "
                "to say which, and to silence this warning.",
                UserWarning,
                stacklevel=5,
            )
        return Box(*valid[layout])
    if len(valid) == 1:  # only one reading is a box: the shape or the values decide
        ((chosen, box),) = valid.items()
        mine = readings[layout]
        if chosen != layout and mine is not None and bool(np.any(mine[0] > mine[1])):
            # the caller's own layout reverses a dimension: a typo ([(1, 0), (3, 2)] for the
            # pairs (0, 1), (2, 3)) was read silently as the corners (1, 0) to (3, 2), another
            # box (stop-44 audit); a layout read as a point or flat box (([0, 0], [6, 6]) as
            # pairs) is no likely intent and stays silent
            warnings.warn(
                f"domain {arr.tolist()} read as {_LAYOUT_TEXT[layout]} has low > high, so it "
                f"is read as {_LAYOUT_TEXT[chosen]}: the box {box[0].tolist()} to "
                f"{box[1].tolist()}. If that is not the box meant, pass "
                "domain=pm_dpgp.Box(lower=..., upper=...) (which also silences this warning).",
                UserWarning,
                stacklevel=5,
            )
        return Box(*box)
    shown = readings[layout] or readings["pairs"] or readings["corners"]
    if shown is not None:  # say what is wrong with the caller's reading
        if strict and _is_box(*shown):
            raise ValueError(
                f"domain must have low < high in every dimension here, got {domain!r}; nothing "
                "was spent or drawn."
            )
        _check_corners(*shown, repr(domain))
    raise ValueError(
        "domain must be (low, high), (lower, upper) corners of length d, a sequence of d "
        f"(low, high) pairs, or a pm_dpgp.Box; got shape {arr.shape}."
    )


def parse_domain(
    domain: Any, d: int | None = None, *, strict: bool = False, layout: Layout = "pairs"
) -> Box:
    """The public box of ``domain`` (module docstring), in ``d`` dimensions when given.

    Accepted: a ``Box``; ``{"lower": …, "upper": …}``; ``(low, high)`` with two numbers (one
    interval, repeated in every dimension when ``d`` is given); ``(lower, upper)`` corners,
    each a number or a vector (a length-1 vector is repeated like a number); a sequence of
    ``(low, high)`` pairs (a ``(d, 2)`` array).  A 2 × 2 array whose two readings are
    different boxes is read in the caller's ``layout`` (``"pairs"``: the sample-path
    functions; ``"corners"``: the Thompson loops), with a ``UserWarning`` that names the other
    reading.  ``strict``: every dimension must have ``low < high``.
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
        box = _parse_sequence(domain, layout, strict)
    if d is not None and box.dim != d:
        if box.dim != 1:
            raise ValueError(f"domain has {box.dim} dimension(s), the inputs have {d}: {box!r}.")
        box = Box(np.repeat(box.lower, d), np.repeat(box.upper, d))  # one interval for all
    if strict and box.is_flat:
        raise ValueError(
            f"domain must have low < high in every dimension here, got {box!r}; nothing was "
            "spent or drawn."
        )
    return box


def _parse_sequence(domain: Any, layout: Layout, strict: bool) -> Box:
    if isinstance(domain, tuple | list) and len(domain) == 2:
        try:
            parts = [public_real_array(b, "domain") for b in domain]
        except ValueError as err:
            if "masked" in str(err):
                raise
            raise ValueError(  # ([0], [1, 2]) was "must be a number or an array of numbers"
                f"domain corners (lower, upper) must be numbers or vectors, got {domain!r}."
            ) from None
        sizes = {p.size for p in parts}
        if all(p.ndim <= 1 for p in parts) and (
            any(p.ndim == 0 for p in parts) or (len(sizes) == 2 and 1 in sizes)
        ):  # (lower, upper) with a number or a length-1 vector: repeated (the loops' rule)
            lo, hi = np.broadcast_arrays(*(np.atleast_1d(p) for p in parts))
            return Box(lo, hi)
        if all(p.ndim == 1 for p in parts) and len(sizes) == 2:
            raise ValueError(f"domain corners have different lengths: {domain!r}.")
    arr = public_real_array(domain, "domain")
    if arr.ndim == 1 and arr.shape == (2,):
        return Box(arr[:1], arr[1:])
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(
            "domain must be (low, high), (lower, upper) corners of length d, a sequence of d "
            f"(low, high) pairs, or a pm_dpgp.Box; got shape {np.shape(arr)}."
        )
    return _from_array(arr, domain, layout, strict)
