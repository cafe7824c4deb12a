"""Stop-46 audit of the model builders (pm_dpgp.models)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from pm_dpgp.models import (
    fitc_gp_regression,
    gp_classification,
    gp_regression,
    sparse_gp_regression,
)

RNG = np.random.default_rng(46)
X = RNG.uniform(0.0, 5.0, (12, 1))
Y = RNG.uniform(-1.0, 1.0, 12)
Z = np.linspace(0.0, 5.0, 4)[:, None]


@pytest.mark.parametrize("builder", ["exact", "fitc", "sparse"])
def test_noise_sd_computed_from_the_output_container_is_refused(builder: str) -> None:
    """``noise_sd=pt.std(y_data)`` made the noise variance ``var(y)``: a statistic of the
    private outputs, taken as public, charged nothing and published as ``noise_var`` in the
    release metadata.  The kernel already refused pm.Data; the noise sd now does too."""
    with pm.Model():
        y_data = pm.Data("y", Y)
        kwargs = {"noise_sd": pt.std(y_data)}
        cov = pm.gp.cov.ExpQuad(1, ls=1.0)
        with pytest.raises(ValueError, match=r"noise_sd depends on pm.Data / shared .*'y'"):
            if builder == "exact":
                gp_regression(X, y_data, cov, **kwargs)
            elif builder == "fitc":
                fitc_gp_regression(X, y_data, cov, Z=Z, **kwargs)
            else:
                sparse_gp_regression(X, y_data, cov, Z=Z, **kwargs)


def test_noise_sd_from_a_dist_is_refused_when_built() -> None:
    """A ``.dist()`` noise sd draws fresh noise at every evaluation; refused at build time
    as the kernel's own (it used to be refused only by ``public_gp``)."""
    with pytest.raises(ValueError, match="noise_sd uses the random variable"):
        gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=pm.HalfNormal.dist(1.0))


def test_noise_sd_free_variable_with_data_hyperprior_is_accepted() -> None:
    """A free noise RV is blocked at itself: a hyperprior held in pm.Data is not its input."""
    with pm.Model():
        scale = pm.Data("scale", 1.0)
        s = pm.HalfNormal("s", scale)
        reg = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=s)
    assert reg.hyperparameter_names == ("s",)
    assert reg.public_gp({"s": 0.5}).noise_var == pytest.approx(0.25)


@pytest.mark.parametrize("value", [[1.0], [1.0, 2.0, 3.0]])
def test_hyperparameter_of_a_dims_shape_is_checked_against_the_model(value: list[float]) -> None:
    """ARD lengthscales declared with ``dims=`` have no static shape; a value of the wrong
    length reached PyTensor, whose error quoted its input values (stop-46 audit)."""
    X2 = RNG.uniform(0.0, 5.0, (12, 2))
    with pm.Model(coords={"feature": ["a", "b"]}):
        reg = gp_regression(
            X2,
            Y,
            lambda: pm.gp.cov.ExpQuad(2, ls=pm.Gamma("ell", 2, 1, dims="feature")),
            noise_sd=0.3,
        )
    with pytest.raises(ValueError, match=r"'ell' must have shape \(2,\), got \(" + str(len(value))):
        reg.public_gp({"ell": value})
    assert reg.public_gp({"ell": [1.0, 2.0]}).hyperparameters["ell"].shape == (2,)


def test_hyperparameter_of_a_dims_shape_reduced_by_the_kernel() -> None:
    """A kernel that reduces a dims-shaped hyperparameter (here a sum of amplitudes) took a
    value of any length, silently."""
    with pm.Model(coords={"part": ["a", "b"]}):
        reg = gp_regression(
            X,
            Y,
            lambda: pt.sum(pm.HalfNormal("amp", 1.0, dims="part")) * pm.gp.cov.ExpQuad(1, ls=1.0),
            noise_sd=0.3,
        )
    with pytest.raises(ValueError, match=r"'amp' must have shape \(2,\)"):
        reg.public_gp({"amp": [1.0, 2.0, 3.0]})


@pytest.mark.parametrize("builder", ["exact", "fitc", "classification"])
def test_inputs_widened_by_set_data_are_refused(builder: str) -> None:
    """``pm.set_data`` gave the input container a third column; the kernel, built for two,
    ignored it in every public view and release (a third test column moved nothing)."""
    X2 = RNG.uniform(0.0, 5.0, (12, 2))
    with pm.Model() as model:
        X_data = pm.Data("X", X2)
        cov = pm.gp.cov.ExpQuad(2, ls=1.0)
        if builder == "exact":
            reg = gp_regression(X_data, Y, cov, noise_sd=0.3)
        elif builder == "fitc":
            reg = fitc_gp_regression(X_data, Y, cov, Z=X2[:3], noise_sd=0.3)
        else:
            reg = gp_classification(X_data, (Y > 0).astype(float), cov)
    view = reg.public_cloaking if builder == "fitc" else reg.public_gp
    assert view().input_dim == 2
    pm.set_data({"X": np.c_[X2, X2[:, 0]]}, model=model)
    with pytest.raises(ValueError, match=r"now have 3 column\(s\) but the kernel was built for 2"):
        view()


def test_dirichlet_model_keeps_every_record_for_its_release() -> None:
    """The builder stored only the records with a valid label, so a release of the model's
    data took their (private) number as the number of records: its delta > 1/n warning fired
    or not with it and quoted it.  The model now keeps every record, an invalid label as −1,
    which the release drops exactly as when the raw data are passed."""
    import warnings

    from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release
    from pm_dpgp.models import dirichlet_gp_classification

    Xd = RNG.uniform(-3.0, 3.0, (40, 1))
    lab = RNG.integers(0, 3, 40).astype(float)
    lab[:15] = 7.0  # invalid for n_classes=3: dropped, silently
    zd = np.linspace(-3.5, 3.5, 6)[:, None]
    model = dirichlet_gp_classification(Xd, lab, pm.gp.cov.ExpQuad(1, ls=1.0), Z=zd, n_classes=3)
    assert model.unchecked_data()[0].shape == (40, 1)
    kw = dict(epsilon=1.0, delta=0.03, rng=np.random.default_rng(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from_model = dirichlet_release(model, **kw)
    text = " ".join(str(w.message) for w in caught)
    assert "n = 40 records" in text and "n = 25" not in text
    kw["rng"] = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_raw = dirichlet_release(model, (Xd, lab), **kw)
    np.testing.assert_array_equal(from_model.u_mean, from_raw.u_mean)
