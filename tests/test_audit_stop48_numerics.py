"""Stop-48 audit of the low-level numerics (gp/linalg, gp/rfp, gp/integral, validation)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from pm_dpgp.gp.linalg import norm_rounded_up
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures


def _exact_square(v: list[float]) -> Fraction:
    return sum((Fraction(x) ** 2 for x in v), Fraction(0))


@pytest.mark.parametrize(
    "values",
    [[1.5e-162] * 2, [3.5e-162] * 2, [1e-160, 1e-160], [1e-200], [5e-324] * 7, [1e-300, 3e-301]],
)
def test_norm_rounded_up_never_below_exact_for_tiny_values(values: list[float]) -> None:
    # the squares underflowed: [1.5e-162] * 2 gave 0, [3.5e-162] * 2 10% below the exact norm
    r = norm_rounded_up(np.array(values))
    assert Fraction(r) ** 2 >= _exact_square(values)
    assert r <= max(values) * math.sqrt(len(values)) * 1.001 + 2 * 5e-324


def test_norm_rounded_up_unchanged_in_normal_range_and_overflow() -> None:
    assert norm_rounded_up(np.array([3.0, 4.0])) == 5.0 * (1.0 + 2.0**-51)
    assert norm_rounded_up(np.array([1e308] * 4)) == math.inf
    assert norm_rounded_up(np.array([])) == 0.0
    rng = np.random.default_rng(48)
    for _ in range(500):
        v = rng.uniform(-2, 2, size=int(rng.integers(1, 8))) * 2.0 ** float(
            rng.integers(-1070, 1000)
        )
        assert Fraction(norm_rounded_up(v)) ** 2 >= _exact_square(v.tolist())


def test_partition_feature_norm_covers_tiny_weights() -> None:
    # R_φ is the charged bound on every feature row's norm (no clipping of these features);
    # with weights 3.5e-162 it was 4.45e-162 for rows of norm 4.95e-162
    w = [3.5e-162, 3.5e-162]
    f = DyadicPartitionFeatures(0.0, 1.0, 2, None, w)
    row = f(np.array([[0.3]]))[0]
    assert Fraction(f.R) ** 2 >= _exact_square(row.tolist())


@pytest.mark.parametrize("k", [157, 160, 170, 200, 300])
def test_box_box_kernel_of_boxes_narrow_beside_the_lengthscale(k: int) -> None:
    # the four terms H(z/ℓ) ≈ z²/(2ℓ²) underflowed and the round-off estimate, relative to
    # them, was 0: identical or adjacent boxes of width 1e-170 ℓ had the covariance 0 (true
    # value 1 − O(w²/ℓ²)), at 1e-160 ℓ 0.99998887
    from pm_dpgp.gp.integral import box_box_kernel

    w = 10.0**-k
    lo, hi = np.array([[0.0], [w]]), np.array([[w], [2 * w]])
    np.testing.assert_allclose(box_box_kernel(lo, hi, lo, hi, 1.0, 1.0), 1.0, rtol=1e-12)
    lo, hi = np.array([[0.0], [1.0]]), np.array([[1.0], [2.0]])
    np.testing.assert_allclose(box_box_kernel(lo, hi, lo, hi, 10.0**k, 2.0), 4.0, rtol=1e-12)


def test_binned_gp_integral_agrees_with_point_for_a_huge_lengthscale() -> None:
    # lengthscale 1e170 with unit-scale bins: the integral method's bin covariances were 0
    # while the point-box ones were 1, and the posterior mean of labels in [0, 1] was 363
    from pm_dpgp.mechanisms.label.binning import binned_gp, binned_release, make_bins

    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(200, 1)), rng.uniform(size=200)
    rel = binned_release(
        X, y, make_bins([np.linspace(0, 1, 5)]), epsilon=1.0, y_bounds=(0, 1), rng=rng
    )
    Xs = np.array([[0.3], [0.7]])
    kw = {"lengthscale": 1e170, "kernel_scale": 1.0, "noise_sd": 0.1}
    integral = binned_gp(rel, Xs, **kw)
    point = binned_gp(rel, Xs, method="point", **kw)
    np.testing.assert_allclose(integral.draws, point.draws, rtol=1e-9)
    np.testing.assert_allclose(integral.noise_factor, point.noise_factor, rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-170, 1e-160, 3e-155, 1.0, 1e150])
def test_whitening_column_sensitivity_covers_tiny_maps(scale: float) -> None:
    """``column_sensitivity`` of a map whose squares underflow (stop-48 audit: W = 1e-170
    everywhere gave 0 against the exact 1.41e-170 per unit range)."""
    from pm_dpgp.mechanisms.whitening import centred_whitening

    W = np.full((2, 3), scale)
    W[1, 2] = 0.5 * scale
    got = centred_whitening(W, np.zeros(3), (-1.0, 1.0), 0.0).column_sensitivity
    exact_sq = max(sum(Fraction(float(W[i, j])) ** 2 for i in range(2)) for j in range(3))
    assert got > 0.0 and Fraction(got / 2.0) ** 2 >= exact_sq
    assert got <= 2.0 * float(np.sqrt(2.0)) * scale * (1.0 + 1e-12)


@pytest.mark.parametrize("scale", [1e-170, 1e-155, 1.0])
def test_whitening_rounding_bound_holds_for_tiny_maps(scale: float) -> None:
    """``rounding`` bounds ``‖private − W(y − c)‖`` (exactly, in fractions) also when the row
    sums' squares underflow: with W ≈ 1e-170 the bound was 8e-323 against errors ≈ 1e-186."""
    from pm_dpgp.mechanisms.whitening import centred_whitening

    rng = np.random.default_rng(1)
    worst = Fraction(0)
    for _ in range(40):
        W = rng.uniform(0.5, 1.0, (2, 7)) * scale
        y = rng.uniform(-1.0, 1.0, 7)
        cw = centred_whitening(W, y, (-1.0, 1.0), 0.0)
        err_sq = sum(
            (
                Fraction(float(cw.private[i]))
                - sum(Fraction(float(W[i, j])) * Fraction(float(y[j])) for j in range(7))
            )
            ** 2
            for i in range(2)
        )
        worst = max(worst, err_sq / Fraction(cw.rounding) ** 2)
    assert worst <= 1
