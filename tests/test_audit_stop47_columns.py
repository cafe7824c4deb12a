"""Stop 47: inducing inputs given as a DataFrame are checked against the model's columns.

The FITC builder was fixed by the stop-47 cloaking audit; the same defect was in the VFE
builder (``sparse_gp_regression(Z=...)``), the Dirichlet builder and
``classification_release(inducing_points=...)``: a ``DataFrame`` in another column order than
``X`` was read by position, so the inducing inputs lay at (weight, age) instead of (age,
weight), silently (the classification audit measured draws moved by up to 1.13).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.mechanisms import classification_release
from pm_dpgp.models import (
    dirichlet_gp_classification,
    gp_classification,
    sparse_gp_regression,
)

rng = np.random.default_rng(0)
X = pd.DataFrame({"age": rng.uniform(0, 80, 40), "weight": rng.uniform(30, 70, 40)})
Z = pd.DataFrame({"age": [10.0, 40.0, 70.0], "weight": [35.0, 50.0, 65.0]})
SWAPPED = Z[["weight", "age"]]
COV = pm.gp.cov.ExpQuad(2, ls=[20.0, 10.0])


def test_vfe_builder_refuses_z_in_another_column_order() -> None:
    y = np.sin(X["age"].to_numpy() / 10)
    sparse_gp_regression(X, y, COV, Z=Z, noise_sd=0.3)  # same order: accepted
    with pytest.raises(ValueError, match=r"Z has the columns \['weight', 'age'\]"):
        sparse_gp_regression(X, y, COV, Z=SWAPPED, noise_sd=0.3)


def test_dirichlet_builder_refuses_z_in_another_column_order() -> None:
    labels = (X["age"].to_numpy() > 40).astype(int)
    dirichlet_gp_classification(X, labels, COV, Z=Z, n_classes=2)
    with pytest.raises(ValueError, match="Z has the columns"):
        dirichlet_gp_classification(X, labels, COV, Z=SWAPPED, n_classes=2)


def test_classification_release_refuses_inducing_points_in_another_column_order() -> None:
    labels = (X["age"].to_numpy() > 40).astype(int)
    gpc = gp_classification(X, labels, COV)
    kw = dict(epsilon=1.0, delta=1e-3, rng=np.random.default_rng(1))
    classification_release(gpc, Z, inducing_points=Z, **kw)
    from pm_dpgp.accounting import Ledger

    ledger = Ledger(epsilon=5.0, delta=1e-2)
    with pytest.raises(ValueError, match="inducing_points has the columns"):
        classification_release(gpc, Z, inducing_points=SWAPPED, ledger=ledger, **kw)
    assert ledger.history == []  # refused before any spend


def test_to_inference_data_refuses_dims_and_coords_that_name_nothing() -> None:
    """ArviZ ignores them: ``dims={"f": ["age"]}`` on a cloaked release (variable ``f_dp``)
    kept the dim ``x_star``, silently (stop-47 user audit)."""
    from pm_dpgp.mechanisms import cloaked_release
    from pm_dpgp.models import gp_regression

    x = np.linspace(0, 5, 12)
    model = gp_regression(x, np.sin(x), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)
    rel = cloaked_release(
        model, np.linspace(0, 5, 4), epsilon=1.0, delta=1e-5, y_bounds=(-1.5, 1.5),
        rng=np.random.default_rng(0), n_draws=3,
    )  # fmt: skip
    idata = rel.to_inference_data(dims={"f_dp": ["age"]}, coords={"age": [0.0, 1.0, 2.0, 3.0]})
    assert "age" in idata.posterior["f_dp"].dims
    with pytest.raises(ValueError, match=r"dims names \['f'\].*its variables are"):
        rel.to_inference_data(dims={"f": ["age"]})
    with pytest.raises(ValueError, match=r"coords names \['age'\].*its dims are"):
        rel.to_inference_data(coords={"age": [0.0, 1.0, 2.0, 3.0]})
