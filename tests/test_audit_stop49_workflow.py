"""Stop-49 audit of the workflow layer.

* The tree Thompson loop (``dp_thompson_sampling_tree``) charges its whole run before round 1;
  an error after that charge other than the objective's (a round's posterior, its sample or
  maximisation, building the counter) was raised as it was, so the completed rounds and the
  run's charge were lost while the ledger kept the charge; a Ctrl-C while the counter was
  built escaped as a bare ``KeyboardInterrupt``.  Now, as in the sample-path loop (stop 48),
  such an error is a ``ReleaseError`` holding the completed rounds and the run's event, and a
  Ctrl-C anywhere after the charge returns them (``stop_reason="interrupted"``).
* A release's ``metadata`` was a mutable dict: ``release.metadata["epsilon"] = 123`` made every
  later export say ε = 123 while the ledger held 1 (cloaking, noise-aware, Dirichlet and
  sample-path releases).  It is now read-only (nested lists and dicts too), complete when
  the release is built, and still a dict for ``json.dumps``, pickling and copying.
* ``dp_ppc`` of a Dirichlet release named its class dim ``class`` (labelled 0 … C−1) where the
  release's own export names it ``output`` (labelled ``class_0`` …): ``export_p - ppc_p``
  silently broadcast to a 3 × 7 × 3 array.  Both now use ``output`` with the export's labels.
"""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pymc as pm
import pytest

import pm_dpgp.workflow.thompson_tree as tt
from pm_dpgp.accounting import Ledger
from pm_dpgp.compat import get_group
from pm_dpgp.workflow import ReleaseError, dp_ppc, dp_thompson_sampling_tree
from tests.releases import dirichlet, label_release, noise_aware, sample_path


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


# ------------------------------------------------------------------- read-only metadata
@pytest.fixture(scope="module")
def every_release(small_gp):
    return {
        "cloaking": label_release("cloaking", small_gp),
        "noise_aware": noise_aware(),
        "dirichlet": dirichlet(),
        "sample_path": sample_path(small_gp),
    }


KINDS = ["cloaking", "noise_aware", "dirichlet", "sample_path"]


def _exported_epsilon(release) -> float:
    if kind_of(release) in ("SparseQuRelease", "DirichletRelease"):
        idata = release.to_inference_data(np.linspace(0.5, 2.0, 5), n_draws=3)
    else:
        idata = release.to_inference_data()
    return get_group(idata, "posterior").attrs["epsilon"]


def kind_of(release) -> str:
    return type(release).__name__


@pytest.mark.parametrize("kind", KINDS)
def test_a_releases_metadata_cannot_be_edited(every_release, kind):
    release = every_release[kind]
    md = release.metadata
    epsilon = md["epsilon"]
    edits = [
        lambda: md.__setitem__("epsilon", 123.0),
        lambda: md.update(epsilon=123.0),
        lambda: md.pop("epsilon"),
        lambda: md.setdefault("new", 1),
        lambda: md.clear(),
        lambda: md["privacy_event"].__setitem__("epsilon", 0.0),
    ]
    for key in ("y_bounds", "domain", "lam_used"):
        if isinstance(md.get(key), list):
            edits.append(lambda key=key: md[key].append(0.0))
            edits.append(lambda key=key: md[key].__setitem__(0, 0.0))
    for edit in edits:
        with pytest.raises(TypeError, match="read-only"):
            edit()
    assert md["epsilon"] == epsilon and "new" not in md
    assert _exported_epsilon(release) == epsilon
    assert isinstance(md, dict) and json.loads(json.dumps(md))["epsilon"] == epsilon
    editable = dict(md)
    editable["epsilon"] = 0.5  # a copy is the user's to edit
    assert release.metadata["epsilon"] == epsilon


@pytest.mark.parametrize("kind", ["cloaking", "noise_aware", "dirichlet"])
def test_metadata_stays_read_only_after_pickling_and_copying(every_release, kind):
    release = every_release[kind]
    state = release.__getstate__()
    assert type(state["metadata"]) is dict  # pickles hold plain dicts, as before stop 49
    assert type(state["metadata"]["privacy_event"]) is dict
    for other in (pickle.loads(pickle.dumps(release)), copy.deepcopy(release)):
        assert other.metadata == release.metadata
        with pytest.raises(TypeError, match="read-only"):
            other.metadata["epsilon"] = 123.0
        with pytest.raises(TypeError, match="read-only"):
            other.metadata["privacy_event"]["epsilon"] = 0.0


def test_the_metadata_is_complete_when_the_release_is_built(every_release):
    """The keys the mechanisms used to write after construction are there."""
    assert every_release["noise_aware"].metadata["y_bounds"] == [-2.0, 2.0]
    assert "input_columns" in every_release["noise_aware"].metadata
    assert "input_columns" in every_release["dirichlet"].metadata
    assert every_release["sample_path"].metadata["domain"] == [[0.0, 6.0]]
    assert "input_columns" in every_release["sample_path"].metadata


# ------------------------------------------------------------ Dirichlet dims of dp_ppc
def test_a_dirichlet_ppc_aligns_with_the_releases_export(every_release):
    release = every_release["dirichlet"]
    X_h = np.linspace(-3, 3, 7)
    y_h = (X_h > -1).astype(int) + (X_h > 1).astype(int)
    rng = np.random.default_rng(0)
    export = get_group(release.to_inference_data(X_h, n_draws=20, rng=rng), "posterior")
    ppc = get_group(dp_ppc(release, X_h, y_h, training=None, n_draws=20, rng=rng), "posterior")
    assert ppc["p"].dims[2] == export["p"].dims[2] == "output"
    np.testing.assert_array_equal(ppc["output"].values, export["output"].values)
    exported = export["p"].mean(("chain", "draw")).rename(x_star="obs_id")
    diff = exported.drop_vars("obs_id") - ppc["p"].mean(("chain", "draw")).drop_vars("obs_id")
    assert diff.dims == ("output", "obs_id") and diff.shape == (3, 7)
    # both are draws of the same DP q(f): their class probabilities agree closely
    assert float(abs(diff).max()) < 0.2
