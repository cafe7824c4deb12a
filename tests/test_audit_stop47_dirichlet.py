"""Stop-47 audit of the Dirichlet release: the joint sensitivity at extreme public scales and
the public α_ε range (docs/noise_aware.md §9)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.dirichlet import (
    DirichletTargets,
    dirichlet_record_norm,
    dirichlet_release,
    dirichlet_sensitivity,
)
from pm_dpgp.mechanisms.full.noise_aware import l2_sensitivity
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

Z = grid_inducing_points(-3.5, 3.5, 6)


def _exact_square(C, tg, mu, Rk, c, nonneg):
    """Δ_joint² in exact rational arithmetic (docs/noise_aware.md §9)."""
    w_out = Fraction(tg.var_in) / Fraction(tg.var_out)
    a_in = Fraction(tg.y_in) - Fraction(mu)
    a_out = w_out * (Fraction(tg.y_out) - Fraction(mu))
    inn, out = (a_in, Fraction(1)), (a_out, w_out)
    same = [(*inn, *inn)] + [(*out, *out)] * (C - 1)
    diff = [(*inn, *out), (*out, *inn)] + [(*out, *out)] * (C - 2)
    Rk, c = Fraction(Rk), Fraction(c)
    best = Fraction(0)
    for P in (same, diff):
        const = sum((a * a + b * b) * Rk**2 + c * c * (w * w + v * v) * Rk**4 for a, w, b, v in P)
        lin = -2 * sum(a * b for a, _, b, _ in P)
        quad = 2 * c * c * sum(w * v for _, w, _, v in P)
        t = min(max(lin / (2 * quad), Fraction(0) if nonneg else -(Rk**2)), Rk**2)
        best = max(best, const + lin * t - quad * t * t)
    return best


@pytest.mark.parametrize("R_k", [2.65e-162, 1e-160, 1e-155])
@pytest.mark.parametrize("nonneg", [True, False])
def test_joint_sensitivity_does_not_underflow_below_the_exact_value(R_k, nonneg) -> None:
    # R_k² and R_k⁴ underflowed: Δ_joint was 16.5% below the exact value at R_k = 2.65e-162
    tg = DirichletTargets.from_alpha(0.01)
    mu = tg.default_prior_mean(3)
    D = dirichlet_sensitivity(3, tg, mu, R_k, 1.0, nonnegative_kernel=nonneg)
    exact = _exact_square(3, tg, mu, R_k, 1.0, nonneg)
    # within float rounding of the exact value (covered by the summation margin) and never
    # more than that below it
    assert Fraction(D) ** 2 >= exact * (1 - Fraction(1, 10**13))
    assert D <= 1.001 * math.sqrt(float(exact * Fraction(10) ** 330)) * 1e-165


def test_an_overflowing_kernel_bound_is_a_clear_refusal_before_the_spend() -> None:
    # R_k ** 4 raised OverflowError (34, 'Numerical result out of range')
    pub = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=1.0
    ).public_sparse_gp()
    rng = np.random.default_rng(0)
    X, lab = rng.uniform(-4, 4, 50), rng.integers(0, 3, 50)
    led, g = Ledger(epsilon=10.0, delta=1e-3), np.random.default_rng(1)
    state = g.bit_generator.state
    with pytest.raises(ValueError, match="overflows float64"):
        dirichlet_release(
            pub, (X, lab), n_classes=3, epsilon=1.0, delta=1e-4, kernel_norm=1e200,
            ledger=led, rng=g,
        )  # fmt: skip
    assert not led.history and g.bit_generator.state == state
    assert math.isinf(dirichlet_sensitivity(3, DirichletTargets.from_alpha(0.01), 0.0, 1e200))


@pytest.mark.parametrize("alpha", [5e-324, 1e-310, 1e15, 1e16])
def test_alpha_epsilon_whose_targets_leave_float64_is_refused_by_name(alpha) -> None:
    # 5e-324: var_out = inf, y_out = -inf, refused later as "prior_mean must be finite, got
    # None"; 1e15: y_in == y_out, a ZeroDivisionError in resolve_ratio
    with pytest.raises(ValueError, match="alpha_epsilon"):
        DirichletTargets.from_alpha(alpha)


def test_alpha_epsilon_in_range_still_accepted() -> None:
    for alpha in (1e-300, 1e-4, 0.01, 1.0, 1e12):
        tg = DirichletTargets.from_alpha(alpha)
        assert tg.y_in > tg.y_out and math.isfinite(tg.var_out)


def test_record_norm_of_the_margin_does_not_underflow() -> None:
    # ‖vᵢ‖ of one record over all classes (the summation margin's B_rec): R_k² and R_k⁴
    # underflowed, 16% below the exact value at R_k = 2.65e-162
    tg = DirichletTargets.from_alpha(0.01)
    mu = tg.default_prior_mean(3)
    w_out = Fraction(tg.var_in) / Fraction(tg.var_out)
    a_in, a_out = Fraction(tg.y_in) - Fraction(mu), w_out * (Fraction(tg.y_out) - Fraction(mu))
    for R_k in (2.65e-162, 1e-160, 1.0):
        Rk = Fraction(R_k)
        exact = (a_in**2 + 2 * a_out**2) * Rk**2 + (1 + 2 * w_out**2) * Rk**4
        got = dirichlet_record_norm(3, tg, mu, R_k, 1.0)
        assert Fraction(got) ** 2 >= exact * (1 - Fraction(1, 10**13))


@pytest.mark.parametrize(
    ("R_y", "R_k", "c"),
    [(1.0, 2.65e-162, 1.0), (4.4, 1e-160, 1.0), (1.0, 1.0, 1.0), (3.0, 0.5, 7.0)],
)
def test_regression_l2_sensitivity_does_not_underflow(R_y, R_k, c) -> None:
    # the per-class (and noise-aware regression) Δ of eq. 6 had the same underflow: 4.45e-162
    # for R_y = c = 1, R_k = 2.65e-162, whose exact value is 2 R_k = 5.3e-162
    Ry, Rk, cc = Fraction(R_y), Fraction(R_k), Fraction(c)
    s = min(Ry**2 / (2 * cc**2), Rk**2)
    exact = 2 * Ry**2 * Rk**2 + 2 * cc**2 * Rk**4 + 2 * Ry**2 * s - 2 * cc**2 * s**2
    got = l2_sensitivity(R_y, R_k, c)
    assert Fraction(got) ** 2 >= exact * (1 - Fraction(1, 10**13))
