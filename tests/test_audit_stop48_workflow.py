"""Stop-48 audit of the workflow layer (releases, dp_ppc, the sample-path Thompson loop).

* A Ctrl-C in the first evaluation of a Thompson round's released path, after the round's
  charge, left the ledger one round ahead of ``result.events`` (replayed 25.19 against 34.99
  charged); any other error there (or in the refinement's evaluations) was raised as it was,
  and the completed rounds were lost, instead of a ``ReleaseError`` holding them.
* ``dp_ppc(n_draws=...)`` ignored ``n_draws`` silently for a release with its own draws.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pm_dpgp.mechanisms.full.sample_path as sp
from pm_dpgp.accounting import Ledger
from pm_dpgp.workflow import dp_ppc, dp_thompson_sampling
from pm_dpgp.workflow.thompson import ReleaseError


# ------------------------------------------------------------------------ Thompson loop
def _loop(failing: BaseException, at: int, **kw):
    """A 4-round sample-path loop whose ``at``-th evaluation of a released path fails."""
    original, calls = sp.SamplePathRelease.evaluate, {"n": 0}

    def evaluate(self, X_new):
        calls["n"] += 1
        if calls["n"] == at:
            raise failing
        return original(self, X_new)

    sp.SamplePathRelease.evaluate = evaluate
    ledger = Ledger(30.0, 1e-5)
    try:
        result = dp_thompson_sampling(
            lambda X: np.sin(6 * X[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0, 1),
            X_init=[[0.1], [0.5], [0.9]], n_rounds=4, noise_sd=2.0, y_bounds=(-1, 1),
            ledger=ledger, candidates=32, progressbar=False, rng=np.random.default_rng(0),
            **kw,
        )  # fmt: skip
    finally:
        sp.SamplePathRelease.evaluate = original
    return result, ledger


def _replayed(events) -> float:
    replay = Ledger(30.0, 1e-5)
    for event in events:
        replay.spend(event)
    return replay.epsilon()


def test_a_round_interrupted_in_its_paths_first_evaluation_is_in_the_events():
    res, ledger = _loop(KeyboardInterrupt(), at=2)
    assert res.stop_reason == "interrupted" and res.n_rounds == 1
    assert len(res.events) == len(ledger.history) == 2
    assert _replayed(res.events) == pytest.approx(ledger.epsilon(), rel=1e-12)


@pytest.mark.parametrize("refine_steps, at", [(0, 2), (2, 5)])
def test_a_path_failing_to_evaluate_after_its_charge_keeps_the_completed_rounds(refine_steps, at):
    with pytest.raises(ReleaseError, match="round 2 .*stop_reason='release_error'") as info:
        _loop(RuntimeError("boom"), at=at, refine_steps=refine_steps, refine_points=4)
    res = info.value.result
    assert isinstance(info.value.__cause__, RuntimeError)
    assert res.stop_reason == "release_error" and res.n_rounds == 1
    assert len(res.events) == len(res.ledger.history) == 2
    assert _replayed(res.events) == pytest.approx(res.ledger.epsilon(), rel=1e-12)


# ------------------------------------------------------------------ dp_ppc(n_draws=...)
@pytest.fixture(scope="module")
def every_release(small_gp):
    from tests import releases

    return {
        "cloaking": releases.label_release("cloaking", small_gp),
        "sample_path": releases.sample_path(small_gp),
        "noise_aware": releases.noise_aware(),
    }


def test_dp_ppc_says_n_draws_is_ignored_for_a_release_with_its_own_draws(every_release):
    """n_draws=500 gave a cloaking release's 2 DP draws × 100 replicates without a word; a
    loop over the release types still runs (a warning, not a refusal)."""
    X_h = np.linspace(0.5, 2.5, 5)
    for kind, release in every_release.items():
        X = X_h if kind != "cloaking" else release.X_star[:5, 0]
        kw = dict(noise_sd=0.3, training=None, n_draws=50, rng=np.random.default_rng(1))
        if kind == "noise_aware":
            with warnings.catch_warnings():
                warnings.simplefilter("error", UserWarning)
                idata = dp_ppc(release, X, np.zeros(5), **kw)
            assert idata.posterior.attrs["ppc_n_dp_draws"] == 50
            continue
        with pytest.warns(UserWarning, match=r"n_draws=50 is ignored.*carries its own"):
            idata = dp_ppc(release, X, np.zeros(5), **kw)
        assert idata.posterior.attrs["ppc_n_dp_draws"] == release.n_draws
