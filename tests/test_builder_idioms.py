"""Stop-32 audit of the PyMC builders from a PyMC user's side: each test fails on the code
before the fix it guards.

* a ``pm.gp.cov.WhiteNoise`` term was dropped from every public view (PyMC adds it only to
  ``cov(X)``, the views evaluate ``k(X_a, X_b)``): refused, with the fix in the message;
* a ``pm.Data`` lengthscale left a ``PublicGP`` mixing two lengthscales after ``pm.set_data``,
  and a random variable of another model was drawn at every kernel evaluation: refused;
* the Dirichlet builder did not check the kernel's ``input_dim``;
* {−1, +1} labels reached the PyMC model as {0, 1} but ``laplace`` raw;
* repeated 1-D test inputs made a non-unique ``x_star`` coordinate, and ``dp_summary`` /
  ``az.summary`` failed.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest

from pm_dpgp.mechanisms import classification_release, cloaked_release
from pm_dpgp.models import (
    dirichlet_gp_classification,
    fitc_gp_regression,
    gp_classification,
    gp_regression,
)
from pm_dpgp.workflow import dp_summary

X = np.linspace(0.0, 1.0, 20)
Y = np.sin(3 * X)
T = (X > 0.5).astype(float)


@pytest.mark.parametrize(
    "build",
    [
        lambda cov: gp_regression(X, Y, cov, noise_sd=0.1),
        lambda cov: gp_classification(X, T, cov),
        lambda cov: fitc_gp_regression(X, Y, cov, Z=X[::4, None], noise_sd=0.1),
    ],
)
def test_white_noise_terms_are_refused(build):
    with pytest.raises(TypeError, match="WhiteNoise.*noise_sd="):
        build(2.0 * (pm.gp.cov.ExpQuad(1, ls=0.3) + pm.gp.cov.WhiteNoise(0.2)))
    build(2.0 * pm.gp.cov.ExpQuad(1, ls=0.3))  # the same kernel without it builds


def test_data_containers_and_foreign_random_variables_in_the_kernel_are_refused():
    with pm.Model():
        ls = pm.Data("ls", 1.0)
        with pytest.raises(ValueError, match="pm.Data / shared variable.*'ls'"):
            gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=0.1)
    with pm.Model():
        other = pm.Gamma("ell", 2.0, 2.0)
    with pytest.raises(ValueError, match="random variable ell, which is not a free variable"):
        gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=other), noise_sd=0.1)
    with pm.Model():  # the idiom: priors of the enclosing model
        ell = pm.Gamma("ell", 2.0, 2.0)
        model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=ell), noise_sd=0.1)
    assert model.hyperparameter_names == ("ell",)


def test_dirichlet_builder_checks_the_kernel_input_dim():
    rng = np.random.default_rng(0)
    X2 = rng.uniform(size=(30, 2))
    labels = np.arange(30) % 3
    with pytest.raises(ValueError, match="input_dim=1 but X has 2"):
        dirichlet_gp_classification(X2, labels, pm.gp.cov.ExpQuad(1, ls=0.3), Z=X2[:5], n_classes=3)


def test_plus_minus_one_labels_are_the_model_labels_everywhere():
    pm_one = 2.0 * T - 1.0  # R&W's convention
    cov = 2.0 * pm.gp.cov.ExpQuad(1, ls=0.3)
    a, b = gp_classification(X, T, cov), gp_classification(X, pm_one, cov)
    pa, pb = a.public_gp(), b.public_gp()
    np.testing.assert_array_equal(pb.laplace(pm_one).f, pa.laplace(T).f)
    Xs = np.array([[0.1], [0.45], [0.9]])
    np.testing.assert_array_equal(pb.predict(pm_one, Xs)[0], pa.predict(T, Xs)[0])
    ra, rb = (
        classification_release(g, Xs, epsilon=1.0, delta=1e-3, rng=np.random.default_rng(3))
        for g in (a, b)
    )
    np.testing.assert_array_equal(ra.draws, rb.draws)


def test_repeated_test_inputs_give_an_index_coordinate_and_summaries_work():
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.1)
    Xs = np.array([[0.1], [0.2], [0.2], [0.4]])
    release = cloaked_release(
        model,
        Xs,
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-1.5, 1.5),
        n_draws=3,
        rng=np.random.default_rng(1),
    )
    idata = release.to_inference_data()
    post = idata["posterior"] if not hasattr(idata, "posterior") else idata.posterior
    np.testing.assert_array_equal(post["x_star"].values, np.arange(4))
    assert dp_summary(idata).shape[0] == 4
    az.summary(idata, kind="stats")
    distinct = cloaked_release(
        model,
        Xs[[0, 1, 3]],
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-1.5, 1.5),
        rng=np.random.default_rng(1),
    ).to_inference_data()
    post = distinct["posterior"] if not hasattr(distinct, "posterior") else distinct.posterior
    np.testing.assert_array_equal(post["x_star"].values, [0.1, 0.2, 0.4])


def test_pymc_constant_mean_functions_are_accepted_and_data_is_never_quoted():
    cov = pm.gp.cov.ExpQuad(1, ls=0.3)
    assert gp_regression(X, Y, cov, noise_sd=0.1, mean=pm.gp.mean.Zero()).mean == 0.0
    assert gp_regression(X, Y, cov, noise_sd=0.1, mean=pm.gp.mean.Constant(2.5)).mean == 2.5
    assert gp_classification(X, T, cov, mean=pm.gp.mean.Constant(-1.0)).mean == -1.0
    planted = Y.copy()
    planted[3] = 123.456789
    with pytest.raises(ValueError, match="non-constant mean") as info:
        gp_regression(X, planted, cov, noise_sd=0.1, mean=planted)  # the data as a "mean"
    assert "123.45" not in str(info.value)
    with pytest.raises(ValueError, match="non-constant mean"):
        gp_regression(X, Y, cov, noise_sd=0.1, mean=pm.gp.mean.Linear(coeffs=1.0))


def test_gibbs_kernel_refuses_a_lengthscale_built_on_other_columns():
    from pm_dpgp.models import GibbsKernel, KDELengthscale

    rng = np.random.default_rng(0)
    X2 = rng.uniform(0, 5, (30, 2))
    kde2 = KDELengthscale(X2, n_target=3, max_lengthscale=2.0, bandwidth=0.7)
    with pytest.raises(ValueError, match="2-column inputs but this kernel acts on 1"):
        GibbsKernel(2, kde2, active_dims=[0])  # broadcast silently, 0.57 off
    GibbsKernel(2, kde2)  # all columns: consistent


def test_a_constant_mean_holding_a_pytensor_constant_is_public():
    import pytensor.tensor as pt

    mean = pm.gp.mean.Constant(pt.constant(2.5))
    assert gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.1, mean=mean).mean == 2.5
