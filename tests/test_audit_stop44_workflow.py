"""Stop-44 audit of the workflow layer on both stacks (ArviZ 0.x and ArviZ 1).

* a noise-aware ``q(u)`` release whose public inducing inputs repeat could not be exported:
  the default ``inducing`` coordinate was ``Z[:, 0]`` even when it repeated a value, and the
  check for distinct coordinates refused it ("Keep the default index", which it was);
* ``dp_summary(var_names=["f", "~p"])`` listed ``f``'s rows twice on ArviZ 1 (``"~p"`` was
  summarised on its own, i.e. every variable but ``p``), once on ArviZ 0.x;
* a ``var_names`` that leaves no variable gave xarray's or pandas' message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.compat import get_group
from pm_dpgp.mechanisms import noise_aware_release
from pm_dpgp.models import sparse_gp_regression
from pm_dpgp.workflow import dp_ppc, dp_summary
from tests import releases


def test_qu_release_with_repeated_inducing_inputs_exports() -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, 200)
    y = np.sin(2 * X) + 0.1 * rng.standard_normal(200)
    Z = np.array([[-1.0], [0.0], [0.0], [1.0]])  # public, one input twice
    model = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        release = noise_aware_release(
            model.public_sparse_gp(),
            (X, y),
            epsilon=1.0,
            delta=1e-4,
            y_bounds=(-2.0, 2.0),
            rng=np.random.default_rng(4),
        )
    idata = release.to_inference_data(
        np.linspace(-2, 2, 5), n_draws=20, rng=np.random.default_rng(0)
    )
    post = get_group(idata, "posterior")
    assert post["u"].shape == (1, 20, 4)
    np.testing.assert_array_equal(post["inducing"].values, np.arange(4))  # positions
    np.testing.assert_array_equal(get_group(idata, "constant_data")["Z"].values, Z)
    # distinct inducing inputs still label the dim by value
    labelled = releases.noise_aware().to_inference_data(n_draws=5, rng=np.random.default_rng(0))
    Z8 = get_group(labelled, "constant_data")["Z"].values[:, 0]
    np.testing.assert_array_equal(get_group(labelled, "posterior")["inducing"].values, Z8)


@pytest.fixture(scope="module")
def dirichlet_ppc():
    release = releases.dirichlet()
    X_h = np.linspace(-2.5, 2.5, 4)
    labels = (X_h > -1).astype(int) + (X_h > 1).astype(int)
    return dp_ppc(release, X_h, labels, training=None, n_draws=50, rng=np.random.default_rng(2))


@pytest.mark.parametrize(
    ("var_names", "expected"),
    [(["f", "~p"], ["f"]), (["~p"], ["f"]), (["p", "~f"], ["p"]), (["p", "f"], ["p", "f"])],
)
def test_dp_summary_reads_include_and_exclude_as_arviz_0x(dirichlet_ppc, var_names, expected):
    table = dp_summary(dirichlet_ppc, var_names=var_names)
    assert table.index.is_unique
    assert [str(i).split("[")[0] for i in table.index] == [v for v in expected for _ in range(12)]


@pytest.mark.parametrize("var_names", [["~f", "~p"], ["f", "~f", "~p"]])
def test_dp_summary_refuses_a_selection_of_no_variable(dirichlet_ppc, var_names):
    with pytest.raises(ValueError, match="leaves no variable"):
        dp_summary(dirichlet_ppc, var_names=var_names)
