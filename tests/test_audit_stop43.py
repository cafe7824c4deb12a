"""Stop-43 audits: findings fixed, each test failing on the code before the fix.

- Full-privacy entry points that read private ``data=(X, y)`` (sample-path and random-stopping
  selections, noise-aware and Dirichlet releases) compared only the number of columns: a
  ``DataFrame`` in another column order than the model's was used by position, so another
  data set was scored or released and charged (the same swap in ``X_star`` was refused).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import dirichlet_release, noise_aware_release
from pm_dpgp.models import gp_regression, sparse_gp_regression
from pm_dpgp.selection import product_grid, select_by_random_stopping, select_by_sample_paths


# ------------------------------------------- private data in another column order (audit D F1)
@pytest.fixture(scope="module")
def two_columns():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"age": rng.uniform(0, 10, 40), "weight": rng.uniform(0, 1, 40)})
    y = pd.Series(np.clip(np.sin(df["age"]) + 0.3 * rng.standard_normal(40), -2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sparse = sparse_gp_regression(
            df,
            y,
            lambda: pm.gp.cov.ExpQuad(2, ls=pm.Gamma("ell", 2, 2)),
            Z=pd.DataFrame({"age": np.linspace(0, 10, 6), "weight": np.linspace(0, 1, 6)}),
            noise_sd=lambda: pm.HalfNormal("sigma", 1.0),
        )
        exact = gp_regression(
            df,
            y,
            lambda: 4.0 * pm.gp.cov.ExpQuad(2, ls=pm.Gamma("ell", 2, 0.5)),
            noise_sd=lambda: pm.HalfNormal("noise", 2.0),
        )
    return df, y, sparse, exact


def _swapped_calls(df, y, sparse, exact):
    swapped = df[["weight", "age"]]
    X_star = pd.DataFrame({"age": np.linspace(0, 10, 4), "weight": np.linspace(0, 1, 4)})
    public = sparse.public_sparse_gp({"ell": 1.0, "sigma": 0.3})
    labels = (df["age"] > 5).astype(int)
    kw = dict(epsilon=1.0, delta=1e-4, rng=np.random.default_rng(1))
    return {
        "sample_paths": lambda L: select_by_sample_paths(
            exact, product_grid({"ell": [1.0, 3.0], "noise": [1.0]}), (swapped, y),
            X_star=X_star, domain=[(0, 10), (0, 1)], y_bounds=(-2, 2), gamma=0.5, ledger=L, **kw,
        ),
        "random_stopping": lambda L: select_by_random_stopping(
            sparse, product_grid({"ell": [0.3, 3.0], "sigma": [0.3]}), (swapped, y),
            y_bounds=(-2, 2), gamma=0.5, ledger=L, **kw,
        ),
        "noise_aware": lambda L: noise_aware_release(
            public, (swapped, y), y_bounds=(-2, 2), ledger=L, **kw
        ),
        "noise_aware_chunks": lambda L: noise_aware_release(
            public, [(swapped[:20], y[:20]), (swapped[20:], y[20:])], y_bounds=(-2, 2), ledger=L,
            **kw,
        ),
        "dirichlet": lambda L: dirichlet_release(
            public, (swapped, labels), n_classes=2, ledger=L, **kw
        ),
    }  # fmt: skip


@pytest.mark.parametrize(
    "call", ["sample_paths", "random_stopping", "noise_aware", "noise_aware_chunks", "dirichlet"]
)
def test_private_data_in_another_column_order_is_refused_before_the_spend(two_columns, call):
    ledger = Ledger(100.0, 1e-3, filter="renyi")
    with pytest.raises(ValueError, match=r"X has the columns \['weight', 'age'\].*nothing was"):
        _swapped_calls(*two_columns)[call](ledger)
    assert ledger.history == []


def test_private_data_in_the_model_order_is_still_released(two_columns):
    df, y, sparse, _ = two_columns
    release = noise_aware_release(
        sparse.public_sparse_gp({"ell": 1.0, "sigma": 0.3}), (df, y), epsilon=1.0, delta=1e-4,
        y_bounds=(-2, 2), rng=np.random.default_rng(1),
    )  # fmt: skip
    assert release.metadata["input_columns"] == ["age", "weight"]
