"""Mutation testing, round 10: kill tests for the code of the stop-39 session.

An independent helper applied small edits to ``workflow/thompson_tree.py`` (the default ε
sized without the ledger's slack, ``SMALL_RUN_SHARE``, the no-budget warning),
``selection/grids.py``, ``selection/liu_talwar.py`` / ``sample_paths.py`` (the prior-mean
warning once, before the spend), ``_validation.py`` (text refusal, the prior-mean warning),
``mechanisms/label/truncation.py`` (``check_rank_tol``) and its call sites, the metadata key
``hyperparameter_source`` and ``models/_common._as_2d_inputs``.  Each test below fails under
the mutant named in its docstring (T…: thompson_tree.py, G…: grids.py, V…: validation and
the prior-mean warning, R…: rank_tol, H…: hyperparameter_source, W…: input hint) and passes
on the correct code.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import PrivacyWarning
from pm_dpgp._validation import check_positive, warn_public_settings
from pm_dpgp.accounting import BudgetExceededError, GaussianEvent, Ledger
from pm_dpgp.mechanisms import (
    classification_release,
    cloaked_release,
    noise_aware_release,
    sample_path_release,
)
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
from pm_dpgp.mechanisms.label.cloaking import gradient_ascent_reference
from pm_dpgp.mechanisms.label.truncation import RANK_TOL_MIN, check_rank_tol
from pm_dpgp.models import (
    PublicHyperparameters,
    fitc_gp_regression,
    gp_classification,
    gp_regression,
    grid_inducing_points,
    sparse_gp_regression,
)
from pm_dpgp.models.hyperparameters import CALLER_DECLARED
from pm_dpgp.selection import (
    prior_quantile_grid,
    product_grid,
    select_by_random_stopping,
    select_by_sample_paths,
)
from tests.test_thompson_tree import DELTA, _run

SMALL_RUN = "affords a run of epsilon"
OUTSIDE = "lies outside"


# ------------------------------------------------------------- thompson_tree: default epsilon
def test_default_epsilon_is_sized_within_the_budget_when_the_whole_budget_fits_the_slack_only():
    """T2 (the first, whole-budget check by ``ledger.can_afford``, i.e. with the slack): after
    a negligible earlier release (noise multiplier 1e5), a whole-budget run composes to
    3 (1 + 1.1e-10), inside the slack ``BUDGET_RTOL`` = 1e-9 but over the budget.  The run
    must be sized by bisection to a total within 3 itself (a factor 10 from both edges)."""
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    ledger.spend(GaussianEvent(noise_multiplier=1e5), privacy_model="full")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run(ledger=ledger, n_rounds=6)
    assert res.stop_reason == "completed" and len(ledger.history) == 2
    assert 3.0 * (1 - 1e-6) <= ledger.filter_epsilon <= 3.0


def test_default_epsilon_warns_only_below_a_tenth_of_the_budget_and_quotes_the_share():
    """T5 (``SMALL_RUN_SHARE`` 0.1 -> 0.5) and T8 (the share printed as ε itself): a run at
    about 20 % of the budget (0.62 of 3 after 2.9 spent: the composition is sub-additive)
    does not warn; one at 0.05 of 3 says 1.67 % of the budget."""
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    ledger.spend(
        GaussianEvent(noise_multiplier=gaussian_sigma(2.9, DELTA, 1.0)), privacy_model="full"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = _run(ledger=ledger, n_rounds=6)
    assert res.stop_reason == "completed"
    assert 0.15 * 3.0 < res.events[0].epsilon(DELTA) < 0.4 * 3.0
    assert not [w for w in caught if SMALL_RUN in str(w.message)]
    small = Ledger(epsilon=3.0, delta=DELTA)
    small.spend(
        GaussianEvent(noise_multiplier=gaussian_sigma(2.999, DELTA, 1.0)), privacy_model="full"
    )
    with pytest.warns(UserWarning, match=r"epsilon = 0\.05\d* only \(1\.6\d% of its budget 3;"):
        _run(ledger=small, n_rounds=6)


def test_default_epsilon_on_a_ledger_with_exactly_nothing_left_warns():
    """T7 (the no-budget warning of the ``elif T > 0`` branch removed): a ledger whose filter ε
    reached its budget (within the slack) has ``remaining_epsilon == 0``; the run stops with
    no rounds, nothing spent or drawn, and says so."""
    ledger = Ledger(epsilon=3.0, delta=DELTA)
    z = gaussian_sigma(3.0 * (1 + 3e-10), DELTA, 1.0)
    ledger.spend(GaussianEvent(noise_multiplier=z), privacy_model="full")
    assert ledger.remaining_epsilon == 0.0
    rng = np.random.default_rng(9)
    state = rng.bit_generator.state
    with pytest.warns(UserWarning, match="Its budget is used up"):
        res = _run(ledger=ledger, n_rounds=6, rng=rng)
    assert res.stop_reason == "budget" and res.n_rounds == 0
    assert len(ledger.history) == 1 and rng.bit_generator.state == state


# ------------------------------------------------------------------------------ grids
def test_prior_quantile_grid_keeps_the_callers_quantile_order():
    """G6 (coinciding quantiles merged by ``sorted(set(...))``): the values follow the order
    of ``quantiles`` (so ``index`` refers to it), coinciding ones listed once."""
    X = np.linspace(0, 6, 8)
    gpr = gp_regression(
        X, np.sin(X), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)), noise_sd=0.3
    )
    up = [c["ell"] for c in prior_quantile_grid(gpr, (0.1, 0.5, 0.9))]
    down = [c["ell"] for c in prior_quantile_grid(gpr, (0.9, 0.5, 0.1))]
    assert up == sorted(up) and len(set(up)) == 3
    assert down == up[::-1]
    assert [c["ell"] for c in prior_quantile_grid(gpr, (0.9, 0.1, 0.9))] == [up[2], up[0]]


# ------------------------------------------------------------------ _validation: text refusal
@pytest.mark.parametrize("text", ["0.3", b"0.3", np.str_("0.3")])
def test_check_positive_refuses_text_even_when_it_parses(text):
    """V3 (``check_positive`` without ``_refuse_bool_or_text``): text is refused, as by
    ``check_epsilon`` and ``check_delta``."""
    with pytest.raises(ValueError, match="got text"):
        check_positive(text, "noise_sd")
    assert check_positive(0.3, "noise_sd") == 0.3


# ------------------------------------------------------------------ prior mean outside bounds
def test_prior_mean_warning_quotes_the_farther_bound_and_the_first_centre_outside():
    """V9 (the residual bound read from the upper bound only) and V8 (only the first centre of
    a list checked): mean 5 with bounds (1, 3) has |y - mean| <= 4 (from the lower bound), four
    times the half-width 1; a list of centres warns once, for the first one outside."""
    kw = dict(epsilon=1.0, delta=1e-6, n_records=1000)
    with pytest.warns(PrivacyWarning, match=OUTSIDE):
        (message,) = warn_public_settings(**kw, bounds=(1.0, 3.0), centre=5.0)
    assert "|y - mean| <= 4 " in message and "4 times the half-width" in message
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        messages = warn_public_settings(**kw, bounds=(1.0, 3.0), centre=[2.0, 5.0, 7.0])
        assert warn_public_settings(**kw, bounds=(1.0, 3.0), centre=[1.0, 2.0, 3.0]) == []
    assert len(messages) == 1 and len(caught) == 1
    assert messages[0].startswith("the prior mean 5 lies outside")


def _sparse(mean: float) -> object:
    X = np.random.default_rng(0).uniform(-3, 3, (120, 1))
    return sparse_gp_regression(
        X, np.sin(2 * X[:, 0]), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 6), noise_sd=0.3, mean=mean,
    )  # fmt: skip


def _outside(caught) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, PrivacyWarning) and OUTSIDE in str(w.message)
    ]


def test_random_stopping_warns_about_the_prior_mean_before_the_spend():
    """V11 (the selection's public-setting warnings moved after ``ledger.spend``): a ledger
    that refuses the selection still leaves the (public) prior-mean warning, and nothing is
    spent or drawn."""
    ledger = Ledger(epsilon=1e-3, delta=1e-3)
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(BudgetExceededError):
            select_by_random_stopping(
                _sparse(5.0), product_grid({"ell": [0.5, 2.0]}), epsilon=1.0, delta=1e-5,
                y_bounds=(-2.0, 2.0), gamma=0.2, ledger=ledger, rng=rng,
            )  # fmt: skip
    assert len(_outside(caught)) == 1
    assert ledger.history == [] and rng.bit_generator.state == state


def test_sample_path_selection_warns_about_the_prior_mean_once_before_the_spend():
    """V10 (``bounds`` not passed to the selection's ``warn_public_settings``): the sample-path
    selection centres the outputs at the prior mean too; mean 5 with ``y_bounds = (-2, 2)``
    warns once, before the (here refused) spend; mean 0 does not."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (96, 1))
    y = np.clip(np.sin(X[:, 0]), -2.0, 2.0)
    for mean, expected in ((5.0, 1), (0.0, 0)):
        model = gp_regression(
            X, y, lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
            noise_sd=lambda: pm.HalfNormal("noise", 20.0), mean=mean,
        )  # fmt: skip
        ledger = Ledger(epsilon=1e-3, delta=1e-3, filter="renyi")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(BudgetExceededError):
                select_by_sample_paths(
                    model, product_grid({"ell": [1.0, 3.0], "noise": [20.0]}),
                    X_star=np.linspace(0.0, 10.0, 11)[:, None], domain=(0.0, 10.0),
                    y_bounds=(-2.0, 2.0), epsilon=1.0, delta=1e-4, ledger=ledger,
                    rng=np.random.default_rng(1),
                )  # fmt: skip
        assert len(_outside(caught)) == expected, _outside(caught)
        assert ledger.history == []


# ---------------------------------------------------------------------------------- rank_tol
def test_rank_tol_floor_is_the_unit_round_off_and_its_message_only_below_it():
    """R2 (``RANK_TOL_MIN`` a quarter of the round-off) and R4 (the round-off message for
    zero or negative values): half the round-off is refused as round-off; 0 and -1 are
    refused without that explanation; the round-off itself is accepted."""
    eps = float(np.finfo(np.float64).eps)
    assert RANK_TOL_MIN == eps and check_rank_tol(eps) == eps
    with pytest.raises(ValueError, match="round-off"):
        check_rank_tol(eps / 2)
    for bad in (0.0, -1.0, -1e-20):
        with pytest.raises(ValueError, match="rank_tol") as info:
            check_rank_tol(bad)
        assert "round-off" not in str(info.value)


def test_gradient_ascent_reference_refuses_a_rank_tol_below_the_round_off():
    """R3 (``gradient_ascent_reference`` back on the old ``(0, 1)`` check): every solver
    refuses a ``rank_tol`` below the float64 round-off (stop-39 audit)."""
    rng = np.random.default_rng(0)
    C = rng.standard_normal((12, 3)) @ rng.standard_normal((3, 20))
    with pytest.raises(ValueError, match="round-off"):
        gradient_ascent_reference(C, rank_tol=1e-17, rng=np.random.default_rng(1))


# -------------------------------------------------------------------- hyperparameter_source
PROVENANCE = "private selection: test (charged event: x; full privacy)"


def test_every_public_view_records_where_its_hyperparameters_came_from():
    """H4 (classification), H5 (FITC), H7 (sparse): each model family's public view carries
    the provenance of ``PublicHyperparameters`` (and ``CALLER_DECLARED`` for a plain dict);
    H1: a model without free hyperparameters says it has none."""
    X = np.linspace(0, 6, 12)
    ell = lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2))  # noqa: E731
    values = PublicHyperparameters({"ell": 1.5}, PROVENANCE)
    Z = grid_inducing_points(0.0, 6.0, 4)
    views = {
        "classification": gp_classification(X, (X > 3).astype(float), ell).public_gp,
        "fitc": fitc_gp_regression(X, np.sin(X), ell, noise_sd=0.3, Z=Z).public_cloaking,
        "sparse": sparse_gp_regression(X, np.sin(X), ell, Z=Z, noise_sd=0.3).public_sparse_gp,
        "exact": gp_regression(X, np.sin(X), ell, noise_sd=0.3).public_gp,
    }
    for kind, view in views.items():
        assert view(values).hyperparameter_source == PROVENANCE, kind
        assert view({"ell": 1.5}).hyperparameter_source == CALLER_DECLARED, kind
    fixed = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)
    assert fixed.public_gp().hyperparameter_source.startswith("none")
    rel = cloaked_release(fixed, X[::3], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                          rng=np.random.default_rng(0))  # fmt: skip
    assert rel.metadata["hyperparameter_source"].startswith("none")


def test_noise_aware_sample_path_and_classification_metadata_record_the_source():
    """H2 / H3 / H9 (the key dropped from the noise-aware / sample-path / classification
    metadata builders; the cloaked release's is checked in test_selection.py)."""
    values = PublicHyperparameters({"ell": 1.5}, PROVENANCE)
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, 100)
    y = np.sin(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        na = noise_aware_release(
            _sparse(0.0), (X, y), hyperparameters=values, epsilon=1.0, delta=1e-4,
            y_bounds=(-2.0, 2.0), rng=np.random.default_rng(4),
        )  # fmt: skip
        exact = gp_regression(
            X[:30], y[:30], lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
            noise_sd=0.3,
        )  # fmt: skip
        sp = sample_path_release(
            exact, np.linspace(-3, 3, 5), hyperparameters=values, n_draws=1, kernel_scale=1.0,
            y_bounds=(-2.0, 2.0), delta=1e-5, ledger=Ledger(), domain=(-3.0, 3.0),
            rng=np.random.default_rng(2),
        )  # fmt: skip
        gpc = gp_classification(
            X[:30], (X[:30] > 0).astype(float),
            lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        )  # fmt: skip
        cls = classification_release(
            gpc, np.linspace(-3, 3, 5), hyperparameters=values, epsilon=1.0, delta=1e-3,
            rng=np.random.default_rng(5),
        )  # fmt: skip
    for rel in (na, sp, cls):
        assert rel.metadata["hyperparameter_source"] == PROVENANCE, type(rel).__name__


# ------------------------------------------------------------------- _as_2d_inputs hint
def test_the_one_point_hint_is_only_for_a_d_by_1_array():
    """W2 (the hint for any array with d rows): a (3, 2) array for a 3-input model has the
    wrong number of columns, but it is not a 1-D point read as a column: no X_star[None, :]."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(20, 3))
    model = gp_regression(X, rng.uniform(size=20), pm.gp.cov.ExpQuad(3, ls=1.0), noise_sd=0.3)
    with pytest.raises(ValueError, match=r"got shape \(3, 2\); pass") as info:
        cloaked_release(model, X[:3, :2], epsilon=1.0, delta=1e-3, y_bounds=(0, 1), rng=rng)
    assert "None" not in str(info.value)
