"""Stop-44 audit: a sample-path release trusts a kernel built from the recognised decreasing
stationary kernels (no PSD evidence, no diagonal cap, no domain needed) only if it is a
covariance by construction at the PUBLIC hyperparameter values.

``ExpQuad(1) + h ExpQuad(10)`` with public ``h = -0.7`` (no covariance, ``k(x, x) = 0.3``)
was released without a domain, and ``RatQuad`` with public ``alpha = -1`` on the domain
[0, 3]; exact neighbouring Rényi divergences at order 1.2 reached 8002 and 15515 against a
charge of 39.3 (n = 2, r² = 0.36, M_Y = 1, kappa = 0).  Each test fails on the old code.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.audit.renyi import posterior_renyi_terms
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound
from pm_dpgp.models import gp_regression


def _eq_sum() -> object:
    h = pm.Normal("h", 0.0, 1.0)
    return pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=10.0)


def _ratquad() -> object:
    return pm.gp.cov.RatQuad(1, alpha=pm.Normal("a", 0.0, 1.0), ls=1.0)


def _release(cov, X, y, X_star, hyper, domain, kernel_scale=1.0):
    model = gp_regression(X, y, cov, noise_sd=0.6, mean=0.0)
    ledger = Ledger(epsilon=1e9, delta=1e-5)
    rng = np.random.default_rng(0)
    before = json.dumps(rng.bit_generator.state, sort_keys=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return sample_path_release(
                model,
                X_star,
                kernel_scale=kernel_scale,
                y_bounds=(-1.0, 1.0),
                delta=1e-5,
                kappa=0.0,
                domain=domain,
                hyperparameters=hyper,
                ledger=ledger,
                rng=rng,
            )
        finally:
            if not ledger.history:
                assert json.dumps(rng.bit_generator.state, sort_keys=True) == before


def _k_eq_sum(A, B):
    d2 = (A[:, None, 0] - B[None, :, 0]) ** 2
    return np.exp(-d2 / 2.0) - 0.7 * np.exp(-d2 / 200.0)


def _k_ratquad(A, B):
    return 1.0 - (A[:, None, 0] - B[None, :, 0]) ** 2 / 2.0


CASES = [
    # kernel, hyperparameters, domain, (X1, y1), (X2, y2), X_star, exact kernel
    (
        _eq_sum,
        {"h": -0.7},
        None,
        ([0.0, 1000.0], [1.0, -1.0]),
        ([0.0, 2.035], [1.0, 1.0]),
        1.4,
        _k_eq_sum,
    ),
    (
        _ratquad,
        {"a": -1.0},
        (0.0, 3.0),
        ([0.0, 1.5], [1.0, 1.0]),
        ([0.0, 1.15], [1.0, -1.0]),
        1.8,
        _k_ratquad,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=["eq_minus_eq", "ratquad_negative_alpha"])
def test_a_kernel_that_is_no_covariance_at_the_public_values_is_refused(case) -> None:
    cov, hyper, domain, (X1, y1), (X2, y2), s, kern = case
    # the exact divergence the release would have had to bound (both posteriors proper)
    bound = SamplePathBound(n=2, kernel_scale=1.0, r2=0.36, M_Y=1.0, kappa=0.0)
    exact = posterior_renyi_terms(
        kern,
        np.array(X1)[:, None],
        np.array(y1),
        np.array(X2)[:, None],
        np.array(y2),
        np.array([[s]]),
        alpha=1.2,
        kernel_scale=1.0,
        r2=0.36,
    ).total
    assert exact > 100.0 * bound.rdp(1.2)
    for X, y in ((X1, y1), (X2, y2)):
        with pytest.raises(ValueError, match="not a covariance by construction"):
            _release(cov, np.array(X)[:, None], np.array(y), np.array([[s]]), hyper, domain)


@pytest.mark.parametrize("hyper, cov", [({"h": 0.7}, _eq_sum), ({"a": 2.0}, _ratquad)])
def test_a_covariance_at_the_public_values_is_released(hyper, cov) -> None:
    # k(x, x) = 1.7 with h = 0.7: kernel_scale = 1.7 ** 0.5
    rel = _release(
        cov,
        np.array([[0.0], [1.0]]),
        np.array([0.5, -0.5]),
        np.array([[0.5]]),
        hyper,
        (0.0, 3.0),
        kernel_scale=1.7**0.5 if "h" in hyper else 1.0,
    )
    assert np.all(np.isfinite(rel.released_values))


def test_the_thompson_loop_refuses_such_a_kernel_before_drawing_anything():
    """The loop's kernel checks refuse it before its first round: no charge, no draw."""
    import pytensor.tensor as pt

    from pm_dpgp.workflow import dp_thompson_sampling

    h = -pt.sqrt(pt.constant(0.49))  # an expression of constants: the structure-only check
    # cannot read its sign
    cov = pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=10.0)
    ledger = Ledger(epsilon=30.0, delta=1e-5)
    rng = np.random.default_rng(0)
    before = json.dumps(rng.bit_generator.state, sort_keys=True)
    with pytest.raises(ValueError, match="not a covariance by construction"):
        dp_thompson_sampling(
            lambda X: np.sin(6 * X[:, 0]), cov, domain=(0, 1), X_init=[[0.1], [0.5], [0.9]],
            n_rounds=3, noise_sd=2.0, y_bounds=(-1, 1), ledger=ledger, candidates=32,
            progressbar=False, rng=rng,
        )  # fmt: skip
    assert ledger.history == []
    assert json.dumps(rng.bit_generator.state, sort_keys=True) == before
