"""Plans against a given ledger (audit of ``pm_dpgp/plan.py``, F1, reproducer r3).

A Gaussian plan's ``ledger_epsilon`` is the composition ε of the charged event, but a ledger
decides on its privacy filter's ε (``filter="renyi"``, its own orders, earlier charges):
``fits_in(ledger)`` and ``filter_epsilon_in(ledger)`` ask the ledger itself (its previews,
nothing spent) and agree with the release in both directions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import (
    BudgetExceededError,
    GaussianEvent,
    Ledger,
    PureDpEvent,
    ZCDPEvent,
)
from pm_dpgp.mechanisms import cloaked_release, noise_aware_release, sample_path_release
from pm_dpgp.mechanisms.full.tree_aggregation import plan_tree
from pm_dpgp.models import gp_regression, grid_inducing_points, sparse_gp_regression

X_STAR = np.linspace(0.0, 2.0, 7)[:, None]


def _cloaked(model, epsilon, ledger, secure):
    return cloaked_release(
        model, X_STAR, epsilon=epsilon, delta=1e-5, y_bounds=(-2.0, 2.0), ledger=ledger,
        rng=None if secure else np.random.default_rng(2),
    )  # fmt: skip


@pytest.mark.parametrize("secure", [False, True])
def test_gaussian_plan_fits_in_a_renyi_ledger_exactly_when_the_release_is_accepted(
    label_model, secure
):
    """Ledger(epsilon=1, filter="renyi"): a cloaked release planned at ε = 1 has
    ``ledger_epsilon`` 1 but is refused (the filter counts 1.37 / 1.26); ``fits_in`` says so.
    At ε = 0.7 it is accepted, and ``filter_epsilon_in`` is what the ledger then records."""
    for eps, accepted in ((1.0, False), (0.7, True)):
        p = plan.cloaked(
            label_model, X_STAR, epsilon=eps, delta=1e-5, y_bounds=(-2.0, 2.0), secure=secure
        )
        ledger = Ledger(epsilon=1.0, delta=1e-5, filter="renyi")
        assert p.ledger_epsilon == pytest.approx(eps, rel=1e-9)  # the composition value
        assert p.fits_in(ledger) is accepted
        filt = p.filter_epsilon_in(ledger)
        assert (filt <= 1.0) is accepted and not ledger.history  # previews record nothing
        if not accepted:
            with pytest.raises(BudgetExceededError):
                _cloaked(label_model, eps, ledger, secure)
            assert not ledger.history
            continue
        _cloaked(label_model, eps, ledger, secure)
        assert ledger.filter_epsilon == filt == ledger.history[-1].filter_epsilon


def test_gaussian_plan_fits_in_an_already_charged_ledger_and_other_orders(label_model):
    """An "auto" ledger already holding a release, and a ledger with its own Rényi orders
    (r3: the secure release at ε = 1 is refused by orders 2..64): ``fits_in`` is the release's
    outcome in both directions."""
    first = plan.cloaked(label_model, X_STAR, epsilon=0.5, delta=1e-5, y_bounds=(-2, 2))
    for eps, accepted in ((0.9, False), (0.8, True)):  # filter 1.054 / 0.968 after the 0.5
        ledger = Ledger(epsilon=1.0, delta=1e-5)
        _cloaked(label_model, 0.5, ledger, True)
        p = plan.cloaked(label_model, X_STAR, epsilon=eps, delta=1e-5, y_bounds=(-2, 2))
        assert p.fits and first.fits  # each alone fits a fresh ledger with its own budget
        assert p.fits_in(ledger) is accepted
        if accepted:
            filt = p.filter_epsilon_in(ledger)
            _cloaked(label_model, eps, ledger, True)
            assert ledger.filter_epsilon == filt
        else:
            with pytest.raises(BudgetExceededError):
                _cloaked(label_model, eps, ledger, True)
            assert len(ledger.history) == 1
    orders = [2, 4, 8, 16, 32, 64]
    p = plan.cloaked(label_model, X_STAR, epsilon=1.0, delta=1e-5, y_bounds=(-2, 2))
    ledger = Ledger(epsilon=1.0, delta=1e-5, orders=orders)
    assert not p.fits_in(ledger)
    with pytest.raises(BudgetExceededError):
        _cloaked(label_model, 1.0, ledger, True)
    # a full-privacy ledger refuses a label release for its privacy model, not its budget
    full = Ledger(epsilon=10.0, delta=1e-5)
    full.spend(PureDpEvent(0.1), privacy_model="full")
    assert not p.fits_in(full)


def test_fresh_ledger_defaults_match_the_sample_path_plan_semantics(label_model):
    """``filter_epsilon`` / ``fits``: a fresh default ledger, as ``SamplePathPlan`` has them."""
    p = plan.cloaked(label_model, X_STAR, epsilon=1.0, delta=1e-5, y_bounds=(-2, 2), n_draws=3)
    assert p.filter_epsilon == Ledger(delta=1e-5).preview_filter(p.event)
    assert p.fits and p.ledger_epsilon > 1.0  # three draws: composition above the per-draw ε


def test_noise_aware_plan_fits_in_a_renyi_ledger_as_the_release():
    Z = grid_inducing_points([0.0], [2.0], [5])
    X = np.random.default_rng(3).uniform(0.0, 2.0, 200)
    m = sparse_gp_regression(X, np.sin(3 * X), pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3)
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 1.0))
    p = plan.noise_aware(m, secure=False, **kw)
    ledger = Ledger(epsilon=1.0, delta=1e-5, filter="renyi")
    assert p.ledger_epsilon == pytest.approx(1.0, rel=1e-9) and not p.fits_in(ledger)
    with pytest.raises(BudgetExceededError):
        noise_aware_release(m, ledger=ledger, rng=np.random.default_rng(4), **kw)
    roomy = Ledger(epsilon=1.5, delta=1e-5, filter="renyi")
    filt = p.filter_epsilon_in(roomy)
    assert p.fits_in(roomy)
    noise_aware_release(m, ledger=roomy, rng=np.random.default_rng(5), **kw)
    assert roomy.filter_epsilon == filt


def test_tree_and_sample_path_plans_ask_a_given_ledger():
    """``plan_tree`` and ``SamplePathPlan`` share the implementation: an already charged ledger
    (the sample-path plan's own ``fits`` is for a fresh one)."""
    tp = plan_tree(1.0, 1e-5, 2.0, 5, 6, secure=False)
    assert tp.fits_in(Ledger(epsilon=1.0, delta=1e-5))
    assert not tp.fits_in(Ledger(epsilon=1.0, delta=1e-5, filter="renyi"))
    common = dict(kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, kappa=0.0)
    p = plan.sample_path(30, epsilon=2.0, **common)
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    assert p.fits and p.fits_in(ledger) and p.filter_epsilon_in(ledger) == p.filter_epsilon
    ledger.spend(GaussianEvent(5.0), privacy_model="full")  # an earlier charge
    assert not p.fits_in(ledger)
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 2.0, 30)
    model = gp_regression(
        X, np.sin(3 * X), 1.5**2 * pm.gp.cov.Exponential(1, ls=0.5), noise_sd=p.noise_sd,
        mean=p.prior_mean,
    )  # fmt: skip
    with warnings.catch_warnings(), pytest.raises(BudgetExceededError):
        warnings.simplefilter("ignore", PrivacyWarning)
        sample_path_release(model, X_STAR, epsilon=2.0, ledger=ledger, rng=rng, **common)


def test_fits_in_refuses_for_the_privacy_model_alone_and_for_the_releases_own_target(label_model):
    """Mutation round, stop 35: the mismatch case above is refused by the budget too, so
    ``fits_in`` without its privacy-model check passed; here the budget is ample.  And a
    sample-path plan whose cost exceeds its own ``epsilon=`` target must not fit any ledger,
    as the release refuses it before the spend."""
    p = plan.cloaked(label_model, X_STAR, epsilon=1.0, delta=1e-5, y_bounds=(-2, 2))
    full = Ledger(epsilon=100.0, delta=1e-5)
    full.spend(ZCDPEvent(0.01), privacy_model="full")  # the plan's event family (secure noise)
    assert full.can_afford(p.event)  # the budget alone would take it
    assert not p.fits_in(full)
    over = plan.sample_path(
        50,
        kernel_scale=1.0,
        y_bounds=(-1.0, 1.0),
        delta=1e-5,
        noise_sd=0.5,
        epsilon=1e-3,
        kappa=0.0,
    )
    assert over.epsilon > 1e-3 and not over.fits
    assert Ledger(epsilon=1e6, delta=1e-5).can_afford(over.planned_event)
    assert not over.fits_in(Ledger(epsilon=1e6, delta=1e-5))
