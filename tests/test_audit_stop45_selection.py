"""Stop-45 audit of the private selections (``pm_dpgp/selection/``): each test fails on the
code before its fix.

* F1: ``owner_scores`` (a public switch) was read with ``check_flag`` only after the ledger was
  charged and after every run of random stopping, so ``owner_scores="no"`` spent the whole
  selection (ε ≈ 1.37 at δ = 10⁻³ on the test problem) and drew its noise, then raised.
* F2: ``prior_quantile_grid`` cast the probabilities to the variable's dtype before PyMC's
  ``icdf``; for an integer prior that made 0.1/0.5/0.9 all 0, so DiscreteUniform(1, 10) gave
  the one-candidate grid ``[1]`` (SciPy: 1, 5, 9), Geometric(0.3) ``[0]`` (1, 2, 7).
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import stats

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import (
    prior_quantile_grid,
    product_grid,
    select_by_random_stopping,
    select_by_sample_paths,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _state(rng: np.random.Generator) -> object:
    return rng.bit_generator.state["state"]["state"]


def _sparse_model(n: int = 60):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(n)
    return sparse_gp_regression(
        X,
        y,
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 8),
        noise_sd=0.3,
    )


def _exact_model(n: int = 60):
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (n, 1))
    y = np.clip(np.sin(X[:, 0]) + 0.5 * rng.standard_normal(n), -2.0, 2.0)
    return gp_regression(
        X,
        y,
        lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )


@pytest.mark.parametrize("flag", ["no", 1, None])
@pytest.mark.parametrize("method", ["liu_talwar", "sample_path"])
def test_a_bad_owner_scores_switch_is_refused_before_the_spend(method, flag):
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    rng = np.random.default_rng(0)
    before = _state(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="owner_scores must be True or False"):
            if method == "liu_talwar":
                select_by_random_stopping(
                    _sparse_model(),
                    product_grid({"ell": [0.5, 2.0]}),
                    epsilon=1.0,
                    delta=1e-5,
                    y_bounds=(-2.0, 2.0),
                    ledger=ledger,
                    gamma=0.5,
                    owner_scores=flag,
                    rng=rng,
                )
            else:
                select_by_sample_paths(
                    _exact_model(),
                    product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]}),
                    X_star=np.linspace(0.0, 10.0, 11)[:, None],
                    domain=(0.0, 10.0),
                    y_bounds=(-2.0, 2.0),
                    epsilon=1.0,
                    delta=1e-4,
                    ledger=ledger,
                    gamma=0.5,
                    owner_scores=flag,
                    rng=rng,
                )
    assert ledger.history == []
    assert _state(rng) == before


@pytest.mark.parametrize(
    ("prior", "reference"),
    [
        (lambda: pm.DiscreteUniform("k", 1, 10), stats.randint(1, 11)),
        (lambda: pm.Binomial("k", 20, 0.5), stats.binom(20, 0.5)),
        (lambda: pm.Geometric("k", 0.3), stats.geom(0.3)),
    ],
)
def test_prior_quantile_grid_of_an_integer_prior_is_its_quantiles(prior, reference):
    X = np.linspace(0.0, 10.0, 12)[:, None]
    gpr = gp_regression(X, np.sin(X[:, 0]), lambda: pm.gp.cov.ExpQuad(1, ls=prior()), noise_sd=0.3)
    q = (0.1, 0.5, 0.9)
    expected = list(dict.fromkeys(float(v) for v in reference.ppf(q)))
    assert [c["k"] for c in prior_quantile_grid(gpr, q)] == expected
