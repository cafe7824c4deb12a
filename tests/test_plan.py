"""Planning before data (issue 14, point 5): the plan's answer, used, gives exactly its ε."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import BudgetExceededError, Ledger
from pm_dpgp.mechanisms import cloaked_release, noise_aware_release, sample_path_release
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression
from tests.test_binning import dense_bins

X_STAR = np.linspace(0.0, 2.0, 7)[:, None]


def _path_model(noise_sd: float, n: int = 30, seed: int = 0, mean: float = 0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 2.0, n)
    y = np.sin(3 * X) + 0.3 * rng.standard_normal(n)
    cov = 1.5**2 * pm.gp.cov.Exponential(1, ls=0.5)
    return gp_regression(X, y, cov, noise_sd=noise_sd, mean=mean)


def test_sample_path_plan_gives_the_noise_for_a_target_and_the_ledger_charges_it():
    common = dict(kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, kappa=0.0)
    p = plan.sample_path(30, epsilon=2.0, **common)
    assert p.fits and p.epsilon <= 2.0 and p.max_n_draws >= 1
    # a little less noise no longer fits: the answer is the smallest (to 1e-4)
    less = plan.sample_path(30, noise_sd=p.noise_sd * (1 - 1e-4), epsilon=2.0, **common)
    assert not less.fits and max(less.epsilon, less.filter_epsilon) > 2.0
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = sample_path_release(
            _path_model(p.noise_sd),
            X_STAR,
            kernel_scale=1.5,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            kappa=0.0,
            epsilon=2.0,
            ledger=ledger,
            rng=np.random.default_rng(0),
        )
    assert rel.epsilon == p.epsilon
    assert ledger.epsilon(1e-5) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    # the setting's own cost, and the number of draws that fit
    same = plan.sample_path(30, noise_sd=p.noise_sd, epsilon=2.0, **common)
    assert same.epsilon == p.epsilon and same.max_n_draws == p.max_n_draws
    more = plan.sample_path(
        30, noise_sd=p.noise_sd, n_draws=p.max_n_draws + 1, epsilon=2.0, **common
    )
    assert not more.fits


def test_sample_path_plan_uses_the_prior_mean_like_the_release():
    centred = plan.sample_path(
        30, kernel_scale=1.0, y_bounds=(0.0, 4.0), delta=1e-5, kappa=0.0, noise_sd=3.0
    )
    off = plan.sample_path(
        30,
        kernel_scale=1.0,
        y_bounds=(0.0, 4.0),
        delta=1e-5,
        kappa=0.0,
        noise_sd=3.0,
        prior_mean=1.0,
    )
    assert centred.M_Y == 2.0 and off.M_Y == 3.0 and off.epsilon > centred.epsilon
    with pytest.raises(ValueError, match="kappa"):
        plan.sample_path(30, kernel_scale=1.0, y_bounds=(0, 4), delta=1e-5, noise_sd=3.0)


@pytest.mark.parametrize(
    "options", [{}, {"sensitivity": "paper"}, {"cov_bound": "paper"}, {"eta": 0.5}]
)
def test_a_plan_off_centre_with_any_bound_option_is_what_the_release_charges(options):
    """Stop-31 audit: with ``y_bounds = (0, 4)`` the plan centres ``M_Y`` at the midpoint while
    the builders default to ``mean=0`` (ε 2.507 charged against 1.468 planned), and the plan
    could not express ``sensitivity``/``cov_bound`` (6.83 charged against 4.19 planned).  The
    plan now reports ``prior_mean`` and takes both options; built and released as the
    docstring says, the release reports exactly the plan's ε."""
    common = dict(kernel_scale=1.5, y_bounds=(0.0, 4.0), delta=1e-5, kappa=0.0, **options)
    p = plan.sample_path(30, epsilon=2.0, **common)
    assert p.prior_mean == 2.0 and p.fits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = sample_path_release(
            _path_model(p.noise_sd, mean=p.prior_mean), X_STAR, epsilon=2.0,
            rng=np.random.default_rng(0), **common,
        )  # fmt: skip
    assert rel.epsilon == p.epsilon


@pytest.mark.parametrize("secure", [False, True])
def test_cloaked_plan_matches_the_release(secure):
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 2, 25)
    model = gp_regression(
        X, np.cos(2 * X) + 0.1 * rng.standard_normal(25), pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.3
    )
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0))
    p = plan.cloaked(model, X_STAR, secure=secure, **kw)
    ledger = Ledger(epsilon=1.0, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = cloaked_release(
            model, X_STAR, ledger=ledger, rng=None if secure else np.random.default_rng(2), **kw
        )
    np.testing.assert_array_equal(rel.noise_sd, p.noise_sd)  # same σ, factor and row norms
    assert ledger.epsilon(1e-3) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    assert p.ledger_epsilon <= 1.0 * (1 + 1e-9)


def test_noise_aware_plan_matches_the_release():
    Z = grid_inducing_points([0.0], [2.0], [6])
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 2, 200)
    model = sparse_gp_regression(
        X, np.sin(3 * X), pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.5
    )
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0))
    # n_records: the plan includes the release's summation margin 2η (docs/noise_aware.md §1)
    p = plan.noise_aware(model, secure=False, n_records=len(X), **kw)
    assert p.R_y == 1.5  # max(|-1 - 0.5|, |2 - 0.5|)
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    rel = noise_aware_release(model, ledger=ledger, rng=np.random.default_rng(4), **kw)
    assert rel.metadata["sigma_a"] == p.sigma_a and rel.metadata["lambda"] == p.lam
    assert ledger.epsilon(1e-5) == pytest.approx(p.ledger_epsilon, rel=1e-12)


# ------------------------------------------------- prior noise, classification, Dirichlet, bins
def _label_model(seed: int):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 2, 25)
    y = np.cos(2 * X) + 0.1 * rng.standard_normal(25)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.3)


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("bound", ["exact", "inf_norm"])
def test_prior_noise_plan_matches_the_release(secure, bound):
    from pm_dpgp.mechanisms import prior_noise_release

    model = _label_model(5)
    kw = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), bound=bound, n_draws=2)
    p = plan.prior_noise(model, X_STAR, secure=secure, **kw)
    ledger = Ledger(epsilon=2.5, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = prior_noise_release(
            model, X_STAR, ledger=ledger, rng=None if secure else np.random.default_rng(6), **kw
        )
    np.testing.assert_array_equal(rel.noise_sd, p.noise_sd)  # bitwise: same operations
    assert rel.metadata["l2_sensitivity"] == p.l2_sensitivity
    assert ledger.epsilon(1e-3) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    # the looser bound costs more noise for the same ε: the plan follows ``bound``
    other = plan.prior_noise(model, X_STAR, secure=secure, **{**kw, "bound": "nonnegative"})
    assert other.l2_sensitivity != p.l2_sensitivity


@pytest.mark.parametrize("secure", [False, True])
def test_prior_noise_plan_noise_sd_is_the_release_s_on_an_ill_conditioned_problem(secure):
    """Stop 38: the plan took ``σ·sqrt(Σ F²)``, the release ``hypot`` of ``σF``'s rows, so on
    duplicated inputs with a tiny noise (cond K ≈ 1e13) the two sds differed in the last digits
    (up to 6e-11 absolute).  Both now use ``noise_sd_of`` on the same factor."""
    from pm_dpgp.mechanisms import prior_noise_release

    X = np.repeat(np.linspace(0.0, 2.0, 8), 3)
    y = np.cos(2 * X)
    model = gp_regression(X, y, 3.0 * pm.gp.cov.ExpQuad(1, ls=0.7), noise_sd=1e-6)
    X_star = np.linspace(-0.3, 2.3, 41)[:, None]
    kw = dict(epsilon=2.0, delta=1e-4, y_bounds=(-1.5, 1.5))
    p = plan.prior_noise(model, X_star, secure=secure, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = prior_noise_release(
            model, X_star, ledger=Ledger(2.0, 1e-4),
            rng=None if secure else np.random.default_rng(9), **kw,
        )  # fmt: skip
    assert rel.metadata["l2_sensitivity"] == p.l2_sensitivity
    np.testing.assert_array_equal(rel.noise_sd, p.noise_sd)


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("inducing", [None, 4])
def test_classification_plan_matches_the_release(secure, inducing):
    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification

    rng = np.random.default_rng(7)
    X = rng.uniform(0, 2, 40)
    t = (rng.uniform(size=40) < 1 / (1 + np.exp(-3 * (X - 1)))).astype(float)
    model = gp_classification(X, t, 2.0 * pm.gp.cov.ExpQuad(1, ls=0.6))
    kw = dict(epsilon=1.0, delta=1e-3, inducing_points=inducing)
    p = plan.classification(model, X_STAR, secure=secure, **kw)
    ledger = Ledger(epsilon=1.0, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = classification_release(
            model, X_STAR, ledger=ledger, rng=None if secure else np.random.default_rng(8), **kw
        )
    np.testing.assert_array_equal(rel.noise_sd, p.noise_sd)  # bitwise: same operations
    assert rel.metadata["l2_sensitivity"] == p.l2_sensitivity
    assert ledger.epsilon(1e-3) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    with pytest.raises(TypeError, match="gp_classification"):  # same check as the release
        plan.classification(_label_model(5), X_STAR, epsilon=1.0, delta=1e-3)


@pytest.mark.parametrize("secure", [False, True])
def test_dirichlet_plan_matches_the_release(secure):
    from pm_dpgp.mechanisms import dirichlet_release
    from pm_dpgp.models import dirichlet_gp_classification

    rng = np.random.default_rng(9)
    X = rng.uniform(-3, 3, 300)
    lab = np.digitize(X, [-1.0, 1.0]) if secure else rng.integers(0, 3, 300)
    Z = grid_inducing_points([-3.0], [3.0], [8])
    model = dirichlet_gp_classification(X, lab, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, n_classes=3)
    p = plan.dirichlet(model, epsilon=1.0, delta=1e-4, secure=secure, n_records=len(X))
    ledger = Ledger(epsilon=1.0, delta=1e-4)
    rel = dirichlet_release(
        model, epsilon=1.0, delta=1e-4, ledger=ledger, rng=None if secure else rng
    )
    assert rel.metadata["sigma_a"] == p.sigma_a and rel.metadata["lambda"] == p.lam
    assert rel.metadata["n_classes"] == p.n_classes == 3
    assert ledger.epsilon(1e-4) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    # a sparse model gives the same plan once the public class count and targets are stated
    same = plan.dirichlet(
        sparse_gp_regression(X, X, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=1.0),
        epsilon=1.0,
        delta=1e-4,
        n_classes=3,
        prior_mean=model.mean,
        secure=secure,
        n_records=len(X),
    )
    assert same.sigma_a == p.sigma_a and same.l2_sensitivity == p.l2_sensitivity
    with pytest.raises(ValueError, match="n_classes"):
        plan.dirichlet(model.public_sparse_gp(), epsilon=1.0, delta=1e-4)
    with pytest.raises(ValueError, match="differs"):
        plan.dirichlet(model, epsilon=1.0, delta=1e-4, n_classes=4)


@pytest.mark.parametrize("secure", [False, True])
def test_binned_plan_matches_the_release(secure):
    from pm_dpgp.mechanisms import binned_release, make_bins

    rng = np.random.default_rng(10)
    X = rng.uniform(0.0, 2.0, (60, 1))
    y = np.sin(3 * X[:, 0])
    bins = make_bins(np.linspace(0.0, 2.5, 6))  # the last bin is empty
    kw = dict(epsilon=0.5, y_bounds=(-1.0, 1.0), n_draws=3)
    p = plan.binned(X, bins, secure=secure, **kw)
    assert p.counts.sum() == 60 and p.counts[-1] == 0 and p.laplace_scale[-1] == 0.0
    ledger = Ledger(epsilon=1.5, delta=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        rel = binned_release(
            X, y, bins, ledger=ledger, rng=None if secure else np.random.default_rng(11), **kw
        )
    np.testing.assert_array_equal(dense_bins(rel)[0], p.counts)
    np.testing.assert_array_equal(dense_bins(rel)[1], p.laplace_scale)
    assert rel.metadata["epsilon_total"] == pytest.approx(p.epsilon_total, rel=1e-15)
    assert ledger.epsilon(1e-6) == pytest.approx(p.event.epsilon(1e-6), rel=1e-12)
    if not secure:  # closed form b_j = d S / (n_j ε), S = 1 + 4u + 2r rounded up (stop 47)
        from pm_dpgp.mechanisms.label.binning import (
            simulation_unit_sensitivity,
            summation_rounding,
        )

        occupied = p.counts > 0
        unit = simulation_unit_sensitivity(summation_rounding(p.counts[occupied]))
        np.testing.assert_allclose(
            p.laplace_scale[occupied], 2.0 * unit / (p.counts[occupied] * 0.5), rtol=1e-15
        )
    with pytest.raises(ValueError, match="no input"):
        plan.binned(X + 10.0, bins, out_of_range="drop", secure=secure, **kw)


def test_thompson_plan_gives_the_noise_for_all_rounds_and_the_loop_runs_them():
    """``plan.thompson`` replays the loop's per-round events on a fresh ledger: at the planned
    noise the loop completes every round within the budget, with the plan's ε; 0.1 % less
    noise no longer fits them all (the answer is the smallest to 1e-4)."""
    from pm_dpgp.workflow import dp_thompson_sampling

    cov = pm.gp.cov.ExpQuad(1, ls=0.2)
    kw = dict(y_bounds=(-1.0, 1.0))
    p = plan.thompson(3, 6, epsilon=3.0, delta=1e-5, cov_func=cov, domain=(0.0, 1.0), **kw)
    assert p.fits and p.filter_epsilon <= 3.0 * (1 + 1e-9)
    less = plan.thompson(3, 6, epsilon=3.0, delta=1e-5, noise_sd=p.noise_sd / 1.001,
                         kappa=p.kappa, **kw)  # fmt: skip
    assert less.rounds_that_fit == 5 and not less.fits
    for sd, rounds in ((p.noise_sd, 6), (less.noise_sd, 5)):
        ledger = Ledger(epsilon=3.0, delta=1e-5)
        res = dp_thompson_sampling(
            lambda X: np.sin(6 * X[:, 0]), cov, domain=(np.zeros(1), np.ones(1)),
            X_init=np.array([[0.1], [0.5], [0.9]]), n_rounds=6, noise_sd=sd, ledger=ledger,
            rng=np.random.default_rng(0), progressbar=False, **kw,
        )  # fmt: skip
        assert res.n_rounds == rounds
    assert ledger.epsilon() == pytest.approx(less.epsilon, rel=1e-12)


def test_thompson_plan_reads_the_loop_domain_checks_kappa_and_the_filter():
    """Stop-31 review: a 2-D ``domain=(lower, upper)`` (the loop's form) was read as two
    (low, high) pairs, so the plan used κ = 1 (6 of 6 rounds planned, 3 run); a κ above the
    proved one was planned though the loop refuses it; a filter that cannot hold the rounds'
    curve events was answered with noise advice."""
    from pm_dpgp.workflow import dp_thompson_sampling

    cov = pm.gp.cov.ExpQuad(2, ls=0.3)
    domain = (np.zeros(2), np.ones(2))
    kw = dict(epsilon=3.0, delta=1e-5, cov_func=cov, domain=domain, y_bounds=(-1.0, 1.0))
    p = plan.thompson(3, 4, **kw)
    assert 0.0 < p.kappa < 1e-3  # the corner value exp(-1/0.09), not 1
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    res = dp_thompson_sampling(
        lambda X: np.sin(3 * X[:, 0]) * X[:, 1], cov, domain=domain,
        X_init=np.array([[0.1, 0.2], [0.5, 0.5], [0.9, 0.7]]), n_rounds=4, noise_sd=p.noise_sd,
        y_bounds=(-1.0, 1.0), ledger=ledger, rng=np.random.default_rng(0), progressbar=False,
        candidates=32,
    )  # fmt: skip
    assert res.n_rounds == 4 and ledger.epsilon() == pytest.approx(p.epsilon, rel=1e-12)
    with pytest.raises(ValueError, match="exceeds the proved lower bound"):
        plan.thompson(3, 4, kappa=0.5, **kw)
    with pytest.raises(ValueError, match="cannot account for the rounds"):
        plan.thompson(3, 4, filter="basic", **kw)
    with pytest.raises(BudgetExceededError, match="cannot account for the rounds"):
        dp_thompson_sampling(
            lambda X: X[:, 0], cov, domain=domain, X_init=np.array([[0.1, 0.2]]), n_rounds=2,
            noise_sd=1e3, y_bounds=(-1.0, 1.0), ledger=Ledger(10.0, 1e-5, filter="basic"),
            rng=np.random.default_rng(0), progressbar=False,
        )  # fmt: skip


def test_noise_aware_plan_of_a_heteroscedastic_release_has_its_lambda() -> None:
    """Stop-35 audit: a heteroscedastic ``noise_aware_release`` scales the statistics by
    ``1/noise_var_floor``; the plan had no such argument and reported λ = 890 for 1603."""
    from pm_dpgp import plan
    from pm_dpgp.mechanisms import noise_aware_release
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

    Z = grid_inducing_points([0.0], [2.0], [5])
    X = np.random.default_rng(3).uniform(0, 2, 200)
    model = sparse_gp_regression(
        X, np.sin(3 * X), pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.5
    )
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0))
    planned = plan.noise_aware(model, secure=False, noise_var_floor=0.05, n_records=200, **kw)
    release = noise_aware_release(
        model, data=(X, np.sin(3 * X), np.full(200, 0.5)), noise_var_floor=0.05,
        rng=np.random.default_rng(9), **kw,
    )  # fmt: skip
    assert planned.lam == release.metadata["lambda"]
    assert planned.sigma_a == release.metadata["sigma_a"]
    homoscedastic = plan.noise_aware(model, secure=False, n_records=200, **kw)
    assert homoscedastic.lam != planned.lam
