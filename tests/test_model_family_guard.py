"""Mechanisms that release the exact GP regression posterior refuse other model families.

Stop-31 audit: FITC, sparse (VFE), Dirichlet and classification models subclass
``GPRegression`` and their ``public_gp`` is the exact-GP view, so ``prior_noise_release`` and
``sample_path_release`` released the exact posterior of a FITC model (19 % off its own FITC
mean at the audit's input) with nothing in the release saying so, and ``noise_aware_release``
regressed a Dirichlet model's raw class indices.  Each refusal is a ``TypeError`` that names
the right mechanism, before anything is spent or drawn.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import noise_aware_release, prior_noise_release
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.models import (
    dirichlet_gp_classification,
    fitc_gp_regression,
    gp_classification,
    gp_regression,
    grid_inducing_points,
    nonstationary_gp_regression,
    sparse_gp_regression,
)
from pm_dpgp.selection import select_by_sample_paths

X = np.linspace(0.0, 6.0, 40)
Y = np.sin(X) + 0.2 * np.cos(7.0 * X)  # any smooth labels inside y_bounds
Z = grid_inducing_points(0.0, 6.0, 4)
COV = pm.gp.cov.ExpQuad(1, ls=1.0)
X_STAR = np.linspace(0.0, 2.0, 4)


def _families() -> dict[str, object]:
    return {
        "FITCRegression": fitc_gp_regression(X, Y, COV, noise_sd=0.2, Z=Z),
        "SparseGPRegression": sparse_gp_regression(X, Y, COV, noise_sd=0.2, Z=Z),
        "DirichletGPClassification": dirichlet_gp_classification(
            X, (X > 3).astype(int), COV, Z=Z, n_classes=2
        ),
        "GPClassification": gp_classification(X, (Y > 0).astype(float), COV),
    }


def _prior_noise(model, ledger, rng):
    return prior_noise_release(
        model, X_STAR, epsilon=1.0, delta=1e-3, y_bounds=(-3, 3), ledger=ledger, rng=rng
    )


def _sample_path(model, ledger, rng):
    return sample_path_release(
        model, X_STAR[:, None], kernel_scale=1.0, y_bounds=(-3, 3), delta=1e-5, eta=1.0,
        domain=(0.0, 6.0), ledger=ledger, rng=rng,
    )  # fmt: skip


def _selection(model, ledger, rng):
    return select_by_sample_paths(
        model, [{}], X_star=X_STAR[:, None], domain=(0.0, 6.0), y_bounds=(-3, 3),
        epsilon=1.0, delta=1e-5, kernel_scale=1.0, ledger=ledger, rng=rng,
    )  # fmt: skip


@pytest.mark.parametrize("family", list(_families()))
@pytest.mark.parametrize("release", [_prior_noise, _sample_path, _selection])
def test_exact_posterior_mechanisms_refuse_other_families(family, release):
    model = _families()[family]
    ledger, rng = Ledger(1e6, 1e-3), np.random.default_rng(5)
    state = rng.bit_generator.state
    with pytest.raises(TypeError, match=f"this {family}'s own posterior") as err:
        release(model, ledger, rng)
    assert "nothing was spent or drawn" in str(err.value)
    assert ledger.history == [] and rng.bit_generator.state == state


def test_noise_aware_release_refuses_a_dirichlet_model():
    model = _families()["DirichletGPClassification"]
    ledger, rng = Ledger(1e6, 1e-3), np.random.default_rng(5)
    with pytest.raises(TypeError, match="dirichlet_release"):
        noise_aware_release(model, epsilon=1.0, delta=1e-3, y_bounds=(0, 1), ledger=ledger, rng=rng)
    assert ledger.history == []


def test_exact_and_gibbs_models_are_still_released():
    """The guard refuses families, not the exact GP (any kernel, incl. the Gibbs kernel)."""
    for model in (
        gp_regression(X, Y, COV, noise_sd=0.2),
        nonstationary_gp_regression(X, Y, lambda x: 1.0 + 0.1 * x, kernel_scale=1.0, noise_sd=0.2),
    ):
        release = _prior_noise(model, Ledger(1e6, 1e-3), np.random.default_rng(5))
        assert np.all(np.isfinite(release.draws))


@pytest.mark.parametrize("family", ["FITCRegression", "SparseGPRegression", "GPClassification"])
def test_the_prior_noise_plan_refuses_what_its_release_refuses(family):
    """Stop-31 audit: a plan was returned for a release that can never run."""
    with pytest.raises(TypeError, match=f"this {family}'s own posterior"):
        plan.prior_noise(_families()[family], X_STAR, epsilon=1.0, delta=1e-3, y_bounds=(-3.0, 3.0))


def test_the_noise_aware_plan_refuses_a_dirichlet_model():
    with pytest.raises(TypeError, match="dirichlet_release"):
        plan.noise_aware(
            _families()["DirichletGPClassification"], epsilon=1.0, delta=1e-3, y_bounds=(0, 1)
        )


def test_random_stopping_selection_refuses_a_dirichlet_model():
    """Stop-31 review: it spent ε 2.93 scoring hyperparameters by the Gaussian likelihood of
    the raw class indices (a Dirichlet model is a SparseGPRegression)."""
    from pm_dpgp.selection import select_by_random_stopping

    ledger, rng = Ledger(1e6, 1e-3), np.random.default_rng(5)
    state = rng.bit_generator.state
    with pytest.raises(TypeError, match="dirichlet_release"):
        select_by_random_stopping(
            _families()["DirichletGPClassification"], [{}], None, epsilon=1.0, delta=1e-5,
            y_bounds=(0.0, 1.0), ledger=ledger, rng=rng,
        )  # fmt: skip
    assert ledger.history == [] and rng.bit_generator.state == state
