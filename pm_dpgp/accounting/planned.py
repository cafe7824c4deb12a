"""What a given ledger will accept of a planned release (``pm_dpgp.plan``).

A plan's ``ledger_epsilon`` is the *composition* ε of the event its release will charge (what
``Ledger.epsilon()`` shows on a fresh ledger).  A ledger decides on its *privacy filter's* ε
instead (``docs/accounting.md``, "Filter semantics"), which can be larger: under
``filter="renyi"``, other Rényi orders, or after earlier releases.  ``PlannedCharge`` asks the
ledger itself, through its own previews (``Ledger.preview_filter``, ``Ledger.can_afford``,
``Ledger.check_privacy_model``), and never spends.
"""

from __future__ import annotations

from typing import ClassVar

from pm_dpgp.accounting.events import PrivacyEvent
from pm_dpgp.accounting.ledger import Ledger, PrivacyModelMismatchError

__all__ = ["PlannedCharge"]


class PlannedCharge:
    """``filter_epsilon_in(ledger)`` and ``fits_in(ledger)`` of a plan (a mixin).

    The plan's release charges ``planned_event`` under ``privacy_model`` (``None``: the
    release takes it as an argument, and only the budget is checked); subclasses with
    further refusals of their own (a sample-path release's target ε) override
    ``_release_accepts``.
    """

    privacy_model: ClassVar[str | None] = "full"

    @property
    def planned_event(self) -> PrivacyEvent:
        """The event the planned release charges (the plan's ``event``)."""
        return self.event  # type: ignore[attr-defined, no-any-return]

    def _release_accepts(self) -> bool:
        """The release's own refusals before its spend, beyond the ledger's (none here)."""
        return True

    def filter_epsilon_in(self, ledger: Ledger) -> float:
        """The ε ``ledger``'s privacy filter would count, at the ledger's δ, after the planned
        release (``Ledger.preview_filter``; +inf if its filter cannot hold the event).
        Records nothing."""
        return float(ledger.preview_filter(self.planned_event))

    def fits_in(self, ledger: Ledger) -> bool:
        """Whether ``ledger``, in its current state, accepts the planned release: its privacy
        filter's ε within its budget (``Ledger.can_afford``), the release's privacy model
        compatible with the recorded ones, and the release's own checks.  Records nothing."""
        if not self._release_accepts():
            return False
        if self.privacy_model is not None:
            try:
                ledger.check_privacy_model(self.privacy_model)
            except PrivacyModelMismatchError:
                return False
        return bool(ledger.can_afford(self.planned_event))
