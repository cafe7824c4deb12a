"""Stop-46 audit of the workflow layer (dp_ppc, partition features).

* ``dp_ppc(release, X, y, training=None)`` (or ``holdout_is_public=True``) published the
  training outputs (and, for a fully private release, the training inputs) that the release
  itself remembers and that its own ``to_inference_data`` refuses (stop 45);
* ``DyadicPartitionFeatures`` on a box whose width overflows float64 put every point in the
  first cell (silently), and ``from_lengthscale`` with a lengthscale so small that the box is
  ``inf`` lengthscales wide raised Python's ``OverflowError``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.compat import get_group, summary_stats
from pm_dpgp.mechanisms import cloaked_release, noise_aware_release, sample_path_release
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.workflow import PrivateDataError, dp_ppc, dp_summary
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures


@pytest.fixture(scope="module")
def label_data():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 15))
    y = np.sin(X) + 0.2 * rng.standard_normal(15)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        release = cloaked_release(
            model, X, epsilon=1.0, delta=1e-5, y_bounds=(-2.0, 2.0), rng=np.random.default_rng(1)
        )
    return X, y, model, release


@pytest.mark.parametrize(
    "kwargs", [{"training": None}, {"training": "model", "holdout_is_public": True}]
)
@pytest.mark.parametrize("which", ["given", "model"])
def test_dp_ppc_refuses_the_training_outputs_the_release_remembers(label_data, kwargs, which):
    X, y, model, release = label_data
    with pytest.raises(PrivateDataError):  # its own export refuses them (stop 45)
        release.to_inference_data(
            observed_data={"y": y}, observed_is_public=True, predictive_sd=0.3
        )
    kwargs = {k: model if v == "model" else v for k, v in kwargs.items()}
    y_train = y if which == "given" else model.y
    with pytest.raises(PrivateDataError, match="y_holdout"):
        dp_ppc(release, X, y_train, noise_sd=0.3, rng=np.random.default_rng(0), **kwargs)
    # a copy is not recognised (identity only, values are never compared), as documented
    idata = dp_ppc(release, X, y.copy(), noise_sd=0.3, rng=np.random.default_rng(0), **kwargs)
    assert get_group(idata, "observed_data")["y"].shape == (15,)


def test_dp_ppc_refuses_the_training_inputs_a_full_release_remembers():
    rng = np.random.default_rng(2)
    X = np.sort(rng.uniform(0, 6, 20))
    y = np.clip(np.sin(X), -1.9, 1.9)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths = sample_path_release(
            model, np.linspace(0, 6, 7), n_draws=2, kernel_scale=1.0, y_bounds=(-2.0, 2.0),
            delta=1e-5, ledger=Ledger(), domain=(0.0, 6.0), rng=np.random.default_rng(3),
        )  # fmt: skip
    with pytest.raises(PrivateDataError, match="X_holdout"):
        dp_ppc(paths, X[:4], np.zeros(4), noise_sd=0.3, training=None)
    with pytest.raises(PrivateDataError, match="X_holdout"):
        dp_ppc(paths, X, np.zeros(20), noise_sd=0.3, training=model, holdout_is_public=True)
    dp_ppc(paths, X[:4].copy(), np.zeros(4), noise_sd=0.3, training=None)  # a copy: accepted

    Xn = rng.uniform(-3, 3, 300)
    yn = np.sin(2 * Xn)
    Z = grid_inducing_points(-3.2, 3.2, 8)
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3
    ).public_sparse_gp()
    qu = noise_aware_release(
        public, (Xn, yn), epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(4),
    )  # fmt: skip
    with pytest.raises(PrivateDataError, match="X_holdout"):
        dp_ppc(qu, Xn[:5], np.zeros(5), training=None, n_draws=10)
    with pytest.raises(PrivateDataError, match="y_holdout"):
        dp_ppc(qu, np.zeros(300), yn, training=None, holdout_is_public=True, n_draws=10)


def test_partition_features_refuse_a_box_whose_width_overflows():
    with pytest.raises(ValueError, match="overflows"):
        DyadicPartitionFeatures(-1e308, 1e308, 2)
    with pytest.raises(ValueError, match="overflows"):
        DyadicPartitionFeatures.from_lengthscale([0.0, -1e308], [1.0, 1e308], 0.5)
    # a wide box whose width is a float64 still splits at its midpoint
    f = DyadicPartitionFeatures(-1e307, 1e307, 1)
    np.testing.assert_array_equal(f.cells([[-1e306], [1e306]])[:, 0], [0, 1])


@pytest.mark.parametrize("lengthscale", [1e-320, 5e-324])
def test_partition_levels_from_a_vanishing_lengthscale_are_a_clear_error(lengthscale):
    with pytest.raises(ValueError, match="lengthscales wide"):
        DyadicPartitionFeatures.from_lengthscale(0.0, 1.0, lengthscale)


def test_partition_lengthscale_of_another_length_is_a_clear_error():
    with pytest.raises(ValueError, match="one value or one per dimension"):
        DyadicPartitionFeatures.from_lengthscale([0.0, 0.0], [1.0, 1.0], [1.0, 1.0, 1.0])
    assert DyadicPartitionFeatures.from_lengthscale([0.0, 0.0], [1.0, 1.0], [1.0, 0.5]).levels == 2


def test_a_variable_named_twice_is_summarised_once_on_both_stacks(label_data):
    """ArviZ 0.x lists ``var_names=["f", "f"]`` once; on ArviZ 1 each name was summarised on
    its own, so the rows came twice and dp_summary's mean interval was left out."""
    _, _, _, release = label_data
    idata = release.to_inference_data()
    name = next(iter(get_group(idata, "posterior").data_vars))
    once = dp_summary(idata, var_names=[name])
    twice = dp_summary(idata, var_names=[name, name])
    assert twice.index.is_unique
    assert list(twice.index) == list(once.index)
    np.testing.assert_array_equal(twice["mean_lb"].values, once["mean_lb"].values)
    table = summary_stats(idata, var_names=[name, name])
    assert table.index.is_unique and len(table) == len(once)


def test_plot_dp_release_refuses_the_training_outputs_as_hold_out_points(label_data):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pm_dpgp.workflow import plot_dp_release

    X, y, model, release = label_data
    with pytest.raises(PrivateDataError, match="y_holdout"):
        plot_dp_release(release, X_holdout=X, y_holdout=y)
    with pytest.raises(PrivateDataError, match="y_holdout"):
        plot_dp_release(release, X_holdout=X, y_holdout=model.y)
    ax = plot_dp_release(release, X_holdout=X, y_holdout=y.copy())  # a copy: not recognised
    plt.close(ax.figure)
