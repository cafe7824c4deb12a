"""Stop-42 API audit (a statistician's walkthrough of every release type, both stacks).

* ``SparseQuRelease.sample_f`` / ``to_inference_data`` failed with a ``CholeskyError`` on an
  ordinary 50–200-point grid: the conditional covariance ``K_VV − K_VZ K⁻¹ K_ZV`` has a tiny
  diagonal beside ``k(v, v)`` when the inducing grid is dense for the lengthscale, and its
  round-off (set by ``K_VV``) was above every jitter the schedule tried.
* ``to_inference_data(observed_data={"y": series})`` paired a hold-out Series with a
  ``DataFrame`` ``X_star`` by position even when the two indexes disagreed.
* ``SamplePathRelease.to_inference_data()`` exported every input ever passed to
  ``evaluate()``: under full privacy the owner may evaluate at the private training inputs.
  Its ``X_star=`` skipped the ``DataFrame`` column-order check.
* A model built on a named ``Series`` (``df["age"]``) accepted ``df["weight"]`` as test
  inputs, and a ``DataArray`` labelled ``["weight", "age"]`` was used by position.
* Errors: ``dp_ppc`` of a Thompson trace asked for ``noise_sd``; ``release_posterior`` of a
  q(u) release said "must be a pm_dpgp Release"; cloaking a classification model raised an
  ``AttributeError``; ``holdout_elpd`` after ``dp_ppc(var_name="height")`` raised xarray's
  ``KeyError``; ``Release.to_inference_data`` refused the ``var_name=`` of the other exports.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.compat import get_group
from pm_dpgp.gp.sparse import sample_from_qu
from pm_dpgp.mechanisms import cloaked_release, noise_aware_release, sample_path_release
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression


def _eq(a: np.ndarray, b: np.ndarray, var: float = 900.0, ls: float = 25.0) -> np.ndarray:
    return var * np.exp(-0.5 * (a[:, None] - b[None]) ** 2 / ls**2)


def _q_release(X, y, kernel_variance, Z, y_bounds):
    """A noise-aware release of an EQ (lengthscale 25) sparse model, prior mean 140."""
    model = sparse_gp_regression(
        X, y, kernel_variance * pm.gp.cov.ExpQuad(1, ls=25.0), Z=Z, noise_sd=8.0, mean=140.0
    )
    return noise_aware_release(
        model,
        epsilon=1.0,
        delta=1e-5,
        y_bounds=y_bounds,
        ratio="auto",
        rng=np.random.default_rng(2),
    )


# ---------------------------------------------------------------- q(u) draws on a dense grid
def test_conditional_draws_on_a_dense_grid_have_the_predictive_law():
    """The failing case of the audit (kernel variance 900, lengthscale 25, 12 inducing inputs
    on [0, 90], 200 test inputs): draws exist and have the mean and covariance of eq. 17."""
    Z, V = np.linspace(0, 90, 12), np.linspace(0, 90, 200)
    Kzz, Kzv, Kvv = _eq(Z, Z), _eq(Z, V), _eq(V, V)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((12, 12))
    S = A @ A.T / 12 + np.eye(12)
    m = 10.0 * rng.standard_normal(12)
    n = 4000
    u, f = sample_from_qu(Kzz, m, S, Kzv, Kvv, n, np.random.default_rng(1))
    assert f is not None and f.shape == (n, 200) and np.all(np.isfinite(f))
    W = np.linalg.solve(Kzz, Kzv)
    mean = m @ W
    cov = W.T @ S @ W + Kvv - Kzv.T @ W
    sd = np.sqrt(np.diag(cov))
    # 200 coordinates, each within 5 standard errors of its mean
    assert np.all(np.abs(f.mean(axis=0) - mean) < 5 * sd / np.sqrt(n))
    # sample covariance: relative error ~ sqrt(2/n) = 0.022 of the largest entry
    assert np.abs(np.cov(f.T) - cov).max() < 0.1 * np.abs(cov).max()
    # and each f draw is consistent with its u draw: f = m_f(u) + tiny conditional noise
    resid = f - (u @ W)
    assert np.abs(resid).max() < 1e-2 * sd.max()


def test_noise_aware_export_on_a_dense_grid():
    rng = np.random.default_rng(3)
    age = rng.uniform(0, 90, 150)
    height = 140 + 30 * np.tanh((age - 20) / 15) + 8 * rng.standard_normal(150)
    rel = _q_release(age[:, None], height, 900.0, grid_inducing_points(0, 90, 12), (50, 190))
    grid = np.linspace(0, 90, 200)[:, None]
    idata = rel.to_inference_data(grid, n_draws=20, rng=np.random.default_rng(0))
    f = get_group(idata, "posterior")["f"].values
    assert f.shape == (1, 20, 200) and np.all(np.isfinite(f))


# ---------------------------------------------------------------- observed_data row labels
@pytest.fixture(scope="module")
def labelled():
    rng = np.random.default_rng(5)
    ids = pd.Index([f"w{i}" for i in range(60)], name="id")
    X = pd.DataFrame({"age": np.linspace(1, 80, 60)}, index=ids)
    y = pd.Series(140 + 20 * np.sin(X["age"] / 15) + 5 * rng.standard_normal(60), index=ids)
    return X, y


def test_cloaked_export_refuses_a_hold_out_series_in_another_order(labelled):
    X, y = labelled
    train, hold = X.iloc[::2], X.iloc[1::2]
    model = gp_regression(
        train, y.loc[train.index], 30.0**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=8.0
    )
    rel = cloaked_release(
        model, hold, epsilon=1.0, delta=1e-5, y_bounds=(50, 230), rng=np.random.default_rng(0)
    )
    shuffled = y.loc[hold.index].sample(frac=1.0, random_state=1)
    with pytest.raises(ValueError, match="different indexes"):
        rel.to_inference_data(
            observed_data={"y": shuffled}, observed_is_public=True, predictive_sd=8.0
        )
    # aligned: accepted, and each observed value stands beside its own input
    idata = rel.to_inference_data(
        observed_data={"y": y.loc[hold.index]}, observed_is_public=True, predictive_sd=8.0
    )
    obs = get_group(idata, "observed_data")["y"].values
    np.testing.assert_array_equal(obs, y.loc[hold.index].to_numpy())
    # an array is paired by position, as documented
    rel.to_inference_data(
        observed_data={"y": shuffled.to_numpy()}, observed_is_public=True, predictive_sd=8.0
    )


def _label_releases(X, y, hold):
    """Every label release made at a pandas ``X_star`` (``hold``), by name."""
    from pm_dpgp.mechanisms import (
        binned_gp,
        binned_release,
        classification_release,
        make_bins,
        prior_noise_release,
    )
    from pm_dpgp.models import gp_classification

    train = X.drop(hold.index)
    kw = dict(epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    model = gp_regression(
        train, y.loc[train.index], 30.0**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=8.0
    )
    labels = (y.loc[train.index] > 140).astype(float)
    classes = gp_classification(train, labels, pm.gp.cov.ExpQuad(1, ls=25.0))
    bins = binned_release(
        train, y.loc[train.index], make_bins([np.linspace(0, 81, 5)]), epsilon=1.0,
        y_bounds=(50, 230), rng=np.random.default_rng(0),
    )  # fmt: skip
    return {
        "prior_noise": prior_noise_release(model, hold, y_bounds=(50, 230), **kw),
        "classification": classification_release(classes, hold, **kw),
        "binned_gp": binned_gp(bins, hold, lengthscale=25.0, kernel_scale=30.0, noise_sd=8.0),
    }


@pytest.mark.parametrize("kind", ["prior_noise", "classification", "binned_gp"])
def test_every_label_release_keeps_the_row_labels_of_its_x_star(labelled, kind):
    X, y = labelled
    hold = X.iloc[1::3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = _label_releases(X, y, hold)[kind]
    assert rel.x_star_rows is not None and rel.x_star_rows.equals(hold.index)
    if rel.draws_are_outcomes:  # a Gaussian predictive applies: the export checks the labels
        with pytest.raises(ValueError, match="different indexes"):
            rel.to_inference_data(
                observed_data={"y": y.loc[hold.index].iloc[::-1]},
                observed_is_public=True,
                predictive_sd=8.0,
            )


def test_q_u_export_refuses_a_hold_out_series_in_another_order(labelled):
    X, y = labelled
    rel = _q_release(X, y, 30.0**2, grid_inducing_points(0, 80, 8), (50, 230))
    hold = X.iloc[:10]
    with pytest.raises(ValueError, match="different indexes"):
        rel.to_inference_data(
            hold,
            n_draws=5,
            observed_data={"y": y.iloc[:10].iloc[::-1]},
            observed_is_public=True,
        )
    rel.to_inference_data(
        hold, n_draws=5, observed_data={"y": y.iloc[:10]}, observed_is_public=True
    )


# ---------------------------------------------------------------- sample paths: what is exported
SP = dict(
    kernel_scale=1.0,
    y_bounds=(-2.0, 2.0),
    delta=1e-5,
    epsilon=1e9,
    domain=(0.0, 1.0),
    kernel_class="exponential_1d",
)


@pytest.fixture()
def path_release():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, 15)
    y = np.where(X > 0.5, 1.0, -1.0) + 0.3 * rng.standard_normal(15)
    model = gp_regression(X, y, pm.gp.cov.Exponential(1, ls=0.3), noise_sd=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = sample_path_release(
            model, np.linspace(0, 1, 5), n_draws=3, rng=np.random.default_rng(1), **SP
        )
    return rel, X


def _x_star(idata) -> np.ndarray:
    return get_group(idata, "constant_data")["X_star"].values[:, 0]


def test_sample_path_export_leaves_out_the_evaluated_inputs(path_release):
    rel, X_private = path_release
    rel.evaluate(X_private[:, None])  # the owner's residual check at the private inputs
    exported = _x_star(rel.to_inference_data())
    np.testing.assert_array_equal(exported, np.linspace(0, 1, 5))
    assert not np.isin(X_private, exported).any()
    np.testing.assert_array_equal(rel.published_inputs[:, 0], np.linspace(0, 1, 5))
    # every input on request
    every = _x_star(rel.to_inference_data(include_evaluated=True))
    assert np.isin(X_private, every).all() and len(every) == 20
    with pytest.raises(ValueError, match="include_evaluated"):
        rel.to_inference_data(include_evaluated="yes")


def test_sample_path_export_at_given_inputs_publishes_them(path_release):
    rel, _ = path_release
    new = np.array([[0.33], [0.66]])
    values = rel.to_inference_data(X_star=new).posterior["f_path"].values[0]
    np.testing.assert_array_equal(values, rel.evaluate(new))  # the same path values
    exported = _x_star(rel.to_inference_data())
    np.testing.assert_array_equal(exported, np.r_[np.linspace(0, 1, 5), 0.33, 0.66])


def test_sample_path_export_checks_dataframe_columns():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.uniform(0, 1, 12), "b": rng.uniform(0, 1, 12)})
    y = np.sin(3 * X["a"].to_numpy()) + 0.2 * rng.standard_normal(12)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(2, ls=0.5), noise_sd=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = sample_path_release(
            model,
            pd.DataFrame({"a": [0.2, 0.5, 0.8], "b": [0.3, 0.6, 0.9]}),  # public query rows
            n_draws=2,
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            epsilon=1e9,
            domain=[(0.0, 1.0), (0.0, 1.0)],
            rng=np.random.default_rng(1),
        )
    # public query rows in another column order (a copy: since stop 45 the training input
    # frame itself, or a lazy copy sharing its memory, is refused as private first)
    X_pub = pd.DataFrame({"a": [0.1, 0.5, 0.9], "b": [0.2, 0.4, 0.6]})
    with pytest.raises(ValueError, match="column"):
        rel.to_inference_data(X_star=X_pub[["b", "a"]])


# ---------------------------------------------------------------- labelled 1-D and xarray inputs
def test_a_named_series_records_its_column_and_refuses_another():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"age": rng.uniform(0, 80, 40), "weight": rng.uniform(30, 60, 40)})
    y = 140 + 0.5 * df["age"].to_numpy() + 5 * rng.standard_normal(40)
    model = gp_regression(df["age"], y, 30.0**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=8.0)
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(50, 230), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"\['weight'\].*\['age'\]"):
        cloaked_release(model, df["weight"].iloc[:5], **kw)
    rel = cloaked_release(model, df["age"].iloc[:5], **kw)
    assert rel.metadata["input_columns"] == ["age"]
    cloaked_release(model, df["age"].iloc[:5].to_numpy(), **kw)  # arrays stay positional


def test_a_labelled_dataarray_is_checked_against_the_model_columns():
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"age": rng.uniform(0, 80, 40), "weight": rng.uniform(30, 60, 40)})
    y = 140 + 0.5 * df["age"].to_numpy() + 5 * rng.standard_normal(40)
    model = gp_regression(df, y, 30.0**2 * pm.gp.cov.ExpQuad(2, ls=25.0), noise_sd=8.0)
    swapped = xr.DataArray(
        df[["weight", "age"]].to_numpy()[:3],
        dims=("obs", "feature"),
        coords={"feature": ["weight", "age"]},
    )
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(50, 230), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="columns"):
        cloaked_release(model, swapped, **kw)
    cloaked_release(model, swapped.sel(feature=["age", "weight"]), **kw)
    unlabelled = xr.DataArray(df.to_numpy()[:3], dims=("obs", "feature"))
    cloaked_release(model, unlabelled, **kw)  # no labels: positional


# ---------------------------------------------------------------- clearer errors, one vocabulary
@pytest.fixture(scope="module")
def kung_like():
    rng = np.random.default_rng(2)
    X = np.linspace(1, 80, 40)[:, None]
    y = 140 + 20 * np.sin(X[:, 0] / 15) + 5 * rng.standard_normal(40)
    model = gp_regression(X, y, 30.0**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=8.0)
    rel = cloaked_release(
        model, X[::4], epsilon=1.0, delta=1e-5, y_bounds=(50, 230), rng=np.random.default_rng(0)
    )
    return X, y, model, rel


def test_dp_ppc_names_a_thompson_trace_before_asking_for_noise_sd():
    from pm_dpgp.workflow import dp_ppc, dp_thompson_sampling, random_search

    trace = random_search(
        lambda X: np.sin(X[:, 0]),
        domain=(0.0, 1.0),
        X_init=[[0.5]],
        n_rounds=3,
        rng=np.random.default_rng(0),
    )
    with pytest.raises(TypeError, match="a run, not a release"):
        dp_ppc(trace, [[0.2]], [0.1], training=None, holdout_is_public=True)
    run = dp_thompson_sampling(
        lambda X: np.sin(X[:, 0]),
        pm.gp.cov.ExpQuad(1, ls=0.3),
        domain=(0.0, 1.0),
        X_init=[[0.5]],
        n_rounds=2,
        noise_sd=0.1,
        private=False,
        rng=np.random.default_rng(0),
    )
    with pytest.raises(TypeError, match="ThompsonResult: the trace of a search"):
        dp_ppc(run, [[0.2]], [0.1], training=None, holdout_is_public=True)


def test_release_posterior_names_the_releases_it_takes(kung_like):
    from pm_dpgp.workflow import release_posterior

    X, y, model, _ = kung_like
    q = _q_release(X, y, 30.0**2, X[::8], (50, 230))
    with pytest.raises(TypeError, match="cloaking or prior-noise Release.*SparseQuRelease"):
        release_posterior(q, model, X[:3])
    # the clipping range as given is recorded (R_y alone did not say it)
    assert q.metadata["y_bounds"] == [50.0, 230.0]


def test_cloaking_a_classification_model_is_a_type_error():
    from pm_dpgp.models import gp_classification

    X = np.linspace(0, 1, 20)[:, None]
    model = gp_classification(X, (X[:, 0] > 0.5).astype(int), pm.gp.cov.ExpQuad(1, ls=0.3))
    with pytest.raises(TypeError, match="classification_release"):
        cloaked_release(model, X[:3], epsilon=1.0, delta=1e-5, y_bounds=(0, 1))


def test_holdout_elpd_reads_the_observed_name(kung_like):
    from pm_dpgp.workflow import dp_ppc, holdout_elpd

    X, y, model, rel = kung_like
    X_hold = X[::4] + 0.0  # public hold-out rows at the release's inputs (new objects)
    y_hold = 140 + 20 * np.sin(X_hold[:, 0] / 15)
    idata = dp_ppc(
        rel, X_hold, y_hold, noise_sd=8.0, training=model, var_name="height",
        rng=np.random.default_rng(0),
    )  # fmt: skip
    total, point = holdout_elpd(idata)
    assert point.shape == (10,) and total == pytest.approx(point.sum())
    assert holdout_elpd(idata, var_name="height")[0] == total
    with pytest.raises(ValueError, match="not an observed variable"):
        holdout_elpd(idata, var_name="y")


def test_release_export_takes_var_name(kung_like):
    *_, rel = kung_like
    idata = rel.to_inference_data(var_name="mu")
    assert "mu" in get_group(idata, "posterior") and "f_dp" not in get_group(idata, "posterior")
    with pytest.raises(ValueError, match="var_name"):
        rel.to_inference_data(var_name="")


# ---------------------------------------------------------------- tree loop (proof audit)
def _tree_run(value_in_round_3, model: str):
    """A 6-round tree loop whose objective returns ``value_in_round_3`` in round 3."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.workflow import dp_thompson_sampling_tree

    calls = {"n": 0}

    def objective(X):
        calls["n"] += 1
        out = list(np.sin(6 * X[:, 0]))
        if calls["n"] == 4:  # the initial design is call 1, round 3 is call 4
            out = [value_in_round_3] * len(out)
        return np.array(out, dtype=object) if not isinstance(value_in_round_3, float) else out

    return dp_thompson_sampling_tree(
        objective,
        pm.gp.cov.ExpQuad(1, ls=0.2),
        domain=(0.0, 1.0),
        X_init=np.array([[0.1], [0.5], [0.9]]),
        n_rounds=6,
        noise_sd=0.05,
        inducing=6,
        y_bounds=(-1.0, 1.0),
        prior_mean=0.5,  # not 0: an overflow mapped to 0.0 would differ from NaN -> 0.5
        ledger=Ledger(epsilon=3.0, delta=1e-5),
        candidates=32,
        refine_steps=1,
        privacy_model=model,
        rng=np.random.default_rng(0),
    )


@pytest.mark.parametrize("model", ["label", "full"])
def test_a_value_float64_cannot_hold_is_non_finite_and_silent(model):
    """``10**400`` raised ``OverflowError`` (an ``ObjectiveError`` naming round 3) and a long
    double ``1e400`` warned of the overflow for that value only: both are now non-finite,
    replaced by the prior mean silently, and the published run equals the NaN run."""
    from fractions import Fraction

    def run(value):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = _tree_run(value, model)
        return res, sorted({str(w.message) for w in caught})

    run(float("nan"))  # once-per-process warnings (PyTensor's BLAS notice) come out here
    reference, reference_warnings = run(float("nan"))
    for value in (10**400, Fraction(10**400), np.longdouble("1e400")):
        res, caught = run(value)
        assert res.stop_reason == "completed" and len(res.x_chosen) == 6
        np.testing.assert_array_equal(res.x_chosen, reference.x_chosen)
        assert caught == reference_warnings  # no warning depends on the value


def test_label_leaf_residuals_stay_within_half_the_range_when_the_midpoint_rounds():
    from pm_dpgp.workflow.thompson_tree import label_statistics

    lo, hi = 1e16, 1e16 + 2.0  # midpoint 1e16 + 1 rounds to 1e16 in float64
    Phi = np.ones((2, 1))
    a = label_statistics(Phi[:1], np.array([lo]), (lo, hi))
    b = label_statistics(Phi[:1], np.array([hi]), (lo, hi))
    # one record changed: the leaf moves by at most R_phi (b - a) = 2 (it moved by 2 with
    # residuals 0 and 2, i.e. one residual was the whole range: sqrt(2) x the charge once
    # the input moves too, full privacy)
    assert abs(b - a)[0] <= hi - lo
    assert abs(a)[0] <= 0.5 * (hi - lo) and abs(b)[0] <= 0.5 * (hi - lo)


def test_thompson_traces_keep_the_column_names_of_a_dataframe_design(tmp_path):
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.compat import from_netcdf, to_netcdf
    from pm_dpgp.workflow import dp_thompson_sampling

    X0 = pd.DataFrame({"temp": [0.1, 0.5, 0.9], "speed": [0.2, 0.4, 0.6]})
    seen = []

    def objective(X):
        seen.append(type(X))
        return np.sin(3 * X[:, 0]) + X[:, 1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling(
            objective,
            pm.gp.cov.ExpQuad(2, ls=0.3),
            domain=([0, 0], [1, 1]),
            X_init=X0,
            n_rounds=2,
            noise_sd=2.0,
            y_bounds=(-1.0, 2.0),
            ledger=Ledger(epsilon=100.0, delta=1e-5),
            candidates=16,
            progressbar=False,
            rng=np.random.default_rng(0),
        )
    assert set(seen) == {np.ndarray}  # as documented: float64 arrays in the kernel's order
    for idata in (res.idata, res.to_inference_data()):
        for group in ("posterior", "constant_data"):
            names = get_group(idata, group).coords["input_dim"].values.tolist()
            assert names == ["temp", "speed"]
    path = tmp_path / "trace.nc"
    to_netcdf(res.idata, str(path))
    back = get_group(from_netcdf(str(path)), "posterior").coords["input_dim"].values.tolist()
    assert back == ["temp", "speed"]


# ---------------------------------------------------------------- sample-path kernel checks
def _path_model(cov):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, 10)
    return gp_regression(X, np.sin(X), cov, noise_sd=2.0)


def _path_release(cov, **kw):
    opts = {k: v for k, v in SP.items() if k != "kernel_class"}
    opts |= dict(y_bounds=(-1.0, 1.0), rng=np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample_path_release(_path_model(cov), [[0.5]], **(opts | kw))


@pytest.mark.parametrize(
    ("cov", "kernel_class"),
    [
        # 1 at every point of the 33-point domain grid: the numerical check called it constant
        # (exact Rényi divergence 1.2x the charge, stop-42 proof audit)
        (pm.gp.cov.Cosine(1, ls=1 / 32), "constant"),
        (pm.gp.cov.Periodic(1, period=1 / 32, ls=1.0), "constant"),
        # the two extreme probes uncorrelated: the Markov check passed vacuously
        (pm.gp.cov.ExpQuad(1, ls=0.05), "exponential_1d"),
        (pm.gp.cov.Matern32(1, ls=0.03), "exponential_1d"),
        (pm.gp.cov.Exponential(1, ls=0.3) + pm.gp.cov.Constant(0.1), "exponential_1d"),
    ],
)
def test_kernel_classes_are_checked_by_structure(cov, kernel_class):
    with pytest.raises(ValueError, match="sensitivity bound would not hold"):
        _path_release(cov, kernel_class=kernel_class, kernel_scale=float(np.sqrt(1.1)))


_MATERN12 = pm.gp.cov.Matern12(1, ls=0.3)


@pytest.mark.parametrize(
    ("cov", "kernel_class"),
    [
        (0.5 * pm.gp.cov.Exponential(1, ls=0.3), "exponential_1d"),
        (pm.gp.cov.Exponential(1, ls=0.3) * pm.gp.cov.Constant(0.5), "exponential_1d"),
        (_MATERN12, "exponential_1d"),
        (pm.gp.cov.Constant(0.7), "constant"),
    ],
)
def test_kernels_of_the_class_are_still_accepted(cov, kernel_class):
    scale = np.sqrt(0.7 if kernel_class == "constant" else 0.5 if cov is not _MATERN12 else 1.0)
    rel = _path_release(cov, kernel_class=kernel_class, kernel_scale=float(scale))
    assert rel.metadata["kernel_class"] == kernel_class


@pytest.mark.parametrize(
    "cov",
    [
        -1.0 * pm.gp.cov.ExpQuad(1, ls=0.3),  # exact D_3 = 2.2e9 against 0.95 charged
        pm.gp.cov.ExpQuad(1, ls=0.2) + (-0.5) * pm.gp.cov.Matern52(1, ls=0.2),
        pm.gp.cov.ExpQuad(1, ls=0.2) + (-0.9) * pm.gp.cov.ExpQuad(1, ls=0.05),
    ],
)
def test_a_kernel_that_is_not_a_covariance_is_refused_before_the_spend(cov):
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.models.sparse import is_stationary_decreasing

    assert not is_stationary_decreasing(cov)  # -1 * ExpQuad was "recognised"
    ledger = Ledger(epsilon=1e9, delta=1e-5)
    with pytest.raises(ValueError, match="not a covariance"):
        _path_release(cov, kappa=0.0, ledger=ledger, epsilon=None)
    assert not ledger.history


def test_covariances_the_package_does_not_recognise_are_still_accepted():
    for cov in (
        pm.gp.cov.Cosine(1, ls=0.3),
        pm.gp.cov.Periodic(1, period=0.5, ls=0.3),
        pm.gp.cov.Linear(1, c=0.5),
    ):
        assert _path_release(cov, kappa=0.0).epsilon > 0


def test_an_observed_none_beside_an_overflow_is_non_finite_too():
    """Stop-42 review: ``float(None)`` raised, so ``[None, 10**400]`` was refused where
    ``[None, 5.0]`` and ``[5.0, 10**400]`` ran (a refusal depending on a private value)."""
    from pm_dpgp.workflow.thompson import _as_observed_floats

    for raw in ([None, 10**400], [None, 5.0], [5.0, 10**400]):
        values = _as_observed_floats(np.array(raw, dtype=object))
        assert values is not None and values.shape == (2,)
    np.testing.assert_array_equal(_as_observed_floats([None, 10**400]), [np.nan, np.nan])


def test_sample_path_exports_check_row_labels_and_publish_only_what_was_exported(labelled):
    X, y = labelled
    hold = X.iloc[1::3]
    train = X.drop(hold.index)
    scale = 30.0
    model = gp_regression(
        train, y.loc[train.index] - 140, scale**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=60.0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = sample_path_release(
            model, hold, n_draws=2, kernel_scale=scale, y_bounds=(-90.0, 90.0), delta=1e-5,
            epsilon=1e9, domain=(0.0, 81.0), rng=np.random.default_rng(0),
        )  # fmt: skip
    shuffled = {"y": (y.loc[hold.index] - 140).iloc[::-1]}
    kw = dict(observed_is_public=True, predictive_sd=8.0)
    for call in (
        lambda: rel.to_inference_data(observed_data=shuffled, **kw),  # the default export
        lambda: rel.to_inference_data(X_star=hold, observed_data=shuffled, **kw),
    ):
        with pytest.raises(ValueError, match="different indexes"):
            call()
    rel.to_inference_data(observed_data={"y": y.loc[hold.index] - 140}, **kw)
    # a failed export publishes nothing; the values at evaluate()'s inputs stay owner-side
    new = np.array([[5.5], [6.5]])
    with pytest.raises(ValueError):
        rel.to_inference_data(X_star=new, dims={"f_path": ["a", "b"]})
    assert len(rel.published_inputs) == len(hold)
    rel.evaluate(train.to_numpy())
    assert rel.published_values.shape == (2, len(hold))
    assert rel.released_values.shape == (2, len(hold) + 2 + len(train))


def test_plot_of_a_sample_path_release_leaves_out_the_evaluated_inputs(path_release):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pm_dpgp.workflow import plot_dp_release

    rel, X_private = path_release
    rel.evaluate(X_private[:, None])
    ax = plot_dp_release(rel, rng=np.random.default_rng(0))
    xs = np.concatenate([line.get_xdata() for line in ax.get_lines()])
    assert not np.isin(X_private, xs).any() and np.isin(np.linspace(0, 1, 5), xs).all()
    plt.close(ax.figure)


def test_dataarray_names_and_numeric_labels():
    xr = pytest.importorskip("xarray")
    from pm_dpgp.models._common import dataframe_columns

    assert dataframe_columns(xr.DataArray(np.zeros(3), dims="obs", name="age")) == ("age",)
    assert dataframe_columns(xr.DataArray(np.zeros(3), dims="obs")) is None
    numeric = xr.DataArray(np.zeros((3, 2)), dims=("obs", "f"), coords={"f": [0, 1]})
    assert dataframe_columns(numeric) is None  # positions, not names
    text = xr.DataArray(np.zeros((3, 2)), dims=("obs", "f"), coords={"f": ["a", "b"]})
    assert dataframe_columns(text) == ("a", "b")


def test_cv_sse_planning_names_a_classification_model():
    from pm_dpgp.models import gp_classification
    from pm_dpgp.selection.cv_sse import plan_cv_sse
    from pm_dpgp.selection.grids import kfold_splits

    X = np.linspace(0, 1, 20)[:, None]
    model = gp_classification(X, (X[:, 0] > 0.5).astype(float), pm.gp.cov.ExpQuad(1, ls=0.3))
    with pytest.raises(TypeError, match="binary labels.*classification_release"):
        plan_cv_sse(
            model, [{}], kfold_splits(20, 4), y_bounds=(0.0, 1.0), release_epsilon=None,
            release_delta=None,
        )  # fmt: skip


# ---------------------------------------------------------------- noise-aware proof audit
@pytest.mark.parametrize(
    ("build", "value"),
    [
        (lambda h: pm.gp.cov.ExpQuad(1, ls=1.0) + h, -0.9),  # k(x, x) = 0.1, k -> -0.9 far off
        (lambda h: pm.gp.cov.ExpQuad(1, ls=1.0) + pm.gp.cov.Constant(h), -0.9),
        (lambda h: h * pm.gp.cov.ExpQuad(1, ls=1.0), -1.0),
    ],
)
def test_noise_aware_refuses_a_kernel_that_is_not_a_covariance(build, value):
    """A symbolic scale or constant with a negative public value: eq. (4) charged
    R_k = 0.39 while ||k(Z, x)|| reached 3.49 far from Z (9.4x the sensitivity)."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import dirichlet_release
    from pm_dpgp.mechanisms.full.noise_aware import kernel_norm_bound

    Z = np.linspace(-3.5, 3.5, 15)[:, None]
    X = np.linspace(-3, 3, 30)[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pm.Model():
            h = pm.Normal("h", 0, 1)
            model = sparse_gp_regression(X, np.sin(X[:, 0]), build(h), Z=Z, noise_sd=0.1)
    public = model.public_sparse_gp({"h": value})
    with pytest.raises(ValueError, match="not a covariance"):
        kernel_norm_bound(public, "auto")
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    kw = dict(epsilon=1.0, delta=1e-5, ledger=ledger, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="not a covariance"):
        noise_aware_release(public, (X, np.sin(X[:, 0])), y_bounds=(-2, 2), **kw)
    labels = (np.arange(30) % 2).astype(float)
    with pytest.raises(ValueError, match="not a covariance"):
        dirichlet_release(public, (X, labels), n_classes=2, **kw)
    assert not ledger.history


def test_noise_aware_statistics_raise_no_floating_point_error_for_a_private_value():
    """A private noise variance of 1e308 underflowed its weight: FloatingPointError under
    np.seterr(all="raise"), RuntimeWarnings under "warn", for that record only."""
    Z = np.linspace(-3.5, 3.5, 15)[:, None]
    X = np.linspace(-3, 3, 50)[:, None]
    y = np.sin(X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        public = sparse_gp_regression(
            X[:3], y[:3], pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.1
        ).public_sparse_gp()
    v = np.full(50, 0.02)
    v[0] = 1e308
    old = np.seterr(all="raise")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            noise_aware_release(
                public, (X, y, v), epsilon=1.0, delta=1e-5, y_bounds=(-2, 2),
                noise_var_floor=0.01, rng=np.random.default_rng(1),
            )  # fmt: skip
    finally:
        np.seterr(**old)


def test_min_spacing_is_exact_far_from_the_origin():
    from scipy.spatial.distance import pdist

    from pm_dpgp.mechanisms.full.noise_aware import _min_spacing

    rng = np.random.default_rng(3)
    for _ in range(60):  # the audit's fuzz: up to 13,475x too large before (offset 1.6e8)
        Z = 10.0 ** rng.uniform(3, 8) + np.sort(rng.uniform(0, 1, int(rng.integers(5, 40))))[
            :, None
        ] * 10 ** rng.uniform(-4, 0)
        assert _min_spacing(Z) == pytest.approx(pdist(Z).min(), rel=1e-12)
