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


def test_a_bound_whose_V_rounded_to_zero_has_a_finite_epsilon():
    """κ = 1, n = 1001, r² = 10⁻¹⁴: the literal V was 0, τ = 0 and ``alpha_max`` raised
    ``ZeroDivisionError`` (also inside ``sample_path_release``, a refusal without a reason)."""
    b = SamplePathBound(1001, 1e7, 1e-14, 1.0, 1.0, kernel_class="constant")
    assert abs(Fraction(b.V) / _exact_V(1001, 1e-14, 1.0) - 1) <= 16 * np.finfo(float).eps
    assert np.isfinite(b.alpha_max) and np.isfinite(b.epsilon(1e-5))


def _constant_rows(seed: int = 4):
    """n = 101 responses in [-1, 1] and a neighbour that flips the first from +1 to -1."""
    rng = np.random.default_rng(seed)
    X, y = rng.uniform(0, 1, N), rng.uniform(-1, 1, N)
    y[0] = 1.0
    y2 = y.copy()
    y2[0] = -1.0
    return X, y, y2


def test_the_computed_mean_change_is_far_from_exact_when_float64_cannot_resolve_it():
    """Why the release refuses the setting below: with ``K + r²I`` of condition number
    ``1 + n/r² ≈ 5·10¹⁵`` the release's own computation (packed Cholesky, ``cho_solve``) of
    the neighbours' posterior means differs by 0.172 where the exact change is 0.0198:
    8.7 times, i.e. about 75 times the mean term (the exact divergence of the computed release
    on 3000 lazily evaluated points was 7.2 times the charge, docs/sample_paths.md)."""
    from pm_dpgp.gp.rfp import RFPTriangle

    X, y, y2 = _constant_rows()
    s2 = 1.0 / R2  # kernel variance: noise variance s2 * R2 = 1

    def mean(resp):
        T = RFPTriangle.from_dense(np.full((N, N), s2))
        T.add_to_diagonal(1.0)
        assert T.cholesky()
        return s2 * np.sum(T.cho_solve(resp.copy()))

    computed = mean(y) - mean(y2)
    exact = 2.0 / (N + R2)
    assert abs(computed / exact - 1.0) > 1.0


def _constant_model(y):
    X, _, _ = _constant_rows()
    return gp_regression(X, y, pm.gp.cov.Constant(1.0 / R2), noise_sd=1.0)


def test_release_refuses_a_training_system_float64_cannot_resolve():
    """The setting above was charged (ε ≈ 0.4 at δ = 1e-5 after the V fix) and released;
    now it is refused from public n and r² before any spend or draw."""
    _, y, _ = _constant_rows()
    ledger, rng = Ledger(epsilon=10.0, delta=1e-5), np.random.default_rng(1)
    state = rng.bit_generator.state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="condition number"):
            sample_path_release(
                _constant_model(y),
                np.linspace(0.0, 1.0, 5)[:, None],
                kernel_scale=float(1.0 / np.sqrt(R2)),
                y_bounds=(-1.0, 1.0),
                delta=1e-5,
                domain=(0.0, 1.0),
                kernel_class="constant",
                ledger=ledger,
                rng=rng,
            )
    assert len(ledger.history) == 0 and rng.bit_generator.state == state


def test_thompson_loop_refuses_it_before_any_round():
    """The loop checks the largest round (n0 + n_rounds records) before its first charge."""
    from pm_dpgp.workflow import dp_thompson_sampling

    ledger = Ledger(epsilon=10.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="condition number"):
            dp_thompson_sampling(
                lambda Z: np.zeros(len(Z)),
                pm.gp.cov.Constant(1e14),
                domain=(0.0, 1.0),
                X_init=np.linspace(0.0, 1.0, 100)[:, None],
                n_rounds=3,
                noise_sd=1.0,
                kernel_scale=1e7,
                y_bounds=(-1.0, 1.0),
                kernel_class="constant",
                candidates=8,
                ledger=ledger,
                progressbar=False,
                rng=np.random.default_rng(0),
            )
    assert len(ledger.history) == 0


def test_selection_plan_refuses_such_a_candidate():
    from pm_dpgp.selection import plan_sample_path_selection

    X, y, _ = _constant_rows()
    model = gp_regression(X, y, pm.gp.cov.Constant(1e14), noise_sd=1.0)
    with pytest.raises(ValueError, match="condition number"):
        plan_sample_path_selection(
            model,
            [{}],
            n=N,
            X_star=np.linspace(0.0, 1.0, 5)[:, None],
            domain=(0.0, 1.0),
            y_bounds=(-1.0, 1.0),
            epsilon=1.0,
            delta=1e-5,
            kernel_scale=1e7,
            kernel_class="constant",
        )


def test_an_ordinary_setting_is_not_refused():
    """n = 5000 with noise sd 0.1 σ (r² = 0.01) passes: u n(n + r²)/r² ≈ 2.8·10⁻⁷."""
    from pm_dpgp.mechanisms.full.sample_path import check_mean_resolvable

    check_mean_resolvable(5000, 0.01)
    with pytest.raises(ValueError, match="r2 >= "):
        check_mean_resolvable(5000, 0.001)
