"""Scan a serialised release for private values.

A release must contain nothing private (developers' guide): no training outputs,
no private inputs under full privacy, no non-DP posterior means.  This module
looks for given private numbers everywhere in an ``InferenceData`` (or ArviZ 1
``DataTree``) and in its netCDF-4 file, at three levels:

1. **decoded objects**: every variable and coordinate of every group, every
   attribute (JSON attributes are parsed, numbers in other strings are read), in
   memory and, independently of xarray's decoding, every HDF5 dataset and attribute
   of the file (read with h5py, so compressed chunks and objects xarray hides are
   seen);
2. **float64 bytes** of each private value anywhere in the raw file;
3. **float32 bytes** of each private value anywhere in the raw file *outside* the
   storage of float datasets (whose elements level 1 compares at their own
   alignment), and decimal text of the value as a whole token; levels 2 and 3 also
   on the decoded bytes of opaque datasets (bytes, 1-byte integers), which
   compression hides from the raw file.

How each stored number is compared with a private value ``v``
(``docs/privacy_model.md``, "The leak scan"): a float32 element or attribute
matches if it equals ``float32(v)`` (or is within ``rtol``); any other number ``c``
matches if ``|c - v| <= rtol |v|`` or ``c`` is ``v`` rounded to float32, exactly
(``float64(float32(v))``, or the shortest decimal of ``float32(v)`` parsed as a
float64).  So a private value stored as float32 anywhere is found, while a
float32-sized byte pattern that occurs by chance inside float data (which fired
about once in eight runs of a release with 1,680 float64 draws and 800 private
values) is not.  float16 storage matches ``float16(v)`` exactly, complex storage by
its parts, and a decimal token of at least ``_ROUNDED_DIGITS`` significant digits
every ``v`` that rounds to it (stop-43 audit).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import real_or_nan

__all__ = ["LeakFinding", "scan_for_values"]

#: decimal number tokens in text (integers are read from JSON only, see ``_numbers_in``); a
#: token may touch letters or ``_`` (a label ``"obs_2.7182818"``, a unit ``"2.7182818s"``: the
#: old boundary ``[\w.]`` hid both, stop-45 audit), not digits or dots (``"5.10.3"``)
_DECIMAL = re.compile(r"(?<![\d.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\d.])")


@dataclass(frozen=True)
class LeakFinding:
    """One place where a private value was found."""

    where: str
    value: float


@dataclass(frozen=True)
class _Private:
    """The private values and their float32 forms (all float64 arrays, one entry per value)."""

    values: NDArray[np.float64]
    f32: NDArray[np.float32]  # float32(v)
    f32_exact: NDArray[np.float64]  # float64(float32(v))
    f32_short: NDArray[np.float64]  # the shortest decimal of float32(v), parsed as float64
    f16: NDArray[np.float16]  # float16(v): compared exactly with float16 storage only

    @classmethod
    def of(cls, private_values: ArrayLike) -> _Private:
        v = np.unique(np.asarray(private_values, dtype=np.float64).ravel())
        v = v[np.isfinite(v)]
        with np.errstate(over="ignore"):
            f32 = v.astype(np.float32)  # beyond float32's range: inf, matches no finite number
            f16 = v.astype(np.float16)
        short = np.array([float(str(x)) for x in f32], dtype=np.float64)
        return cls(v, f32, f32.astype(np.float64), short, f16)


#: A decimal token of text with its half unit in the last place: a private value that rounds
#: to the token at its own number of digits is found (``_strings_numbers``).
_TEXT = np.dtype([("value", np.float64), ("half_ulp", np.float64)])

#: Decimal tokens with at least this many significant digits are also compared after rounding
#: the private values to the token's digits (``'%.8g'``, ``round(v, 6)`` in JSON, ``f'{v:.4f}'``
#: of a value above 100 were missed at rtol 1e-9; stop-43 audit).  Fewer digits match too many
#: unrelated numbers to be evidence.
_ROUNDED_DIGITS = 6


def _text_token(token: str) -> tuple[float, float]:
    """``(value, half unit in its last place)`` of a decimal token, the latter 0 when the
    token has fewer than ``_ROUNDED_DIGITS`` significant digits."""
    mantissa, _, exponent = token.lower().lstrip("+-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    significant = (whole + fraction).lstrip("0")
    value = float(token)
    if len(significant) < _ROUNDED_DIGITS or not math.isfinite(value):
        return value, 0.0
    last = -len(fraction) + (int(exponent) if exponent else 0)
    try:
        return value, 0.5 * 10.0**last
    except OverflowError:  # "1.234567e+400" (stop-43 review): no finite value rounds to it
        return value, 0.0


def _strings_numbers(text: str) -> list[NDArray[Any]]:
    """Numbers in a string: all numbers of a JSON document, and decimal tokens of any text."""
    out = []
    try:
        out += _numbers_in(json.loads(text))
    except (json.JSONDecodeError, ValueError, RecursionError):
        pass
    tokens = [t for t in _DECIMAL.findall(text) if any(c in t for c in ".eE")]
    if tokens:
        out.append(np.array([_text_token(t) for t in tokens], dtype=_TEXT))
    return out


def _numbers_in(obj: Any) -> list[NDArray[Any]]:
    """All numbers in a (possibly nested, possibly JSON-encoded) attribute value.

    Returned as arrays that keep a float32 dtype where the value was float32, so that
    it is compared at float32 precision.
    """
    if isinstance(obj, bytes):
        obj = obj.decode("utf-8", errors="replace")
    if isinstance(obj, str):
        return _strings_numbers(obj)
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers_in(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in _numbers_in(v)]
    if isinstance(obj, np.ndarray | np.generic):
        arr = np.asarray(obj)
        if arr.dtype.kind in "fiu":  # float16 too, compared at its own precision (stop 43)
            return [arr.ravel()]
        if arr.dtype.kind == "c":  # the real and imaginary parts (complex was skipped)
            return [arr.real.ravel(), arr.imag.ravel()]
        if arr.dtype.kind in "SUO":
            return [x for v in arr.ravel().tolist() for x in _numbers_in(v)]
        if arr.dtype.names:  # compound HDF5 type: each field
            return [x for f in arr.dtype.names for x in _numbers_in(arr[f])]
        return []
    if isinstance(obj, bool):
        return []
    if isinstance(obj, int | float):
        return [np.array([obj], dtype=np.float64)]
    return []


def _within(candidates: NDArray[np.float64], private: NDArray[np.float64], rtol: float):
    """Boolean mask over ``private`` of values within ``rtol`` of one of ``candidates``."""
    if candidates.size == 0:
        return np.zeros(private.shape, dtype=bool)
    cand = np.sort(candidates.ravel())
    if cand.size == 1:
        nearest = np.abs(cand[0] - private)
    else:
        idx = np.clip(np.searchsorted(cand, private), 1, cand.size - 1)
        nearest = np.minimum(np.abs(cand[idx] - private), np.abs(cand[idx - 1] - private))
    return nearest <= rtol * np.maximum(np.abs(private), 1e-300)


def _hits(arrays: list[NDArray[Any]], private: _Private, rtol: float) -> NDArray[np.bool_]:
    """Mask over ``private.values`` of those stored in ``arrays`` (see the module docstring)."""
    hit = np.zeros(private.values.shape, dtype=bool)
    if private.values.size == 0:
        return hit
    text = [a.ravel() for a in arrays if a.dtype == _TEXT]
    arrays = [a["value"] if a.dtype == _TEXT else a for a in arrays]
    f16 = [a.ravel() for a in arrays if a.dtype == np.float16]
    if f16:
        c16 = np.concatenate(f16)
        hit |= np.isin(private.f16, c16[np.isfinite(c16)]) & np.isfinite(private.f16)
    f32 = [a.ravel() for a in arrays if a.dtype == np.float32]
    other = [
        a.ravel().astype(np.float64) for a in arrays if a.dtype not in (np.float32, np.float16)
    ]
    if text:
        hit |= _rounded_hits(np.concatenate(text), private.values)
    if f32:
        c32 = np.concatenate(f32)
        c32 = c32[np.isfinite(c32)]
        hit |= np.isin(private.f32, c32) | _within(c32.astype(np.float64), private.values, rtol)
    if other:
        c = np.concatenate(other)
        c = c[np.isfinite(c)]
        hit |= _within(c, private.values, rtol)
        hit |= np.isin(private.f32_exact, c) | np.isin(private.f32_short, c)
    return hit


def _rounded_hits(tokens: NDArray[Any], private: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mask over the sorted ``private`` values that round to one of the decimal ``tokens``
    (within its half unit in the last place, with a relative 1e-12 for the parsing)."""
    hit = np.zeros(private.shape, dtype=bool)
    tokens = tokens[(tokens["half_ulp"] > 0.0) & np.isfinite(tokens["value"])]
    if tokens.size == 0:
        return hit
    width = tokens["half_ulp"] + 1e-12 * np.abs(tokens["value"])
    lo = np.searchsorted(private, tokens["value"] - width, side="left")
    hi = np.searchsorted(private, tokens["value"] + width, side="right")
    for a, b in zip(lo[hi > lo], hi[hi > lo], strict=True):
        hit[a:b] = True
    return hit


def _findings(where: str, arrays: list[NDArray[Any]], private: _Private, rtol: float):
    return [LeakFinding(where, float(v)) for v in private.values[_hits(arrays, private, rtol)]]


# --------------------------------------------------------------------------- in memory
def _scan_groups(idata: Any, private: _Private, rtol: float) -> list[LeakFinding]:
    from pm_dpgp.compat import iter_all_groups

    findings: list[LeakFinding] = []
    for group, ds in iter_all_groups(idata):
        for name, da in list(ds.data_vars.items()) + list(ds.coords.items()):
            findings += _findings(
                f"{group}/{name}", _numbers_in(np.asarray(da.values)), private, rtol
            )
        attrs = dict(ds.attrs)
        for vname, var in ds.variables.items():
            attrs.update({f"<{vname}>.{k}": v for k, v in var.attrs.items()})
        for key, value in attrs.items():
            findings += _findings(f"{group}.attrs[{key}]", _numbers_in(value), private, rtol)
    return findings


# --------------------------------------------------------------------------- the file
def _scan_hdf5(path: Path, private: _Private, rtol: float):
    """Compare every HDF5 dataset and attribute of the file; return findings and the byte
    ranges holding float datasets' elements (compared here at their own alignment)."""
    import h5py

    findings: list[LeakFinding] = []
    float_storage: list[tuple[int, int]] = []

    def attrs_of(name: str, obj: Any) -> None:
        for key in obj.attrs:
            try:
                value = obj.attrs[key]
            except (OSError, TypeError, ValueError):  # pragma: no cover - unreadable type
                continue  # its bytes are still scanned below
            findings.extend(
                _findings(f"netCDF {name}.attrs[{key}]", _numbers_in(value), private, rtol)
            )

    def visit(name: str, obj: Any) -> None:
        attrs_of(name, obj)
        if not isinstance(obj, h5py.Dataset) or obj.shape is None:
            return
        findings.extend(_findings(f"netCDF {name}", _numbers_in(obj[()]), private, rtol))
        if obj.dtype.kind in "SV" or (obj.dtype.kind in "iu" and obj.dtype.itemsize == 1):
            # an opaque byte blob (a pickled array stored as uint8): its decoded bytes, which
            # compression hides from the raw-file scan (stop-43 audit)
            blob = np.asarray(obj[()]).tobytes()
            found = _scan_bytes(blob, private, [])
            if obj.dtype.kind != "S":  # (bytes are read as text above) JSON or text stored as
                # 1-byte integers: its decimal tokens, rounded ones too (the raw-bytes text scan
                # knows only exact forms: round(v, 6) in such JSON was missed, stop-45 audit)
                found += _findings("text", _strings_numbers(blob.decode("latin-1")), private, rtol)
            findings.extend(LeakFinding(f"netCDF {name} ({f.where})", f.value) for f in found)
        if obj.dtype.kind == "f":
            dsid = obj.id
            if obj.chunks is not None:
                for i in range(dsid.get_num_chunks()):
                    info = dsid.get_chunk_info(i)
                    float_storage.append((info.byte_offset, info.size))
            elif dsid.get_offset() is not None:
                float_storage.append((dsid.get_offset(), dsid.get_storage_size()))

    with h5py.File(path, "r") as f:
        attrs_of("/", f)
        f.visititems(visit)
    return findings, float_storage


def _pattern_offsets(raw: bytes, patterns: NDArray[Any]) -> tuple[NDArray[np.intp], NDArray[Any]]:
    """Offsets (any alignment) in ``raw`` where one of ``patterns`` (uint32 or uint64 bit
    patterns) occurs, and which pattern."""
    width = patterns.dtype.itemsize
    buf = np.frombuffer(raw, dtype=np.uint8)
    offs, which = [], []
    for k in range(width):
        n = (buf.size - k) // width
        if n <= 0:
            continue
        words = buf[k : k + n * width].view(patterns.dtype)
        idx = np.flatnonzero(np.isin(words, patterns))
        offs.append(k + idx * width)
        which.append(words[idx])
    if not offs:
        return np.zeros(0, dtype=np.intp), patterns[:0]
    return np.concatenate(offs), np.concatenate(which)


def _scan_bytes(raw: bytes, private: _Private, float_storage: list[tuple[int, int]]):
    findings: list[LeakFinding] = []
    covered = np.zeros(len(raw), dtype=bool)
    for start, size in float_storage:
        covered[start : start + size] = True
    for dtype, bits in (("<f8", "<u8"), (">f8", "<u8"), ("<f4", "<u4"), (">f4", "<u4")):
        source = private.values if dtype[-1] == "8" else private.f32
        patterns = source.astype(dtype).view(bits)
        offs, which = _pattern_offsets(raw, patterns)
        if dtype[-1] == "4":  # inside float data, level 1 compared the aligned elements
            width = 4
            inside = np.array([covered[o : o + width].all() for o in offs], dtype=bool)
            which = which[~inside]
        found = np.isin(patterns, which) & np.isfinite(source)  # beyond float32: no pattern
        label = f"netCDF bytes ({dtype})" + ("" if dtype[-1] == "8" else ", outside float data")
        findings += [LeakFinding(label, float(v)) for v in private.values[found]]
    tokens = set(re.findall(rb"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?", raw))
    for v, v32 in zip(private.values, private.f32, strict=True):
        if float(v).is_integer():
            continue
        texts = {repr(float(v)), str(v32), repr(float(v32))}
        if any(t.encode() in tokens for t in texts):
            findings.append(LeakFinding("netCDF bytes (text)", float(v)))
    return findings


def scan_for_values(
    idata: Any, private_values: ArrayLike, *, rtol: float = 1e-9
) -> list[LeakFinding]:
    """Return every place in ``idata`` (and its netCDF file) holding a private value.

    A value is found if it is stored as float64, as float32 (rounded), as an integer or
    as decimal text, in a variable, coordinate or attribute (also inside JSON strings)
    of any group, or as float64 bytes anywhere in the file; see the module docstring and
    ``docs/privacy_model.md`` for the comparisons and their false-positive rates.

    Parameters
    ----------
    idata:
        an ``arviz.InferenceData`` or ``xarray.DataTree`` (or a path to its netCDF file).
    private_values:
        numbers that must not appear (e.g. the training outputs, clipped and raw).
    rtol:
        relative tolerance of a match (exact float64 equality with ``rtol=0``); float32
        forms of a value are always compared exactly.
    """
    from pm_dpgp.compat import from_netcdf, to_netcdf

    rtol = real_or_nan(rtol, "rtol")  # rtol=-1 or nan matched nothing: "no leak" (stop 40)
    if not (math.isfinite(rtol) and rtol >= 0.0):
        raise ValueError(f"rtol must be a finite number >= 0, got {rtol!r}; pass e.g. 1e-9.")

    private = _Private.of(private_values)
    tmpdir = None
    opened = isinstance(idata, str | os.PathLike)
    if opened:
        path = Path(idata)
        idata = from_netcdf(path)
    else:
        tmpdir = tempfile.TemporaryDirectory()
        path = Path(tmpdir.name) / "release.nc"
        to_netcdf(idata, path)
    try:
        findings = _scan_groups(idata, private, rtol)
        in_file, float_storage = _scan_hdf5(path, private, rtol)
        findings += in_file
        findings += _scan_bytes(path.read_bytes(), private, float_storage)
    finally:
        if opened and callable(getattr(idata, "close", None)):
            idata.close()  # ArviZ 1 keeps the file open otherwise: it could not be rewritten
        if tmpdir is not None:
            tmpdir.cleanup()
    return findings
