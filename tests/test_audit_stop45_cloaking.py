"""Stop-45 audit of the cloaking noise designs (trace, batched) and their release.

Checked and correct (numbers in the audit report): ``max_mahalanobis`` equals a 60-digit
recomputation from the returned ``chol_k`` and projected columns to ``≤ 4.4·10⁻¹⁶`` relative for
both designs and the batched solver on 55 × 3 random, rank-deficient, zero-, duplicate- and
negated-column and GP matrices per seed (scales ``10⁻³⁰⁰ … 10¹⁵⁰``, ``rank_tol`` ``10⁻¹⁰ … 10⁻³``);
releases charge ``≥`` the exact whitened sensitivity and the ledger's ε for ``n_draws`` matches
``dp_accounting``'s PLD accountant.

Findings, each test failing on the code before the fix:

1. A cloaking matrix with subnormal singular values (``C = [[1e-320, 0]]``; test points ~38
   lengthscales from the data) gave ``max_mahalanobis`` NaN or ``inf`` with ``converged=True``
   and no warning from ``solve_noise_covariance`` / ``solve_noise_covariances`` /
   ``cloaking_noise`` (the release refused later).  Now a clear ``ValueError``.
2. ``design="trace"`` raised a bare ``OverflowError`` (Python ``float ** 2``) for ``|C| ≳ 1e154``,
   where the log det design returns a certified result.
3. The whitening's public round-off bound ``r`` was purely relative, so products that
   underflow (labels in a subnormal range, ``y_bounds = (0, 1e-320)``) were not covered: two
   neighbours' computed whitened means differed by ``1.0006 ×`` the charged
   ``column sensitivity + 2r``.
4. The secure plan with ``calibration="classic"`` squared ``Δ`` and ``σ``: ``ZeroDivisionError``
   for ``Δ ≲ 1e-154``, ``OverflowError`` for ``Δ ≳ 1e154`` (before the spend, but a crash of the
   default secure release where ``"analytic"`` works); and a grid ``σ·2⁻²⁰`` that underflows
   gave "gamma must be ... pass one." instead of saying why.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from pm_dpgp.mechanisms.label.cloaking import solve_noise_covariance
from pm_dpgp.mechanisms.label.cloaking_batch import solve_noise_covariances
from pm_dpgp.mechanisms.noise import grid_for, secure_plan
from pm_dpgp.mechanisms.whitening import centred_whitening


@pytest.mark.parametrize("design", ["logdet", "trace"])
@pytest.mark.parametrize(
    "C", [[[1e-320, 0.0]], [[1e-310, 2e-310], [3e-310, 1e-311]], [[1e-315, 5e-316, 0.0]]]
)
def test_subnormal_cloaking_matrix_is_refused_not_a_nan_sensitivity(C, design):
    with pytest.raises(ValueError, match="not finite in float64.*far from every training input"):
        solve_noise_covariance(np.array(C), design=design)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_subnormal_cloaking_matrix_is_refused_by_the_batched_solver():
    ok = np.random.default_rng(0).normal(size=(3, 5))
    with pytest.raises(ValueError, match="not finite in float64"):
        solve_noise_covariances([ok, np.array([[1e-320, 0.0]])])


def test_trace_design_of_a_huge_matrix_is_certified_not_an_overflow_error():
    rng = np.random.default_rng(1)
    C = rng.normal(size=(3, 7)) * 1e200
    with warnings.catch_warnings():  # M_k = chol_k chol_kᵀ overflows, as in the log det design
        warnings.simplefilter("ignore", RuntimeWarning)
        nc = solve_noise_covariance(C, design="trace")
    assert nc.converged
    assert np.all(np.isfinite(nc.chol_k))
    # the same problem at unit scale (homogeneous: chol_k scales by 1e200, max_mahalanobis not)
    unit = solve_noise_covariance(C / 1e200, design="trace")
    assert nc.max_mahalanobis == pytest.approx(unit.max_mahalanobis, rel=1e-12)
    np.testing.assert_allclose(nc.chol_k / 1e200, unit.chol_k, rtol=1e-9, atol=1e-12)
    W = np.linalg.solve(nc.chol_k / 1e200, nc.projected / 1e200)
    assert np.max(np.sum(W * W, axis=0)) == pytest.approx(nc.max_mahalanobis, rel=1e-12)


def test_whitening_rounding_covers_gradual_underflow():
    """Labels in a subnormal range: the worst neighbour pair (the column of largest norm moved
    across the whole range) stays within ``column_sensitivity + 2 rounding``."""
    worst = 0.0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        k, n = 6, 30
        W = rng.normal(size=(k, n))
        W /= np.sqrt((W * W).sum(axis=0)).max()
        j = int(np.argmax((W * W).sum(axis=0)))
        for hi in (1e-320, 3e-321, 7.7e-321, 2e-319):
            for _ in range(50):
                y = rng.uniform(0.0, hi, n)
                y[j] = 0.0
                y2 = y.copy()
                y2[j] = hi
                a = centred_whitening(W, y, (0.0, hi), 0.0)
                b = centred_whitening(W, y2, (0.0, hi), 0.0)
                diff = float(np.linalg.norm((a.private - b.private) / hi)) * hi  # no underflow
                worst = max(worst, diff / (a.column_sensitivity + 2.0 * a.rounding))
    assert worst <= 1.0, worst


@pytest.mark.parametrize("sensitivity", [1e-200, 1e-160, 1.0, 1e160])
def test_classic_secure_plan_at_extreme_sensitivities(sensitivity):
    """``Δ²/(2σ²)`` raised ZeroDivisionError (``Δ ≲ 1e-154``) or OverflowError (``Δ ≳ 1e154``):
    the default secure cloaked release with ``calibration="classic"`` crashed at
    ``y_bounds = (0, 1e-200)`` or ``(0, 1e160)`` where ``"analytic"`` works.  The noise is still
    never below the classic ``c(δ) Δ / ε``."""
    plan = secure_plan(0.5, 1e-5, sensitivity, 4, "classic")
    classic = math.sqrt(2.0 * math.log(2.0 / 1e-5)) / 0.5
    assert plan.sigma / sensitivity >= classic * (1.0 - 1e-12)
    unit = secure_plan(0.5, 1e-5, 1.0, 4, "classic")
    assert plan.rho == pytest.approx(unit.rho, rel=1e-9)


def test_a_noise_sd_whose_grid_underflows_is_a_clear_error():
    """σ ≈ 4e-320 (``y_bounds = (0, 1e-320)``): the grid σ·2⁻²⁰ underflowed to 0 and the secure
    release said "gamma must be a finite number > 0, got 0.0; pass one." (no gamma is passed)."""
    with pytest.raises(ValueError, match="discretisation grid .* underflows float64"):
        grid_for(4e-320)
    with pytest.raises(ValueError, match="discretisation grid .* underflows float64"):
        secure_plan(1.0, 1e-5, 1e-320, 4)
