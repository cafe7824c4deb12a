"""Stop-46 review: sibling paths of the stop-46 fixes."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
from tests.test_audit_stop46_tree import _sample_path_run


def test_random_stopping_refuses_an_indefinite_kzz_before_the_selection_spend() -> None:
    """A candidate whose kernel is no covariance at ``Z`` (``ExpQuad(1) + w·ExpQuad(10)`` at
    ``w = −0.7``, with the caller's ``kernel_norm``) was refused by its run's
    ``noise_aware_release`` (``"Nothing was spent"``) after the selection had charged its
    whole event; the plan now checks every candidate's ``K_ZZ`` first, as the release does."""
    from pm_dpgp.selection import select_by_random_stopping

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 3.0, 60)
    y = np.sin(X)
    with pm.Model():
        w = pm.Normal("w", 0.0, 1.0)
        reg = sparse_gp_regression(
            X,
            y,
            lambda: pm.gp.cov.ExpQuad(1, ls=1.0) + w * pm.gp.cov.ExpQuad(1, ls=10.0),
            Z=grid_inducing_points(0.0, 3.0, 10),
            noise_sd=0.1,
        )
    ledger = Ledger(epsilon=50.0, delta=1e-3)
    g = np.random.default_rng(1)
    state = g.bit_generator.state
    with pytest.raises(ValueError, match="K_ZZ"):
        select_by_random_stopping(
            reg,
            [{"w": 0.5}, {"w": -0.7}],
            epsilon=1.0,
            delta=1e-4,
            y_bounds=(-2.0, 2.0),
            kernel_norm=5.0,
            ledger=ledger,
            rng=g,
            gamma=0.01,
        )
    assert ledger.history == []
    assert g.bit_generator.state == state


def test_plot_dp_release_refuses_the_training_labels_of_a_classification_release() -> None:
    """``classification_release`` remembered no training data (every other label release
    does), so ``plot_dp_release(release, X_holdout=X, y_holdout=t)`` drew the private
    training labels under the label "public hold-out set"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification
    from pm_dpgp.workflow.ppc import PrivateDataError, plot_dp_release

    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 3.0, 30)[:, None]
    t = (X[:, 0] > 1.5).astype(float)
    gpc = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=1.0))
    release = classification_release(gpc, X, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(1))
    try:
        with pytest.raises(PrivateDataError):
            plot_dp_release(release, X_holdout=X, y_holdout=t)
    finally:
        plt.close("all")


def test_thompson_refinement_refusal_in_round_one_draws_and_observes_nothing(
    monkeypatch,
) -> None:
    """The stop-46 refinement memory check ran inside round 1, after the round's candidates
    were drawn from the caller's Generator (and after the objective was called at
    ``X_init``), while its message said "nothing was spent or drawn"; round 1's setting is
    now refused before the objective and the first random number (as the other public
    settings of the rounds, stop-30 audit)."""
    import pm_dpgp._validation as validation

    monkeypatch.setattr(validation, "_physical_memory", lambda: 16 * 2**20)
    calls: list[int] = []

    def objective(X: np.ndarray) -> np.ndarray:
        calls.append(len(X))
        return np.sin(3.0 * X[:, 0])

    ledger = Ledger(epsilon=100.0, delta=1e-5)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="nothing was spent or drawn"):
        _sample_path_run(ledger, rng, objective, n_rounds=2, refine_steps=1, refine_points=3000)
    assert ledger.history == []
    assert rng.bit_generator.state == state
    assert calls == []


def test_training_inputs_are_refused_after_the_training_outputs_died() -> None:
    """``training_source`` returned ``None`` as soon as the remembered outputs were freed, so
    after ``data=(X, y - 5.0)`` (a temporary, freed at once) the training inputs of this fully
    private release were accepted as ``X_holdout`` by ``dp_ppc`` (the stop-46 refusal) and as
    ``X_star`` by ``to_inference_data`` (published in ``constant_data``)."""
    import gc

    from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
    from pm_dpgp.workflow.ppc import PrivateDataError, dp_ppc

    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, (60, 1))
    y_raw = np.sin(X[:, 0]) + 5.0
    reg = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3.5, 3.5, 6), noise_sd=0.1
    )
    release = noise_aware_release(
        reg,
        data=(X, y_raw - 5.0),
        epsilon=1.0,
        delta=1e-4,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(1),
    )
    gc.collect()
    with pytest.raises(PrivateDataError):
        release.to_inference_data(X, n_draws=10)
    with pytest.raises(PrivateDataError):
        dp_ppc(
            release,
            X,
            rng.standard_normal(60),
            training=None,
            noise_sd=0.1,
            rng=np.random.default_rng(2),
        )
