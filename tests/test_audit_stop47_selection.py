"""Stop-47 audit of the private selections (``pm_dpgp/selection/``): each finding's test fails
on the code before its fix.

* F1: a candidate whose COINPRESS interval ``[L_min, L_max]`` (Honkela eqs. 30-31, public) is
  non-empty but so narrow that the secure discrete Gaussian of a step cannot be discretised
  (``grid_for`` underflows: noise variance 1/(2π), so ``L_max`` is exactly 0, and
  ``y_bounds = ±1e-160`` give the width 1.3e-319) passed every pre-spend check; the secure
  selection was charged (ε = 1.26 at δ = 10⁻³ on the test problem) and its first run raised
  "... Nothing was spent".  Now refused before the spend, and every step's sensitivity is at
  least the public floor that check validates.  The same in ``select_by_sample_paths``
  (ε = 1.46 charged on its test problem).
* F2: ``select_by_cross_validated_sse`` with ``error_clip = 1e-320`` or ``y_bounds = ±1e-165``
  (accepted public settings): ``c²`` and every term of Δu underflow, the charged sensitivity
  is 0.0, the ledger was charged (ε = 1.01 at δ = 10⁻⁵) and the sampler then raised
  "sensitivity must be a finite number > 0, got 0.0".  ``plan_cv_sse`` now refuses a
  sensitivity that is not finite and > 0.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import (
    product_grid,
    select_by_cross_validated_sse,
    select_by_random_stopping,
    select_by_sample_paths,
)
from pm_dpgp.selection.coinpress import clipped_mean_sensitivity, coinpress_mean
from pm_dpgp.selection.liu_talwar import loglik_bounds

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: noise variance whose L_max = −½ ln 2π − ½ ln σ² is exactly 0.0 in float64
NOISE_VAR = 1.0 / (2.0 * math.pi)
TINY = 1e-160


def test_the_degenerate_interval_is_non_empty_in_float64():
    lo, hi = loglik_bounds(NOISE_VAR, TINY)
    assert hi == 0.0 and 0.0 < -lo < 1e-318  # accepted by checked_loglik_bounds


def _sparse_model(n: int = 40):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 1))
    return sparse_gp_regression(
        X,
        1e-161 * np.sin(X[:, 0]),
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 6),
        noise_sd=math.sqrt(NOISE_VAR),
    )


def test_secure_random_stopping_refuses_an_undiscretisable_coinpress_interval_before_spending():
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="cannot be discretised"):
            select_by_random_stopping(
                _sparse_model(),
                product_grid({"ell": [0.5, 2.0]}),
                epsilon=1.0,
                delta=1e-5,
                y_bounds=(-TINY, TINY),
                ledger=ledger,
                gamma=0.5,
            )
    assert ledger.epsilon() == 0.0


def test_secure_sample_path_selection_refuses_it_before_spending():
    """The same interval in ``select_by_sample_paths`` (kernel variance σ² = noise var/16, so
    r² = 16 and the path is affordable): the old code charged ε = 1.46 at δ = 10⁻³, then raised."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (40, 1))
    model = gp_regression(
        X,
        1e-161 * np.sin(X[:, 0]),
        lambda: NOISE_VAR / 16.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=math.sqrt(NOISE_VAR),
    )
    ledger = Ledger(epsilon=1e6, delta=1e-3, filter="renyi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="cannot be discretised"):
            select_by_sample_paths(
                model,
                product_grid({"ell": [1.0, 3.0]}),
                ledger=ledger,
                X_star=np.linspace(0, 10, 5)[:, None],
                domain=(0, 10),
                y_bounds=(-TINY, TINY),
                epsilon=1.0,
                delta=1e-4,
                gamma=0.5,
            )
    assert ledger.epsilon() == 0.0


def test_coinpress_direct_secure_call_refuses_before_drawing():
    lo, hi = loglik_bounds(NOISE_VAR, TINY)
    with pytest.raises(ValueError, match="cannot be discretised"):
        coinpress_mean(np.full(8, lo), lower=lo, upper=hi, rho=0.05)


@pytest.mark.parametrize("seed", range(5))
def test_the_sensitivity_floor_is_below_every_steps_own_sensitivity(seed):
    """The floor is a valid lower bound in ordinary settings: every interval of a run is at
    least min((H − L)/2, spread) wide, so max(Δ_t, floor) is Δ_t and the results are as before."""
    from pm_dpgp.selection.coinpress import coinpress_min_sensitivity  # new at stop 47

    rng = np.random.default_rng(seed)
    lo0, hi0 = -60.0 * rng.uniform(0.5, 2.0), -0.5
    spread = float(rng.uniform(0.1, 6.0))
    v = -1.0 - 0.5 * rng.chisquare(1, 200)
    res = coinpress_mean(
        v, lower=lo0, upper=hi0, rho=float(rng.uniform(0.01, 2.0)), spread=spread, rng=rng
    )
    floor = coinpress_min_sensitivity(lo0, hi0, v.size, spread)
    for lo, hi in res.intervals:
        assert clipped_mean_sensitivity(lo, hi, v.size) >= floor


@pytest.mark.parametrize(
    ("error_clip", "width"), [(1e-320, 1.5), (5e-324, 1.5), (4.0, 1e-165), (4.0, 1e-300)]
)
def test_a_vanishing_error_clip_is_refused_before_the_spend(error_clip, width):
    X = np.linspace(0, 10, 12)[:, None]
    gpr = gp_regression(
        X,
        width / 1.5 * np.sin(X[:, 0]),
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)),
        noise_sd=0.3,
    )
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state["state"]["state"]
    with pytest.raises(ValueError, match="Nothing was spent"):
        select_by_cross_validated_sse(
            gpr,
            product_grid({"ell": [0.5, 2.0]}),
            epsilon=0.5,
            y_bounds=(-width, width),
            ledger=ledger,
            error_clip=error_clip,
            rng=rng,
        )
    assert ledger.epsilon() == 0.0
    assert rng.bit_generator.state["state"]["state"] == before
