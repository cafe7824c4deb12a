"""One parser for every ``domain=`` (``pm_dpgp.domain``, stop 41).

The Thompson loops read ``domain=(lower, upper)``, the sample-path release, its planner and
selection ``[(low, high), …]``; in 2-D both are 2 × 2 and each entry point silently read the
other's form: ``sample_path_release(domain=([0, 0], [6, 6]))`` clipped every private input
onto the point (0, 6) and charged ε for it (19.5 instead of 14,995).  Now the values decide
where they can, and a 2 × 2 array that is a box both ways keeps the entry point's layout with
a warning naming the other reading.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import Box, plan
from pm_dpgp.accounting import Ledger
from pm_dpgp.domain import parse_domain
from pm_dpgp.mechanisms import sample_path_release
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import dp_thompson_sampling


def _corners(box):
    return box.lower.tolist(), box.upper.tolist()


@pytest.mark.parametrize(
    ("domain", "d", "expected"),
    [
        ((0.0, 1.0), None, ([0.0], [1.0])),
        ((0.0, 1.0), 3, ([0.0] * 3, [1.0] * 3)),
        ([(0, 1), (2, 5), (-1, 1)], None, ([0, 2, -1], [1, 5, 1])),  # pairs, d = 3
        (([0, 2, -1], [1, 5, 1]), None, ([0, 2, -1], [1, 5, 1])),  # corners, d = 3
        ((0.0, [1.0, 2.0]), None, ([0, 0], [1, 2])),  # a number corner is broadcast
        ([[0, 6], [0, 6]], None, ([0, 0], [6, 6])),  # pairs; as corners it is empty
        (([0, 0], [6, 6]), None, ([0, 0], [6, 6])),  # corners; as pairs it is empty
        ([[0, 1], [0, 1]], None, ([0, 0], [1, 1])),
        ([[0, 1], [1, 2]], None, ([0, 1], [1, 2])),  # both readings: the same box
        ({"lower": [0, 2], "upper": [1, 3]}, None, ([0, 2], [1, 3])),
        (Box([0, 2], [1, 3]), 2, ([0, 2], [1, 3])),
        ([(0.0, 1.0)], 1, ([0.0], [1.0])),
        (([0], [1, 2]), None, ([0, 0], [1, 2])),  # a length-1 corner is repeated, as before
        (([0, 0], [1]), None, ([0, 0], [1, 1])),
        (([0, 0], [0, 6]), None, ([0, 0], [0, 6])),  # flat in x1; both readings agree
        ([(0, 0), (6, 6)], None, ([0, 0], [6, 6])),  # as pairs the point (0, 6): corners
        ([(0, 1), (2, 2), (0, 1)], None, ([0, 2, 0], [1, 2, 1])),  # flat pairs in 3-D: as before
    ],
)
def test_every_unambiguous_form_gives_its_box(domain, d, expected):
    assert _corners(parse_domain(domain, d)) == (
        [float(v) for v in expected[0]],
        [float(v) for v in expected[1]],
    )


def test_a_two_by_two_box_read_both_ways_keeps_the_callers_layout_and_warns():
    """No call that worked changes meaning: each entry point keeps its documented layout when
    both readings are boxes, and says what the other reading would be (stop-41 review: a
    refusal broke a third of random 2-D corner boxes, and re-reading a flat pairs box as
    corners changed ε from 358 to 574)."""
    with pytest.warns(UserWarning, match=r"read as \(low, high\) pairs.*pm_dpgp.Box"):
        assert _corners(parse_domain([(0, 1), (2, 3)])) == ([0.0, 2.0], [1.0, 3.0])
    with pytest.warns(UserWarning, match=r"read as \(lower, upper\) corners"):
        box = parse_domain([(0, 1), (2, 3)], layout="corners")
    assert _corners(box) == ([0.0, 1.0], [2.0, 3.0])
    with pytest.warns(UserWarning, match="pairs"):  # flat in x1 as pairs: kept, as before
        assert _corners(parse_domain([(0, 0), (1, 2)])) == ([0.0, 1.0], [0.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Box, and boxes whose readings agree, never warn
        parse_domain(Box([0, 2], [1, 3]))
        parse_domain([[0, 1], [1, 2]])
        parse_domain([[0, 6], [0, 6]], layout="corners")  # as corners a point: pairs


def test_strict_boxes_need_width_in_every_dimension():
    assert parse_domain(([0, 0], [0, 6])).is_flat
    with pytest.raises(ValueError, match="low < high in every dimension"):
        parse_domain(([0, 0], [0, 6]), strict=True)
    assert not parse_domain((0, 1), 3, strict=True).is_flat


def test_boxes_compare_and_hash_by_their_corners():
    a, b = Box([0, 0], [1, 1]), Box(np.zeros(2), np.ones(2))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1 and a != Box([0, 0], [1, 2])


@pytest.mark.parametrize(
    "domain",
    [(1.0, 1.0), (2.0, 1.0), [(0, 0), (6, 6)][:1], (0.0, np.inf), (np.nan, 1.0),
     [[0, 1, 2], [0, 1, 2]], {"lower": 0}, np.zeros((3, 3)), (True, 1.0), ("0", "1"),
     ([0, 1], [1, 2, 3]), np.zeros((0, 2))],
)  # fmt: skip
def test_empty_or_malformed_boxes_are_refused(domain):
    with pytest.raises(ValueError, match="domain|Box"):
        parse_domain(domain)


def test_dimension_mismatch_is_refused():
    with pytest.raises(ValueError, match="2 dimension"):
        parse_domain([(0, 1), (0, 1)], 3)


def test_box_is_immutable_and_unpacks_to_writable_copies():
    box = Box([0.0, 1.0], [2.0, 3.0])
    lo, hi = box
    lo[0] = 99.0
    assert box.lower[0] == 0.0 and not box.lower.flags.writeable
    assert box.pairs.tolist() == [[0.0, 2.0], [1.0, 3.0]] and box.dim == 2
    assert "Box(lower=[0.0, 1.0]" in repr(box)


def _model_2d():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 6, (40, 2))
    y = np.clip(np.sin(X[:, 0]) + 0.3 * rng.standard_normal(40), -1.9, 1.9)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(2, ls=1.5), noise_sd=0.3, mean=0.0)


def test_the_sample_path_release_reads_the_corners_form_as_the_box_it_means():
    """Was: the box {0} × {6}, κ = 1 and ε = 19.5 for the same data."""
    model = _model_2d()
    Xs = np.random.default_rng(2).uniform(0, 6, (10, 2))
    out = {}
    for name, domain in [("pairs", [(0, 6), (0, 6)]), ("corners", ([0, 0], [6, 6])),
                         ("box", Box([0, 0], [6, 6]))]:  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = sample_path_release(
                model, Xs, n_draws=1, kernel_scale=1.0, y_bounds=(-2, 2), delta=1e-5,
                domain=domain, ledger=Ledger(), rng=np.random.default_rng(1),
            )  # fmt: skip
    for name in ("corners", "box"):
        assert out[name].metadata["domain"] == [[0.0, 6.0], [0.0, 6.0]]  # recorded (stop 41)
        assert out[name].metadata["epsilon"] == out["pairs"].metadata["epsilon"]
        assert out[name].metadata["kappa"] == out["pairs"].metadata["kappa"] < 1e-3
        np.testing.assert_array_equal(out[name].released_values, out["pairs"].released_values)


def test_the_thompson_loop_keeps_its_corner_layout_warns_and_takes_a_box():
    """``[(0, 1), (2, 3)]`` is read as the loop's corners, [0, 2] × [1, 3], as before, with a
    warning naming the pairs reading; a ``Box`` says which."""
    calls = []

    def objective(Q):
        calls.append(Q)
        return np.sin(3 * Q[:, 0])

    kw = dict(X_init=[[0.2, 2.2], [0.7, 2.7]], n_rounds=3, noise_sd=0.3, y_bounds=(-1, 1),
              candidates=32, progressbar=False)  # fmt: skip
    with pytest.warns(UserWarning, match="corners"):
        dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(2, ls=0.5), domain=[(0, 2), (1, 3)],
                             ledger=Ledger(epsilon=1e7, delta=1e-5),
                             rng=np.random.default_rng(8), **kw)  # fmt: skip
    Q = np.vstack(calls)
    assert np.all(Q >= [0, 2]) and np.all(Q <= [1, 3])  # the corners (0, 2) and (1, 3)
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(2, ls=0.5),
                                   domain=Box([0, 2], [1, 3]), ledger=Ledger(1e7, 1e-5),
                                   rng=np.random.default_rng(8), **kw)  # fmt: skip
    Q = np.vstack(calls)
    assert np.all(Q >= [0, 2]) and np.all(Q <= [1, 3]) and res.n_rounds == 3
    with pytest.raises(ValueError, match="low < high"):  # a search needs width
        dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(2, ls=0.5),
                             domain=Box([0, 2], [1, 2]), ledger=Ledger(1e7, 1e-5),
                             rng=np.random.default_rng(9), **kw)  # fmt: skip


def test_plans_take_the_same_forms():
    cov = pm.gp.cov.ExpQuad(2, ls=0.5)
    common = dict(epsilon=5.0, delta=1e-5, y_bounds=(-1, 1), cov_func=cov)
    a = plan.thompson(3, 5, domain=([0, 0], [1, 1]), **common)
    b = plan.thompson(3, 5, domain=Box([0, 0], [1, 1]), **common)
    c = plan.thompson(3, 5, domain=[(0, 1), (0, 1)], **common)
    assert a.kappa == b.kappa == c.kappa
    with pytest.warns(UserWarning, match="corners"):
        plan.thompson(3, 5, domain=[(0, 1), (2, 3)], **common)
    assert plan.thompson(3, 5, domain=(0, 1), **common).kappa == a.kappa  # (0, 1) for both
