"""Tree aggregation (binary mechanism) and sufficient-statistics DP Thompson sampling."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pm_dpgp.accounting import BUDGET_RTOL, GaussianEvent, Ledger, ZCDPEvent
from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import group_names
from pm_dpgp.mechanisms.full.noise_aware import l2_sensitivity
from pm_dpgp.mechanisms.full.tree_aggregation import (
    TreeAggregator,
    max_nodes_per_leaf,
    plan_tree,
    prefix_node_count,
)
from pm_dpgp.workflow.thompson_tree import (
    NystromFeatures,
    dp_thompson_sampling_tree,
    label_statistics,
    public_inputs_posterior,
    record_statistics,
)
from tests.test_thompson import objective

DELTA = 1e-5
X0 = np.array([[0.1], [0.5], [0.9]])
COV = pm.gp.cov.ExpQuad(1, ls=0.2)
pytestmark = pytest.mark.usefixtures("one_blas_thread")


# ------------------------------------------------------------------ the counter
def _completed_nodes(T: int) -> list[tuple[int, int]]:
    """Nodes (a, b] of the binary mechanism up to T, brute force: at step b the dyadic interval
    whose length is the largest power of two dividing b (Chan, Shi & Song 2011, Alg. 2)."""
    out = []
    for b in range(1, T + 1):
        i = max(j for j in range(b.bit_length()) if b % (1 << j) == 0)
        out.append((b - (1 << i), b))
    return out


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 7, 8, 9, 16, 25, 31, 32, 33, 100, 128, 200])
def test_nodes_per_leaf_is_exact_and_within_log_bound(T):
    nodes = _completed_nodes(T)
    counts = [sum(a < s <= b for a, b in nodes) for s in range(1, T + 1)]
    assert max(counts) == max_nodes_per_leaf(T)
    assert max_nodes_per_leaf(T) <= math.ceil(math.log2(T)) + 1
    # the streaming aggregator releases exactly these nodes
    plan = plan_tree(1.0, DELTA, 1.0, T, 2, secure=False)
    agg = TreeAggregator(plan, np.random.default_rng(0))
    for _ in range(T):
        agg.add(np.zeros(2))
    assert sorted((first - 1, last) for _, first, last in agg.released) == sorted(nodes)


def test_prefix_is_sum_of_binary_decomposition():
    T, dim = 23, 3
    rng = np.random.default_rng(1)
    leaves = rng.normal(size=(T, dim))
    plan = plan_tree(2.0, DELTA, 1.0, T, dim, secure=False)
    agg = TreeAggregator(plan, np.random.default_rng(2))
    noise = {}
    for t in range(1, T + 1):
        est, k = agg.add(leaves[t - 1])
        lvl, first, last = agg.released[-1]
        noise[(first, last)] = agg.node_values[-1] - leaves[first - 1 : last].sum(0)
        assert k == prefix_node_count(t) == bin(t).count("1")
        # the nodes used: the binary decomposition of t (disjoint, covering 1..t)
        parts, hi = [], t
        for j in range(t.bit_length()):
            if (t >> j) & 1:
                parts.append((hi - (1 << j) + 1, hi))
                hi -= 1 << j
        assert sum(b - a + 1 for a, b in parts) == t and hi == 0
        expect = leaves[:t].sum(0) + sum(noise[p] for p in parts)
        # same float additions in a different order: 1e-12 relative to O(10) values
        np.testing.assert_allclose(est, expect, rtol=0, atol=1e-12)
    # the node noise really is noise of sd σ (not vacuous): 23 nodes × 3 coordinates
    z = np.concatenate(list(noise.values())) / plan.sigma
    assert 0.5 < z.std() < 1.6


def _unit(v):
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


@settings(max_examples=60, deadline=None)
@given(
    T=st.integers(1, 40),
    M=st.integers(1, 5),
    where=st.floats(0, 1, exclude_max=True),
    seed=st.integers(0, 2**31 - 1),
    ratio=st.sampled_from([0.5, 1.0, 2.0]),
)
def test_record_contribution_to_released_nodes_within_sensitivity(T, M, where, seed, ratio):
    """Replace one record; the stacked released nodes move by at most √L Δ (same noise)."""
    rng = np.random.default_rng(seed)
    R_y, R_phi = 1.3, 0.9
    per_leaf = rng.integers(1, 3, size=T)
    Phi = [
        R_phi * rng.uniform(0, 1, (m, 1)) * np.apply_along_axis(_unit, 1, rng.normal(size=(m, M)))
        for m in per_leaf
    ]
    r = [rng.uniform(-R_y, R_y, m) for m in per_leaf]
    t_star = int(where * T)
    Phi2 = [p.copy() for p in Phi]
    r2 = [v.copy() for v in r]
    Phi2[t_star][0] = R_phi * _unit(rng.normal(size=M))
    r2[t_star][0] = rng.choice([-R_y, R_y])
    Delta = l2_sensitivity(R_y, R_phi, ratio)
    dim = M + M * (M + 1) // 2
    plan = plan_tree(1.0, DELTA, Delta, T, dim, secure=False)
    out = []
    for P, y in ((Phi, r), (Phi2, r2)):
        agg = TreeAggregator(plan, np.random.default_rng(seed))
        for t in range(T):
            agg.add(record_statistics(P[t], y[t], ratio))
        out.append(np.concatenate(agg.node_values))
    leaf_change = np.linalg.norm(
        record_statistics(Phi[t_star], r[t_star], ratio)
        - record_statistics(Phi2[t_star], r2[t_star], ratio)
    )
    assert leaf_change <= Delta * (1 + 1e-12)
    # identical noise cancels exactly up to round-off of O(T) node sums of O(1) entries
    assert np.linalg.norm(out[0] - out[1]) <= plan.sensitivity * (1 + 1e-9) + 1e-9


@pytest.mark.parametrize("T", [1, 6, 16, 25])
def test_adversarial_first_record_attains_calibrated_sensitivity(T):
    """Leaf 1 lies in all L nodes: the worst record pair there attains √L Δ exactly."""
    R_y, R_phi, c = 1.0, 1.0, 1.0
    s = min(R_y**2 / (2 * c * c), R_phi**2)  # optimal |<φ, φ'>| (docs/noise_aware.md §2)
    phi = np.array([[R_phi, 0.0]])
    phi2 = np.array([[s / R_phi, math.sqrt(R_phi**2 - (s / R_phi) ** 2)]])
    Delta = l2_sensitivity(R_y, R_phi, c)
    plan = plan_tree(1.0, DELTA, Delta, T, 5, secure=False)
    out = []
    for p, y in ((phi, np.array([R_y])), (phi2, np.array([-R_y]))):
        agg = TreeAggregator(plan, np.random.default_rng(7))
        agg.add(record_statistics(p, y, c))
        for _ in range(T - 1):
            agg.add(np.zeros(5))
        out.append(np.concatenate(agg.node_values))
    # attained to round-off (values O(1), a handful of additions)
    assert np.linalg.norm(out[0] - out[1]) == pytest.approx(plan.sensitivity, rel=1e-9)
    assert plan.sensitivity == pytest.approx(math.sqrt(max_nodes_per_leaf(T)) * Delta, rel=1e-15)


def test_plan_events_cost_the_run_epsilon():
    sim = plan_tree(3.0, DELTA, 2.0, 25, 27, secure=False)
    assert isinstance(sim.event, GaussianEvent)
    assert sim.event.epsilon(DELTA) == pytest.approx(3.0, rel=1e-6)
    sec = plan_tree(3.0, DELTA, 2.0, 25, 27, secure=True)
    assert isinstance(sec.event, ZCDPEvent) and sec.event.count == max_nodes_per_leaf(25)
    assert sec.event.epsilon(DELTA) <= 3.0 * (1 + 1e-9)
    # the discrete plan's noise is the continuous one's up to rounding and the zCDP conversion
    assert 0.9 < sec.sigma / sim.sigma < 1.3


def test_features_norm_bound_holds_and_is_nearly_attained():
    feats = NystromFeatures(COV, np.linspace(0, 1, 6)[:, None], 0.05, 0.0)
    X = np.linspace(-0.5, 1.5, 4001)[:, None]
    norms = np.linalg.norm(feats(X), axis=1)
    assert feats.R == pytest.approx(1.0)
    assert norms.max() <= feats.R * (1 + 1e-12)
    assert norms.max() > 0.999 * feats.R  # Q(z, z) = k(z, z) at the grid points (up to jitter)
    assert norms.min() < 0.5 * feats.R  # far outside the box the Nyström features vanish


# ------------------------------------------------------------------ the loop
def _run(seed=3, budget=3.0, n_rounds=12, ledger=None, objective_fn=None, X_init=None, **kw):
    kw.setdefault("rng", np.random.default_rng(seed))
    kw.setdefault("candidates", 64)
    kw.setdefault("refine_steps", 1)
    return dp_thompson_sampling_tree(
        objective(seed + 1000) if objective_fn is None else objective_fn,
        COV,
        domain=(0.0, 1.0),
        X_init=X0 if X_init is None else X_init,
        n_rounds=n_rounds,
        noise_sd=0.05,
        inducing=6,
        ledger=Ledger(epsilon=budget, delta=DELTA) if ledger is None else ledger,
        progressbar=False,
        **kw,
    )


@pytest.fixture(scope="module")
def run():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run()


def test_run_is_one_event_charged_up_front_within_budget(run):
    assert run.stop_reason == "completed" and run.n_rounds == 12
    assert len(run.events) == 1 and len(run.ledger.history) == 1
    fresh = Ledger(delta=DELTA)
    fresh.spend(run.events[0])
    # the replay performs the same single ledger operation: bitwise equal, rtol only a bound
    assert run.ledger.epsilon() == pytest.approx(fresh.epsilon(), rel=1e-12)
    assert run.ledger.epsilon() <= 3.0 * (1 + BUDGET_RTOL)
    assert run.ledger.epsilon() > 2.9  # the run uses its budget (the plan is not vacuous)
    attrs = run.idata.thompson.attrs
    assert attrs["tree_nodes_per_leaf"] == max_nodes_per_leaf(12)
    np.testing.assert_array_equal(
        run.idata.thompson["nodes_in_prefix"], [bin(t).count("1") for t in range(1, 13)]
    )


def test_refuses_before_any_noise_when_budget_is_short():
    ledger = Ledger(epsilon=1.0, delta=DELTA)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.warns(UserWarning, match="cannot afford the first round"):
        res = _run(ledger=ledger, epsilon=2.0, rng=rng)
    assert res.stop_reason == "budget" and res.n_rounds == 0
    assert ledger.epsilon() == 0.0 and rng.bit_generator.state == state


def test_fixed_seed_is_reproducible(run):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _run()
    np.testing.assert_array_equal(again.x_chosen, run.x_chosen)
    np.testing.assert_array_equal(again.owner.y, run.owner.y)
    np.testing.assert_array_equal(
        again.idata.thompson["f_path_at_chosen"], run.idata.thompson["f_path_at_chosen"]
    )


def test_published_trace_holds_no_observed_values(run):
    assert scan_for_values(run.idata, run.owner.y, rtol=1e-9) == []
    assert "y" not in run.idata.thompson and "observed_data" not in group_names(run.idata)
    np.testing.assert_array_equal(run.owner.X[3:], run.x_chosen)
    assert run.idata.thompson["x_chosen"].dims == ("round", "input_dim")
    assert np.all((run.x_chosen >= 0) & (run.x_chosen <= 1))


def test_secure_default_runs_and_charges_zcdp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run(n_rounds=4, rng=None)
    assert res.n_rounds == 4 and isinstance(res.events[0], ZCDPEvent)
    assert res.ledger.epsilon() <= 3.0 * (1 + BUDGET_RTOL)
    assert res.idata.thompson.attrs["noise_source"] == "opendp_discrete_gaussian"
    assert scan_for_values(res.idata, res.owner.y, rtol=1e-9) == []


def test_large_epsilon_finds_the_optimum():
    """Sanity of the loop: with little noise it concentrates near the maximiser x = 0.7."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run(budget=1e4, n_rounds=15)
    assert np.median(np.abs(res.x_chosen[5:, 0] - 0.7)) < 0.1


# ------------------------------------------------------------------ label-privacy variant
def test_public_inputs_posterior_is_linear_gaussian_conditioning():
    """Against the textbook formulas with explicit inverses, and the σ_a → 0 limit."""
    rng = np.random.default_rng(5)
    Phi = rng.normal(size=(7, 4)) / 2
    B = Phi.T @ Phi
    a = rng.normal(size=4)
    s2, sa = 0.3, 0.7
    C = s2 * B + sa**2 * np.eye(4)
    Lam = np.eye(4) + B @ np.linalg.solve(C, B)
    m_ref = np.linalg.solve(Lam, B @ np.linalg.solve(C, a))
    m, S = public_inputs_posterior(B, a, s2, sa)
    # 4x4, condition numbers < 1e3: agreement to ~1e-12 relative
    np.testing.assert_allclose(m, m_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(S, np.linalg.inv(Lam), rtol=1e-10, atol=1e-12)
    # no DP noise: the exact Bayesian linear-regression posterior (prior N(0, I), noise s2)
    m0, S0 = public_inputs_posterior(B, a, s2, 1e-9)
    P = np.eye(4) + B / s2
    np.testing.assert_allclose(m0, np.linalg.solve(P, a / s2), rtol=1e-6)
    np.testing.assert_allclose(S0, np.linalg.inv(P), rtol=1e-6)


def test_label_variant_releases_A_only_with_label_sensitivity():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run(n_rounds=6, privacy_model="label")
    attrs = res.idata.thompson.attrs
    assert res.ledger.privacy_model == "label"
    assert attrs["tree_leaf_sensitivity"] == pytest.approx(2.0 * 1.0 * 1.0)  # 2 R_y R_φ
    assert res.ledger.epsilon() <= 3.0 * (1 + BUDGET_RTOL)
    assert scan_for_values(res.idata, res.owner.y, rtol=1e-9) == []
    # replace one observed value at fixed inputs: A's leaf moves by at most 2 R_y R_φ
    feats = NystromFeatures(COV, np.linspace(0, 1, 6)[:, None], 0.05, 0.0)
    Phi = feats(res.owner.X[:3])
    r, r2 = np.array([1.0, 0.2, -0.5]), np.array([-1.0, 0.2, -0.5])
    assert np.linalg.norm(Phi.T @ r - Phi.T @ r2) <= attrs["tree_leaf_sensitivity"] * (1 + 1e-12)


def test_bad_inputs_fail_before_any_spend():
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    with pytest.raises(ValueError, match="values"):
        dp_thompson_sampling_tree(
            lambda X: np.zeros(len(X) + 1),
            COV,
            domain=(0.0, 1.0),
            X_init=X0,
            n_rounds=3,
            noise_sd=0.05,
            ledger=ledger,
            progressbar=False,
            rng=np.random.default_rng(0),
        )
    with pytest.raises(ValueError, match="epsilon"):
        _run(ledger=ledger, epsilon=-1.0)
    assert ledger.epsilon() == 0.0 and ledger.history == []


# ------------------------------------------------------------------ label privacy (§9): proofs
class _RecordingTree(TreeAggregator):
    """The loop's aggregator, also keeping the leaves it was given (test instrumentation)."""

    last: TreeAggregator | None = None

    def __init__(self, plan, rng=None):
        super().__init__(plan, rng)
        self.leaves = []
        _RecordingTree.last = self

    def add(self, leaf):
        self.leaves.append(np.array(leaf, dtype=np.float64))
        return super().add(leaf)


class _DataBlindTree(TreeAggregator):
    """Releases noise from its own fixed stream only: the released values ignore the data."""

    def __init__(self, plan, rng=None):
        super().__init__(plan, rng)
        self._blind = np.random.default_rng(99)

    def _noisy(self, v):
        return self.plan.sigma * self._blind.standard_normal(self.plan.dim)


def _replay_nodes(tree, leaves):
    """Stacked node sums (no noise) of ``leaves`` over the nodes the run released."""
    return np.concatenate([leaves[first - 1 : last].sum(0) for _, first, last in tree.released])


def _leaves_of(run, feats, y):
    """The loop's label leaves recomputed from the published inputs and values ``y``."""
    bounds = tuple(run.idata.thompson.attrs["y_bounds"])
    n0 = run.owner.n_init
    groups = [(run.owner.X[:n0], y[:n0])] + [
        (run.owner.X[i : i + 1], y[i : i + 1]) for i in range(n0, len(y) - 1)
    ]
    return np.stack([label_statistics(feats(Xg), yg, bounds) for Xg, yg in groups])


@pytest.fixture(scope="module")
def label_run():
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        mp.setattr("pm_dpgp.workflow.thompson_tree.TreeAggregator", _RecordingTree)
        res = _run(n_rounds=13, privacy_model="label", y_bounds=(-1.0, 1.5))
    tree = _RecordingTree.last
    feats = NystromFeatures(COV, np.linspace(0, 1, 6)[:, None], 0.05, 0.0)
    return res, tree, feats


def test_label_leaves_are_the_A_stream_of_the_published_inputs(label_run):
    """The loop's leaves are exactly Φᵀ(clip(y) − c), c the midpoint of y_bounds, at the
    published inputs (no B, no x)."""
    res, tree, feats = label_run
    assert res.n_rounds == 13 and len(tree.leaves) == 13 and tree.plan.dim == feats.M
    # same operations in the same order: equal up to the last bit of the matrix product
    np.testing.assert_allclose(
        np.stack(tree.leaves), _leaves_of(res, feats, res.owner.y), rtol=0, atol=1e-13
    )
    attrs = res.idata.thompson.attrs
    # Δ = R_φ (b − a): 2.5 for y_bounds (-1, 1.5), not 2 max|b − μ| R_φ = 3
    assert attrs["tree_leaf_sensitivity"] == pytest.approx(feats.R * 2.5, rel=1e-15)
    assert attrs["privacy_model"] == "label" and res.ledger.privacy_model == "label"


def test_label_leaves_are_centred_so_round_off_stays_below_the_sensitivity():
    """Stop-26 audit: with y_bounds far from the prior mean (μ = 0, [a, b] = [10¹⁵, 10¹⁵ + 1])
    μ-centred leaves of size ~10¹⁵ R_φ made the counter's float sums of worst neighbours move
    by 1.63× the charged sensitivity.  The loop's leaves are centred at the midpoint, so they
    are O(b − a), and the worst neighbour (one design value a ↔ b, other values adversarial)
    moves the stacked releases by at most the sensitivity, up to relative round-off."""
    a, b = 1e15, 1e15 + 1.0
    rng = np.random.default_rng(11)
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        mp.setattr("pm_dpgp.workflow.thompson_tree.TreeAggregator", _RecordingTree)
        res = _run(
            seed=5,
            n_rounds=8,
            objective_fn=lambda X: a + rng.uniform(size=len(X)),
            y_bounds=(a, b),
            prior_mean=0.0,
            privacy_model="label",
            candidates=32,
            refine_steps=0,
        )
    tree = _RecordingTree.last
    feats = NystromFeatures(COV, np.linspace(0, 1, 6)[:, None], 0.05, 0.0)
    leaves = np.stack(tree.leaves)
    assert res.n_rounds == 8
    # centred: |leaf| ≤ n_records · R_φ (b − a)/2 (was ~10¹⁵ with μ-centring)
    assert np.abs(leaves).max() <= len(X0) * feats.R * 0.5 * (b - a) * (1 + 1e-12)
    attrs = res.idata.thompson.attrs
    worst = 0.0
    for _ in range(200):
        y = a + rng.uniform(size=len(res.owner.y))
        y_a, y_b = y.copy(), y.copy()
        y_a[0], y_b[0] = a, b
        n1 = _replay_nodes(tree, _leaves_of(res, feats, y_a))
        n2 = _replay_nodes(tree, _leaves_of(res, feats, y_b))
        worst = max(worst, np.linalg.norm(n1 - n2) / attrs["tree_stacked_sensitivity"])
    assert worst <= 1 + 1e-12


def test_objective_cannot_change_the_published_queries():
    """Stop-26 audit: the objective got a writable view of the chosen candidate (and of
    X_init), so writing into it changed the published x_chosen and the caller's arrays."""
    cand = np.linspace(0.0, 1.0, 17)[:, None]
    X_init = X0.copy()
    f = objective(1003)

    def meddling(X):
        y = f(np.array(X))
        X[:, 0] = 0.123456789  # a read-only argument refuses this
        return y

    with pytest.raises(ValueError, match="read-only"):
        _run(
            n_rounds=3, privacy_model="label", candidates=cand, X_init=X_init, objective_fn=meddling
        )
    np.testing.assert_array_equal(cand, np.linspace(0.0, 1.0, 17)[:, None])
    np.testing.assert_array_equal(X_init, X0)


@settings(max_examples=80, deadline=None)
@given(record=st.integers(0, 14), y_new=st.floats(-3.0, 3.0), y_old=st.floats(-3.0, 3.0))
def test_label_one_value_moves_released_nodes_within_sensitivity(label_run, record, y_new, y_old):
    """Neighbouring runs (one observed value replaced, same history): the stacked released
    node sums move by at most √L R_φ (b − a), only in the nodes that hold that round."""
    res, tree, feats = label_run
    y, y2 = res.owner.y.copy(), res.owner.y.copy()
    y[record], y2[record] = y_old, y_new
    a, b = (
        _replay_nodes(tree, _leaves_of(res, feats, y)),
        _replay_nodes(tree, _leaves_of(res, feats, y2)),
    )
    attrs = res.idata.thompson.attrs
    M = feats.M
    leaf = max(1, record - res.owner.n_init + 2)  # leaf 1 = initial design, then one per round
    for k, (_, first, last) in enumerate(tree.released):
        diff = np.linalg.norm(a[k * M : (k + 1) * M] - b[k * M : (k + 1) * M])
        if first <= leaf <= last:
            assert diff <= attrs["tree_leaf_sensitivity"] * (1 + 1e-12) + 1e-12
        else:
            assert diff == 0.0
    # O(15) additions of O(1) values: 1e-12 absolute round-off
    assert np.linalg.norm(a - b) <= attrs["tree_stacked_sensitivity"] * (1 + 1e-12) + 1e-12


def _exact_gaussian_delta(eps, sigma, s):
    """δ(ε) of the Gaussian mechanism with L2 shift s and noise σ (Balle & Wang 2018, Thm. 8)."""
    from scipy.stats import norm

    return norm.cdf(s / (2 * sigma) - eps * sigma / s) - math.exp(eps) * norm.cdf(
        -s / (2 * sigma) - eps * sigma / s
    )


def test_label_transcript_exact_divergence_on_adversarial_neighbours(label_run):
    """The transcript (released nodes and chosen inputs) of neighbouring runs: given the
    history, x is the same function of the history and fresh randomness in both, so its factor
    cancels; the node factors are N(μ_k, σ²I) vs N(μ'_k, σ²I) with μ_k − μ'_k fixed once x_t*
    is chosen.  The privacy loss is exactly that of one Gaussian shift s = ‖μ − μ'‖: its exact
    δ at the charged ε must not exceed the charged δ, for the worst value pair (a, b) at every
    round, and the leaf-1 neighbour must nearly attain it (the charge is not loose)."""
    res, tree, feats = label_run
    attrs = res.idata.thompson.attrs
    eps, delta, sigma = res.ledger.epsilon(), attrs["delta"], attrs["tree_node_sigma"]
    lo, hi = attrs["y_bounds"]
    deltas = []
    for record in range(len(res.owner.y) - 1):  # the last observation enters no release
        y, y2 = res.owner.y.copy(), res.owner.y.copy()
        y[record], y2[record] = lo, hi
        s = np.linalg.norm(
            _replay_nodes(tree, _leaves_of(res, feats, y))
            - _replay_nodes(tree, _leaves_of(res, feats, y2))
        )
        deltas.append(_exact_gaussian_delta(eps, sigma, s))
    # the calibration is exact to ~1e-9 relative (analytic Gaussian bisection)
    assert max(deltas) <= delta * (1 + 1e-6)
    # leaf 1 (initial design) lies in L = 4 nodes; ‖φ(0.1)‖ < R_φ, so below δ but close
    assert max(deltas[:3]) > 0.8 * delta  # measured 0.94 δ (shift 4.984 of 5.0)
    # a later round lies in fewer nodes: strictly smaller loss
    assert deltas[-1] < max(deltas[:3])


@pytest.mark.parametrize("model", ["label", "full"])
def test_published_trace_depends_on_y_only_through_the_releases(model):
    """With releases that ignore the data, two runs on different objectives publish the same
    trace: nothing else that depends on y (normalisation, clipping counts, B) reaches the
    choice of x or the InferenceData."""
    out = []
    for seed in (5, 6):
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
            warnings.simplefilter("ignore")
            mp.setattr("pm_dpgp.workflow.thompson_tree.TreeAggregator", _DataBlindTree)
            res = dp_thompson_sampling_tree(
                objective(seed) if seed == 5 else (lambda X: -3.0 * np.cos(9 * X[:, 0])),
                COV,
                domain=(0.0, 1.0),
                X_init=X0,
                n_rounds=8,
                noise_sd=0.05,
                inducing=6,
                ledger=Ledger(epsilon=3.0, delta=DELTA),
                candidates=64,
                refine_steps=1,
                progressbar=False,
                privacy_model=model,
                rng=np.random.default_rng(0),
            )
        out.append(res)
    assert not np.array_equal(out[0].owner.y, out[1].owner.y)
    th0, th1 = out[0].idata.thompson, out[1].idata.thompson
    for name in th0.data_vars:
        np.testing.assert_array_equal(th0[name], th1[name])
    assert th0.attrs == th1.attrs


def test_label_run_ledger_replay_and_no_mixing():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run(n_rounds=5, privacy_model="label")
    assert len(res.events) == 1 and len(res.ledger.history) == 1
    fresh = Ledger(delta=DELTA)
    fresh.spend(res.events[0], privacy_model="label")
    # the replay performs the same single ledger operation
    assert res.ledger.epsilon() == pytest.approx(fresh.epsilon(), rel=1e-12)
    assert 2.9 < res.ledger.epsilon() <= 3.0 * (1 + BUDGET_RTOL)
    assert scan_for_values(res.idata, res.owner.y, rtol=1e-9) == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _run(n_rounds=5, privacy_model="label")
    np.testing.assert_array_equal(again.x_chosen, res.x_chosen)  # reproducible with a seed
    # a full-privacy ledger refuses the label run before any noise or random draw
    ledger = Ledger(epsilon=10.0, delta=DELTA)
    ledger.spend(GaussianEvent(noise_multiplier=5.0), privacy_model="full")
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="label"):
        _run(ledger=ledger, epsilon=3.0, privacy_model="label", rng=rng)
    assert rng.bit_generator.state == state and len(ledger.history) == 1


def test_label_secure_default_runs_and_charges_zcdp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run(n_rounds=4, rng=None, privacy_model="label")
    assert res.n_rounds == 4 and isinstance(res.events[0], ZCDPEvent)
    assert res.ledger.privacy_model == "label"
    assert res.ledger.epsilon() <= 3.0 * (1 + BUDGET_RTOL)
    assert scan_for_values(res.idata, res.owner.y, rtol=1e-9) == []


def test_privacy_model_argument_is_checked_before_any_spend():
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    with pytest.raises(ValueError, match="privacy_model"):
        _run(ledger=ledger, privacy_model="outputs")
    with pytest.raises(TypeError, match="both"):
        _run(ledger=ledger, privacy_model="label", inputs_public=True)
    assert ledger.history == []
    with pytest.warns(DeprecationWarning, match="privacy_model"):
        res = _run(n_rounds=2, inputs_public=True)
    assert res.ledger.privacy_model == "label"


@pytest.mark.parametrize(
    "bad",
    [{"rho": 0.0}, {"rho": 1.5}, {"variant": "bogus"}, {"refine_points": 0}, {"refine_steps": -1}],
)
def test_posterior_and_search_settings_are_checked_before_the_charge(bad):
    """Stop-26 audit: ρ, the variant and the local search's settings were first checked in
    round 1, after the whole run had been charged (and, secure, one node drawn)."""
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=next(iter(bad))):
        _run(ledger=ledger, rng=rng, **bad)
    assert ledger.epsilon() == 0.0 and len(ledger.history) == 0
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("filt", ["gdp", "renyi", "zcdp"])
def test_default_epsilon_is_the_largest_the_ledger_accepts(filt):
    """Stop-26 audit: the default run ε was the remaining budget, which a Rényi or zCDP
    filter charges more than its own ε (the run silently did nothing) and a GDP ledger with
    an earlier event charges less (part of the budget was left unused)."""
    from pm_dpgp.mechanisms.gaussian import gaussian_sigma

    ledger = Ledger(epsilon=3.0, delta=DELTA, filter=filt)
    ledger.spend(
        GaussianEvent(noise_multiplier=gaussian_sigma(1.0, DELTA, 1.0)), privacy_model="full"
    )
    res = _run(ledger=ledger, n_rounds=6)
    assert res.stop_reason == "completed" and res.n_rounds == 6
    budget_used = ledger.preview_filter(
        GaussianEvent(noise_multiplier=1e12)
    )  # ≈ the filter's total
    assert 3.0 * (1 - 1e-6) <= budget_used <= 3.0 * (1 + BUDGET_RTOL)


def test_default_epsilon_never_runs_on_the_ledgers_round_off_slack():
    """Stop-39 walkthrough: after a run that used the whole budget, a second run with the
    default ε was sized from the ledger's round-off slack (BUDGET_RTOL): "completed" at
    ε = 4.3e-6 with node noise sd 8.9e4 and the total 3.000000003; a third run stopped with
    no rounds and no warning.  Now both say so and neither spends or draws."""
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = _run(ledger=ledger, n_rounds=6)
    assert first.stop_reason == "completed" and len(ledger.history) == 1
    total = ledger.epsilon()
    for seed in (4, 5):
        rng = np.random.default_rng(seed)
        state = rng.bit_generator.state
        with pytest.warns(UserWarning, match="cannot afford the first round"):
            res = _run(ledger=ledger, n_rounds=6, rng=rng)
        assert res.stop_reason == "budget" and res.n_rounds == 0
        assert len(ledger.history) == 1 and ledger.epsilon() == total <= 3.0
        assert rng.bit_generator.state == state


def test_default_epsilon_warns_when_the_ledger_affords_a_small_run_only():
    """A default run sized to less than 10 % of the budget (the rest spent before) completes,
    spends what the ledger had left, and warns with its node noise sd (stop-39 walkthrough:
    ε = 0.05 of 3, node noise sd 153 for responses in [-1, 1], and no word of it)."""
    from pm_dpgp.mechanisms.gaussian import gaussian_sigma

    ledger = Ledger(epsilon=3.0, delta=DELTA)
    ledger.spend(
        GaussianEvent(noise_multiplier=gaussian_sigma(2.999, DELTA, 1.0)), privacy_model="full"
    )
    pattern = r"epsilon = 0\.05.*budget 3;.*sd is \d{3} against a response range of 2\."
    with pytest.warns(UserWarning, match=pattern):
        res = _run(ledger=ledger, n_rounds=6)
    assert res.stop_reason == "completed" and res.n_rounds == 6
    assert 3.0 * (1 - 1e-6) <= ledger.filter_epsilon <= 3.0


def test_a_filter_that_cannot_account_for_the_run_says_so():
    """A secure run (a zCDP event) on a GDP ledger holding a Gaussian event: the ledger's own
    error names the filter to use, instead of a silent ``stop_reason="budget"``."""
    from pm_dpgp.accounting import FilterMismatchError
    from pm_dpgp.mechanisms.gaussian import gaussian_sigma

    ledger = Ledger(epsilon=3.0, delta=DELTA)
    ledger.spend(
        GaussianEvent(noise_multiplier=gaussian_sigma(1.0, DELTA, 1.0)), privacy_model="full"
    )
    with pytest.raises(FilterMismatchError, match="filter='renyi'"):  # stop 34: own type
        _run(ledger=ledger, rng=None, n_rounds=4)
    assert len(ledger.history) == 1


def test_an_infinite_filter_total_is_a_budget_stop_and_a_huge_budget_never_records_twice():
    """Stop-26 review: (a) with δ used up by an approximate event, the fixed filter's total
    is inf: that is an exhausted budget (``stop_reason="budget"``), not a filter that cannot
    account for the event; (b) a budget within 1e-9 of the largest double made the allowance
    overflow to inf, so a spend meant to raise the filter's message was recorded, then the
    run recorded itself a second time."""
    from pm_dpgp.accounting import ApproxDpEvent, BudgetExceededError

    ledger = Ledger(epsilon=3.0, delta=1e-5, filter="fixed")
    ledger.spend(ApproxDpEvent(0.5, 1e-5))
    res = _run(ledger=ledger, epsilon=1.0, n_rounds=4)
    assert res.stop_reason == "budget" and len(ledger.history) == 1
    from pm_dpgp.mechanisms.gaussian import gaussian_sigma

    huge = Ledger(epsilon=1.7976931348623157e308, delta=DELTA)
    huge.spend(GaussianEvent(noise_multiplier=gaussian_sigma(1.0, DELTA, 1.0)))
    with pytest.raises(BudgetExceededError, match="cannot account"):
        _run(ledger=huge, rng=None, epsilon=1.0, n_rounds=4)
    assert len(huge.history) == 1


def test_posterior_root_fallback_has_canonical_eigenvector_signs(monkeypatch) -> None:
    """A covariance that fails the Cholesky factorisation falls back to an eigenvector root;
    ``eigh``'s signs depend on the LAPACK build, so the root (and the draw ``m + R z`` of a
    seed) now uses ``gp.linalg.canonical_signs``: flipping eigenvector columns changes
    nothing."""
    from pm_dpgp.workflow.thompson_tree import posterior_root

    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 4)))
    S = (Q * np.array([3.0, 2.0, 1.0, -1e-13])) @ Q.T  # numerically indefinite: no Cholesky
    R = posterior_root(S)
    np.testing.assert_allclose(R @ R.T, S, atol=1e-12)
    eigh = np.linalg.eigh

    def flipped(A):
        w, V = eigh(A)
        return w, V * np.array([-1.0, 1.0, -1.0, -1.0])

    monkeypatch.setattr(np.linalg, "eigh", flipped)
    np.testing.assert_array_equal(posterior_root(S), R)
