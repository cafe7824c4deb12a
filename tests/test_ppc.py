"""Posterior predictive checks on DP releases against a public hold-out set."""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.audit import DataDerivedChoiceError, check_public_choices, scan_for_values
from pm_dpgp.compat import get_group, group_names
from pm_dpgp.mechanisms import cloaked_release, sample_path_release
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import PrivateDataError, dp_ppc, holdout_elpd, plot_dp_release
from tests import arviz_stack

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def split():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 40))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(40), -1.9, 1.9)
    hold = np.zeros(40, dtype=bool)
    hold[::4] = True
    model = gp_regression(X[~hold], y[~hold], pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    return model, X[hold], y[hold]


@pytest.fixture(scope="module")
def release(split):
    model, X_hold, _ = split
    X_star = np.linspace(0, 6, 61)
    return cloaked_release(
        model,
        X_star,
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-2.0, 2.0),
        n_draws=5,
        ledger=Ledger(epsilon=5.0, delta=1e-2),
        rng=np.random.default_rng(1),
    )


def test_refuses_the_private_training_outputs(split, release):
    model, _, _ = split
    with pytest.raises(PrivateDataError, match="publish them unprotected"):
        dp_ppc(release, model.X, model.y, noise_sd=0.3, training=model, interpolate=True)
    # A copy mixing in training pairs is not compared with the private values by dp_ppc
    # (a refusal would be a membership oracle, docs/errors.md): the data owner's check is.
    with pytest.raises(DataDerivedChoiceError, match="training pairs"):
        check_public_choices(model.X, model.y, holdout=(model.X[:5], np.array(model.y[:5])))


def _sample_path_release(model, n_draws: int, seed: int):
    """A small sample-path release on [0, 6] (its warnings about the bound are not under test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample_path_release(
            model,
            np.linspace(0, 6, 20),
            n_draws=n_draws,
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            ledger=Ledger(),  # records the (large) cost; the cost is not under test here
            domain=(0.0, 6.0),
            rng=np.random.default_rng(seed),
        )


def test_hold_out_inputs_are_not_compared_with_private_inputs(split):
    """Full privacy: whether hold-out inputs are private training inputs is not answered
    (docs/errors.md); both hold-out sets give an InferenceData of the same layout."""
    model, _, _ = split
    rel = _sample_path_release(model, n_draws=3, seed=2)
    # a copy: the training inputs themselves (a view) are refused by identity (stop 46)
    a = dp_ppc(rel, model.X[:3].copy(), np.zeros(3), noise_sd=0.3, training=None)
    b = dp_ppc(rel, model.X[:3] + 0.01, np.zeros(3), noise_sd=0.3, training=None)
    assert a.posterior_predictive["y"].shape == b.posterior_predictive["y"].shape


def test_inference_data_works_with_arviz(split, release):
    model, X_hold, y_hold = split
    idata = dp_ppc(
        release,
        X_hold,
        y_hold,
        noise_sd=0.3,
        training=model,
        interpolate=True,
        rng=np.random.default_rng(3),
    )
    assert set(group_names(idata)) >= {
        "posterior",
        "posterior_predictive",
        "log_likelihood",
        "observed_data",
        "constant_data",
    }
    np.testing.assert_array_equal(get_group(idata, "observed_data")["y"], y_hold)
    pp = get_group(idata, "posterior_predictive")
    assert pp["y"].shape == (1, 200, len(y_hold))  # 5 draws x 40
    assert arviz_stack.summary(idata, var_names=["f"]).shape[0] == len(y_hold)
    arviz_stack.plot_ppc(idata, num_samples=20)
    arviz_stack.plot_hdi(idata, "y")
    loo = arviz_stack.loo_elpd(idata)  # None on ArviZ 1 (see arviz_stack.loo_elpd)
    elpd, point = holdout_elpd(idata)
    assert np.isfinite(elpd) and point.shape == (len(y_hold),)
    assert loo is None or np.isfinite(loo)
    # Nothing private in the published object: no training output anywhere.
    assert scan_for_values(idata, model.y, rtol=0) == []
    assert get_group(idata, "posterior").attrs["mechanism"] == "cloaking"
    matplotlib.pyplot.close("all")


def test_needs_the_release_at_the_holdout_inputs_or_interpolation(split, release):
    model, X_hold, y_hold = split
    with pytest.raises(ValueError, match="interpolate=True"):
        dp_ppc(release, X_hold + 1e-3, y_hold, noise_sd=0.3, training=model)
    exact = cloaked_release(
        model, X_hold, epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), rng=np.random.default_rng(4)
    )
    kw = {"noise_sd": 0.3, "training": model, "dp_noise": "ignore"}
    idata = dp_ppc(exact, X_hold, y_hold, rng=np.random.default_rng(5), **kw)
    np.testing.assert_allclose(get_group(idata, "posterior")["f"].values[0, 0], exact.draws[0])


def test_marginalised_f_is_the_released_means_posterior(split, release):
    """Stop-34 audit: ``posterior["f"]`` was the DP draws themselves, so the predictive ignored
    the DP noise.  Now its draws follow ``N(d̄, G Gᵀ/S)`` with ``G = W F`` the release's public
    noise factor mapped to the hold-out inputs (``W``: linear interpolation, checked against
    ``np.interp``), and ``constant_data["dp_noise_sd"]`` is the row norm of ``G``."""
    model, _, _ = split
    X_hold = np.array([0.05, 1.234, 3.0, 5.95, 6.0])
    y_hold = np.zeros(5)
    idata = dp_ppc(
        release, X_hold, y_hold, noise_sd=0.3, training=model, interpolate=True,
        n_replicates=4000, rng=np.random.default_rng(7),
    )  # fmt: skip
    xs = release.X_star[:, 0]
    W = np.stack([np.interp(X_hold, xs, e) for e in np.eye(len(xs))], axis=1)
    G = W @ release.noise_factor
    d_bar = np.stack([np.interp(X_hold, xs, d) for d in release.draws]).mean(axis=0)
    f = get_group(idata, "posterior")["f"].values[0]  # (20000, 5)
    S = release.n_draws
    cov = G @ G.T / S
    se = np.sqrt(np.diag(cov) / f.shape[0])
    assert np.all(np.abs(f.mean(axis=0) - d_bar) < 5 * se)
    # sample covariance within 6 % (20,000 draws: the relative sd of a variance is 1 %)
    np.testing.assert_allclose(np.cov(f.T), cov, rtol=0.06, atol=0.06 * np.max(np.diag(cov)))
    const = get_group(idata, "constant_data")
    np.testing.assert_allclose(const["dp_noise_sd"].values, np.linalg.norm(G, axis=1), rtol=1e-12)
    np.testing.assert_allclose(const["dp_mean"].values, d_bar, rtol=1e-12)
    assert "DP noise covariance" in get_group(idata, "posterior").attrs["ppc_f"]
    # holdout_elpd: the closed form log N(y; d̄, 0.3² + g²/S), not a Monte Carlo estimate
    var = 0.3**2 + np.diag(cov)
    expected = -0.5 * ((y_hold - d_bar) ** 2 / var + np.log(2 * np.pi * var))
    elpd, point = holdout_elpd(idata)
    np.testing.assert_allclose(point, expected, rtol=1e-12)
    assert elpd == pytest.approx(expected.sum(), rel=1e-12)


def test_interpolation_at_a_repeated_last_input_takes_its_last_copy():
    """Stop-34 review: with the largest ``X_star`` value repeated, ``W`` weighted the
    second-to-last copy where ``np.interp`` takes the last; they now agree everywhere."""
    from pm_dpgp.workflow.ppc import _interpolation_matrix

    rng = np.random.default_rng(0)
    for _ in range(200):
        X_star = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], size=7)
        order = np.argsort(X_star, kind="stable")
        xs = X_star[order]
        x = np.append(rng.uniform(xs[0], xs[-1], 5), [xs[0], xs[-1]])
        d = rng.standard_normal(7)
        W = _interpolation_matrix(xs, order, x)
        if len(np.unique(xs)) == len(xs) or np.all(np.diff(xs) > 0):
            np.testing.assert_allclose(W @ d, np.interp(x, xs, d[order]), rtol=1e-12)
        np.testing.assert_allclose(W[-1] @ d, d[order][-1], rtol=0)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=1e-12)


def test_marginalised_predictive_covers_and_the_plug_in_does_not():
    """Coverage of the 90 % predictive band for hold-out outputs over 40 simulated data sets,
    with the public posterior sd as ``extra_sd`` (as the docs say).  The stop-34 audit measured
    0.08 for the plug-in with one DP draw; the marginalised predictive gives 0.90 ± 0.01
    (150 data sets, the analytic band).  Bounds 0.8 and 0.5 are > 5 standard errors away."""
    rng = np.random.default_rng(0)
    cover = {"marginalise": [], "ignore": []}
    for rep in range(40):
        X = np.sort(rng.uniform(0, 6, 40))
        y = np.sin(X) + 0.3 * rng.standard_normal(40)
        hold = np.zeros(40, dtype=bool)
        hold[::4] = True
        model = gp_regression(
            X[~hold], np.clip(y[~hold], -1.9, 1.9), pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3
        )
        post_var = model.public_gp().posterior_var(X[hold])
        rel = cloaked_release(
            model, X[hold], epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0),
            rng=np.random.default_rng(100 + rep),
        )  # fmt: skip
        for mode, hits in cover.items():
            idata = dp_ppc(
                rel, X[hold], y[hold], noise_sd=0.3, extra_sd=np.sqrt(post_var), training=model,
                dp_noise=mode, n_replicates=400, rng=np.random.default_rng(rep),
            )  # fmt: skip
            y_rep = get_group(idata, "posterior_predictive")["y"].values[0]
            lo, hi = np.quantile(y_rep, [0.05, 0.95], axis=0)
            hits.append(np.mean((y[hold] >= lo) & (y[hold] <= hi)))
    assert np.mean(cover["marginalise"]) > 0.8
    assert np.mean(cover["ignore"]) < 0.5


def test_sample_path_release_is_evaluated_lazily(split):
    model, X_hold, y_hold = split
    rel = _sample_path_release(model, n_draws=4, seed=6)
    idata = dp_ppc(
        rel,
        X_hold,
        y_hold,
        noise_sd=0.3,
        training=model,
        n_replicates=10,
        rng=np.random.default_rng(7),
    )
    np.testing.assert_array_equal(
        get_group(idata, "posterior")["f"].values[0, ::10], rel.evaluate(X_hold[:, None])
    )


def test_plot_shows_bands(split, release):
    model, X_hold, y_hold = split
    ax = plot_dp_release(release, gpr=model, X_holdout=X_hold, y_holdout=y_hold)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("non-DP" in t for t in labels) and any("noise band" in t for t in labels)
    assert any("DP draws" in t for t in labels)
    public_only = plot_dp_release(release)
    assert not any("non-DP" in t.get_text() for t in public_only.get_legend().get_texts())
    matplotlib.pyplot.close("all")


def test_identity_checks_come_first_and_cover_private_inputs(split):
    """Stop-26 audit: (a) for a fully private release the training *inputs* are private, yet
    ``X_holdout`` = the training input array went into ``constant_data``; (b) the identity
    check ran after the value checks, so passing the training outputs with one NaN raised a
    ``ValueError`` instead of ``PrivateDataError``: the error type told whether the private
    array held a non-finite value."""
    model, X_hold, y_hold = split
    rel = _sample_path_release(model, n_draws=2, seed=4)
    X_tr, y_tr = model.unchecked_data()
    with pytest.raises(PrivateDataError, match="input array"):
        dp_ppc(rel, X_tr, np.zeros(len(X_tr)), noise_sd=0.3, training=model)
    y_bad = np.array(y_tr, dtype=float)
    y_bad[3] = np.nan
    for y_arr in (np.asarray(y_tr, dtype=float), y_bad):
        with pytest.raises(PrivateDataError, match="output array"):
            dp_ppc(rel, X_hold[:3], y_arr, noise_sd=0.3, training=(X_tr, y_arr))


def test_refuses_the_pandas_series_the_model_was_built_from(split, release):
    """Stop-31 audit: a model built from a pandas Series stores a view of the Series' buffer;
    passing the Series again as the 'hold-out' set was missed (only ndarrays were compared by
    memory) and ``observed_data`` held the private training outputs."""
    import pandas as pd

    model, _, _ = split
    df = pd.DataFrame({"x": np.asarray(model.X)[:, 0].copy(), "y": np.asarray(model.y).copy()})
    built = gp_regression(df["x"], df["y"], pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    with pytest.raises(PrivateDataError, match="publish them unprotected"):
        dp_ppc(release, df["x"], df["y"], noise_sd=0.3, training=built, interpolate=True)


def test_a_tiny_noise_sd_does_not_underflow(split, release):
    """``sqrt(noise_sd² + extra²)`` underflowed to 0 at noise_sd = 1e-165 (NaN log-likelihood);
    ``hypot`` keeps it."""
    X_hold = np.linspace(0.5, 5.5, 7)
    idata = dp_ppc(
        release, X_hold, np.sin(X_hold), noise_sd=1e-165, training=split[0], interpolate=True
    )
    loglik = np.asarray(get_group(idata, "log_likelihood")["y"].values)
    assert not np.any(np.isnan(loglik))


def test_posterior_var_is_the_public_diagonal_of_the_posterior_covariance(split):
    """``PublicGP.posterior_var`` (what ``extra_sd`` needs) equals R&W eq. 2.24's diagonal,
    computed here from the kernel matrices, and does not depend on ``y``."""
    model, X_hold, _ = split
    pub = model.public_gp()
    var = pub.posterior_var(X_hold)
    X = np.asarray(model.X)[:, 0]
    k = lambda a, b: np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2 / 1.5**2)  # noqa: E731
    K = k(X, X) + 0.09 * np.eye(len(X))
    K_sf = k(X_hold, X)
    expected = 1.0 - np.einsum("ij,ji->i", K_sf, np.linalg.solve(K, K_sf.T))
    np.testing.assert_allclose(var, expected, rtol=1e-9, atol=1e-12)
    for y in (np.zeros(len(X)), np.arange(len(X), dtype=float)):
        np.testing.assert_allclose(pub.predict(y, X_hold, full_cov=False)[1], var, rtol=1e-12)


def test_holdout_elpd_of_the_plug_in_is_that_of_its_own_draws(split, release):
    """Audit of the two stacks: ``dp_ppc`` stored ``dp_mean``/``dp_noise_sd`` for every
    ``Release``, and ``holdout_elpd`` took them as "use the marginalised closed form", so with
    ``dp_noise="ignore"`` it returned the marginalised elpd instead of the plug-in's.  Now
    they are stored only with ``dp_noise="marginalise"`` (without ``posterior=``)."""
    from scipy.special import logsumexp

    model, _, _ = split
    X_hold = release.X_star[::6, 0]
    y_hold = np.sin(X_hold)
    kw = {"noise_sd": 0.3, "training": model, "rng": np.random.default_rng(7)}
    plug = dp_ppc(release, X_hold, y_hold, dp_noise="ignore", **kw)
    assert not {"dp_mean", "dp_noise_sd"} & set(get_group(plug, "constant_data"))
    ll = get_group(plug, "log_likelihood")["y"].values.reshape(-1, len(X_hold))
    own = float((logsumexp(ll, axis=0) - np.log(ll.shape[0])).sum())
    elpd, _ = holdout_elpd(plug)
    assert elpd == pytest.approx(own, rel=1e-12)
    marg = dp_ppc(release, X_hold, y_hold, **kw)
    assert {"dp_mean", "dp_noise_sd"} <= set(get_group(marg, "constant_data"))
    assert holdout_elpd(marg)[0] != pytest.approx(own, rel=1e-3)


def test_dp_ppc_of_a_sample_path_release_uses_no_deprecated_name(split):
    """Audit of the two stacks: ``dp_ppc`` read ``SamplePathRelease.n_paths`` (renamed
    ``n_draws``), so every call warned ``DeprecationWarning`` about a name the user never
    used."""
    model, X_hold, y_hold = split
    rel = _sample_path_release(model, 3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        idata = dp_ppc(rel, X_hold, y_hold, noise_sd=0.3, training=model,
                       rng=np.random.default_rng(7))  # fmt: skip
    assert get_group(idata, "posterior").attrs["n_draws"] == 3
