"""A filter-mismatch refusal names filters that can hold the event, never the one in force.

A Rényi-curve event (a sample-path release) refused by a ledger fixed to ``filter="zcdp"``
was told "create the ledger with filter='renyi' ... or filter='zcdp' ...", the filter it
already had (stop-49 new-user audit).
"""

from __future__ import annotations

import pytest

from pm_dpgp.accounting import FilterMismatchError, Ledger
from pm_dpgp.accounting.events import GaussianEvent, RdpCurveEvent, ZCDPEvent
from pm_dpgp.accounting.ledger import accepting_filters

CURVE = RdpCurveEvent(orders=(2.0, 4.0, 8.0), values=(0.1, 0.2, 0.4))


@pytest.mark.parametrize("family", ["zcdp", "gdp"])
def test_a_curve_event_on_a_zcdp_or_gdp_ledger_is_pointed_to_renyi_only(family) -> None:
    ledger = Ledger(epsilon=5.0, delta=1e-5, filter=family)
    for refuse in (ledger.check_accounts_for, ledger.spend):
        with pytest.raises(FilterMismatchError) as err:
            refuse(CURVE)
        message = str(err.value)
        assert "filter='renyi'" in message
        assert f"filter='{family}'" not in message.split("(", 1)[1], message
    assert ledger.history == []


def test_the_accepting_filters_exclude_the_one_in_force() -> None:
    gauss = GaussianEvent(noise_multiplier=2.0)
    assert accepting_filters(gauss) == ["renyi", "zcdp", "gdp"]
    assert accepting_filters(gauss, "gdp") == ["renyi", "zcdp"]
    assert accepting_filters(ZCDPEvent(rho=0.1), "gdp") == ["renyi", "zcdp"]
    assert accepting_filters(CURVE, "zcdp") == ["renyi"]
    assert accepting_filters(gauss, "renyi") == ["zcdp", "gdp"]
    assert accepting_filters(CURVE, "renyi") == []
