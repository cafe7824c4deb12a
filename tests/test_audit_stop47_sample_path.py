"""Stop-47 audit of the sample-path bound: the variance scale V (eq. SP1) without cancellation.

``V = 1 − κ²m/(m + r²)`` (m = n − 1) was evaluated literally.  When V ≪ 1 (κ near 1, r² ≪ m)
the subtraction cancels: the computed V was up to half the true value, or 0, so the bound fell
below the exact Rényi divergence of the very posterior it describes (constant kernel, κ = 1),
and V = 0 raised ``ZeroDivisionError`` in ``alpha_max`` (a release refused with no reason).
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound
from pm_dpgp.models import gp_regression

#: κ = 1, n = 101: r² where the literal 1 − m/(m + r²) returned 0.52 of the true V
N, R2 = 101, 2.1240443560030613e-14


def _exact_V(n: int, r2: float, kappa: float) -> Fraction:
    m = n - 1
    return 1 - Fraction(kappa) ** 2 * m / (m + Fraction(r2))


@pytest.mark.parametrize(
    ("n", "r2", "kappa"),
    [(N, R2, 1.0), (1001, 1e-14, 1.0), (10**6 + 1, 1e-8, 1.0), (50, 1e-13, 1 - 2**-40)],
)
def test_variance_scale_is_accurate_when_it_is_tiny(n, r2, kappa):
    """V to a few ulps of the exact rational value (it was 0.52 V and 0 at the first two)."""
    V = SamplePathBound(n, 1.0, r2, 1.0, kappa, kernel_class="generic").V
    exact = _exact_V(n, r2, kappa)
    assert V > 0.0
    assert abs(Fraction(V) / exact - 1) <= 16 * np.finfo(float).eps


@pytest.mark.parametrize("alpha", [1.5, 2.0, 4.0])
def test_constant_kernel_bound_dominates_the_exact_divergence_at_a_tiny_ridge(alpha):
    """k ≡ 1, κ = 1, noise variance σ²r² = 1 (a vague prior on a mean): the posterior at any
    test point is N(Σy/(n + r²), σ²r²/(n + r²)), so the pair y = M vs y' = −M (all else equal)
    has the exact divergence 2αM²/(σ²r²(n + r²)) (equal variances, Fractions).  The computed
    bound was 0.53 of it at every order."""
    sigma = 1.0 / np.sqrt(R2)
    b = SamplePathBound(N, float(sigma), R2, 1.0, 1.0, kernel_class="constant")
    s2r2 = Fraction(float(sigma)) ** 2 * Fraction(R2)
    exact = 2 * Fraction(alpha) / (s2r2 * (N + Fraction(R2)))
    assert b.rdp(alpha) >= float(exact)


def test_a_constant_kernel_release_whose_V_rounded_to_zero_is_charged():
    """V = 0 gave ``ZeroDivisionError`` (τ = 0) before the spend; now the release is made and
    charged at the bound of the true V."""
    rng = np.random.default_rng(0)
    n = 1001
    model = gp_regression(
        rng.uniform(0, 1, n), rng.uniform(-1, 1, n), pm.gp.cov.Constant(1e14), noise_sd=1.0
    )
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = sample_path_release(
            model,
            np.array([[0.5]]),
            kernel_scale=1e7,
            y_bounds=(-1.0, 1.0),
            delta=1e-5,
            domain=(0.0, 1.0),
            kernel_class="constant",
            ledger=ledger,
            rng=np.random.default_rng(1),
        )
    assert rel.bound.kappa == 1.0
    assert abs(Fraction(rel.bound.V) / _exact_V(n, 1e-14, 1.0) - 1) <= 16 * np.finfo(float).eps
    assert len(ledger.history) == 1 and np.isfinite(rel.epsilon)
