"""Planning before data (issue 14, point 5): the plan's answer, used, gives exactly its ε."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release, noise_aware_release, sample_path_release
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression

X_STAR = np.linspace(0.0, 2.0, 7)[:, None]


def _path_model(noise_sd: float, n: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 2.0, n)
    y = np.sin(3 * X) + 0.3 * rng.standard_normal(n)
    return gp_regression(X, y, 1.5**2 * pm.gp.cov.Exponential(1, ls=0.5), noise_sd=noise_sd)


def test_sample_path_plan_gives_the_noise_for_a_target_and_the_ledger_charges_it():
    common = dict(kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, kappa=0.0)
    p = plan.sample_path(30, epsilon=2.0, **common)
    assert p.fits and p.epsilon <= 2.0 and p.max_n_draws >= 1
    # a little less noise no longer fits: the answer is the smallest (to 1e-4)
    less = plan.sample_path(30, noise_sd=p.noise_sd * (1 - 1e-4), epsilon=2.0, **common)
    assert not less.fits and max(less.epsilon, less.filter_epsilon) > 2.0
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = sample_path_release(
            _path_model(p.noise_sd),
            X_STAR,
            kernel_scale=1.5,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            kappa=0.0,
            epsilon=2.0,
            ledger=ledger,
            rng=np.random.default_rng(0),
        )
    assert rel.epsilon == p.epsilon
    assert ledger.epsilon(1e-5) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    # the setting's own cost, and the number of draws that fit
    same = plan.sample_path(30, noise_sd=p.noise_sd, epsilon=2.0, **common)
    assert same.epsilon == p.epsilon and same.max_n_draws == p.max_n_draws
    more = plan.sample_path(
        30, noise_sd=p.noise_sd, n_draws=p.max_n_draws + 1, epsilon=2.0, **common
    )
    assert not more.fits


def test_sample_path_plan_uses_the_prior_mean_like_the_release():
    centred = plan.sample_path(
        30, kernel_scale=1.0, y_bounds=(0.0, 4.0), delta=1e-5, kappa=0.0, noise_sd=3.0
    )
    off = plan.sample_path(
        30,
        kernel_scale=1.0,
        y_bounds=(0.0, 4.0),
        delta=1e-5,
        kappa=0.0,
        noise_sd=3.0,
        prior_mean=1.0,
    )
    assert centred.M_Y == 2.0 and off.M_Y == 3.0 and off.epsilon > centred.epsilon
    with pytest.raises(ValueError, match="kappa"):
        plan.sample_path(30, kernel_scale=1.0, y_bounds=(0, 4), delta=1e-5, noise_sd=3.0)


@pytest.mark.parametrize("secure", [False, True])
def test_cloaked_plan_matches_the_release(secure):
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 2, 25)
    model = gp_regression(
        X, np.cos(2 * X) + 0.1 * rng.standard_normal(25), pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.3
    )
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0))
    p = plan.cloaked(model, X_STAR, secure=secure, **kw)
    ledger = Ledger(epsilon=1.0, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = cloaked_release(
            model, X_STAR, ledger=ledger, rng=None if secure else np.random.default_rng(2), **kw
        )
    np.testing.assert_allclose(rel.noise_sd, p.noise_sd, rtol=1e-12)  # same σ and factor
    assert ledger.epsilon(1e-3) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    assert p.ledger_epsilon <= 1.0 * (1 + 1e-9)


def test_noise_aware_plan_matches_the_release():
    Z = grid_inducing_points([0.0], [2.0], [6])
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 2, 200)
    model = sparse_gp_regression(
        X, np.sin(3 * X), pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.5
    )
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0))
    p = plan.noise_aware(model, secure=False, **kw)
    assert p.R_y == 1.5  # max(|-1 - 0.5|, |2 - 0.5|)
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    rel = noise_aware_release(model, ledger=ledger, rng=np.random.default_rng(4), **kw)
    assert rel.metadata["sigma_a"] == p.sigma_a and rel.metadata["lambda"] == p.lam
    assert ledger.epsilon(1e-5) == pytest.approx(p.ledger_epsilon, rel=1e-12)
