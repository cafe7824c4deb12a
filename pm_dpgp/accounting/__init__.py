"""Privacy accounting: events describing what each release costs, and the ledger composing them.

See ``docs/accounting.md``.
"""

from pm_dpgp.accounting.events import (
    DEFAULT_ORDERS,
    ApproxDpEvent,
    GaussianEvent,
    PrivacyEvent,
    PureDpEvent,
    RdpCurveEvent,
    gdp_delta,
    gdp_epsilon,
    rdp_to_epsilon,
)
from pm_dpgp.accounting.ledger import BUDGET_RTOL, BudgetExceededError, Ledger, LedgerEntry

__all__ = [
    "DEFAULT_ORDERS",
    "BUDGET_RTOL",
    "PrivacyEvent",
    "GaussianEvent",
    "RdpCurveEvent",
    "PureDpEvent",
    "ApproxDpEvent",
    "BudgetExceededError",
    "Ledger",
    "LedgerEntry",
    "gdp_delta",
    "gdp_epsilon",
    "rdp_to_epsilon",
]
