"""A ``xarray.DataTree`` is read on either ArviZ stack (stop-49 new-user audit).

On the ArviZ 0.x stack (PyMC 5) a dp_ppc object saved and re-read with ``xr.open_datatree``
(or made on the other stack) is a DataTree, not an ``InferenceData``: ``holdout_elpd`` failed
in ``compat.group_names`` with "TypeError: 'tuple' object is not callable".  The group
helpers now dispatch on the object's type, not on the installed ArviZ.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import xarray as xr

from pm_dpgp.accounting import Ledger
from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import get_group, group_names, iter_all_groups
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import dp_ppc, dp_summary, holdout_elpd


def test_a_datatree_dp_ppc_object_is_read_like_the_native_one() -> None:
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    hold = np.zeros(30, dtype=bool)
    hold[::3] = True
    model = gp_regression(X[~hold], y[~hold], pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    rel = cloaked_release(
        model, X[hold], epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), n_draws=4,
        ledger=Ledger(epsilon=5.0, delta=1e-2), rng=np.random.default_rng(1),
    )  # fmt: skip
    native = dp_ppc(
        rel, X[hold], y[hold], noise_sd=0.3, training=model, rng=np.random.default_rng(2)
    )
    tree = xr.DataTree.from_dict({g: get_group(native, g) for g in group_names(native)})
    assert group_names(tree) == group_names(native)
    for g in group_names(native):
        assert get_group(tree, g).identical(get_group(native, g))
    assert [name.strip("/") for name, _ in iter_all_groups(tree)][1:] == group_names(native)
    elpd_native, pointwise_native = holdout_elpd(native)
    elpd_tree, pointwise_tree = holdout_elpd(tree)
    assert elpd_tree == elpd_native
    np.testing.assert_array_equal(pointwise_tree, pointwise_native)
    assert dp_summary(tree).equals(dp_summary(native))
    assert scan_for_values(tree, y[~hold]) == scan_for_values(native, y[~hold])
