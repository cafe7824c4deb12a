"""Plans run the release's public checks (audit of ``pm_dpgp/plan.py``, F5: r1, r5).

``plan.thompson`` and ``plan.sample_path`` check the kernel (``kernel_class``, ``k(x, x) ≤ 1``)
and κ with the release's own functions, so a setting the release or the loop refuses before
any spend is refused by the plan with the same error, instead of being planned (fits=True).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import sample_path_release
from pm_dpgp.models import gp_regression

X_STAR = np.linspace(0.0, 2.0, 7)[:, None]


def _message(call):
    with pytest.raises(ValueError) as err:
        call()
    return str(err.value)


@pytest.mark.parametrize("kernel_class", ["constant", "exponential_1d"])
def test_thompson_plan_runs_the_loops_kernel_class_check(kernel_class):
    """r5: an ExpQuad kernel under kernel_class="constant"/"exponential_1d" was planned
    (fits=True) though the loop refuses it before round 1."""
    from pm_dpgp.workflow import dp_thompson_sampling

    cov = pm.gp.cov.ExpQuad(1, ls=0.2)
    kw = dict(kernel_class=kernel_class)
    planned = _message(lambda: plan.thompson(
        3, 6, epsilon=3.0, delta=1e-5, cov_func=cov, domain=(0.0, 1.0), noise_sd=3.0, **kw
    ))  # fmt: skip
    ledger = Ledger(3.0, 1e-5)
    looped = _message(lambda: dp_thompson_sampling(
        lambda X: np.sin(6 * X[:, 0]), cov, domain=(np.zeros(1), np.ones(1)),
        X_init=np.array([[0.1], [0.5], [0.9]]), n_rounds=6, noise_sd=3.0, ledger=ledger,
        rng=np.random.default_rng(0), progressbar=False, candidates=16, **kw,
    ))  # fmt: skip
    assert planned == looped and "would not hold" in planned and not ledger.history


def _release(kappa=None, domain=None, kernel_class="generic", cov=None):
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 2.0, 30)
    cov = 1.5**2 * pm.gp.cov.Exponential(1, ls=0.5) if cov is None else cov
    model = gp_regression(X, np.sin(3 * X), cov, noise_sd=6.0)
    ledger = Ledger(2.0, 1e-5)
    msg = _message(lambda: sample_path_release(
        model, X_STAR, kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=2.0,
        kappa=kappa, domain=domain, kernel_class=kernel_class, ledger=ledger, rng=rng,
    ))  # fmt: skip
    assert not ledger.history
    return msg


def test_sample_path_plan_refuses_kappa_without_a_domain_as_the_release():
    """r1: kappa=0.3 without a domain was planned ("used as is", fits=True); the release
    refuses any κ > 0 without the public domain."""
    common = dict(kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=2.0)
    planned = _message(lambda: plan.sample_path(30, kappa=0.3, **common))
    assert planned == _release(kappa=0.3)
    assert plan.sample_path(30, kappa=0.0, **common).kappa == 0.0


def test_sample_path_plan_runs_the_releases_kernel_class_check():
    cov = 1.5**2 * pm.gp.cov.ExpQuad(1, ls=0.5)
    planned = _message(lambda: plan.sample_path(
        30, kernel_scale=1.5, y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=2.0, cov_func=cov,
        domain=(0.0, 2.0), kernel_class="constant",
    ))  # fmt: skip
    assert planned == _release(domain=(0.0, 2.0), kernel_class="constant", cov=cov)
    # and k(x, x) <= 1: a kernel_scale below the kernel's amplitude
    low = _message(lambda: plan.sample_path(
        30, kernel_scale=1.0, y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=2.0, cov_func=cov,
        domain=(0.0, 2.0),
    ))  # fmt: skip
    assert "k(x, x) = kernel(x, x) / kernel_scale² reaches" in low
