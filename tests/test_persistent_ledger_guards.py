"""Persistent ledger after the stop-36 audit: durable commits, recomputed totals, a refused open
that stores nothing, damaged files as integrity errors, and plans of binned releases."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from contextlib import closing

import numpy as np
import pytest

from pm_dpgp import plan
from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import GaussianEvent, LaplaceEvent, Ledger
from pm_dpgp.accounting.persistent import (
    LedgerIntegrityError,
    PersistentLedger,
    dataset_fingerprint,
)
from pm_dpgp.mechanisms.label.binning import binned_release, make_bins

FP = dataset_fingerprint("stop-36 audit")


def test_commits_sync_the_directory(tmp_path) -> None:
    """``synchronous = EXTRA`` (3): FULL left the journal's deletion unsynced."""
    ledger = PersistentLedger(tmp_path / "l.db", FP, epsilon=1.0)
    with ledger._transaction(write=False) as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 3


def test_refused_open_with_a_recorded_head_stores_nothing(tmp_path) -> None:
    """The lost file re-opened with ``expected_head`` was refused, but its fresh ledger row was
    committed; a later plain open then spent a second budget (0.9 + 0.9 on a budget of 1)."""
    path = tmp_path / "l.db"
    first = PersistentLedger(path, FP, epsilon=1.0)
    first.spend(GaussianEvent(noise_multiplier=10.0))
    head = first.head_hash
    path.unlink()  # the file is lost
    with pytest.raises(LedgerIntegrityError, match="head hash was recorded"):
        PersistentLedger(path, FP, epsilon=1.0, expected_head=head)
    with pytest.raises(ValueError, match="no ledger is stored"):
        PersistentLedger(path, FP)


def rewrite_stored_entries(path, **fields) -> None:
    """Rewrite fields of every stored entry as an earlier version of the accounting would
    have stored them (the hash chain recomputed, as that version would have written it)."""
    with closing(sqlite3.connect(path)) as conn, conn:
        genesis = conn.execute("SELECT genesis FROM ledgers").fetchone()[0]
        rows = conn.execute("SELECT idx, record FROM entries ORDER BY idx").fetchall()
        prev = genesis.encode()
        for idx, record in rows:
            rec = {**json.loads(record), **fields}
            text = json.dumps(rec, sort_keys=True, separators=(",", ":"))
            new_hash = hashlib.sha256(prev + b"\x00" + text.encode()).hexdigest()
            conn.execute(
                "UPDATE entries SET record = ?, hash = ? WHERE idx = ?", (text, new_hash, idx)
            )
            prev = new_hash.encode()


def test_totals_are_recomputed_and_a_stale_history_warns(tmp_path) -> None:
    path = tmp_path / "l.db"
    ledger = PersistentLedger(path, FP, epsilon=10.0)
    ledger.spend(GaussianEvent(noise_multiplier=4.0))
    ledger.spend(GaussianEvent(noise_multiplier=4.0))
    replay = Ledger(epsilon=10.0)
    for _ in range(2):
        replay.spend(GaussianEvent(noise_multiplier=4.0))
    rewrite_stored_entries(path, cumulative_epsilon=0.01)
    with pytest.warns(PrivacyWarning, match="version that wrote it recorded 0.01"):
        reopened = PersistentLedger(path, FP)
    assert reopened.spent_epsilon == pytest.approx(replay.spent_epsilon, rel=1e-12)
    assert reopened.bound_used == replay.bound_used
    assert json.loads(reopened.export_json())["spent_epsilon"] == pytest.approx(
        replay.spent_epsilon, rel=1e-12
    )


def test_a_history_over_budget_under_current_accounting_warns(tmp_path, monkeypatch) -> None:
    """A file written by a version whose filter counted less (emulated by patching it) opened
    without a word, with 10.8 spent on a budget of 1 (stop-36 audit, a pre-df6fe32 file)."""
    path = tmp_path / "l.db"
    with monkeypatch.context() as m:
        m.setattr(PersistentLedger, "_filter_epsilon", lambda self, totals: 0.0)
        ledger = PersistentLedger(path, FP, epsilon=1.0)
        for _ in range(3):
            ledger.spend(LaplaceEvent(1.0))
    with pytest.warns(PrivacyWarning, match="over budget under this version"):
        reopened = PersistentLedger(path, FP)
    assert not reopened.can_afford(LaplaceEvent(1e6))


def test_a_history_within_budget_opens_silently(tmp_path) -> None:
    path = tmp_path / "l.db"
    PersistentLedger(path, FP, epsilon=10.0).spend(LaplaceEvent(1.0, count=3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        spent = PersistentLedger(path, FP).spent_epsilon
    replay = Ledger(epsilon=10.0)
    replay.spend(LaplaceEvent(1.0, count=3))
    assert spent == replay.spent_epsilon


@pytest.mark.parametrize("damage", ["garbage", "truncate"])
def test_a_damaged_file_is_an_integrity_error(tmp_path, damage) -> None:
    """``sqlite3.DatabaseError`` (malformed image, not a database) escaped as is."""
    path = tmp_path / "l.db"
    ledger = PersistentLedger(path, FP, epsilon=1.0)
    for _ in range(50):
        ledger.spend(GaussianEvent(noise_multiplier=50.0))
    data = path.read_bytes()
    path.write_bytes(b"not a database " * 64 if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(LedgerIntegrityError, match="cannot be read"):
        PersistentLedger(path, FP)


def test_binned_plan_answers_for_a_used_ledger() -> None:
    X = np.linspace(0.0, 10.0, 40)[:, None]
    bins = make_bins(np.linspace(0.0, 10.0, 6))
    p = plan.binned(X, bins, epsilon=0.5, y_bounds=(-1.0, 1.0), secure=False)
    ledger = Ledger(epsilon=1.2)
    assert p.fits_in(ledger)
    ledger.spend(LaplaceEvent(2.0))  # 0.5
    assert p.fits_in(ledger)
    binned_release(
        X, np.sin(X[:, 0]), bins, epsilon=0.5, y_bounds=(-1.0, 1.0), ledger=ledger,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert not p.fits_in(ledger)
    assert p.filter_epsilon_in(ledger) == pytest.approx(1.5)
