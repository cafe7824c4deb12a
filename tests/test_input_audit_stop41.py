"""Stop-41 input audit: the last items of the stop-40 "left" list.

* ``progressbar`` was read by truthiness (``progressbar="no"`` showed a bar); the sample-path
  release and the tree loop charge their ledger before the bar starts, so the check has to
  come first.  Every entry point with a bar now takes only ``True``/``False``, checked
  before anything is spent or drawn.
* Audit helpers: ``random_neighbours(n=True)``, ``LiraSetting(jump=nan)`` and
  ``gaussian_renyi_divergence(support_rtol=True)`` (which returned +inf) are refused.
* ``dp_ppc(n_draws=10**400)`` gave NumPy's "maximum supported dimension" error.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import scipy.sparse as sp

from pm_dpgp import Box, plan
from pm_dpgp.accounting import Ledger, event_from_metadata
from pm_dpgp.audit import LiraSetting, random_neighbours
from pm_dpgp.audit.renyi import gaussian_renyi_terms
from pm_dpgp.compat import get_group
from pm_dpgp.domain import parse_domain
from pm_dpgp.mechanisms import (
    binned_gp,
    binned_release,
    classification_release,
    cloaked_release,
    dirichlet_release,
    make_bins,
    noise_aware_release,
    prior_noise_release,
    sample_path_release,
)
from pm_dpgp.models import (
    PrivateHyperparameterError,
    dirichlet_gp_classification,
    gp_classification,
    gp_regression,
    grid_inducing_points,
    sparse_gp_regression,
)
from pm_dpgp.selection import (
    product_grid,
    select_by_cross_validated_sse,
    select_by_random_stopping,
)
from pm_dpgp.selection.cv_sse import plan_cv_sse
from pm_dpgp.selection.grids import kfold_splits
from pm_dpgp.workflow import (
    dp_ppc,
    dp_summary,
    dp_thompson_sampling,
    dp_thompson_sampling_tree,
    release_posterior,
)
from tests import releases as R

X = np.linspace(0.0, 6.0, 20)
Y = np.clip(np.sin(X), -1.9, 1.9)


def _model():
    return gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)


def _sparse_public():
    Z = grid_inducing_points(0.0, 6.0, 6)
    return sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=Z, noise_sd=0.5)


def _objective(Q):
    return np.sin(6 * Q[:, 0])


CALLS = {
    "cloaked_release": lambda led, rng, pb: cloaked_release(
        _model(), [[0.5]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), ledger=led, rng=rng,
        progressbar=pb,
    ),
    "classification_release": lambda led, rng, pb: classification_release(
        gp_classification(X, (Y > 0).astype(float), pm.gp.cov.ExpQuad(1, ls=1.5)), [[0.5]],
        epsilon=1.0, delta=1e-3, ledger=led, rng=rng, progressbar=pb,
    ),
    "sample_path_release": lambda led, rng, pb: sample_path_release(
        _model(), np.linspace(0, 6, 5), n_draws=1, kernel_scale=1.0, y_bounds=(-2.0, 2.0),
        delta=1e-5, domain=(0.0, 6.0), ledger=led, rng=rng, progressbar=pb,
    ),
    "noise_aware_release": lambda led, rng, pb: noise_aware_release(
        _sparse_public().public_sparse_gp(), (X, Y), epsilon=1.0, delta=1e-4,
        y_bounds=(-2.0, 2.0), ledger=led, rng=rng, progressbar=pb,
    ),
    "dirichlet_release": lambda led, rng, pb: dirichlet_release(
        _sparse_public().public_sparse_gp(), (X, (X > 3).astype(int)), n_classes=2,
        epsilon=1.0, delta=1e-4, ledger=led, rng=rng, progressbar=pb,
    ),
    "dp_thompson_sampling": lambda led, rng, pb: dp_thompson_sampling(
        _objective, pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0.0, 1.0), X_init=[[0.1], [0.5]],
        n_rounds=2, noise_sd=2.0, y_bounds=(-1, 1), ledger=led, rng=rng, progressbar=pb,
    ),
    "dp_thompson_sampling_tree": lambda led, rng, pb: dp_thompson_sampling_tree(
        _objective, pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0.0, 1.0), X_init=[[0.1], [0.5]],
        n_rounds=2, noise_sd=0.05, inducing=6, y_bounds=(-1.0, 1.0), ledger=led, rng=rng,
        progressbar=pb,
    ),
    "select_by_cross_validated_sse": lambda led, rng, pb: select_by_cross_validated_sse(
        _model(), [{"ell": 1.0}, {"ell": 2.0}], epsilon=1.0, y_bounds=(-2.0, 2.0),
        release_epsilon=1.0, release_delta=1e-3, ledger=led, rng=rng, progressbar=pb,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("flag", ["no", "False", 0, None, [0]])
def test_progressbar_accepts_only_a_boolean_and_is_checked_before_the_spend(name, flag):
    ledger = Ledger(1e4, 1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="progressbar must be True or False"):
            CALLS[name](ledger, rng, flag)
    assert ledger.history == [] and ledger.spent_epsilon == 0.0
    assert rng.bit_generator.state == state  # no noise drawn


@pytest.mark.parametrize("name", ["sample_path_release", "dp_thompson_sampling_tree"])
def test_the_calls_that_charge_before_their_bar_still_run_with_a_boolean(name):
    """The two entry points whose charge precedes the bar: ``False`` (and NumPy's) runs."""
    ledger = Ledger(1e4, 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        CALLS[name](ledger, np.random.default_rng(0), np.False_)
    assert len(ledger.history) >= 1


def test_plan_cv_sse_checks_progressbar():
    with pytest.raises(ValueError, match="progressbar"):
        plan_cv_sse(
            _model(), [{}], kfold_splits(20, 4), y_bounds=(-2.0, 2.0), release_epsilon=None,
            release_delta=None, progressbar="no",
        )  # fmt: skip


@pytest.mark.parametrize(("n", "n_test"), [(True, 3), (4, True), (0, 3), (4.5, 3), ("4", 3)])
def test_random_neighbours_takes_whole_sizes(n, n_test):
    with pytest.raises(ValueError, match="n_test|n must"):
        random_neighbours((0.0, 1.0), n, 1.0, n_test, np.random.default_rng(0))


def test_random_neighbours_still_draws_a_pair():
    pair = random_neighbours((0.0, 1.0), np.int64(4), 1.0, 3, np.random.default_rng(0))
    assert pair.X_core.shape == (3, 1) and pair.X_test.shape == (3, 1)


@pytest.mark.parametrize(
    "kw",
    [{"jump": np.nan}, {"jump": 2.0}, {"jump": "0.5"}, {"target_x": True},
     {"domain": ("0", "1")}, {"domain": (0.0, np.nan)}, {"target_y": np.nan},
     {"target_y": "0.5"}],
)  # fmt: skip
def test_lira_setting_checks_its_coordinates(kw):
    with pytest.raises(ValueError, match="jump|target_x|target_y|domain"):
        LiraSetting(**kw)


def test_lira_setting_accepts_numpy_coordinates():
    s = LiraSetting(jump=np.float64(0.25), target_x=np.float32(0.75), target_y=np.float64(0.5))
    assert s.y_target == 0.5 and s.step(np.array([0.2, 0.3]))[1] == s.M_Y


@pytest.mark.parametrize("rtol", [True, 0.0, -1e-11, 1.0, np.nan, "1e-11"])
def test_renyi_support_tolerance_is_a_small_positive_number(rtol):
    """``support_rtol=True`` (= 1) cut every direction and gave +inf."""
    mu, S = np.zeros(2), np.eye(2)
    with pytest.raises(ValueError, match="support_rtol"):
        gaussian_renyi_terms(mu, S, mu + 0.1, S, 2.0, support_rtol=rtol)
    # D_2 of two unit Gaussians 0.1 apart per coordinate: α‖Δμ‖²/2 = 2 · 0.02 / 2
    assert gaussian_renyi_terms(mu, S, mu + 0.1, S, 2.0).total == pytest.approx(0.02)


def test_dp_ppc_refuses_an_impossible_number_of_draws():
    rel = R.noise_aware()
    Xh = np.linspace(-2.0, 2.0, 5)
    with pytest.raises(ValueError, match="n_draws"):
        dp_ppc(rel, Xh, np.sin(2 * Xh), noise_sd=0.3, training=None, n_draws=10**400)


# ------------------------------------------------------------------ array-input fuzz (stop 41)
def _selection_model():
    return sparse_gp_regression(
        None, None, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 10), noise_sd=lambda: pm.HalfNormal("sigma", 1.0),
    )  # fmt: skip


@pytest.mark.parametrize("which", ["sparse X", "sparse y"])
def test_a_sparse_matrix_of_private_data_is_refused_before_the_selection_spends(which):
    """Was: the schema check trusted any object with a dtype and a shape; the ledger was
    charged (ε 1.37), then the conversion failed with a ``TypeError``."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (100, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(100)
    data = (sp.csr_matrix(X), y) if which == "sparse X" else (X, sp.csr_matrix(y[:, None]))
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    g = np.random.default_rng(1)
    state = g.bit_generator.state
    with pytest.raises(TypeError, match=r"csr_matrix \(call \.toarray\(\)\)"):
        select_by_random_stopping(
            _selection_model(), product_grid({"ell": [0.3, 1.0], "sigma": [0.3]}), data,
            epsilon=1.0, delta=1e-5, y_bounds=(-2, 2), ledger=ledger, gamma=0.5, rng=g,
        )  # fmt: skip
    assert ledger.history == [] and g.bit_generator.state == state


def test_binned_release_refuses_misaligned_pandas_rows():
    """Was: a shuffled Series was paired with the DataFrame's rows by position."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"x": rng.uniform(0, 6, 40)})
    y = pd.Series(np.sin(X["x"]).clip(-1.9, 1.9))
    bins = make_bins(np.linspace(0, 6, 7))
    with pytest.raises(ValueError, match="different indexes"):
        binned_release(X, y.sample(frac=1, random_state=1), bins, epsilon=1.0,
                       y_bounds=(-2, 2), rng=np.random.default_rng(1))  # fmt: skip
    r = binned_release(X, y, bins, epsilon=1.0, y_bounds=(-2, 2), rng=np.random.default_rng(1))
    assert r.draws.shape == (1, 6)


def _frame_model():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(0, 6, (30, 2)), columns=["age", "weight"])
    y = np.clip(np.sin(X["age"].to_numpy()) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(2, ls=[1.5, 3.0]), noise_sd=0.3, mean=0.0)


@pytest.mark.parametrize("entry", ["cloaked", "prior_noise", "sample_path", "release_posterior"])
def test_a_data_frame_of_new_inputs_must_have_the_model_columns_in_order(entry):
    """Was: ``X_star[["weight", "age"]]`` was used by position, a different release."""
    model = _frame_model()
    Xs = pd.DataFrame(np.random.default_rng(1).uniform(0, 6, (5, 2)), columns=["age", "weight"])
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), n_draws=1)
    released = cloaked_release(model, Xs, rng=np.random.default_rng(0), **kw)
    calls = {
        "cloaked": lambda Z, led: cloaked_release(model, Z, ledger=led,
                                                  rng=np.random.default_rng(), **kw),
        "prior_noise": lambda Z, led: prior_noise_release(model, Z, ledger=led,
                                                          rng=np.random.default_rng(), **kw),
        "sample_path": lambda Z, led: sample_path_release(
            model, Z, n_draws=1, kernel_scale=1.0, y_bounds=(-2, 2), delta=1e-5,
            domain=Box([0, 0], [6, 6]), ledger=led, rng=np.random.default_rng()),
        "release_posterior": lambda Z, led: release_posterior(released, model, Z),
    }  # fmt: skip
    ledger = Ledger(1e6, 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls[entry](Xs, ledger)  # the model's own order is accepted
        calls[entry](Xs.to_numpy(), ledger)  # arrays are positional, as documented
        spent = len(ledger.history)
        with pytest.raises(ValueError, match=r"columns \['weight', 'age'\].*\['age', 'weight'\]"):
            calls[entry](Xs[["weight", "age"]], ledger)
        with pytest.raises(ValueError, match="rename and order them"):  # not X_star[[...]]
            calls[entry](Xs.rename(columns={"age": "Age"}), ledger)
    assert len(ledger.history) == spent


def test_dp_ppc_checks_the_hold_out_columns_against_the_training_model():
    model = _frame_model()
    Xh = pd.DataFrame(np.random.default_rng(2).uniform(0, 6, (6, 2)), columns=["age", "weight"])
    rel = cloaked_release(model, Xh, epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), n_draws=2,
                          rng=np.random.default_rng(1))  # fmt: skip
    yh = np.zeros(6)
    with pytest.raises(ValueError, match="X_holdout has the columns"):
        dp_ppc(rel, Xh[["weight", "age"]], yh, noise_sd=0.3, training=model)
    dp_ppc(rel, Xh, yh, noise_sd=0.3, training=model)


def test_masked_entries_of_public_arrays_are_refused():
    """Was: ``np.asarray`` dropped the mask and used the hidden values."""
    masked = np.ma.array([1.0], mask=[True])
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 6, 40)
    rel = binned_release(X, np.clip(np.sin(X), -1.9, 1.9), make_bins(np.linspace(0, 6, 7)),
                         epsilon=1.0, y_bounds=(-2, 2), rng=np.random.default_rng(1))  # fmt: skip
    with pytest.raises(ValueError, match="lengthscale has masked entries"):
        binned_gp(rel, np.linspace(0, 6, 5), lengthscale=masked, kernel_scale=1.0, noise_sd=0.3)
    with pytest.raises(ValueError, match="masked"):
        parse_domain((np.ma.array([0.0, 0.0], mask=[True, False]), [1.0, 1.0]))
    # unmasked masked arrays are plain numbers
    assert parse_domain((np.ma.array([0.0]), [1.0])).dim == 1


def test_thompson_candidates_must_lie_in_the_domain():
    """Was: candidates=[[5.0]] with domain (0, 1) was queried, then clipped by the release."""
    calls = []

    def objective(Q):
        calls.append(Q)
        return np.sin(3 * Q[:, 0])

    ledger = Ledger(epsilon=1e7, delta=1e-5)
    with pytest.raises(ValueError, match="candidates must lie inside the public domain"):
        dp_thompson_sampling(objective, pm.gp.cov.ExpQuad(1, ls=0.5), domain=(0.0, 1.0),
                             X_init=[[0.2], [0.7]], n_rounds=3, noise_sd=0.3, y_bounds=(-1, 1),
                             ledger=ledger, candidates=np.array([[5.0]]), progressbar=False,
                             rng=np.random.default_rng(8))  # fmt: skip
    assert calls == [] and ledger.history == []


def test_thompson_refuses_x_init_columns_the_kernel_does_not_take_before_observing():
    calls = []
    with pytest.raises(ValueError, match="X_init has 3 column"):
        dp_thompson_sampling(lambda Q: calls.append(Q) or np.zeros(len(Q)),
                             pm.gp.cov.ExpQuad(2, ls=0.5), domain=(0.0, 1.0),
                             X_init=[[0.2, 0.2, 0.2]], n_rounds=1, noise_sd=0.3,
                             y_bounds=(-1, 1), ledger=Ledger(1e7, 1e-5), progressbar=False,
                             rng=np.random.default_rng(8))  # fmt: skip
    assert calls == []


def test_clearer_messages_for_arrays_of_the_wrong_kind():
    x = np.linspace(0, 6, 30)
    m2 = gp_regression(np.column_stack([x, x]), np.sin(x), pm.gp.cov.ExpQuad(2, ls=1.5),
                       noise_sd=0.3)  # fmt: skip
    with pytest.raises(ValueError, match="X_star must have 2 column"):  # was "Xa"
        prior_noise_release(m2, np.ones((5, 3)), epsilon=1, delta=1e-3, y_bounds=(-2, 2),
                            rng=np.random.default_rng(0))  # fmt: skip
    m1 = _model()
    rel = cloaked_release(m1, np.linspace(0, 6, 25), epsilon=1, delta=1e-3, y_bounds=(-2, 2),
                          n_draws=2, rng=np.random.default_rng(0))  # fmt: skip
    Xh = np.linspace(0, 6, 9)
    for bad in (np.zeros((9, 1)), np.zeros(3)):  # NumPy's broadcast message before
        with pytest.raises(ValueError, match="extra_sd must be one number or one per"):
            dp_ppc(rel, Xh, np.sin(Xh), noise_sd=0.3, training=m1, extra_sd=bad)
    edges = np.linspace(0, 6, 7)
    assert make_bins(pd.Series(edges)).n_bins == make_bins(edges).n_bins == 6  # was shape ()
    with pytest.raises(ValueError, match="iterator"):  # was "not a number of bins"
        make_bins(v for v in edges)
    for bad, kind in (((v for v in np.sin(x)), "generator"), (set(np.sin(x)), "set")):
        with pytest.raises(TypeError, match=f"got a {kind}"):  # was "some entry is not a number"
            gp_regression(x, bad, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)


def test_clearer_messages_for_full_privacy_data_containers():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, 200)
    y = np.sin(2 * X)
    pub = _sparse_public().public_sparse_gp()
    ledger = Ledger(100.0, 1e-3)
    kw = dict(epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0), ledger=ledger,
              rng=np.random.default_rng(4))  # fmt: skip
    with pytest.raises(TypeError, match="zip"):  # was "len() of unsized object"
        noise_aware_release(pub, zip(X, y, strict=True), **kw)
    with pytest.raises(TypeError, match="got a DataFrame"):  # was "each chunk ... got str"
        noise_aware_release(pub, pd.DataFrame({"x": X, "y": y}), **kw)
    onehot = np.eye(3)[(X > -1).astype(int) + (X > 1).astype(int)]
    with pytest.raises(ValueError, match=r"shape \(200, 3\).*argmax"):  # was "600 rows"
        dirichlet_release(pub, (X, onehot), n_classes=3, epsilon=1.0, delta=1e-4,
                          ledger=ledger, rng=np.random.default_rng(5))  # fmt: skip
    assert ledger.history == []


def test_dp_summary_names_and_probabilities():
    rel = R.label_release("cloaking", _model())
    idata = rel.to_inference_data()
    with pytest.raises(ValueError, match=r"got array\(\[0.9\]\)"):  # was "got nan"
        dp_summary(idata, prob=np.array([0.9]))
    with pytest.raises(ValueError, match="list of variable names"):  # was ArviZ's KeyError
        dp_summary(idata, var_names={"f_dp"})
    with pytest.raises(ValueError, match=r"no variable \['f'\]"):
        dp_summary(idata, var_names=["f"])
    assert len(dp_summary(idata, var_names="f_dp")) == len(dp_summary(idata)) == 25


def test_a_ragged_validation_split_gets_a_clear_error():
    with pytest.raises(ValueError, match="1-D list or array"):  # was NumPy's message
        select_by_random_stopping(
            _selection_model(), product_grid({"ell": [0.3, 1.0], "sigma": [0.3]}),
            (np.zeros((20, 1)), np.zeros(20)), epsilon=1.0, delta=1e-5, y_bounds=(-2, 2),
            ledger=Ledger(100.0, 1e-3, filter="renyi"), validation=[[1, 2], [3]],
            rng=np.random.default_rng(0),
        )  # fmt: skip


def test_releases_record_their_input_columns_and_refuse_another_order_later():
    """Post-processing used a reordered DataFrame by position (stop-41 review): the
    sample path's ``evaluate``, ``q(u)``'s ``predict``/``sample_f``, Dirichlet class
    probabilities, ``binned_gp`` and ``dp_ppc`` with ``training=None`` or a pair."""
    rng = np.random.default_rng(0)
    cols = ["age", "weight"]
    X = pd.DataFrame(rng.uniform(0, 6, (200, 2)), columns=cols)
    y = np.clip(np.sin(X["age"].to_numpy()), -1.9, 1.9)
    Xs = pd.DataFrame(rng.uniform(0, 6, (4, 2)), columns=cols)
    swapped = Xs[["weight", "age"]]
    match = r"columns \['weight', 'age'\]"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sp_rel = sample_path_release(
            _frame_model(), Xs, n_draws=1, kernel_scale=1.0, y_bounds=(-2, 2), delta=1e-5,
            domain=Box([0, 0], [6, 6]), ledger=Ledger(), rng=np.random.default_rng(1),
        )  # fmt: skip
    assert sp_rel.metadata["input_columns"] == cols
    sp_rel.evaluate(Xs)
    with pytest.raises(ValueError, match=match):
        sp_rel.evaluate(swapped)
    Z = np.array([[a, b] for a in np.linspace(0, 6, 4) for b in np.linspace(0, 6, 4)])
    pub = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(2, ls=2.0), Z=Z,
                               noise_sd=0.5).public_sparse_gp()  # fmt: skip
    na = noise_aware_release(pub, (X, y), epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0),
                             rng=np.random.default_rng(2))  # fmt: skip
    assert na.metadata["input_columns"] == cols
    na.predict(Xs)
    for call in (
        lambda A: na.predict(A),
        lambda A: na.sample_f(A, 2, rng=np.random.default_rng(3)),
    ):
        with pytest.raises(ValueError, match=match):
            call(swapped)
    with pytest.raises(ValueError, match="finite"):  # NaN gave NaN predictions
        na.predict(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match=match):
        dp_ppc(na, swapped, np.zeros(4), noise_sd=0.3, training=None)
    with pytest.raises(ValueError, match=match):
        dp_ppc(na, swapped, np.zeros(4), noise_sd=0.3, training=(X, y))
    labels = (X["age"].to_numpy() > 3).astype(int)
    dr = dirichlet_release(pub, (X, labels), n_classes=2, epsilon=1.0, delta=1e-4,
                           rng=np.random.default_rng(4))  # fmt: skip
    dr.predict_proba(Xs)
    with pytest.raises(ValueError, match=match):
        dr.predict_proba(swapped)
    bins = make_bins([np.linspace(0, 6, 4), np.linspace(0, 6, 4)])
    br = binned_release(X, y, bins, epsilon=1.0, y_bounds=(-2, 2), rng=np.random.default_rng(5))
    assert br.metadata["input_columns"] == cols
    binned_gp(br, Xs, lengthscale=2.0, kernel_scale=1.0, noise_sd=0.3)
    with pytest.raises(ValueError, match=match):
        binned_gp(br, swapped, lengthscale=2.0, kernel_scale=1.0, noise_sd=0.3)
    # arrays carry no names: positional, as documented; releases from arrays record None
    assert R.noise_aware().metadata["input_columns"] is None


# ------------------------------------------------------------ pandas walkthrough (stop 41)
def test_dp_ppc_refuses_a_hold_out_series_with_another_index():
    """Was: a shuffled ``y_holdout`` was paired by position (elpd -719 instead of -308)."""
    model = _frame_model()
    Xh = pd.DataFrame(np.random.default_rng(2).uniform(0, 6, (6, 2)), columns=["age", "weight"])
    yh = pd.Series(np.zeros(6), index=Xh.index)
    rel = cloaked_release(model, Xh, epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), n_draws=2,
                          rng=np.random.default_rng(1))  # fmt: skip
    with pytest.raises(ValueError, match="X_holdout and y_holdout are pandas objects"):
        dp_ppc(rel, Xh, yh.sample(frac=1, random_state=0), noise_sd=0.3, training=model)
    dp_ppc(rel, Xh, yh, noise_sd=0.3, training=model)


def test_sparse_models_from_data_frames_give_releases_their_columns():
    """Was: a noise-aware or Dirichlet release of a model built on a DataFrame (no data=)
    recorded no columns and took a reordered DataFrame by position; the Dirichlet builder
    paired a shuffled label Series by position."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(0, 6, (150, 2)), columns=["age", "weight"])
    y = pd.Series(np.sin(X["age"].to_numpy()), index=X.index)
    Z = np.array([[a, b] for a in np.linspace(0, 6, 3) for b in np.linspace(0, 6, 3)])
    cov = pm.gp.cov.ExpQuad(2, ls=2.0)
    model = sparse_gp_regression(X, y, cov, Z=Z, noise_sd=0.5)
    na = noise_aware_release(model, epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0),
                             rng=np.random.default_rng(1))  # fmt: skip
    assert na.metadata["input_columns"] == ["age", "weight"]
    with pytest.raises(ValueError, match="columns"):
        na.predict(X[["weight", "age"]].iloc[:3])
    labels = pd.Series((X["age"].to_numpy() > 3).astype(int), index=X.index)
    with pytest.raises(ValueError, match="X and labels are pandas objects"):
        dirichlet_gp_classification(X, labels.sample(frac=1, random_state=0), cov, Z=Z,
                                    n_classes=2)  # fmt: skip
    dmodel = dirichlet_gp_classification(X, labels, cov, Z=Z, n_classes=2)
    dr = dirichlet_release(dmodel, epsilon=1.0, delta=1e-4, rng=np.random.default_rng(2))
    assert dr.metadata["input_columns"] == ["age", "weight"]
    with pytest.raises(ValueError, match="columns"):
        dr.predict_proba(X[["weight", "age"]].iloc[:3])


def test_plans_refuse_a_reordered_data_frame_as_their_release_does():
    """Was: ``plan.cloaked`` planned noise for swapped inputs (sd off by up to 262 cm)."""
    model = _frame_model()
    Xs = pd.DataFrame(np.random.default_rng(1).uniform(0, 6, (5, 2)), columns=["age", "weight"])
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2, 2))
    plan.cloaked(model, Xs, **kw)
    for f in (plan.cloaked, plan.prior_noise):
        with pytest.raises(ValueError, match=r"columns \['weight', 'age'\]"):
            f(model, Xs[["weight", "age"]], **kw)
    gpc = gp_classification(Xs.iloc[[0, 1, 2, 3]].reset_index(drop=True), [0, 1, 0, 1],
                            pm.gp.cov.ExpQuad(2, ls=2.0))  # fmt: skip
    with pytest.raises(ValueError, match="columns"):
        plan.classification(gpc, Xs[["weight", "age"]], epsilon=1.0, delta=1e-3)


def test_release_posterior_uses_the_hyperparameters_the_release_records():
    """Was: a model with free hyperparameters was refused although the release records the
    values it used; the message pointed at ``public_gp({...})``."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    model = gp_regression(X, y, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
                          noise_sd=lambda: pm.HalfNormal("noise", 1.0), mean=0.0)  # fmt: skip
    hp = {"ell": 1.5, "noise": 0.3}
    Xs = np.linspace(0, 6, 8)
    rel = cloaked_release(model, Xs, epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                          hyperparameters=hp, rng=np.random.default_rng(1))  # fmt: skip
    a = release_posterior(rel, model, Xs)
    b = release_posterior(rel, model, Xs, hyperparameters=hp)
    np.testing.assert_array_equal(a.mean, b.mean)
    with pytest.raises(ValueError, match="differs from the release"):  # still checked
        release_posterior(rel, model, Xs, hyperparameters={"ell": 1.0, "noise": 0.3})
    with pytest.raises(PrivateHyperparameterError, match="hyperparameters=\\{"):
        model.public_gp()


def test_event_from_metadata_reads_the_json_text_of_an_arviz_attr():
    rel = R.label_release("cloaking", _model())
    attrs = get_group(rel.to_inference_data(), "posterior").attrs
    assert isinstance(attrs["privacy_event"], str)
    assert event_from_metadata(attrs["privacy_event"]) == event_from_metadata(
        rel.metadata["privacy_event"]
    )
    with pytest.raises(ValueError, match="not JSON"):
        event_from_metadata("{not json")
