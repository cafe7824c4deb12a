"""Stop-35 mutation testing, round 7: kill tests for the code changed in stop 35.

An independent helper applied about 70 edits to the day's changes (release posterior, the
sample-path guards, the Dask refusals, plans' ``fits_in``, canonical signs, summaries).  The
release-posterior and ``fits_in`` survivors have their kill tests next to the code's own tests
(``tests/test_release_posterior.py``, ``tests/test_plan_ledger.py``); the others are here.
Each fails under the mutant named in its docstring and passes on the correct code.
"""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy.stats import norm

from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.workflow import dp_ppc, dp_summary, release_posterior
from pm_dpgp.workflow import thompson as thompson_module


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, 15)
    return gp_regression(X, np.sin(6 * X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.5)


def _paths(model, kernel_scale=1.0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return sample_path_release(
            model, np.array([[0.1], [0.5], [0.9]]), n_draws=2, rng=np.random.default_rng(0),
            kernel_scale=kernel_scale, y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=1e12,
            domain=(0.0, 1.0),
        )  # fmt: skip


def test_the_path_stream_and_state_refuse_every_copy(model):
    """S04 / S07: ``_PathStream`` or ``_PathState`` copyable (``dataclasses.asdict`` still
    failed on the other one, so only direct copies show it)."""
    rel = _paths(model)
    for part in (rel._rng, rel._state):
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be copied"):
                attempt(part)


def test_the_nugget_is_relative_to_the_kernel_scale(model):
    """S10: the nugget variance of the conditional draws not scaled by ``kernel_scale²``."""
    rel = _paths(model, kernel_scale=3.0)
    assert rel._nugget_variance == pytest.approx(9.0 * 1e-10, rel=1e-12)
    assert rel._nugget_variance == rel.metadata["nugget_variance"]


def test_dask_arrays_in_tuples_and_nested_lists_are_refused_by_the_builders():
    """V01 / V02: ``contains_dask`` ignoring tuples, or not looking inside nested lists."""
    da = pytest.importorskip("dask.array")
    X = da.from_array(np.linspace(0, 1, 20), chunks=5)
    y = da.from_array(np.sin(np.linspace(0, 1, 20)), chunks=5)
    Z = grid_inducing_points([0.0], [1.0], [4])
    cov = pm.gp.cov.ExpQuad(1, ls=0.3)
    for wrapped_X, wrapped_y in (
        (tuple(X[i] for i in range(20)), tuple(y[i] for i in range(20))),
        ([[X[i]] for i in range(20)], np.sin(np.linspace(0, 1, 20))),  # only X wrapped
    ):
        with pytest.raises(TypeError, match="Dask collection"):
            sparse_gp_regression(wrapped_X, wrapped_y, cov, noise_sd=0.1, Z=Z)


def test_a_release_posterior_is_refused_for_other_release_types(model):
    """P08: ``posterior=`` accepted with a sample-path release (it then failed elsewhere, or
    drew ``f`` from a posterior that is not this release's)."""
    X = model.public_gp().X[:, 0]
    label = gp_regression(X, np.sin(6 * X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.5)
    cloak = cloaked_release(
        label, np.array([0.1, 0.5, 0.9]), epsilon=1.0, delta=1e-5, y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(0),
    )  # fmt: skip
    rp = release_posterior(cloak, label, np.array([0.1, 0.5, 0.9]))
    with pytest.raises(ValueError, match="applies to a cloaking or prior-noise Release"):
        dp_ppc(
            _paths(model), np.array([0.1, 0.5, 0.9]), np.zeros(3), noise_sd=0.5,
            training=None, posterior=rp,
        )  # fmt: skip


def test_the_non_private_thompson_path_does_not_depend_on_eigenvector_signs(model, monkeypatch):
    """C04: the non-private baseline's eigen-root without canonical signs (LAPACK builds
    differ in the signs they return, so the same seed gave other paths on the other stack)."""
    public = model.public_gp()
    y = np.sin(6 * public.X[:, 0])
    X_new = np.linspace(0, 1, 7)[:, None]
    first = thompson_module._exact_path(public, y, np.random.default_rng(3))(X_new)
    real = np.linalg.eigh

    def flipped(a, *args, **kwargs):
        w, V = real(a, *args, **kwargs)
        return w, -V

    monkeypatch.setattr(np.linalg, "eigh", flipped)
    again = thompson_module._exact_path(public, y, np.random.default_rng(3))(X_new)
    np.testing.assert_allclose(again, first, rtol=0, atol=1e-10)


def test_dp_summary_mean_interval_takes_the_given_probability(model):
    """U02: the released-mean interval at the default probability whatever ``prob`` says
    (the existing test used ``prob=0.9``, the default)."""
    X = model.public_gp().X[:, 0]
    label = gp_regression(X, np.sin(6 * X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.5)
    rel = cloaked_release(
        label, np.linspace(0, 1, 5), epsilon=1.0, delta=1e-5, y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(0),
    )  # fmt: skip
    table = dp_summary(rel, prob=0.5)
    half = norm.ppf(0.75) * rel.noise_sd
    np.testing.assert_allclose(table["mean_ub"].astype(float), rel.draws[0] + half, rtol=1e-12)
