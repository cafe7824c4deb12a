"""Shared fixtures: the !Kung setting of Smith et al. (2018) and small synthetic GPs."""

from __future__ import annotations

import os

import numpy as np
import pymc as pm
import pytest
from hypothesis import settings

from pm_dpgp.datasets import load_kung_women
from pm_dpgp.models import gp_regression

KUNG_BOUNDS = (50.0, 170.0)

# Property tests draw the same examples on every machine (a clean clone must not meet an
# example nobody has seen); `HYPOTHESIS_PROFILE=explore python -m pytest` searches afresh.
settings.register_profile("pm_dpgp", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pm_dpgp"))


@pytest.fixture(scope="session")
def kung_model():
    """GP regression on all 287 women, hyperparameters fixed a priori (paper footnote 1)."""
    age, height = load_kung_women()
    return gp_regression(
        age, height, 7.72**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=14.0, mean=110.0
    )


@pytest.fixture(scope="session")
def kung_ages() -> np.ndarray:
    return np.linspace(0.0, 110.0, 200)


@pytest.fixture(scope="module")
def small_gp():
    """Exact GP regression on 30 points of ``sin(x)`` in ``[0, 6]``, outputs in ``[-1.9, 1.9]``
    (the releases of ``tests/releases.py`` are made from it)."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)


@pytest.fixture(scope="module")
def label_model():
    """Exact GP regression on 25 points of ``cos(2x)`` in ``[0, 2]`` (the plan tests)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(0.0, 2.0, 25)
    return gp_regression(X, np.cos(2 * X), pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.3)


def small_model(seed: int, n: int = 12, ls: float = 1.5, scale: float = 1.0, noise: float = 0.3):
    """A small 1-D GP regression with outputs inside the public range [-2, 2]."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 6, n))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(n), -1.9, 1.9)
    return gp_regression(X, y, scale**2 * pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=noise, mean=0.0)


@pytest.fixture
def one_blas_thread():
    """Small matrices: multithreaded BLAS only adds contention on a loaded 2-core machine."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(1):
        yield


def pytest_report_header(config) -> str:
    """Name the stack in the run's header (CI runs the suite on two stacks)."""
    from pm_dpgp.compat import stack_description

    return f"pm_dpgp test stack: {stack_description()}"
