"""Stop-47 audit of the accounting (``pm_dpgp/accounting``).

Every test fails on the code before its fix.
"""

from __future__ import annotations

import pytest

from pm_dpgp.accounting import (
    GaussianEvent,
    Ledger,
    PureDpEvent,
    ZCDPEvent,
    event_from_metadata,
    rdp_to_epsilon,
)
from pm_dpgp.accounting.events import MAX_COUNT


# ============================================================================================
# A1: rdp_to_epsilon mapped a negative RDP value to epsilon = 0
# ============================================================================================
@pytest.mark.parametrize("rdp", [[-1.0, 5.0], [-1e-300, 0.3], [0.2, -0.5]])
def test_rdp_to_epsilon_refuses_a_negative_curve(rdp):
    """A Rényi divergence is >= 0; the public conversion returned ε = 0 for a curve with a
    negative value (any δ), where dp_accounting's ``compute_epsilon`` raises."""
    with pytest.raises(ValueError, match="never negative"):
        rdp_to_epsilon([2.0, 4.0], rdp, 1e-5)
    assert rdp_to_epsilon([2.0, 4.0], [0.0, 5.0], 1e-5) == 0.0  # zero stays valid (TV case)


# ============================================================================================
# A2: repeat / k * event bypassed the count limit and the event's own invariants
# ============================================================================================
def test_repeat_refuses_a_total_count_above_2_to_53():
    """``PureDpEvent(0.1).repeat(2**53).repeat(3)`` built count 3·2**53, which no constructor
    accepts: its metadata no longer read back (``event_from_metadata`` raised)."""
    event = PureDpEvent(0.1).repeat(2**53)
    assert event.count == MAX_COUNT
    assert event_from_metadata(event.to_metadata()) == event
    with pytest.raises(ValueError, match="at most 2"):
        event.repeat(3)
    with pytest.raises(ValueError, match="at most 2"):
        3 * ZCDPEvent(0.1, count=2**52)


def test_repeat_of_a_gaussian_event_keeps_its_finite_mu():
    """``GaussianEvent(1e-150).repeat(2**40)`` had μ² = count/z² = inf (the constructor refuses
    that for ``GaussianEvent(1e-150, count=2**40)``); a spend then failed with the misleading
    "mu must be a finite number > 0, got inf"."""
    with pytest.raises(ValueError, match="noise_multiplier must lie"):
        GaussianEvent(1e-150, count=2**40)
    with pytest.raises(ValueError, match="noise_multiplier must lie"):
        GaussianEvent(1e-150).repeat(2**40)
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    ledger.spend(GaussianEvent(20.0).repeat(3))  # a valid repeat is unchanged
    assert ledger.history[0].event == GaussianEvent(20.0, count=3)


# ============================================================================================
# A3: the basic bound's equal shares of δ summed to more than δ
# ============================================================================================
def test_basic_bound_shares_of_delta_sum_to_at_most_delta():
    """The basic bound gives each of n events δ/n rounded to nearest; at δ = 1e-5, n = 3 the
    three shares summed to δ + 4.2e-22 (each event's ε was taken at a hair too much δ)."""
    from fractions import Fraction

    asked: list[float] = []

    class Recording(GaussianEvent):
        def epsilon(self, delta: float) -> float:
            asked.append(delta)
            return super().epsilon(delta)

    delta = 1e-5
    ledger = Ledger(epsilon=None, delta=delta, filter="fixed")
    for z in (3.0, 4.0, 5.0):
        ledger.spend(Recording(z))
    asked.clear()
    assert "basic" in ledger.bounds()
    shares = [d for d in asked if d < delta / 2]  # the basic bound's δ/3 shares
    assert len(shares) == 3
    assert sum(Fraction(d) for d in shares) <= Fraction(delta)
