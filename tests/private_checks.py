"""Checks that a serialisable result (hyperparameter selection) holds no private number."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np


def _numbers(obj: Any) -> list[float]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in _numbers(v)]
    if isinstance(obj, float | int) and not isinstance(obj, bool):
        return [float(obj)]
    return []


def assert_no_private_number(result: Any, private: np.ndarray) -> bytes:
    """No number of ``result.to_metadata()`` (after a JSON round trip) is within 1e-9
    (relative) of a ``private`` value, and ``pickle.dumps(result)`` holds none of their
    float64 bytes.  Returns the pickle."""
    nums = np.array(_numbers(json.loads(json.dumps(result.to_metadata()))))
    for v in private:
        assert not np.any(np.isclose(nums, v, rtol=1e-9, atol=0.0)), v
    blob = pickle.dumps(result)
    for v in private:
        assert np.array(v, dtype="<f8").tobytes() not in blob
    return blob
