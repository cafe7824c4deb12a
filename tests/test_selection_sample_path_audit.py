"""Audit of the sample-path selection (audit-sp branch): the confirmed defects D1–D4 as tests.

Each test states a property that the design (docs/selection.md §6) promises and that the code
broke before the fixes of the same branch; reproducers with numbers:
``benchmarks/audits/sample_path_selection/sp_bad_inputs.py``.

* D1 (was): ``n_steps`` / ``spread`` (COINPRESS settings, public) were validated only inside the
  loop, after the spend and after the first path was drawn (both selections).
* D2: the release's own public checks (``k(x, x) <= 1`` at the public probes for a given
  ``kernel_scale`` when ``kappa`` is given, ``kernel_class``) are not run by the plan, so a bad
  public setting is charged and then aborts with ``RuntimeError``.
* D3: data without ``.shape`` (lists) are checked by ``len`` only: a y of n pairs is accepted
  and ravelled to 2n values (one record then sits in D₁ and D₂, outside Lemma SP-Q), and a
  non-numeric entry raises after the spend with the private value in the message.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import (
    plan_sample_path_selection,
    product_grid,
    select_by_random_stopping,
    select_by_sample_paths,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N = 288
GRID = product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]})
OPTS = dict(
    X_star=np.linspace(0.0, 10.0, 21)[:, None],
    domain=(0.0, 10.0),
    y_bounds=(-2.0, 2.0),
    epsilon=1.0,
    delta=1e-4,
)
SECRET = 7.123456789


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (N, 1))
    y = np.clip(np.sin(X[:, 0]) + 0.5 * rng.standard_normal(N), -2.0, 2.0)
    y[3] = SECRET
    return X, y


@pytest.fixture(scope="module")
def model(data):
    X, y = data
    return gp_regression(
        X, y, lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )  # fmt: skip


def _refused_before_the_spend(call):
    """``call(ledger, rng)`` must raise ValueError/TypeError with nothing spent or drawn."""
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    with pytest.raises((ValueError, TypeError)) as info:
        call(ledger, rng)
    assert ledger.history == [], f"budget spent before the refusal: {info.value!r}"
    assert rng.bit_generator.state == state, "randomness drawn before the refusal"
    return str(info.value)


@pytest.mark.parametrize(
    "change", [{"n_steps": 0}, {"n_steps": 2.5}, {"spread": 0.0}, {"spread": float("nan")}]
)
def test_d1_coinpress_settings_refused_before_the_spend(model, data, change):
    _refused_before_the_spend(
        lambda ledger, rng: select_by_sample_paths(
            model, GRID, data, **OPTS, **change, ledger=ledger, rng=rng
        )
    )


def sparse_model_and_data():
    """A small sparse model for ``select_by_random_stopping`` and its data ``(model, X, y)``."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (120, 1))
    y = np.sin(2 * X[:, 0])
    sparse = sparse_gp_regression(
        X, y, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 6), noise_sd=lambda: pm.HalfNormal("sigma", 1.0),
    )  # fmt: skip
    return sparse, X, y


def test_d1_liu_talwar_coinpress_settings_refused_before_the_spend():
    sparse, X, y = sparse_model_and_data()
    _refused_before_the_spend(
        lambda ledger, rng: select_by_random_stopping(
            sparse,
            [{"ell": 1.0, "sigma": 0.3}],
            (X, y),
            epsilon=1.0,
            delta=1e-5,
            y_bounds=(-2.0, 2.0),
            n_steps=0,
            ledger=ledger,
            rng=rng,
        )  # fmt: skip
    )


@pytest.mark.parametrize(
    "change",
    [
        {"kernel_scale": 1.0, "kappa": 0.0},  # k(x, x) = 25 > 1; refused by the release only
        {"kernel_class": "exponential_1d"},  # ExpQuad is not exponential; cheaper plan
        {"kernel_class": "constant", "kappa": 0.0},
    ],
)
def test_d2_release_public_checks_run_before_the_spend(model, data, change):
    _refused_before_the_spend(
        lambda ledger, rng: select_by_sample_paths(
            model, GRID, data, **OPTS, **change, ledger=ledger, rng=rng
        )
    )


def test_d3_y_as_list_of_pairs_is_refused_not_ravelled(model, data):
    """With y = n pairs, record 0 lands at rows 0 (validation) and 1 (training)."""
    X, y = data
    _refused_before_the_spend(
        lambda ledger, rng: select_by_sample_paths(
            model, GRID, (X, [[v, v] for v in y]), **OPTS, ledger=ledger, rng=rng
        )
    )


@pytest.mark.parametrize("which", ["X columns", "X ragged", "y string"])
def test_d3_malformed_private_lists_refused_before_the_spend_without_values(model, data, which):
    X, y = data
    if which == "X columns":
        bad = ([[v, v, v] for v in X[:, 0]], y)
    elif which == "X ragged":
        bad = ([[v] if i else [v, v] for i, v in enumerate(X[:, 0])], y)
    else:
        bad = (X, [f"{SECRET}x", *y[1:].tolist()])
    msg = _refused_before_the_spend(
        lambda ledger, rng: select_by_sample_paths(model, GRID, bad, **OPTS, ledger=ledger, rng=rng)
    )
    assert str(SECRET) not in msg


def test_d4_planning_reads_no_value_of_the_models_private_data():
    """``public_gp_without_data`` promises "no value of the data is read" and the plan "from
    public quantities only"; both take the column count from ``model.X``, which evaluates the
    ``pm.Data`` container and refuses a non-finite private value (a data-dependent refusal)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (50, 1))
    with pm.Model():
        Xd = pm.Data("Xd", X)
        yd = pm.Data("yd", np.sin(X[:, 0]))
        m = gp_regression(
            Xd, yd, lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
            noise_sd=lambda: pm.HalfNormal("noise", 20.0),
        )  # fmt: skip
        X_bad = X.copy()
        X_bad[7] = np.nan  # a private value the planning must not look at
        pm.set_data({"Xd": X_bad})
    grid = product_grid({"ell": [3.0], "noise": [20.0]})
    m.public_gp_without_data(grid[0])
    plan_sample_path_selection(m, grid, n=50, **OPTS)
