"""The ledger's refusal rule is exactly the condition of a privacy-filter theorem.

Statements and proofs: ``docs/accounting.md``, "Filter semantics".  Each test recomputes the
theorem's condition independently (closed forms with ``math``) and checks that the ledger
accepts exactly when it holds.  Tolerances: closed forms of a few dozen flops are compared with
:func:`tests.tolerances.scalar_rtol`; accept/refuse decisions are compared exactly, skipping
draws whose margin to the budget is below the ledger's own slack ``BUDGET_RTOL``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pm_dpgp.accounting import (
    BUDGET_RTOL,
    ApproxDpEvent,
    BudgetExceededError,
    GaussianEvent,
    Ledger,
    PureDpEvent,
    RdpCurveEvent,
    gdp_epsilon,
)
from tests.tolerances import scalar_rtol


def _renyi_condition_eps(curve: np.ndarray, orders: np.ndarray, delta: float) -> float:
    """min over α of the per-order (ε, δ/|Λ|) certificate of the grid Rényi filter.

    For each α: ε_α = R(α) + ln(1 − 1/α) − (ln(δ/|Λ|) + ln α)/(α − 1) (Canonne, Kamath &
    Steinke 2020, Prop. 12), or 0 when δ/|Λ| ≥ √(1 − e^{−R(α)}) (total variation via KL);
    orders ≤ 1.01 are not used (as in ``dp_accounting``).
    """
    d = delta / orders.size
    best = math.inf
    for a, r in zip(orders, curve, strict=True):
        if not math.isfinite(r):
            continue
        if d * d + math.expm1(-r) > 0:
            return 0.0
        if a > 1.01:
            best = min(best, r + math.log1p(-1 / a) - (math.log(d) + math.log(a)) / (a - 1))
    return max(0.0, best)


# ============================================================================================
# Hand-computed example: the grid filter refuses where the after-the-fact minimum accepts
# ============================================================================================
def test_renyi_filter_hand_computed_example():
    """Λ = {2, 4}, δ = 1e-3, Gaussian events with z = 2 (ρ(α) = α/8 each), budget 4.

    After k events: ε_2 = k/4 + ln(1/2) − ln(δ/2·2) = k/4 + 6.2146…,
    ε_4 = k/2 + ln(3/4) − ln(δ/2·4)/3 = k/2 + 1.7839…; so k = 4 gives 3.7839 ≤ 4 and k = 5
    gives min(7.46, 4.2839) > 4: the fifth release is refused.
    """
    delta, budget = 1e-3, 4.0
    c4 = math.log(0.75) - math.log(delta / 2 * 4) / 3
    c2 = math.log(0.5) - math.log(delta / 2 * 2)
    assert c4 == pytest.approx(1.783854, abs=1e-6) and c2 == pytest.approx(6.214608, abs=1e-6)
    ledger = Ledger(budget, delta, orders=[2.0, 4.0], filter="renyi")
    for k in range(1, 5):
        ledger.spend(GaussianEvent(2.0))
        assert ledger.filter_epsilon == pytest.approx(
            min(k / 2 + c4, k / 4 + c2), rel=scalar_rtol(30)
        )
    assert not ledger.can_afford(GaussianEvent(2.0))
    with pytest.raises(BudgetExceededError, match="Nothing was recorded"):
        ledger.spend(GaussianEvent(2.0))
    assert len(ledger.history) == 4
    # The composition bound taken after the fact (rule "fixed", valid only for parameters fixed
    # in advance) would still accept the fifth: exact GDP of 5 events is far below 4.
    fixed = Ledger(budget, delta, orders=[2.0, 4.0], filter="fixed")
    for _ in range(5):
        fixed.spend(GaussianEvent(2.0))
    assert fixed.spent_epsilon == pytest.approx(gdp_epsilon(math.sqrt(5) / 2, delta))
    assert fixed.spent_epsilon < budget < 5 / 2 + c4


# ============================================================================================
# The rule equals the theorem's condition on arbitrary adaptive-looking sequences
# ============================================================================================
@st.composite
def rdp_event_st(draw):
    kind = draw(st.sampled_from(["gauss", "pure", "curve"]))
    if kind == "gauss":
        return GaussianEvent(draw(st.floats(0.5, 20.0)), count=draw(st.integers(1, 4)))
    if kind == "pure":
        return PureDpEvent(draw(st.floats(0.01, 2.0)), count=draw(st.integers(1, 3)))
    s = draw(st.floats(0.001, 0.5))
    return RdpCurveEvent.from_function(lambda a, s=s: s * a, draw(st.floats(3.0, 300.0)))


@settings(max_examples=40, deadline=None)
@given(
    events=st.lists(rdp_event_st(), min_size=1, max_size=8),
    budget=st.floats(0.5, 20.0),
    delta=st.sampled_from([1e-3, 1e-5, 1e-8]),
)
def test_renyi_rule_is_exactly_the_grid_filter_condition(events, budget, delta):
    ledger = Ledger(budget, delta, filter="renyi")
    orders = ledger.orders
    curve = np.zeros(orders.size)
    for ev in events:
        cand = curve + ev.rdp(orders)
        eps = _renyi_condition_eps(cand, orders, delta)
        assume(abs(eps - budget) > 10 * BUDGET_RTOL * budget)  # away from the slack band
        expected = eps <= budget
        assert ledger.can_afford(ev) == expected
        if expected:
            ledger.spend(ev)
            curve = cand
            assert ledger.filter_epsilon == pytest.approx(eps, rel=scalar_rtol(30), abs=1e-12)
        else:
            with pytest.raises(BudgetExceededError):
                ledger.spend(ev)
    assert ledger.filter_epsilon <= budget * (1 + BUDGET_RTOL)


@settings(max_examples=40, deadline=None)
@given(
    zs=st.lists(st.floats(0.3, 10.0), min_size=1, max_size=10),
    mu_budget=st.floats(0.2, 3.0),
    delta=st.sampled_from([1e-2, 1e-5]),
)
def test_gdp_rule_is_exactly_the_gdp_filter_condition(zs, mu_budget, delta):
    """GDP filter: accept while Σ 1/z_i² ≤ μ_B², where ε_GDP(μ_B, δ) is the budget."""
    budget = gdp_epsilon(mu_budget, delta)
    ledger = Ledger(budget, delta)  # "auto" → gdp for a first Gaussian event
    mu2 = 0.0
    for z in zs:
        cand = mu2 + 1 / z**2
        assume(abs(math.sqrt(cand) - mu_budget) > 1e-6 * mu_budget)  # root-finder tolerance
        expected = cand <= mu_budget**2
        assert ledger.can_afford(GaussianEvent(z)) == expected
        if expected:
            ledger.spend(GaussianEvent(z))
            mu2 = cand
    assert ledger.filter_family == ("gdp" if ledger.history else None)


def test_basic_filter_for_pure_and_approximate_events():
    ledger = Ledger(1.0, 1e-5)
    ledger.spend(ApproxDpEvent(0.25, 6e-6))
    assert ledger.filter_family == "basic"
    ledger.spend(PureDpEvent(0.25, count=2))
    assert ledger.filter_epsilon == pytest.approx(0.75, rel=scalar_rtol(3))
    with pytest.raises(BudgetExceededError):  # Σδ would be 1.2e-5 > δ
        ledger.spend(ApproxDpEvent(0.01, 6e-6))
    with pytest.raises(BudgetExceededError):  # Σε would be 1.05 > 1
        ledger.spend(PureDpEvent(0.3))
    ledger.spend(PureDpEvent(0.25))
    assert ledger.remaining_epsilon == pytest.approx(0.0, abs=scalar_rtol(4))


# ============================================================================================
# "auto": the family of the first event; events outside the family are refused, not guessed
# ============================================================================================
@pytest.mark.parametrize(
    "first, family, refused",
    [
        (GaussianEvent(5.0), "gdp", PureDpEvent(0.01)),
        (PureDpEvent(0.1), "basic", GaussianEvent(50.0)),
        (RdpCurveEvent.from_function(lambda a: a / 100, 50.0), "renyi", ApproxDpEvent(0.01, 1e-9)),
    ],
)
def test_auto_filter_is_the_family_of_the_first_event(first, family, refused):
    ledger = Ledger(10.0, 1e-5)
    assert ledger.filter_family is None and ledger.filter_epsilon == 0.0
    ledger.spend(first)
    assert ledger.filter_family == family
    assert not ledger.can_afford(refused)
    with pytest.raises(BudgetExceededError, match="cannot account for") as err:
        ledger.spend(refused)
    assert len(ledger.history) == 1
    # not an overspend (9+ of 10 left): the advice is another filter, not a larger budget
    # (stop-31 walkthrough)
    assert "more budget would not help" in str(err.value)
    assert "larger budget" not in str(err.value)


def test_renyi_filter_mixes_gaussian_curve_and_pure_events():
    ledger = Ledger(3.0, 1e-5, filter="renyi")
    ledger.spend(PureDpEvent(0.5))
    ledger.spend(GaussianEvent(8.0))
    ledger.spend(RdpCurveEvent.from_function(lambda a: 0.02 * a, alpha_max=40.0))
    assert ledger.filter_family == "renyi"
    # the grid filter pays for its adaptivity: ε at δ/|Λ| exceeds the composition bound
    assert ledger.spent_epsilon < ledger.filter_epsilon <= 3.0


def test_fixed_rule_is_the_composition_bound():
    ledger = Ledger(2.0, 1e-5, filter="fixed")
    events = [GaussianEvent(4.0), PureDpEvent(0.3), ApproxDpEvent(0.1, 1e-7)]
    for ev in events:
        assert ledger.can_afford(ev) == (ledger.preview(ev) <= 2.0 * (1 + BUDGET_RTOL))
        ledger.spend(ev)
    assert ledger.filter_epsilon == ledger.spent_epsilon


def test_unknown_filter_is_refused():
    with pytest.raises(ValueError, match="filter must be one of"):
        Ledger(1.0, filter="best")  # type: ignore[arg-type]
