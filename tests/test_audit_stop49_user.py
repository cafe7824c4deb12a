"""Stop 49: a new user's first week (Python 3.13 / PyMC 6 / ArviZ 1, then PyMC 5 / ArviZ 0.x).

Each test reproduces a defect found by scripts written as a Bayesian statistician new to the
package, and fails on the code before its fix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import noise_aware_release
from pm_dpgp.models import sparse_gp_regression

rng0 = np.random.default_rng(49)
FRAME = pd.DataFrame(
    {"age": rng0.uniform(0, 80, 60), "weight": rng0.uniform(30, 70, 60)},
    index=np.arange(100, 160),
)
HEIGHT = pd.Series(110 + 40 * np.tanh(FRAME["age"] / 15), index=FRAME.index, name="height")
Z_FRAME = pd.DataFrame({"age": np.linspace(0.0, 90.0, 8)})


def _streamed_model():
    # built without data (streamed / Dask use), the public inducing grid labelled "age"
    return sparse_gp_regression(
        None, None, 30.0**2 * pm.gp.cov.ExpQuad(1, ls=20.0), Z=Z_FRAME, noise_sd=8.0, mean=130.0
    )


def _released(model, data, **kw):
    """``noise_aware_release`` of ``data`` at the settings these tests share."""
    return noise_aware_release(
        model, data, epsilon=1.0, delta=1e-5, y_bounds=(50.0, 190.0), ratio="auto",
        rng=np.random.default_rng(1), **kw,
    )  # fmt: skip


def test_streamed_model_remembers_the_columns_of_a_labelled_z():
    """A DataFrame ``Z`` names the model's input column when no ``X`` is given: ``data=``
    labelled ``weight`` released a q(u) of the heights on the weights at the age grid,
    silently, and the release then claimed the model was built on ``["weight"]``."""
    model = _streamed_model()
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    with pytest.raises(ValueError, match=r"built on \['age'\]"):
        _released(model, (FRAME[["weight"]], HEIGHT), ledger=ledger)
    assert ledger.history == []  # nothing spent
    with pytest.raises(ValueError, match=r"built on \['age'\]"):  # the public view too
        _released(model.public_sparse_gp(), (FRAME[["weight"]], HEIGHT))
    # the right column is accepted, recorded, and a later DataFrame of test inputs is checked
    rel = _released(model, (FRAME[["age"]], HEIGHT))
    assert rel.metadata["input_columns"] == ["age"]
    rel.predict(pd.DataFrame({"age": [10.0, 30.0]}))
    with pytest.raises(ValueError, match=r"built on \['age'\]"):
        rel.predict(pd.DataFrame({"weight": [10.0, 30.0]}))


def test_streamed_model_refuses_mislabelled_dask_columns_before_the_spend():
    dd = pytest.importorskip("dask.dataframe")  # the default scheduler: no distributed
    ddf = dd.from_pandas(pd.concat([FRAME, HEIGHT], axis=1), npartitions=2)
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    with pytest.raises(ValueError, match=r"built on \['age'\]"):
        _released(_streamed_model(), (ddf[["weight"]], ddf["height"]), ledger=ledger)
    assert ledger.history == []


@pytest.mark.parametrize("loop", ["sample_path", "tree"])
def test_thompson_candidates_in_another_column_order_than_x_init_are_refused(loop):
    """A candidate ``DataFrame`` was read by position against a labelled ``X_init``: with its
    columns swapped the loop queried the objective at swapped coordinates, silently (the
    trace labelled them with ``X_init``'s names)."""
    from pm_dpgp.workflow import dp_thompson_sampling, dp_thompson_sampling_tree

    calls = []

    def objective(X):
        calls.append(X.copy())
        return np.exp(-((X[:, 0] - 0.8) ** 2 + (X[:, 1] - 0.2) ** 2) / 0.05)

    X0 = pd.DataFrame({"a": [0.2, 0.8], "b": [0.5, 0.5]})
    grid = np.random.default_rng(0).uniform(0, 1, (30, 2))
    swapped = pd.DataFrame({"b": grid[:, 1], "a": grid[:, 0]})
    ledger = Ledger(epsilon=50.0, delta=1e-5)
    common = dict(domain=(0.0, 1.0), X_init=X0, n_rounds=2, y_bounds=(-1.0, 1.0), ledger=ledger)
    with pytest.raises(ValueError, match=r"candidates has the columns \['b', 'a'\]"):
        if loop == "sample_path":
            dp_thompson_sampling(
                objective,
                pm.gp.cov.ExpQuad(2, ls=0.3),
                noise_sd=3.0,
                candidates=swapped,
                rng=np.random.default_rng(1),
                **common,
            )
        else:
            dp_thompson_sampling_tree(
                objective,
                pm.gp.cov.ExpQuad(2, ls=0.3),
                noise_sd=0.05,
                inducing=6,
                candidates=swapped,
                rng=np.random.default_rng(1),
                **common,
            )
    assert calls == [] and ledger.history == []  # nothing observed, spent or drawn
    # the same candidates in X_init's order run
    res = dp_thompson_sampling(
        objective,
        pm.gp.cov.ExpQuad(2, ls=0.3),
        noise_sd=3.0,
        candidates=swapped[["a", "b"]],
        rng=np.random.default_rng(1),
        **common,
    )
    chosen = res.idata.thompson["x_chosen"].values
    assert all(any(np.array_equal(c, g) for g in grid) for c in chosen)


def test_streamed_model_selection_refuses_mislabelled_data_before_the_charge():
    """The Liu–Talwar selection over a model built without data scored (and charged) the
    candidates on the weights when its ``Z`` was labelled ``age``."""
    from pm_dpgp.selection import select_hyperparameters

    with pm.Model():
        ell = pm.Gamma("ell", 2, 0.1)
        model = sparse_gp_regression(
            None,
            None,
            lambda: 30.0**2 * pm.gp.cov.ExpQuad(1, ls=ell),
            Z=Z_FRAME,
            noise_sd=8.0,
            mean=130.0,
        )
    ledger = Ledger(epsilon=5.0, delta=1e-5, filter="renyi")
    with pytest.raises(ValueError, match=r"built on \['age'\]"):
        select_hyperparameters(
            model,
            [{"ell": 5.0}, {"ell": 20.0}],
            data=(FRAME[["weight"]], HEIGHT),
            method="liu_talwar",
            ledger=ledger,
            epsilon=1.0,
            delta=1e-6,
            y_bounds=(50.0, 190.0),
            rng=np.random.default_rng(0),
        )
    assert ledger.history == []


def _hold_out_release():
    from pm_dpgp.mechanisms import cloaked_release
    from pm_dpgp.models import gp_regression

    model = gp_regression(
        FRAME["age"].to_numpy(),
        HEIGHT.to_numpy(),
        30.0**2 * pm.gp.cov.ExpQuad(1, ls=20.0),
        noise_sd=8.0,
        mean=130.0,
    )
    ages = np.arange(0.0, 90.0, 10.0)
    release = cloaked_release(
        model, ages, epsilon=1.0, delta=1e-5, y_bounds=(50.0, 190.0), rng=np.random.default_rng(2)
    )
    return release, ages


def _dims(idata, group, var):
    from pm_dpgp.compat import get_group

    return get_group(idata, group)[var].dims


def test_dims_of_the_observed_variable_rename_the_shared_dim():
    """PyMC's ``dims={"y": ["age"]}`` for the observed variable was skipped silently: the
    observed and predictive ``y`` (and ``f_dp``) stayed on ``x_star``, and ``coords={"age":
    ...}`` was then refused with advice to use ``dims=``, which had been used."""
    release, ages = _hold_out_release()
    hold = {"observed_data": {"y": ages + 100.0}, "observed_is_public": True, "predictive_sd": 8.0}
    idata = release.to_inference_data(dims={"y": ["age"]}, coords={"age": ages}, **hold)
    assert _dims(idata, "observed_data", "y") == ("age",)
    assert _dims(idata, "posterior_predictive", "y") == ("chain", "draw", "age")
    assert _dims(idata, "posterior", "f_dp") == ("chain", "draw", "age")  # one shared dim
    # a predictive y without observed data takes its dims too
    pred = release.to_inference_data(dims={"y": ["age"]}, predictive_sd=8.0)
    assert _dims(pred, "posterior_predictive", "y") == ("chain", "draw", "age")
    # the same name for both is fine; different names for the one shared dim are refused
    both = release.to_inference_data(dims={"f_dp": ["age"], "y": ["age"]}, **hold)
    assert _dims(both, "observed_data", "y") == ("age",)
    with pytest.raises(ValueError, match="renamed both"):
        release.to_inference_data(dims={"f_dp": ["age"], "y": ["height_obs"]}, **hold)
    with pytest.raises(ValueError, match=r"dims\['y'\] must list 1"):
        release.to_inference_data(dims={"y": ["age", "extra"]}, **hold)
