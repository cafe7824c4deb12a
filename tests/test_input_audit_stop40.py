"""Stop-40 input audit: 0-d NumPy arrays as scalar arguments.

``np.array(True)`` and ``np.array("1.0")`` are not ``bool`` or ``str`` instances, so the
stop-39 refusal of booleans and text let them through ``float(...)``: ``epsilon=np.array(True)``
was charged as ε = 1 and ``epsilon=np.array("1.0")`` as 1.0.  A 0-d array is now judged by its
element everywhere a scalar is checked, and a 0-d array holding a number is accepted where it
was refused (``rank_tol=np.array(1e-4)``).  Public counts (tree horizon, partition levels,
solver iterations) refuse ``np.True_`` and ``None`` with a ``ValueError`` instead of counting
them as 1 or raising ``TypeError``.

The second half is a helper's fuzz over the public API with other scalar types (xarray
scalars, durations, complex numbers, ``Decimal``, huge integers, booleans and text for public
settings): every case listed there was accepted with a wrong meaning, crashed with an unclear
error, or spent the budget before failing.
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import pymc as pm
import pytest
import xarray as xr

from pm_dpgp import plan
from pm_dpgp.accounting import Ledger, RdpCurveEvent, rdp_to_epsilon
from pm_dpgp.mechanisms import classification_release, cloaked_release, noise_aware_release
from pm_dpgp.mechanisms.full.noise_aware import check_rho
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound, check_kappa
from pm_dpgp.mechanisms.full.sqrt_counter import sqrt_factor_coefficients
from pm_dpgp.mechanisms.label.truncation import check_rank_tol
from pm_dpgp.models import (
    gp_classification,
    gp_regression,
    grid_inducing_points,
    sparse_gp_regression,
)
from pm_dpgp.selection.coinpress import clipped_mean_sensitivity, coinpress_mean
from pm_dpgp.workflow import dp_ppc, dp_summary, dp_thompson_sampling, dp_thompson_sampling_tree
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures


def _model():
    X = np.linspace(0, 1, 20)
    return gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array(True), "boolean"),
        (np.array("1.0"), "got text"),
        (np.array(b"1.0"), "got text"),
        (np.array("1.0", dtype=object), "got text"),
    ],
)
def test_a_zero_d_boolean_or_text_array_is_not_a_privacy_parameter(value, match):
    """Was: charged as ε = 1.0 (``float(np.array(True))``, ``float(np.array("1.0"))``)."""
    ledger = Ledger(10.0, 1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    for kw in ({"epsilon": value, "delta": 1e-3}, {"epsilon": 1.0, "delta": value}):
        with pytest.raises(ValueError, match=match):
            cloaked_release(_model(), [[0.5]], **kw, y_bounds=(-2, 2), ledger=ledger, rng=rng)
        with pytest.raises(ValueError, match=match):
            Ledger(**kw)
    assert ledger.history == [] and rng.bit_generator.state == state


def test_a_zero_d_number_array_is_a_number_everywhere():
    """``check_epsilon`` accepted ``np.array(1.0)`` but ``check_rank_tol`` refused
    ``np.array(1e-4)`` ("must be a finite number"): one rule for every scalar now."""
    assert check_rank_tol(np.array(1e-4)) == 1e-4
    assert check_rho(np.array(0.01)) == 0.01
    release = cloaked_release(
        _model(), [[0.5]], epsilon=np.array(1.0), delta=np.array(1e-3), y_bounds=(-2, 2),
        rank_tol=np.array(1e-4), rng=np.random.default_rng(0),
    )  # fmt: skip
    assert release.metadata["epsilon_per_draw"] == 1.0 and release.metadata["rank_tol"] == 1e-4


@pytest.mark.parametrize("value", [np.array(True), np.array("0.01"), "0.01", True])
def test_rho_refuses_booleans_and_text(value):
    """The Dirichlet release and its plan parsed ``rho`` with ``float(rho)``: ``"0.01"`` passed."""
    with pytest.raises(ValueError, match="boolean|got text"):
        check_rho(value)


@pytest.mark.parametrize("value", [np.float64(np.inf), np.array([0.01]), None, 1.5, 0.0])
def test_rho_outside_the_open_unit_interval_says_what_to_pass(value):
    with pytest.raises(ValueError, match=r"rho must lie in \(0, 1\).*pass e.g. rho=0.01"):
        check_rho(value)


@pytest.mark.parametrize("value", [np.True_, np.array(True), None, "3", 2.5, 0])
def test_public_counts_refuse_booleans_none_and_text(value):
    """``np.True_`` (not a ``bool`` instance) was a horizon / level count of 1; ``None`` raised
    ``TypeError`` from ``int(None)``."""
    with pytest.raises(ValueError, match="positive integer"):
        sqrt_factor_coefficients(value)
    with pytest.raises(ValueError, match="positive integer"):
        DyadicPartitionFeatures(0.0, 1.0, levels=value)


# =====================================================================================
# Stop-40 fuzz audit (a helper's scalar-type search): each case was accepted with a wrong
# meaning, crashed with an unclear error, or spent the budget before failing.
# =====================================================================================
X12 = np.linspace(0, 6, 12)


def _spent_nothing(ledger, rng, state):
    assert ledger.history == [] and rng.bit_generator.state == state


def _refused_before_the_spend(call, match):
    ledger = Ledger(10.0, 1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=match):
        call(ledger, rng)
    _spent_nothing(ledger, rng, state)


@pytest.mark.parametrize(
    "value",
    [xr.DataArray(True), xr.DataArray("1.0"), np.timedelta64(1), np.datetime64(1, "ns"),
     bytearray(b"1"), np.complex128(0.5 + 3j), pytest.param(10**400, id="10**400"),
     np.ma.masked],
)  # fmt: skip
def test_other_scalar_wrappers_are_not_a_privacy_parameter(value):
    """``xr.DataArray(True)`` was charged as ε = 1, ``np.timedelta64(1)`` as 1.0, a complex ε
    as its real part; ``10**400`` raised ``OverflowError``."""
    _refused_before_the_spend(
        lambda led, rng: cloaked_release(_model(), [[0.5]], epsilon=value, delta=1e-3,
                                         y_bounds=(-2, 2), ledger=led, rng=rng),
        "epsilon",
    )  # fmt: skip


def test_decimal_and_zero_d_data_arrays_are_numbers():
    release = cloaked_release(
        _model(), [[0.5]], epsilon=decimal.Decimal("1.0"), delta=xr.DataArray(1e-3),
        y_bounds=(-2, 2), rng=np.random.default_rng(0),
    )  # fmt: skip
    assert release.metadata["epsilon_per_draw"] == 1.0


@pytest.mark.parametrize(
    ("hyper", "match"),
    [({"ell": "1.5", "noise": 0.3}, "text"), ({"ell": 1.5, "noise": True}, "boolean"),
     ({"ell": np.complex128(0.3 + 5j), "noise": 0.3}, "real numbers")],
)  # fmt: skip
def test_hyperparameter_values_are_real_numbers(hyper, match):
    """``{"noise": True}`` released with noise sd 1, ``"1.5"`` parsed, a complex lengthscale
    lost its imaginary part with only a ComplexWarning."""
    from pm_dpgp.models import public_hyperparameters

    model = gp_regression(
        X12, np.sin(X12), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)),
        noise_sd=lambda: pm.HalfNormal("noise", 0.5),
    )  # fmt: skip
    _refused_before_the_spend(
        lambda led, rng: cloaked_release(model, X12[:4, None], epsilon=1.0, delta=1e-6,
                                         y_bounds=(-2, 2), hyperparameters=hyper, ledger=led,
                                         rng=rng),
        match,
    )  # fmt: skip
    with pytest.raises(ValueError, match=match):
        public_hyperparameters(hyper, hyperparameters_are_public=True)


@pytest.mark.parametrize(
    "kw",
    [{"noise_sd": np.array(True)}, {"noise_sd": np.array("0.3")}, {"mean": True},
     {"mean": "0.5"}, {"mean": np.array(True)}],
)  # fmt: skip
def test_builders_refuse_boolean_or_text_noise_and_mean(kw):
    kw = {"noise_sd": 0.3} | kw
    with pytest.raises((ValueError, TypeError), match="bool|text|number"):
        gp_regression(X12, np.sin(X12), pm.gp.cov.ExpQuad(1, ls=1.5), **kw).public_gp()


@pytest.mark.parametrize(
    "bounds",
    [(False, True), ("-2", "2"), {-2.0: "a", 2.0: "b"}, (np.complex128(-2 + 1j), 2.0),
     (np.datetime64(1, "ns"), np.datetime64(3, "ns")), {0.0, 1.0}, (0, 10**400)],
)  # fmt: skip
def test_y_bounds_are_a_pair_of_real_numbers(bounds):
    """``(False, True)`` clipped to [0, 1]; a dict gave its keys; text parsed."""
    _refused_before_the_spend(
        lambda led, rng: cloaked_release(_model(), [[0.5]], epsilon=1.0, delta=1e-3,
                                         y_bounds=bounds, ledger=led, rng=rng),
        "y_bounds",
    )  # fmt: skip


@pytest.mark.parametrize("kappa", [True, "0.03", np.array(True)])
def test_kappa_refuses_booleans_and_text(kappa):
    """``kappa=True`` was κ = 1: ε 1.87 where κ = 0 gives 15.0."""
    with pytest.raises(ValueError, match="kappa"):
        check_kappa(kappa)
    with pytest.raises(ValueError, match="kappa"):
        SamplePathBound(n=50, kernel_scale=1.0, r2=4.0, M_Y=2.0, kappa=kappa)


@pytest.mark.parametrize("prior_mean", [True, "0.5", np.array(True)])
def test_prior_means_refuse_booleans_and_text(prior_mean):
    """``plan.sample_path(prior_mean=True)`` planned with M_Y = 3 (ε 34.7 against 21.7)."""
    with pytest.raises(ValueError, match="boolean|text"):
        plan.sample_path(50, kernel_scale=1.0, y_bounds=(-2, 2), delta=1e-5, noise_sd=2.0,
                         kappa=0.0, prior_mean=prior_mean)  # fmt: skip
    with pytest.raises(ValueError, match="boolean|text"):
        plan.thompson(3, 5, epsilon=5.0, delta=1e-5, y_bounds=(-2, 2), prior_mean=prior_mean)


def test_the_tree_loop_refuses_a_text_prior_mean_before_the_spend():
    """It spent the whole budget, then raised ``TypeError`` (float − str) in the first round."""
    ledger = Ledger(3.0, 1e-5)
    with pytest.raises(ValueError, match="prior_mean"):
        dp_thompson_sampling_tree(
            lambda Q: np.sin(6 * Q[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0.0, 1.0),
            X_init=[[0.1], [0.5]], n_rounds=3, noise_sd=0.05, inducing=6, y_bounds=(-1.0, 1.0),
            prior_mean="0.0", ledger=ledger, progressbar=False, rng=np.random.default_rng(0),
        )  # fmt: skip
    assert ledger.history == []


@pytest.mark.parametrize(
    "kw",
    [{"n_rounds": np.array(True)}, {"candidates": True}, {"private": None}, {"private": 0}],
)
def test_thompson_loop_settings_refuse_booleans_and_non_booleans(kw):
    """``n_rounds=np.array(True)`` was one round, ``candidates=True`` one candidate, and
    ``private=None`` ran the NON-private loop (nothing charged)."""
    args = {"domain": (0.0, 1.0), "X_init": [[0.1], [0.5]], "n_rounds": 2, "noise_sd": 2.0,
            "y_bounds": (-1, 1), "progressbar": False} | kw  # fmt: skip
    _refused_before_the_spend(
        lambda led, rng: dp_thompson_sampling(
            lambda Q: np.sin(6 * Q[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), ledger=led, rng=rng,
            **args,
        ),
        "n_rounds|candidates|private",
    )  # fmt: skip


def test_the_tree_loop_refuses_a_boolean_grid_size():
    _refused_before_the_spend(
        lambda led, rng: dp_thompson_sampling_tree(
            lambda Q: np.sin(6 * Q[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0.0, 1.0),
            X_init=[[0.1]], n_rounds=2, noise_sd=0.05, inducing=True, y_bounds=(-1.0, 1.0),
            ledger=led, progressbar=False, rng=rng,
        ),
        "inducing",
    )  # fmt: skip


def test_accounting_refuses_nan_orders_and_boolean_curves():
    """A NaN order gave ε = max(0, nan) = 0; boolean values were divergences 1 and 0; the
    text "248" was the order 248; unequal lengths raised ``IndexError``."""
    with pytest.raises(ValueError, match="orders"):
        rdp_to_epsilon([math.nan, 4.0], [0.1, 0.3], 1e-5)
    with pytest.raises(ValueError, match="equal length"):
        rdp_to_epsilon([2.0, 4.0], [0.3], 1e-5)
    with pytest.raises(ValueError, match="values"):
        RdpCurveEvent(orders=(2.0, 4.0), values=np.array([True, False]))
    with pytest.raises(ValueError, match="boolean"):
        RdpCurveEvent(orders=(2.0, 4.0), values=(0.1, 0.3), alpha_min=True)
    with pytest.raises(ValueError, match="orders"):
        Ledger(epsilon=1.0, orders="248")
    assert rdp_to_epsilon([2.0, 4.0], [0.3, 0.5], 1e-5) > 0.0  # valid input as before


def test_coinpress_settings_are_checked():
    """``clipped_mean_sensitivity(2, -2, 50)`` was −0.08 and ``n = 0`` a ZeroDivisionError."""
    with pytest.raises(ValueError, match="lower < upper"):
        clipped_mean_sensitivity(2.0, -2.0, 50)
    with pytest.raises(ValueError, match="positive integer"):
        clipped_mean_sensitivity(-2.0, 2.0, 0)
    assert clipped_mean_sensitivity(-2.0, 2.0, 50) > 4.0 / 50
    with pytest.raises(ValueError, match="boolean"):
        coinpress_mean(np.zeros(5), lower=False, upper=True, rho=0.1, rng=np.random.default_rng(0))


@pytest.mark.parametrize("tol", [True, "1e-9", None])
def test_the_solver_tolerance_is_a_number(tol):
    """``tol=True`` gave a certified gap of 0.93 instead of 7e-16; ``None`` a TypeError."""
    _refused_before_the_spend(
        lambda led, rng: cloaked_release(_model(), [[0.5]], epsilon=1.0, delta=1e-3,
                                         y_bounds=(-2, 2), tol=tol, ledger=led, rng=rng),
        "tol",
    )  # fmt: skip


def test_public_settings_of_other_releases_refuse_booleans_and_text():
    """``f0=True`` was the linearisation point 1, ``chunk_size=True`` one row per chunk,
    ``num=True`` a one-point grid, ``extra_sd="0.1"`` parsed."""
    Xc = np.linspace(-2, 2, 20)
    clf = gp_classification(Xc, (Xc > 0).astype(int), pm.gp.cov.ExpQuad(1, ls=0.6))
    _refused_before_the_spend(
        lambda led, rng: classification_release(clf, [[0.0]], epsilon=1.0, delta=1e-3, f0=True,
                                                ledger=led, rng=rng),
        "f0",
    )  # fmt: skip
    Z = grid_inducing_points(-2.0, 2.0, 5)
    sparse = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3)
    for chunk in (True, "4", np.array(True)):
        _refused_before_the_spend(
            lambda led, rng, c=chunk: noise_aware_release(
                sparse.public_sparse_gp(), (Xc, np.sin(Xc)), epsilon=1.0, delta=1e-4,
                y_bounds=(-2, 2), chunk_size=c, ledger=led, rng=rng,
            ),
            "chunk_size",
        )  # fmt: skip
    for bad in ({"num": True}, {"num": "5"}, {"lower": False}):
        args = {"lower": 0.0, "upper": 6.0, "num": 5} | bad
        with pytest.raises(ValueError, match="num|lower"):
            grid_inducing_points(args["lower"], args["upper"], args["num"])
    release = cloaked_release(_model(), [[0.2], [0.5]], epsilon=1.0, delta=1e-3,
                              y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="extra_sd"):
        dp_ppc(release, [[0.2], [0.5]], [0.1, 0.4], noise_sd=0.3, training=None,
               extra_sd="0.1")  # fmt: skip
    idata = dp_ppc(release, [[0.2], [0.5]], [0.1, 0.4], noise_sd=0.3, training=None,
                   rng=np.random.default_rng(1))  # fmt: skip
    with pytest.raises(ValueError, match="prob"):
        dp_summary(idata, prob="0.9")


def test_impossible_sizes_are_refused_before_the_spend_and_never_loop():
    """``n_draws=10**13`` was charged (count 10**13) and then raised ``MemoryError``;
    ``plan.thompson(3, 10**6)`` and ``levels=10**400`` looped without end."""
    ledger = Ledger(None, 1e-3)  # accounting only: no budget to refuse it first
    with pytest.raises(ValueError, match="more than this machine can hold"):
        cloaked_release(_model(), [[0.5]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                        n_draws=10**13, ledger=ledger, rng=np.random.default_rng(0))  # fmt: skip
    assert ledger.history == []
    with pytest.raises(ValueError, match="n_rounds"):
        plan.thompson(3, 10**6, epsilon=5.0, delta=1e-5, y_bounds=(-2, 2))
    with pytest.raises(ValueError, match="levels"):
        DyadicPartitionFeatures(0.0, 1.0, levels=10**400)
    for count in (math.inf, np.ma.masked):
        with pytest.raises(ValueError, match="positive integer"):
            sqrt_factor_coefficients(count)


# ------------------------------------------------ second fuzz round: switches read by truthiness
@pytest.mark.parametrize("flag", ["no", "False", 1, [0], None])
def test_privacy_declarations_accept_only_a_boolean(flag):
    """``holdout_is_public="no"`` published the private training labels as observed data."""
    model = _model()
    X = np.asarray(model.X)
    release = cloaked_release(model, X, epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                              rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="holdout_is_public must be True or False"):
        dp_ppc(release, X, model.y, noise_sd=0.3, training=model, holdout_is_public=flag)
    with pytest.raises(ValueError, match="observed_is_public must be True or False"):
        release.to_inference_data(observed_data={"y": np.zeros(len(X))},
                                  observed_is_public=flag, predictive_sd=0.3)  # fmt: skip


@pytest.mark.parametrize("flag", ["no", 0, None])
def test_switches_that_assert_a_property_accept_only_a_boolean(flag):
    """``assume_monotone="no"`` skipped the grid check (κ overstated 2×), ``mean_bounded``
    and ``nonnegative_kernel`` understated a sensitivity, ``secure=None`` planned the
    simulation mode, ``include_dp_noise="no"`` included the noise."""
    from pm_dpgp.mechanisms.full.dirichlet import DirichletTargets, dirichlet_sensitivity
    from pm_dpgp.mechanisms.full.sample_path_bounds import coupled_sensitivity, kernel_lower_bound
    from pm_dpgp.mechanisms.label.classification import class_probabilities

    per = pm.gp.cov.Periodic(1, period=1.0, ls=0.5)
    with pytest.raises(ValueError, match="assume_monotone"):
        kernel_lower_bound(lambda A, B: per(A, B).eval(), (0.0, 1.3), assume_monotone=flag)
    with pytest.raises(ValueError, match="mean_bounded"):
        coupled_sensitivity(50, 4.0, 1.0, 2.0, mean_bounded=flag)
    with pytest.raises(ValueError, match="nonnegative_kernel"):
        dirichlet_sensitivity(3, DirichletTargets.from_alpha(0.01), 0.0, 1.0,
                              nonnegative_kernel=flag)  # fmt: skip
    with pytest.raises(ValueError, match="secure"):
        plan.cloaked(_model(), [[0.5]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), secure=flag)
    Xc = np.linspace(-2, 2, 20)
    clf = gp_classification(Xc, (Xc > 0).astype(int), pm.gp.cov.ExpQuad(1, ls=0.6))
    rel = classification_release(clf, [[0.0]], epsilon=1.0, delta=1e-3,
                                 rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="include_dp_noise"):
        class_probabilities(rel, include_dp_noise=flag)


@pytest.mark.parametrize(
    "values",
    ["25", [True, 2.0], {1.0: "a", 2.0: "b"}, ["1.5", "2"], [np.timedelta64(1)],
     [[1.0, 2.0], [3.0, 4.0]], 2.0, [np.complex128(1 + 1j)], [10**400]],
)  # fmt: skip
def test_product_grid_takes_a_list_of_real_numbers(values):
    """``"25"`` was the grid [2, 5], ``True`` the value 1, a dict its keys, a nested list four
    values; a selection then spent its budget on those candidates."""
    from pm_dpgp.selection import product_grid

    with pytest.raises(ValueError, match="grid value|list of"):
        product_grid({"ell": values})


def test_grids_accept_fractions_and_refuse_bad_quantiles():
    from fractions import Fraction

    from pm_dpgp.selection import check_grid, prior_quantile_grid

    assert check_grid([{"ell": Fraction(1, 2)}], ("ell",)) == [{"ell": 0.5}]
    model = gp_regression(X12, np.sin(X12), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)),
                          noise_sd=0.3)  # fmt: skip
    for q in ("0.5", 0.5, {}, {"other": [0.5]}):
        with pytest.raises(ValueError, match="quantile"):
            prior_quantile_grid(model, q)


def test_a_lengthscale_function_is_checked_on_the_public_inputs():
    """Three columns for 1-D inputs were broadcast (distances counted three times); a scalar
    raised ``IndexError`` inside PyTensor."""
    import pytensor.tensor as pt

    from pm_dpgp.models import nonstationary_gp_regression

    bad = {
        "3 columns": lambda Z: 0.5 * pt.ones((Z.shape[0], 3)),
        "scalar": lambda Z: 0.5,
        "negative": lambda Z: -0.5 * pt.ones((Z.shape[0],)),
    }
    for fn in bad.values():
        with pytest.raises(ValueError, match="lengthscale_func"):
            nonstationary_gp_regression(X12, np.sin(X12), fn, kernel_scale=1.0, noise_sd=0.3)
    good = nonstationary_gp_regression(
        X12, np.sin(X12), lambda Z: 0.5 * pt.ones((Z.shape[0],)), kernel_scale=1.0, noise_sd=0.3
    )
    assert good.public_gp() is not None


def test_audit_helpers_do_not_say_nothing_found_on_bad_settings():
    """One NaN in ``y`` made ``check_public_choices`` pass bounds equal to the data's range;
    ``rtol=-1`` made ``scan_for_values`` match nothing; ``clopper_pearson(11, 10)`` was nan."""
    from pm_dpgp.audit import DataDerivedChoiceError, check_public_choices, scan_for_values
    from pm_dpgp.audit.lira import clopper_pearson

    y = np.sin(6 * X12)
    y[3] = np.nan
    with pytest.raises(DataDerivedChoiceError):
        check_public_choices(X=X12, y=y, y_bounds=(np.nanmin(y), np.nanmax(y)))
    with pytest.raises(DataDerivedChoiceError):
        check_public_choices(X=X12, y=y, mean=float(np.nanmean(y)))
    release = cloaked_release(_model(), [[0.5]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                              rng=np.random.default_rng(0))  # fmt: skip
    for rtol in (-1.0, math.nan, True, "0.001"):
        with pytest.raises(ValueError, match="rtol"):
            scan_for_values(release.to_inference_data(), [0.1], rtol=rtol)
    for args in ((11, 10), (-1, 10), (3, 10, 1.5)):
        with pytest.raises(ValueError):
            clopper_pearson(*args)
    lo, hi = clopper_pearson(3, 10)
    assert 0.0 < lo < 0.3 < hi < 1.0


def test_metadata_of_a_sparse_classification_release_is_json():
    import json

    Xc = np.linspace(-2, 2, 20)
    clf = gp_classification(Xc, (Xc > 0).astype(int), pm.gp.cov.ExpQuad(1, ls=0.6))
    rel = classification_release(clf, [[0.0]], epsilon=1.0, delta=1e-3, inducing_points=3,
                                 kmeans_seed=np.int64(1), rng=np.random.default_rng(0))  # fmt: skip
    text = json.dumps(rel.metadata)  # TypeError: ndarray, np.int64
    assert '"kmeans_seed": 1' in text and len(rel.metadata["inducing_inputs"]) == 3


def test_huge_counts_get_a_clear_error(tmp_path):
    """``n_draws=10**400`` raised ``OverflowError`` inside the size message; binning raised
    ``MemoryError``; ``GaussianEvent(count=10**400)`` was built and every ε overflowed."""
    from pm_dpgp.accounting import GaussianEvent, PersistentLedger, dataset_fingerprint
    from pm_dpgp.mechanisms import binned_release, make_bins

    with pytest.raises(ValueError, match="more than this machine can hold"):
        cloaked_release(_model(), [[0.5]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                        n_draws=10**400, rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="more than this machine can hold"):
        binned_release(X12, np.sin(X12), make_bins(np.linspace(0, 6, 4)), epsilon=1.0,
                       y_bounds=(-2, 2), n_draws=10**13, rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="at most"):
        GaussianEvent(1.0, count=10**400)
    fp = dataset_fingerprint("stop 40")
    PersistentLedger(tmp_path / "l.db", fp, 1.0)
    with pytest.raises(ValueError, match="boolean"):  # True == 1.0 reopened it
        PersistentLedger(tmp_path / "l.db", fp, True)


def test_public_numbers_of_exports_refuse_booleans_and_text():
    """``predictive_sd=True`` built a predictive with sd 1; ``binned_gp(lengthscale=True)`` and
    ``eq_kernel("0.3")`` were numbers."""
    from pm_dpgp.audit.renyi import eq_kernel
    from pm_dpgp.mechanisms import binned_gp, binned_release, make_bins

    release = cloaked_release(_model(), [[0.2], [0.5]], epsilon=1.0, delta=1e-3,
                              y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip
    for sd in (True, "0.3"):
        with pytest.raises(ValueError, match="predictive_sd"):
            release.to_inference_data(predictive_sd=sd)
    rel = binned_release(X12, np.sin(X12), make_bins(np.linspace(0, 6, 4)), epsilon=1.0,
                         y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip
    for ls in (True, "0.5", [0.5, 0.5]):
        with pytest.raises(ValueError, match="lengthscale"):
            binned_gp(rel, [[1.0]], lengthscale=ls, kernel_scale=1.0, noise_sd=0.3)
    with pytest.raises(ValueError, match="lengthscale"):
        eq_kernel("0.3")


def test_review_of_stop_40_counts_and_sample_path_sizes():
    """The review: ``Decimal(3)`` stopped counting as 3 for public counts; a q(u) export
    refused ``n_draws=np.array(5)``; a sample-path release of 10**13 paths was charged, then
    raised ``MemoryError``."""
    from pm_dpgp._validation import check_count
    from pm_dpgp.mechanisms import sample_path_release

    assert check_count(decimal.Decimal(3), "n") == 3
    with pytest.raises(ValueError, match="positive integer"):
        check_count(decimal.Decimal("2.5"), "n")
    Z = grid_inducing_points(-2.0, 2.0, 5)
    Xc = np.linspace(-2, 2, 30)
    na = noise_aware_release(
        sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3)
        .public_sparse_gp(),
        (Xc, np.sin(Xc)), epsilon=1.0, delta=1e-4, y_bounds=(-2, 2), rng=np.random.default_rng(0),
    )  # fmt: skip
    from pm_dpgp.compat import get_group

    assert get_group(na.to_inference_data(n_draws=np.array(5)), "posterior").sizes["draw"] == 5
    ledger = Ledger(None, 1e-3)
    with pytest.raises(ValueError, match="more than this machine can hold"):
        sample_path_release(_model(), [[0.5]], kernel_scale=1.0, kappa=0.0, delta=1e-3,
                            y_bounds=(-2, 2), n_draws=10**13, ledger=ledger,
                            rng=np.random.default_rng(0))  # fmt: skip
    assert ledger.history == []


def test_low_severity_settings_of_the_second_round():
    """``n_steps=10**400`` overflowed a float;
    ``kfold_splits(seed=1.5)`` reached NumPy's message; ``dp_ppc(n_draws="no")`` was ignored
    for a ``Release``; ``LiraSetting(n=np.int64(20))`` was "not an integer"; an iterator of
    HMEQ features was used up by the name check (X of shape (800, 0))."""
    from pm_dpgp.audit.lira import LiraSetting
    from pm_dpgp.datasets import load_hmeq
    from pm_dpgp.selection import kfold_splits
    from pm_dpgp.selection.coinpress import coinpress_rho_schedule

    with pytest.raises(ValueError, match="n_steps"):
        coinpress_rho_schedule(0.1, 10**400)
    with pytest.raises(ValueError, match="seed"):
        kfold_splits(20, 4, order="permuted", seed=1.5)
    release = cloaked_release(_model(), [[0.2], [0.5]], epsilon=1.0, delta=1e-3,
                              y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="n_draws"):
        dp_ppc(release, [[0.2], [0.5]], [0.1, 0.4], noise_sd=0.3, training=None, n_draws="no")
    setting = LiraSetting(n=np.int64(20), L=np.int64(1), kernel_scale=1.0, r2=1.0)
    assert setting.n == 20
    with pytest.raises(ValueError, match="list or tuple"):
        load_hmeq(iter(["DELINQ"]))
    assert load_hmeq(["DELINQ"])[0].shape[1] == 1


def test_last_settings_of_the_second_round():
    """``gaussian_renyi_divergence(alpha="2")`` parsed; ``ReleasePosterior.interval(10**400)``
    raised ``OverflowError``; ``z_is_public="no"`` was recorded as True."""
    from pm_dpgp.audit.renyi import gaussian_renyi_divergence
    from pm_dpgp.workflow import release_posterior

    I2 = np.eye(2)
    assert gaussian_renyi_divergence(np.zeros(2), I2, np.ones(2), I2, 2.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="alpha"):
        gaussian_renyi_divergence(np.zeros(2), I2, np.ones(2), I2, "2")
    release = cloaked_release(_model(), [[0.2], [0.5]], epsilon=1.0, delta=1e-3,
                              y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip
    post = release_posterior(release, _model())
    for prob in (10**400, "0.9", True):
        with pytest.raises(ValueError, match="prob"):
            post.interval(prob)
    lo, hi = post.interval(np.float32(0.9))
    assert np.all(lo < hi)
    Z = grid_inducing_points(-2.0, 2.0, 5)
    with pytest.raises(ValueError, match="z_is_public"):
        sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3,
                             z_is_public="no").public_sparse_gp()  # fmt: skip
