"""PyMC idioms in the builders: pm.Data, coords/dims, the active model context, and
hyperparameters from ``pm.find_MAP`` / ``idata.posterior`` / a dict, declared public."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
import xarray as xr

from pm_dpgp import compat
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import (
    PrivateHyperparameterError,
    PublicHyperparameters,
    dirichlet_gp_classification,
    gp_regression,
    grid_inducing_points,
    public_hyperparameters,
    sparse_gp_regression,
)

RNG = np.random.default_rng(0)
X = np.sort(RNG.uniform(0, 5, 20))
Y = np.clip(np.sin(X) + 0.2 * RNG.standard_normal(20), -1.5, 1.5)


def _priors():
    return pm.HalfNormal("eta", 1.0) ** 2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ls", 2.0, 2.0))


# ------------------------------------------------------------------- context, coords, dims
def test_builder_adds_to_the_enclosing_model_with_coords_and_dims() -> None:
    with pm.Model(coords={"obs_id": np.arange(20)}) as m:
        pm.Normal("other", 0, 1)
        gpr = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.0), sigma=0.2, dims="obs_id")
    assert gpr.model is m  # not a nested child model
    assert {"other", "f_obs"} <= set(m.named_vars)
    assert m.named_vars_to_dims["f_obs"] == ("obs_id",)
    # outside a context: a new model, as before; explicit coords are added to it
    gpr2 = gp_regression(
        X, Y, pm.gp.cov.ExpQuad(1, ls=1.0), sigma=0.2, coords={"obs": np.arange(20)}, dims="obs"
    )
    assert gpr2.model is not m and "obs" in gpr2.model.coords
    assert gpr2.model.named_vars_to_dims["f_obs"] == ("obs",)
    with pm.Model() as m3:
        sp = sparse_gp_regression(
            X, Y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(0, 5, 6), sigma=0.2
        )
        lab = (X > 2.5).astype(int)
        dg = dirichlet_gp_classification(
            X,
            lab,
            pm.gp.cov.ExpQuad(1, ls=1.0),
            Z=grid_inducing_points(0, 5, 6),
            n_classes=2,
            name="c",
        )
    assert sp.model is m3 and dg.model is m3
    names = set(m3.named_vars)
    assert any(n.endswith("f_obs") for n in names) and any(n.endswith("c_0_obs") for n in names)


# ------------------------------------------------------------------------------ pm.Data
@pytest.mark.parametrize("builder", ["exact", "sparse"])
def test_pm_data_inputs_and_set_data(builder) -> None:
    with pm.Model() as m:
        X_data = pm.Data("X", X)  # 1-D container: used as one input column
        y_data = pm.Data("y", Y)
        if builder == "exact":
            gpr = gp_regression(X_data, y_data, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.2)
        else:
            gpr = sparse_gp_regression(
                X_data,
                y_data,
                pm.gp.cov.ExpQuad(1, ls=1.0),
                Z=grid_inducing_points(0, 5, 6),
                noise_sd=0.2,
            )
    assert gpr.model is m
    np.testing.assert_array_equal(gpr.X[:, 0], X)
    np.testing.assert_array_equal(gpr.y, Y)
    logp = m.compile_logp()
    before = logp(m.initial_point())
    # pm.set_data changes the PyMC model AND what a release uses
    X2, Y2 = X[:12] + 0.1, Y[:12]
    pm.set_data({"X": X2, "y": Y2}, model=m)
    after = logp(m.initial_point())
    assert after != before
    np.testing.assert_array_equal(gpr.X[:, 0], X2)
    np.testing.assert_array_equal(gpr.y, Y2)
    if builder == "exact":
        assert gpr.public_gp().n == 12
        rel = cloaked_release(
            gpr,
            np.linspace(0, 5, 7),
            epsilon=1.0,
            delta=1e-3,
            y_bounds=(-1.5, 1.5),
            rng=np.random.default_rng(1),
        )
        assert rel.draws.shape == (1, 7)
    # a value with NaN set through pm.set_data is refused when read, like a builder input
    pm.set_data({"y": np.r_[Y2[:-1], np.nan]}, model=m)
    with pytest.raises(ValueError, match="NaN"):
        gpr.y  # noqa: B018


def test_symbolic_inputs_other_than_pm_data_are_refused() -> None:
    with pm.Model():
        x = pm.Normal("x", 0, 1, shape=20)
        with pytest.raises(TypeError, match="pm.Data"):
            gp_regression(x, Y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.2)


# ------------------------------------------------------------------------ hyperparameters
@pytest.fixture(scope="module")
def hyper_model():
    return gp_regression(X, Y, _priors, noise_sd=0.2)


def _check_map_path(model, map_estimate) -> None:
    assert any(k.endswith("__") for k in map_estimate)  # ls_log__, eta_log__
    with pytest.raises(ValueError, match="find_MAP"):
        model.public_gp(map_estimate)
    with pytest.raises(PrivateHyperparameterError, match="hyperparameters_are_public=True"):
        public_hyperparameters(map_estimate)
    hp = public_hyperparameters(map_estimate, hyperparameters_are_public=True)
    assert isinstance(hp, PublicHyperparameters) and "declared public" in hp.provenance
    assert set(hp) == {"ls", "eta"}
    pub = model.public_gp(hp)
    ref = model.public_gp({"ls": float(map_estimate["ls"]), "eta": float(map_estimate["eta"])})
    np.testing.assert_array_equal(pub.kernel(X), ref.kernel(X))
    # mechanisms take it like a dict
    rel = cloaked_release(
        model,
        np.linspace(0, 5, 5),
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-1.5, 1.5),
        hyperparameters=hp,
        rng=np.random.default_rng(2),
    )
    assert rel.draws.shape == (1, 5)


def test_map_dict_needs_the_public_declaration(hyper_model) -> None:
    """A dict laid out as ``pm.find_MAP`` returns it (constrained and ``*_log__`` values)."""
    ls, eta = 1.3, 0.8
    map_estimate = {"ls_log__": np.log(ls), "eta_log__": np.log(eta), "ls": ls, "eta": eta}
    _check_map_path(hyper_model, {k: np.asarray(v) for k, v in map_estimate.items()})


@pytest.mark.slow
def test_real_find_map_result(hyper_model) -> None:
    """The same with ``pm.find_MAP`` on a model of PUBLIC data (as the user then states)."""
    Xp = np.linspace(0, 5, 15)
    public_fit = gp_regression(Xp, np.sin(Xp), _priors, noise_sd=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        map_estimate = pm.find_MAP(model=public_fit.model, progressbar=False)
    _check_map_path(hyper_model, map_estimate)


def _posterior(ls, eta):
    return xr.Dataset(
        {
            "ls": (("chain", "draw"), ls),
            "eta": (("chain", "draw"), eta),
            "eta_log__": (("chain", "draw"), np.log(eta)),
        },
        coords={"chain": [0, 1], "draw": np.arange(ls.shape[1])},
    )


def test_idata_posterior_with_a_stated_summary(hyper_model) -> None:
    rng = np.random.default_rng(3)
    ls, eta = rng.gamma(4.0, 0.3, (2, 50)), rng.gamma(4.0, 0.25, (2, 50))
    idata = compat.make_inference_data({"posterior": _posterior(ls, eta)})
    with pytest.raises(TypeError, match="public_hyperparameters"):
        hyper_model.public_gp(idata)
    with pytest.raises(PrivateHyperparameterError):
        public_hyperparameters(idata, summary="median")
    with pytest.raises(ValueError, match="median"):
        public_hyperparameters(idata, hyperparameters_are_public=True)
    for source in (idata, compat.get_group(idata, "posterior"), _posterior(ls, eta)):
        med = public_hyperparameters(source, summary="median", hyperparameters_are_public=True)
        assert med["ls"] == pytest.approx(np.median(ls), rel=1e-15)
        assert med["eta"] == pytest.approx(np.median(eta), rel=1e-15)
        assert "eta_log__" not in med
    mean = public_hyperparameters(idata, summary="mean", hyperparameters_are_public=True)
    assert mean["ls"] == pytest.approx(ls.mean(), rel=1e-14)
    assert hyper_model.public_gp(mean).hyperparameters["ls"] == pytest.approx(ls.mean(), rel=1e-14)
    if compat.USES_DATATREE:  # a DataTree node, as ``idata.posterior`` is on ArviZ 1
        node = public_hyperparameters(
            idata["posterior"], summary="median", hyperparameters_are_public=True
        )
        assert node["ls"] == pytest.approx(np.median(ls), rel=1e-15)


def test_plain_dict_stays_strict_and_the_wrapper_ignores_extras(hyper_model) -> None:
    with pytest.raises(ValueError, match="Unknown hyperparameter"):
        hyper_model.public_gp({"ls": 1.0, "eta": 1.0, "mu": 0.0})
    hp = public_hyperparameters({"ls": 1.0, "eta": 1.0, "mu": 0.0}, hyperparameters_are_public=True)
    assert hyper_model.public_gp(hp).hyperparameters == {"ls": 1.0, "eta": 1.0}
    with pytest.raises(PrivateHyperparameterError, match="ls"):
        hyper_model.public_gp(public_hyperparameters({"eta": 1.0}, hyperparameters_are_public=True))
    with pytest.raises(ValueError, match="summary applies"):
        public_hyperparameters({"ls": 1.0}, summary="mean", hyperparameters_are_public=True)
    with pytest.raises(TypeError, match="find_MAP dict"):
        public_hyperparameters([1.0, 2.0], hyperparameters_are_public=True)


def test_dirichlet_builder_takes_pm_data_current_values() -> None:
    """The Dirichlet builder accepts ``pm.Data`` for X and labels (their current values: the
    labels enter only through the transformed per-class targets) and builds into the context."""
    rng = np.random.default_rng(3)
    Xd = rng.uniform(0, 5, 30)
    lab = (Xd > 2.5).astype(np.int64)
    Z = grid_inducing_points(0, 5, 4)
    with pm.Model() as m:
        dg = dirichlet_gp_classification(
            pm.Data("Xd", Xd), pm.Data("lab", lab), pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, n_classes=2
        )
    ref = dirichlet_gp_classification(Xd, lab, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, n_classes=2)
    assert dg.model is m
    np.testing.assert_array_equal(dg.X, ref.X)
    np.testing.assert_array_equal(dg.y, ref.y)


def test_fitc_gibbs_and_classification_builders_take_pm_data() -> None:
    """The builders merged with issue 10 accept ``pm.Data`` too: FITC and Gibbs follow the
    container (``pm.set_data`` changes what a release uses), the Laplace classifier takes its
    current values; all build into the enclosing model."""
    from pm_dpgp.models import (
        KDELengthscale,
        fitc_gp_regression,
        gp_classification,
        nonstationary_gp_regression,
    )

    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with pm.Model() as m:
        Xd, yd = pm.Data("X", X), pm.Data("y", Y)
        fitc = fitc_gp_regression(Xd, yd, cov, noise_sd=0.2, Z=grid_inducing_points(0, 5, 5))
        gibbs = nonstationary_gp_regression(
            Xd,
            yd,
            KDELengthscale(X[:, None], n_target=5.0, max_lengthscale=2.0, bandwidth=0.5),
            kernel_scale=1.0,
            noise_sd=0.2,
            name="g",
        )
        clf = gp_classification(Xd, pm.Data("lab", (Y > 0).astype(float)), cov, name="c")
    assert fitc.model is m and gibbs.model is m and clf.model is m
    np.testing.assert_array_equal(clf.y, (Y > 0).astype(float))
    pm.set_data({"X": X[:10], "y": Y[:10]}, model=m)
    assert fitc.X.shape == (10, 1) and gibbs.y.shape == (10,)
