"""Tests for the Gaussian-mechanism calibration (pm_dpgp.mechanisms.gaussian)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from pm_dpgp.accounting import gdp_delta
from pm_dpgp.mechanisms.gaussian import classic_c, gaussian_epsilon, gaussian_sigma
from tests.tolerances import EPS, scalar_rtol

eps_st = st.floats(min_value=0.01, max_value=20.0)
delta_st = st.floats(min_value=1e-12, max_value=0.5)


#: Stopping tolerance of the root finders behind the analytic calibration:
#: ``dp_accounting.get_sigma_gaussian`` / ``get_epsilon_gaussian`` run scipy's brentq with
#: ``xtol=1e-12`` (their default ``tol``, dp_accounting/gaussian_mechanism.py), and pm_dpgp then
#: moves the root to the safe side by relative steps from 1e-12 (``_nudge_up``).
ROOT_XTOL = 1e-12


def root_tol(value: float) -> float:
    """Absolute accuracy of one σ (unit sensitivity) or ε of size ``value`` from those solvers.

    brentq stops within xtol + 4·EPS·|x| of the root and the nudge moves the result by a few
    such steps to the safe side.  Against a 40-digit mpmath root (400 random μ ∈ [0.01, 30],
    δ ∈ [1e-12, 0.5]) the error was ≤ 1.6·xtol·(1 + |x|); 4·xtol·(1 + |x|) bounds one result,
    and the difference of two such results (both lie on the safe side of their roots).
    """
    return 4.0 * ROOT_XTOL * (1.0 + abs(value))


def roundtrip_tol(epsilon: float, sigma_unit: float) -> float:
    """Accuracy of ε recovered from σ = σ'·Δ by ``gaussian_epsilon`` (two chained root solves).

    The ε-solve's own error, plus the σ'-solve's error (and the rounding of σ'·Δ and Δ/σ)
    propagated by |dε/dσ'|.  On the Balle–Wang curve δ(ε, μ), μ = 1/σ', one has
    ∂δ/∂μ = φ(μ/2 − ε/μ) and ∂δ/∂ε = −e^ε Φ(−μ/2 − ε/μ), so at fixed δ
    |dε/dσ'| = μ² φ(μ/2 − ε/μ) / (e^ε Φ(−μ/2 − ε/μ))  (≈ 0.7 at (1, 0.01), ≈ 55 at (20, 1e-12)).
    """
    mu = 1.0 / sigma_unit
    a, b = mu / 2 - epsilon / mu, -mu / 2 - epsilon / mu
    slope = math.exp(2 * math.log(mu) + norm.logpdf(a) - epsilon - norm.logcdf(b))
    return root_tol(epsilon) + slope * (root_tol(sigma_unit) + 4 * EPS * sigma_unit)


def exact_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Balle & Wang (2018) Thm. 8, written out with scipy (independent of the package)."""
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b)


# --------------------------------------------------------------------------------------------
# Reference numbers
# --------------------------------------------------------------------------------------------
def test_reference_numbers_at_1_001():
    assert gaussian_sigma(1.0, 0.01) == pytest.approx(1.8779, abs=5e-4)
    assert gaussian_sigma(1.0, 0.01, method="classic") == pytest.approx(3.2552, abs=5e-4)
    # closed form of 4 correctly rounded operations (÷, log, ×, sqrt): scalar_rtol(4)
    assert classic_c(0.01) == pytest.approx(math.sqrt(2 * math.log(200)), rel=scalar_rtol(4))


def test_classic_formula_and_sensitivity_scaling():
    for eps, delta, s in [(0.5, 1e-5, 2.0), (1.0, 0.1, 0.3), (0.01, 1e-9, 7.0)]:
        expected = math.sqrt(2 * math.log(2 / delta)) * s / eps
        # closed form of 6 correctly rounded operations, no cancellation: scalar_rtol(6)
        got = gaussian_sigma(eps, delta, s, method="classic")
        assert got == pytest.approx(expected, rel=scalar_rtol(6))
        # not vacuous: the formula at a δ off by 1e-4 (relative) is rejected
        wrong = math.sqrt(2 * math.log(2 / (delta * (1 + 1e-4)))) * s / eps
        with pytest.raises(AssertionError):
            assert got == pytest.approx(wrong, rel=scalar_rtol(6))


def test_classic_formula_fails_for_large_epsilon():
    """Why method="classic" refuses eps > 1: extrapolated, c(delta)/eps is too little noise."""
    eps, delta = 10.0, 1e-5
    extrapolated = classic_c(delta) / eps
    assert extrapolated < gaussian_sigma(eps, delta)
    assert exact_delta(extrapolated, eps) > delta  # would not be (eps, delta)-DP


def test_classic_refuses_epsilon_above_one():
    with pytest.raises(ValueError, match="analytic"):
        gaussian_sigma(1.5, 1e-5, method="classic")
    # epsilon == 1 is still allowed
    gaussian_sigma(1.0, 1e-5, method="classic")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(epsilon=0.0, delta=1e-5),
        dict(epsilon=-1.0, delta=1e-5),
        dict(epsilon=math.nan, delta=1e-5),
        dict(epsilon=math.inf, delta=1e-5),
        dict(epsilon=1.0, delta=0.0),
        dict(epsilon=1.0, delta=1.0),
        dict(epsilon=1.0, delta=-0.1),
        dict(epsilon=1.0, delta=math.nan),
        dict(epsilon=1.0, delta=1e-5, sensitivity=0.0),
        dict(epsilon=1.0, delta=1e-5, sensitivity=-1.0),
        dict(epsilon=1.0, delta=1e-5, sensitivity=math.inf),
        dict(epsilon=1.0, delta=1e-5, sensitivity=math.nan),
        dict(epsilon=1.0, delta=1e-5, method="laplace"),
    ],
)
def test_sigma_rejects_bad_input(kwargs):
    with pytest.raises(ValueError):
        gaussian_sigma(**kwargs)


@pytest.mark.parametrize(
    "args", [(0.0, 1e-5), (-1.0, 1e-5), (math.inf, 1e-5), (1.0, 0.0), (1.0, 1.0), (1.0, 1e-5, 0.0)]
)
def test_epsilon_rejects_bad_input(args):
    with pytest.raises(ValueError):
        gaussian_epsilon(*args)


def test_classic_c_rejects_bad_delta():
    for d in (0.0, 1.0, 2.0, math.nan):
        with pytest.raises(ValueError):
            classic_c(d)


# --------------------------------------------------------------------------------------------
# Properties of the analytic calibration
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
@pytest.mark.parametrize("eps", [0.05, 0.3, 1.0])
def test_analytic_beats_classic_where_classic_is_valid(eps, delta):
    assert gaussian_sigma(eps, delta) < gaussian_sigma(eps, delta, method="classic")


def test_analytic_sigma_decreasing_in_epsilon_and_delta():
    eps_grid = np.geomspace(0.01, 50, 40)
    sig = [gaussian_sigma(e, 1e-5) for e in eps_grid]
    assert np.all(np.diff(sig) < 0)
    delta_grid = np.geomspace(1e-12, 0.4, 40)
    sig = [gaussian_sigma(1.0, d) for d in delta_grid]
    assert np.all(np.diff(sig) < 0)


@settings(max_examples=60, deadline=None)
@given(eps=eps_st, delta=delta_st, s=st.floats(min_value=1e-3, max_value=1e3))
def test_analytic_sigma_is_valid_and_tight(eps, delta, s):
    sigma = gaussian_sigma(eps, delta, s)
    # Valid: the exact delta at the target epsilon does not exceed the target (tiny fp slack).
    assert gdp_delta(s / sigma, eps) <= delta
    assert exact_delta(sigma, eps, s) <= delta * (1 + 1e-6)
    # Tight: 0.1% less noise would break the guarantee.
    assert exact_delta(sigma * 0.999, eps, s) > delta


@settings(max_examples=60, deadline=None)
@given(eps=eps_st, delta=delta_st, s=st.floats(min_value=1e-3, max_value=1e3))
def test_gaussian_epsilon_inverts_gaussian_sigma(eps, delta, s):
    sigma = gaussian_sigma(eps, delta, s)
    back = gaussian_epsilon(sigma, delta, s)
    # two chained root solves (xtol 1e-12 each), the σ error propagated by |dε/dσ|
    tol = roundtrip_tol(eps, sigma / s)
    assert back == pytest.approx(eps, rel=0, abs=tol)
    # not vacuous: a σ off by 1e-4 (relative) gives an ε outside that tolerance
    with pytest.raises(AssertionError):
        assert gaussian_epsilon(sigma * (1 + 1e-4), delta, s) == pytest.approx(eps, rel=0, abs=tol)
    # and it never under-reports: exact delta at the returned epsilon is within the target
    assert gdp_delta(s / sigma, back) <= delta


@settings(max_examples=40, deadline=None)
@given(sigma=st.floats(min_value=0.2, max_value=50), d1=delta_st, d2=delta_st)
def test_gaussian_epsilon_decreasing_in_delta(sigma, d1, d2):
    lo, hi = sorted((d1, d2))
    eps_lo = gaussian_epsilon(sigma, lo)
    # equal or nearly equal δ: the two root solves may each land up to root_tol above the root
    assert gaussian_epsilon(sigma, hi) <= eps_lo + root_tol(eps_lo)


def test_gaussian_epsilon_scales_with_sensitivity_over_sigma():
    # Δ/σ is exactly 0.5 on both sides, so the same root solve runs on the same input: bitwise
    assert gaussian_epsilon(4.0, 1e-5, 2.0) == gaussian_epsilon(2.0, 1e-5)


def test_large_epsilon_is_supported():
    sigma = gaussian_sigma(10.0, 1e-6)
    assert 0 < sigma < gaussian_sigma(5.0, 1e-6)
    # round trip through two root solves: see roundtrip_tol
    tol = roundtrip_tol(10.0, sigma)
    assert gaussian_epsilon(sigma, 1e-6) == pytest.approx(10.0, rel=0, abs=tol)


@pytest.mark.parametrize("eps", [1e200, 1e300])
def test_an_epsilon_beyond_the_analytic_root_finder_is_a_clear_error(eps, label_model):
    """Stop-38 audit: ε ≳ 1e200 made dp_accounting's root finder fail with scipy's "The
    function value at x=0.1 is NaN; solver cannot continue"; now a clear refusal naming
    epsilon, before any spend or draw of a release."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import cloaked_release

    with pytest.raises(ValueError, match="too large for the analytic Gaussian calibration"):
        gaussian_sigma(eps, 1e-5, 1.0)
    ledger, rng = Ledger(epsilon=1e308, delta=1e-5), np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="too large"):
        cloaked_release(
            label_model, [[0.5]], epsilon=eps, delta=1e-5, y_bounds=(-1, 1), ledger=ledger, rng=rng
        )
    assert not ledger.history and rng.bit_generator.state == state


def test_a_noise_sd_that_underflows_is_a_clear_error():
    """Stop-38 review: ε = 1e120 with Δ = 1e-300 made σ underflow to 0 and ``_nudge_up``
    raise a bare ZeroDivisionError."""
    with pytest.raises(ValueError, match="underflows to 0"):
        gaussian_sigma(1e120, 1e-5, 1e-300)
