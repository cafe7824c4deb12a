"""Stop-47 benchmark/notebook truthfulness audit: regressions behind quoted benchmark figures."""

from __future__ import annotations

import timeit

import numpy as np
import pytest

from pm_dpgp._validation import public_real_array
from pm_dpgp.accounting.events import DEFAULT_ORDERS, _check_orders


def test_a_tuple_of_python_floats_is_read_without_scanning_every_entry():
    """``RdpCurveEvent`` keeps its 131 default orders as a tuple and checks them twice per DP
    Thompson round (docs/accounting.md, bench_thompson_round.py).  Since the stop-44 entry scan
    of lists, that check cost ~0.24 ms per call, 74x a plain conversion (2.8x with the fast
    path), which moved the per-round ratio the docs quote.  The ratio is measured in-process,
    best of five, against ``np.asarray`` of the same tuple."""
    orders = tuple(DEFAULT_ORDERS.tolist())
    checked = min(timeit.repeat(lambda: public_real_array(orders, "orders"), number=200, repeat=5))
    plain = min(timeit.repeat(lambda: np.asarray(orders, dtype=np.float64), number=200, repeat=5))
    assert checked / plain < 20.0, (checked, plain)
    np.testing.assert_array_equal(_check_orders(orders), DEFAULT_ORDERS)


@pytest.mark.parametrize(
    "value",
    [(True, 2.0), [2.0, "3.0"], (2.0, np.float64(3.0), True), [2.0, 1j], [[2.0], [3.0]]],
)
def test_the_fast_path_still_refuses_what_the_scan_refused(value):
    """Only sequences of exact Python floats take the fast path; booleans, text, complex
    numbers and nested lists still reach the entry scan and its refusals."""
    with pytest.raises(ValueError):
        _check_orders(value)
