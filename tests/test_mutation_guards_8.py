"""Stop-36 mutation testing, round 8: kill tests for the code changed in stop 36.

An independent helper applied 96 edits to the day's changes (the default rank cut of cloaked
and classification releases and its plans, the binning guards, ``float_array``, ``zcdp_rho``,
the recomputed ledger totals and the persistent ledger's stop-36 changes); 52 were caught by
the existing tests, 44 passed them, 11 of those equivalent.  Each test below fails under the
mutant named in its docstring (T…: truncation.py, C…: cloaking_release.py, K…:
classification.py, P…: plan.py, B…: binning.py, L…: ledger.py, S…: persistent.py) and passes
on the correct code.
"""

from __future__ import annotations

import sqlite3
import warnings
from contextlib import closing

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import GaussianEvent, LaplaceEvent, Ledger
from pm_dpgp.accounting.persistent import (
    LedgerIntegrityError,
    PersistentLedger,
    dataset_fingerprint,
)
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.mechanisms.label import binning
from pm_dpgp.mechanisms.label import cloaking_release as cloaking_release_module
from pm_dpgp.mechanisms.label.binning import Bins, binned_release, make_bins
from pm_dpgp.mechanisms.label.classification import classification_release
from pm_dpgp.mechanisms.label.truncation import TruncationSetting
from pm_dpgp.models import gp_classification, gp_regression
from tests.test_binning import dense_bins
from tests.test_persistent_ledger_guards import rewrite_stored_entries

FP = dataset_fingerprint("stop-36 mutation round")
X_BIN = np.linspace(0.0, 10.0, 40)[:, None]  # 8 inputs in each of the 5 bins of EDGES
Y_BIN = np.sin(X_BIN[:, 0])
EDGES = np.linspace(0.0, 10.0, 6)


def _setting(**kw) -> TruncationSetting:
    base = {"epsilon": 1.0, "delta": 1e-5, "n": 50, "m": 20, "y_bounds": (-2.0, 2.0),
            "prior_mean": 0.0}  # fmt: skip
    return TruncationSetting(**{**base, **kw})


# ----------------------------------------------------------------------- the rank rule
def test_T03_the_cut_is_clamped_at_1e_minus_2() -> None:
    """T03: ``RANK_TOL_CEILING = 1e-1`` (the existing test compares with the constant itself)."""
    huge_noise = _setting(epsilon=1e-3, delta=1e-3, n=2, m=10, y_bounds=(0.0, 1.0), prior_mean=0.5)
    assert huge_noise.auto_rank_tol() == 1e-2
    assert huge_noise.cut("auto").rank_tol == 1e-2


def test_T08_R_takes_the_farther_bound_also_below_the_centre() -> None:
    """T08: ``R`` from ``|lower − μ|`` only (the existing off-centre case has μ above the
    centre, where that is the larger distance)."""
    centred = _setting(n=3000, m=5041).auto_rank_tol()
    below = _setting(n=3000, m=5041, prior_mean=-1.0).auto_rank_tol()  # |upper − μ| = 3
    assert below == pytest.approx(centred * 2.0 / 3.0, rel=1e-12)


def test_T17_a_non_finite_bound_ratio_falls_back_to_the_floor() -> None:
    """T17: a non-finite ``unit`` returning the ceiling (the coarsest cut) instead of the floor:
    bounds ±8e307 pass ``check_public_bounds`` but ``R = √n · 8e307`` overflows."""
    setting = _setting(n=10, m=5, y_bounds=(-8e307, 8e307))
    assert setting.auto_rank_tol() == 1e-10
    assert setting.cut("auto").rank_tol == 1e-10


def _small_regression():
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 6.0, 40)
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(40), -1.5, 2.5)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.2), noise_sd=0.3, mean=0.5)


def test_T27_C03_the_recorded_bias_ratio_is_bound_3_at_the_cut_used() -> None:
    """T27: a given ``rank_tol`` recorded with the ratio ``η`` instead of bound (3) at it;
    C03: the cloaked release recording bound (3) at another ``rank_tol`` (both within η, so
    the ``≤ η`` check passes)."""
    setting = _setting()
    assert setting.cut(1e-6).bias_ratio == pytest.approx(setting.ratio(1e-6), rel=1e-15)
    model = _small_regression()
    X_star = np.linspace(0.0, 6.0, 15)[:, None]
    kw = {"epsilon": 1.0, "delta": 1e-5, "y_bounds": (-1.5, 2.5), "bounds_are_public": True}
    release_setting = TruncationSetting(1.0, 1e-5, 40, 15, (-1.5, 2.5), 0.5)
    for rank_tol in ("auto", 1e-6):
        md = cloaked_release(
            model, X_star, rng=np.random.default_rng(0), rank_tol=rank_tol, **kw
        ).metadata
        expected = release_setting.ratio(md["rank_tol"])
        assert md["truncation_bias_ratio"] == pytest.approx(expected, rel=1e-12)
    assert md["rank_tol"] == 1e-6 and md["rank_rule"] == "given"


def test_K03_K04_classification_records_a_given_cut() -> None:
    """K03: the classification release recording ``rank_rule="auto"`` for a given
    ``rank_tol``; K04: its ``truncation_bias_ratio`` not bound (3) at the cut used."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3.0, 3.0, (40, 1))
    t = (np.sin(X[:, 0]) + 0.3 * rng.standard_normal(40) > 0).astype(float)
    gpc = gp_classification(X, t, 2.0 * pm.gp.cov.ExpQuad(1, ls=1.0))
    X_star = np.linspace(-3.0, 3.0, 12)[:, None]
    md = classification_release(
        gpc, X_star, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0), rank_tol=1e-6
    ).metadata
    assert md["rank_rule"] == "given" and md["rank_tol"] == 1e-6
    setting = TruncationSetting(1.0, 1e-5, 40, 12, (0.0, 1.0), 0.0)
    assert md["truncation_bias_ratio"] == pytest.approx(setting.ratio(1e-6), rel=1e-12)


def test_P02_the_plan_uses_n_training_and_m_test_inputs(monkeypatch) -> None:
    """P02: ``plan.cloaked`` building the setting with ``n`` and ``m`` swapped (with 25 inputs
    and 30 test points the kept rank, hence the compared noise, did not change).  Since the
    review of stop 36 the cut is resolved once, in ``cloaking_parts``; the spy sees the
    tolerance the solver gets from the plan and from the release."""
    seen = []
    real = cloaking_release_module.solve_noise_covariance

    def spy(*args, **kw):
        seen.append(kw["rank_tol"])
        return real(*args, **kw)

    monkeypatch.setattr(cloaking_release_module, "solve_noise_covariance", spy)
    model = _small_regression()
    X_star = np.linspace(0.0, 6.0, 90)[:, None]
    kw = {"epsilon": 1.0, "delta": 1e-5, "y_bounds": (-1.5, 2.5)}
    plan.cloaked(model, X_star, secure=False, **kw)
    cloaked_release(model, X_star, bounds_are_public=True, rng=np.random.default_rng(0), **kw)
    expected = TruncationSetting(1.0, 1e-5, 40, 90, (-1.5, 2.5), 0.5).auto_rank_tol()
    assert seen == [expected, expected]


# ----------------------------------------------------------------------------- binning
def test_P05_P06_a_binned_plan_checks_the_label_privacy_model() -> None:
    """P05: ``BinnedPlan.privacy_model = "full"`` (a ledger of label releases refused);
    P06: ``None`` (a ledger of full-privacy releases accepted, which the release refuses)."""
    bins = make_bins(EDGES)
    p = plan.binned(X_BIN, bins, epsilon=0.5, y_bounds=(-1.0, 1.0), secure=False)
    label = Ledger(epsilon=10.0)
    binned_release(X_BIN, Y_BIN, bins, epsilon=0.5, y_bounds=(-1.0, 1.0), ledger=label,
                   rng=np.random.default_rng(0))  # fmt: skip
    assert p.fits_in(label)
    full = Ledger(epsilon=10.0)
    full.spend(LaplaceEvent(10.0), privacy_model="full")
    assert not p.fits_in(full)
    with pytest.raises(ValueError):
        binned_release(X_BIN, Y_BIN, bins, epsilon=0.5, y_bounds=(-1.0, 1.0), ledger=full,
                       rng=np.random.default_rng(0))  # fmt: skip


@pytest.mark.parametrize("edges", [[EDGES], ()], ids=["a list", "empty"])
def test_B01_B02_bins_need_a_non_empty_tuple(edges) -> None:
    """B01: a list of edge arrays accepted by ``Bins(...)``; B02: ``Bins(())`` accepted (a
    zero-dimensional grid of one bin)."""
    with pytest.raises(ValueError, match="non-empty tuple"):
        Bins(edges)


def test_B03_make_bins_leaves_the_callers_array_alone() -> None:
    """B03: the checked edges not copied: the caller's float64 array was made read-only and
    shared with the (public, recorded) bins."""
    edges = np.linspace(0.0, 1.0, 5)
    bins = make_bins(edges)
    assert edges.flags.writeable
    edges[0] = -1.0
    assert bins.edges[0][0] == 0.0


def test_B23_make_bins_of_an_empty_list_is_a_clear_error() -> None:
    """B23: ``edges and`` dropped from ``make_bins``'s 1-D test: ``make_bins([])`` an
    ``IndexError``."""
    with pytest.raises(ValueError, match="at least one dimension"):
        make_bins([])


def test_B08_B09_the_plan_refuses_scales_beyond_float64() -> None:
    """B08: the check of the simulation scale ``Δ/ε`` dropped from ``binning_noise`` (the plan
    returned infinite scales); B09: the check of the secure scale dropped (it exceeds ``Δ/ε``
    by ≈ 2γ, here past the limit where ``Δ/ε`` is not).  Since the stop-36 review the plan
    also counts the public offset ``|c| + d/2 = d`` (as the release always did), so the limit
    is ``41 d < 1e300``."""
    bins = make_bins(EDGES)
    with pytest.raises(ValueError, match="beyond float64"):
        plan.binned(X_BIN, bins, epsilon=1e-308, y_bounds=(-1.0, 1.0), secure=False)
    one = make_bins(np.array([0.0, 1.0]))
    bounds = (0.0, 1e300 / 41.0 * (1.0 - 1e-7))  # one input: Δ = d, d + 40 Δ/ε just below
    plan.binned(np.array([[0.5]]), one, epsilon=1.0, y_bounds=bounds, secure=False)
    with pytest.raises(ValueError, match="beyond float64"):
        plan.binned(np.array([[0.5]]), one, epsilon=1.0, y_bounds=bounds, secure=True)


@pytest.mark.parametrize(
    ("y_bounds", "epsilon"),
    [((0.0, 1e300), 100.0), ((-2e299, 2e299), 1.0)],
    ids=["public offset", "forty scales"],
)
def test_B10_to_B14_released_values_stay_below_1e300(y_bounds, epsilon) -> None:
    """B10: the release's own check (scale plus the public offset) dropped; B13: its offset
    dropped; B14: the offset without ``d/2`` (first case: |c| + d/2 = 1e300 with 40 b = 5e298);
    B11: ``_TAIL_SCALES = 1``; B12: the limit 1e308 (second case: 40 b = 2e300)."""
    ledger = Ledger(epsilon=1e9, delta=1e-5)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        with pytest.raises(ValueError, match="beyond float64"):
            binned_release(X_BIN, Y_BIN, make_bins(EDGES), epsilon=epsilon, y_bounds=y_bounds,
                           bounds_are_public=True, ledger=ledger, rng=rng)  # fmt: skip
    assert ledger.spent_epsilon == 0.0 and not ledger.history
    assert rng.bit_generator.state == state


class _NumpyWithoutZeros:
    """``numpy`` whose ``zeros`` fails: the noise factor's allocation (the only ``np.zeros``
    of ``binned_release``) runs out of memory."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def zeros(*args, **kw):
        raise MemoryError("simulated: the noise factor")


def test_B18_the_noise_factor_is_built_before_the_spend(monkeypatch) -> None:
    """B18: the noise factor allocated after the spend (the existing test fails the bin
    centres only)."""
    monkeypatch.setattr(binning, "np", _NumpyWithoutZeros())
    ledger = Ledger(epsilon=10.0)
    with pytest.raises(MemoryError, match="noise factor"):
        binned_release(X_BIN, Y_BIN, make_bins(EDGES), epsilon=1.0, y_bounds=(-1.0, 1.0),
                       ledger=ledger, rng=np.random.default_rng(0))  # fmt: skip
    assert ledger.spent_epsilon == 0.0 and not ledger.history


def test_B19_B20_the_noise_factor_has_one_column_per_occupied_bin() -> None:
    """B19: the columns ``b_j`` instead of ``√2 b_j`` (Laplace variance 2b²); B20: a column
    for every bin (the zero columns of empty bins are back)."""
    X = np.concatenate([X_BIN[:16], X_BIN[-8:]])  # bins 0, 1 and 4 occupied
    y = np.sin(X[:, 0])
    rel = binned_release(X, y, make_bins(EDGES), epsilon=1.0, y_bounds=(-1.0, 1.0),
                         rng=np.random.default_rng(0))  # fmt: skip
    scale = np.asarray(dense_bins(rel)[1])
    F = np.asarray(rel.noise_factor)
    assert F.shape == (5, 3)
    np.testing.assert_allclose(F @ F.T, np.diag(2.0 * scale**2), rtol=1e-14, atol=0.0)


# ---------------------------------------------------------------------- the ledgers
def test_L02_bound_used_is_recomputed_from_the_events(tmp_path) -> None:
    """L02: ``bound_used`` read from the last entry's stored bound (the existing test rewrites
    only the stored cumulative ε, whose bound name stays right)."""
    path = tmp_path / "l.db"
    ledger = PersistentLedger(path, FP, epsilon=10.0)
    for _ in range(2):
        ledger.spend(GaussianEvent(noise_multiplier=4.0))
    replay = Ledger(epsilon=10.0)
    for _ in range(2):
        replay.spend(GaussianEvent(noise_multiplier=4.0))
    assert replay.bound_used != "basic"
    rewrite_stored_entries(path, bound="basic")
    assert PersistentLedger(path, FP).bound_used == replay.bound_used


def test_S03_a_recreated_ledger_row_matching_the_recorded_head_is_accepted(tmp_path) -> None:
    """S03: every new ledger refused when ``expected_head`` is given, also when it is the
    genesis the file re-creates (ledger row lost before any spend, salt kept: nothing is
    missing)."""
    path = tmp_path / "l.db"
    head = PersistentLedger(path, FP, epsilon=1.0).head_hash
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM ledgers")
    reopened = PersistentLedger(path, FP, epsilon=1.0, expected_head=head)
    assert reopened.head_hash == head and reopened.spent_epsilon == 0.0


def test_S04_a_small_recomputation_difference_warns(tmp_path) -> None:
    """S04: the stored and recomputed totals compared at ``rel_tol=1e-3`` (a relative 1e-6
    difference, e.g. a tighter conversion, opened silently)."""
    path = tmp_path / "l.db"
    ledger = PersistentLedger(path, FP, epsilon=10.0)
    ledger.spend(GaussianEvent(noise_multiplier=4.0))
    spent = ledger.spent_epsilon
    rewrite_stored_entries(path, cumulative_epsilon=spent * (1.0 + 1e-6))
    with pytest.warns(PrivacyWarning, match="version that wrote it recorded"):
        PersistentLedger(path, FP)


def test_S05_totals_below_1e_minus_12_are_not_a_difference(tmp_path) -> None:
    """S05: ``abs_tol`` dropped: a history recorded at 5e-13 (basic composition) that this
    version's RDP conversion composes to 0 (its total-variation case) warned."""
    path = tmp_path / "l.db"
    ledger = PersistentLedger(path, FP, epsilon=10.0)
    ledger.spend(LaplaceEvent(2e12))  # ε = 5e-13
    assert ledger.spent_epsilon == 0.0
    rewrite_stored_entries(path, cumulative_epsilon=5e-13)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        PersistentLedger(path, FP)


@pytest.mark.parametrize("overshoot", [0.0, 5e-10], ids=["exactly the budget", "within slack"])
def test_S07_S08_a_history_at_the_budget_opens_silently(tmp_path, overshoot) -> None:
    """S07: the over-budget warning without the ledger's slack ``BUDGET_RTOL`` (a history the
    ledger accepted warned); S08: ``>=`` (a history spending exactly the budget warned)."""
    path = tmp_path / "l.db"
    ledger = PersistentLedger(path, FP, epsilon=1.0)
    ledger.spend(LaplaceEvent(1.0 / (1.0 + overshoot)))
    assert ledger.filter_epsilon == pytest.approx(1.0 + overshoot, rel=0.0, abs=1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        PersistentLedger(path, FP)


def test_S12_S13_a_locked_file_is_not_an_integrity_error(tmp_path) -> None:
    """S12 / S13: every ``sqlite3.DatabaseError``, also "database is locked"
    (``OperationalError``), turned into ``LedgerIntegrityError`` ("restore it from a trusted
    copy" for a file another process is writing)."""
    path = tmp_path / "l.db"
    PersistentLedger(path, FP, epsilon=1.0)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError, match="locked") as info:
            PersistentLedger(path, FP, timeout=0.05)
        assert not isinstance(info.value, LedgerIntegrityError)
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_S15_the_recomputation_warning_points_at_the_caller(tmp_path) -> None:
    """S15: ``stacklevel=2``: the warning attributed to ``persistent.py`` instead of the line
    that opened the ledger."""
    path = tmp_path / "l.db"
    PersistentLedger(path, FP, epsilon=10.0).spend(GaussianEvent(noise_multiplier=4.0))
    rewrite_stored_entries(path, cumulative_epsilon=0.01)
    with pytest.warns(PrivacyWarning, match="version that wrote it recorded") as record:
        PersistentLedger(path, FP)
    assert record[0].filename == __file__
