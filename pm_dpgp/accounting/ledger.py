"""The privacy ledger: one object that composes every release made from one dataset.

A mechanism builds a ``privacy event <pm_dpgp.accounting.events>`` describing its cost and
calls ``Ledger.spend`` *before* drawing any noise.  If the total would exceed the budget,
``BudgetExceededError`` is raised, nothing is recorded and no noise is drawn.

How the total ε at δ is computed
--------------------------------
``Ledger.epsilon(delta)`` is the minimum of the following bounds.  Each is a valid (ε, δ)-DP
guarantee for the whole (adaptive) sequence of releases on its own, hence so is their minimum:
the mechanism is (ε₁, δ)-DP and (ε₂, δ)-DP, so it is (min(ε₁, ε₂), δ)-DP.

``"rdp"``
    Sum the RDP curves of all RDP-capable events on the order grid (Mironov 2017, Prop. 1),
    convert at δ′ = δ − Σδ_approx with ``dp_accounting.rdp.compute_epsilon`` (Canonne, Kamath
    & Steinke 2020, Prop. 12; Asoodeh et al. 2021), and add Σε_approx of the
    ``ApproxDpEvent``s (basic composition; see ``docs/accounting.md`` for why interleaving
    is allowed).
``"gdp"``
    Only when there is at least one ``GaussianEvent`` and every event is a Gaussian, pure
    or approximate one (no curve, zCDP or repeat-and-select event): the
    Gaussian events compose exactly to μ-GDP with μ = √(Σ count_i / z_i²) (Dong, Roth & Su 2019,
    Cor. 3.3), converted exactly at δ′ = δ − Σδ_approx (Balle & Wang 2018, Thm. 8); pure and
    approximate events are added by basic composition.  With only Gaussian events this is the
    exact, tight ε.
``"basic"``
    Basic composition of each event's own best bound (Dwork et al. 2006; Dwork, Rothblum & Vadhan
    2010): approximate events at their own δ_i, the others at equal shares of the remaining δ.
    Only evaluated for up to 64 events (beyond that it is rarely competitive and costs one root
    solve per event); skipping a bound never affects validity, only tightness.

The name of the bound that attained the minimum at the ledger's δ is ``Ledger.bound_used``.

Adaptivity.  All three compositions hold when each release is chosen after seeing the earlier
ones (RDP: Mironov 2017, Prop. 1; GDP: Dong, Roth & Su 2019, Thm. 3.2; basic: Dwork, Rothblum &
Vadhan 2010), provided each event's parameters (noise multiplier, ε, δ, curve) bound the
mechanism for every possible earlier output.  See ``docs/accounting.md`` for the fully adaptive
case (parameters themselves chosen from earlier outputs).

The refusal rule is a privacy filter
--------------------------------------
Whether ``Ledger.spend`` accepts an event is decided by a *privacy filter*, not by the
minimum above (a minimum over bounds or Rényi orders taken after adaptively chosen events is not
what any filter theorem proves).  The filter is one of (``filter=`` argument):

``"gdp"``
    Gaussian events only; accept while ε_GDP(√Σμ_i², δ) ≤ budget (fully adaptive GDP filter:
    Smith & Thakurta 2022; Whitehouse, Ramdas, Rogers & Wu 2023).
``"zcdp"``
    zCDP and Gaussian events (each ρ_i-zCDP, a Gaussian event with ρ = μ²/2); accept while
    min_α [α·Σρ_i + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)] ≤ budget over the grid.  Every event is
    RDP at *every* order with a curve linear in α, so the condition is Σρ_i ≤ ρ_B for the public
    ρ_B that converts to the budget, i.e. the fixed-order Rényi filter (Feldman & Zrnic 2021) at
    the order that is optimal for ρ_B: no δ is split over the orders (``docs/accounting.md``,
    Theorem Z).
``"basic"``
    Pure and approximate events; accept while Σ count·ε_i ≤ budget and Σ count·δ_i ≤ δ (the
    basic-composition filter of Rogers, Roth, Ullman & Vadhan 2016).
``"renyi"``
    RDP-capable events (Gaussian, zCDP, curve, pure); accept while some order α of the
    grid Λ certifies the budget at δ/|Λ|:
    min_α [R(α) + ln(1 − 1/α) − (ln(δ/|Λ|) + ln α)/(α − 1)] ≤ budget, with
    R(α) = Σ ρ_i(α).  This is the union over α ∈ Λ of the fixed-order Rényi filters of Feldman &
    Zrnic (2021), each converted at δ/|Λ| (the grid-of-orders filter of Lécuyer 2021 and
    Whitehouse et al. 2023 with uniform weights).
``"auto"`` (default)
    The family of the *first* event spent: Gaussian → ``"gdp"``, zCDP → ``"zcdp"``, RDP curve →
    ``"renyi"``, pure or approximate → ``"basic"``.  The first event is chosen before any
    release, so this choice does not depend on private outputs.
``"fixed"``
    No filter: refuse when the composition bound ``epsilon()`` (the minimum below) would exceed
    the budget.  Valid only when every event's parameters are fixed before the first release
    (then the refusal happens at a time that does not depend on private outputs); it accepts
    any mix of events, including approximate events interleaved with RDP events.

Each is a theorem for fully adaptive choice of events; see ``docs/accounting.md`` for the
statements and the proof of the union step.  ``Ledger.filter_epsilon`` is the filter's ε of
the recorded history; ``epsilon()`` stays the (tighter) composition bound, valid when the event
parameters are fixed in advance.

Privacy models and seeds (issue 15)
-----------------------------------
Each entry records the *privacy model* (``"label"``: inputs public, one output changes;
``"full"``: inputs and outputs private, one record ``(x, y)`` is replaced) and the
neighbouring relation the event was analysed under; ``Ledger.privacy_model`` says which
model the total holds for.  A ledger refuses an event of another model than the ones already
recorded (nothing recorded, nothing drawn) unless it was created with
``allow_mixed_privacy_models=True``; the total of a mixed ledger then holds for **label**
privacy only: two datasets that differ in one label (same inputs) also differ in one record,
so they are neighbours under both relations, and every fully private release's (ε, δ) bound
holds for them; a label-private release gives no guarantee when an input changes, so the
total says nothing about full-privacy neighbours.  Events spent without a model (directly by
a user, or rows stored before issue 15) are ``None``: they neither set nor conflict with the
ledger's model.

Releases in the NumPy simulation mode pass their ``numpy.random.Generator``: the ledger keeps a
salted one-way fingerprint (SHA-256 of a per-ledger secret salt and the bit generator's state)
of each state used, never the state or the seed, and refuses a release whose Generator is in a
state already used on this ledger (two releases with the same noise would cancel it).

Budget comparison.  A release is allowed when the new total is ≤ budget · (1 + 1e-9).  The
relative slack absorbs the 1e-12 tolerance of the root finders (a Gaussian event calibrated
to exactly the budget computes to ε = budget + 1e-12); it can let the true total exceed the
budget by at most a relative 1e-9, i.e. a factor e^(1e-9·ε) ≈ 1 in the likelihood ratio.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import math
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_delta, check_epsilon, public_real_array
from pm_dpgp.accounting.events import (
    DEFAULT_ORDERS,
    ApproxDpEvent,
    GaussianEvent,
    PrivacyEvent,
    PureDpEvent,
    ZCDPEvent,
    _check_orders,
    gdp_epsilon,
    json_float,
    memo_epsilon,
    rdp_to_epsilon,
)

__all__ = [
    "BudgetExceededError",
    "Ledger",
    "LedgerEntry",
    "BUDGET_RTOL",
    "FILTERS",
    "FilterName",
    "PRIVACY_MODELS",
    "PrivacyModelMismatchError",
    "ReusedGeneratorError",
    "generator_fingerprint",
]

#: Relative slack in the budget comparison (see the module docstring).
BUDGET_RTOL: float = 1e-9

#: Bound "basic" is only evaluated for at most this many events.
_BASIC_MAX_EVENTS = 64

FilterName = Literal["auto", "gdp", "zcdp", "renyi", "basic", "fixed"]
#: The refusal rules a ledger can enforce (see the module docstring).
FILTERS: tuple[str, ...] = ("auto", "gdp", "zcdp", "renyi", "basic", "fixed")


#: The privacy models an entry may record (``docs/privacy_model.md``).
PRIVACY_MODELS: tuple[str, ...] = ("label", "full")


class BudgetExceededError(ValueError):
    """Raised by ``Ledger.spend`` when a release would exceed the budget (nothing recorded)."""


class FilterMismatchError(BudgetExceededError):
    """The ledger's privacy filter cannot account for this type of event at all (e.g. an
    "auto" ledger fixed to zCDP by its first event, then a Rényi-curve event): more budget
    would not help.  A ``BudgetExceededError`` for code that catches refusals; its own type
    since stop 34 (audit: the refusal looked like an overspend with budget left)."""


class PrivacyModelMismatchError(ValueError):
    """A release under another privacy model than the ledger's entries (nothing recorded)."""


class ReusedGeneratorError(ValueError):
    """A simulation-mode release whose Generator state was already used on this ledger."""


def _plain(obj: Any) -> Any:
    """A bit-generator state as JSON-encodable plain data (arrays become lists)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def generator_fingerprint(rng: np.random.Generator, salt: bytes) -> str:
    """Salted SHA-256 of ``rng``'s bit-generator state: ``H(salt ‖ canonical JSON of state)``.

    One-way: the state (hence the seed) is not stored.  Without the salt, a fingerprint of a
    low-entropy seed cannot be checked against guesses either (the salt is 32 random bytes
    kept by the ledger and never exported).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            "rng must be a numpy.random.Generator (e.g. np.random.default_rng()), got "
            f"{type(rng).__name__}."
        )
    state = json.dumps(_plain(rng.bit_generator.state), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(b"pm_dpgp generator v1\x00" + salt + state.encode()).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release.

    ``epsilon`` is the event's own ε at the ledger's δ; ``cumulative_epsilon`` is the ledger's
    total after it, computed with ``bound`` (see ``Ledger``); ``filter_epsilon`` is the
    privacy filter's ε after it (what the budget was checked against).  ``time`` is UTC,
    ISO 8601.
    """

    index: int
    label: str
    event: PrivacyEvent
    time: str
    epsilon: float
    cumulative_epsilon: float
    bound: str
    filter_epsilon: float = math.nan
    privacy_model: str | None = None
    neighbouring_relation: str | None = None
    generator_fingerprint: str | None = None

    def to_metadata(self) -> dict[str, Any]:
        """JSON-serialisable form of the entry (the generator fingerprint is salted, one-way)."""
        return {
            "privacy_model": self.privacy_model,
            "neighbouring_relation": self.neighbouring_relation,
            "generator_fingerprint": self.generator_fingerprint,
            "index": self.index,
            "label": self.label,
            "time": self.time,
            "epsilon": json_float(self.epsilon),
            "cumulative_epsilon": json_float(self.cumulative_epsilon),
            "bound": self.bound,
            "filter_epsilon": json_float(self.filter_epsilon),
            "event": self.event.to_metadata(),
        }


@dataclass(frozen=True, eq=False)
class _Totals:
    """Running aggregates of a sequence of events (immutable: ``add`` returns a new one).

    ``events`` holds the first ``_BASIC_MAX_EVENTS + 1`` events only (all of them while the
    basic bound, the one sum over events, is computed) and ``n_events`` counts them all: the
    whole tuple was copied on every ``add``, O(n²) over a history (stop-43 audit: reopening a
    persistent ledger of 10⁵ entries took 12 s), and the filters' type checks scanned it on
    every spend; they read the counters below.
    """

    events: tuple[PrivacyEvent, ...]
    rdp: NDArray[np.float64]  # Σ RDP curves of RDP-capable events on the ledger grid
    n_rdp: int  # number of RDP-capable events
    gauss_mu2: float  # Σ μ_i² of Gaussian events
    n_gauss: int
    # number of events that are not Gaussian, pure or approximate (curves, zCDP, repeat-and-
    # select, ...): any of them excludes the GDP bound, which composes only those three
    n_curve: int
    pure_eps: float  # Σ count·ε of pure events
    approx_eps: float  # Σ count·ε of approximate events
    approx_delta: Fraction  # Σ count·δ of approximate events, exact (rationals)
    # events without an RDP curve that are not ``ApproxDpEvent``s (a user's subclass of
    # ``PrivacyEvent`` with ``has_rdp`` False): only their own ε bounds them, so the "rdp" bound
    # is +inf while one is recorded (stop-43 audit: such an event was left out of it, a
    # filter="fixed" ledger reported 1.09 where the event alone costs 6.05); a default for
    # totals pickled before stop 43
    n_opaque: int = 0
    n_events: int = 0
    n_zcdp: int = 0  # ZCDPEvents
    n_pure: int = 0  # PureDpEvents
    n_approx: int = 0  # ApproxDpEvents

    @classmethod
    def empty(cls, n_orders: int) -> _Totals:
        return cls((), np.zeros(n_orders), 0, 0.0, 0, 0, 0.0, 0.0, Fraction(0))

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Totals pickled before stop 43 hold every event and no counters: count them all
        (before keeping the first events only; the counters were introduced together)."""
        if "n_events" not in state:
            events = tuple(state["events"])
            state = {
                **state,
                "events": events[: _BASIC_MAX_EVENTS + 1],
                "n_events": len(events),
                "n_zcdp": sum(isinstance(e, ZCDPEvent) for e in events),
                "n_pure": sum(isinstance(e, PureDpEvent) for e in events),
                "n_approx": sum(isinstance(e, ApproxDpEvent) for e in events),
                "n_opaque": sum(not e.has_rdp and not isinstance(e, ApproxDpEvent) for e in events),
            }
        self.__dict__.update(state)

    def add(self, event: PrivacyEvent, orders: NDArray[np.float64]) -> _Totals:
        rdp, n_rdp = self.rdp, self.n_rdp
        if event.has_rdp:
            rdp = rdp + _checked_rdp(event, orders)
            n_rdp += 1
        gauss_mu2, n_gauss = self.gauss_mu2, self.n_gauss
        if isinstance(event, GaussianEvent):
            gauss_mu2 += event.mu_squared
            n_gauss += 1
        pure_eps = self.pure_eps + (
            event.count * event.eps if isinstance(event, PureDpEvent) else 0
        )
        approx_eps, approx_delta = self.approx_eps, self.approx_delta
        if isinstance(event, ApproxDpEvent):
            approx_eps += event.total_epsilon
            # exact: the basic filter compares Σ count·δ with δ without slack, and a float sum
            # rounded down accepted up to 1e-16 relative more than δ (stop-32 audit)
            approx_delta += event.count * Fraction(event.delta)
        new = _Totals(
            self.events + (event,) if self.n_events <= _BASIC_MAX_EVENTS else self.events,
            rdp,
            n_rdp,
            gauss_mu2,
            n_gauss,
            # only Gaussian, pure and approximate events enter the GDP bound; any other event
            # (a curve, zCDP, repeat-and-select) excludes it (stop-26 audit: a repeat-and-select
            # event was left out of the GDP total, reporting 0.16 for a true ε ≥ 4.1)
            self.n_curve + (not isinstance(event, (GaussianEvent, PureDpEvent, ApproxDpEvent))),
            pure_eps,
            approx_eps,
            approx_delta,
            self.n_opaque + (not event.has_rdp and not isinstance(event, ApproxDpEvent)),
            self.n_events + 1,
            self.n_zcdp + isinstance(event, ZCDPEvent),
            self.n_pure + isinstance(event, PureDpEvent),
            self.n_approx + isinstance(event, ApproxDpEvent),
        )
        if new.n_events <= _BASIC_MAX_EVENTS and not isinstance(event, ApproxDpEvent):
            # ``_basic_lower`` extends this one's sum by the new event (same summation order)
            new.__dict__["_lower_parent"] = self
        return new

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the fields only (not the memo caches or the link to the previous totals)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def delta_left(self, delta: float) -> float:
        """``δ − Σ count·δ_i`` of the approximate events, rounded down (negative: overspent)."""
        exact = Fraction(delta) - self.approx_delta
        rest = float(exact)
        return math.nextafter(rest, -math.inf) if Fraction(rest) > exact else rest

    # -- the three bounds ---------------------------------------------------------------------
    def best(self, delta: float, orders: NDArray[np.float64]) -> tuple[float, str]:
        """The smallest valid bound at ``delta`` and its name (``bounds(best_only=True)``).

        Memoised per ``(delta, orders)`` in the instance: the totals are immutable, so the
        value never changes, and a ledger asks for the total it has just decided on again
        (``spend`` computes it, ``Ledger.epsilon`` reads it back; once per DP Thompson round).
        """
        cache = self.__dict__.setdefault("_best_at", {})
        key = (delta, orders.tobytes())
        value = cache.get(key)
        if value is None:
            if len(cache) >= 8:
                cache.clear()
            value = cache[key] = _best(self.bounds(delta, orders, best_only=True))
        return value

    def bounds(
        self, delta: float, orders: NDArray[np.float64], best_only: bool = False
    ) -> dict[str, float]:
        """Every applicable bound at ``delta`` (name → ε); empty dict for no events.

        With ``best_only`` the "basic" bound is left out when it cannot be the smallest:
        each event's ε is non-increasing in its δ and the basic bound gives every event the
        share ``rest / n ≤ rest``, so ``Σ ε_i(rest)`` (each ``ε_i(rest)`` converted once per
        event and cached) is a lower bound on it; if that lower bound already exceeds another
        bound, ``_best`` (which prefers the earlier bound on ties) picks the same bound and
        value without the ``n`` conversions at the share.
        """
        if not self.n_events:
            return {}
        out: dict[str, float] = {}
        rest = self.delta_left(delta)  # δ left for the non-approximate events
        # (a) RDP composition + basic composition with the approximate events.
        if self.n_opaque:  # an event neither RDP nor approximate: no RDP-based total
            out["rdp"] = math.inf
        elif self.n_rdp == 0:
            out["rdp"] = self.approx_eps if rest >= 0.0 else math.inf
        elif rest > 0.0:
            out["rdp"] = rdp_to_epsilon(orders, self.rdp, rest) + self.approx_eps
        else:
            out["rdp"] = math.inf
        # (c) exact Gaussian-DP composition of the Gaussian events.
        if self.n_gauss > 0 and self.n_curve == 0:
            if rest > 0.0:
                mu = math.sqrt(self.gauss_mu2)
                out["gdp"] = gdp_epsilon(mu, rest) + self.pure_eps + self.approx_eps
            else:
                out["gdp"] = math.inf
        # (b) basic composition of each event's own best bound.
        if self.n_events <= _BASIC_MAX_EVENTS:  # then ``events`` holds them all
            best_other = min(out.values(), default=math.inf)
            if not (best_only and self._basic_lower(delta) * (1.0 - _LOWER_RTOL) > best_other):
                out["basic"] = self._basic(delta)
        return out

    def _basic_lower(self, delta: float) -> float:
        """``Σ ε_i(rest) + Σ approx ε ≤`` the basic bound (each ``ε_i(rest)`` cached).

        Memoised per ``delta``; totals made by ``add`` from totals with the same approximate
        events extend the previous sum by the new event's term, which adds the terms in the
        same order as the loop below (bitwise the same value), once per event, not once
        per event and round.
        """
        cache = self.__dict__.setdefault("_lower_at", {})
        value = cache.get(delta)
        if value is not None:
            return value
        rest = self.delta_left(delta)
        if rest <= 0.0:
            return math.inf
        parent = self.__dict__.get("_lower_parent")
        if parent is not None and parent.events:
            event = self.events[-1]
            total = parent._basic_lower(delta)
            total += _own_epsilon(event, rest)
        else:
            total = self.approx_eps
            for event in self.events:
                if not isinstance(event, ApproxDpEvent):
                    total += _own_epsilon(event, rest)
        if len(cache) >= 8:
            cache.clear()
        cache[delta] = total
        return total

    def _basic(self, delta: float) -> float:
        n_other = self.n_events - self.n_approx
        rest = self.delta_left(delta)
        if n_other == 0:
            return self.approx_eps if rest >= 0.0 else math.inf
        if rest <= 0.0:
            return math.inf
        share = rest / n_other
        if Fraction(share) * n_other > Fraction(rest):
            # rounded up: the n shares summed to more than δ (δ = 1e-5, 3 events: +4e-22;
            # stop-47 audit), as ``delta_left`` rounds down
            share = math.nextafter(share, 0.0)
        total = self.approx_eps
        for event in self.events:
            if not isinstance(event, ApproxDpEvent):
                total += _sound_epsilon(event.epsilon(share))
        return total


#: Every ledger of this process, for the fork hooks below (weak: a ledger is not kept alive).
_LIVE_LEDGERS: weakref.WeakSet[Ledger] = weakref.WeakSet()
_HELD_AT_FORK: list[threading.Lock] = []
#: One fork at a time: two threads forking at once cleared each other's list of held locks,
#: and one ledger's lock stayed held for ever (stop-43 review).
_FORKING = threading.Lock()


def _acquire_before_fork() -> None:
    """``os.fork`` waits until no thread is inside a ledger operation: a lock held by another
    thread at fork time stays held in the child for ever, and a persistent ledger's SQLite
    connection would be copied mid-transaction (stop-43 audit: 20 of 20 children forked
    while a thread called ``can_afford`` hung in ``spend``).  An operation holds one ledger's
    lock and never waits for another's, so acquiring them all cannot deadlock; forks are
    serialised by ``_FORKING`` (released after the fork, in the parent and in the child)."""
    _FORKING.acquire()
    while True:
        try:
            ledgers = list(_LIVE_LEDGERS)  # a ledger created meanwhile changes the set
            break
        except RuntimeError:
            continue
    for ledger in ledgers:
        lock = ledger.__dict__.get("_lock")
        if lock is not None:
            lock.acquire()
            _HELD_AT_FORK.append(lock)


def _release_after_fork() -> None:
    while _HELD_AT_FORK:
        _HELD_AT_FORK.pop().release()
    _FORKING.release()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(
        before=_acquire_before_fork,
        after_in_parent=_release_after_fork,
        after_in_child=_release_after_fork,
    )


def _sound_epsilon(eps: float) -> float:
    """An event's own ε as a term of the basic bound: +inf (no bound) unless it is a number
    ≥ 0, so a user event's NaN or negative ε cannot lower the total (stop 43)."""
    return eps if eps >= 0.0 else math.inf


def _own_epsilon(event: PrivacyEvent, delta: float) -> float:
    """``_sound_epsilon`` of ``event.epsilon(delta)``, memoised in the event."""
    return _sound_epsilon(memo_epsilon(event, delta, functools.partial(event.epsilon, delta)))


def _checked_rdp(event: PrivacyEvent, orders: NDArray[np.float64]) -> NDArray[np.float64]:
    """``event.rdp(orders)`` if it is a possible RDP bound: one real value ≥ 0 (or +inf) per
    order; else ``ValueError`` (before anything is recorded).

    A Rényi divergence of order α > 1 is ≥ 0 (van Erven & Harremoës 2014, Thm. 8), so a
    negative or NaN value is a bug in the event, and the conversion maps a negative total to
    ε = 0 (stop-43 audit: a user curve with −1e6 at α = 32 let 50 Gaussian releases of ε = 1
    through a budget of 1).  Checked on every spend; the package's events always pass.
    """
    try:
        curve = public_real_array(event.rdp(orders), "rdp")
    except ValueError:
        curve = None
    if curve is None or curve.shape != orders.shape:
        raise ValueError(
            f"{type(event).__name__}.rdp(orders) must return one real number per order "
            f"({orders.size} orders); nothing was recorded."
        )
    bad = ~(curve >= 0.0)  # NaN or negative
    if bad.any():
        i = int(np.argmax(bad))
        value, order = float(curve[i]), float(orders[i])
        raise ValueError(
            f"{type(event).__name__}.rdp(orders) is {value!r} at order {order!r}: a "
            "Renyi divergence is >= 0 at every order (use +inf where no bound is known). "
            "Nothing was recorded."
        )
    return curve


#: Relative margin on the basic bound's lower bound: the conversions are monotone in δ only up
#: to their own rounding (~1e-12 relative), so a skip needs a clear win of the other bound.
_LOWER_RTOL = 1e-9


def _family_of(event: PrivacyEvent) -> str:
    """The filter family ``"auto"`` picks when ``event`` is the first event of a ledger."""
    if isinstance(event, GaussianEvent):
        return "gdp"
    if isinstance(event, ZCDPEvent):
        return "zcdp"
    if isinstance(event, (PureDpEvent, ApproxDpEvent)):
        return "basic"
    return "renyi"


def accepting_filters(event: PrivacyEvent, family: str | None = None) -> list[str]:
    """The composing filters (``"renyi"``, ``"zcdp"``, ``"gdp"``) that can hold ``event``'s
    type, other than ``family`` (the one in force): the advice of a filter-mismatch refusal."""
    return [f for f in ("renyi", "zcdp", "gdp") if f != family and _family_accepts(f, event)]


def _mismatch_hint(event: PrivacyEvent, family: str | None = None) -> str:
    """Which filters can hold ``event`` (the advice of a filter-mismatch refusal), never the
    filter ``family`` in force (a curve event refused by a 'zcdp' ledger was told to use
    filter='zcdp': stop-49 audit)."""
    if isinstance(event, ApproxDpEvent):
        return (
            "approximate events compose only under filter='basic' (with pure events) "
            "or 'fixed' (all parameters fixed in advance)"
        )
    if not event.has_rdp:
        return (
            "an event without an RDP curve that is not an ApproxDpEvent composes only under "
            "filter='fixed' (all parameters fixed in advance), by basic composition of its "
            "own epsilon; or spend it as ApproxDpEvent(epsilon, delta)"
        )
    fits = accepting_filters(event, family)
    what = {
        "renyi": "filter='renyi' (mixes Gaussian, zCDP, curve and pure events)",
        "zcdp": "filter='zcdp' (Gaussian and zCDP events)",
        "gdp": "filter='gdp' (Gaussian events only)",
    }
    return "create the ledger with " + " or ".join(what[f] for f in fits)


def _family_accepts(family: str, event: PrivacyEvent) -> bool:
    """Whether privacy filter ``family`` can account for events of ``event``'s type at all."""
    if family == "gdp":
        return isinstance(event, GaussianEvent)
    if family == "zcdp":
        return isinstance(event, (ZCDPEvent, GaussianEvent))
    if family == "basic":
        return isinstance(event, (PureDpEvent, ApproxDpEvent))
    if family == "renyi":
        return event.has_rdp
    return True


def filter_epsilon(
    family: str, totals: _Totals, delta: float, orders: NDArray[np.float64]
) -> float:
    """ε that privacy filter ``family`` certifies at ``delta`` for the events in ``totals``.

    ``+inf`` when the filter cannot account for one of the events (e.g. a curve event under the
    GDP filter), so that the ledger refuses it.  An empty history costs 0.  The statements are
    in the module docstring and ``docs/accounting.md`` ("Filter semantics").
    """
    n = totals.n_events
    if not n:
        return 0.0
    if family == "gdp":
        if totals.n_gauss != n:
            return math.inf
        return gdp_epsilon(math.sqrt(totals.gauss_mu2), delta)
    if family == "zcdp":
        # Gaussian and zCDP curves are α·ρ exactly, so totals.rdp = α·Σρ_i on the grid.
        if totals.n_zcdp + totals.n_gauss != n:
            return math.inf
        return rdp_to_epsilon(orders, totals.rdp, delta)
    if family == "basic":
        if totals.n_pure + totals.n_approx != n:
            return math.inf
        if totals.approx_delta > Fraction(delta):
            return math.inf
        return totals.pure_eps + totals.approx_eps
    if family == "renyi":
        if totals.n_rdp != n:
            return math.inf
        return rdp_to_epsilon(orders, totals.rdp, delta / orders.size)
    if family == "fixed":
        return totals.best(delta, orders)[0]
    raise ValueError(f"unknown privacy filter {family!r}; expected one of {FILTERS}.")


def _total_model(entries: Sequence[LedgerEntry]) -> str | None:
    """The model a total over ``entries`` holds for (see ``Ledger.privacy_model``)."""
    models = {e.privacy_model for e in entries if e.privacy_model is not None}
    if not models:
        return None
    return models.pop() if len(models) == 1 else "label"


def _check_privacy_model(privacy_model: str | None, relation: str | None) -> None:
    if privacy_model is not None and privacy_model not in PRIVACY_MODELS:
        raise ValueError(
            f"privacy_model must be one of {PRIVACY_MODELS} or None, got {privacy_model!r}; "
            "pass 'label' (inputs public) or 'full' (inputs and outputs private)."
        )
    if relation is not None and not isinstance(relation, str):
        raise ValueError(
            f"neighbouring_relation must be a string, got {type(relation).__name__}; pass a "
            "description such as 'replace-one (x, y)'."
        )


def _best(bounds: dict[str, float]) -> tuple[float, str]:
    if not bounds:
        return 0.0, "none"
    name = min(bounds, key=bounds.__getitem__)
    return bounds[name], name


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "unbounded"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


class Ledger:
    """Privacy ledger composing every release from one dataset under one (ε, δ) budget.

    Parameters
    ----------
    epsilon
        Total ε budget, or ``None`` for an unbounded ledger that only records.
    delta
        The δ at which ε is reported and the budget enforced (0 < δ < 1).
    orders
        Rényi orders α > 1 for RDP composition (default ``DEFAULT_ORDERS``).
    filter
        The privacy filter that decides refusals: ``"auto"`` (default: the family of the first
        event), ``"gdp"``, ``"zcdp"``, ``"renyi"``, ``"basic"`` or ``"fixed"`` (see the module
        docstring).
    allow_mixed_privacy_models
        Accept releases under both privacy models (``"label"`` and ``"full"``); the total then
        holds for label privacy only (module docstring, "Privacy models and seeds").  Default:
        refuse a release whose model differs from the recorded ones
        (``PrivacyModelMismatchError``).

    Notes
    -----
    ``epsilon(delta)`` is the minimum of the valid bounds "rdp", "gdp" and "basic" described in
    the ``module docstring <pm_dpgp.accounting.ledger>``; ``bound_used`` names the one
    that attained it.  An empty ledger has ε = 0.  Spending is atomic and thread-safe: the check
    and the recording happen under one lock, and a refused event leaves the ledger unchanged.
    """

    def __init__(
        self,
        epsilon: float | None = None,
        delta: float = 1e-5,
        orders: ArrayLike = DEFAULT_ORDERS,
        *,
        filter: FilterName = "auto",  # noqa: A002 - the established name of the concept
        allow_mixed_privacy_models: bool = False,
    ) -> None:
        if not isinstance(allow_mixed_privacy_models, bool):
            raise TypeError("allow_mixed_privacy_models must be True or False; pass a bool.")
        self._allow_mixed = allow_mixed_privacy_models
        self._salt = os.urandom(32)
        self._budget = None if epsilon is None else check_epsilon(epsilon, "epsilon budget")
        self._delta = check_delta(delta)
        grid = np.unique(_check_orders(orders))
        grid.setflags(write=False)
        self._orders = grid
        if filter not in FILTERS:
            raise ValueError(f"filter must be one of {FILTERS}, got {filter!r}.")
        self._filter = str(filter)
        self._totals = _Totals.empty(grid.size)
        self._entries: list[LedgerEntry] = []
        self._lock = threading.Lock()
        _LIVE_LEDGERS.add(self)

    def _refresh(self) -> None:
        """Bring the in-memory state up to date (no-op here; the persistent ledger re-reads)."""

    # -- pickling (the lock is not picklable) --------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        # a copy (copy.copy goes through here too) is an independent budget
        # (docs/accounting.md): it must not share the list of entries with the original, whose
        # history then listed the copy's releases that its totals did not count (stop-43 audit)
        state["_entries"] = list(self._entries)
        state.pop("_last_added", None)  # memos, not state
        state.pop("_prov_index", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_filter", "auto")  # ledgers pickled before filters existed
        state.setdefault("_allow_mixed", False)  # ... before privacy models were recorded
        state.setdefault("_salt", os.urandom(32))
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _LIVE_LEDGERS.add(self)

    # -- properties ---------------------------------------------------------------------------
    @property
    def delta(self) -> float:
        """The δ at which the ledger reports ε and enforces the budget."""
        return self._delta

    @property
    def epsilon_budget(self) -> float | None:
        """The ε budget (``None`` if unbounded)."""
        return self._budget

    @property
    def orders(self) -> NDArray[np.float64]:
        """The Rényi orders used for RDP composition (read-only array)."""
        return self._orders

    @property
    def filter(self) -> str:
        """The configured privacy filter: "auto", "gdp", "zcdp", "renyi", "basic" or "fixed"."""
        return self._filter

    @property
    def allow_mixed_privacy_models(self) -> bool:
        """Whether releases under both privacy models are accepted (then: label privacy)."""
        return self._allow_mixed

    @property
    def privacy_model(self) -> str | None:
        """The privacy model the total holds for: ``"label"`` or ``"full"`` when every recorded
        model agrees, ``"label"`` for a mix (allowed only with ``allow_mixed_privacy_models``;
        a label-neighbour pair is also a full-privacy neighbour pair), ``None`` when no entry
        records a model."""
        self._refresh()
        return _total_model(self._entries)

    @property
    def neighbouring_relations(self) -> list[str]:
        """The distinct neighbouring relations recorded, in order of first use."""
        self._refresh()
        seen: list[str] = []
        for e in self._entries:
            if e.neighbouring_relation is not None and e.neighbouring_relation not in seen:
                seen.append(e.neighbouring_relation)
        return seen

    @property
    def filter_family(self) -> str | None:
        """The filter in force: the configured one, or for "auto" the first event's family
        (``None`` while an "auto" ledger is empty)."""
        self._refresh()
        return self._family(self._totals)

    def check_accounts_for(self, event: PrivacyEvent, what: str | None = None) -> None:
        """Raise ``FilterMismatchError`` (a ``BudgetExceededError``) if this ledger's privacy
        filter cannot account for ``event``'s type at all (an empty "auto" ledger accepts any
        type; its first event then picks the filter).  Not a budget matter: no amount of it
        would let the event through, so a loop can refuse before its first round instead of
        stopping "for budget"."""
        family = self.filter_family
        if family is None or _family_accepts(family, event):
            return
        raise FilterMismatchError(
            f"the ledger's {family!r} privacy filter cannot account for "
            f"{what or type(event).__name__} ({_mismatch_hint(event, family)}). Nothing was "
            "recorded and no noise was drawn; more budget would not help."
        )

    def _family(self, totals: _Totals) -> str | None:
        if self._filter != "auto":
            return self._filter
        return _family_of(totals.events[0]) if totals.events else None

    def _filter_epsilon(self, totals: _Totals) -> float:
        family = self._family(totals)
        if family is None:
            return 0.0
        # memoised in the (immutable) totals: ``can_afford`` then ``spend`` of one event ask
        # for the same value
        cache = totals.__dict__.setdefault("_filter_at", {})
        key = (family, self._delta, self._orders.tobytes())
        value = cache.get(key)
        if value is None:
            if len(cache) >= 8:
                cache.clear()
            value = cache[key] = filter_epsilon(family, totals, self._delta, self._orders)
        return value

    def _added(self, event: PrivacyEvent) -> _Totals:
        """``self._totals.add(event)``; the last result is reused for the same event object on
        unchanged totals (``can_afford(event)`` and then ``spend(event)``: one composition)."""
        totals = self._totals  # read once: another thread may spend (or refresh) meanwhile
        memo = self.__dict__.get("_last_added")
        if memo is not None and memo[0] is totals and memo[1] is event:
            return memo[2]
        new = totals.add(event, self._orders)
        self._last_added = (totals, event, new)
        return new

    @property
    def filter_epsilon(self) -> float:
        """ε the privacy filter certifies for the recorded history at the ledger's δ.

        Valid even when each event was chosen from earlier outputs (fully adaptive
        composition); the budget is enforced on this number.  0 for an empty ledger.
        """
        self._refresh()
        return self._filter_epsilon(self._totals)

    @property
    def rdp(self) -> NDArray[np.float64]:
        """Composed RDP curve of the RDP-capable events spent so far, on ``orders`` (copy)."""
        self._refresh()
        return self._totals.rdp.copy()

    @property
    def history(self) -> list[LedgerEntry]:
        """The recorded releases, oldest first (a copy)."""
        self._refresh()
        return list(self._entries)

    @property
    def spent_epsilon(self) -> float:
        """ε of everything spent so far at the ledger's δ (0 for an empty ledger).

        The composition bound of the recorded events (minimum of "rdp", "gdp", "basic"); valid
        for event parameters fixed in advance.  See ``filter_epsilon`` for the adaptive
        guarantee that the budget is enforced on.
        """
        self._refresh()
        return self._spent()[0]

    @property
    def bound_used(self) -> str:
        """Which bound gives ``spent_epsilon``: "rdp", "gdp", "basic" or "none" (empty)."""
        self._refresh()
        return self._spent()[1]

    def _spent(self) -> tuple[float, str]:
        """``(spent_epsilon, bound_used)`` from the totals as last read, not from the last
        entry's stored value: a persistent ledger's entries carry what the version that wrote
        them computed (stop-36 audit: a file from before a fix of the accounting reported 0.34
        where its events compose to 10.8)."""
        if not self._entries:
            return 0.0, "none"
        return self._totals.best(self._delta, self._orders)

    @property
    def remaining_epsilon(self) -> float | None:
        """Budget minus the filter's ε (≥ 0), or ``None`` for an unbounded ledger."""
        if self._budget is None:
            return None
        return max(0.0, self._budget - self.filter_epsilon)

    # -- queries ------------------------------------------------------------------------------
    def bounds(self, delta: float | None = None) -> dict[str, float]:
        """Every applicable bound on the total ε at ``delta`` (default: the ledger's δ)."""
        d = self._delta if delta is None else check_delta(delta)
        self._refresh()
        return self._totals.bounds(d, self._orders)

    def epsilon(self, delta: float | None = None) -> float:
        """ε of everything spent so far at ``delta`` (default: the ledger's δ).

        The minimum of the valid bounds (see ``Ledger``); ``inf`` if no bound applies, e.g.
        when ``delta`` is smaller than the δ consumed by ``ApproxDpEvent``s.
        """
        d = self._delta if delta is None else check_delta(delta)
        self._refresh()
        return self._totals.best(d, self._orders)[0]

    def _check_event(self, event: PrivacyEvent) -> PrivacyEvent:
        if not isinstance(event, PrivacyEvent):
            raise TypeError(
                "spend/preview expect a privacy event (GaussianEvent, ZCDPEvent, RdpCurveEvent, "
                f"PureDpEvent or ApproxDpEvent), got {type(event).__name__}."
            )
        return event

    def _within_budget(self, total: float) -> bool:
        # an infinite total is never within a budget (even one whose allowance overflows)
        return self._budget is None or (
            math.isfinite(total) and total <= self._budget * (1.0 + BUDGET_RTOL)
        )

    def preview(self, event: PrivacyEvent) -> float:
        """Composition total ε at the ledger's δ if ``event`` were spent now.  Records nothing."""
        self._refresh()
        new = self._added(self._check_event(event))
        return new.best(self._delta, self._orders)[0]

    def preview_filter(self, event: PrivacyEvent) -> float:
        """The filter's ε at the ledger's δ if ``event`` were spent now.  Records nothing."""
        self._refresh()
        return self._filter_epsilon(self._added(self._check_event(event)))

    def filter_accepts(self, event: PrivacyEvent) -> bool:
        """Whether the privacy filter in force can account for ``event``'s type at all (budget
        aside): e.g. a "gdp" filter cannot take a zCDP event.  Records nothing."""
        self._refresh()
        family = self._family(self._added(self._check_event(event)))
        return family is None or _family_accepts(family, event)

    def check_privacy_model(self, privacy_model: str, label: str = "") -> None:
        """Raise ``PrivacyModelMismatchError`` now if ``spend`` would refuse a release under
        ``privacy_model`` for mixing models; records nothing (public: the ledger's entries).

        For loops that draw random numbers before their first spend (a Thompson round draws
        its candidates first), so that a refusal leaves the caller's Generator untouched.
        """
        _check_privacy_model(privacy_model, None)
        self._refresh()
        self._check_provenance(label or f"a {privacy_model}-private release", privacy_model, None)

    def can_afford(self, event: PrivacyEvent) -> bool:
        """Whether ``spend`` would accept ``event`` now (the filter's ε within budget)."""
        return self._within_budget(self.preview_filter(event))

    def _provenance_index(self) -> tuple[set[str], set[str]]:
        """Generator fingerprints and privacy models of the recorded entries.

        Kept per entry list and extended by the entries appended since the last call (the
        list only grows in place; a persistent ledger's refresh replaces it), so a check is
        O(1) per new entry instead of a pass over the whole history on every spend.

        The length is read once, before the slice: ``check_privacy_model`` runs without the
        lock, and a ``spend`` on another thread that appended between the slice and a later
        ``len`` had its entry marked as indexed without being read, so its Generator
        fingerprint and privacy model were never checked again (stop-46 audit).
        """
        entries = self._entries
        n = len(entries)
        index = self.__dict__.get("_prov_index")
        if index is None or index[0] is not entries or index[1] > n:
            index = (entries, 0, set(), set())
        _, done, fingerprints, models = index
        for e in entries[done:n]:
            if e.generator_fingerprint is not None:
                fingerprints.add(e.generator_fingerprint)
            if e.privacy_model is not None:
                models.add(e.privacy_model)
        self._prov_index = (entries, n, fingerprints, models)
        return fingerprints, models

    def _check_provenance(
        self, label: str, privacy_model: str | None, fingerprint: str | None
    ) -> None:
        """Refuse a reused Generator state or a second privacy model (public checks only)."""
        fingerprints, recorded = self._provenance_index()
        if fingerprint is not None and fingerprint in fingerprints:
            raise ReusedGeneratorError(
                f"this release ({label!r}) uses a numpy Generator whose state was already used "
                "for a release on this ledger (e.g. np.random.default_rng(seed) with the same "
                "seed twice): its noise would repeat, and the difference of two releases of "
                "neighbouring data would reveal the change exactly. Nothing was recorded and no "
                "noise was drawn. Use the secure default (rng=None) for real releases, or a "
                "fresh Generator (np.random.default_rng()) per release."
            )
        if privacy_model is None or self._allow_mixed:
            return
        if recorded and privacy_model not in recorded:
            raise PrivacyModelMismatchError(
                f"this release ({label!r}) is {privacy_model!r}-private but the ledger holds "
                f"{sorted(recorded)[0]!r}-private releases: their total would have no single "
                "meaning. Nothing was recorded and no noise was drawn. Use a separate ledger "
                "per privacy model, or create the ledger with allow_mixed_privacy_models=True "
                "(the total then holds for label privacy only; docs/accounting.md)."
            )

    def _decide(
        self,
        event: PrivacyEvent,
        label: str,
        privacy_model: str | None = None,
        neighbouring_relation: str | None = None,
        fingerprint: str | None = None,
    ) -> tuple[_Totals, LedgerEntry]:
        """The new totals and entry if the filter accepts ``event``; else raise (pure function).

        Raises
        ------
        ReusedGeneratorError, PrivacyModelMismatchError
            See ``spend``.
        BudgetExceededError
            If the filter's ε at the ledger's δ would exceed the budget.
        """
        self._check_provenance(label, privacy_model, fingerprint)
        new = self._added(event)
        total, bound = new.best(self._delta, self._orders)
        f_eps = self._filter_epsilon(new)
        if not self._within_budget(f_eps):
            own = event.epsilon(self._delta)
            family = self._family(new)
            fix = "use more noise, fewer releases, or a larger budget decided in advance"
            head = "privacy budget exceeded"
            if family is not None and not _family_accepts(family, event):
                head = "the ledger's privacy filter refuses this release"
                # not an overspend: the filter's family cannot hold this event at all (stop-31
                # walkthrough: the advice named a larger budget though 10 of 10 were left)
                fix = (
                    "more budget would not help: use a ledger whose filter accepts this kind of "
                    "event (hint above)"
                )
                why = f"the {family!r} privacy filter cannot account for {type(event).__name__} "
                why += f"({_mismatch_hint(event, family)})"
            else:
                why = (
                    f"the {family} filter's total would be {f_eps:.6g} > budget epsilon="
                    f"{self._budget:.6g} at delta={self._delta:.3g}"
                )
            mismatch = head != "privacy budget exceeded"
            raise (FilterMismatchError if mismatch else BudgetExceededError)(
                f"{head}: spent epsilon={self._filter_epsilon(self._totals):.6g} "
                f"({family} filter), this release ({label!r}, {event.describe()}) alone costs "
                f"epsilon={own:.6g}; {why}. Nothing was recorded and no noise was drawn; {fix}."
            )
        entry = LedgerEntry(
            index=len(self._entries),
            label=label,
            event=event,
            time=datetime.now(timezone.utc).isoformat(),
            epsilon=event.epsilon(self._delta),
            cumulative_epsilon=total,
            bound=bound,
            filter_epsilon=f_eps,
            privacy_model=privacy_model,
            neighbouring_relation=neighbouring_relation,
            generator_fingerprint=fingerprint,
        )
        return new, entry

    def _label(self, event: PrivacyEvent, label: str | None) -> str:
        if label is not None and not isinstance(label, str):
            raise ValueError(f"label must be a string, got {type(label).__name__}.")
        return label or event.label or type(event).__name__

    def _provenance(
        self,
        privacy_model: str | None,
        neighbouring_relation: str | None,
        rng: np.random.Generator | None,
    ) -> str | None:
        """Validate the provenance arguments of ``spend``; the generator's fingerprint."""
        _check_privacy_model(privacy_model, neighbouring_relation)
        return None if rng is None else generator_fingerprint(rng, self._salt)

    def spend(
        self,
        event: PrivacyEvent,
        label: str | None = None,
        *,
        privacy_model: str | None = None,
        neighbouring_relation: str | None = None,
        rng: np.random.Generator | None = None,
    ) -> LedgerEntry:
        """Record ``event`` if the budget allows it; otherwise raise and record nothing.

        Mechanisms call this before drawing any noise, so a refused release never touches the
        data.  An empty or missing ``label`` falls back to the event's label, then its type name.
        ``privacy_model`` (``"label"`` or ``"full"``) and ``neighbouring_relation`` are recorded
        with the entry; ``rng`` is the Generator a simulation-mode release is about to draw
        from (its salted fingerprint is recorded, never its state).

        Raises
        ------
        ReusedGeneratorError
            ``rng`` is in a state already used for a release on this ledger.
        PrivacyModelMismatchError
            ``privacy_model`` differs from the recorded ones and the ledger was not created
            with ``allow_mixed_privacy_models=True``.
        BudgetExceededError
            If the privacy filter's ε at the ledger's δ would exceed the budget (with relative
            slack ``BUDGET_RTOL``).  The ledger is left unchanged.
        """
        event = self._check_event(event)
        label = self._label(event, label)
        fingerprint = self._provenance(privacy_model, neighbouring_relation, rng)
        with self._lock:
            new, entry = self._decide(
                event, label, privacy_model, neighbouring_relation, fingerprint
            )
            self._totals = new
            self._entries.append(entry)
        return entry

    # -- reporting ----------------------------------------------------------------------------
    def _rows(self) -> list[tuple[str, str, str, str, str, str]]:
        self._refresh()
        return [
            (
                str(e.index),
                e.label,
                e.privacy_model or "-",
                e.event.describe(),
                _fmt(e.epsilon),
                _fmt(e.cumulative_epsilon),
            )
            for e in self._entries
        ]

    def summary(self) -> str:
        """A readable table: each release with its own ε and the cumulative ε, then totals."""
        header = ("#", "label", "model", "event", "epsilon", "cumulative")
        rows = self._rows()
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        out = [f"Privacy ledger (delta = {self._delta:.3g})", line(header)]
        out.append("  ".join("-" * w for w in widths))
        out.extend(line(r) for r in rows)
        if not rows:
            out.append("(no releases)")
        elif len(rows) > 1:
            # the columns do not add up, and a reader summed them (stop-39 walkthrough: rows
            # 1.0001 + 0.8725 beside a cumulative 1.9126 on the basic bound)
            out.append(
                "(epsilon: each release alone at this delta; cumulative: the composed total "
                "of the rows so far, not their sum: the composition is sub-additive, and a "
                "basic bound also splits delta between the releases)"
            )
        out.append("")
        out.append(
            f"spent epsilon     : {_fmt(self.spent_epsilon)}  (bound: {self.bound_used}; "
            f"{self.filter_family or self._filter} filter: {_fmt(self.filter_epsilon)})"
        )
        remaining = f"remaining epsilon : {_fmt(self.remaining_epsilon)}"
        if self.remaining_epsilon is not None and self._entries:
            # not the largest next release: composition is sublinear, so a next release of
            # larger epsilon may fit (stop-38 usability audit: 0.54 left, an eps = 1 release
            # accepted); can_afford / plan.fits_in answer that
            remaining += (
                "  (budget - filter epsilon; a next release may cost more: ledger.can_afford)"
            )
        out.append(remaining)
        out.append(f"budget epsilon    : {_fmt(self._budget)}")
        out.append(f"privacy model     : {self._model_statement()}")
        return "\n".join(out)

    def _model_statement(self) -> str:
        """Which neighbouring relation the total holds for, in words."""
        self._refresh()
        models = {e.privacy_model for e in self._entries if e.privacy_model is not None}
        if not models:
            return "not recorded"
        if len(models) == 1:
            return f"{models.pop()} (every recorded release)"
        return (
            "label (mixed label and full releases: the total holds for neighbours that differ "
            "in one label, not for a changed input)"
        )

    def __repr__(self) -> str:
        budget = "None" if self._budget is None else f"{self._budget:g}"
        return (
            f"Ledger(epsilon={budget}, delta={self._delta:g}, releases={len(self._entries)}, "
            f"spent={self.spent_epsilon:.4g}, bound={self.bound_used!r})"
        )

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(
            f"<th>{h}</th>" for h in ("#", "label", "model", "event", "ε", "cumulative ε")
        )
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in self._rows()
        )
        return (
            f"<table><caption>Privacy ledger (δ = {self._delta:.3g})</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>spent ε = {esc(_fmt(self.spent_epsilon))} (bound: {esc(self.bound_used)}); "
            f"remaining ε = {esc(_fmt(self.remaining_epsilon))}; "
            f"budget ε = {esc(_fmt(self._budget))}</p>"
        )

    def to_metadata(self) -> dict[str, Any]:
        """JSON-serialisable record of the ledger (budget, totals, every entry and its event)."""
        self._refresh()
        remaining = self.remaining_epsilon
        return {
            "type": "Ledger",
            "epsilon_budget": self._budget,
            "delta": self._delta,
            "spent_epsilon": json_float(self.spent_epsilon),
            "remaining_epsilon": None if remaining is None else json_float(remaining),
            "bound_used": self.bound_used,
            "filter": self._filter,
            "filter_family": self.filter_family,
            "filter_epsilon": json_float(self.filter_epsilon),
            "privacy_model": self.privacy_model,
            "privacy_model_statement": self._model_statement(),
            "neighbouring_relations": self.neighbouring_relations,
            "allow_mixed_privacy_models": self._allow_mixed,
            "budget_rtol": BUDGET_RTOL,
            "orders": self._orders.tolist(),
            "entries": [e.to_metadata() for e in self._entries],
        }
