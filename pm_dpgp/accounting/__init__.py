"""Privacy accounting: events describing what each release costs, and the ledger composing them.

See ``docs/accounting.md``.
"""

from pm_dpgp.accounting.events import (
    DEFAULT_ORDERS,
    ApproxDpEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    PureDpEvent,
    RdpCurveEvent,
    RepeatAndSelectEvent,
    ZCDPEvent,
    event_from_metadata,
    gdp_delta,
    gdp_epsilon,
    rdp_to_epsilon,
    stopping_mean,
)
from pm_dpgp.accounting.ledger import (
    BUDGET_RTOL,
    FILTERS,
    BudgetExceededError,
    FilterMismatchError,
    Ledger,
    LedgerEntry,
    PrivacyModelMismatchError,
    ReusedGeneratorError,
    generator_fingerprint,
)
from pm_dpgp.accounting.persistent import (
    LedgerIntegrityError,
    LedgerMismatchError,
    PersistentLedger,
    dataset_fingerprint,
)

__all__ = [
    "DEFAULT_ORDERS",
    "BUDGET_RTOL",
    "PrivacyEvent",
    "GaussianEvent",
    "ZCDPEvent",
    "RdpCurveEvent",
    "PureDpEvent",
    "LaplaceEvent",
    "ApproxDpEvent",
    "RepeatAndSelectEvent",
    "BudgetExceededError",
    "FilterMismatchError",
    "Ledger",
    "LedgerEntry",
    "PrivacyModelMismatchError",
    "ReusedGeneratorError",
    "generator_fingerprint",
    "FILTERS",
    "PersistentLedger",
    "LedgerIntegrityError",
    "LedgerMismatchError",
    "dataset_fingerprint",
    "event_from_metadata",
    "gdp_delta",
    "gdp_epsilon",
    "rdp_to_epsilon",
    "stopping_mean",
]
