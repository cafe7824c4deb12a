"""Every release type as an ArviZ-native object: the standard ArviZ calls work on it.

For each release (cloaking, prior noise, sample paths, noise-aware ``q(u)``, Dirichlet,
Thompson sampling, and ``dp_ppc`` of each): DP draws in ``posterior`` with the user's
``dims``/``coords``, public hold-out data in ``observed_data``, and ``az.plot_posterior``,
``az.plot_trace``, ``az.hdi``, ``az.plot_ppc`` and the diagnostics-free summary run on it
(ArviZ 1 names through ``tests/arviz_stack.py``).  Runs on both stacks.
"""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pymc as pm
import pytest

from pm_dpgp import compat
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.workflow import dp_ppc, dp_summary, dp_thompson_sampling, plot_dp_release
from tests import arviz_stack, releases
from tests.releases import label_release, objective, sample_path, thompson_kwargs

matplotlib.use("Agg")

X_STAR = np.linspace(0, 6, 25)
AGE = 10.0 * X_STAR  # user coordinates: a rescaled input
X_NA = np.linspace(-3, 3, 11)


@pytest.fixture(scope="module")
def noise_aware():
    return releases.noise_aware()


@pytest.fixture(scope="module")
def dirichlet():
    return releases.dirichlet()


def _on_age(rel, var, obs, **kw):
    """``rel.to_inference_data`` with ``var`` on the user dim ``age``, the public hold-out
    ``sin(X_STAR)`` as observed data and predictive sd 0.3: ``(idata, var, "age", AGE, True)``."""
    idata = rel.to_inference_data(
        dims={var: ["age"]},
        coords={"age": AGE},
        observed_data={"y": np.sin(X_STAR)},
        predictive_sd=0.3,
        **kw,
        **obs,
    )
    return idata, var, "age", AGE, True


def _idata(kind, small_gp, noise_aware, dirichlet):
    """(idata, DP variable, its user dim, the user coordinate values, has observed data)."""
    obs = {"observed_is_public": True, "rng": np.random.default_rng(11)}
    if kind in ("cloaking", "prior_noise"):
        return _on_age(label_release(kind, small_gp), "f_dp", obs)
    if kind == "sample_path":
        return _on_age(sample_path(small_gp), "f_path", obs, X_star=X_STAR[:, None])
    if kind == "noise_aware":
        idata = noise_aware.to_inference_data(
            X_NA,
            n_draws=300,
            dims={"f": ["x"]},
            coords={"x": 100 * X_NA},
            observed_data={"y": np.sin(2 * X_NA)},
            **obs,
        )
        return idata, "f", "x", 100 * X_NA, True
    if kind == "dirichlet":
        idata = dirichlet.to_inference_data(
            X_NA,
            n_draws=300,
            rng=np.random.default_rng(12),
            dims={"p": ["label", "x"]},
            coords={"label": ["low", "mid", "high"], "x": 100 * X_NA},
        )
        return idata, "p", "x", 100 * X_NA, False
    if kind == "thompson":
        res = dp_thompson_sampling(
            objective,
            pm.gp.cov.ExpQuad(1, ls=0.2),
            **thompson_kwargs(n_rounds=4, epsilon=200.0, noise_sd=2.0),
        )
        assert "posterior" in compat.group_names(res.idata)
        idata = res.to_inference_data(
            dims={"x_chosen": ["feature"]}, coords={"feature": ["temperature"]}
        )
        return idata, "x_chosen", "feature", np.array(["temperature"]), False
    return _idata_issue10(kind, small_gp, obs)


def _idata_issue10(kind, small_gp, obs):
    """The release types added with issue 10 and the tree-aggregation loop (issue 11)."""
    from pm_dpgp.mechanisms import binned_release, classification_release, make_bins
    from pm_dpgp.models import fitc_gp_regression, gp_classification
    from pm_dpgp.workflow import dp_thompson_sampling_tree

    X, y = small_gp.X, small_gp.y
    cov = pm.gp.cov.ExpQuad(1, ls=1.5)
    kw = {"epsilon": 1.0, "delta": 1e-3, "n_draws": 3, "rng": np.random.default_rng(5)}
    if kind == "fitc":
        Z = np.linspace(0, 6, 6)[:, None]
        rel = cloaked_release(
            fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=Z), X_STAR, y_bounds=(-2.0, 2.0), **kw
        )
        return _on_age(rel, "f_dp", obs)
    if kind == "classification":
        rel = classification_release(gp_classification(X, (y > 0).astype(float), cov), X_STAR, **kw)
        return rel.to_inference_data(dims={"f_dp": ["age"]}, coords={"age": AGE}), *(
            "f_dp",
            "age",
            AGE,
            False,
        )
    if kind == "binning":
        edges = np.linspace(0, 6, 7)
        rel = binned_release(
            X,
            y,
            make_bins(edges),
            epsilon=1.0,
            y_bounds=(-2.0, 2.0),
            n_draws=3,
            rng=np.random.default_rng(6),
        )
        centres = 10.0 * (edges[:-1] + edges[1:]) / 2
        idata = rel.to_inference_data(dims={"bin_mean_dp": ["age"]}, coords={"age": centres})
        return idata, "bin_mean_dp", "age", centres, False
    if kind == "tree":
        res = dp_thompson_sampling_tree(
            objective,
            pm.gp.cov.ExpQuad(1, ls=0.2),
            inducing=5,
            **thompson_kwargs(n_rounds=4, epsilon=200.0, noise_sd=0.05),
        )
        idata = res.to_inference_data(
            dims={"x_chosen": ["feature"]}, coords={"feature": ["temperature"]}
        )
        return idata, "x_chosen", "feature", np.array(["temperature"]), False
    raise AssertionError(kind)


KINDS = [
    "cloaking",
    "prior_noise",
    "sample_path",
    "noise_aware",
    "dirichlet",
    "thompson",
    "fitc",
    "classification",
    "binning",
    "tree",
]


@pytest.mark.parametrize("kind", KINDS)
def test_arviz_calls_on_every_release(kind, small_gp, noise_aware, dirichlet) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PrivacyWarnings of the tiny test releases
        idata, var, dim, values, observed = _idata(kind, small_gp, noise_aware, dirichlet)
    post = compat.get_group(idata, "posterior")
    da = post[var]
    assert da.dims[:2] == ("chain", "draw") and dim in da.dims
    assert da.sizes["chain"] == 1 and da.sizes["draw"] >= 2
    np.testing.assert_array_equal(post[dim].values, values)
    assert post.attrs["mechanism"]
    few = {dim: post[dim].values[:3]}  # three panels are enough to show that the call works
    arviz_stack.plot_posterior(idata, [var], coords=few)
    arviz_stack.plot_trace(idata, [var], coords=few)
    hdi = np.asarray(
        compat.get_group(idata, "posterior")[var].quantile([0.0, 1.0], ("chain", "draw"))
    )
    import arviz as az

    interval = np.asarray(az.hdi(idata, var_names=[var])[var])  # (..., 2) on both stacks
    assert interval.shape[-1] == 2
    lo, hi = np.moveaxis(interval, -1, 0)
    assert np.all(lo <= hi)
    # the HDI lies within the range of the draws it summarises
    assert np.all(lo >= hdi[0].reshape(lo.shape) - 1e-12)
    assert np.all(hi <= hdi[1].reshape(hi.shape) + 1e-12)
    if observed:
        assert "observed_data" in compat.group_names(idata)
        arviz_stack.plot_ppc(idata, num_samples=min(10, da.sizes["draw"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # az.summary's default warns ~per var
        table = dp_summary(idata, var_names=[var])
    assert not {"r_hat", "ess_bulk", "ess_tail", "mcse_mean"} & set(table.columns)
    assert {"mean", "sd"} <= set(table.columns)
    assert len(table) == int(np.prod([da.sizes[d] for d in da.dims[2:]]))
    assert table.attrs["n_draws"] == da.sizes["draw"]
    matplotlib.pyplot.close("all")


def test_spread_is_described_per_mechanism(small_gp, noise_aware, dirichlet) -> None:
    cloak = dp_summary(label_release("cloaking", small_gp))
    assert cloak.attrs["spread"].startswith("DP noise") and "NOT posterior" in cloak.attrs["spread"]
    na = dp_summary(noise_aware.to_inference_data(X_NA, n_draws=20))
    assert "q(f)" in na.attrs["spread"]
    # stop-39 walkthrough: the text read as a claim of calibration; q(f) under-covers f
    assert "NOT calibrated for the latent f" in na.attrs["spread"]
    # stop-31 audit: a Thompson run (its mechanism name contains "sample_path") was described
    # as posterior draws; classification and binning fell through to the generic text
    expected = {
        "thompson": "the draw axis is the round",
        "classification": "Laplace/Newton step",
        "binning": "bin means",
    }
    for kind, text in expected.items():
        idata = _idata(kind, small_gp, noise_aware, dirichlet)[0]
        spread = dp_summary(idata).attrs["spread"]
        assert text in spread and "NOT posterior uncertainty" in spread, (kind, spread)
        if kind != "thompson":  # the text points at a variable that exists
            assert "dp_noise_sd" in compat.get_group(idata, "constant_data")


def test_label_release_keeps_the_legacy_copy_and_adds_predictive(small_gp) -> None:
    rel = label_release("cloaking", small_gp)
    idata = rel.to_inference_data(
        observed_data={"y": np.sin(X_STAR)},
        observed_is_public=True,
        predictive_sd=0.5,
        rng=np.random.default_rng(0),
        dp_noise="ignore",
    )
    post = compat.get_group(idata, "posterior")
    pp = compat.get_group(idata, "posterior_predictive")
    np.testing.assert_array_equal(post["f_dp"].values[0], rel.draws)
    np.testing.assert_array_equal(pp["f_dp"].values, post["f_dp"].values)  # legacy location
    e = pp["y"].values - post["f_dp"].values  # predictive noise: public, sd 0.5
    assert e.shape == (1, 2, 25) and 0.3 < e.std() < 0.7
    np.testing.assert_array_equal(compat.get_group(idata, "observed_data")["y"], np.sin(X_STAR))
    # default layout unchanged apart from the new posterior group
    plain = rel.to_inference_data()
    assert compat.get_group(plain, "posterior")["f_dp"].dims == ("chain", "draw", "x_star")
    np.testing.assert_array_equal(compat.get_group(plain, "posterior")["x_star"], X_STAR)
    assert "observed_data" not in compat.group_names(plain)


def test_label_predictive_carries_the_dp_noise() -> None:
    """Stop-34 audit: ``to_inference_data(predictive_sd=…)`` added the observation noise to the
    DP draws, as if they were the truth.  With ``dp_noise="marginalise"`` (default)
    ``y − d̄ ~ N(0, F Fᵀ/S + sd²)``; with ``"ignore"`` ``y − dᵢ ~ N(0, sd²)``.  A synthetic
    release (post-processing only): ``S = 2`` draws at 3,000 points, ``F = diag(s)``."""
    from pm_dpgp.release import Release

    rng = np.random.default_rng(3)
    m, S = 3000, 2
    s = rng.uniform(0.5, 3.0, m)
    mu = np.sin(np.arange(m))
    draws = mu + s * rng.standard_normal((S, m))
    rel = Release("cloaking", draws, np.arange(m, dtype=float)[:, None], np.diag(s))
    kw = {"predictive_sd": 0.5, "observed_data": {"y": mu}, "observed_is_public": True}
    idata = rel.to_inference_data(rng=np.random.default_rng(4), **kw)
    y = compat.get_group(idata, "posterior_predictive")["y"].values[0]
    z = (y - draws.mean(axis=0)) / np.sqrt(s**2 / S + 0.25)
    assert abs(z.var() - 1.0) < 0.06  # 6,000 values: sd of the variance ≈ 0.018
    plug = rel.to_inference_data(rng=np.random.default_rng(4), dp_noise="ignore", **kw)
    e = compat.get_group(plug, "posterior_predictive")["y"].values[0] - draws
    assert abs(e.std() - 0.5) < 0.02
    with pytest.raises(ValueError, match="dp_noise"):
        rel.to_inference_data(dp_noise="plug-in")


def test_summary_of_one_draw_gives_the_noise_interval(small_gp) -> None:
    """Stop-34 audit: with one DP draw ``dp_summary`` showed sd NaN and an interval of width 0.
    It now adds the public noise sd and the interval of the released mean
    (``d̄ ∓ z·sd/√S``); for a ``dp_ppc`` object ``n_draws`` counts the DP draws, not the
    replicates (was 200 for 2 draws)."""
    from scipy.stats import norm

    rel = cloaked_release(
        small_gp, X_STAR, epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(8),
    )  # fmt: skip
    table = dp_summary(rel, prob=0.9)
    sd = rel.noise_sd
    np.testing.assert_allclose(table["dp_noise_sd"].astype(float), sd, rtol=1e-12)
    # stop-38 usability audit: ArviZ's own interval of one draw (width 0) is NaN, both stacks
    arviz_intervals = [c for c in table.columns if str(c).startswith(("hdi", "eti"))]
    assert arviz_intervals and table[arviz_intervals].astype(float).isna().all().all()
    z = norm.ppf(0.95)
    np.testing.assert_allclose(table["mean_lb"].astype(float), rel.draws[0] - z * sd, rtol=1e-12)
    np.testing.assert_allclose(table["mean_ub"].astype(float), rel.draws[0] + z * sd, rtol=1e-12)
    assert "0.9 interval" in table.attrs["mean_interval"]
    two = label_release("cloaking", small_gp)  # two DP draws
    X_hold = X_STAR[::3]
    ppc = dp_ppc(two, X_hold, np.sin(X_hold), noise_sd=0.3, training=None)
    summary = dp_summary(ppc, var_names=["f"])
    assert summary.attrs["n_draws"] == two.n_draws == 2
    assert "released posterior mean" in summary.attrs["spread"]


def test_summary_default_interval_is_fixed_and_no_gaussian_predictive_for_labels(
    small_gp, monkeypatch
) -> None:
    """(a) ``dp_summary(prob=None)``'s ``mean_lb, mean_ub`` took ArviZ's default probability,
    0.94 on ArviZ 0.x and 0.89 on ArviZ 1 (audit of the two stacks; before the stop-34 review
    it also missed ArviZ 0.17's key ``"stats.hdi_prob"``): now ``MEAN_INTERVAL_PROB`` (0.9)
    whatever ArviZ's rcParams say, and the table is not rounded (ArviZ 0.x rounded ``mean``
    to three decimals); (b) a classification release's draws are latent values of binary
    outcomes, so ``to_inference_data`` refuses a Gaussian ``predictive_sd`` for them, as
    ``dp_ppc`` does."""
    import arviz as az
    from scipy.stats import norm

    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification

    rel = label_release("cloaking", small_gp)
    z = norm.ppf(0.95)  # the documented default, MEAN_INTERVAL_PROB = 0.9
    half = z * rel.noise_sd / np.sqrt(rel.n_draws)
    centre = rel.draws.mean(axis=0)
    for params in (None, {"stats.hdi_prob": 0.8}):  # installed ArviZ's default; old key only
        if params is not None:
            monkeypatch.setattr(az, "rcParams", params)
        table = dp_summary(rel, var_names=["f_dp"])
        np.testing.assert_allclose(table["mean_lb"].astype(float), centre - half, rtol=1e-12)
        np.testing.assert_allclose(table["mean_ub"].astype(float), centre + half, rtol=1e-12)
        # not rounded: the mean is the mean of the draws to round-off, on both stacks
        np.testing.assert_allclose(table["mean"].astype(float), centre, rtol=1e-12, atol=1e-14)
        assert "0.9 interval" in table.attrs["mean_interval"]
    monkeypatch.undo()
    X, y = small_gp.X, small_gp.y
    cls = classification_release(
        gp_classification(X, (y > 0).astype(float), pm.gp.cov.ExpQuad(1, ls=1.5)), X_STAR,
        epsilon=1.0, delta=1e-3, rng=np.random.default_rng(5),
    )  # fmt: skip
    with pytest.raises(ValueError, match="binary outcomes"):
        cls.to_inference_data(predictive_sd=0.5)
    with pytest.raises(ValueError, match="binary outcomes"):
        dp_ppc(cls, X_STAR[::5], np.ones(5), noise_sd=0.3, training=None)


def test_bad_observed_dims_and_coords_are_refused(small_gp) -> None:
    rel = label_release("cloaking", small_gp)
    y = np.sin(X_STAR)
    with pytest.raises(ValueError, match="observed_is_public=True"):
        rel.to_inference_data(observed_data={"y": y}, predictive_sd=0.3)
    with pytest.raises(ValueError, match="predictive_sd"):
        rel.to_inference_data(observed_data={"y": y}, observed_is_public=True)
    with pytest.raises(ValueError, match="hold-out inputs"):
        rel.to_inference_data(observed_data={"y": y[:5]}, observed_is_public=True, predictive_sd=1)
    with pytest.raises(ValueError, match="clashes"):
        rel.to_inference_data(observed_data={"f_dp": y}, observed_is_public=True, predictive_sd=1)
    with pytest.raises(ValueError, match="dim name"):
        rel.to_inference_data(dims={"f_dp": ["a", "b"]})
    with pytest.raises(ValueError, match="coords"):
        rel.to_inference_data(dims={"f_dp": ["age"]}, coords={"age": AGE[:3]})
    # repeated values (a real hold-out's ages): az.summary failed with a broadcast error
    ages = np.round(AGE)
    ages[1] = ages[0]
    with pytest.raises(ValueError, match="repeats a value"):
        rel.to_inference_data(dims={"f_dp": ["age"]}, coords={"age": ages})


# ----------------------------------------------------------------- noise-aware draws of q(f)
def test_sample_f_matches_the_dp_predictive_and_is_joint_with_u(noise_aware) -> None:
    """Draws of (u, f): moments of eq. (17) and Cov(f, u) = K_*Z K⁻¹ S (one joint draw)."""
    Xs = np.array([-2.5, -1.0, 0.3, 1.7, 2.9])
    n = 40_000
    u, f = noise_aware.sample_f(Xs, n, np.random.default_rng(0))
    assert u.shape == (n, 8) and f.shape == (n, 5)
    mu, cov = noise_aware.predict(Xs, full_cov=True)
    sd = np.sqrt(np.diag(cov))
    # mean: 5 Monte Carlo standard errors; a wrong centre (e.g. without the prior mean) fails
    assert np.all(np.abs(f.mean(0) - mu) < 5 * sd / np.sqrt(n))
    # covariance: relative error of a sample variance has sd sqrt(2/n) = 0.7 %; 5 % allowed,
    # and dropping the K_*Z K⁻¹ S K⁻¹ K_Z* term (or the conditional term) changes it by more
    emp = np.cov(f.T)
    assert np.all(np.abs(emp - cov) < 0.05 * sd[:, None] * sd[None, :])
    assert np.all(np.abs(np.diag(emp) / np.diag(cov) - 1) < 0.05)
    # u ~ q(u) and f | u jointly: Cov(f, u) = K_*Z K⁻¹ S
    K = noise_aware._kzz()
    W = np.linalg.solve(K, noise_aware._kernel(noise_aware.Z, Xs[:, None]))
    cross = W.T @ noise_aware.S
    emp_cross = (f - f.mean(0)).T @ (u - u.mean(0)) / (n - 1)
    su = np.sqrt(np.diag(noise_aware.S))
    assert np.all(np.abs(emp_cross - cross) < 0.05 * sd[:, None] * su[None, :])
    assert np.max(np.abs(cross) / (sd[:, None] * su[None, :])) > 0.3  # not vacuous
    # any number of draws, and u alone without X_star
    u_only, none = noise_aware.sample_f(None, 3, np.random.default_rng(1))
    assert u_only.shape == (3, 8) and none is None
    with pytest.raises(ValueError, match="n_draws"):
        noise_aware.sample_f(Xs, 0)


def test_noise_aware_hdi_width_follows_the_dp_posterior(noise_aware) -> None:
    """The posterior HDI of f is about ±1.88 sd of eq. (17) (94 % normal interval)."""
    import arviz as az

    idata = noise_aware.to_inference_data(X_NA, n_draws=4000, rng=np.random.default_rng(3))
    interval = np.asarray(az.hdi(idata, var_names=["f"], **_prob(0.94))["f"])
    width = interval[:, 1] - interval[:, 0]
    _, var = noise_aware.predict(X_NA)
    np.testing.assert_allclose(width, 2 * 1.8808 * np.sqrt(var), rtol=0.1)
    par = compat.get_group(idata, "dp_parameters")
    np.testing.assert_array_equal(par["u_mean"].values, noise_aware.m)


def _prob(p):
    return {"prob": p} if compat.USES_DATATREE else {"hdi_prob": p}


# ------------------------------------------------------------------- dp_ppc and plots
@pytest.mark.parametrize("kind", ["cloaking", "sample_path", "noise_aware", "dirichlet"])
def test_dp_ppc_and_plot_accept_every_release(kind, small_gp, noise_aware, dirichlet) -> None:
    rng = np.random.default_rng(21)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "cloaking":
            rel, X_h = label_release(kind, small_gp), X_STAR[::3]
        elif kind == "sample_path":
            rel, X_h = sample_path(small_gp), np.linspace(0.1, 5.9, 9)
        else:
            rel, X_h = (noise_aware if kind == "noise_aware" else dirichlet), X_NA
    if kind == "dirichlet":
        y_h = (X_h > -1).astype(int) + (X_h > 1).astype(int)
        kw = {}
    else:
        y_h = np.sin(X_h if kind != "noise_aware" else 2 * X_h)
        kw = {} if kind == "noise_aware" else {"noise_sd": 0.3}
    idata = dp_ppc(rel, X_h, y_h, training=None, n_draws=100, rng=rng, **kw)
    assert {"posterior", "posterior_predictive", "observed_data", "log_likelihood"} <= set(
        compat.group_names(idata)
    )
    post = compat.get_group(idata, "posterior")
    assert post["f"].sizes["obs_id"] == len(X_h)
    if kind == "dirichlet":
        assert post["p"].dims == post["f"].dims == ("chain", "draw", "output", "obs_id")
        p = post["p"].transpose("chain", "draw", "obs_id", "output").values
        np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-12)
        y_rep = compat.get_group(idata, "posterior_predictive")["y"].values
        assert set(np.unique(y_rep)) <= {0, 1, 2}
        # the labels' log-likelihood is log p[label]
        ll = compat.get_group(idata, "log_likelihood")["y"].values
        np.testing.assert_allclose(ll, np.log(p[..., np.arange(len(X_h)), y_h]))
    if kind == "noise_aware":
        assert compat.get_group(idata, "posterior")["f"].sizes["draw"] == 200  # 100 × 2 replicates
    arviz_stack.plot_ppc(idata, num_samples=10)
    ax = plot_dp_release(rel, X_holdout=X_h, y_holdout=y_h, rng=rng, max_draws=5)
    assert ax.get_xlabel() and ax.get_ylabel() and "δ" in ax.get_title()
    matplotlib.pyplot.close("all")


def test_summary_rows_of_a_dirichlet_ppc_carry_their_own_values(dirichlet) -> None:
    """Audit of the two stacks: ``dp_ppc`` stored ``f`` as ``(class, obs_id)`` and ``p`` as
    ``(obs_id, class)``; ArviZ 1.3's ``az.summary`` stacks all variables in one dim order but
    labels each row in the variable's own order, so 24 of the 27 ``p`` rows of ``dp_summary``
    carried another element's mean.  Every row's mean must be its labelled element's, and the
    two variables share the dim order of ``DirichletRelease.to_inference_data``."""
    import re

    y_h = (X_NA > -1).astype(int) + (X_NA > 1).astype(int)
    idata = dp_ppc(dirichlet, X_NA, y_h, training=None, n_draws=40, rng=np.random.default_rng(7))
    post = compat.get_group(idata, "posterior")
    table = dp_summary(idata)
    assert len(table) == 2 * 3 * len(X_NA)
    for label, mean in table["mean"].astype(float).items():
        # rows are labelled by coordinate: p[class_2, 5] (the export's class names, stop 49)
        name, c, j = re.fullmatch(r"(\w+)\[(\w+), (\d+)\]", str(label)).groups()
        da = post[name]  # the label's indices follow the variable's own dims (output, obs_id)
        element = da.sel({da.dims[2]: c}).isel({da.dims[3]: int(j)})
        assert mean == pytest.approx(float(element.mean()), rel=1e-12, abs=1e-15), label
    assert post["p"].dims == post["f"].dims == ("chain", "draw", "output", "obs_id")
    native = dirichlet.to_inference_data(X_NA, n_draws=5, rng=np.random.default_rng(0))
    native = compat.get_group(native, "posterior")
    assert native["p"].dims == native["f"].dims == ("chain", "draw", "output", "x_star")


def test_the_class_dim_of_a_dirichlet_ppc_is_labelled_by_the_class_labels(dirichlet) -> None:
    """Stop 40: ``class`` had no coordinate, so ``.sel(class=2)`` raised ``KeyError``.  Since
    stop 49 the dim is the export's ``output``, labelled by the release's class names."""
    y_h = (X_NA > -1).astype(int) + (X_NA > 1).astype(int)
    idata = dp_ppc(dirichlet, X_NA, y_h, training=None, n_draws=20, rng=np.random.default_rng(3))
    post = compat.get_group(idata, "posterior")
    names = ["class_0", "class_1", "class_2"]
    np.testing.assert_array_equal(post["output"].values, names)
    np.testing.assert_array_equal(post["obs_id"].values, np.arange(len(X_NA)))
    p2 = post["p"].sel(output="class_2")
    np.testing.assert_array_equal(p2.values, post["p"].values[:, :, 2, :])
    # the most probable class at each hold-out input, read by name, is a class name
    top = post["p"].mean(("chain", "draw")).idxmax("output").values
    assert set(np.unique(top)) <= set(names)


def test_dp_ppc_noise_aware_needs_no_noise_sd_but_label_does(small_gp) -> None:
    rel = label_release("cloaking", small_gp)
    with pytest.raises(ValueError, match="noise_sd"):
        dp_ppc(rel, X_STAR, np.sin(X_STAR), training=None)


def test_dp_ppc_dirichlet_refuses_bad_labels_and_noise_sd(dirichlet) -> None:
    with pytest.raises(ValueError, match="class labels"):
        dp_ppc(dirichlet, X_NA, np.full(11, 3.0), training=None)
    with pytest.raises(ValueError, match="categorical"):
        dp_ppc(dirichlet, X_NA, np.zeros(11), training=None, noise_sd=1.0)
