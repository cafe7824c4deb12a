"""Stop-44 audit of ``parse_domain``: a 2 × 2 domain whose reading in the caller's own layout
reverses a dimension was read silently in the other layout.

``sample_path_release(domain=[(1, 0), (3, 2)])`` (the pairs ``(0, 1)``, ``(2, 3)`` with both
reversed) clipped the private inputs into the corners box ``[1, 3] × [0, 2]`` without a word;
the release is private for the box it used, but not the box meant.  It now warns (the reading
is unchanged, so no call that worked changes meaning); a layout read as a point stays silent.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pm_dpgp.domain import Box, parse_domain


@pytest.mark.parametrize(
    ("domain", "layout", "box"),
    [
        ([(1.0, 0.0), (3.0, 2.0)], "pairs", Box([1.0, 0.0], [3.0, 2.0])),
        ([(1.0, 0.0), (2.0, 3.0)], "pairs", Box([1.0, 0.0], [2.0, 3.0])),
        (np.array([[0.0, 3.0], [1.0, 2.0]]), "corners", Box([0.0, 1.0], [3.0, 2.0])),
    ],
)
def test_a_reversed_reading_in_the_callers_layout_warns(domain, layout, box):
    with pytest.warns(UserWarning, match="has low > high"):
        got = parse_domain(domain, layout=layout)
    assert got == box  # read as before: only the warning is new


@pytest.mark.parametrize(
    ("domain", "layout"),
    [
        (([0.0, 0.0], [6.0, 6.0]), "pairs"),  # as pairs the point (0, 6): no likely intent
        ([(0.0, 6.0), (0.0, 6.0)], "corners"),
        ([(0.0, 1.0), (0.0, 2.0)], "pairs"),
        (Box([1.0, 0.0], [3.0, 2.0]), "pairs"),
    ],
)
def test_no_warning_where_the_callers_layout_reverses_nothing(domain, layout):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_domain(domain, layout=layout)


def test_equal_boxes_hash_equally_across_signed_zero():
    from pm_dpgp.domain import Box

    a, b = Box(np.array([-0.0]), np.array([1.0])), Box(np.array([0.0]), np.array([1.0]))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lower": True, "upper": 2.0},
        {"lower": 0.0, "upper": "1"},
        {"lower": 0.0, "upper": 1.0, "weights": [True, 1.0]},
    ],
)
def test_dyadic_partition_refuses_booleans_and_text(kwargs):
    from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures

    kw = {"levels": 2, **kwargs}
    if "weights" in kw:
        kw["kernel_scale"] = None
    with pytest.raises(ValueError, match="lower|upper|weights"):
        DyadicPartitionFeatures(**kw)


def test_dyadic_partition_from_lengthscale_refuses_text():
    from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures

    with pytest.raises(ValueError, match="lengthscale"):
        DyadicPartitionFeatures.from_lengthscale(0.0, 1.0, "0.25")
    f = DyadicPartitionFeatures.from_lengthscale(0.0, 1.0, 0.25)
    assert f.levels == 3
