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
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.audit import LiraSetting, random_neighbours
from pm_dpgp.audit.renyi import gaussian_renyi_terms
from pm_dpgp.mechanisms import (
    classification_release,
    cloaked_release,
    dirichlet_release,
    noise_aware_release,
    sample_path_release,
)
from pm_dpgp.models import (
    gp_classification,
    gp_regression,
    grid_inducing_points,
    sparse_gp_regression,
)
from pm_dpgp.selection import select_by_cross_validated_sse
from pm_dpgp.selection.cv_sse import plan_cv_sse
from pm_dpgp.selection.grids import kfold_splits
from pm_dpgp.workflow import dp_ppc, dp_thompson_sampling, dp_thompson_sampling_tree
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
