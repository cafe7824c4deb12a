"""Private values changed through ``pm.Data`` after the model was built (``pm.set_data``).

The builders check the data they are given; a container can be changed afterwards.  A
mechanism must then neither refuse because of one private value (before its spend: an oracle;
after it: spent for nothing, and the outcome depends on the value) nor use the value as is:
it reads the data unchecked and maps bad records record by record (``docs/errors.md``).
Audit of stop 25: ``sample_path_release``, ``cloaked_release``, ``prior_noise_release``,
``noise_aware_release`` (``data=None``) and ``dp_ppc(training=...)`` all refused.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release, prior_noise_release, sample_path_release
from pm_dpgp.models import gp_regression

X0 = np.linspace(0, 1, 10)[:, None]
Y0 = np.sin(3 * X0[:, 0])
XS = np.linspace(0, 1, 3)[:, None]


def _model(X: np.ndarray, y: np.ndarray):
    """A model on containers holding clean data, then set to ``(X, y)``."""
    with pm.Model():
        Xd, yd = pm.Data("Xd", X0.copy()), pm.Data("yd", Y0.copy())
        m = gp_regression(Xd, yd, cov_func=pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
        pm.set_data({"Xd": X, "yd": y})
    return m


def _paths(m, domain=(0.0, 1.0)):
    ledger = Ledger(epsilon=1e6, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = sample_path_release(
            m,
            XS,
            n_draws=2,
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            domain=domain,
            kappa=None if domain else 0.0,
            ledger=ledger,
            rng=np.random.default_rng(0),
        )
    assert len(ledger.history) == 1
    return rel.released_values


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_sample_paths_map_bad_private_records(bad):
    """A non-finite response is the prior mean (0); a NaN input is the domain's centre and
    ±inf its faces: the release equals the one on those values, with the same seed."""
    y = np.where(np.arange(10) == 3, bad, Y0)
    at_mean = np.where(np.arange(10) == 3, 0.0, Y0)
    np.testing.assert_array_equal(_paths(_model(X0, y)), _paths(_model(X0, at_mean)))
    X = X0.copy()
    X[3, 0] = bad
    mapped = X0.copy()
    mapped[3, 0] = 0.5 if np.isnan(bad) else (1.0 if bad > 0 else 0.0)
    np.testing.assert_allclose(_paths(_model(X, Y0)), _paths(_model(mapped, Y0)), rtol=1e-12)


def test_sample_paths_without_domain_survive_an_extreme_input():
    X = X0.copy()
    X[3, 0] = 1e300
    assert np.all(np.isfinite(_paths(_model(X, Y0), domain=None)))


def _label_draws(release, model) -> np.ndarray:
    """The draws of a label-private release of ``model`` (seeded), charged exactly once."""
    ledger = Ledger(epsilon=100.0, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = release(
            model, XS, epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0), ledger=ledger,
            rng=np.random.default_rng(0),
        )  # fmt: skip
    assert len(ledger.history) == 1
    return rel.draws


@pytest.mark.parametrize("release", [cloaked_release, prior_noise_release])
def test_label_releases_map_a_non_finite_label_to_the_midpoint(release):
    outs = [
        _label_draws(release, _model(X0, np.where(np.arange(10) == 3, value, Y0)))
        for value in (np.nan, 0.0)  # the midpoint of y_bounds = (-2, 2)
    ]
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("which", ["X", "y"])
def test_noise_aware_release_reads_the_stored_data_unchecked(which):
    """``noise_aware_release(model, None)`` uses the model's own data: a NaN record set after
    the build is handled like the same record passed as ``data=(X, y)`` (record-wise)."""
    from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
    from pm_dpgp.models import sparse_gp_regression

    X, y = X0.copy(), Y0.copy()
    (y if which == "y" else X[:, 0])[3] = np.nan
    Z = np.linspace(0, 1, 3)[:, None]
    with pm.Model():
        Xd, yd = pm.Data("Xd", X0.copy()), pm.Data("yd", Y0.copy())
        m = sparse_gp_regression(Xd, yd, pm.gp.cov.ExpQuad(1, ls=0.3), Z=Z, noise_sd=0.3)
        pm.set_data({"Xd": X, "yd": y})
    outs = []
    for data in (None, (X, y)):
        ledger = Ledger(epsilon=1e6, delta=1e-3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rel = noise_aware_release(
                m,
                data,
                epsilon=1.0,
                delta=1e-5,
                y_bounds=(-2.0, 2.0),
                ledger=ledger,
                rng=np.random.default_rng(0),
            )
        assert len(ledger.history) == 1
        outs.append(rel)
    np.testing.assert_array_equal(outs[0].u_mean, outs[1].u_mean)
    np.testing.assert_array_equal(outs[0].u_cov, outs[1].u_cov)


def test_ppc_identity_check_reads_no_training_value():
    """``dp_ppc(..., training=model)`` compares objects only: a NaN private training label
    (set after the build) does not make it raise."""
    from pm_dpgp.workflow.ppc import dp_ppc

    with pm.Model():
        yd = pm.Data("yd", Y0.copy())
        m = gp_regression(X0, yd, cov_func=pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = cloaked_release(
            m, XS, epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0), rng=np.random.default_rng(0)
        )
        with m.model:
            pm.set_data({"yd": np.where(np.arange(10) == 3, np.nan, Y0)})
        dp_ppc(rel, XS, np.zeros(3), noise_sd=0.3, training=m, rng=np.random.default_rng(1))


@pytest.mark.parametrize("builder", ["fitc", "nonstationary"])
def test_cloaking_other_model_families_map_a_non_finite_label(builder):
    """The same for the FITC and non-stationary (Gibbs) families on the label path."""
    from pm_dpgp.models import fitc_gp_regression, nonstationary_gp_regression

    outs = []
    for value in (np.nan, 0.0):
        with pm.Model():
            yd = pm.Data("yd", Y0.copy())
            if builder == "fitc":
                m = fitc_gp_regression(
                    X0, yd, pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3, n_inducing=4, seed=0
                )
            else:
                m = nonstationary_gp_regression(
                    X0, yd, lambda x: 0.3 + 0.0 * x, kernel_scale=1.0, noise_sd=0.3
                )
            pm.set_data({"yd": np.where(np.arange(10) == 3, value, Y0)})
        outs.append(_label_draws(cloaked_release, m))
    np.testing.assert_array_equal(outs[0], outs[1])
