"""Small releases of every type, shared by ``test_compat.py`` and ``test_arviz_native.py``.

The regression model behind them is the ``small_gp`` fixture of ``tests/conftest.py``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import (
    cloaked_release,
    dirichlet_release,
    noise_aware_release,
    prior_noise_release,
    sample_path_release,
)
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression


def label_release(kind: str, model: Any) -> Any:
    """A cloaking or prior-noise release of ``model`` at 25 points, 2 draws."""
    fn = {"cloaking": cloaked_release, "prior_noise": prior_noise_release}[kind]
    return fn(
        model,
        np.linspace(0, 6, 25),
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-2.0, 2.0),
        n_draws=2,
        rng=np.random.default_rng(1),
    )


def sample_path(model: Any) -> Any:
    """A sample-path release of ``model`` (3 paths), its PrivacyWarnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample_path_release(
            model,
            np.linspace(0, 6, 20),
            n_draws=3,
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            ledger=Ledger(),  # records the (large) cost; the cost is not under test here
            domain=(0.0, 6.0),
            rng=np.random.default_rng(2),
        )


def _public_sparse(noise_sd: float) -> Any:
    Z = grid_inducing_points(-3.2, 3.2, 8)
    model = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=noise_sd)
    return model.public_sparse_gp()


def noise_aware() -> Any:
    """A noise-aware q(u) release of 300 points of ``sin(2x)``."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, 300)
    y = np.sin(2 * X) + 0.1 * rng.standard_normal(300)
    return noise_aware_release(
        _public_sparse(0.3),
        (X, y),
        epsilon=1.0,
        delta=1e-4,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(4),
    )


def dirichlet() -> Any:
    """A three-class Dirichlet release of 300 points."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, 300)
    lab = (X > -1).astype(int) + (X > 1).astype(int)
    return dirichlet_release(
        _public_sparse(1.0),
        (X, lab),
        n_classes=3,
        epsilon=1.0,
        delta=1e-4,
        rng=np.random.default_rng(6),
    )


def thompson_kwargs(*, n_rounds: int, epsilon: float, noise_sd: float) -> dict[str, Any]:
    """Arguments of a short Thompson-sampling run on ``sin(6x)`` over ``[0, 1]``."""
    return {
        "domain": (0.0, 1.0),
        "X_init": [[0.2], [0.7]],
        "n_rounds": n_rounds,
        "noise_sd": noise_sd,
        "y_bounds": (-1.0, 1.0),
        "ledger": Ledger(epsilon=epsilon, delta=1e-5),
        "candidates": 32,
        "progressbar": False,
        "rng": np.random.default_rng(8),
    }


def objective(X: np.ndarray) -> np.ndarray:
    return np.sin(6 * X[:, 0])
