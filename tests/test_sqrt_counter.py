"""Square-root factorisation counter (docs/thompson_tree.md §11) and the loop on it."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pm_dpgp.accounting import BUDGET_RTOL, GaussianEvent, Ledger, ZCDPEvent
from pm_dpgp.audit import scan_for_values
from pm_dpgp.mechanisms.full.sqrt_counter import (
    SqrtCounter,
    plan_sqrt_counter,
    sqrt_factor_coefficients,
)
from pm_dpgp.mechanisms.full.tree_aggregation import plan_tree, prefix_node_count
from pm_dpgp.workflow import DyadicPartitionFeatures, dp_thompson_sampling_tree
from tests.test_partition_features import X0, _leaves, _objective
from tests.test_partition_features import _run as _partition_run
from tests.test_thompson_tree import _exact_gaussian_delta

DELTA = 1e-5
pytestmark = pytest.mark.usefixtures("one_blas_thread")


def test_coefficients_are_the_square_root_of_the_counting_matrix():
    T = 60
    c = sqrt_factor_coefficients(T)
    for k in range(T):  # exact binomial coefficients, independently
        assert c[k] == pytest.approx(float(Fraction(math.comb(2 * k, k), 4**k)), rel=1e-14)
    R = np.array([[c[s - t] if s >= t else 0.0 for t in range(T)] for s in range(T)])
    np.testing.assert_allclose(R @ R, np.tril(np.ones((T, T))), rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="horizon"):
        sqrt_factor_coefficients(0)


def test_stream_equals_the_matrix_mechanism_and_its_noise_factor():
    """Releases y = R V + Z and prefixes L y = A V + L Z, L = R (same noise draws)."""
    T, dim = 17, 3
    rng = np.random.default_rng(2)
    V = rng.normal(size=(T, dim))
    plan = plan_sqrt_counter(2.0, DELTA, 1.0, T, dim, secure=False)
    counter = SqrtCounter(plan, np.random.default_rng(9))
    out = [counter.add(v) for v in V]
    Z = plan.sigma * np.random.default_rng(9).standard_normal((T, dim))
    c = sqrt_factor_coefficients(T)
    R = np.array([[c[s - t] if s >= t else 0.0 for t in range(T)] for s in range(T)])
    # O(T) sums of O(σ) terms: 1e-12 relative of the noise scale
    np.testing.assert_allclose(np.stack(counter.released), R @ V + Z, rtol=0, atol=1e-11)
    np.testing.assert_allclose(np.stack([e for e, _ in out]), np.cumsum(V, 0) + R @ Z, atol=1e-11)
    np.testing.assert_allclose([f for _, f in out], np.cumsum(c**2), rtol=1e-15)
    with pytest.raises(ValueError, match="planned"):
        counter.add(V[0])


@settings(max_examples=60, deadline=None)
@given(
    T=st.integers(1, 40),
    where=st.floats(0, 1, exclude_max=True),
    seed=st.integers(0, 2**31 - 1),
)
def test_one_leaf_moves_the_stacked_releases_within_the_sensitivity(T, where, seed):
    rng = np.random.default_rng(seed)
    dim, Delta = 4, 1.7
    V = rng.normal(size=(T, dim))
    t = int(where * T)
    V2 = V.copy()
    step = rng.normal(size=dim)
    V2[t] += Delta * rng.uniform(0, 1) * step / np.linalg.norm(step)
    plan = plan_sqrt_counter(1.0, DELTA, Delta, T, dim, secure=False)
    runs = []
    for W in (V, V2):
        counter = SqrtCounter(plan, np.random.default_rng(seed))
        for w in W:
            counter.add(w)
        runs.append(np.concatenate(counter.released))
    # identical noise cancels up to round-off of O(T) weighted sums
    assert np.linalg.norm(runs[0] - runs[1]) <= plan.sensitivity * (1 + 1e-9) + 1e-9


@pytest.mark.parametrize("T", [1, 2, 7, 25, 100])
def test_first_leaf_attains_the_calibrated_sensitivity(T):
    dim, Delta = 2, 1.0
    plan = plan_sqrt_counter(1.0, DELTA, Delta, T, dim, secure=False)
    runs = []
    for first in (np.array([Delta, 0.0]), np.zeros(2)):
        counter = SqrtCounter(plan, np.random.default_rng(1))
        counter.add(first)
        for _ in range(T - 1):
            counter.add(np.zeros(dim))
        runs.append(np.concatenate(counter.released))
    assert np.linalg.norm(runs[0] - runs[1]) == pytest.approx(plan.sensitivity, rel=1e-9)
    c = sqrt_factor_coefficients(T)
    assert plan.column_norm == pytest.approx(math.sqrt(float(c @ c)), rel=1e-15)


def test_plans_cost_the_run_epsilon_and_halve_the_tree_noise_at_T_100():
    sim = plan_sqrt_counter(3.0, DELTA, 2.0, 100, 27, secure=False)
    assert isinstance(sim.event, GaussianEvent)
    assert sim.event.epsilon(DELTA) == pytest.approx(3.0, rel=1e-6)
    sec = plan_sqrt_counter(3.0, DELTA, 2.0, 100, 27, secure=True)
    assert isinstance(sec.event, ZCDPEvent) and sec.event.count == 1
    assert sec.event.epsilon(DELTA) <= 3.0 * (1 + 1e-9)
    assert 0.9 < sec.sigma / sim.sigma < 1.3
    # prefix noise sd against the binary tree of the same budget: mean ratio 0.53 over t
    tree = plan_tree(3.0, DELTA, 2.0, 100, 27, secure=False)
    v = np.cumsum(sqrt_factor_coefficients(100) ** 2)
    pc = np.array([prefix_node_count(t) for t in range(1, 101)])
    ratio = sim.sigma * np.sqrt(v) / (tree.sigma * np.sqrt(pc))
    assert 0.45 < ratio.mean() < 0.6 and ratio.max() < 1.0


def test_secure_counter_releases_discrete_gaussian_blocks():
    plan = plan_sqrt_counter(3.0, DELTA, 1.0, 4, 3, secure=True)
    with pytest.raises(ValueError, match="secure"):
        SqrtCounter(plan, np.random.default_rng(0))
    counter = SqrtCounter(plan, None)
    est, factor = counter.add(np.ones(3))
    assert est.shape == (3,) and factor == 1.0
    # released values lie on the public grid γ (the discrete Gaussian's support)
    grid = counter.released[0] / plan.plan.gamma
    np.testing.assert_array_equal(grid, np.rint(grid))


# ------------------------------------------------------------------ the loop with counter="sqrt"
class _RecordingCounter(SqrtCounter):
    last: SqrtCounter | None = None

    def __init__(self, plan, rng=None):
        super().__init__(plan, rng)
        self.leaves = []
        _RecordingCounter.last = self

    def add(self, leaf):
        self.leaves.append(np.array(leaf, dtype=np.float64))
        return super().add(leaf)


def _run(model, **kw):
    """The partition loop of test_partition_features (13 rounds, ε = 3) with the sqrt counter."""
    return _partition_run(model, counter="sqrt", **kw)


@pytest.mark.parametrize("model", ["label", "full", "full-prefix"])
def test_loop_with_sqrt_counter_exact_divergence_on_adversarial_neighbours(model):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("pm_dpgp.workflow.thompson_tree.SqrtCounter", _RecordingCounter)
        res, feats = _run(model, rng=np.random.default_rng(3))
    counter = _RecordingCounter.last
    attrs = res.idata.thompson.attrs
    assert attrs["counter"] == "sqrt" and "nodes_in_prefix" not in res.idata.thompson
    X, y = res.owner.X, res.owner.y
    np.testing.assert_allclose(
        np.stack(counter.leaves), _leaves(res, feats, X, y, model), rtol=0, atol=1e-13
    )
    T = len(counter.leaves)
    c = sqrt_factor_coefficients(T)
    R = np.array([[c[s - t] if s >= t else 0.0 for t in range(T)] for s in range(T)])
    eps, sigma = res.ledger.epsilon(), attrs["counter_release_sigma"]
    assert 2.9 < eps <= 3.0 * (1 + BUDGET_RTOL)
    lo, hi = attrs["y_bounds"]
    deltas = []
    for record in range(len(y) - 1):
        y1, y2 = y.copy(), y.copy()
        y1[record], y2[record] = hi, lo
        moved = X.copy()
        moved[record] = 1.0 - X[record]
        # the same input, and (full privacy) the input moved to another finest cell
        for X2 in [X] if model == "label" else [X, moved]:
            s = np.linalg.norm(
                R @ _leaves(res, feats, X, y1, model) - R @ _leaves(res, feats, X2, y2, model)
            )
            assert s <= attrs["counter_stacked_sensitivity"] * (1 + 1e-12) + 1e-12
            deltas.append((record, _exact_gaussian_delta(eps, sigma, s)))
    assert max(d for _, d in deltas) <= DELTA * (1 + 1e-6)
    if model != "full-prefix":  # ‖φ‖ = R_φ exactly: leaf 1 attains ‖R_{:,1}‖ R_φ (b − a)
        assert max(d for r, d in deltas if r < 3) == pytest.approx(DELTA, rel=1e-4)
    sd = res.idata.thompson["prefix_noise_sd"].values
    np.testing.assert_allclose(sd, sigma * np.sqrt(np.cumsum(c**2)), rtol=1e-14)


def test_loop_with_sqrt_counter_secure_reproducible_and_checked():
    res, _ = _run("label", rng=None)
    assert isinstance(res.events[0], ZCDPEvent) and res.ledger.epsilon() <= 3.0 * (1 + BUDGET_RTOL)
    assert scan_for_values(res.idata, res.owner.y, rtol=1e-9) == []
    a, _ = _run("full", rng=np.random.default_rng(4))
    b, _ = _run("full", rng=np.random.default_rng(4))
    np.testing.assert_array_equal(a.x_chosen, b.x_chosen)
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="counter"):
        dp_thompson_sampling_tree(
            _objective(0), None, features=DyadicPartitionFeatures(0.0, 1.0, 2),
            domain=(0.0, 1.0), X_init=X0, n_rounds=3, noise_sd=0.05, ledger=ledger,
            counter="matrix", progressbar=False, rng=rng,
        )  # fmt: skip
    assert ledger.history == [] and rng.bit_generator.state == state
