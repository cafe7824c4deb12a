"""Stop-48 audit of the workflow layer (releases, dp_ppc, the sample-path Thompson loop).

* A Ctrl-C in the first evaluation of a Thompson round's released path, after the round's
  charge, left the ledger one round ahead of ``result.events`` (replayed 25.19 against 34.99
  charged); any other error there (or in the refinement's evaluations) was raised as it was,
  and the completed rounds were lost, instead of a ``ReleaseError`` holding them.
* ``dp_ppc(n_draws=...)`` ignored ``n_draws`` silently for a release with its own draws.
* Exports shared arrays with the release or the caller: a q(u) export its ``u_mean``,
  ``u_cov``, ``Z`` (an in-place edit of the export moved ``release.predict`` by 20.6) and the
  caller's ``X_star``; ``dp_ppc`` the caller's ``X_holdout`` / ``y_holdout`` (a later
  ``y_holdout += 5`` moved ``holdout_elpd`` from -10.75 to -32.10), and
  ``Release.to_inference_data`` its ``observed_data`` array.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pm_dpgp.mechanisms.full.sample_path as sp
from pm_dpgp.accounting import Ledger
from pm_dpgp.compat import get_group
from pm_dpgp.workflow import dp_ppc, dp_thompson_sampling, holdout_elpd
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


# --------------------------------------------------------------- exports own their arrays
def _group(idata, name):
    return get_group(idata, name)


@pytest.mark.parametrize("kind", ["noise_aware", "dirichlet"])
def test_a_qu_export_edited_in_place_leaves_the_release_unchanged(kind):
    """The export shared u_mean, u_cov and Z with the release: `u_mean *= 100` in the export
    moved release.predict by 20.6 (noise-aware) and predict_proba by 0.45 (Dirichlet)."""
    from tests import releases

    release = getattr(releases, kind)()
    X_h = np.linspace(-2.0, 2.0, 5)[:, None]
    before = release.predict(X_h)[0].copy()
    idata = release.to_inference_data(X_h, n_draws=10, rng=np.random.default_rng(0))
    dp = _group(idata, "dp_parameters")
    for name in ("u_mean", "u_cov"):
        for array in (release.u_mean, release.u_cov, release.Z):
            assert not np.shares_memory(dp[name].values, array)
    assert not np.shares_memory(_group(idata, "constant_data")["Z"].values, release.Z)
    dp["u_mean"].values *= 100.0
    dp["u_cov"].values *= 100.0
    _group(idata, "constant_data")["Z"].values[:] += 1.0
    np.testing.assert_array_equal(release.predict(X_h)[0], before)


def test_a_qu_export_does_not_move_with_the_callers_test_inputs():
    """constant_data['X_star'] was the caller's array: `X_star += 1` afterwards moved the
    exported inputs to [-1 … 3], away from their coordinate [-2 … 2] and the draws."""
    from tests import releases

    X_h = np.linspace(-2.0, 2.0, 5)[:, None]
    idata = releases.noise_aware().to_inference_data(X_h, n_draws=10)
    X_h += 1.0
    np.testing.assert_array_equal(
        _group(idata, "constant_data")["X_star"].values[:, 0], np.linspace(-2.0, 2.0, 5)
    )


def test_dp_ppc_and_the_export_do_not_move_with_the_callers_hold_out_arrays(every_release):
    """dp_ppc stored the caller's X_holdout and y_holdout: `y_holdout += 5` afterwards changed
    observed_data under the stored log-likelihood (holdout_elpd -10.75 became -32.10); the
    release's export stored its observed_data array the same way."""
    release = every_release["cloaking"]
    X_h = release.X_star[:6].copy()
    y_h = np.sin(X_h[:, 0])
    idata = dp_ppc(release, X_h, y_h, noise_sd=0.3, training=None, rng=np.random.default_rng(0))
    elpd = holdout_elpd(idata)[0]
    y_o = np.sin(release.X_star[:, 0])
    export = release.to_inference_data(
        observed_data={"y": y_o},
        observed_is_public=True,
        predictive_sd=0.3,
        rng=np.random.default_rng(1),
    )
    kept = X_h.copy(), y_o.copy()
    y_h += 5.0
    X_h += 1.0
    y_o += 5.0
    assert holdout_elpd(idata)[0] == elpd
    np.testing.assert_array_equal(_group(idata, "constant_data")["X"].values, kept[0])
    np.testing.assert_array_equal(_group(export, "observed_data")["y"].values, kept[1])


def test_a_release_s_arrays_cannot_be_edited_in_place(every_release):
    """`f = release.draws[0]; f += 1` changed the recorded draws of every later export and
    dp_ppc by 1.0, silently; the arrays are read-only views, also after pickling and copying
    (a plain copy of them is the way to edit)."""
    import copy
    import pickle

    release = every_release["cloaking"]
    kept = release.draws.copy()
    for r in (release, pickle.loads(pickle.dumps(release)), copy.deepcopy(release)):
        for name in ("draws", "X_star", "noise_factor"):
            with pytest.raises(ValueError, match="read-only"):
                getattr(r, name)[0] += 1.0
    np.testing.assert_array_equal(release.draws, kept)
    exported = _group(release.to_inference_data(), "posterior")["f_dp"].values[0]
    np.testing.assert_array_equal(exported, kept)


@pytest.mark.parametrize("kind", ["cloaking", "sample_path"])
def test_the_deprecated_predictive_copy_does_not_share_the_posterior_s_array(every_release, kind):
    """posterior_predictive kept the posterior's own array: an in-place change of units of
    one group (`*= 100`) rescaled the other by 100, silently."""
    idata = every_release[kind].to_inference_data()
    name = "f_dp" if kind == "cloaking" else "f_path"
    post = _group(idata, "posterior")[name].values
    kept = post.copy()
    pp = _group(idata, "posterior_predictive")[name].values
    assert not np.shares_memory(post, pp)
    pp *= 100.0
    np.testing.assert_array_equal(_group(idata, "posterior")[name].values, kept)


def test_a_qu_release_s_arrays_cannot_be_edited_in_place(every_release):
    """`release.u_mean *= 2` changed a noise-aware release's predictions for every later
    export and dp_ppc, silently; read-only, also after pickling and copying."""
    import copy
    import pickle

    release = every_release["noise_aware"]
    X_h = np.linspace(-2.0, 2.0, 5)[:, None]
    before = release.predict(X_h)[0].copy()
    for r in (release, pickle.loads(pickle.dumps(release)), copy.deepcopy(release)):
        for name in ("Z", "u_mean", "u_cov", "prior_mean"):
            with pytest.raises(ValueError, match="read-only"):
                getattr(r, name)[...] *= 2.0
    np.testing.assert_array_equal(release.predict(X_h)[0], before)
