"""DP Thompson sampling: adaptive composition, budget stop, reproducibility, regret ordering."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import BUDGET_RTOL, Ledger
from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import group_names
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound
from pm_dpgp.workflow import dp_thompson_sampling, random_search

DELTA = 1e-5
X0 = np.array([[0.1], [0.5], [0.9]])
COV = pm.gp.cov.ExpQuad(1, ls=0.2)
pytestmark = pytest.mark.usefixtures("one_blas_thread")


def f_true(x: np.ndarray) -> np.ndarray:
    """An easy 1-D objective in [-0.8, 0.8], maximum 0.8 at x = 0.7."""
    return 1.6 * np.exp(-0.5 * ((x - 0.7) / 0.2) ** 2) - 0.8


def objective(seed: int):
    rng = np.random.default_rng(seed)
    return lambda X: f_true(X[:, 0]) + 0.05 * rng.standard_normal(len(X))


def _run(seed: int = 0, budget: float = 100.0, n_rounds: int = 8, **kw):
    kw.setdefault("noise_sd", 2.0)
    return dp_thompson_sampling(
        objective(seed + 1000),
        COV,
        domain=(0.0, 1.0),
        X_init=X0,
        n_rounds=n_rounds,
        y_bounds=(-1.0, 1.0),
        ledger=Ledger(epsilon=budget, delta=DELTA),
        candidates=64,
        progressbar=False,
        rng=np.random.default_rng(seed),
        **kw,
    )


@pytest.fixture(scope="module")
def run():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run(seed=3, n_rounds=8, refine_steps=2)


def _round_bound(n: int, kappa: float) -> SamplePathBound:
    """The sample-path bound the loop charges for a round on ``n`` points (σ=1, r=2, |y|≤1)."""
    return SamplePathBound(
        n=n, kernel_scale=1.0, r2=4.0, M_Y=1.0, kappa=kappa, eta=0.0, kernel_class="generic"
    )


def test_final_epsilon_is_the_composition_of_round_events(run):
    assert run.stop_reason == "completed" and run.n_rounds == 8
    fresh = Ledger(delta=DELTA)
    cumulative = []
    for ev in run.events:
        fresh.spend(ev)
        cumulative.append(fresh.epsilon())
    # bookkeeping: the replay repeats the run's ledger operations in the same order on the same
    # order grid (no BLAS, no solve), so the totals are bitwise equal; rtol=1e-12 is only a bound
    assert run.ledger.epsilon() == pytest.approx(fresh.epsilon(), rel=1e-12)
    np.testing.assert_allclose(run.idata.thompson["epsilon_cumulative"], cumulative, rtol=1e-12)
    # Each round's event is the sample-path bound of one path on the data of that round.
    for k, ev in enumerate(run.events):
        n = 3 + k
        assert int(run.idata.thompson["n_data"][k]) == n
        bound = _round_bound(n, run.idata.thompson.attrs["kappa"])
        # same public inputs (κ stored as a float64 attr, r² = 2.0²/1.0² exactly), same scalar
        # code: bitwise equal curves; rtol=1e-12 is only a bound
        np.testing.assert_allclose(ev.rdp(), bound.event(1).rdp(), rtol=1e-12)
    # Not vacuous: a replay with one round's RDP curve off by 1e-4 (relative) is rejected.
    first = run.events[0]
    bumped = dataclasses.replace(first, values=tuple(v * (1 + 1e-4) for v in first.values))
    wrong = Ledger(delta=DELTA)
    for ev in (bumped, *run.events[1:]):
        wrong.spend(ev)
    with pytest.raises(AssertionError):
        assert run.ledger.epsilon() == pytest.approx(wrong.epsilon(), rel=1e-12)
    # The per-round cost grows with n (more private records in the posterior).
    assert np.all(np.diff(run.idata.thompson["epsilon_round"].values) > 0)


def test_stops_cleanly_before_overspending():
    budget = 15.0
    res = _run(seed=0, budget=budget, n_rounds=50)
    assert res.stop_reason == "budget"
    assert 0 < res.n_rounds < 50
    # the ledger's own acceptance rule (relative slack BUDGET_RTOL), on the totals it stored
    assert res.ledger.epsilon() <= budget * (1 + BUDGET_RTOL)
    assert len(res.ledger.history) == res.n_rounds == len(res.events)
    n_next = 3 + res.n_rounds
    nxt = _round_bound(n_next, res.idata.thompson.attrs["kappa"]).event(1)
    assert not res.ledger.can_afford(nxt)
    assert res.idata.thompson.attrs["stop_reason"] == "budget"


def test_budget_too_small_for_one_round_returns_empty_trace():
    """An empty run says so (stop-31 walkthrough: it came back silently)."""
    with pytest.warns(UserWarning, match="cannot afford the first round") as rec:
        res = _run(seed=0, budget=0.5, n_rounds=5)
    assert "plan.thompson" in str(rec[0].message)
    assert res.stop_reason == "budget" and res.n_rounds == 0
    assert res.ledger.epsilon() == 0.0


def test_fixed_seed_is_reproducible(run):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _run(seed=3, n_rounds=8, refine_steps=2)
    np.testing.assert_array_equal(again.x_chosen, run.x_chosen)
    np.testing.assert_array_equal(again.owner.y, run.owner.y)
    np.testing.assert_array_equal(
        again.idata.thompson["epsilon_cumulative"], run.idata.thompson["epsilon_cumulative"]
    )


def test_published_trace_holds_no_observed_values(run):
    private_y = run.owner.y
    # leak-detection threshold (larger is stricter): the library default 1e-9 also catches
    # copies that went through a few float64 operations; honest DP outputs come nowhere near
    assert scan_for_values(run.idata, private_y, rtol=1e-9) == []
    assert "y" not in run.idata.thompson and "observed_data" not in group_names(run.idata)
    # The chosen inputs are in the trace, the queries of the owner record match them.
    np.testing.assert_array_equal(run.owner.X[3:], run.x_chosen)
    assert np.all((run.x_chosen >= 0) & (run.x_chosen <= 1))


def test_interrupt_returns_completed_rounds():
    calls = {"n": 0}
    base = objective(7)

    def flaky(X):
        calls["n"] += 1
        if calls["n"] == 4:  # init + 2 rounds, then Ctrl-C during the third observation
            raise KeyboardInterrupt
        return base(X)

    res = dp_thompson_sampling(
        flaky,
        COV,
        domain=(0.0, 1.0),
        X_init=X0,
        n_rounds=10,
        noise_sd=2.0,
        y_bounds=(-1.0, 1.0),
        ledger=Ledger(epsilon=100.0, delta=DELTA),
        candidates=32,
        progressbar=True,
        rng=np.random.default_rng(0),
    )
    assert res.stop_reason == "interrupted" and res.n_rounds == 2
    # The third path was released before the interrupt: it is charged (conservative).
    assert len(res.ledger.history) == 3
    assert res.idata.thompson.attrs["epsilon_spent_total"] == pytest.approx(res.ledger.epsilon())


def test_argument_checks():
    with pytest.raises(ValueError, match="Ledger"):
        dp_thompson_sampling(
            objective(0), COV, domain=(0, 1), X_init=X0, n_rounds=1, noise_sd=2.0, progressbar=False
        )
    with pytest.raises(ValueError, match="inside"):
        dp_thompson_sampling(
            objective(0),
            COV,
            domain=(0, 1),
            X_init=[[1.5]],
            n_rounds=1,
            noise_sd=2.0,
            private=False,
            progressbar=False,
        )


def test_two_dimensional_box_with_refinement():
    cov2 = pm.gp.cov.ExpQuad(2, ls=0.3)

    def f2(X):
        return np.exp(-0.5 * np.sum(((X - 0.6) / 0.25) ** 2, axis=1)) - 0.5

    res = dp_thompson_sampling(
        f2,
        cov2,
        domain=([0.0, 0.0], [1.0, 1.0]),
        X_init=[[0.2, 0.2], [0.8, 0.3]],
        n_rounds=3,
        noise_sd=2.0,
        y_bounds=(-1.0, 1.0),
        ledger=Ledger(epsilon=100.0, delta=DELTA),
        candidates=64,
        refine_steps=2,
        progressbar=False,
        rng=np.random.default_rng(1),
    )
    assert res.n_rounds == 3 and res.x_chosen.shape == (3, 2)
    assert res.idata.thompson["x_chosen"].dims == ("round", "input_dim")


def test_regret_ordering_over_seeds():
    """Easy objective: non-private TS < DP TS < random search in mean simple regret."""
    regrets = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(4):
            dp = _run(seed=seed, budget=100.0, n_rounds=20)
            R = dp.n_rounds
            npts = dp_thompson_sampling(
                objective(seed + 2000),
                COV,
                domain=(0.0, 1.0),
                X_init=X0,
                n_rounds=R,
                noise_sd=0.05,
                private=False,
                candidates=64,
                progressbar=False,
                rng=np.random.default_rng(seed),
            )
            rs = random_search(
                objective(seed + 3000),
                domain=(0.0, 1.0),
                X_init=X0,
                n_rounds=R,
                rng=np.random.default_rng(seed),
            )
            regrets.append(
                [np.mean(0.8 - f_true(o.X[o.n_init :, 0])) for o in (npts.owner, dp.owner, rs)]
            )
    mean_np, mean_dp, mean_rs = np.mean(regrets, axis=0)
    assert mean_np < mean_dp < mean_rs


def test_round_events_are_labelled_per_round_and_charged_once(run):
    """``ThompsonResult.events`` carry the round's label; the ledger holds the release's event
    with the same curve.  The round's budget check and the release's spend compose one
    shared event object once (the ledger reuses the check's composition)."""
    for k, (ev, entry) in enumerate(zip(run.events, run.ledger.history, strict=True)):
        assert ev.label == f"Thompson round path (n={3 + k})"
        assert entry.event.label == "1 GP posterior sample path(s) (Maciazek)"
        assert (ev.orders, ev.values, ev.alpha_max) == (
            entry.event.orders,
            entry.event.values,
            entry.event.alpha_max,
        )


def test_a_refused_round_stops_before_the_release_checks_or_warns():
    """A round the budget cannot afford stops the loop before the release runs: no
    ``PrivacyWarning`` for a release that never happens (the first round's ε is in the
    hundreds here, above the warning threshold); the only warning is the empty run's own."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        res = _run(seed=0, budget=5.0, n_rounds=3, noise_sd=0.2)
    assert res.stop_reason == "budget" and res.n_rounds == 0 and res.ledger.history == []
    # the only warning is the empty run's own (stop 31), none from the release
    assert [str(w.message).split(":")[0] for w in rec] == ["dp_thompson_sampling"]


def test_composition_is_reused_from_can_afford_to_spend(monkeypatch):
    """``can_afford(e)`` then ``spend(e)`` on unchanged totals add ``e`` once; any other
    event, or totals that changed in between, are composed afresh (same totals as a fresh
    ledger)."""
    from pm_dpgp.accounting import ledger as ledger_module
    from pm_dpgp.mechanisms.full.sample_path import sample_path_event

    calls = []
    add = ledger_module._Totals.add
    monkeypatch.setattr(
        ledger_module._Totals, "add", lambda self, e, o: calls.append(e) or add(self, e, o)
    )
    e1, e2 = (sample_path_event(_round_bound(n, 0.3), 1) for n in (5, 6))
    led = Ledger(delta=DELTA)
    assert led.can_afford(e1)
    led.spend(e1)
    assert len(calls) == 1  # composed once for the check and the spend
    assert led.can_afford(e2)
    led.spend(e1)  # another event than the one checked: composed afresh
    assert len(calls) == 3
    fresh = Ledger(delta=DELTA)
    fresh.spend(e1)
    fresh.spend(e1)
    assert led.epsilon() == fresh.epsilon() and led.filter_epsilon == fresh.filter_epsilon


def test_a_given_kappa_is_checked_once_before_any_spend(run):
    """Stop-26 review: the loop's κ is checked against the proved value once, before the first
    round (each round's release then trusts it instead of re-evaluating the kernel); a κ above
    the proved minimum of the kernel on the box is refused before anything is spent."""
    kappa = run.idata.thompson.attrs["kappa"]
    with pytest.raises(ValueError, match="proved lower bound"):
        _run(kappa=min(1.0, kappa * 1.01 + 1e-6))
    res = _run(seed=3, n_rounds=8, refine_steps=2, kappa=kappa)
    np.testing.assert_array_equal(
        res.idata.thompson["x_chosen"].values, run.idata.thompson["x_chosen"].values
    )


def test_random_search_checks_its_public_inputs_as_the_loops_do():
    """Stop-34 audit: ``n_rounds=2.7`` ran 2 rounds, ``-1`` failed inside NumPy and an initial
    input outside the box was accepted.  Each is now refused before the objective is called;
    a valid call makes exactly ``n_rounds`` uniform queries inside the box."""
    calls = []

    def spy(X):
        calls.append(len(X))
        return np.zeros(len(X))

    X0 = np.array([[0.2], [0.8]])
    for bad in (2.7, -1, None):
        with pytest.raises(ValueError, match="n_rounds"):
            random_search(spy, domain=(0.0, 1.0), X_init=X0, n_rounds=bad)
    with pytest.raises(ValueError, match="inside the public domain"):
        random_search(spy, domain=(0.0, 1.0), X_init=[[1.5]], n_rounds=3)
    assert calls == []
    rec = random_search(spy, domain=(0.0, 1.0), X_init=X0, n_rounds=5, rng=np.random.default_rng(0))
    assert rec.X.shape == (7, 1) and np.all((rec.X >= 0.0) & (rec.X <= 1.0))
