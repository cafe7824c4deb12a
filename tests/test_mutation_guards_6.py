"""Stop-34 mutation testing, round 5: kill tests for the code changed in stop 34.

An independent helper applied 63 edits to the day's changes (the DP-noise-aware predictive,
``dp_summary``'s released-mean columns, the CV-SSE rounding bound, the persistent ledger's
single-name check, ``FilterMismatchError``, COINPRESS and ``random_search`` checks); 43 were
caught by the targeted tests, 20 passed the whole suite (one equivalent).  Each test below
fails under the mutant named in its docstring (R…: release.py, P…: ppc.py, S…: summary.py,
C…: cv_sse.py) and passes on the correct code.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.compat import get_group
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression
from pm_dpgp.release import released_mean_draws
from pm_dpgp.selection import kfold_splits, plan_cv_sse
from pm_dpgp.selection.cv_sse import utility_rounding_bound
from pm_dpgp.workflow import dp_ppc, dp_summary
from tests.test_selection import GRID, _model


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)


@pytest.fixture(scope="module")
def rel(model):
    return cloaked_release(
        model, np.linspace(0, 6, 25), epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0),
        n_draws=3, rng=np.random.default_rng(1),
    )  # fmt: skip


def test_R5_R6_R8_to_inference_data_marginalises_by_default(rel):
    """posterior_predictive y = (draw of the released mean given the DP draws) + e by default,
    y = (DP draw) + e only with dp_noise="ignore" (kills R5 centre dropped, R6 default flipped,
    R8 centre not used)."""
    sd = 0.3
    y = get_group(rel.to_inference_data(predictive_sd=sd, rng=np.random.default_rng(11)),
                  "posterior_predictive")["y"].values[0]  # fmt: skip
    rng = np.random.default_rng(11)
    centre = released_mean_draws(rel.draws, rel.noise_factor, rel.n_draws, rng)
    np.testing.assert_allclose(y, centre + sd * rng.standard_normal(centre.shape), rtol=1e-12)
    y_ign = get_group(
        rel.to_inference_data(predictive_sd=sd, rng=np.random.default_rng(11), dp_noise="ignore"),
        "posterior_predictive",
    )["y"].values[0]
    rng = np.random.default_rng(11)
    np.testing.assert_allclose(y_ign, rel.draws + sd * rng.standard_normal(rel.draws.shape),
                               rtol=1e-12)  # fmt: skip
    # and statistically, independent of the implementation: with a negligible public sd the
    # predictive's spread around d-bar is the DP noise's share, sd_dp / sqrt(S), per input
    ys = np.concatenate([
        get_group(rel.to_inference_data(predictive_sd=1e-9, rng=np.random.default_rng(s)),
                  "posterior_predictive")["y"].values[0]
        for s in range(100)
    ])  # fmt: skip
    z = (ys - rel.draws.mean(axis=0)) / (np.asarray(rel.noise_sd) / np.sqrt(rel.n_draws))
    assert 0.8 < np.mean(z**2) < 1.2  # 300 x 25 draws (correlated across inputs)


def test_P1_noise_rows_follow_a_permuted_holdout(rel, model):
    """Hold-out inputs among X_star in another order: G = F[idx] row by row (kills P1)."""
    idx = np.array([7, 2, 15, 0, 24, 11])
    X_hold = rel.X_star[idx, 0]
    idata = dp_ppc(rel, X_hold, np.zeros(len(idx)), noise_sd=0.3, training=model,
                   n_replicates=10, rng=np.random.default_rng(0))  # fmt: skip
    const = get_group(idata, "constant_data")
    F = np.asarray(rel.noise_factor)
    np.testing.assert_allclose(const["dp_noise_sd"].values, np.linalg.norm(F[idx], axis=1),
                               rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(const["dp_mean"].values, rel.draws[:, idx].mean(axis=0),
                               rtol=1e-12)  # fmt: skip


def test_P20_dp_ppc_refuses_an_unknown_dp_noise(rel, model):
    """A misspelt mode ("marginalize") silently gave the under-covering plug-in (kills P20)."""
    with pytest.raises(ValueError, match="dp_noise"):
        dp_ppc(rel, rel.X_star[:5, 0], np.zeros(5), noise_sd=0.3, training=model,
               dp_noise="marginalize")  # fmt: skip


def test_P7_single_knot_interpolation_matrix():
    """One knot: every row puts weight 1 on it (private helper; kills P7)."""
    from pm_dpgp.workflow.ppc import _interpolation_matrix

    W = _interpolation_matrix(np.array([2.0]), np.array([0]), np.array([2.0, 2.0]))
    np.testing.assert_array_equal(W.toarray(), np.ones((2, 1)))


def test_S1_mean_sd_is_noise_sd_over_root_S(rel):
    """dp_summary's mean_sd column is dp_noise_sd / sqrt(S) (kills S1)."""
    table = dp_summary(rel, var_names=["f_dp"])
    np.testing.assert_allclose(table["dp_noise_sd"].astype(float), rel.noise_sd, rtol=1e-12)
    np.testing.assert_allclose(table["mean_sd"].astype(float),
                               rel.noise_sd / np.sqrt(rel.n_draws), rtol=1e-12)  # fmt: skip


def test_S4_interval_is_centred_on_the_mean_of_three_draws(rel):
    """Centre of mean_lb/mean_ub is the mean of the draws (3 draws: median differs; kills S4)."""
    table = dp_summary(rel, var_names=["f_dp"])
    centre = 0.5 * (table["mean_lb"].astype(float) + table["mean_ub"].astype(float))
    assert not np.allclose(np.median(rel.draws, axis=0), rel.draws.mean(axis=0))
    np.testing.assert_allclose(centre, rel.draws.mean(axis=0), rtol=1e-9, atol=1e-12)


def test_S5_S_counts_draws_over_all_chains(model):
    """An object with the 4 DP draws laid out as 2 chains x 2 draws: S = 4 (kills S5)."""
    import xarray as xr

    from pm_dpgp.compat import make_inference_data

    kw = {"epsilon": 1.0, "delta": 1e-3, "y_bounds": (-2.0, 2.0), "n_draws": 4}
    four = cloaked_release(model, np.linspace(0, 6, 25), rng=np.random.default_rng(3), **kw)
    idata = four.to_inference_data()
    post = get_group(idata, "posterior")
    f = post["f_dp"]
    dims = [d for d in f.dims if d not in ("chain", "draw")]
    vals = f.values.reshape(2, 2, *f.shape[2:])
    ds = xr.Dataset(
        {"f_dp": (("chain", "draw", *dims), vals)},
        coords={d: post[d] for d in dims if d in post.coords},
        attrs=dict(post.attrs),
    )
    idata2 = make_inference_data(
        {"posterior": ds, "constant_data": get_group(idata, "constant_data")}
    )
    table = dp_summary(idata2, var_names=["f_dp"])
    np.testing.assert_allclose(table["mean_sd"].astype(float), four.noise_sd / 2.0, rtol=1e-12)


def test_S7_classification_summary_has_the_mean_interval(model):
    """Additive-noise mechanisms beyond label privacy (classification) get mean_sd (kills S7)."""
    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification

    X, y = np.asarray(model.X)[:, 0], np.asarray(model.y)
    Xs = np.linspace(0, 6, 25)
    cls = classification_release(
        gp_classification(X, (y > 0).astype(float), pm.gp.cov.ExpQuad(1, ls=1.5)), Xs,
        epsilon=1.0, delta=1e-3, rng=np.random.default_rng(5),
    )  # fmt: skip
    table = dp_summary(cls)
    assert "mean_sd" in table.columns
    assert np.all(np.isfinite(table["mean_sd"].astype(float)))


def test_S8_ppc_spread_names_the_marginalised_draws(rel, model):
    """dp_summary of a marginalised dp_ppc says where one draw's noise sd is (kills S8)."""
    X_hold = rel.X_star[::4, 0]
    ppc = dp_ppc(rel, X_hold, np.sin(X_hold), noise_sd=0.3, training=model)
    spread = dp_summary(ppc, var_names=["f"]).attrs["spread"]
    assert "constant_data['dp_noise_sd']" in spread
    assert "extra_sd" in spread


# ------------------------------------------------ the CV-SSE rounding bound (C2–C10)
U = np.finfo(np.float64).eps / 2.0


def gamma(k):
    return k * U / (1.0 - k * U)


def documented_bound(fps, n, c, lo, hi, mu, term_ulps=64.0):
    R = max(hi - mu, mu - lo, 0.0)
    Y = max(abs(lo), abs(hi))
    total = gamma(n) * n * c * c * (1.0 + term_ulps * U)  # recursive sum of n terms
    for fp in fps:
        C = np.asarray(fp.C)
        assert C.shape == (fp.test.size, fp.train.size)
        for row in C:  # one test row: gamma_{n_tr+3}(|C_i|_1 R + |mu| + Y), 2c-Lipschitz
            total += 2.0 * c * gamma(fp.train.size + 3) * (np.abs(row).sum() * R + abs(mu) + Y)
        total += fp.test.size * term_ulps * U * c * c  # each term's evaluation
    return total * (1.0 + 1e-6)


@pytest.fixture(scope="module")
def plan():
    # 3 folds of unequal size (n_test != n_train matters for the offset count)
    return plan_cv_sse(_model(0, n=14), GRID[:1], kfold_splits(14, 3), y_bounds=(-3.0, 1.5),
                       release_epsilon=None, release_delta=None)  # fmt: skip


@pytest.mark.parametrize("mu", [1.0, -0.7])
def test_rounding_bound_is_the_documented_formula(plan, mu):
    """Kills C2 (gamma_{n_tr}), C3 (c for 2c), C5 (R one-sided), C6 (|mu| dropped),
    C7 (n c^2 term), C8 (column sums), C9 (per-term evaluation error), C10 (TERM_ULPS 16)."""
    fps = plan.fold_plans[0]
    c = plan.error_clip
    got = utility_rounding_bound(fps, 14, c, (-3.0, 1.5), mu)
    want = documented_bound(fps, 14, c, -3.0, 1.5, mu)
    assert got == pytest.approx(want, rel=1e-12, abs=0)


def test_ppc_spread_with_the_release_posterior_is_posterior_uncertainty(rel, model):
    """Stop-38 usability audit: with ``posterior=`` the summary's text said both "from its
    posterior given the DP draws" and "NOT posterior uncertainty" (the cloaking text was
    appended); and the marginalised text advised extra_sd, which widens only ``y``."""
    from pm_dpgp.workflow import release_posterior

    X_hold = rel.X_star[::4, 0]
    post = release_posterior(rel, model, X_hold[:, None])
    ppc = dp_ppc(rel, X_hold, np.sin(X_hold), noise_sd=0.3, training=model, posterior=post)
    spread = dp_summary(ppc, var_names=["f"]).attrs["spread"]
    assert "posterior uncertainty about f given the release" in spread
    assert "NOT posterior" not in spread
    assert get_group(ppc, "posterior").attrs["ppc_prior_check_p"] == post.prior_check_p
    marginal = dp_ppc(rel, X_hold, np.sin(X_hold), noise_sd=0.3, training=model)
    spread = dp_summary(marginal, var_names=["f"]).attrs["spread"]
    assert "widens only the predictive y" in spread
