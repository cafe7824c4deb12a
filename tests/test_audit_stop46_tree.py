"""Stop-46 audit of the tree / square-root-counter Thompson loop."""

from __future__ import annotations

import numpy as np
import pytest

import pm_dpgp._validation as validation
from pm_dpgp.accounting import Ledger
from pm_dpgp.workflow import dp_thompson_sampling_tree
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures


def _objective(X: np.ndarray) -> np.ndarray:
    return np.sin(3.0 * X[:, 0])


@pytest.mark.parametrize("rows", ["X_init", "candidates", "refine_points"])
def test_feature_matrices_too_large_are_refused_before_the_charge(monkeypatch, rows):
    # 20 000 rows of a 126-feature basis: the round's (rows × M) feature matrix and its
    # copies need ~80 MB; with the machine's memory taken to be 32 MiB the loop must refuse
    # before the charge (it used to charge the whole run, then raise MemoryError in round 1)
    monkeypatch.setattr(validation, "_physical_memory", lambda: 32 * 2**20)
    feats = DyadicPartitionFeatures(np.array([0.0]), np.array([1.0]), 6)
    assert feats.M == 126
    big = 20_000
    X_init = np.linspace(0.0, 1.0, big)[:, None] if rows == "X_init" else np.array([[0.2], [0.7]])
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="nothing was spent or drawn"):
        dp_thompson_sampling_tree(
            _objective,
            None,
            features=feats,
            domain=(0.0, 1.0),
            X_init=X_init,
            n_rounds=2,
            noise_sd=0.1,
            ledger=ledger,
            candidates=big if rows == "candidates" else 16,
            refine_steps=1 if rows == "refine_points" else 0,
            refine_points=big if rows == "refine_points" else 32,
            progressbar=False,
            rng=rng,
        )
    assert len(ledger.history) == 0
    assert ledger.epsilon() == 0.0
    assert rng.bit_generator.state == state


def _sample_path_run(ledger, rng, objective=_objective, **kwargs):
    import pymc as pm

    from pm_dpgp.workflow import dp_thompson_sampling

    return dp_thompson_sampling(
        objective,
        pm.gp.cov.ExpQuad(1, ls=0.3),
        domain=(0.0, 1.0),
        X_init=np.array([[0.2], [0.7]]),
        noise_sd=3.0,
        ledger=ledger,
        progressbar=False,
        candidates=16,
        rng=rng,
        **kwargs,
    )


def test_sample_path_refinement_too_large_is_refused_before_the_round_is_charged(monkeypatch):
    # 3000 refinement points: the lazily extended path needs ~4.5·10⁶ doubles (36 MB); with
    # the machine's memory taken to be 16 MiB the round must be refused before its charge
    # (the refinement ran after the charge: 2·10⁴ points raised MemoryError in round 2 and
    # the completed round was lost)
    monkeypatch.setattr(validation, "_physical_memory", lambda: 16 * 2**20)
    ledger = Ledger(epsilon=100.0, delta=1e-5)
    with pytest.raises(ValueError, match="nothing was spent or drawn"):
        _sample_path_run(
            ledger,
            np.random.default_rng(0),
            n_rounds=2,
            refine_steps=1,
            refine_points=3000,
        )
    assert len(ledger.history) == 0


def test_sample_path_round_frees_the_previous_round_path(monkeypatch):
    # the previous round's release (its path state holds every evaluated row) must not stay
    # alive while the next round's release is built: together they doubled the peak memory
    import gc
    import weakref

    import pm_dpgp.workflow.thompson as thompson

    made: list[weakref.ref] = []
    alive_at_call: list[int] = []
    real = thompson.sample_path_release

    def recording(*args, **kwargs):
        gc.collect()
        alive_at_call.append(sum(r() is not None for r in made))
        out = real(*args, **kwargs)
        made.append(weakref.ref(out))
        return out

    monkeypatch.setattr(thompson, "sample_path_release", recording)
    ledger = Ledger(epsilon=100.0, delta=1e-5)
    res = _sample_path_run(ledger, np.random.default_rng(1), n_rounds=3, refine_steps=1)
    assert res.n_rounds == 3
    assert alive_at_call == [0, 0, 0]
