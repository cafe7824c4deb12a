"""Stop-48 audit of the low-level numerics (gp/linalg, gp/rfp, gp/integral, validation)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from pm_dpgp.gp.linalg import norm_rounded_up
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures


def _exact_square(v: list[float]) -> Fraction:
    return sum((Fraction(x) ** 2 for x in v), Fraction(0))


@pytest.mark.parametrize(
    "values",
    [[1.5e-162] * 2, [3.5e-162] * 2, [1e-160, 1e-160], [1e-200], [5e-324] * 7, [1e-300, 3e-301]],
)
def test_norm_rounded_up_never_below_exact_for_tiny_values(values: list[float]) -> None:
    # the squares underflowed: [1.5e-162] * 2 gave 0, [3.5e-162] * 2 10% below the exact norm
    r = norm_rounded_up(np.array(values))
    assert Fraction(r) ** 2 >= _exact_square(values)
    assert r <= max(values) * math.sqrt(len(values)) * 1.001 + 2 * 5e-324


def test_norm_rounded_up_unchanged_in_normal_range_and_overflow() -> None:
    assert norm_rounded_up(np.array([3.0, 4.0])) == 5.0 * (1.0 + 2.0**-51)
    assert norm_rounded_up(np.array([1e308] * 4)) == math.inf
    assert norm_rounded_up(np.array([])) == 0.0
    rng = np.random.default_rng(48)
    for _ in range(500):
        v = rng.uniform(-2, 2, size=int(rng.integers(1, 8))) * 2.0 ** float(
            rng.integers(-1070, 1000)
        )
        assert Fraction(norm_rounded_up(v)) ** 2 >= _exact_square(v.tolist())


def test_partition_feature_norm_covers_tiny_weights() -> None:
    # R_φ is the charged bound on every feature row's norm (no clipping of these features);
    # with weights 3.5e-162 it was 4.45e-162 for rows of norm 4.95e-162
    w = [3.5e-162, 3.5e-162]
    f = DyadicPartitionFeatures(0.0, 1.0, 2, None, w)
    row = f(np.array([[0.3]]))[0]
    assert Fraction(f.R) ** 2 >= _exact_square(row.tolist())
