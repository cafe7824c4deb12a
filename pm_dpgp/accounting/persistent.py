"""A ledger stored on disk (SQLite), bound to a dataset fingerprint.

``PersistentLedger`` is a ``Ledger`` whose history lives in
an SQLite database (Python's standard ``sqlite3``), so every mechanism works with it unchanged:
they call ``spend`` before drawing noise, and ``spend``
returns only after the spend is **committed**.

What it guarantees (tested in ``tests/test_persistent_ledger.py``; design in
``docs/accounting.md``, "Persistent ledger"):

* **Commit before noise.**  ``spend`` runs ``BEGIN IMMEDIATE`` (SQLite's write lock), re-reads
  the whole history of the dataset inside the transaction, decides with the privacy filter,
  inserts the row and commits; only then does it return, so a mechanism draws noise only for a
  spend that is already durable.  A process killed after the commit leaves the spend recorded; a
  process killed before it leaves nothing, and no noise was drawn.
* **No overspending across processes.**  The write lock serialises concurrent spends on the same
  database file; each decision sees every committed spend of every process.
* **Restart round trip.**  Reopening restores the history, the budget, δ, orders and filter; a
  different budget (or δ, orders, filter) for the same dataset fingerprint is refused.
* **Tamper evidence.**  Each row stores ``hash = H(previous hash ‖ canonical JSON of the row)``
  with SHA-256 (or HMAC-SHA-256 under a secret ``key``), starting from a hash of the ledger's
  parameters.  The chain is verified on open, on every re-read and by ``verify``; an edited,
  inserted or reordered row raises ``LedgerIntegrityError``.  Without a key, someone with
  write access could recompute the whole chain, and deleting trailing rows, restoring an older
  copy of the file or deleting it is only detectable against a ``head_hash`` recorded elsewhere
  (``expected_head=``, ``check_head``), key or not: such a file gives back the budget spent
  since (stop-32 audit).
* **Only a fingerprint is stored** (a SHA-256 hex digest, see ``dataset_fingerprint``), never
  a dataset value.
* **Privacy model and Generator fingerprints** (issue 15).  Each row records the entry's privacy
  model, neighbouring relation and, for simulation-mode releases, the salted fingerprint of the
  Generator state (``generator_fingerprint``).  The salt (32
  random bytes per dataset) is kept in the database's ``salts`` table and never exported, so a
  fingerprint in an export cannot be tested against guessed seeds.  Since stop 31 the genesis
  hash covers a one-way id of the salt (``salt_id``), so deleting or replacing the salt is
  detected like an edit of the budget; for ledgers created earlier, a missing salt is refused
  when any row holds a salted fingerprint (a replaced one is not detected there).
  Rows written before these fields existed read as ``None`` (no model, no fingerprint).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pm_dpgp._validation import PrivacyWarning, check_delta, check_epsilon, check_positive
from pm_dpgp.accounting.events import (
    DEFAULT_ORDERS,
    PrivacyEvent,
    event_from_metadata,
    json_float,
)
from pm_dpgp.accounting.ledger import (
    BUDGET_RTOL,
    FilterName,
    Ledger,
    LedgerEntry,
    _total_model,
    _Totals,
)

__all__ = [
    "LedgerIntegrityError",
    "LedgerMismatchError",
    "PersistentLedger",
    "dataset_fingerprint",
]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _salt_id(salt: bytes) -> str:
    """One-way id of the Generator-fingerprint salt, covered by the genesis hash (stop 31): an
    edit or deletion of the ``salts`` row is then detected like an edit of the budget."""
    return hashlib.sha256(b"pm_dpgp salt id v1\x00" + salt).hexdigest()


_SCHEMA_VERSION = 1
_UNSET: Any = object()


_RESTORE_CAVEAT = (
    " Restore only the latest trusted copy: an older copy gives back the budget spent since it "
    "was made (a new handle cannot tell; check it with PersistentLedger(..., expected_head=) "
    "or check_head against a head_hash recorded elsewhere)."
)


class LedgerIntegrityError(RuntimeError):
    """The stored history fails its hash-chain check (it was edited outside the ledger).

    Its message ends with the caveat on restoring copies (stop-32 audit: the message advised
    "restore from a trusted copy", and restoring an older one silently refunded 27 releases).
    """

    def __init__(self, message: str) -> None:
        if "trusted copy" in message and _RESTORE_CAVEAT not in message:
            message += _RESTORE_CAVEAT
        super().__init__(message)


class LedgerMismatchError(ValueError):
    """A stored ledger exists for this dataset with a different budget, δ, orders or filter."""


def dataset_fingerprint(identifier: str | bytes) -> str:
    """SHA-256 hex digest of a public dataset identifier, e.g. ``"howell-kung-women-v1"``.

    The identifier is hashed with a domain-separation prefix, so the stored fingerprint does not
    reveal it.  Use a *name or version string* of the dataset, not its values: hashing
    low-entropy private data could be inverted by trying candidates.
    """
    if isinstance(identifier, str):
        identifier = identifier.encode("utf-8")
    if not isinstance(identifier, bytes) or not identifier:
        raise ValueError("the dataset identifier must be a non-empty str or bytes.")
    return hashlib.sha256(b"pm_dpgp dataset fingerprint v1\x00" + identifier).hexdigest()


def _check_fingerprint(fingerprint: Any) -> str:
    # fullmatch: ``$`` in ``match`` also accepts a trailing newline, which opened a second,
    # fresh budget for the same dataset (stop-30 ledger audit)
    if not isinstance(fingerprint, str) or not _HEX64.fullmatch(fingerprint):
        raise ValueError(
            "dataset_fingerprint must be a SHA-256 hex digest (64 lowercase hex characters); "
            "compute one with pm_dpgp.accounting.dataset_fingerprint('<dataset name>')."
        )
    return fingerprint


def _canonical(obj: Any) -> bytes:
    """Deterministic JSON encoding (sorted keys, no whitespace, strict: no NaN)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


class PersistentLedger(Ledger):
    """A ``Ledger`` persisted in SQLite and bound to one dataset fingerprint.

    Parameters
    ----------
    path
        The SQLite database file (created if missing).  Several datasets may share one file.
    dataset_fingerprint
        SHA-256 hex digest identifying the dataset (``dataset_fingerprint``).
    epsilon, delta, orders, filter
        As for ``Ledger``.  For a new ledger ``epsilon`` must be given (``None``: record
        only).  When the database already holds this dataset, leaving them out restores the
        stored values, and giving different ones raises ``LedgerMismatchError``.
    key
        Optional secret for HMAC-SHA-256 chaining (then the chain cannot be recomputed by
        someone without the key).  The same key must be given on every open.
    timeout
        Seconds to wait for another process's write lock before ``sqlite3.OperationalError``.
    allow_mixed_privacy_models
        As for ``Ledger``; an option of this handle, not stored: a handle opened without
        it refuses a second privacy model even if the stored history already mixes them.
    expected_head
        A ``head_hash`` recorded earlier (outside this file): the file must contain it, or
        ``LedgerIntegrityError`` (``check_head``).  The one defence against a restored older
        copy, which is a valid chain without the spends made since.

    Notes
    -----
    The object holds no open connection (one per operation), so it survives ``fork`` and can be
    pickled; a pickle carries the ``key``, so do not share pickles of a keyed ledger.

    Raises
    ------
    LedgerMismatchError, LedgerIntegrityError, ValueError
        See the module docstring.
    """

    #: whether the genesis hash covers ``salt_id`` (ledgers created since stop 31)
    _salt_bound: bool = False

    def __init__(
        self,
        path: str | PathLike[str],
        dataset_fingerprint: str,
        epsilon: float | None = _UNSET,
        delta: float = _UNSET,
        orders: ArrayLike = _UNSET,
        *,
        filter: FilterName = _UNSET,  # noqa: A002
        key: bytes | None = None,
        timeout: float = 60.0,
        allow_mixed_privacy_models: bool = False,
        expected_head: str | None = None,
    ) -> None:
        # absolute: a relative path re-resolved after os.chdir would write the next spend
        # into another file (stop-26 audit)
        self._path = Path(path).absolute()
        if not self._path.parent.is_dir() or self._path.is_dir():
            raise ValueError(
                f"path must be a database file in an existing directory, got {str(path)!r}."
            )
        self._fingerprint = _check_fingerprint(dataset_fingerprint)
        if key is not None and (not isinstance(key, bytes) or not key):
            raise ValueError("key must be non-empty bytes (or None).")
        self._key = key
        self._timeout = check_positive(timeout, "timeout")
        given = {"epsilon": epsilon, "delta": delta, "orders": orders, "filter": filter}
        with self._transaction(write=True) as conn:
            row = conn.execute(
                "SELECT epsilon, delta, orders, filter, genesis FROM ledgers WHERE fingerprint = ?",
                (self._fingerprint,),
            ).fetchone()
            salt_row = conn.execute(
                "SELECT salt FROM salts WHERE fingerprint = ?", (self._fingerprint,)
            ).fetchone()
            if row is None:
                if epsilon is _UNSET:
                    raise ValueError(
                        "no ledger is stored for this dataset yet: give its budget "
                        "(epsilon=..., or epsilon=None to record only)."
                    )
                super().__init__(
                    epsilon,
                    1e-5 if delta is _UNSET else delta,
                    DEFAULT_ORDERS if orders is _UNSET else orders,
                    filter="auto" if filter is _UNSET else filter,
                    allow_mixed_privacy_models=allow_mixed_privacy_models,
                )
                if salt_row is not None:  # left by a deleted ledger row: reuse, bind below
                    self._salt = bytes(salt_row[0])
                self._salt_bound = True  # the genesis hash covers the salt's id (stop 31)
                self._genesis = self._hash(b"", _canonical(self._params()))
                if expected_head is not None and expected_head != self._genesis:
                    # refused inside the transaction, so nothing is stored: the recorded head
                    # belongs to a ledger this file no longer holds (stop-36 audit: the refused
                    # open committed a fresh ledger, which a later open then used)
                    raise LedgerIntegrityError(
                        "no ledger is stored for this dataset, but a head hash was recorded: "
                        "the file was lost, replaced or re-created, and the spends recorded "
                        "are missing. Do not release from it; find the latest trusted copy "
                        "(nothing was stored)."
                    )
                conn.execute(
                    "INSERT INTO ledgers (fingerprint, epsilon, delta, orders, filter, genesis) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        self._fingerprint,
                        self._budget,
                        self._delta,
                        json.dumps(self._orders.tolist()),
                        self._filter,
                        self._genesis,
                    ),
                )
            else:
                s_eps, s_delta, s_orders, s_filter, genesis = row
                super().__init__(
                    s_eps,
                    s_delta,
                    json.loads(s_orders),
                    filter=s_filter,
                    allow_mixed_privacy_models=allow_mixed_privacy_models,
                )
                self._genesis = genesis
                if salt_row is not None:
                    self._salt = bytes(salt_row[0])
                self._salt_bound = self._bind_salt(conn, genesis, salt_row is not None)
                self._check_same(given)
            if salt_row is None:  # a new ledger, or one stored before issue 15
                conn.execute(
                    "INSERT INTO salts (fingerprint, salt) VALUES (?, ?)",
                    (self._fingerprint, self._salt),
                )
        self._head = self._genesis
        self._refresh(full_count=True)  # reads and verifies the stored history
        if expected_head is not None:
            self.check_head(expected_head)
        self._warn_recomputed()

    def _warn_recomputed(self) -> None:
        """Warn when this version's accounting of the stored events differs from what the
        writing version recorded, or puts the history over budget (stop-36 audit)."""
        if not self._entries:
            return
        # the totals this open has just read and verified (no further read of the file)
        stored = self._entries[-1].cumulative_epsilon
        now = self._spent()[0]
        if not math.isclose(stored, now, rel_tol=1e-9, abs_tol=1e-12):
            warnings.warn(
                f"the stored history composes to epsilon={now:.6g} under this version's "
                f"accounting, while the version that wrote it recorded {stored:.6g}; the "
                "per-entry values in history are as recorded, the totals and every decision "
                "use this version's.",
                PrivacyWarning,
                stacklevel=3,
            )
        budget = self._budget
        counted = self._filter_epsilon(self._totals)
        if budget is not None and counted > budget * (1.0 + BUDGET_RTOL):
            warnings.warn(
                f"the stored history is over budget under this version's accounting: the "
                f"{self._filter} filter counts epsilon={counted:.6g} > budget "
                f"{budget:.6g} (written with looser bounds by an earlier version). Nothing "
                "more can be spent on it.",
                PrivacyWarning,
                stacklevel=3,
            )

    # -- parameters ---------------------------------------------------------------------------
    def _params(self) -> dict[str, Any]:
        params = {
            "schema": _SCHEMA_VERSION,
            "fingerprint": self._fingerprint,
            "epsilon": self._budget,
            "delta": self._delta,
            "orders": self._orders.tolist(),
            "filter": self._filter,
        }
        if self._salt_bound:
            params["salt_id"] = _salt_id(self._salt)
        return params

    def _bind_salt(self, conn: sqlite3.Connection, genesis: str, salt_stored: bool) -> bool:
        """Whether the stored ``genesis`` covers the Generator-fingerprint salt (ledgers created
        since stop 31) or not (earlier ones); raise ``LedgerIntegrityError`` if it matches
        neither, or if an earlier ledger's salt is gone though its rows hold salted
        fingerprints (deleting the salt would re-arm every reused seed)."""
        for bound in (True, False):
            self._salt_bound = bound
            if self._hash(b"", _canonical(self._params())) == genesis:
                break
        else:
            raise LedgerIntegrityError(
                "the stored ledger parameters, or the Generator-fingerprint salt bound to them, "
                "do not match their hash (edited outside the ledger, the salts row deleted or "
                "replaced, or opened with a different key): do not release from it; restore "
                "the database from a trusted copy."
            )
        if not bound and not salt_stored:
            records = conn.execute(
                "SELECT record FROM entries WHERE fingerprint = ?", (self._fingerprint,)
            ).fetchall()
            if any(json.loads(r).get("generator_fingerprint") for (r,) in records):
                raise LedgerIntegrityError(
                    "the salts row of this ledger is missing, but its rows hold salted "
                    "Generator fingerprints: without the salt a reused seed would go unnoticed. "
                    "Restore the database from a trusted copy."
                )
        return bound

    def _check_same(self, given: dict[str, Any]) -> None:
        stored: dict[str, Any] = {
            "epsilon": self._budget,
            "delta": self._delta,
            "orders": self._orders,
            "filter": self._filter,
        }
        for name, value in given.items():
            if value is _UNSET:
                continue
            if name == "epsilon" and value is not None:
                value = check_epsilon(value)  # True == 1.0 matched a stored budget of 1 (stop 40)
            elif name == "delta":
                value = check_delta(value)
            if name == "orders":
                same = np.array_equal(np.unique(np.asarray(value, dtype=float)), stored[name])
            else:
                same = value == stored[name]
            if not same:
                raise LedgerMismatchError(
                    f"a ledger for this dataset is already stored in {self._path} with "
                    f"{name}={stored[name] if name != 'orders' else '<stored grid>'}; it cannot "
                    f"be reopened with {name}={value!r}. The budget is fixed when the ledger is "
                    "created; open it without these arguments to restore the stored values."
                )

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def dataset_fingerprint(self) -> str:
        """The dataset fingerprint this ledger is bound to."""
        return self._fingerprint

    @property
    def head_hash(self) -> str:
        """Hash of the last row (of the parameters for an empty ledger): record it elsewhere to
        detect truncation or a restored older copy (``check_head``, ``expected_head=``)."""
        self._refresh()
        return self._head

    def check_head(self, head_hash: str) -> None:
        """Refuse a file that does not contain a ``head_hash`` recorded earlier.

        A file restored from an older copy, truncated at the end, or deleted and re-created is
        a valid chain that lacks the rows spent since; only a hash recorded elsewhere (e.g. in
        the release metadata or a notebook's output) tells.  The recorded head must be this
        ledger's genesis or the hash of one of its stored rows.

        Raises
        ------
        LedgerIntegrityError
            If the recorded state is not in the stored chain: spends are missing.
        """
        if not isinstance(head_hash, str):
            raise TypeError(f"head_hash must be a str, got {type(head_hash).__name__}.")
        self._refresh(full_count=True)
        if head_hash == self._genesis:
            return
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT idx FROM entries WHERE fingerprint = ? AND hash = ?",
                (self._fingerprint, head_hash),
            ).fetchone()
        if row is None or row[0] >= len(self._entries):
            raise LedgerIntegrityError(
                f"the database holds {len(self._entries)} rows for this dataset, none with the "
                "recorded head hash: it is older than the recorded state (restored from an "
                "earlier copy, truncated, or re-created), and the spends since are missing. Do "
                "not release from it; find the latest trusted copy."
            )

    # -- SQLite -------------------------------------------------------------------------------
    def _check_single_name(self, create: bool = True) -> None:
        """Create the file readable by its owner only, and refuse a file with hard links.

        SQLite names its rollback journal after the path it was opened by.  Through a second
        hard link (another name of the same file) a process writes another journal, so a
        crash inside one process's commit left a journal that the next open by the first name
        rolled back over the other's committed spends (stop-34 audit: three releases on a
        budget of two).  A symbolic link resolves to one name and is fine.  The file holds the
        salt next to the salted Generator fingerprints, from which a simulation-mode seed can
        be searched for (stop-34 audit: seed 31337 in 0.8 s), so it is created with mode 0600.
        Checked before every transaction: a link made while a handle is open is refused too.
        A file bind mount (``docker -v /host/ledger.db:/data/ledger.db``) is a second name
        with one link: refused through either name where ``/proc/self/mountinfo`` shows it
        (stop-43 audit: four releases drew noise on a budget of three). Read-only operations
        (``create=False``) do not create a missing file.
        """
        if create:
            try:
                fd = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                pass
            else:
                os.close(fd)
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:  # a symbolic link to a missing file (O_EXCL does not follow)
            if not create:  # deleted under an open handle
                self._integrity_failure = "the ledger file was deleted"
                raise LedgerIntegrityError(
                    f"the ledger file {str(self._path)!r} was deleted while this handle was "
                    "open. Do not release from it; restore it from a trusted copy."
                ) from None
            raise ValueError(
                f"the ledger path {str(self._path)!r} is a symbolic link to a missing file; "
                "point it at an existing file or give the target path."
            ) from None
        links = stat.st_nlink
        mounted = _file_mounts(os.path.realpath(self._path), stat)
        if mounted:
            raise ValueError(
                f"the ledger file {str(self._path)!r} is bind-mounted as a file (mount point "
                f"{mounted[0]!r}): SQLite keeps one crash journal per file name, so a crash "
                "while one name commits can undo spends made through another (budget "
                "overspent). Mount the directory that holds the ledger, not the file; nothing "
                "was recorded."
            )
        if links > 1:
            raise ValueError(
                f"the ledger file {str(self._path)!r} has {links} hard links: SQLite keeps one "
                "crash journal per file name, so a crash while one name commits can undo spends "
                "made through another (budget overspent). Keep one name (a symbolic link is "
                "fine) and remove the other links; nothing was recorded."
            )

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """A fresh connection in one transaction: ``BEGIN IMMEDIATE`` (write lock) or
        ``BEGIN`` (read snapshot); committed on success, rolled back on any exception.

        A new connection per operation keeps the ledger safe to use after ``fork`` and to
        pickle; opening one costs well under a millisecond.
        """
        self._check_single_name(create=write)
        try:
            with self._connection(write=write) as conn:
                yield conn
        except sqlite3.DatabaseError as err:
            if isinstance(err, sqlite3.OperationalError) and "no such table" in str(err):
                # the file was deleted (or replaced by another database) under this handle
                # (stop-43 audit: reads raised a bare OperationalError and re-created it)
                self._integrity_failure = "the ledger file lost its tables (deleted or replaced)"
                raise LedgerIntegrityError(
                    f"the ledger file {str(self._path)!r} holds no ledger tables: it was "
                    "deleted or replaced while this handle was open. Do not release from it; "
                    "restore it from a trusted copy."
                ) from None
            if type(err) is not sqlite3.DatabaseError:  # locked (OperationalError) etc. as is
                raise
            # "file is not a database", "database disk image is malformed": a damaged file
            raise LedgerIntegrityError(
                f"the ledger file cannot be read ({err}): it is damaged or not a ledger. Do not "
                "release from it; restore it from a trusted copy (and check its head hash)."
            ) from None

    @contextmanager
    def _connection(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """The connection and transaction of ``_transaction``."""
        # a read opens the file read-write without creating it: deleted between the check
        # and here, a plain connect re-created it with the umask's mode (stop-43 review)
        target = self._path if write else f"{self._path.as_uri()}?mode=rw"
        conn = sqlite3.connect(target, timeout=self._timeout, isolation_level=None, uri=not write)
        try:
            # EXTRA: also sync the directory after the journal's deletion, the commit itself;
            # with FULL a power loss right after a spend could bring the journal back and roll
            # the spend back on the next open, after its noise was released (stop-36 audit)
            conn.execute("PRAGMA synchronous = EXTRA")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                # set from outside (a database browser): committed spends then stay in the
                # -wal file, so a copy of the ledger file taken after a spend lacks it, and
                # the -shm file is named after the path (stop-43 audit)
                raise LedgerIntegrityError(
                    f"the ledger file {str(self._path)!r} is in WAL journal mode, set from "
                    "outside: a copy of the file can then lack committed spends. Close every "
                    "other program using it and run  sqlite3 <file> 'PRAGMA journal_mode=DELETE'"
                    "  (nothing was recorded)."
                )
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                if write:
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS ledgers (fingerprint TEXT PRIMARY KEY, "
                        "epsilon REAL, delta REAL NOT NULL, orders TEXT NOT NULL, "
                        "filter TEXT NOT NULL, genesis TEXT NOT NULL)"
                    )
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS entries (fingerprint TEXT NOT NULL, "
                        "idx INTEGER NOT NULL, record TEXT NOT NULL, hash TEXT NOT NULL, "
                        "PRIMARY KEY (fingerprint, idx))"
                    )
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS salts (fingerprint TEXT PRIMARY KEY, "
                        "salt BLOB NOT NULL)"
                    )
                yield conn
            except BaseException:
                # SQLite has already rolled back after SQLITE_FULL / IOERR / NOMEM; a second
                # ROLLBACK raised "no transaction is active" and hid the real error (stop-43
                # audit: a full disk read "cannot rollback")
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _hash(self, prev: bytes | str, payload: bytes) -> str:
        prev_b = prev.encode() if isinstance(prev, str) else prev
        msg = prev_b + b"\x00" + payload
        if self._key is not None:
            return hmac.new(self._key, msg, hashlib.sha256).hexdigest()
        return hashlib.sha256(msg).hexdigest()

    @staticmethod
    def _record(entry: LedgerEntry) -> dict[str, Any]:
        return entry.to_metadata()

    def _entry_from_record(self, record: dict[str, Any]) -> LedgerEntry:
        return LedgerEntry(
            index=int(record["index"]),
            label=str(record["label"]),
            event=event_from_metadata(record["event"]),
            time=str(record["time"]),
            epsilon=float(record["epsilon"]),
            cumulative_epsilon=float(record["cumulative_epsilon"]),
            bound=str(record["bound"]),
            filter_epsilon=float(record["filter_epsilon"]),
            # absent from rows stored before issue 15: read as "not recorded"
            privacy_model=_optional_str(record.get("privacy_model")),
            neighbouring_relation=_optional_str(record.get("neighbouring_relation")),
            generator_fingerprint=_optional_str(record.get("generator_fingerprint")),
        )

    def _sync(self, conn: sqlite3.Connection, full_count: bool = True) -> None:
        """Append the rows committed since the last read, verifying their chain links.

        Also checks that the file still holds this ledger (its parameters row with the same
        genesis hash, and the row this handle read last with the hash it read), and, with
        ``full_count``, that the index scan returned every stored row of the dataset (a
        full-table count, O(rows in the file): done on open, by ``verify`` and inside every
        spend's write transaction, not on read-only refreshes such as ``can_afford``): a
        replaced, truncated or index-damaged file raises instead of showing a shorter history.
        Once a
        check has failed, the handle refuses every later read or spend (no release from a
        history found damaged, even if a later read would pass).
        """
        failed = self.__dict__.get("_integrity_failure")
        if failed is not None:
            raise LedgerIntegrityError(failed)
        try:
            self._sync_checked(conn, full_count)
        except LedgerIntegrityError as err:
            self._integrity_failure = f"{err} (detected earlier by this handle)"
            raise

    def _sync_checked(self, conn: sqlite3.Connection, full_count: bool) -> None:
        stored = conn.execute(
            "SELECT genesis FROM ledgers WHERE fingerprint = ?", (self._fingerprint,)
        ).fetchone()
        if stored is None or stored[0] != self._genesis:
            raise LedgerIntegrityError(
                "the database file no longer holds this ledger's parameters (deleted, replaced "
                "or a different file): do not release from it; restore it from a trusted copy."
            )
        if self._entries:
            last = conn.execute(
                "SELECT hash FROM entries WHERE fingerprint = ? AND idx = ?",
                (self._fingerprint, len(self._entries) - 1),
            ).fetchone()
            if last is None or last[0] != self._head:
                raise LedgerIntegrityError(
                    "rows this handle has already read are missing or changed in the file "
                    "(truncated or replaced): do not release from it; restore it from a "
                    "trusted copy."
                )
        n_stored = (
            conn.execute(
                "SELECT COUNT(*) FROM entries NOT INDEXED WHERE fingerprint = ?",
                (self._fingerprint,),
            ).fetchone()[0]
            if full_count
            else None
        )
        rows = conn.execute(
            "SELECT idx, record, hash FROM entries WHERE fingerprint = ? AND idx >= ? ORDER BY idx",
            (self._fingerprint, len(self._entries)),
        ).fetchall()
        totals, entries, head = self._totals, list(self._entries), self._head
        for idx, record, stored_hash in rows:
            if idx != len(entries) or self._hash(head, record.encode()) != stored_hash:
                raise LedgerIntegrityError(
                    f"the stored history of this dataset fails its hash-chain check at row "
                    f"{idx}: it was edited outside the ledger. Do not release from it; restore "
                    "the database from a trusted copy."
                )
            try:
                entry = self._entry_from_record(json.loads(record))
            except (ValueError, KeyError, TypeError) as err:
                raise LedgerIntegrityError(f"row {idx} cannot be decoded: {err}") from None
            if entry.index != idx:
                raise LedgerIntegrityError(f"row {idx} records index {entry.index}.")
            totals = totals.add(entry.event, self._orders)
            entries.append(entry)
            head = stored_hash
        if n_stored is not None and len(entries) != n_stored:
            raise LedgerIntegrityError(
                f"the file stores {n_stored} rows for this dataset but its index returned "
                f"{len(entries)}: the database is damaged; restore it from a trusted copy."
            )
        self._totals, self._entries, self._head = totals, entries, head

    def _refresh(self, full_count: bool = False) -> None:
        if not hasattr(self, "_head"):  # during Ledger.__init__
            return
        with self._lock, self._transaction(write=False) as conn:
            self._sync(conn, full_count)

    def verify(self) -> int:
        """Re-verify the whole stored chain from the parameters' hash; return the row count.

        Raises
        ------
        LedgerIntegrityError
            If any row (or the parameters) was edited, inserted, removed in the middle or
            reordered.
        """
        with self._lock:
            known = (self._totals, self._entries, self._head)
            self._totals = _Totals.empty(self._orders.size)
            self._entries, self._head = [], self._genesis
            try:
                self._verify_from_genesis(known)
            except BaseException as err:
                # keep what this handle already knew: a shorter stored chain must not make
                # it forget spends it has read (stop-26 audit); a failed check poisons it
                self._totals, self._entries, self._head = known
                if isinstance(err, LedgerIntegrityError):
                    self._integrity_failure = f"{err} (detected earlier by this handle)"
                raise
            return len(self._entries)

    def _verify_from_genesis(self, known: tuple[_Totals, list[LedgerEntry], str]) -> None:
        """``verify``'s re-read; the chain must pass through the head this handle knew."""
        _, known_entries, known_head = known
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT epsilon, delta, orders, filter FROM ledgers WHERE fingerprint = ?",
                (self._fingerprint,),
            ).fetchone()
            if row is None:
                raise LedgerIntegrityError(
                    "the database file no longer holds this ledger's parameters."
                )
            stored = {
                "schema": _SCHEMA_VERSION,
                "fingerprint": self._fingerprint,
                "epsilon": row[0],
                "delta": row[1],
                "orders": json.loads(row[2]),
                "filter": row[3],
            }
            salt = conn.execute(
                "SELECT salt FROM salts WHERE fingerprint = ?", (self._fingerprint,)
            ).fetchone()
            if self._salt_bound:
                stored["salt_id"] = _salt_id(bytes(salt[0])) if salt is not None else None
            if self._hash(b"", _canonical(stored)) != self._genesis:
                raise LedgerIntegrityError(
                    "the stored ledger parameters (or the salt bound to them) were edited."
                )
            if salt is None or bytes(salt[0]) != self._salt:
                raise LedgerIntegrityError(
                    "the Generator-fingerprint salt of this ledger was deleted or replaced in "
                    "the database file: do not release from it; restore it from a trusted copy."
                )
            self._sync(conn)
            n_known = len(known_entries)
            if n_known:  # the re-read chain must pass through the head this handle knew
                at = conn.execute(
                    "SELECT hash FROM entries WHERE fingerprint = ? AND idx = ?",
                    (self._fingerprint, n_known - 1),
                ).fetchone()
                if at is None or at[0] != known_head:
                    raise LedgerIntegrityError(
                        f"the stored chain ({len(self._entries)} rows) does not contain the "
                        f"{n_known} rows this handle has read (truncated or replaced): do not "
                        "release from it; restore the database from a trusted copy."
                    )

    # -- spending -----------------------------------------------------------------------------
    def spend(
        self,
        event: PrivacyEvent,
        label: str | None = None,
        *,
        privacy_model: str | None = None,
        neighbouring_relation: str | None = None,
        rng: np.random.Generator | None = None,
    ) -> LedgerEntry:
        """Decide and record ``event`` in one SQLite write transaction, committed on return.

        Inside ``BEGIN IMMEDIATE`` the history is re-read (spends of other processes included)
        and verified, the filter decides, and the row is inserted and committed.  A refusal
        (``BudgetExceededError``) or any error rolls back:
        nothing is recorded.  The provenance checks (reused Generator state, a second privacy
        model) also see every committed row.  See ``Ledger.spend``.
        """
        event = self._check_event(event)
        label = self._label(event, label)
        _check_storable(event)
        fingerprint = self._provenance(privacy_model, neighbouring_relation, rng)
        with self._lock:
            with self._transaction(write=True) as conn:
                self._sync(conn)
                new, entry = self._decide(
                    event, label, privacy_model, neighbouring_relation, fingerprint
                )
                record = _canonical(self._record(entry)).decode()
                digest = self._hash(self._head, record.encode())
                conn.execute(
                    "INSERT INTO entries (fingerprint, idx, record, hash) VALUES (?, ?, ?, ?)",
                    (self._fingerprint, entry.index, record, digest),
                )
                # read the row back inside the transaction: a file altered to drop the insert
                # (e.g. a trigger) must not report a charge that is not stored (stop-30 audit)
                stored = conn.execute(
                    "SELECT hash FROM entries WHERE fingerprint = ? AND idx = ?",
                    (self._fingerprint, entry.index),
                ).fetchall()
                if stored != [(digest,)]:
                    raise LedgerIntegrityError(
                        "the ledger file did not store this entry (it was altered outside "
                        "pm_dpgp); nothing was recorded and no noise may be drawn."
                    )
            # committed when the transaction block exited; only now update the memory state
            self._totals, self._head = new, digest
            self._entries = [*self._entries, entry]
        return entry

    # -- export -------------------------------------------------------------------------------
    def export_json(self, path: str | PathLike[str] | None = None) -> str:
        """The parameters, every row with its hash, and the head hash as strict JSON.

        Written to ``path`` if given; always returned.  Contains only the fingerprint, the
        budget and the events' parameters, never a dataset value.
        """
        self.verify()
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                "SELECT record, hash FROM entries WHERE fingerprint = ? ORDER BY idx",
                (self._fingerprint,),
            ).fetchall()
        doc = {
            "type": "PersistentLedger",
            "parameters": {
                **self._params(),
                "epsilon": None if self._budget is None else json_float(self._budget),
            },
            "hash": "hmac-sha256" if self._key is not None else "sha256",
            "genesis": self._genesis,
            "head_hash": self._head,
            "entries": [{"record": json.loads(r), "hash": h} for r, h in rows],
            "filter_epsilon": json_float(self._filter_epsilon(self._totals)),
            "privacy_model": _total_model(self._entries),
            "privacy_model_statement": self._model_statement(),
            # this version's composition of the stored events (each entry keeps its own
            # recorded values): stop-36 audit
            "spent_epsilon": json_float(self._spent()[0]),
        }
        text = json.dumps(doc, indent=1, allow_nan=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def __repr__(self) -> str:
        if self.__dict__.get("_integrity_failure") is not None:
            return f"PersistentLedger(<integrity check failed>, path={str(self._path)!r})"
        try:
            return f"Persistent{super().__repr__()[:-1]}, path={str(self._path)!r})"
        except ValueError as err:  # e.g. the file gained a hard link: repr must not raise
            return f"PersistentLedger(<unreadable: {err}>, path={str(self._path)!r})"


def _unescape_mount(field: str) -> str:
    """A path of ``/proc/self/mountinfo`` with its octal escapes (``\\040`` a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mount_table() -> list[str]:
    """The lines of ``/proc/self/mountinfo`` (Linux), else none."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            return table.read().splitlines()
    except OSError:
        return []


def _file_mounts(real_path: str, stat: os.stat_result) -> list[str]:
    """Mount points (Linux ``/proc/self/mountinfo``) that are this file under another name or
    this very path: a file bind mount.  Empty where the table is not available.

    A line is ``id parent major:minor root mount_point …``; a file bind mount has the file's
    path in its filesystem as ``root``.  The path itself listed as a mount point is one;
    otherwise a mount point on the same device whose ``root`` has the file's name is checked
    with ``os.stat`` (same inode).
    """
    lines = _mount_table()
    device = f"{os.major(stat.st_dev)}:{os.minor(stat.st_dev)}"
    name = os.path.basename(real_path)
    found = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        root, mount_point = _unescape_mount(fields[3]), _unescape_mount(fields[4])
        if mount_point == real_path:
            found.append(mount_point)
        elif fields[2] == device and root != "/" and os.path.basename(root) == name:
            try:
                other = os.stat(mount_point)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (stat.st_dev, stat.st_ino):
                found.append(mount_point)
    return found


def _check_storable(event: PrivacyEvent) -> None:
    """Refuse an event that could be committed but not read back (before anything is stored).

    A row that ``event_from_metadata`` cannot rebuild would make every later open of the
    ledger fail (stop-26 audit: a user subclass of ``GaussianEvent`` was committed, then the
    file could not be opened).  The rebuilt event must be of the same type with the same
    metadata (what the row stores).
    """
    try:
        rebuilt = event_from_metadata(event.to_metadata())
    except (ValueError, KeyError, TypeError) as err:
        raise TypeError(
            f"a PersistentLedger stores only the package's own event types; "
            f"{type(event).__name__} cannot be stored and read back ({err}). Nothing was "
            "recorded; spend the built-in event it is made of."
        ) from None
    if type(rebuilt) is not type(event) or rebuilt.to_metadata() != event.to_metadata():
        raise TypeError(
            f"a PersistentLedger stores only the package's own event types; "
            f"{type(event).__name__} does not read back as itself. Nothing was recorded."
        )
