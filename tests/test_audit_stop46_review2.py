"""Stop-46 review 2: the summation margin (c29d201) and the Liu–Talwar selection.

The noise-aware release now charges Δ + 2η; the random-stopping selection planned each
candidate's event at Δ alone, so in simulation the run's own event (σ_a(Δ + 2η)/(Δ + 2η), a
rounding away from σ_a(Δ)/Δ) could exceed the charged base ρ and the run raised
"a candidate release exceeded its planned cost" after the whole selection was charged.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import select_by_random_stopping

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _model(n: int = 300):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(n)
    return sparse_gp_regression(
        X,
        y,
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 10),
        sigma=lambda: pm.HalfNormal("sigma", 1.0),
    )


@pytest.mark.parametrize("epsilon", [0.6, 1.2, 1.4])
def test_selection_plans_the_charged_margin(epsilon):
    """One candidate: base ρ = its planned ρ_M; the run's release charges Δ + 2η.  At these ε
    the event planned at Δ alone was an ulp cheaper than the run's (RuntimeError after the
    spend on the old code)."""
    ledger = Ledger(epsilon=None, delta=1e-6, filter="renyi")
    result = select_by_random_stopping(
        _model(),
        [{"ell": 1.0, "sigma": 0.3}],
        epsilon=epsilon,
        delta=1e-5,
        y_bounds=(-2.0, 2.0),
        ledger=ledger,
        gamma=0.9,
        rng=np.random.default_rng(1),
        owner_scores=False,
    )
    assert result is not None
