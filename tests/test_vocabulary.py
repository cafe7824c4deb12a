"""One vocabulary (issue 14, point 4): renamed arguments keep working for one release with a
DeprecationWarning and give the same result; old and new together are a TypeError."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp._validation import PrivacyWarning, renamed
from pm_dpgp.audit import check_public_choices
from pm_dpgp.audit.public_choices import DataDerivedChoiceError
from pm_dpgp.mechanisms import SamplePathBound, noise_aware_release, sample_path_release
from pm_dpgp.mechanisms.full.sample_path_bounds import feasible_configurations
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from pm_dpgp.workflow import dp_thompson_sampling

X = np.linspace(0.0, 2.0, 12)
Y = np.sin(3 * X)


def test_renamed_helper():
    kw = {"sigma": 2.0}
    with pytest.warns(DeprecationWarning, match="'sigma' is renamed 'noise_sd'"):
        assert renamed("sigma", "noise_sd", kw, None, func="f") == 2.0
    assert kw == {}
    assert renamed("sigma", "noise_sd", {}, 3.0, func="f") == 3.0
    with pytest.raises(TypeError, match="both 'sigma'"):
        renamed("sigma", "noise_sd", {"sigma": 1.0}, 2.0, func="f")


def test_builders_noise_sd():
    cov = pm.gp.cov.ExpQuad(1, ls=0.5)
    new = gp_regression(X, Y, cov, noise_sd=0.3)
    with pytest.warns(DeprecationWarning, match="noise_sd"):
        old = gp_regression(X, Y, cov, sigma=0.3)
    assert old.public_gp().noise_var == new.public_gp().noise_var == 0.3**2
    with pytest.warns(DeprecationWarning, match="GPRegression.sigma"):
        assert old.sigma == 0.3
    with pytest.raises(TypeError, match="both"):
        gp_regression(X, Y, cov, sigma=0.3, noise_sd=0.3)
    with pytest.raises(TypeError, match="missing required keyword argument: 'noise_sd'"):
        gp_regression(X, Y, cov)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nosie_sd'"):
        gp_regression(X, Y, cov, nosie_sd=0.3)
    Z = grid_inducing_points([0.0], [2.0], [4])
    with pytest.warns(DeprecationWarning):
        sp = sparse_gp_regression(X, Y, cov, Z=Z, sigma=0.3)
    assert sp.public_sparse_gp().noise_var == 0.3**2


def _path_release(model, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return sample_path_release(
            model,
            [[0.5], [1.5]],
            delta=1e-5,
            epsilon=1e9,
            kappa=0.0,
            kernel_class="generic",
            rng=np.random.default_rng(0),
            **kw,
        )


def test_sample_path_release_old_names_same_release():
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=1.0, mean=0.5)
    new = _path_release(model, kernel_scale=1.0, y_bounds=(-0.5, 1.5), n_draws=3)
    with pytest.warns(DeprecationWarning) as record:
        old = _path_release(model, sigma=1.0, y_bound=1.0, n_paths=3)
    assert {str(w.message).split("'")[1] for w in record} >= {"sigma", "y_bound", "n_paths"}
    # y_bound=M was centred at the prior mean: (μ₀ − M, μ₀ + M)
    assert old.metadata["y_bounds"] == new.metadata["y_bounds"] == (-0.5, 1.5)
    assert old.epsilon == new.epsilon and np.array_equal(old.released_values, new.released_values)
    with pytest.warns(DeprecationWarning, match="n_draws"):
        assert old.n_paths == 3
    for both in (
        {"sigma": 1.0, "kernel_scale": 1.0, "y_bounds": (-1, 1)},
        {"kernel_scale": 1.0, "y_bound": 1.0, "y_bounds": (-1, 1)},
        {"kernel_scale": 1.0, "y_bounds": (-1, 1), "n_paths": 1, "n_draws": 1},
    ):
        with pytest.raises(TypeError, match="both"):
            _path_release(model, **both)


def test_noise_aware_release_old_names_same_release():
    Z = grid_inducing_points([0.0], [2.0], [5])
    model = sparse_gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.2)
    kw = dict(epsilon=1.0, delta=1e-5)
    new = noise_aware_release(model, y_bounds=(-0.8, 1.2), rng=np.random.default_rng(1), **kw)
    with pytest.warns(DeprecationWarning):
        old = noise_aware_release(
            model, y_bound=1.0, bound_is_public=True, rng=np.random.default_rng(1), **kw
        )
    assert old.metadata["R_y"] == new.metadata["R_y"] == pytest.approx(1.0, rel=1e-15)
    assert np.array_equal(old.m, new.m)
    with pytest.raises(TypeError, match="both"):
        noise_aware_release(model, y_bound=1.0, y_bounds=(-1, 1), **kw)


def test_bound_and_planning_helpers_old_names():
    new = SamplePathBound(10, kernel_scale=1.0, r2=1.0, M_Y=1.0, kappa=0.2)
    with pytest.warns(DeprecationWarning):
        old = SamplePathBound(10, sigma=1.0, r2=1.0, y_bound=1.0, kappa=0.2)
    assert old == new
    kw = dict(n=20, kappa=0.1, epsilon=5.0, delta=1e-5, r2s=[1.0, 10.0])
    a = feasible_configurations(y_bounds=(-1.0, 1.0), kernel_scales=[1.0], **kw)
    with pytest.warns(DeprecationWarning):
        b = feasible_configurations(y_bound=1.0, sigmas=[1.0], **kw)
    assert a == b


def test_check_public_choices_old_centred_bound():
    y = np.array([1.0, 2.0, 3.5])
    with pytest.warns(DeprecationWarning), pytest.raises(DataDerivedChoiceError, match="y_bounds"):
        check_public_choices(None, y, y_bound=1.5, mean=2.0)  # (0.5, 3.5): max(y) = 3.5


def test_thompson_old_names():
    def objective(Xq):
        return np.sin(3 * Xq[:, 0])

    from pm_dpgp.accounting import Ledger

    kw = dict(
        domain=([0.0], [2.0]),
        X_init=[[0.5], [1.5]],
        n_rounds=1,
        noise_sd=3.0,
        candidates=8,
        progressbar=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        new = dp_thompson_sampling(
            objective,
            pm.gp.cov.ExpQuad(1, ls=0.5),
            kernel_scale=1.0,
            y_bounds=(-1.0, 1.0),
            ledger=Ledger(epsilon=1e6, delta=1e-5),
            rng=np.random.default_rng(0),
            **kw,
        )
        with pytest.warns(DeprecationWarning):
            old = dp_thompson_sampling(
                objective,
                pm.gp.cov.ExpQuad(1, ls=0.5),
                sigma=1.0,
                y_bound=1.0,
                ledger=Ledger(epsilon=1e6, delta=1e-5),
                rng=np.random.default_rng(0),
                **kw,
            )
    assert np.array_equal(new.x_chosen, old.x_chosen)


def test_audit_old_names():
    from pm_dpgp.audit import LiraSetting, posterior_renyi_divergence
    from pm_dpgp.audit.renyi import eq_kernel

    k = eq_kernel(0.5)
    args = (k, [[0.1], [0.4]], [0.2, -0.3], [[0.1], [0.9]], [0.2, 0.5], [[0.3], [0.6]])
    new = posterior_renyi_divergence(*args, alpha=1.5, kernel_scale=1.2, r2=0.5)
    with pytest.warns(DeprecationWarning, match="kernel_scale"):
        old = posterior_renyi_divergence(*args, alpha=1.5, sigma=1.2, r2=0.5)
    assert old == new
    with pytest.warns(DeprecationWarning):
        setting = LiraSetting(sigma=1.3, y_bound=2.0)
    assert setting == LiraSetting(kernel_scale=1.3, M_Y=2.0)
    with pytest.raises(TypeError, match="both"):
        LiraSetting(sigma=1.3, kernel_scale=1.3)


def test_noise_aware_sensitivity_helpers_old_name():
    from pm_dpgp.mechanisms.full.noise_aware import eq6_sensitivity, l2_sensitivity

    for fn in (eq6_sensitivity, l2_sensitivity):
        with pytest.warns(DeprecationWarning, match="R_y"):
            old = fn(y_bound=2.0, R_k=1.0)
        assert old == fn(2.0, 1.0) == fn(R_y=2.0, R_k=1.0)
