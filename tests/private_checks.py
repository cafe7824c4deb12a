"""Checks that a serialisable result (hyperparameter selection) holds no private number."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import numpy as np


def _numbers(obj: Any) -> list[float]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in _numbers(v)]
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "fiu":
        return [float(x) for x in obj.ravel()]
    if isinstance(obj, float | int | np.floating | np.integer) and not isinstance(obj, bool):
        return [float(obj)]
    return []


def assert_no_private_number(result: Any, private: np.ndarray) -> bytes:
    """No number of ``result.to_metadata()`` (after a JSON round trip) or of
    ``dataclasses.asdict(result)`` is within 1e-9 (relative) of a ``private`` value, and
    ``pickle.dumps(result)`` holds none of their float64 bytes.  Returns the pickle.

    ``asdict`` too (stop-34 audit): it included the owner's slot, so
    ``json.dumps(asdict(result))`` published the private scores."""
    nums = np.array(
        _numbers(json.loads(json.dumps(result.to_metadata())))
        + _numbers(dataclasses.asdict(result))
    )
    for v in private:
        assert not np.any(np.isclose(nums, v, rtol=1e-9, atol=0.0)), v
    blob = pickle.dumps(result)
    for v in private:
        assert np.array(v, dtype="<f8").tobytes() not in blob
    return blob


def untouchable_private_data(monkeypatch: Any, n: int, d: int = 1) -> tuple[Any, Any]:
    """Private ``(X, y)`` of shape ``(n, d)`` and ``(n,)`` that raise if any value is read.

    xarray DataArrays over a lazily indexed backend array whose reads raise: their declared
    schema (shape and NumPy dtype) is public, and the selections check it before the spend
    without reading a value; ``np.asarray`` or any indexing of the values raises, whatever
    route the code takes (stop-41 review: the first version of this helper used zero arrays
    and patched two conversion functions, and a read of ``y`` inserted before the spend still
    passed).  The conversion routes are patched to raise as well.  (Stop 41: the schema is
    trusted for NumPy, pandas and xarray arrays only; a SciPy sparse matrix also declares one
    and failed to convert after the spend.)
    """
    import xarray as xr
    from xarray.backends import BackendArray
    from xarray.core import indexing

    import pm_dpgp.selection.liu_talwar as lt
    import pm_dpgp.selection.private_data as pd_module
    import pm_dpgp.selection.sample_paths as sp

    class _Raising(BackendArray):  # type: ignore[misc]
        def __init__(self, shape: tuple[int, ...]) -> None:
            self.shape, self.dtype = shape, np.dtype(np.float64)

        def __getitem__(self, key: Any) -> Any:
            raise AssertionError("private data read")

    def read(*a: Any, **k: Any) -> None:
        raise AssertionError("private data read")

    monkeypatch.setattr(pd_module, "float_array", read)
    monkeypatch.setattr(lt, "as_private_arrays", read)
    monkeypatch.setattr(sp, "as_private_arrays", read)
    X = xr.DataArray(indexing.LazilyIndexedArray(_Raising((n, d))), dims=("row", "col"))
    y = xr.DataArray(indexing.LazilyIndexedArray(_Raising((n,))), dims=("row",))
    return X, y
