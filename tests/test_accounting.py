"""Tests for the privacy events and the ledger (pm_dpgp.accounting)."""

from __future__ import annotations

import json
import math
import pickle
import threading

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from pm_dpgp.accounting import (
    BUDGET_RTOL,
    DEFAULT_ORDERS,
    ApproxDpEvent,
    BudgetExceededError,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    PureDpEvent,
    RdpCurveEvent,
    gdp_delta,
    gdp_epsilon,
    rdp_to_epsilon,
)
from pm_dpgp.mechanisms.gaussian import gaussian_epsilon, gaussian_sigma
from tests.test_gaussian import root_tol, roundtrip_tol
from tests.tolerances import scalar_rtol

ORDERS = list(DEFAULT_ORDERS)

z_st = st.floats(min_value=0.3, max_value=30.0)
count_st = st.integers(min_value=1, max_value=50)
delta_st = st.floats(min_value=1e-10, max_value=0.2)


def rdp_accountant(pairs, orders=ORDERS) -> RdpAccountant:
    acc = RdpAccountant(orders=list(orders))
    for z, c in pairs:
        acc.compose(dp_accounting.GaussianDpEvent(z), c)
    return acc


def gaussian_ledger(pairs, delta=1e-5) -> Ledger:
    ledger = Ledger(delta=delta)
    for z, c in pairs:
        ledger.spend(GaussianEvent(z, c))
    return ledger


def rr_rdp_abs_err(alpha: np.ndarray | float, eps: float) -> np.ndarray | float:
    """Rounding-error bound of an RDP value of randomized response or Laplace at order α.

    Either formula takes a log / difference of logs of terms of size ≤ (α + 1)·ε + 2 ln 2 (the
    arguments of exp included), each with relative error ≲ 10·EPS, then divides by α − 1: an
    absolute error ≤ scalar_rtol(10)·(2 + (α + 1)·ε)/(α − 1).  Near α = 1 this is large relative
    to the value (the log is of a number close to 1): it is the condition of the formula.
    """
    return scalar_rtol(10) * (2.0 + (alpha + 1.0) * eps) / (alpha - 1.0)


def laplace_rdp(alpha: np.ndarray, eps: float) -> np.ndarray:
    """RDP of the Laplace mechanism with scale 1/eps, sensitivity 1 (Mironov 2017, Table II)."""
    a = alpha
    return np.log(
        a / (2 * a - 1) * np.exp((a - 1) * eps) + (a - 1) / (2 * a - 1) * np.exp(-a * eps)
    ) / (a - 1)


# ============================================================================================
# DEFAULT_ORDERS
# ============================================================================================
def test_default_orders_grid():
    o = DEFAULT_ORDERS
    assert o.ndim == 1 and np.all(np.diff(o) > 0)
    assert o[0] == pytest.approx(1.01) and o[-1] == 10_000
    assert np.sum(o < 2) >= 15  # fractional orders near 1
    assert {2.0, 2.5, 8.0, 32.0, 64.0, 256.0} <= set(o.tolist())
    assert not o.flags.writeable


# ============================================================================================
# Gaussian events vs dp_accounting
# ============================================================================================
PAIRS = [
    [(1.0, 1)],
    [(1.8778755609073847, 1)],
    [(2.0, 5), (0.7, 1)],
    [(5.0, 30), (3.0, 2), (1.1, 1)],
    [(0.5, 1), (10.0, 100)],
]


@pytest.mark.parametrize("pairs", PAIRS)
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
def test_gaussian_rdp_matches_rdp_accountant(pairs, delta):
    ledger = gaussian_ledger(pairs, delta)
    acc = rdp_accountant(pairs)
    # the composed RDP curve on the same orders (RdpAccountant keeps it in `_rdp`): per order
    # a sum of positive closed forms, α·(c/z²/2) vs c·(α/(2z²)), ≤ 3 + (#events) roundings each
    curve_rtol = scalar_rtol(3 + len(pairs))
    np.testing.assert_allclose(ledger.rdp, acc._rdp, rtol=curve_rtol, atol=0)
    eps_acc = acc.get_epsilon(delta)
    eps_rdp = ledger.bounds()["rdp"]
    # both convert with dp_accounting's compute_epsilon, ρ + ln(1 − 1/α) − ln(δα)/(α − 1) at the
    # best order (terms of one sign but the small ln(1 − 1/α)): the curve's error + ~8 flops
    conv_rtol = scalar_rtol(11 + len(pairs))
    assert eps_rdp <= eps_acc * (1 + conv_rtol)
    assert eps_rdp == pytest.approx(eps_acc, rel=conv_rtol)
    # not vacuous: a ledger whose noise multipliers are off by 1e-4 (relative) is rejected
    off = gaussian_ledger([(z * (1 + 1e-4), c) for z, c in pairs], delta)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(off.rdp, acc._rdp, rtol=curve_rtol, atol=0)
    with pytest.raises(AssertionError):
        assert off.bounds()["rdp"] == pytest.approx(eps_acc, rel=conv_rtol)
    # the exact GDP bound is never worse, and the ledger reports the minimum
    assert ledger.bounds()["gdp"] <= eps_rdp
    assert ledger.spent_epsilon == min(ledger.bounds().values())
    assert ledger.bound_used == "gdp"


@pytest.mark.parametrize("pairs", [PAIRS[0], PAIRS[2], PAIRS[3]])
def test_gaussian_exact_matches_pld_accountant(pairs):
    delta = 1e-6
    ledger = gaussian_ledger(pairs, delta)
    pld = PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), c)
                for z, c in pairs
            ]
        )
    )
    eps_pld = pld.get_epsilon(delta)  # pessimistic discretisation: an upper bound
    eps_gdp = ledger.bounds()["gdp"]
    # PLD's pessimistic ε is ≥ the exact one; ours is the exact one to within the root solve
    assert eps_gdp <= eps_pld + root_tol(eps_gdp)
    assert eps_gdp == pytest.approx(eps_pld, rel=1e-3)


def test_gaussian_single_event_is_the_balle_wang_epsilon():
    for z, delta in [(0.8, 1e-5), (2.5, 0.01), (12.0, 1e-9)]:
        ev = GaussianEvent(z)
        assert ev.epsilon(delta) == pytest.approx(dp_accounting.get_epsilon_gaussian(z, delta))
        # μ = √1/z = 1.0/z on both sides: the same root solve on the same input, bitwise equal
        assert ev.epsilon(delta) == pytest.approx(gaussian_epsilon(z, delta), rel=1e-15)


def test_gaussian_composition_is_gaussian():
    # k runs with noise z are exactly one run with noise z / sqrt(k)
    a = GaussianEvent(3.0, count=9)
    b = GaussianEvent(1.0)
    assert a.mu == pytest.approx(b.mu)
    # μ = √9/3 = 1/1 = 1.0 exactly on both sides: the same root solve on the same input
    assert a.epsilon(1e-5) == b.epsilon(1e-5)
    ledger = gaussian_ledger([(2.0, 1), (2.0, 1), (2.0 / math.sqrt(2), 1)])
    # here μ² = 1/4 + 1/4 + 1/(2/√2)² is 1 only up to a few ulps: two root solves (root_tol)
    tol = root_tol(gdp_epsilon(1.0, 1e-5))
    assert ledger.spent_epsilon == pytest.approx(gdp_epsilon(1.0, 1e-5), rel=0, abs=tol)
    # not vacuous: the GDP composition with μ² off by 1e-4 (relative) is rejected
    with pytest.raises(AssertionError):
        assert ledger.spent_epsilon == pytest.approx(
            gdp_epsilon(math.sqrt(1 + 1e-4), 1e-5), rel=0, abs=tol
        )


def test_gdp_epsilon_and_delta_are_inverse():
    for mu in (0.1, 0.5, 1.0, 3.0):
        for delta in (1e-8, 1e-5, 0.05):
            eps = gdp_epsilon(mu, delta)
            assert gdp_delta(mu, eps) <= delta
            if eps > 0:  # eps = 0 when even delta(0) (the total variation) is below delta
                assert gdp_delta(mu, eps) == pytest.approx(delta, rel=1e-6)
            else:
                assert mu == 0.1 and delta == 0.05


def test_gaussian_event_rdp_formula():
    ev = GaussianEvent(2.0, count=3)
    alpha = np.array([1.5, 2.0, 10.0])
    np.testing.assert_allclose(ev.rdp(alpha), alpha * 3 / (2 * 4.0))


@settings(max_examples=40, deadline=None)
@given(z=z_st, c=count_st, d1=delta_st, d2=delta_st)
def test_gaussian_epsilon_monotone_in_delta_and_count(z, c, d1, d2):
    lo, hi = sorted((d1, d2))
    ev = GaussianEvent(z, c)
    # equal or nearly equal δ: each root solve may land up to root_tol above its root
    assert ev.epsilon(hi) <= ev.epsilon(lo) + root_tol(ev.epsilon(lo))
    assert ev.repeat(2).epsilon(lo) >= ev.epsilon(lo)
    assert (ev * 2) == (2 * ev) == GaussianEvent(z, 2 * c)


# ============================================================================================
# The ledger: budget semantics
# ============================================================================================
def test_empty_ledger():
    ledger = Ledger(epsilon=2.0, delta=1e-6)
    assert ledger.spent_epsilon == 0.0 and ledger.epsilon() == 0.0 and ledger.epsilon(0.1) == 0.0
    assert ledger.remaining_epsilon == 2.0 and ledger.bound_used == "none"
    assert ledger.history == []
    text = ledger.summary()
    assert "spent" in text and "remaining" in text and "budget" in text


def test_calibrated_gaussian_fits_budget_exactly_and_second_is_refused():
    sigma = gaussian_sigma(1.0, 0.01)
    ledger = Ledger(epsilon=1.0, delta=0.01)
    event = GaussianEvent(sigma, label="posterior mean")
    assert ledger.can_afford(event)
    entry = ledger.spend(event)
    assert entry.index == 0 and entry.label == "posterior mean"
    # σ from one root solve, ε back from another: see tests.test_gaussian.roundtrip_tol
    tol = roundtrip_tol(1.0, sigma)
    assert ledger.spent_epsilon == pytest.approx(1.0, rel=0, abs=tol)
    # the ledger's own acceptance rule (BUDGET_RTOL), replayed on the number it stored
    assert ledger.spent_epsilon <= 1.0 * (1 + BUDGET_RTOL)
    # not vacuous: a σ off by 1e-4 (relative) is outside the round-trip tolerance
    with pytest.raises(AssertionError):
        assert GaussianEvent(sigma * (1 + 1e-4)).epsilon(0.01) == pytest.approx(1.0, rel=0, abs=tol)
    assert not ledger.can_afford(event)
    before = (ledger.history, ledger.spent_epsilon, ledger.rdp)
    with pytest.raises(BudgetExceededError) as info:
        ledger.spend(event)
    msg = str(info.value)
    assert "spent" in msg and "budget" in msg and "Nothing was recorded" in msg
    assert isinstance(info.value, ValueError)
    # nothing recorded
    assert ledger.history == before[0]
    assert ledger.spent_epsilon == before[1]
    np.testing.assert_array_equal(ledger.rdp, before[2])


def test_budget_comparison_has_only_tiny_slack():
    # an event whose exact epsilon exceeds the budget by 1e-6 relative is refused
    sigma = gaussian_sigma(1.0 * (1 + 1e-6), 0.01)
    ledger = Ledger(epsilon=1.0, delta=0.01)
    with pytest.raises(BudgetExceededError):
        ledger.spend(GaussianEvent(sigma))
    assert ledger.history == []


def test_preview_records_nothing():
    ledger = Ledger(epsilon=5.0)
    ev = GaussianEvent(2.0)
    p = ledger.preview(ev)
    assert ledger.history == [] and ledger.spent_epsilon == 0.0
    ledger.spend(ev)
    # preview and spend run the same _Totals.add + bounds on the same state: bitwise equal
    assert ledger.spent_epsilon == pytest.approx(p, rel=1e-15)


def test_refusal_of_unbounded_cost():
    # an approximate event consuming all of the ledger's delta leaves none for the Gaussian one
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    ledger.spend(GaussianEvent(3.0))
    with pytest.raises(BudgetExceededError):
        ledger.spend(ApproxDpEvent(0.1, 1e-5))
    assert len(ledger.history) == 1


def test_adaptive_sequence_totals():
    """The analyst picks each noise level after seeing the previous release."""
    rng = np.random.default_rng(0)
    ledger = Ledger(epsilon=None, delta=1e-6)
    mu2 = 0.0
    last = 0.0
    for _ in range(12):
        z = 4.0 if last > 0 else 2.5  # data-independent rule applied to the released output
        ledger.spend(GaussianEvent(z))
        mu2 += 1 / z**2
        last = rng.normal(0.0, z)  # the "release"
        # same μ² (same additions in the same order), but the minimum may be the "basic" bound
        # of a single event (μ = 1/z, not √(1/z²)): two root solves, root_tol
        expected = gdp_epsilon(math.sqrt(mu2), 1e-6)
        assert ledger.spent_epsilon == pytest.approx(expected, rel=0, abs=root_tol(expected))
    cum = [e.cumulative_epsilon for e in ledger.history]
    assert np.all(np.diff(cum) > 0)
    assert ledger.remaining_epsilon is None


def test_remaining_and_spent_track_budget():
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    ledger.spend(PureDpEvent(0.5), label="selection")
    assert ledger.spent_epsilon == pytest.approx(0.5)
    assert ledger.remaining_epsilon == pytest.approx(2.5)
    assert ledger.bound_used == "basic"
    ledger.spend(PureDpEvent(0.5))
    assert ledger.spent_epsilon == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):
        ledger.spend(PureDpEvent(2.5))
    assert ledger.spent_epsilon == pytest.approx(1.0)
    ledger.spend(PureDpEvent(2.0))
    # bookkeeping: basic composition (the minimum here) adds 0.5 + 0.5 + 2.0 exactly in binary
    assert ledger.remaining_epsilon == 0.0


def test_concurrent_spending_respects_budget():
    z = 2.0
    four = gdp_epsilon(math.sqrt(4) / z, 1e-5)
    # four events compose to exactly `four` (μ² = 4 × 0.25 exactly); a fifth costs ~20% more
    ledger = Ledger(epsilon=four * (1 + 1e-7), delta=1e-5)
    barrier = threading.Barrier(8)
    errors: list[Exception] = []

    def worker() -> None:
        barrier.wait()
        try:
            ledger.spend(GaussianEvent(z))
        except BudgetExceededError as err:
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ledger.history) == 4 and len(errors) == 4
    assert [e.index for e in ledger.history] == [0, 1, 2, 3]


# ============================================================================================
# Mixing event types
# ============================================================================================
def test_mixed_events_bounds_are_valid_and_consistent():
    delta = 1e-5
    events = [
        GaussianEvent(2.0, label="mean"),
        PureDpEvent(0.3, label="hyperparameters"),
        ApproxDpEvent(0.1, 1e-7, label="bounds"),
        GaussianEvent(3.0, count=4),
    ]
    ledger = Ledger(delta=delta)
    for ev in events:
        ledger.spend(ev)
    b = ledger.bounds()
    assert set(b) == {"rdp", "gdp", "basic"}
    assert ledger.spent_epsilon == min(b.values())
    # basic composition by hand: approximate event at its own delta, the rest share the rest
    share = (delta - 1e-7) / 3
    by_hand = 0.1 + sum(ev.epsilon(share) for ev in events if not isinstance(ev, ApproxDpEvent))
    # the same per-event ε (bitwise), only summed in another order: 4 positive terms
    assert b["basic"] == pytest.approx(by_hand, rel=scalar_rtol(4))
    # not vacuous: forgetting to take the approximate event's δ off the shared δ is rejected
    forgot = 0.1 + sum(ev.epsilon(delta / 3) for ev in events if not isinstance(ev, ApproxDpEvent))
    with pytest.raises(AssertionError):
        assert b["basic"] == pytest.approx(forgot, rel=scalar_rtol(4))
    # gdp: exact Gaussian part + pure + approx epsilons
    mu = math.sqrt(1 / 4 + 4 / 9)
    # same μ², same δ, same additions in the same order as the ledger: bitwise equal
    assert b["gdp"] == pytest.approx(gdp_epsilon(mu, delta - 1e-7) + 0.3 + 0.1, rel=1e-12)
    # rdp: summed curves converted at the remaining delta, plus the approximate epsilon
    curve = sum(ev.rdp(DEFAULT_ORDERS) for ev in events if ev.has_rdp)
    assert b["rdp"] == pytest.approx(rdp_to_epsilon(DEFAULT_ORDERS, curve, delta - 1e-7) + 0.1)
    # the total is at least every single event's own epsilon
    assert ledger.spent_epsilon >= max(ev.epsilon(delta) for ev in events)


def test_mixed_gaussian_and_pure_not_below_a_real_mechanism():
    """Pure events bound *every* eps-DP mechanism, so the ledger must not beat Gaussian+Laplace."""
    delta = 1e-6
    for z, eps, k in [(1.5, 0.5, 1), (3.0, 0.2, 10), (6.0, 1.0, 3)]:
        ledger = Ledger(delta=delta)
        ledger.spend(GaussianEvent(z))
        ledger.spend(PureDpEvent(eps, count=k))
        pld = PLDAccountant(value_discretization_interval=1e-3)
        pld.compose(dp_accounting.GaussianDpEvent(z))
        pld.compose(dp_accounting.LaplaceDpEvent(1.0 / eps), k)
        assert ledger.spent_epsilon >= pld.get_epsilon(delta) - 1e-2


def test_rdp_curve_events_exclude_gdp_bound():
    ledger = Ledger()
    ledger.spend(GaussianEvent(2.0))
    ledger.spend(RdpCurveEvent.from_function(lambda a: a / 8, 50.0))
    assert "gdp" not in ledger.bounds()
    assert ledger.bound_used in {"rdp", "basic"}


def test_only_approximate_events():
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    ledger.spend(ApproxDpEvent(0.3, 4e-6))
    ledger.spend(ApproxDpEvent(0.3, 4e-6))
    assert ledger.spent_epsilon == pytest.approx(0.6)
    with pytest.raises(BudgetExceededError):  # total delta 1.2e-5 > 1e-5
        ledger.spend(ApproxDpEvent(0.1, 4e-6))
    assert ledger.epsilon(1e-6) == math.inf  # no bound at a smaller delta
    assert ledger.epsilon(1e-3) == pytest.approx(0.6)


@st.composite
def events_st(draw):
    kind = draw(st.sampled_from(["gauss", "pure", "approx", "curve"]))
    if kind == "gauss":
        return GaussianEvent(draw(z_st), draw(st.integers(1, 5)))
    if kind == "pure":
        return PureDpEvent(draw(st.floats(0.01, 2.0)), count=draw(st.integers(1, 3)))
    if kind == "approx":
        return ApproxDpEvent(draw(st.floats(0.01, 1.0)), draw(st.floats(1e-12, 1e-8)))
    z = draw(z_st)
    return RdpCurveEvent.from_function(lambda a: a / (2 * z * z), draw(st.floats(1.5, 1e4)))


@settings(max_examples=30, deadline=None)
@given(events=st.lists(events_st(), min_size=1, max_size=6), d1=delta_st, d2=delta_st)
def test_ledger_epsilon_monotone(events, d1, d2):
    ledger = Ledger(delta=1e-5)
    for ev in events:
        ledger.spend(ev)
    cum = [e.cumulative_epsilon for e in ledger.history]
    # the "basic" bound sums up to len(events) Gaussian root solves, each within root_tol
    n = len(events)
    assert all(b >= a - n * root_tol(a) for a, b in zip(cum, cum[1:], strict=False))
    lo, hi = sorted((d1, d2))
    eps_lo = ledger.epsilon(lo)
    assert ledger.epsilon(hi) <= eps_lo + n * root_tol(eps_lo)


# ============================================================================================
# RdpCurveEvent
# ============================================================================================
def test_curve_lookup_uses_next_grid_order():
    ev = RdpCurveEvent((1.5, 2.0, 4.0, 8.0), (0.1, 0.2, 0.4, 0.8), alpha_max=10.0)
    got = ev.rdp([1.2, 1.5, 1.6, 2.0, 3.0, 7.9, 8.0, 9.0, 10.0, 20.0])
    expected = [0.1, 0.1, 0.2, 0.2, 0.4, 0.8, 0.8, math.inf, math.inf, math.inf]
    np.testing.assert_array_equal(got, expected)


def test_curve_non_monotone_values_use_suffix_minimum():
    # a loose bound at alpha=2 is improved by the tighter one at alpha=4 (D_2 <= D_4 <= 0.3)
    ev = RdpCurveEvent((2.0, 4.0, 6.0), (0.5, 0.3, 0.6))
    np.testing.assert_array_equal(ev.rdp([1.5, 2.0, 3.0, 5.0]), [0.3, 0.3, 0.3, 0.6])


def test_curve_outside_declared_range_is_inf_and_refused():
    ev = RdpCurveEvent((1.5, 2.0), (0.1, 0.2), alpha_min=1.2, alpha_max=2.5)
    np.testing.assert_array_equal(ev.rdp([1.1, 1.2, 2.5, 3.0]), [math.inf] * 4)
    with pytest.raises(ValueError, match="outside"):
        RdpCurveEvent((1.5, 3.0), (0.1, 0.2), alpha_max=2.5)
    with pytest.raises(ValueError, match="outside"):
        RdpCurveEvent((1.5, 2.5), (0.1, 0.2), alpha_max=2.5)  # open interval
    with pytest.raises(ValueError, match="outside"):
        RdpCurveEvent((1.1, 2.0), (0.1, 0.2), alpha_min=1.2)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (((1.5, 2.0), (0.1,)), {}),  # length mismatch
        (((1.5, 2.0), (0.1, -0.2)), {}),  # negative
        (((1.5, 2.0), (0.1, math.nan)), {}),  # NaN
        (((1.5, math.nan), (0.1, 0.2)), {}),  # NaN order
        (((1.0, 2.0), (0.1, 0.2)), {}),  # alpha = 1
        (((0.5, 2.0), (0.1, 0.2)), {}),  # alpha < 1
        (((2.0, 2.0), (0.1, 0.2)), {}),  # duplicate
        (((1.5, 2.0), (0.1, 0.2)), {"alpha_max": 1.0}),
        (((1.5, 2.0), (0.1, 0.2)), {"alpha_min": 0.5}),
        (((1.5, 2.0), (0.1, 0.2)), {"alpha_max": math.nan}),
        (((1.5, 2.0), (0.1, 0.2)), {"count": 0}),
    ],
)
def test_curve_rejects_bad_input(args, kwargs):
    with pytest.raises(ValueError):
        RdpCurveEvent(*args, **kwargs)


def test_curve_from_function_drops_out_of_range_orders_and_matches_gaussian():
    z = 1.7
    curve = RdpCurveEvent.from_function(lambda a: a / (2 * z * z), math.inf, label="g")
    assert curve.orders == tuple(DEFAULT_ORDERS.tolist())
    ledger_c, ledger_g = Ledger(delta=1e-6), Ledger(delta=1e-6)
    ledger_c.spend(curve * 3)
    ledger_g.spend(GaussianEvent(z, 3))
    # per order 3·(α/(2z²)) vs α·(3/z²/2) (≤ 4 roundings each), then the same conversion
    rdp_c, rdp_g = ledger_c.bounds()["rdp"], ledger_g.bounds()["rdp"]
    assert rdp_c == pytest.approx(rdp_g, rel=scalar_rtol(10))
    short = RdpCurveEvent.from_function(lambda a: a, 1.5)
    assert max(short.orders) < 1.5 and min(short.orders) == pytest.approx(1.01)
    with pytest.raises(ValueError):
        RdpCurveEvent.from_function(lambda a: a, 1.005)  # no grid order in (1, 1.005)


@settings(max_examples=50, deadline=None)
@given(
    scale=st.floats(0.01, 10.0),
    alpha_max=st.floats(1.2, 5000.0),
    alphas=st.lists(st.floats(1.0001, 6000.0), min_size=1, max_size=20),
)
def test_curve_lookup_is_an_upper_bound_of_a_monotone_curve(scale, alpha_max, alphas):
    def fn(a):
        return scale * a / (alpha_max - a + 1.0)  # increasing on (1, alpha_max)

    ev = RdpCurveEvent.from_function(fn, alpha_max)
    alphas = np.array(alphas)
    got = ev.rdp(alphas)
    inside = alphas < alpha_max
    # fn(next grid order) vs fn(α): the same 4-flop formula (alpha_max − α is exact by
    # Sterbenz where it cancels), so only its relative rounding can reverse the order
    ref = fn(alphas[inside])
    assert np.all(got[inside] >= ref - scalar_rtol(4) * np.abs(ref))
    assert np.all(np.isinf(got[~inside]))
    # and the lookup is itself non-decreasing in alpha
    r = ev.rdp(np.sort(alphas))
    assert np.all(r[1:] >= r[:-1])


# ============================================================================================
# PureDpEvent and ApproxDpEvent
# ============================================================================================
@settings(max_examples=50, deadline=None)
@given(eps=st.floats(1e-3, 20.0))
def test_pure_rdp_bounds(eps):
    alpha = DEFAULT_ORDERS
    r = PureDpEvent(eps).rdp(alpha)
    assert np.all(r >= 0)
    assert np.all(r <= eps)  # np.minimum(…, ε) caps exactly (count = 1): no slack needed
    zcdp = alpha * eps**2 / 2  # the library forms (α·ε)·ε/2: a few roundings apart
    assert np.all(r <= zcdp * (1 + scalar_rtol(3)))
    # it dominates the Laplace mechanism, a particular eps-DP mechanism; both sides are
    # computed with the rounding error rr_rdp_abs_err (large only near α = 1)
    err = rr_rdp_abs_err(alpha, eps)
    with np.errstate(over="ignore"):
        lap = laplace_rdp(alpha, eps)
    ok = np.isfinite(lap)
    assert np.all(r[ok] >= lap[ok] - 2 * err[ok])
    # non-decreasing in alpha, as any Renyi divergence (up to the rounding of both neighbours)
    assert np.all(np.diff(r) >= -(err[1:] + err[:-1]))


@pytest.mark.parametrize("make", [PureDpEvent, lambda e, **kw: LaplaceEvent(1.0 / e, **kw)])
def test_small_epsilon_curves_do_not_cancel_to_zero(make):
    # stop-32 audit: the textbook forms subtract logs of terms of size αε; at ε = 1e-8 the
    # curve was 0 at the low orders, and 10¹⁴ runs were reported as ε = 0 (a "renyi" ledger with
    # budget 1e-3 accepted them; their ε is about 0.34)
    alpha = np.asarray(DEFAULT_ORDERS)
    for e in (1e-12, 1e-8, 1e-5):
        # both curves are αε²/2 · (1 + O(αε)) for small αε (leading terms of their series)
        small = alpha * e < 1e-4
        r = make(e).rdp(alpha)
        np.testing.assert_allclose(r[small], (alpha * e * e / 2)[small], rtol=2e-4)
    # the cap αε²/2 is rounded up, so it stays above the true divergence (stop-32 review)
    r = make(1e-8).rdp(alpha)
    assert np.all(r >= alpha * 1e-16 / 2 * (1 - 1e-8))
    event = make(1e-8, count=10**14)
    assert event.epsilon(1e-5) > 0.3
    with pytest.raises(BudgetExceededError):
        Ledger(epsilon=1e-3, delta=1e-5, filter="renyi").spend(event)


def test_very_large_pure_epsilon_does_not_overflow():
    # stop-32 review: math.sinh(ε/4)² raised OverflowError for ε ≳ 1420 (also on reopening a
    # persistent ledger holding such an event); the old curve accepted it
    ledger = Ledger(epsilon=5000, delta=1e-6)
    ledger.spend(PureDpEvent(2000.0))
    assert ledger.spent_epsilon == 2000.0
    assert np.all(PureDpEvent(1e5).rdp() == 1e5)
    assert np.all(np.isfinite(LaplaceEvent(1e-5).rdp()))


def test_basic_filter_compares_the_delta_sum_exactly():
    # stop-32 audit: Σ count·δ_i was a float sum, rounded down in 19 of 300 trials, and the
    # basic filter (no slack on δ) accepted up to 1e-16 relative more than δ
    from fractions import Fraction

    rng = np.random.default_rng(0)
    for _ in range(200):
        D = float(10 ** rng.uniform(-8, -3))
        k = int(rng.integers(2, 40))
        di = D / k * float(rng.choice([1.0, 1 + 1e-15, 1 - 1e-15]))
        ledger = Ledger(1e9, D, filter="basic")
        accepted = 0
        for _ in range(k + 2):
            try:
                ledger.spend(ApproxDpEvent(1e-3, di))
            except BudgetExceededError:
                break
            accepted += 1
        # exactly the events whose exact sum fits are accepted
        assert Fraction(di) * accepted <= Fraction(D) < Fraction(di) * (accepted + 1)
    ledger = Ledger(1e9, 1e-5, filter="basic")
    ledger.spend(ApproxDpEvent(0.5, 1e-5))  # the whole δ in one event fits
    assert ledger.spent_epsilon == 0.5


def test_pure_rdp_is_the_randomized_response_divergence():
    eps = 0.8
    p = math.exp(eps) / (1 + math.exp(eps))
    P, Q = np.array([p, 1 - p]), np.array([1 - p, p])
    for a in (1.05, 2.0, 7.5, 64.0):
        direct = math.log(np.sum(P**a * Q ** (1 - a))) / (a - 1)
        # two formulas, each within rr_rdp_abs_err (the log of a number near 1 for α near 1;
        # at ε = 0.8, 1 − p ≈ 0.31 is formed without cancellation)
        tol = 2 * rr_rdp_abs_err(a, eps)
        assert PureDpEvent(eps).rdp([a])[0] == pytest.approx(direct, rel=0, abs=tol)
        # not vacuous: randomized response at an ε off by 1e-4 (relative) is rejected
        with pytest.raises(AssertionError):
            assert PureDpEvent(eps * (1 + 1e-4)).rdp([a])[0] == pytest.approx(
                direct, rel=0, abs=tol
            )


def test_pure_epsilon_and_composition():
    ev = PureDpEvent(1.0)
    assert ev.epsilon(1e-5) == 1.0
    five = PureDpEvent(0.1, count=5).epsilon(1e-5)  # basic 0.5, or the RDP conversion if smaller
    assert 0.45 < five <= 0.5
    # many repetitions: RDP conversion beats basic composition
    many = PureDpEvent(0.05, count=1000)
    assert many.epsilon(1e-6) < 0.8 * 50
    np.testing.assert_allclose(many.rdp([2.0]), 1000 * PureDpEvent(0.05).rdp([2.0]))
    md = ev.to_metadata()
    assert md == {"type": "PureDpEvent", "epsilon": 1.0, "count": 1, "label": ""}


def test_approx_event():
    ev = ApproxDpEvent(0.5, 1e-6, label="x", count=3)
    assert ev.epsilon(3e-6) == 1.5 and ev.epsilon(1e-3) == 1.5
    assert ev.epsilon(2.9e-6) == math.inf
    assert np.all(np.isinf(ev.rdp()))
    assert not ev.has_rdp
    with pytest.raises(ValueError, match="PureDpEvent"):
        ApproxDpEvent(0.5, 0.0)


# ============================================================================================
# Invalid input
# ============================================================================================
@pytest.mark.parametrize(
    "factory",
    [
        lambda: GaussianEvent(0.0),
        lambda: GaussianEvent(-1.0),
        lambda: GaussianEvent(math.nan),
        lambda: GaussianEvent(math.inf),
        lambda: GaussianEvent(1.0, count=0),
        lambda: GaussianEvent(1.0, count=1.5),
        lambda: GaussianEvent(1.0, count=True),
        lambda: GaussianEvent(1.0, label=3),
        lambda: PureDpEvent(0.0),
        lambda: PureDpEvent(math.nan),
        lambda: PureDpEvent(-1.0),
        lambda: ApproxDpEvent(1.0, 1.0),
        lambda: ApproxDpEvent(1.0, math.nan),
        lambda: ApproxDpEvent(0.0, 1e-6),
        lambda: Ledger(epsilon=0.0),
        lambda: Ledger(epsilon=-1.0),
        lambda: Ledger(epsilon=math.nan),
        lambda: Ledger(delta=0.0),
        lambda: Ledger(delta=1.0),
        lambda: Ledger(orders=[1.0, 2.0]),
        lambda: Ledger(orders=[2.0, math.nan]),
        lambda: Ledger(orders=[]),
        lambda: GaussianEvent(1.0).repeat(0),
        lambda: GaussianEvent(1.0).rdp([0.5, 2.0]),
        lambda: GaussianEvent(1.0).epsilon(0.0),
        lambda: Ledger().epsilon(delta=2.0),
    ],
)
def test_invalid_input_raises_value_error(factory):
    with pytest.raises(ValueError):
        factory()


def test_spend_rejects_non_events():
    with pytest.raises(TypeError):
        Ledger().spend(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        GaussianEvent(1.0) * 1.5  # type: ignore[operator]


# ============================================================================================
# Reporting and metadata
# ============================================================================================
def make_reporting_ledger() -> Ledger:
    # A fixed (non-adaptive) plan mixing every event type, so the "fixed" rule (no filter).
    ledger = Ledger(epsilon=8.0, delta=1e-5, filter="fixed")
    ledger.spend(GaussianEvent(2.0), label="posterior <mean>")
    ledger.spend(PureDpEvent(0.4), label="hyperparameters")
    ledger.spend(RdpCurveEvent.from_function(lambda a: a / 20, 30.0, label="sample path"))
    ledger.spend(ApproxDpEvent(0.2, 1e-8))
    return ledger


def test_summary_and_repr():
    ledger = make_reporting_ledger()
    text = ledger.summary()
    for word in ("posterior <mean>", "hyperparameters", "sample path", "ApproxDpEvent"):
        assert word in text
    assert "spent epsilon" in text and "remaining epsilon" in text and "budget epsilon" in text
    assert f"{ledger.spent_epsilon:.4f}" in text
    assert f"{ledger.remaining_epsilon:.4f}" in text
    assert len(text.splitlines()) == 3 + 4 + 1 + 5  # rows, the columns note, totals, model
    r = repr(ledger)
    assert r.startswith("Ledger(") and "releases=4" in r
    h = ledger._repr_html_()
    assert "<table>" in h and "posterior &lt;mean&gt;" in h and "<mean>" not in h


def test_history_entries():
    ledger = make_reporting_ledger()
    hist = ledger.history
    assert [e.index for e in hist] == [0, 1, 2, 3]
    assert hist[-1].cumulative_epsilon == ledger.spent_epsilon
    assert hist[1].epsilon == pytest.approx(0.4)
    for e in hist:
        assert e.time.endswith("+00:00")
    hist.clear()  # a copy: the ledger is unaffected
    assert len(ledger.history) == 4


def test_metadata_is_strict_json_and_pickle_roundtrip():
    ledger = make_reporting_ledger()
    md = ledger.to_metadata()
    text = json.dumps(md, allow_nan=False)
    back = json.loads(text)
    assert back["spent_epsilon"] == pytest.approx(ledger.spent_epsilon)
    assert back["entries"][2]["event"]["type"] == "RdpCurveEvent"
    assert back["entries"][0]["event"]["noise_multiplier"] == 2.0
    assert back["bound_used"] == ledger.bound_used
    curve_md = RdpCurveEvent((2.0,), (math.inf,)).to_metadata()
    assert curve_md["values"] == ["inf"] and curve_md["alpha_max"] == "inf"
    json.dumps(curve_md, allow_nan=False)

    clone = pickle.loads(pickle.dumps(ledger))
    assert clone.spent_epsilon == ledger.spent_epsilon
    clone.spend(GaussianEvent(10.0))
    assert len(clone.history) == 5 and len(ledger.history) == 4


# --------------------------------------------------------------------------- issue 13: speed
def test_gdp_epsilon_root_equals_dp_accounting_and_is_safe() -> None:
    from dp_accounting import get_epsilon_gaussian

    from pm_dpgp.accounting.events import gdp_delta, gdp_epsilon

    for mu in np.geomspace(1e-3, 30.0, 40):
        for delta in (1e-12, 1e-5, 0.3):
            new = gdp_epsilon(float(mu), delta)
            old = float(get_epsilon_gaussian(1.0 / mu, delta))
            # both are root finders stopped at ~1e-12 of the root, then (ours) nudged up by
            # relative steps 1e-12·2^k: they agree to the root finders' tolerance
            assert new == pytest.approx(old, rel=1e-9, abs=1e-12)
            assert gdp_delta(float(mu), new) <= delta  # never below the true root


def test_vectorised_rdp_conversion_equals_dp_accounting() -> None:
    from pm_dpgp.accounting.events import (
        DEFAULT_ORDERS,
        _rdp_to_epsilon_reference,
        rdp_to_epsilon,
    )
    from tests.tolerances import scalar_rtol

    rng = np.random.default_rng(0)
    for _ in range(50):
        curve = DEFAULT_ORDERS * rng.uniform(1e-6, 2.0) + rng.uniform(-1e-3, 1.0)
        curve[rng.random(curve.size) < 0.05] = np.inf
        for delta in (1e-10, 1e-5, 1e-2):
            new = rdp_to_epsilon(DEFAULT_ORDERS, curve, delta)
            old = _rdp_to_epsilon_reference(DEFAULT_ORDERS, curve, delta)
            # the same closed form per order (≈ 10 flops; ln(δα) vs ln δ + ln α)
            assert new == pytest.approx(old, rel=scalar_rtol(10), abs=1e-300)


def test_thousand_gaussian_events_compose_exactly() -> None:
    from pm_dpgp.accounting.events import gdp_epsilon

    ledger = Ledger(epsilon=None, delta=1e-5)
    zs = [20.0 + (i % 3) for i in range(1000)]
    for z in zs:
        ledger.spend(GaussianEvent(z))
    mu = math.sqrt(sum(1.0 / z**2 for z in zs))
    assert ledger.bound_used == "gdp"
    # Σ 1/z² over 1,000 terms in another order/association (the ledger's running total) differs
    # by ≤ scalar_rtol(1000) relative; ε(μ) amplifies a relative error of μ by its elasticity
    # |d ln ε / d ln μ| (finite difference), and the root solve adds its xtol (1e-15, absolute).
    elasticity = abs(math.log(gdp_epsilon(mu * (1 + 1e-6), 1e-5) / gdp_epsilon(mu, 1e-5))) / 1e-6
    rtol = 2.0 * elasticity * scalar_rtol(1000) + 1e-15 / gdp_epsilon(mu, 1e-5)
    assert ledger.spent_epsilon == pytest.approx(gdp_epsilon(mu, 1e-5), rel=rtol)
    assert ledger.spent_epsilon != pytest.approx(gdp_epsilon(mu * (1 + 1e-4), 1e-5), rel=rtol)


_EVENT_KINDS = st.sampled_from(["gauss", "pure", "approx", "curve"])


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(_EVENT_KINDS, st.floats(0.05, 5.0), st.integers(1, 3)), min_size=1, max_size=12
    ),
    st.sampled_from([1e-6, 1e-3, 0.05]),
)
def test_skipping_the_basic_bound_never_changes_the_total(spec, delta):
    """``best_only`` leaves out "basic" only when its lower bound Σ ε_i(rest) exceeds another
    bound; the reported total and its name must be those of the full set of bounds."""
    from pm_dpgp.accounting.ledger import _best, _Totals

    def make(kind, x, count):
        if kind == "gauss":
            return GaussianEvent(1.0 / x, count=count)
        if kind == "pure":
            return PureDpEvent(x, count=count)
        if kind == "approx":
            return ApproxDpEvent(x, 1e-8, count=count)
        return RdpCurveEvent.from_function(lambda a: 0.5 * a * x * x, math.inf, count=count)

    orders = np.asarray(DEFAULT_ORDERS)
    totals = _Totals.empty(orders.size)
    for kind, x, count in spec:
        totals = totals.add(make(kind, x, count), orders)
        full = totals.bounds(delta, orders)
        fast = totals.bounds(delta, orders, best_only=True)
        assert _best(fast) == _best(full)
        assert set(fast) <= set(full)
        if "basic" in full and "basic" not in fast:
            assert full["basic"] > _best(fast)[0]


def test_basic_bound_still_reported_when_it_is_the_smallest():
    # one pure event: basic composition gives its ε exactly; RDP conversion of a pure event is
    # larger at this δ, so the skip must not drop the basic bound here
    ledger = Ledger(delta=1e-6)
    ledger.spend(PureDpEvent(0.3))
    assert ledger.bound_used == "basic"
    assert ledger.spent_epsilon == pytest.approx(0.3)
    assert "basic" in ledger.bounds()


def test_basic_bound_skipped_only_where_rdp_wins():
    from pm_dpgp.accounting.ledger import _best

    ledger = Ledger(delta=1e-5)
    for _ in range(20):
        ledger.spend(GaussianEvent(3.0))
    full = ledger.bounds()
    fast = ledger._totals.bounds(1e-5, ledger.orders, best_only=True)
    assert "basic" in full and "basic" not in fast  # the skip is exercised
    assert _best(fast) == _best(full)
    assert ledger.epsilon() == _best(full)[0]


def _random_event(rng: np.random.Generator):
    from pm_dpgp.accounting import ZCDPEvent

    kind = rng.integers(5)
    if kind == 0:
        return GaussianEvent(float(rng.uniform(0.5, 5.0)), count=int(rng.integers(1, 4)))
    if kind == 1:
        return ZCDPEvent(rho=float(rng.uniform(0.001, 0.5)))
    if kind == 2:
        return PureDpEvent(float(rng.uniform(0.01, 1.0)))
    if kind == 3:
        return ApproxDpEvent(float(rng.uniform(0.01, 1.0)), float(rng.uniform(0, 1e-7)))
    orders = np.sort(rng.uniform(1.05, 60.0, size=int(rng.integers(3, 30))))
    return RdpCurveEvent(tuple(orders), tuple(rng.uniform(0.0, 2.0, orders.size)), label="c")


def test_memoised_totals_equal_a_fresh_computation():
    """The ledger's memos (best total per totals and δ, the basic-composition lower bound
    extended event by event, the filter's ε, the composition reused from ``can_afford`` to
    ``spend``) return bitwise what the same totals computed afresh give, for random mixtures
    of every event type, previews interleaved, several δ and across a pickle round trip."""
    from pm_dpgp.accounting.ledger import _best, _Totals

    rng = np.random.default_rng(2025)
    for trial in range(40):
        filt = ("auto", "renyi", "basic", "fixed")[trial % 4]
        led = Ledger(delta=1e-5, filter=filt)
        for _ in range(int(rng.integers(1, 80))):
            event = _random_event(rng)
            if rng.random() < 0.5:
                led.can_afford(event)
            if rng.random() < 0.2:
                led.can_afford(_random_event(rng))  # a preview of another event
            try:
                led.spend(event)
            except BudgetExceededError:
                continue  # a filter that cannot account for this event type
            fresh = _Totals.empty(led.orders.size)
            for e in (entry.event for entry in led._entries):  # totals keep the first 65
                fresh = fresh.add(e, led.orders)
            fresh.__dict__.pop("_lower_parent", None)  # the plain loop of _basic_lower
            for d in (1e-5, 1e-3, 1e-5):
                assert led._totals.best(d, led.orders) == _best(
                    fresh.bounds(d, led.orders, best_only=True)
                )
                assert led._totals._basic_lower(d) == fresh._basic_lower(d)
            assert led.filter_epsilon == led._filter_epsilon(fresh)
        again = pickle.loads(pickle.dumps(led))
        assert "_lower_at" not in again._totals.__dict__ and "_last_added" not in vars(again)
        assert again.epsilon() == led.epsilon() and again.filter_epsilon == led.filter_epsilon


def test_relabelled_curve_event_and_own_curve():
    """``with_label`` keeps the validated curve and changes only the label (so it compares
    unequal); the event's own curve is its ``rdp`` at its own orders."""
    ev = RdpCurveEvent((1.5, 2.0, 8.0), (0.3, 0.2, 0.9), alpha_max=10.0, label="a", count=3)
    other = ev.with_label("b")
    assert other.label == "b" and other != ev
    assert (other.orders, other.values, other.alpha_max, other.count) == (
        ev.orders,
        ev.values,
        ev.alpha_max,
        ev.count,
    )
    assert other.epsilon(1e-5) == ev.epsilon(1e-5)
    with pytest.raises(ValueError):
        ev.with_label(3)  # type: ignore[arg-type]
    grid, values = ev._own_curve
    np.testing.assert_array_equal(values, ev.rdp(grid))
    np.testing.assert_array_equal(values, 3 * np.array([0.2, 0.2, 0.9]))  # envelope × count


def test_repeat_does_not_inherit_the_one_fold_memos():
    """``event * k`` is a new event: the ε memo and the cached own curve of the 1-fold event
    must not travel with the copy (they once did, and ``(e * 3).epsilon(δ)`` returned the
    1-fold ε, which the basic bound and ``filter="fixed"`` then under-counted)."""
    curve = RdpCurveEvent((1.5, 2.0, 8.0), (0.3, 0.2, 0.9), alpha_max=10.0)
    pairs = [
        (curve, RdpCurveEvent((1.5, 2.0, 8.0), (0.3, 0.2, 0.9), alpha_max=10.0, count=3)),
        (GaussianEvent(3.0), GaussianEvent(3.0, count=3)),
        (PureDpEvent(0.4), PureDpEvent(0.4, count=3)),
        (ApproxDpEvent(0.3, 1e-7), ApproxDpEvent(0.3, 1e-7, count=3)),
    ]
    for event, fresh in pairs:
        event.epsilon(1e-5)  # fill the memo
        if isinstance(event, RdpCurveEvent):
            event._own_curve  # noqa: B018 - fill the cached property
        tripled = event * 3
        assert tripled == fresh
        assert tripled.epsilon(1e-5) == fresh.epsilon(1e-5) > event.epsilon(1e-5)
        np.testing.assert_array_equal(tripled.rdp(DEFAULT_ORDERS), fresh.rdp(DEFAULT_ORDERS))
    led = Ledger(epsilon=1.2, delta=1e-5, filter="fixed")
    with pytest.raises(BudgetExceededError):  # 3 × the curve costs more than 1.2
        led.spend(curve * 3)


def test_a_preview_racing_a_spend_cannot_corrupt_the_totals():
    """``can_afford(E)`` on one thread while another thread spends ``F``: the composition the
    preview memoises is paired with the totals it was composed from, so the later
    ``spend(E)`` composes ``E`` onto ``T + F`` (and is refused here: E and F each fit the
    budget, both do not), never onto the stale ``T``."""
    import threading

    armed, inside, spent = threading.Event(), threading.Event(), threading.Event()

    class SlowGaussian(GaussianEvent):  # forces the interleaving: waits inside the preview
        def rdp(self, orders=DEFAULT_ORDERS):
            out = super().rdp(orders)
            if armed.is_set():
                armed.clear()
                inside.set()
                spent.wait(5)
            return out

    led = Ledger(epsilon=1.0, delta=1e-5, filter="renyi")
    E, F = SlowGaussian(6.0, label="E"), GaussianEvent(6.0, label="F")
    assert led.can_afford(GaussianEvent(6.0)) and not led.can_afford(GaussianEvent(6.0, count=2))
    result = {}

    def first():
        result["afford"] = led.can_afford(E)
        try:
            led.spend(E)
            result["spend"] = "accepted"
        except BudgetExceededError:
            result["spend"] = "refused"

    def second():
        inside.wait(5)
        led.spend(F)
        spent.set()

    armed.set()
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert result == {"afford": True, "spend": "refused"}
    assert [e.label for e in led.history] == ["F"] and len(led._totals.events) == 1


def test_gdp_bound_never_leaves_out_a_repeat_and_select_event():
    """Stop-26 audit: the GDP bound was used whenever no curve or zCDP event was present, and
    it composes only Gaussian, pure and approximate events, so a ``RepeatAndSelectEvent`` was
    left out: a Gaussian(z=20) plus a repeat-and-select of a Gaussian(z=1) reported 0.16, and
    ``filter="fixed"`` accepted it on a budget of 1.  The total must match ``dp_accounting``'s
    RDP accountant (4.7458) and never be below the repeat-and-select event's own bound."""
    from dp_accounting import dp_event as E
    from dp_accounting.rdp import RdpAccountant

    from pm_dpgp.accounting.events import DEFAULT_ORDERS, RepeatAndSelectEvent

    delta = 1e-5
    rs = RepeatAndSelectEvent(GaussianEvent(1.0), gamma=1 - 1e-9)
    for filt in ("fixed", "renyi"):
        ledger = Ledger(epsilon=None, delta=delta, filter=filt)
        ledger.spend(GaussianEvent(20.0))
        ledger.spend(rs)
        assert ledger.bound_used != "gdp"
        acc = RdpAccountant(list(DEFAULT_ORDERS))
        acc.compose(E.GaussianDpEvent(20.0))
        acc.compose(E.RepeatAndSelectDpEvent(E.GaussianDpEvent(1.0), mean=rs.mean, shape=1.0))
        assert ledger.spent_epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
        assert ledger.spent_epsilon >= 4.097  # a rigorous lower bound (mixture argument)
        limited = Ledger(epsilon=1.0, delta=delta, filter=filt)
        limited.spend(GaussianEvent(20.0))
        with pytest.raises(BudgetExceededError):
            limited.spend(rs)


def test_gdp_epsilon_is_never_below_the_exact_root_for_small_mu():
    """Stop-26 audit: the fixed 1e-12 log margin did not cover the cancellation in
    ``Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)`` for small μ: 14 of 2,000 random (μ, δ) had the exact
    δ(ε) (50-digit mpmath) up to 4.4e-12 relative above δ.  The margin now scales with the
    cancellation; every returned ε must satisfy δ(ε) ≤ δ exactly."""
    import random

    import mpmath

    from pm_dpgp.mechanisms.gaussian import gaussian_sigma

    mpmath.mp.dps = 50

    def exact_delta(mu, eps):
        mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
        return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.e**eps * mpmath.ncdf(-mu / 2 - eps / mu)

    r = random.Random(3)
    for _ in range(400):
        mu, delta = 10 ** r.uniform(-2.5, -1.0), 10 ** r.uniform(-12, -1.5)
        eps = gdp_epsilon(mu, delta)
        if eps > 0.0:
            assert exact_delta(mu, eps) <= delta
        sigma = gaussian_sigma(max(eps, 1e-3), delta)  # the calibration uses the same margin
        assert exact_delta(1.0 / sigma, max(eps, 1e-3)) <= delta


def test_pure_and_laplace_curves_are_never_below_a_high_precision_reference():
    """The stop-32 claim: after the rounding margin the computed curves are upper bounds on
    the true divergences (default orders and orders near 1, small to large ε)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60

    def rr(a, e):
        a, e = mp.mpf(a), mp.mpf(e)
        return (mp.log(mp.exp(a * e) + mp.exp((1 - a) * e)) - mp.log(1 + mp.exp(e))) / (a - 1)

    def lap(a, e):
        a, e = mp.mpf(a), mp.mpf(e)
        w = a / (2 * a - 1)
        return mp.log(w * mp.exp((a - 1) * e) + (1 - w) * mp.exp(-a * e)) / (a - 1)

    orders = np.concatenate([DEFAULT_ORDERS[::4], [1 + 2.0**-40, 1 + 1e-9, 1 + 1e-6]])
    for e in (1e-10, 1e-8, 1e-4, 0.3, 1.0, 7.0, 60.0, 500.0, 1400.0):
        for make, ref in ((PureDpEvent, rr), (lambda x: LaplaceEvent(1.0 / x), lap)):
            got = make(e).rdp(orders)
            for a, g in zip(orders, got, strict=True):
                assert mp.mpf(float(g)) >= min(ref(a, e), mp.mpf(e)), (a, e)


def test_summary_says_remaining_epsilon_is_not_the_largest_next_release():
    """Stop-38 usability audit: 'remaining epsilon : 0.54' on a budget of 2 read like the
    largest affordable next release, yet an ε = 1 release was accepted (composition is
    sublinear).  The summary line now says so and where to ask."""
    from pm_dpgp.mechanisms.gaussian import gaussian_sigma

    ledger = Ledger(epsilon=1.6, delta=1e-5)  # two ε = 1 Gaussian releases compose to 1.59
    event = GaussianEvent(gaussian_sigma(1.0, 1e-5))
    ledger.spend(event, label="first")
    assert ledger.remaining_epsilon < 1.0 and ledger.can_afford(event)
    assert "a next release may cost more: ledger.can_afford" in ledger.summary()
    # stop-39 walkthrough: the per-row epsilons were summed by a reader; with two rows or more
    # the table says why they do not add up
    assert "not their sum" not in ledger.summary()
    ledger.spend(event, label="second")
    assert "not their sum" in ledger.summary()
    assert "may cost more" not in Ledger(epsilon=2.0, delta=1e-5).summary()
    # remaining = budget - the FILTER's epsilon, which differs from "spent" (the composition
    # bound) under a zCDP or Renyi filter (stop-38 review: the note said "budget - spent")
    zcdp = Ledger(epsilon=3.0, delta=1e-5, filter="zcdp")
    for _ in range(3):
        zcdp.spend(GaussianEvent(3.0), label="g")
    assert zcdp.spent_epsilon < zcdp.filter_epsilon
    assert zcdp.remaining_epsilon == pytest.approx(3.0 - zcdp.filter_epsilon, rel=1e-12)
    assert "budget - filter epsilon" in zcdp.summary()
