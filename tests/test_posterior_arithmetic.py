"""Stop-32 audit: a noise-aware setting whose S₂ correction overflows is refused before the spend.

A candidate noise sd of 1e-40 (scale s = 1/σ² = 1e80) passed planning; the release, or the
random-stopping selection that runs it, charged ε and then raised ``OverflowError`` in
``noise_correction`` at ``(s σ_a)²``.  ``check_posterior_arithmetic`` now refuses it from public
quantities only, before any spend or draw, in the release, ``plan.noise_aware`` and the
selection's planning.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import noise_aware_release
from pm_dpgp.mechanisms.full.noise_aware import check_posterior_arithmetic
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import select_by_random_stopping


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (60, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(60)
    return sparse_gp_regression(
        X,
        y,
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 8),
        noise_sd=lambda: pm.HalfNormal("sigma", 1.0),
    )


def test_factor_bound():
    check_posterior_arithmetic(1e6, 1e6, 1e6)  # a usable setting far from the bound
    for scale, sa, sb in ((1e80, 2.0, 2.0), (np.inf, 1.0, 1.0), (1e10, 1e95, 1.0)):
        with pytest.raises(ValueError, match="Nothing was spent"):
            check_posterior_arithmetic(scale, sa, sb)


def test_release_refuses_before_the_spend(model):
    ledger, rng = Ledger(epsilon=50.0, delta=1e-3), np.random.default_rng(1)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="noise correction would overflow"):
        noise_aware_release(
            model,
            epsilon=1.0,
            delta=1e-4,
            y_bounds=(-3, 3),
            ledger=ledger,
            rng=rng,
            hyperparameters={"ell": 1.0, "sigma": 1e-40},
        )
    assert len(ledger.history) == 0 and rng.bit_generator.state == state
    with pytest.raises(ValueError, match="noise correction would overflow"):
        plan.noise_aware(
            model,
            epsilon=1.0,
            delta=1e-4,
            y_bounds=(-3, 3),
            hyperparameters={"ell": 1.0, "sigma": 1e-40},
        )
    # the same call at a usable noise sd releases
    noise_aware_release(
        model,
        epsilon=1.0,
        delta=1e-4,
        y_bounds=(-3, 3),
        ledger=ledger,
        rng=rng,
        hyperparameters={"ell": 1.0, "sigma": 1e-3},
    )
    assert len(ledger.history) == 1


@pytest.mark.parametrize("secure", [False, True])
def test_random_stopping_refuses_before_the_spend(model, secure):
    ledger = Ledger(epsilon=50.0, delta=1e-3, filter="renyi")
    rng = None if secure else np.random.default_rng(1)
    with pytest.raises(ValueError, match="noise correction would overflow"):
        select_by_random_stopping(
            model,
            [{"ell": 1.0, "sigma": 0.3}, {"ell": 1.0, "sigma": 1e-40}],
            epsilon=1.0,
            delta=1e-4,
            y_bounds=(-3, 3),
            ledger=ledger,
            rng=rng,
            owner_scores=False,
        )
    assert len(ledger.history) == 0
