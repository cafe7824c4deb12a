"""Stop-49 audit of the workflow layer.

* The tree Thompson loop (``dp_thompson_sampling_tree``) charges its whole run before round 1;
  an error after that charge other than the objective's (a round's posterior, its sample or
  maximisation, building the counter) was raised as it was, so the completed rounds and the
  run's charge were lost while the ledger kept the charge; a Ctrl-C while the counter was
  built escaped as a bare ``KeyboardInterrupt``.  Now, as in the sample-path loop (stop 48),
  such an error is a ``ReleaseError`` holding the completed rounds and the run's event, and a
  Ctrl-C anywhere after the charge returns them (``stop_reason="interrupted"``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pm_dpgp.workflow.thompson_tree as tt
from pm_dpgp.accounting import Ledger
from pm_dpgp.compat import get_group
from pm_dpgp.workflow import ReleaseError, dp_thompson_sampling_tree


# ------------------------------------------------------------------- tree Thompson loop
def _failing(monkeypatch, name: str, failing: BaseException, at: int) -> None:
    """Make the ``at``-th call of ``thompson_tree.<name>`` raise ``failing``."""
    original, calls = getattr(tt, name), {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at:
            raise failing
        return original(*args, **kwargs)

    monkeypatch.setattr(tt, name, wrapped)


def _tree_loop(**kw):
    """A 5-round tree loop; a ``KeyboardInterrupt`` escaping it fails the test (not the session)."""
    ledger = Ledger(5.0, 1e-5)
    settings = {
        "domain": (0, 1),
        "X_init": [[0.1], [0.5], [0.9]],
        "n_rounds": 5,
        "noise_sd": 0.5,
        "ledger": ledger,
        "epsilon": 2.0,
        "inducing": 6,
        "candidates": 16,
        "progressbar": False,
        "rng": np.random.default_rng(0),
    }
    try:
        result = dp_thompson_sampling_tree(
            lambda X: np.sin(6 * X[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), **{**settings, **kw}
        )
    except KeyboardInterrupt:
        pytest.fail(f"a KeyboardInterrupt escaped the charged run ({len(ledger.history)} charge)")
    return result, ledger


def _replayed(events) -> float:
    replay = Ledger(5.0, 1e-5)
    for event in events:
        replay.spend(event)
    return replay.epsilon()


@pytest.mark.parametrize(
    "name, kw",
    [
        ("all_releases_posterior", {}),
        ("public_inputs_posterior", {"privacy_model": "label", "posterior": "prefix"}),
        ("dp_qu", {"posterior": "prefix"}),
        ("posterior_root", {}),
        ("_maximise", {}),
    ],
)
def test_a_tree_round_failing_after_the_charge_keeps_the_completed_rounds(monkeypatch, name, kw):
    _failing(monkeypatch, name, RuntimeError("boom"), at=3)
    with pytest.raises(ReleaseError, match="round 3 .*stop_reason='release_error'") as info:
        _tree_loop(**kw)
    res = info.value.result
    assert isinstance(info.value.__cause__, RuntimeError)
    assert res.stop_reason == "release_error" and res.n_rounds == 2
    trace = get_group(res.idata, "thompson")
    assert trace.attrs["stop_reason"] == "release_error" and trace.sizes["round"] == 2
    assert len(res.owner.y) == 3 + 2
    assert len(res.events) == len(res.ledger.history) == 1
    assert _replayed(res.events) == pytest.approx(res.ledger.epsilon(), rel=1e-12)


def test_the_tree_counter_failing_after_the_charge_is_a_release_error(monkeypatch):
    _failing(monkeypatch, "TreeAggregator", MemoryError(), at=1)
    with pytest.raises(ReleaseError, match="round 1 ") as info:
        _tree_loop()
    res = info.value.result
    assert res.n_rounds == 0 and res.stop_reason == "release_error"
    assert len(res.events) == len(res.ledger.history) == 1


def test_a_ctrl_c_while_the_tree_counter_is_built_returns_the_charged_run(monkeypatch):
    _failing(monkeypatch, "TreeAggregator", KeyboardInterrupt(), at=1)
    res, ledger = _tree_loop()
    assert res.stop_reason == "interrupted" and res.n_rounds == 0
    assert len(res.events) == len(ledger.history) == 1
    assert _replayed(res.events) == pytest.approx(ledger.epsilon(), rel=1e-12)


def test_a_ctrl_c_in_a_tree_round_returns_the_completed_rounds(monkeypatch):
    _failing(monkeypatch, "all_releases_posterior", KeyboardInterrupt(), at=3)
    res, ledger = _tree_loop()
    assert res.stop_reason == "interrupted" and res.n_rounds == 2
    assert len(res.events) == len(ledger.history) == 1
