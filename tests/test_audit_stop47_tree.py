"""Stop 47: the tree-aggregated Thompson loop charges the round-off of its leaf and counter sums.

The counters were calibrated to the exact-arithmetic leaf sensitivity Δ, while the released
node sums are computed in floating point: neighbouring runs' computed nodes can differ by more
than Δ (below, 2 + u for Δ = 2).  The loop now plans at ``Δ + 2η`` with ``η = γ_h N B_rec``
(``h`` = ``counter_summation_depth`` + 8, ``N`` records), as the noise-aware release does
(docs/thompson_tree.md §3.1); the square-root counter's column norm is rounded up.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.noise_aware import regression_record_norm, summation_margin
from pm_dpgp.mechanisms.full.sqrt_counter import plan_sqrt_counter, sqrt_factor_coefficients
from pm_dpgp.mechanisms.full.tree_aggregation import TreeAggregator, plan_tree
from pm_dpgp.workflow.thompson_tree import counter_summation_depth, dp_thompson_sampling_tree

U = 2.0**-53


def test_neighbouring_node_sums_differ_by_more_than_the_exact_change() -> None:
    """Leaf 1 is the changed record (+1 against −1), leaf 2 is 3u: the level-1 node
    ``1 + 3u`` is a tie and rounds to ``1 + 4u`` while ``−1 + 3u`` is exact, so the stacked
    node sums differ by more than the exact ``√L Δ``, and by less than ``√L (Δ + 2η)``."""
    plan = plan_tree(1.0, 1e-5, 2.0, 2, 1, secure=False)

    def nodes(first: float) -> list[Fraction]:
        agg = TreeAggregator(plan, np.random.default_rng(0))
        agg._noisy = lambda v: v.copy()  # the computed node sums themselves
        agg.add([first])
        agg.add([3 * U])
        return [Fraction(float(v[0])) for v in agg.node_values]

    plus, minus = nodes(1.0), nodes(-1.0)
    assert plus[1] == 1 + Fraction(4, 2**53) and minus[1] == -1 + Fraction(3, 2**53)
    diff_sq = sum((a - b) ** 2 for a, b in zip(plus, minus, strict=True))
    L, Delta = plan.nodes_per_leaf, 2.0
    assert L == 2 and diff_sq > L * Fraction(Delta) ** 2  # the exact-arithmetic charge
    depth = counter_summation_depth("tree", 2, 1)
    margin = summation_margin(2, depth, 1.0, dimension=1, factor_bound=4.0)
    assert diff_sq <= L * (Fraction(Delta) + Fraction(margin)) ** 2


@pytest.mark.parametrize(
    ("counter", "T", "rows", "expect"),
    [("tree", 1, 1, 0), ("tree", 2, 1, 1), ("tree", 100, 3, 2 + 21), ("tree", 1024, 1, 55),
     ("sqrt", 1, 5, 4), ("sqrt", 100, 3, 2 + 99), ("tree", 0, 3, 0)],
)  # fmt: skip
def test_counter_summation_depth(counter, T, rows, expect) -> None:
    """``(rows − 1) + ℓ(ℓ + 1)/2`` for the tree (ℓ = ⌊log₂ T⌋), ``(rows − 1) + T − 1`` for the
    square-root counter."""
    assert counter_summation_depth(counter, T, rows) == expect


def test_tree_node_additions_stay_within_the_depth() -> None:
    """Count, in exact rationals, how far each leaf's computed contribution can drift: feed
    leaves that are powers of two apart so every addition is a rounding candidate, and check
    the computed node sums against the exact ones within γ_h Σ|leaves| for the public depth."""
    T = 64
    plan = plan_tree(1.0, 1e-5, 1.0, T, 1, secure=False)
    agg = TreeAggregator(plan, np.random.default_rng(0))
    agg._noisy = lambda v: v.copy()
    rng = np.random.default_rng(5)
    leaves = rng.uniform(-1, 1, T) * 2.0 ** rng.integers(-30, 30, T)
    for v in leaves:
        agg.add([v])
    h = counter_summation_depth("tree", T, 1)
    gamma = Fraction(h) * Fraction(U) / (1 - Fraction(h) * Fraction(U))
    for (_, first, last), value in zip(agg.released, agg.node_values, strict=True):
        exact = sum(Fraction(float(x)) for x in leaves[first - 1 : last])
        bound = gamma * sum(abs(Fraction(float(x))) for x in leaves[first - 1 : last])
        assert abs(Fraction(float(value[0])) - exact) <= bound


def test_sqrt_counter_column_norm_is_rounded_up() -> None:
    for T in (1, 2, 7, 100, 4096):
        c = sqrt_factor_coefficients(T)
        exact_sq = sum(Fraction(float(x)) ** 2 for x in c)
        norm = plan_sqrt_counter(1.0, 1e-5, 1.0, T, 1, secure=False).column_norm
        assert Fraction(norm) ** 2 >= exact_sq
        assert Fraction(norm) ** 2 <= exact_sq * (1 + Fraction(16, 2**53))  # ≤ 7u on the norm


def _objective(X):
    return np.sin(6 * X[:, 0])


@pytest.mark.parametrize("counter", ["tree", "sqrt"])
@pytest.mark.parametrize("posterior", ["all_releases", "prefix"])
def test_the_loop_plans_at_delta_plus_the_margin(counter: str, posterior: str) -> None:
    X_init = np.linspace(0.05, 0.95, 9)[:, None]
    T = 5
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling_tree(
            _objective, pm.gp.cov.ExpQuad(1, ls=0.3), domain=(0.0, 1.0), X_init=X_init,
            n_rounds=T, noise_sd=0.1, inducing=6, candidates=32, y_bounds=(-1.5, 1.5),
            ledger=ledger, epsilon=3.0, counter=counter, posterior=posterior,
            progressbar=False, rng=np.random.default_rng(1),
        )  # fmt: skip
    attrs = res.idata.thompson.attrs
    Delta = attrs["leaf_sensitivity"]
    R_phi, M = attrs["feature_norm"], attrs["n_features"]
    depth = counter_summation_depth(counter, T, len(X_init))
    assert attrs["summation_depth"] == depth
    if posterior == "all_releases":  # the centred A-stream: |ξ| ≤ (b − a)/2
        b_rec, value, dim = 1.5 * R_phi, 1.5, M
    else:
        b_rec, value, dim = regression_record_norm(1.5, R_phi, 1.0), 1.5, M + M * (M + 1) // 2
    margin = summation_margin(
        len(X_init) + T - 1, depth, b_rec, dimension=dim,
        factor_bound=4.0 * max(1.0, value) * max(1.0, R_phi) ** 2,
    )  # fmt: skip
    if counter == "sqrt":  # the stacked change ‖R_{:,1}‖Δ + 2η√T (docs/thompson_tree.md §3.1)
        margin *= math.sqrt(T)
    assert attrs["summation_margin"] == margin > 0
    assert attrs["charged_leaf_sensitivity"] == Delta + margin
    prefix = "tree" if counter == "tree" else "counter"
    assert attrs[f"{prefix}_leaf_sensitivity"] == Delta + margin
    planner = plan_tree if counter == "tree" else plan_sqrt_counter
    plan = planner(3.0, 1e-5, Delta + margin, T, dim, secure=False)
    assert ledger.history[-1].event.noise_multiplier == plan.event.noise_multiplier
    assert math.isclose(margin / Delta, 0.0, abs_tol=1e-10)  # tiny at this size
