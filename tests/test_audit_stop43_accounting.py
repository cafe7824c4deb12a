"""Stop-43 audit of the accounting (``pm_dpgp/accounting``, ``mechanisms/{noise,gaussian}.py``).

V1: a user event without an RDP curve was left out of the "rdp" bound, and a negative or NaN
value of a user curve zeroed the composed ε.  V2: ``gaussian_sigma`` / ``gdp_epsilon`` /
``gdp_delta`` cancelled for tiny μ (ε ~ 1e-10..1e-14).  V3: ``copy.copy(ledger)`` shared the
entries.  V4: ``dim`` / ``count`` validation and ``GaussianEvent(1e160)``.  Every test fails
on the code before the fix (``docs/accounting.md``, "Stop-43 audit").
"""

from __future__ import annotations

import copy
import math
import os
import pickle
from dataclasses import dataclass

import mpmath
import numpy as np
import pytest

from pm_dpgp.accounting import (
    ApproxDpEvent,
    BudgetExceededError,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    PersistentLedger,
    PureDpEvent,
    RdpCurveEvent,
    RepeatAndSelectEvent,
    ZCDPEvent,
    dataset_fingerprint,
    gdp_delta,
    gdp_epsilon,
)
from pm_dpgp.accounting.events import DEFAULT_ORDERS, PrivacyEvent, _gdp_delta_certified
from pm_dpgp.accounting.ledger import FilterMismatchError
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
from pm_dpgp.mechanisms.noise import integer_sensitivity, plan_discrete_gaussian, secure_plan


# ============================================================================================
# V1: events the ledger cannot account soundly
# ============================================================================================
@dataclass(frozen=True)
class _OtherAccountant(PrivacyEvent):
    """An (ε, δ)-DP mechanism analysed elsewhere, known through ε(δ) only (no RDP curve)."""

    eps: float = 5.0
    count: int = 1
    label: str = ""

    @property
    def has_rdp(self) -> bool:
        return False

    def rdp(self, orders=DEFAULT_ORDERS):
        return np.full(np.shape(orders), math.inf)

    def epsilon(self, delta):
        return self.count * self.eps if delta >= 1e-7 else math.inf

    def _parameters(self):
        return {"epsilon": self.eps}

    def describe(self):
        return f"Other(eps={self.eps})"


@dataclass(frozen=True)
class _Curve(PrivacyEvent):
    """A user curve 0.01·α with ``bad`` at α = 32."""

    bad: float = -1e6
    count: int = 1
    label: str = ""

    def rdp(self, orders=DEFAULT_ORDERS):
        a = np.asarray(orders, dtype=float)
        return np.where(a == 32.0, self.bad, 0.01 * a)

    def epsilon(self, delta):
        return 1.0

    def _parameters(self):
        return {}

    def describe(self):
        return "Curve"


def test_an_event_without_a_curve_counts_in_full_on_a_fixed_ledger():
    """The audit's case: after a Gaussian release of ε = 1, an event whose own bound is 5.0 was
    accepted on a budget of 2 (reported total 1.09, the "rdp" bound without it).  The "rdp"
    bound is now +inf while such an event is recorded; the basic bound counts its ε."""
    ledger = Ledger(epsilon=2.0, delta=1e-5, filter="fixed")
    ledger.spend(GaussianEvent(3.7306))
    with pytest.raises(BudgetExceededError, match="6.045"):
        ledger.spend(_OtherAccountant())
    assert len(ledger.history) == 1

    roomy = Ledger(epsilon=10.0, delta=1e-5, filter="fixed")
    roomy.spend(GaussianEvent(3.7306))
    roomy.spend(_OtherAccountant())
    assert roomy.bounds()["rdp"] == math.inf
    assert roomy.spent_epsilon == pytest.approx(6.045005036327713, rel=1e-9)
    assert roomy.bound_used == "basic"


def test_an_event_whose_own_epsilon_is_negative_or_nan_has_no_basic_bound():
    """A user event's ε(δ) enters the basic bound; a negative or NaN value is no bound."""
    for bad in (-3.0, math.nan):

        @dataclass(frozen=True)
        class Broken(_OtherAccountant):
            def epsilon(self, delta, bad=bad):
                return bad

        ledger = Ledger(epsilon=2.0, delta=1e-5, filter="fixed")
        ledger.spend(GaussianEvent(3.7306))
        with pytest.raises(BudgetExceededError):
            ledger.spend(Broken())
        assert len(ledger.history) == 1


def test_a_renyi_ledger_names_filter_fixed_for_an_event_without_a_curve():
    """The refusal's advice: the old hint sent the user to filter='renyi', which refuses it."""
    ledger = Ledger(epsilon=10.0, delta=1e-5, filter="renyi")
    with pytest.raises(FilterMismatchError, match="filter='fixed'"):
        ledger.spend(_OtherAccountant())
    assert ledger.history == []


@pytest.mark.parametrize("filt", ["renyi", "fixed", "auto"])
@pytest.mark.parametrize("bad", [-1e6, -1e-300, math.nan, -math.inf])
def test_a_curve_with_a_negative_or_nan_value_is_refused_before_anything_is_recorded(filt, bad):
    """The audit's case: −1e6 at α = 32 made the composed ε 0, and 50 Gaussian releases of
    ε = 1 were accepted on a budget of 1.  Now ``ValueError`` (not a budget refusal), nothing
    recorded, and the package's events still pass the check on the same ledger."""
    ledger = Ledger(epsilon=1.0, delta=1e-5, filter=filt)
    with pytest.raises(ValueError, match="order 32.0") as info:
        ledger.spend(_Curve(bad))
    assert not isinstance(info.value, BudgetExceededError)
    assert ledger.history == [] and ledger.spent_epsilon == 0.0
    with pytest.raises(ValueError, match="order 32.0"):
        ledger.can_afford(_Curve(bad))
    accepted = 0  # of 50 Gaussian releases of ε = 1.0 each (all 50 before the fix)
    with pytest.raises(BudgetExceededError):
        for _ in range(50):
            ledger.spend(GaussianEvent(3.7306))
            accepted += 1
    assert accepted <= 1
    # every built-in event passes the curve check (unbounded ledgers of each filter)
    curve = RdpCurveEvent.from_function(lambda a: a / 20, 30.0)
    builtins = [
        GaussianEvent(2.0, count=3),
        ZCDPEvent(0.01),
        curve,
        PureDpEvent(0.3),
        LaplaceEvent(4.0, count=2),
        RepeatAndSelectEvent(GaussianEvent(5.0), 0.1),
        RepeatAndSelectEvent(PureDpEvent(1e-8), 0.5, 0.0),
    ]
    free = Ledger(epsilon=None, delta=1e-5, filter="renyi")
    for event in builtins:
        free.spend(event)
    fixed = Ledger(epsilon=None, delta=1e-5, filter="fixed")
    for event in [*builtins, ApproxDpEvent(0.1, 1e-7)]:
        fixed.spend(event)
    assert math.isfinite(fixed.bounds()["rdp"])


def test_a_curve_of_the_wrong_length_or_type_is_refused():
    """One real value per order: a short array or booleans are no curve (new check)."""

    @dataclass(frozen=True)
    class Short(_Curve):
        def rdp(self, orders=DEFAULT_ORDERS):
            return np.zeros(3)

    @dataclass(frozen=True)
    class Flags(_Curve):
        def rdp(self, orders=DEFAULT_ORDERS):
            return np.zeros(np.shape(orders), dtype=bool)

    for event in (Short(), Flags()):
        ledger = Ledger(epsilon=1.0, delta=1e-5, filter="renyi")
        with pytest.raises(ValueError, match="one real number per order"):
            ledger.spend(event)
        assert ledger.history == []


# ============================================================================================
# V2: the Gaussian curve at tiny μ, against 100-digit mpmath
# ============================================================================================
mpmath.mp.dps = 100


def _delta_exact(mu: float, eps: float) -> mpmath.mpf:
    """Balle & Wang (2018), Thm. 8, in 100-digit arithmetic."""
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


EPSILONS = [1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 0.3, 1.0, 10.0]
DELTAS = [1e-300, 1e-100, 1e-50, 1e-20, 1e-10, 1e-5, 1e-2, 0.3]


def test_gaussian_sigma_is_valid_and_tight_down_to_epsilon_1e_14():
    """The audit's cases (ε = 1e-12, δ = 1e-50: σ 8.94e12 where 1.2567e13 is needed, true
    δ(ε) 2.3e-33; ε = 1e-10, δ = 1e-300; ε = 1e-14, δ = 1e-20) and a grid of 80 settings: the
    exact δ(ε) at σ is ≤ δ, and at σ(1 − 1e-9) it is > δ (tight to 1e-9)."""
    for eps in EPSILONS:
        for delta in DELTAS:
            sigma = gaussian_sigma(eps, delta)
            assert _delta_exact(1.0 / sigma, eps) <= delta, (eps, delta, sigma)
            assert _delta_exact(1.0 / (sigma * (1.0 - 1e-9)), eps) > delta, (eps, delta)
    assert gaussian_sigma(1e-12, 1e-50) == pytest.approx(1.25672e13, rel=1e-5)
    assert gaussian_sigma(1e-12, 1e-50, 3.0) == pytest.approx(3 * 1.25672e13, rel=1e-5)


@pytest.mark.parametrize("delta", DELTAS)
def test_gdp_epsilon_is_valid_and_tight_for_tiny_mu(delta):
    """μ from 1e-16 to 10: δ(ε) ≤ δ at the returned ε, > δ at ε(1 − 1e-9).  The audit's
    gdp_epsilon(1e-16, 1e-20) was 0 while δ(0) = 4.0e-17."""
    for mu in [1e-16, 1e-13, 1e-10, 1e-7, 1e-4, 1e-2, 0.3, 0.5, 0.500001, 2.0, 10.0]:
        eps = gdp_epsilon(mu, delta)
        assert _delta_exact(mu, eps) <= delta, (mu, delta, eps)
        if eps > 0.0:
            assert _delta_exact(mu, eps * (1.0 - 1e-9)) > delta, (mu, delta, eps)
        else:
            assert _delta_exact(mu, 0.0) <= delta
    assert gdp_epsilon(1e-16, 1e-20) > 0.0
    # a Gaussian event's charge is never below the true ε either (what the ledger records)
    sigma_too_small = 8.94237e12  # the audit's σ for ε = 1e-12, δ = 1e-50
    assert GaussianEvent(sigma_too_small).epsilon(1e-50) > 1e-12


def test_gdp_delta_is_accurate_for_tiny_mu():
    """Relative error ≤ 1e-10 against mpmath where δ(ε) ≥ 1e-300 (measured ≤ 5e-12): the
    two-term form had no correct digit for μ ≲ 1e-8 (its terms cancel)."""
    worst = 0.0
    for mu in [1e-16, 1e-13, 1e-10, 1e-7, 1e-4, 1e-2, 0.3, 0.5, 0.7, 2.0]:
        for t in [0.0, 0.3, 1.0, 2.9, 3.1, 5.0, 10.0, 20.0, 35.0]:
            exact = _delta_exact(mu, t * mu)
            if exact < mpmath.mpf("1e-300"):
                continue
            worst = max(worst, abs(float((gdp_delta(mu, t * mu) - exact) / exact)))
    assert worst <= 1e-10


def test_the_delta_certificate_is_never_true_when_false():
    """Where the old certificate's two terms rounded to ``b ≥ a`` it returned True ("the true
    δ is 0 there"), and elsewhere it capped its margin at ½: for μ = 1e-13 it certified
    δ(ε) ≤ δ at a δ a thousand times below the exact δ(ε)."""
    for mu in [1e-15, 1e-13, 1e-11, 1e-9]:
        for t in [0.5, 3.0, 12.0, 30.0]:
            exact = _delta_exact(mu, t * mu)
            assert not _gdp_delta_certified(mu, t * mu, float(exact) * (1.0 - 1e-9))
            assert _gdp_delta_certified(mu, t * mu, float(exact) * (1.0 + 1e-9))


# ============================================================================================
# V3: a copy of a ledger is an independent budget
# ============================================================================================
def test_a_shallow_copy_does_not_share_the_history(tmp_path):
    """copy.copy shared the entries list: the original's history and summary listed the
    copy's release, which its totals did not count.  Deep copies and pickles are unchanged;
    a PersistentLedger's copy still shares its file (the file is the state)."""
    z = 3.7306 * 2
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    ledger.spend(GaussianEvent(z), label="a")
    for clone in (copy.copy(ledger), copy.deepcopy(ledger), pickle.loads(pickle.dumps(ledger))):
        assert [e.label for e in clone.history] == ["a"]
        assert clone.spent_epsilon == ledger.spent_epsilon
        clone.spend(GaussianEvent(z), label="b (on the copy)")
        assert [e.label for e in clone.history] == ["a", "b (on the copy)"]
        assert [e.label for e in ledger.history] == ["a"]
        assert "b (on the copy)" not in ledger.summary()
        assert len(ledger.to_metadata()["entries"]) == 1
    ledger.spend(GaussianEvent(z), label="c")
    assert [e.label for e in ledger.history] == ["a", "c"]

    persistent = PersistentLedger(tmp_path / "l.db", dataset_fingerprint("stop 43"), 1.0)
    persistent.spend(GaussianEvent(z), label="a")
    twin = copy.copy(persistent)
    twin.spend(GaussianEvent(z), label="b")
    assert [e.label for e in persistent.history] == ["a", "b"]
    assert persistent.spent_epsilon == twin.spent_epsilon


# ============================================================================================
# V4: counts, dimensions and huge noise multipliers
# ============================================================================================
BAD_DIMS = [True, np.True_, np.complex128(1), np.timedelta64(3), 1e308, 2**60]


@pytest.mark.parametrize("dim", BAD_DIMS, ids=repr)
def test_the_noise_calibration_refuses_a_dimension_that_is_not_a_count(dim):
    """``int(dim) != dim`` let booleans, complex numbers, durations and 1e308 through (the
    latter computed a 309-digit integer sensitivity); ``check_count`` refuses them, and a
    dimension above 2**53 is refused as no vector of that length exists."""
    with pytest.raises(ValueError, match="dim"):
        secure_plan(1.0, 1e-5, 1.0, dim)
    with pytest.raises(ValueError, match="dim"):
        plan_discrete_gaussian(1.0, dim, 0.1)
    with pytest.raises(ValueError, match="dim"):
        integer_sensitivity(1.0, 2.0**-20, dim)


def test_whole_number_dimensions_are_still_accepted():
    """The package-wide rule of ``check_count``: 3, np.int64(3), np.array(3) and 3.0 are the
    count 3; 1.5, 0, -2 and "3" stay refused (they were before)."""
    plans = [secure_plan(1.0, 1e-5, 1.0, d) for d in (3, np.int64(3), np.array(3), 3.0)]
    assert {p.dim for p in plans} == {3} and all(type(p.dim) is int for p in plans)
    for dim in (1.5, 0, -2, "3", np.timedelta64(3)):  # the duration: accepted by the old code
        with pytest.raises(ValueError, match="dim"):
            secure_plan(1.0, 1e-5, 1.0, dim)


def test_a_duration_is_not_a_count():
    """np.timedelta64 is a NumPy integer: GaussianEvent(count=np.timedelta64(7)) had count 7."""
    with pytest.raises(ValueError, match="count"):
        GaussianEvent(2.0, count=np.timedelta64(7))
    with pytest.raises(ValueError, match="k must be"):
        GaussianEvent(2.0).repeat(np.timedelta64(5))
    with pytest.raises(ValueError, match="count"):
        ZCDPEvent(0.1, count=np.timedelta64(2))
    assert GaussianEvent(2.0, count=np.int64(7)).count == 7


@pytest.mark.parametrize("z", [1e160, 1.35e154, 1e-170, 5e-324])
def test_a_noise_multiplier_whose_square_is_not_a_float_is_a_clear_error(z):
    """GaussianEvent(1e160) was built, and every use raised OverflowError (z**2); 1e-170
    raised ZeroDivisionError.  Now ValueError at construction; 1e154 and 1e-154 still work."""
    with pytest.raises(ValueError, match="noise_multiplier must lie in"):
        GaussianEvent(z)
    for ok in (1e154, 1e-154):
        ledger = Ledger(epsilon=None, delta=1e-5)
        ledger.spend(GaussianEvent(ok))
        assert ledger.spent_epsilon >= 0.0


# ============================================================================================
# Review of the stop-43 diff
# ============================================================================================
def test_two_threads_forking_at_once_leave_no_ledger_lock_held():
    """Each fork's hook cleared the one list of held locks: with two forks at once a ledger's
    lock stayed held for ever and every later spend hung (run in a subprocess: it hangs)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import os, threading, time
        from pm_dpgp.accounting import ledger as L
        a, b = L.Ledger(1.0, 1e-5), L.Ledger(1.0, 1e-5)
        first, second = list(L._LIVE_LEDGERS)[:2]
        def busy():
            with second._lock:
                time.sleep(1.0)
        def forker(delay):
            time.sleep(delay)
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        ts = [threading.Thread(target=busy, daemon=True),
              threading.Thread(target=forker, args=(0.1,), daemon=True),
              threading.Thread(target=forker, args=(0.3,), daemon=True)]
        for t in ts:
            t.start()
        time.sleep(3.0)
        print(first._lock.locked(), ts[2].is_alive(), first._lock.acquire(timeout=1.0))
        os._exit(0)
        """
    )
    if not hasattr(os, "fork"):
        pytest.skip("POSIX fork")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "True"], out.stdout + out.stderr


def test_totals_pickled_before_stop_43_count_opaque_events():
    """The counters were rebuilt for old pickles except n_opaque: the user event left the
    "rdp" bound again (0.236 where the event alone costs 6)."""
    from pm_dpgp.accounting.ledger import _Totals

    ledger = Ledger(None, 1e-5, filter="fixed")
    ledger.spend(GaussianEvent(5.0))
    ledger.spend(_OtherAccountant(6.0))
    fresh = ledger._totals
    counters = ("n_events", "n_zcdp", "n_pure", "n_approx", "n_opaque")
    old = {k: v for k, v in vars(fresh).items() if not k.startswith("_") and k not in counters}
    restored = _Totals.__new__(_Totals)
    restored.__setstate__(old)
    assert restored.n_opaque == 1
    assert restored.bounds(1e-5, ledger.orders)["rdp"] == math.inf


def test_old_totals_count_an_opaque_event_beyond_the_kept_events():
    """The counters of an old pickle are counted over every event, not over the first 65
    that the totals keep (the opaque event was counted after the cut)."""
    from pm_dpgp.accounting.ledger import _Totals

    old = vars(_Totals.empty(3)).copy()
    for key in ("n_events", "n_zcdp", "n_pure", "n_approx", "n_opaque"):
        old.pop(key, None)
    old["events"] = (GaussianEvent(50.0),) * 100 + (_OtherAccountant(6.0),)
    restored = _Totals.__new__(_Totals)
    restored.__setstate__(old)
    assert (restored.n_events, restored.n_opaque, len(restored.events)) == (101, 1, 65)


def test_gdp_epsilon_at_a_tiny_mu_converges():
    """Brent's method bisected a flat bracket from 1 down to a root near 1e-154 and ran out
    of iterations (RuntimeError) once its absolute tolerance was 1e-300."""
    eps = gdp_epsilon(2.14e-154, 6.1e-157)
    assert 0.0 < eps < 1e-150
    assert _gdp_delta_certified(2.14e-154, eps, 6.1e-157)


def test_a_noise_multiplier_whose_mu_squared_overflows_is_refused():
    """Between about 1e-162 and 1e-154 z**2 is subnormal and count / z**2 overflows: the
    event was built and its epsilon raised scipy's 'function value at x=inf is NaN'."""
    for z in (1e-155, 1e-160, 1e-161):
        with pytest.raises(ValueError, match="noise_multiplier must lie"):
            GaussianEvent(z)
