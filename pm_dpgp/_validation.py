"""Input checks shared by every public function.

Bad input must produce a clear error that says what to do, never a silent wrong
answer (developers' guide, "Standards").  Each check returns the validated value
so it can be used inline: ``epsilon = check_epsilon(epsilon)``.

Checks that depend on private values never speak (``docs/errors.md``, "Errors never depend on
private data"):
a release never raises or warns because of what the private data contain.  Private
arrays are checked for their shape only (the number of records and columns is public);
their values are sanitised to the declared public bounds instead (``clip_to_bounds``,
``finite_rows``), a record-wise map whose effect is documented and never reported.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import inspect
import math
import numbers
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, MappingView
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "PrivacyWarning",
    "ConvergenceWarning",
    "check_epsilon",
    "check_delta",
    "check_positive",
    "check_count",
    "check_finite_array",
    "check_rng",
    "check_public_bounds",
    "check_clip_option",
    "clip_to_bounds",
    "finite_rows",
    "private_array",
    "refuse_text",
    "refuse_misaligned_rows",
    "EPSILON_WARN_THRESHOLD",
    "WIDE_RANGE_FACTOR",
    "warn_public_settings",
    "renamed",
    "reject_unexpected",
    "centred_bound",
    "bounds_from_centred",
    "require",
    "renamed_fields",
]


class PrivacyWarning(UserWarning):
    """Warns about something that changes what the release means.

    Decided from public information only (arguments, model structure): a warning whose
    emission depended on the private data would leak it (``docs/errors.md``).
    """


class ConvergenceWarning(UserWarning):
    """An optimiser stopped before its tolerance; the result is valid but may be worse.

    Emitted by ``solve_noise_covariance`` (hence every cloaked release) when the noise design
    stops at ``max_iter`` (or the trace design's step cap): the returned ``M`` is scaled to be
    feasible, so privacy holds, but its certified gap (``gap_bound``) exceeds ``tol``, i.e. the
    noise may be larger than the optimum.  Decided from the public cloaking matrix only.
    """


def _zero_d_item(value: Any) -> Any:
    """The element of a 0-d array (``np.array(0.5)`` → ``0.5``, also an ``xarray.DataArray``
    or any array-like with ``ndim == 0``); anything else, NumPy scalars included, unchanged.
    A masked 0-d value (``np.ma.masked``) stays as it is, to be refused as not a number."""
    if isinstance(value, np.ma.MaskedArray) or isinstance(value, np.generic):
        return value
    if isinstance(value, np.ndarray):
        return value.item() if value.ndim == 0 else value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "values"):  # xarray, pandas
        return _zero_d_item(np.asarray(value.values))
    return value


def _refuse_bool_or_text(value: Any, name: str) -> None:
    """A ``bool`` is not a privacy parameter (``epsilon=True`` would silently mean ε = 1), and
    neither is text, even text that parses (``epsilon="1.0"``: ``docs/errors.md`` refuses text
    everywhere; stop-39 walkthrough: it was charged as 1.0).  A 0-d array is judged by its
    element: ``np.array(True)`` and ``np.array("1.0")`` converted to 1.0 through ``float``
    (stop 40; ``xarray.DataArray(True)`` too)."""
    value = _zero_d_item(value)
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be a number, got the boolean {value!r}; pass a float.")
    if isinstance(value, str | bytes | bytearray):  # np.str_ / np.bytes_ are subclasses
        raise ValueError(f"{name} must be a number, got text {value!r}; pass a float.")


def real_or_none(value: Any, name: str) -> float | None:
    """``value`` as a float if it is one real number, else ``None``; booleans and text are
    refused here with their own message.

    Real: ``int``, ``float``, ``Fraction``, ``Decimal``, NumPy integers and floats, and 0-d
    arrays of them.  Not real (``None``): complex numbers (``float`` dropped the imaginary part
    with only a warning), dates and durations (``np.timedelta64(1)`` is a ``numbers.Real`` to
    NumPy and was taken as 1.0), masked values, arrays with elements, ``None``.  An integer
    too large for a float64 (``10**400``) is ``±inf``, which the caller's range check refuses
    (it raised Python's ``OverflowError``; stop-40 fuzz).
    """
    if type(value) is float:  # the common case, on the accounting's hot paths (stop-40 review)
        return value
    _refuse_bool_or_text(value, name)
    item = _zero_d_item(value)
    if isinstance(item, np.timedelta64 | np.datetime64 | np.ma.MaskedArray):
        return None
    if not isinstance(item, numbers.Real | decimal.Decimal):
        return None
    try:
        return float(item)
    except OverflowError:
        return math.inf if item > 0 else -math.inf
    except ValueError:  # Decimal("sNaN") cannot be converted: not a usable number
        return math.nan


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float, raising ``ValueError`` unless 0 < ε < ∞."""
    value = real_or_none(epsilon, name)
    if value is None:
        raise ValueError(
            f"{name} must be a positive number, got {epsilon!r}; pass e.g. {name}=1.0."
        )
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(
            f"{name} must be a finite number > 0, got {epsilon!r}. "
            "Differential privacy needs a positive privacy-loss bound; choose e.g. epsilon=1."
        )
    return value


def check_delta(delta: float, name: str = "delta") -> float:
    """Return ``delta`` as a float, raising ``ValueError`` unless 0 < δ < 1."""
    value = real_or_none(delta, name)
    if value is None:
        raise ValueError(
            f"{name} must be a number in (0, 1), got {delta!r}; pass e.g. {name}=1e-5."
        )
    if not (0.0 < value < 1.0) or not math.isfinite(value):
        raise ValueError(
            f"{name} must lie strictly between 0 and 1, got {delta!r}. "
            "The Gaussian mechanism needs delta > 0; choose e.g. delta << 1/n."
        )
    return value


def check_positive(value: float, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float that is > 0 (or >= 0 with ``allow_zero``)."""
    v = real_or_none(value, name)
    if v is None:
        raise ValueError(f"{name} must be a number, got {value!r}; pass a float.")
    if not math.isfinite(v) or v < 0.0 or (v == 0.0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}; pass one.")
    return v


def check_finite_number(value: Any, name: str) -> float:
    """Return ``value`` as a finite float: a real number, never a bool, text or array."""
    v = real_or_none(value, name)  # np.array(1e-4) is a number, as for check_positive
    if v is None or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    return v


def real_or_nan(value: Any, name: str) -> float:
    """``value`` as a float if it is a real number (or a 0-d array of one), else NaN, for a
    caller whose own range check then says what to pass; a boolean or text is refused here."""
    v = real_or_none(value, name)
    return math.nan if v is None else v


def check_flag(value: Any, name: str) -> bool:
    """``value`` as a ``bool``: only ``True``/``False`` (or NumPy's), nothing read by truthiness.

    A switch read with ``if value:`` took ``"no"``, ``"False"``, ``1`` and ``[0]`` as yes
    (stop-40 fuzz: ``holdout_is_public="no"`` published the private training labels, and
    ``assume_monotone="no"`` skipped the check of a kernel bound).  Public arguments only.
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}.")


def _short(k: int) -> str:
    """A whole number in a few characters, without a float (``10**400`` overflows one) and
    without its decimal digits (Python limits ``str`` of an int to 4,300 of them)."""
    return str(k) if k < 10**6 else f"about 2**{k.bit_length() - 1}"


def _physical_memory() -> int | float:
    """Bytes of physical memory (``inf`` where the platform does not say)."""
    try:
        page, pages = int(os.sysconf("SC_PAGE_SIZE")), int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return math.inf
    # os.sysconf returns -1 for a value the platform does not define (and 0 is no answer
    # either): such a "size" refused every release that checks its memory (stop-44 review)
    return page * pages if page > 0 and pages > 0 else math.inf


def check_draws_fit(n_draws: int, width: int, copies: int = 3) -> None:
    """Refuse, before the spend, ``n_draws`` rows of ``width`` values that cannot be held.

    The ledger is charged before the noise is drawn, so ``n_draws=10**13`` (291 TiB) was
    charged and then failed with ``MemoryError`` (stop-40 fuzz, on an accounting-only ledger).
    ``copies`` arrays of ``(n_draws, width)`` float64 are requested together and released at
    once (a release holds about three: the normals, their image and the draws; stop-40
    review): an allocation the operating system refuses outright (beyond its memory and
    swap, or an address-space limit, or NumPy's size limit) is refused here.  Public sizes.
    """
    shape = (n_draws, max(int(width), 1))
    try:
        if copies * shape[0] * shape[1] * 8 > _physical_memory():  # as check_doubles_fit
            raise MemoryError
        probe = [np.empty(shape, dtype=np.float64) for _ in range(copies)]
    except (MemoryError, ValueError, OverflowError):
        gib = copies * shape[0] * shape[1] * 8 // 2**30  # integers: 10**400 does not overflow
        raise ValueError(
            f"n_draws = {_short(n_draws)} draws of {width} values need {_short(gib)} GiB, "
            "more than this machine can hold; release fewer draws (nothing was spent or drawn)."
        ) from None
    del probe


def check_doubles_fit(count: int, what: str) -> None:
    """Refuse, before the spend, a computation whose arrays need ``count`` float64 values.

    Like ``check_draws_fit`` for arrays that are not draws: one allocation of ``count``
    doubles is requested (never touched, so the operating system does not commit it) and
    released at once; if the system refuses it, ``ValueError`` says so, naming ``what``
    (stop-44 audit: a sample-path release at 8·10⁴ distinct ``X_star`` rows, whose packed
    covariance is 24 GiB, was charged and then raised ``MemoryError``).  Public sizes only.
    """
    count = max(int(count), 1)
    try:
        # beyond the physical memory too: with vm.overcommit_memory = 1 the system grants any
        # allocation below the address-space limit (128 TiB), and the probe alone proves nothing
        if count * 8 > _physical_memory():
            raise MemoryError
        probe = np.empty(count, dtype=np.float64)
    except (MemoryError, ValueError, OverflowError):
        gib = count * 8 // 2**30
        raise ValueError(
            f"{what} needs {_short(count)} float64 values ({_short(gib)} GiB), more than this "
            "machine can hold; nothing was spent or drawn."
        ) from None
    del probe


def check_scale(value: float, name: str) -> float:
    """Return ``value`` as a float > 0 whose square is a normal float64 (a kernel amplitude).

    The bounds divide by ``value²``: ``1e300`` used to raise Python's ``OverflowError`` from
    ``value**2`` and ``1e-200`` to divide by zero, instead of a clear error.
    """
    v = check_positive(value, name)
    square = v * v  # float multiplication: inf or 0.0, never OverflowError
    if not (math.isfinite(square) and square >= sys.float_info.min):
        raise ValueError(
            f"{name} must be a number between 1e-154 and 1e154 (its square is used), got "
            f"{value!r}; rescale the response so that the kernel's amplitude is moderate."
        )
    return v


def check_count(value: int, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int >= ``minimum`` (a whole number of draws, paths, rounds …)."""
    try:
        item = _zero_d_item(value)  # np.array(True) is a bool, not the count 1
        ok = (
            not isinstance(item, bool | np.bool_ | np.timedelta64 | np.ma.MaskedArray)
            and isinstance(item, numbers.Real | decimal.Decimal)  # Decimal(3) counts 3
            and int(item) == item
            and item >= minimum
        )
    except (TypeError, ValueError, OverflowError):  # inf: OverflowError from int()
        ok = False
    if not ok:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(
            f"{name} must be {kind}, got {value!r}; pass e.g. {name}={max(minimum, 1)}."
        )
    return int(item)


def contains_dask(obj: Any) -> bool:
    """Whether ``obj`` is a Dask collection or a list/tuple holding one at any depth (a list
    of Dask arrays converts, block by block, on the client just the same; stop-35 review)."""
    if is_dask_collection(obj):
        return True
    if isinstance(obj, list | tuple) and "dask" in sys.modules:
        return any(
            contains_dask(e)
            for e in obj
            if not isinstance(e, float | int | str | bytes | np.generic)
        )
    return False


def refuse_dask(x: Any, name: str) -> None:
    """Refuse private data given as Dask collections where they would be gathered on the
    client (a model builder: stop-35 audit, ``sparse_gp_regression(X_dask, y_dask)`` pulled
    every private row from the workers, and failed on a distributed cluster anyway)."""
    if contains_dask(x):
        raise TypeError(
            f"{name} is (or holds) a Dask collection: converting it here would gather every row "
            "on the client. Build the model without the data (sparse_gp_regression(None, "
            "None, ..., Z=...)) and pass data=(X, y) to noise_aware_release, which sums on the "
            "workers."
        )


def is_dask_collection(obj: Any) -> bool:
    """Whether ``obj`` is a lazy Dask collection: a Dask array, DataFrame or Series, or any
    container of one (an ``xarray.DataArray`` on Dask; stop-31 audit: tested by module name,
    a Dask-backed DataArray took the in-memory path and ``np.asarray`` gathered all of X and
    y on the client)."""
    if type(obj).__module__.split(".")[0] == "dask":
        return True
    if "dask" not in sys.modules:  # nothing can be a Dask collection before Dask is imported
        return False
    from dask import is_dask_collection as _dask_check

    return bool(_dask_check(obj))


def float_array(x: ArrayLike, name: str, ndim: int | None) -> NDArray[np.float64]:
    """``x`` as float64 of rank ``ndim`` (1-D becomes one column for ``ndim == 2``).

    Non-numeric content is refused with ``TypeError`` whose message names no value
    (NumPy's own message would quote the offending entry); text and complex numbers are
    refused by their type (``refuse_text``), even when they would parse.
    """
    with quiet_masked_entries(x):
        refuse_text(x, name)
        if isinstance(x, np.ma.MaskedArray):
            x = masked_as_nan(x)
        try:
            # a long double beyond float64 becomes ±inf with a RuntimeWarning that would tell
            # one record's magnitude (stop-36 audit); the values are mapped record by record
            with np.errstate(over="ignore", invalid="ignore"):
                arr: NDArray[np.float64] | None = np.asarray(x, dtype=np.float64)
        except OverflowError:  # a Python int beyond float64 (10**400): ±inf, like 1e400
            arr = saturating_float_array(x, strict=True)  # (stop-32 audit: it raised, 1e308
            # did not); strict: a non-number is refused as without the overflow
        except (TypeError, ValueError):
            arr = None  # raised outside the handler: NumPy's message (which quotes the
            # offending entry) must not even stay attached as the error's __context__
        if arr is None:
            # a missing value that float() refuses (pandas.NA, e.g. from a nullable column's
            # .tolist(); a signalling-NaN Decimal) is NaN, like None: refusing it made the
            # refusal depend on whether a private record is missing (stop-48 leak audit)
            arr = missing_as_nan(x)
    if arr is None and _not_an_array(x):
        # a generator, set, dict view or SciPy sparse matrix was reported as "some entry is not
        # a number" (stop-41 fuzz); its type is public, its content is not read
        raise TypeError(
            f"{name} must be an array or a list of numbers, got a {type(x).__name__}"
            + (
                " (call .toarray())"
                if hasattr(x, "toarray")
                else " (convert it with list(...))"
                if isinstance(x, Iterator)
                else ""
            )
            + "."
        )
    if arr is None:
        raise TypeError(
            f"{name} must be a rectangular array of numbers; some entry is not a number or the "
            "rows differ in length (convert it to float64)."
        )
    if ndim == 2 and arr.ndim == 1:
        arr = arr[:, None]
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(
            f"{name} must be {ndim}-dimensional, got shape {arr.shape}; reshape it (one row "
            "per record)."
        )
    return arr


def _saturating_float(v: Any) -> float:
    if v is None:
        return math.nan
    try:
        return float(v)
    except OverflowError:  # an int too large for float64
        return math.inf if v > 0 else -math.inf
    except (TypeError, ValueError):
        return math.nan


def saturating_float_array(x: Any, *, strict: bool = False) -> NDArray[np.float64] | None:
    """Numbers (also Python ints beyond float64, and ``None``) as float64, entry by entry.

    For private content whose conversion must not fail on one record's value: an int beyond
    float64 becomes ±inf, ``None`` (or anything that is no number) NaN; ragged input gives
    ``None`` (a schema error for the caller).  Text is the caller's ``refuse_text``.
    ``strict``: an entry that is neither a number nor a missing value (``_is_missing``) gives
    ``None`` too, as the direct conversion refuses it: ``float_array`` took ``[10**400, {}]``
    (or ``[10**400, [1, 2]]``) as ``[inf, nan]`` and refused ``[1.0, {}]``, a refusal that
    depended on whether another private entry overflows float64 (stop-48 review).
    """
    try:
        obj = np.asarray(x, dtype=object)
    except ValueError:
        return None
    flat = obj.ravel()
    out = np.fromiter((_saturating_float(v) for v in flat), np.float64, obj.size)
    if strict:
        bad = np.isnan(out)  # only these can be non-numbers: check their type, not their value
        if bad.any() and not all(_is_missing(v) or _is_real_nan(v) for v in flat[bad]):
            return None
    return out.reshape(obj.shape)


def _is_real_nan(v: Any) -> bool:
    """A number that ``float()`` reads as NaN (``float('nan')``, ``np.float32('nan')``)."""
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError, OverflowError):
        return False


def _is_missing(v: Any) -> bool:
    """A missing-value marker among the entries of private content: ``None``, ``pandas.NA``,
    ``numpy.ma.masked`` or a NaN ``Decimal`` (whose signalling form ``float()`` refuses)."""
    if v is None or v is np.ma.masked:
        return True
    if isinstance(v, decimal.Decimal):
        return v.is_nan()
    t = type(v)
    return t.__name__ == "NAType" and t.__module__.startswith("pandas")


def missing_as_nan(x: Any) -> NDArray[np.float64] | None:
    """``x`` as float64 with its missing-value entries (``_is_missing``) NaN; ``None`` when
    some other entry is no number or the rows are ragged (a schema error for the caller).

    Only reached after the direct conversion failed, so the loop over the entries runs in
    that rare case only."""
    if _not_an_array(x):
        return None
    try:
        obj = np.asarray(x, dtype=object)
    except ValueError:  # ragged
        return None
    flat = obj.ravel().copy()
    for i, v in enumerate(flat):
        if _is_missing(v):
            flat[i] = math.nan
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(flat, dtype=np.float64).reshape(obj.shape)
    except OverflowError:
        return saturating_float_array(flat.reshape(obj.shape), strict=True)
    except (TypeError, ValueError):
        return None


#: Held while ``quiet_masked_entries`` has its filter installed.  ``warnings.catch_warnings``
#: saves and restores the process-wide filter list, so two threads inside it at once (Dask's
#: threaded scheduler converting object-dtype blocks) restore each other's lists: the first
#: to leave removed the filter while the other was still converting (its masked entries
#: warned again), and the last to leave re-installed a stale list (the filter stayed for
#: good).  Serialising the library's own entries excludes both (stop-48 review; re-entrant
#: for nested conversions in one thread).
_QUIET_MASKED_LOCK = threading.RLock()


@contextlib.contextmanager
def quiet_masked_entries(x: Any) -> Iterator[None]:
    """Silence NumPy's "converting a masked element to nan" ``UserWarning`` while private
    content is converted: it fires for each ``numpy.ma.masked`` entry of a list or object
    array (e.g. ``list(masked_y)``), so its presence told whether a private record is missing
    (stop-48 leak audit); the entry is NaN, a missing value, mapped record by record.  A plain
    numeric ``ndarray`` holds no such entry and is converted without touching the warning
    filters (which are process-wide: Dask's worker threads convert such blocks); other
    content is converted by one thread at a time (``_QUIET_MASKED_LOCK``)."""
    if isinstance(x, np.ndarray) and x.dtype.kind != "O":
        yield
        return
    with _QUIET_MASKED_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Warning: converting a masked element", UserWarning)
        yield


def _not_an_array(x: Any) -> bool:
    """An iterator, set, mapping view or SciPy sparse matrix: no array, whatever it holds."""
    return isinstance(x, Iterator | AbstractSet | MappingView) or (
        type(x).__module__.startswith("scipy.sparse")
    )


def masked_as_nan(x: np.ma.MaskedArray) -> NDArray[np.float64]:
    """A masked array's entries as float64, the masked ones NaN (missing values).

    ``np.asarray`` would drop the mask and use the hidden data (stop-32 audit: a masked private
    ``y`` was released as its ``.data``).  PyMC's ``pm.Data`` stores data holding NaN this
    way, so refusing masked arrays would depend on whether a private value is NaN; and the
    conversion never fails on an entry's value (``saturating_float_array``: an int beyond
    float64 is ±inf, a non-number NaN), hidden or not (stop-32 review).
    """
    mask = np.ma.getmaskarray(x)
    data = np.asarray(np.ma.getdata(x))
    try:
        values = np.asarray(data, dtype=np.float64)
    except (OverflowError, TypeError, ValueError):
        values = saturating_float_array(data)
    if values is None or values.shape != mask.shape:
        raise TypeError("a masked array must be rectangular; convert it to float64 first.")
    return np.where(mask, np.nan, values)


def library_instance(x: Any, module: str, *names: str) -> bool:
    """Whether ``x`` is one of the classes ``names`` of ``module`` (``"pandas"``,
    ``"xarray"``), without importing it: nothing can be an instance before it is imported."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(x, tuple(getattr(mod, n) for n in names))


def refuse_misaligned_rows(arrays: tuple[Any, ...], names: tuple[str, ...]) -> None:
    """Refuse pandas objects whose indexes differ: pm_dpgp pairs the rows of ``X`` and ``y``
    (and ``w``) by position, so ``y`` shuffled or filtered apart from ``X`` was paired with the
    wrong inputs, silently (stop-39 walkthrough: a shuffled Series released as if aligned).

    Only the row labels the caller arranged are compared (``Index.equals``), never a value,
    and nothing is quoted; non-pandas arrays are paired by position as documented.
    """
    labelled = [(nm, row_labels(a)) for a, nm in zip(arrays, names, strict=True)]
    indexed = [(nm, index) for nm, index in labelled if index is not None]
    for nm, index in indexed[1:]:
        refuse_other_rows(indexed[0][1], indexed[0][0], index, nm)


def row_labels(x: Any) -> Any:
    """The row index of a pandas ``Series`` / ``DataFrame``, else ``None`` (positional)."""
    return x.index if library_instance(x, "pandas", "Series", "DataFrame") else None


def refuse_other_rows(first: Any, first_name: str, other: Any, other_name: str) -> None:
    """Refuse two row indexes (``row_labels``) that differ; ``None`` is positional."""
    if first is not None and other is not None and not other.equals(first):
        raise ValueError(
            f"{first_name} and {other_name} are pandas objects with different indexes, but "
            "rows are paired by position: align them first (e.g. y = y.loc[X.index]) or pass "
            "arrays. (Only the two indexes were compared; nothing was spent or drawn.)"
        )


def check_finite_array(x: ArrayLike, name: str, *, ndim: int | None = None) -> NDArray[np.float64]:
    """Return ``x`` as a float64 array, raising ``ValueError`` on NaN/inf or wrong rank."""
    arr = float_array(x, name, ndim)
    if arr.size == 0:
        raise ValueError(f"{name} is empty; pass at least one value.")
    if not np.all(np.isfinite(arr)):
        # no count and no position: for private arrays (model builders) this is the data
        # owner's input check, and its message must say nothing more than the one bit
        raise ValueError(
            f"{name} contains NaN or infinite values. "
            "Remove or impute them with a public rule before a private release."
        )
    return arr


#: Python / NumPy scalar types that are not real numbers, though NumPy converts some of them
#: to floats (text that parses, the real part of a complex, a date's raw integer).
_NOT_REAL = (
    str,
    bytes,
    complex,
    np.complexfloating,
    np.datetime64,
    np.timedelta64,
    datetime.date,
    datetime.timedelta,
)


def public_real_array(x: Any, name: str) -> NDArray[np.float64]:
    """A PUBLIC numeric argument (a hyperparameter value, a box corner) as float64.

    Booleans, text (even text that parses), complex numbers, dates and durations are refused
    with a ``ValueError`` that may quote them (the value is public): ``np.asarray(v, float)``
    took ``True`` as 1 and ``"1.5"`` as 1.5, and dropped an imaginary part with only a warning
    (stop-40 fuzz: ``hyperparameters={"noise": True}`` released with noise sd 1).
    """
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and type(x) is np.ndarray:
        return x.astype(np.float64, copy=False)  # the common case: nothing to refuse
    if type(x) in (tuple, list) and x and all(type(v) is float for v in x):
        # exactly Python floats (no bool, text, nested sequence or NumPy scalar): nothing to
        # refuse, and the entry scan below costs ~0.5 ms for the 131 default orders of an
        # RdpCurveEvent, twice per DP Thompson round (stop-47 benchmark audit)
        return np.array(x, dtype=np.float64)
    _refuse_bool_or_text(x, name)
    if np.ma.is_masked(x):  # np.asarray used the hidden values (stop-41 fuzz); public: say so
        raise ValueError(f"{name} has masked entries, got {x!r}; pass plain numbers.")
    try:
        kind = np.asarray(x).dtype.kind
    except ValueError:  # ragged
        kind = "O"
    entries: Any = ()
    if kind == "O" or getattr(x, "dtype", None) is None:
        # a list's entries too: [True, 1.0] converts to float64 with True as 1 (stop-44 audit);
        # not those of a container whose own numeric dtype holds no booleans (a float pandas
        # Series or xarray DataArray: 4·10⁶ posterior sds took 3 s here, stop-44 review)
        try:
            entries = np.asarray(x, dtype=object).ravel()
        except ValueError:
            entries = ()
    if kind == "b" or any(isinstance(v, bool | np.bool_) for v in entries):
        raise ValueError(f"{name} must hold numbers, got booleans {x!r}; pass floats.")
    if kind in ("U", "S", "c", "M", "m") or any(isinstance(v, _NOT_REAL) for v in entries):
        raise ValueError(
            f"{name} must hold real numbers, got {x!r} (text, complex numbers or dates); "
            "pass floats."
        )
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x, dtype=np.float64)
    except OverflowError:  # 10**400: ±inf, which the caller's finiteness check refuses
        arr = saturating_float_array(x)
    except (TypeError, ValueError):
        arr = None
    if arr is None:
        raise ValueError(f"{name} must be a number or an array of numbers, got {x!r}.")
    return arr


def refuse_text(x: Any, name: str, *, note: str = " (nothing was spent or drawn)") -> None:
    """Refuse text (``str``/``bytes`` entries) or complex numbers by their TYPE alone.

    Whether every entry of a text array parses as a number is a property of the values: for
    private data, accepting text that parses and refusing text that does not would make the
    refusal depend on one record's content (audit of stop 30; ``docs/errors.md``).  So text
    is refused whatever it says, with a ``TypeError`` that quotes no entry, and complex
    numbers likewise (NumPy would drop their imaginary parts with only a warning), and
    dates/durations (read as raw integers otherwise).  Reads the
    dtype of an array, and for lists and object arrays the entries' Python types only.
    ``note`` ends the message (say nothing about the budget where a charge has been made).
    """
    dtype = getattr(x, "dtype", None)
    try:
        with quiet_masked_entries(x):  # a numpy.ma.masked entry: no warning (stop-48 audit)
            kind = dtype.kind if isinstance(dtype, np.dtype) else np.asarray(x).dtype.kind
    except ValueError:  # ragged: the float conversion that follows refuses it
        kind = "O"
    if kind == "O":  # a list with None, an object array, pandas ``object``: the entry types
        try:
            entries = np.asarray(x, dtype=object).ravel()
        except ValueError:
            entries = np.empty(0, dtype=object)
        if any(isinstance(v, _NOT_REAL) for v in entries):
            kind = "U"
    if kind in ("U", "S", "c", "M", "m"):
        raise TypeError(
            f"{name} holds text, complex numbers or dates, not real numbers; convert it to float64 "
            f"with a public rule first{note}."
        )


def private_array(x: ArrayLike, name: str, *, ndim: int) -> NDArray[np.float64]:
    """Return private ``x`` as a float64 array of rank ``ndim``, checking its shape only.

    The shape (number of records, number of columns) is public; the values are not
    inspected, so nothing here depends on them.  A 1-D input becomes one column when
    ``ndim == 2``; non-numeric content is a ``TypeError`` that quotes no value.  A Dask
    collection is refused: converting it would gather every private row on the client
    (stop-44 audit: ``binned_release(X, y_dask)`` computed ``y`` here, while the README says
    that whatever would gather the rows is refused); only the noise-aware and Dirichlet
    releases sum Dask data on the workers (their blocks arrive here as NumPy arrays).
    """
    if contains_dask(x):
        raise TypeError(
            f"{name} is (or holds) a Dask collection: this release reads the private values "
            "in this process, so every row would be gathered on the client. Call .compute() "
            "first if that is intended (noise_aware_release and dirichlet_release sum Dask "
            "data on the workers)."
        )
    return float_array(x, name, ndim)


def finite_rows(*arrays: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Rows (records) where every given private array is finite (a record-wise mask).

    Releases drop the other records' contributions instead of raising: dropping is a
    record-wise map, so the guarantee is unchanged, and whether it happened is never
    reported (``docs/errors.md``).
    """
    n = arrays[0].shape[0]
    ok = np.ones(n, dtype=bool)
    if n == 0:  # an empty chunk (e.g. an empty Dask block): "-1" cannot be inferred
        return ok
    for arr in arrays:
        ok &= np.all(np.isfinite(arr.reshape(n, -1)), axis=1)
    return ok


def check_clip_option(clip: str) -> str:
    """Validate the ``clip`` option of a release: only ``"warn"`` (clip to the public bounds).

    ``clip="raise"`` used to refuse data outside the public bounds; whether it refused
    depended on the private data (a one-bit answer, and with a bound chosen by the caller a
    search for the data's extremes), so it is refused here, from the argument alone.
    """
    if clip == "raise":
        raise ValueError(
            "clip='raise' is no longer supported: refusing data outside the public bounds "
            "would tell the caller something about the private data. Use clip='warn' (values "
            "are clipped to the public bounds, as documented in docs/errors.md) and check your "
            "own data before the release if you need to know."
        )
    if clip != "warn":
        raise ValueError(f"clip must be 'warn', got {clip!r}; use clip='warn'.")
    return clip


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
    """Validate a public clipping range ``(lower, upper)`` from the range alone.

    The range is never compared with the private values: a refusal that depended on them
    (e.g. "equals the minimum of the data") would answer a question about the data for free,
    and a caller could search for the data's extremes with it.  ``private_values`` and
    ``bounds_are_public`` are accepted for compatibility and not used; the data owner can run
    ``pm_dpgp.audit.check_public_choices`` on their own data instead.
    """
    del private_values, bounds_are_public
    pair = None
    if not isinstance(bounds, Mapping | str | bytes | bytearray | set | frozenset):
        try:  # a dict gave its keys, a set an arbitrary order (stop-40 fuzz)
            pair = [real_or_none(b, name) for b in bounds]  # booleans and text refused
        except TypeError:
            pair = None
    if pair is None or len(pair) != 2 or None in pair:
        raise ValueError(
            f"{name} must be a pair (lower, upper) of numbers, got {bounds!r}; pass e.g. (0, 1)."
        )
    lower, upper = pair
    if not (math.isfinite(lower) and math.isfinite(upper)) or not lower < upper:
        raise ValueError(
            f"{name} must be finite with lower < upper, got {bounds!r}; choose the range from "
            "public knowledge."
        )
    if not math.isfinite(upper - lower):  # the width is every mechanism's sensitivity scale
        raise ValueError(
            f"{name} = {bounds!r} is so wide that upper - lower overflows; choose a range "
            "from public knowledge (the noise scales with its width)."
        )
    return lower, upper


def clip_to_bounds(
    values: NDArray[np.float64], bounds: tuple[float, float], *, name: str = "y"
) -> NDArray[np.float64]:
    """Clip private ``values`` to the public ``bounds``, silently.

    Clipping is what makes the data sensitivity ``d = upper - lower`` a true bound; the
    release describes the clipped data (documented in ``docs/errors.md`` and recorded in
    the release metadata as a rule).  How many values were changed depends on the private
    data, so it is not reported.  Non-finite values become the midpoint of the bounds (a
    public value).  ``name`` is kept for compatibility.
    """
    del name
    lower, upper = bounds
    filled = np.where(np.isfinite(values), values, 0.5 * (lower + upper))
    return np.clip(filled, lower, upper)


# --------------------------------------------------------------------------------------------
# Warnings about absurd but valid settings (issue 15, point 5).  Every one is decided from
# public quantities only: the release's ε and δ, the number of records n (public under the
# replace-one neighbouring relations this package uses, in both privacy models:
# docs/privacy_model.md, "What is public"), the public range and the public prior scale.
# --------------------------------------------------------------------------------------------

#: A release whose own ε exceeds this gets a ``PrivacyWarning`` (``docs/errors.md``).
#: At ε = 10 the likelihood ratio between neighbours may reach e¹⁰ ≈ 22,000: the guarantee
#: is nominal (Dwork & Roth 2014, §3.5 discuss ε "small constant"; deployments above 10 are
#: widely criticised, e.g. Domingo-Ferrer, Sánchez & Blanco-Justicia 2021, CACM 64(7)).
EPSILON_WARN_THRESHOLD: float = 10.0

#: A public response range wider than this many prior standard deviations of y
#: (``sqrt(max k(x, x) + σ_n²)`` at the public points) gets a ``PrivacyWarning``: a
#: range of ±50 prior sd is not a plausible range for y under the model, and the DP noise,
#: proportional to the width, then dwarfs any signal the model considers plausible.
WIDE_RANGE_FACTOR: float = 100.0


def warn_public_settings(
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    n_records: int | None = None,
    range_width: float | None = None,
    prior_sd: float | None = None,
    range_name: str = "y_bounds",
    bounds: tuple[float, float] | None = None,
    centre: float | list[float] | None = None,
    stacklevel: int = 3,
) -> list[str]:
    """Emit a ``PrivacyWarning`` for each absurd but valid public setting.

    * ``delta > 1/n``: a mechanism that publishes one whole record at random with
      probability 1/n is (0, 1/n)-DP, so δ ≥ 1/n permits releasing records in the clear
      (Dwork & Roth 2014, §2.3, remark after Def. 2.4);
    * ``epsilon >`` ``EPSILON_WARN_THRESHOLD``;
    * ``range_width > WIDE_RANGE_FACTOR · prior_sd`` (``WIDE_RANGE_FACTOR``);
    * a ``centre`` (the prior mean the clipped outputs are centred at; for a selection, the
      candidates' means, one warning for the first outside) outside ``bounds``: every
      residual then has one sign and the bound ``max |bound − centre|`` on it, which sets the
      sensitivity, exceeds the whole width (stop-39 walkthrough: mean 0 with ``y_bounds =
      (1, 3)`` tripled it, silently).

    Every input is public (``docs/errors.md``: the number of records is public under
    replace-one neighbours), so whether a warning fires says nothing about the private data.
    Returns the messages (for the callers' metadata); each names the setting and a fix.
    """
    messages: list[str] = []
    if delta is not None and n_records is not None and n_records > 0 and delta > 1.0 / n_records:
        messages.append(
            f"delta={delta:.3g} exceeds 1/n = {1.0 / n_records:.3g} (n = {n_records} records): "
            "a mechanism that publishes a random record in the clear satisfies this "
            f"guarantee. Choose delta much smaller than 1/n, e.g. "
            f"delta={min(1e-5, float(n_records) ** -2):.1e} (the smaller of 1e-5 and 1/n**2)."
        )
    if epsilon is not None and epsilon > EPSILON_WARN_THRESHOLD:
        messages.append(
            f"epsilon={epsilon:.6g} exceeds {EPSILON_WARN_THRESHOLD:g}: neighbouring datasets "
            f"may then be distinguished with likelihood ratio up to e^{epsilon:.3g}, so the "
            "guarantee is nominal. Choose epsilon <= 10 (e.g. 1), or release less (fewer "
            "draws or paths, a narrower public range)."
        )
    if (
        range_width is not None
        and prior_sd is not None
        and math.isfinite(prior_sd)
        and prior_sd > 0.0
        and range_width > WIDE_RANGE_FACTOR * prior_sd
    ):
        messages.append(
            f"the public range {range_name} is {range_width:.4g} wide, more than "
            f"{WIDE_RANGE_FACTOR:g} prior standard deviations of y ({prior_sd:.4g}): the DP "
            "noise grows with the width and will dwarf any signal the model finds plausible. "
            f"Choose {range_name} from public knowledge of the plausible range of y (e.g. the "
            "prior mean +/- 4 prior sd), or rescale the model."
        )
    lo, hi = (0.0, 0.0) if bounds is None else (float(bounds[0]), float(bounds[1]))
    centres = [] if bounds is None or centre is None else np.atleast_1d(centre).tolist()
    outside = [c for c in centres if not lo <= c <= hi]
    if outside:
        mean = float(outside[0])
        reach = max(abs(lo - mean), abs(hi - mean))
        messages.append(
            f"the prior mean {mean:.6g} lies outside {range_name} [{lo:.6g}, {hi:.6g}]: the "
            f"clipped outputs are centred at it, so their bound |y - mean| <= {reach:.4g} (which "
            f"sets the sensitivity and the noise) is {reach / (0.5 * (hi - lo)):.3g} times the "
            f"half-width. Give the model a prior mean inside {range_name} (e.g. its midpoint "
            f"{0.5 * (lo + hi):.6g}), or bounds around the prior mean."
        )
    for message in messages:
        warnings.warn(message, PrivacyWarning, stacklevel=stacklevel)
    return messages


# --------------------------------------------------------------------------------------------
# Renamed arguments (issue 14: one vocabulary).  Old names keep working for one release with
# a DeprecationWarning; passing both the old and the new name is a TypeError.
# --------------------------------------------------------------------------------------------


def renamed(
    old: str, new: str, kwargs: dict[str, Any], value: Any, *, func: str, stacklevel: int = 3
) -> Any:
    """Return the value of argument ``new``, taking a deprecated ``old`` from ``kwargs``.

    ``kwargs`` is the caller's ``**renamed`` dict; ``old`` is popped from it.  Passing both
    names raises ``TypeError`` (which one was meant is ambiguous); the old name alone warns
    with ``DeprecationWarning`` and is used as ``new``.  ``value`` is the new argument's value,
    ``None`` when it was not given.
    """
    if old not in kwargs:
        return value
    old_value = kwargs.pop(old)
    if value is not None:
        raise TypeError(f"{func}() got both {old!r} (deprecated) and {new!r}; pass only {new}=.")
    warnings.warn(
        f"{func}(): the argument {old!r} is renamed {new!r} and will be removed in the next "
        f"release; pass {new}= instead.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return old_value


def reject_unexpected(kwargs: dict[str, Any], *, func: str) -> None:
    """Raise ``TypeError`` for keyword arguments left in ``kwargs`` (like Python does)."""
    if kwargs:
        name = next(iter(kwargs))
        raise TypeError(
            f"{func}() got an unexpected keyword argument {name!r}; check the spelling against "
            "the documented arguments."
        )


def require(value: Any, name: str, *, func: str) -> Any:
    """Raise ``TypeError`` for a required keyword argument that was not given."""
    if value is None:
        raise TypeError(f"{func}() missing required keyword argument: {name!r}; pass {name}=.")
    return value


def centred_bound(
    y_bounds: tuple[float, float], centre: float, *, name: str = "y_bounds"
) -> tuple[float, float, float]:
    """``(lower, upper, M)`` with ``M = max(|lower − centre|, |upper − centre|)``.

    For mechanisms whose sensitivity is stated for centred responses ``|y − μ₀| ≤ M``
    (Honkela's ``R_y``, Maciazek's ``M_Y``): clipping ``y`` to the public interval
    ``[lower, upper]`` gives ``y − μ₀ ∈ [lower − μ₀, upper − μ₀] ⊂ [−M, M]``, so the bound
    stated with ``M`` holds.  ``M`` is the half-width ``(upper − lower)/2`` when the public
    centre ``μ₀`` is the midpoint of the interval, and larger otherwise.  All three are public.
    """
    lower, upper = check_public_bounds(y_bounds, name=name)
    centre = check_finite_number(centre, "the public centre (prior mean)")
    return lower, upper, max(abs(lower - centre), abs(upper - centre))


def bounds_from_centred(
    old: str, kwargs: dict[str, Any], y_bounds: Any, centre: float, *, func: str
) -> Any:
    """Deprecated centred bound ``old=M`` → ``y_bounds=(centre − M, centre + M)``."""
    if old not in kwargs:
        return y_bounds
    M = check_positive(renamed(old, "y_bounds", kwargs, y_bounds, func=func, stacklevel=4), old)
    return (float(centre) - M, float(centre) + M)


def renamed_fields(cls: type, renames: dict[str, str]) -> type:
    """Let the dataclass ``cls`` accept its old field names (``{old: new}``) for one release.

    Wraps the generated ``__init__`` (also used by ``dataclasses.replace``): an old keyword
    warns with ``DeprecationWarning`` and fills the new field; old and new together raise
    ``TypeError``.
    """
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        old = {k: kwargs.pop(k) for k in renames if k in kwargs}
        for o, n in renames.items():
            value = renamed(o, n, old, kwargs.pop(n, None), func=cls.__name__)
            if value is not None:
                kwargs[n] = value
        init(self, *args, **kwargs)

    __init__.__doc__ = init.__doc__
    # help(), IDEs and inspect.signature show the fields, not (*args, **kwargs) (stop-49 audit:
    # SamplePathBound's documented parameters were invisible there)
    __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls
