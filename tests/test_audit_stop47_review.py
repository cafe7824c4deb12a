"""Stop-47 review of the stop's own changes.

``clip_columns`` promises that every returned column has exact norm ``≤ column_norm``.  Its
computed norm squared the entries in float64: entries below about ``1.5·10⁻¹⁶²`` squared to
0 (subnormal squares lose their relative accuracy), so a column of norm ``10⁵ R`` (``R =
10⁻¹⁷⁰``, entries ``10⁻¹⁶⁵``) had the computed norm 0 and was returned unclipped.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from pm_dpgp.gp.sparse import clip_columns


def _exact_norm_sq(col: np.ndarray) -> Fraction:
    return sum((Fraction(float(v)) ** 2 for v in col), Fraction(0))


@pytest.mark.parametrize(
    ("R", "value", "M"),
    [
        (1e-170, 1e-165, 1),  # the square underflows to 0: returned at 1e5 R before
        (1e-163, 1e-162, 1),  # 10 R before
        (1e-300, 3e-300, 1),  # a subnormal square: 3 R before
        (1e-161, 1.4e-162, 64),  # every square underflows, the norm is 11 R
        (2.0**-999, 2.0**-990, 5),
    ],
)
def test_clip_columns_holds_for_columns_whose_squares_underflow(R, value, M) -> None:
    K = np.full((M, 3), value)
    K[:, 1] *= np.linspace(0.5, 1.0, M)
    K[:, 2] = 0.0
    out = clip_columns(K, R)
    for j in range(K.shape[1]):
        assert _exact_norm_sq(out[:, j]) <= Fraction(R) ** 2
    # the clipped columns keep their direction and reach the bound (not zeroed)
    assert _exact_norm_sq(out[:, 0]) > Fraction(R * 0.999) ** 2
    assert np.all(out[:, 2] == 0.0)


def test_clip_columns_unchanged_for_ordinary_columns() -> None:
    rng = np.random.default_rng(4)
    K = rng.normal(size=(6, 50))
    R = float(np.median(np.linalg.norm(K, axis=0)))
    out = clip_columns(K, R)
    small = np.linalg.norm(K, axis=0) < 0.99 * R
    np.testing.assert_array_equal(out[:, small], K[:, small])
