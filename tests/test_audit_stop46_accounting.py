"""Stop-46 audit of the accounting (``pm_dpgp/accounting``).

Every test fails on the code before its fix (``docs/accounting.md``, "Stop-46 audit").
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pm_dpgp.accounting import GaussianEvent, Ledger, ReusedGeneratorError


# ============================================================================================
# A1: the provenance index lost an entry appended while an unlocked check read it
# ============================================================================================
class _RacingEntries(list):
    """The ledger's entry list; the first slice taken by ``hook_thread`` runs ``race`` (another
    thread's ``spend``) right after the slice is taken: the forced interleaving of a
    ``check_privacy_model`` (no lock) with a ``spend`` on another thread."""

    race = None
    hook_thread = None

    def __getitem__(self, item):
        out = super().__getitem__(item)
        if isinstance(item, slice) and self.race is not None:
            if threading.get_ident() == self.hook_thread:
                race, self.race = self.race, None
                worker = threading.Thread(target=race)
                worker.start()
                worker.join()
        return out


def test_a_spend_racing_an_unlocked_provenance_check_keeps_its_generator_fingerprint():
    """``check_privacy_model`` (unlocked; plans' ``fits_in`` and the Thompson loops call it)
    sliced the entries, and a ``spend`` on another thread appended one before it stored
    ``len(entries)`` as indexed: that entry's Generator fingerprint never entered the index,
    and the same Generator state was then accepted for a second release (same noise)."""
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    ledger.spend(GaussianEvent(20.0), privacy_model="label", rng=np.random.default_rng(1))
    entries = _RacingEntries(ledger._entries)
    ledger._entries = entries

    def other_thread_spends() -> None:
        ledger.spend(GaussianEvent(20.0), privacy_model="label", rng=np.random.default_rng(7))

    entries.race = other_thread_spends
    entries.hook_thread = threading.get_ident()
    ledger.check_privacy_model("label")
    assert len(ledger.history) == 2
    with pytest.raises(ReusedGeneratorError):
        ledger.spend(GaussianEvent(20.0), privacy_model="label", rng=np.random.default_rng(7))
    assert len(ledger.history) == 2
