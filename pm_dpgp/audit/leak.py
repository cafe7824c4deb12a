"""Scan a serialised release for private values.

A release must contain nothing private (developers' guide): no training outputs,
no private inputs under full privacy, no non-DP posterior means.  This module
looks for given private numbers everywhere in an ``InferenceData``: in every
variable and coordinate of every group, in every attribute (JSON attributes are
parsed), and in the raw bytes of its netCDF file as float64 and float32.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["LeakFinding", "scan_for_values"]


@dataclass(frozen=True)
class LeakFinding:
    """One place where a private value was found."""

    where: str
    value: float


def _numbers_in(obj: Any) -> list[float]:
    """All numbers in a (possibly nested, possibly JSON-encoded) attribute value."""
    if isinstance(obj, str):
        try:
            return _numbers_in(json.loads(obj))
        except (json.JSONDecodeError, ValueError):
            return []
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers_in(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in _numbers_in(v)]
    if isinstance(obj, np.ndarray):
        return obj.astype(np.float64).ravel().tolist() if obj.dtype.kind in "fiu" else []
    if isinstance(obj, bool):
        return []
    if isinstance(obj, int | float | np.number):
        return [float(obj)]
    return []


def _matches(candidates: np.ndarray, private: np.ndarray, rtol: float) -> np.ndarray:
    """Boolean mask over ``private`` of values that occur among ``candidates``."""
    if candidates.size == 0:
        return np.zeros(private.shape, dtype=bool)
    cand = np.sort(candidates.ravel())
    idx = np.clip(np.searchsorted(cand, private), 1, cand.size - 1) if cand.size > 1 else None
    if idx is None:
        nearest = np.abs(cand[0] - private)
    else:
        nearest = np.minimum(np.abs(cand[idx] - private), np.abs(cand[idx - 1] - private))
    return nearest <= rtol * np.maximum(np.abs(private), 1e-300)


def scan_for_values(
    idata: Any, private_values: ArrayLike, *, rtol: float = 1e-9
) -> list[LeakFinding]:
    """Return every place in ``idata`` (and its netCDF bytes) holding a private value.

    Parameters
    ----------
    idata:
        an ``arviz.InferenceData`` (or a path to its netCDF file).
    private_values:
        numbers that must not appear (e.g. the training outputs, clipped and raw).
    rtol:
        relative tolerance of a match (exact float64 equality with ``rtol=0``).
    """
    from pm_dpgp.compat import from_netcdf, iter_all_groups, to_netcdf

    private = np.unique(np.asarray(private_values, dtype=np.float64).ravel())
    findings: list[LeakFinding] = []
    tmpdir = None
    if isinstance(idata, str | os.PathLike):
        path = Path(idata)
        idata = from_netcdf(path)
    else:
        tmpdir = tempfile.TemporaryDirectory()
        path = Path(tmpdir.name) / "release.nc"
        to_netcdf(idata, path)
    try:
        for group, ds in iter_all_groups(idata):
            for name, da in list(ds.data_vars.items()) + list(ds.coords.items()):
                if da.dtype.kind in "fiu":
                    hit = _matches(np.asarray(da.values, dtype=np.float64), private, rtol)
                    findings += [LeakFinding(f"{group}/{name}", v) for v in private[hit]]
            attrs = dict(ds.attrs)
            for vname, var in ds.variables.items():
                attrs.update({f"<{vname}>.{k}": v for k, v in var.attrs.items()})
            for key, value in attrs.items():
                nums = np.asarray(_numbers_in(value), dtype=np.float64)
                hit = _matches(nums, private, rtol)
                findings += [LeakFinding(f"{group}.attrs[{key}]", v) for v in private[hit]]
        raw = path.read_bytes()
        for v in private:
            for dtype in ("<f8", ">f8", "<f4", ">f4"):
                if np.array(v, dtype=dtype).tobytes() in raw:
                    findings.append(LeakFinding(f"netCDF bytes ({dtype})", float(v)))
            if repr(float(v)).encode() in raw and not float(v).is_integer():
                findings.append(LeakFinding("netCDF bytes (text)", float(v)))
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    return findings
