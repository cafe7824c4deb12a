"""Stop-40 walkthrough of the ArviZ objects on the newest stack: each test fails on the code
before the fix it names.  Runs on both stacks.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import compat
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release, noise_aware_release
from pm_dpgp.models import gp_regression, sparse_gp_regression
from pm_dpgp.workflow import dp_thompson_sampling, dp_thompson_sampling_tree
from tests import releases
from tests.releases import objective, thompson_kwargs


@pytest.fixture(scope="module")
def dirichlet():
    return releases.dirichlet()


# ------------------------------------------------------- Thompson: one δ for every ε of the trace
def test_every_epsilon_of_a_thompson_trace_is_at_the_ledgers_delta():
    """``epsilon_round`` was the round's ε at ``delta=`` (1e-8) and ``epsilon_cumulative`` the
    ledger's at its own δ (1e-3): round 0 read 7.48 against a total of 3.19."""
    kw = thompson_kwargs(n_rounds=3, epsilon=100.0, noise_sd=2.0)
    ledger = Ledger(epsilon=100.0, delta=1e-3)
    kw["ledger"] = ledger
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(1, ls=0.2), delta=1e-8, **kw)
    t = compat.get_group(res.idata, "thompson")
    assert res.n_rounds == 3
    rounds = t["epsilon_round"].values
    cumulative = t["epsilon_cumulative"].values
    assert np.all(rounds <= cumulative * (1 + 1e-12))
    assert rounds[0] == pytest.approx(cumulative[0], rel=1e-9)  # one event: the same figure
    for value, event in zip(rounds, res.events, strict=True):
        assert value == event.epsilon(1e-3)
        assert event.epsilon(1e-8) > value  # the figure at delta= is the larger one
    assert t.attrs["ledger_delta"] == 1e-3 and t.attrs["delta"] == 1e-8
    assert t.attrs["epsilon_spent_total"] == ledger.epsilon()


def test_the_tree_loop_records_the_delta_of_its_total():
    kw = thompson_kwargs(n_rounds=3, epsilon=10.0, noise_sd=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling_tree(
            objective, pm.gp.cov.ExpQuad(1, ls=0.2), epsilon=2.0, delta=1e-7, inducing=6, **kw
        )
    attrs = compat.get_group(res.idata, "thompson").attrs
    assert attrs["delta"] == 1e-7 and attrs["epsilon_run"] == 2.0
    assert attrs["ledger_delta"] == kw["ledger"].delta == 1e-5
    assert attrs["epsilon_spent_total"] == kw["ledger"].epsilon()


def test_a_non_private_run_says_it_is_not_publishable():
    """It recorded ``y_bounds=[-1, 1]`` (no clipping happens) and "observed values are
    private" although its path values are exact posterior samples given them."""
    kw = thompson_kwargs(n_rounds=2, epsilon=1.0, noise_sd=0.1)
    del kw["ledger"], kw["y_bounds"]
    res = dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(1, ls=0.2), private=False, **kw)
    attrs = compat.get_group(res.idata, "thompson").attrs
    assert attrs["privacy_model"] == "none"
    assert "y_bounds" not in attrs
    assert attrs["published"].startswith("NOT private")


def test_a_thompson_result_prints_in_one_line_without_private_values():
    """The dataclass repr printed the whole InferenceData, ledger and events (4.7 kB)."""
    kw = thompson_kwargs(n_rounds=3, epsilon=200.0, noise_sd=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(1, ls=0.2), **kw)
    text = repr(res)
    assert len(text) < 400 and "\n" not in text
    assert "rounds 3" in text and "stop_reason='completed'" in text
    numbers = [float(t) for t in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)]
    assert not np.isin(np.round(numbers, 3), np.round(res.owner.y, 3)).any()


# -------------------------------------------------------------- Dirichlet: no Gaussian predictive
def test_a_dirichlet_release_refuses_a_gaussian_predictive(dirichlet):
    """``predictive_sd=0.5`` gave ``y = f + e`` on the latent class values (mean −3.6 against
    one-hot labels), and the error for ``observed_data`` alone asked for ``predictive_sd``."""
    xs = np.linspace(-3, 3, 5)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    onehot = np.eye(3)[[0, 0, 1, 2, 2]].T
    for kw in (
        {"predictive_sd": 0.5},
        {"observed_data": {"y": onehot}, "observed_is_public": True},
        {"predictive_sd": 0.5, "observed_data": {"y": onehot}, "observed_is_public": True},
    ):
        with pytest.raises(ValueError, match="does not apply.*dp_ppc"):
            dirichlet.to_inference_data(xs, n_draws=5, rng=rng, **kw)
    assert rng.bit_generator.state == state  # refused before any draw
    dirichlet.to_inference_data(xs, n_draws=5, rng=rng)  # without them: as before


def test_sparse_releases_print_their_guarantee(dirichlet):
    text = repr(dirichlet)
    assert text.startswith("DirichletRelease(") and "(epsilon, delta) = (1.0, 0.0001)" in text
    assert "3 outputs" in text and "noise_var" not in text
    na = releases.noise_aware()
    assert "(epsilon, delta) = (1.0, 0.0001)" in repr(na) and "noise_var 0.09" in repr(na)


# ------------------------------------------------------ coordinates: values, in the order given
def test_unsorted_inducing_inputs_label_their_values_and_slice_after_sortby():
    """Walkthrough 40: k-means order is not sorted, and a slice of a non-monotonic index is
    positional.  A position index (tried, then reviewed) was worse: xarray's ``.sel`` on a dim
    without an index is positional too, so ``.sel(inducing=1)`` picked the second centre
    silently.  So: the values label the dim in Z's order, exact ``.sel`` is by value, and a
    slice by value works after ``.sortby`` (docs/workflow.md)."""
    Z = np.array([[2.667], [-2.455], [0.185], [-1.009], [1.953], [1.061]])
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, 200)
    model = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3)
    rel = noise_aware_release(
        model.public_sparse_gp(), (X, np.sin(X)), epsilon=1.0, delta=1e-4, y_bounds=(-2, 2),
        rng=np.random.default_rng(2),
    )  # fmt: skip
    post = compat.get_group(rel.to_inference_data(n_draws=4), "posterior")
    np.testing.assert_array_equal(post["inducing"].values, Z[:, 0])
    np.testing.assert_array_equal(post["u"].sel(inducing=0.185).values, post["u"].values[..., 2])
    picked = post["u"].sortby("inducing").sel(inducing=slice(0.185, 2.667))
    np.testing.assert_array_equal(picked["inducing"].values, [0.185, 1.061, 1.953, 2.667])


def test_unsorted_test_inputs_keep_their_order_and_values():
    X = np.linspace(0, 1, 20)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    X_star = np.array([[0.9], [0.1], [0.5]])
    rel = cloaked_release(model, X_star, epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                          rng=np.random.default_rng(0))  # fmt: skip
    idata = rel.to_inference_data()
    post = compat.get_group(idata, "posterior")
    np.testing.assert_array_equal(post["x_star"].values, X_star[:, 0])
    np.testing.assert_array_equal(post["f_dp"].values[0], rel.draws)  # order kept
    assert float(post["f_dp"].sel(x_star=0.1)[0, 0]) == rel.draws[0, 1]  # by value
    const = compat.get_group(idata, "constant_data")
    np.testing.assert_array_equal(const["X_star"].values, X_star)


# ------------------------------------------------------------------------------ dims renames
def test_renaming_a_dim_onto_an_existing_one_says_so():
    """xarray's "Cannot rename x_star to input_dim … Try using swap_dims" reached the user."""
    X = np.linspace(0, 1, 20)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    rel = cloaked_release(model, [[0.5], [0.7]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                          rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="'input_dim', which is already a dim"):
        rel.to_inference_data(dims={"f_dp": ["input_dim"]})
    na = releases.noise_aware()
    with pytest.raises(ValueError, match="'inducing', which is already a dim"):
        na.to_inference_data([0.0, 1.0], n_draws=3, dims={"f": ["inducing"]})
    rel.to_inference_data(dims={"f_dp": ["age"]})  # a new name: as before


def test_thompson_traces_carry_the_attrs_every_release_has():
    """The sample-path loop lacked ``pm_dpgp_version``, ``noise_source``, ``seed_policy`` and
    ``neighbouring_relation``; the tree loop ``pm_dpgp_version`` and ``seed_policy``."""
    from pm_dpgp import __version__

    keys = ("pm_dpgp_version", "noise_source", "seed_policy", "neighbouring_relation")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = dp_thompson_sampling(
            objective, pm.gp.cov.ExpQuad(1, ls=0.2),
            **thompson_kwargs(n_rounds=2, epsilon=200.0, noise_sd=2.0),
        )  # fmt: skip
        tree = dp_thompson_sampling_tree(
            objective, pm.gp.cov.ExpQuad(1, ls=0.2), epsilon=2.0, inducing=6,
            **thompson_kwargs(n_rounds=2, epsilon=10.0, noise_sd=0.05),
        )  # fmt: skip
    for res in (path, tree):
        attrs = compat.get_group(res.idata, "thompson").attrs
        assert all(k in attrs for k in keys), [k for k in keys if k not in attrs]
        assert attrs["pm_dpgp_version"] == __version__
        assert attrs["noise_source"] == "numpy_simulation"  # a Generator was passed
        assert attrs["seed_policy"].startswith("simulation")
        assert compat.get_group(res.idata, "constant_data").attrs["pm_dpgp_version"] == __version__
