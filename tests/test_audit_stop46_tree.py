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
