"""Stop-47 audit of the label mechanisms other than cloaking (binning, prior noise,
classification).

1. ``Bins.centres`` computed ``0.5 * (lower + upper)``, which overflows for edges beyond about
   9·10³⁰⁷: the bin ``[1e308, 1.5e308]`` had the centre ``inf``, returned as the ``X_star`` of a
   charged ``binned_release``, and ``binned_gp(method="point")`` refused that release with a
   message about box integrals.
2. ``box_box_kernel`` formed ``ℓ² h(z/ℓ)`` and divided by ``w_a w_b``: both overflow far
   inside the float range, where their ratio does not.  The EQ box averages depend on the
   edges and ℓ only through their ratios, yet the grid ``[0, 1000, 2000]`` at ``ℓ = 1``
   scaled by 10¹⁵² had covariances 0 (true 2.5·10⁻³ and 10⁻⁶: ``binned_gp(method="integral")``
   fitted a silently wrong GP), by 10¹⁵⁴ NaN (refused as "bins far wider than ~1e300 times
   the lengthscale"), and by 10⁻¹⁶⁰ (subnormal ℓ²) were off by a relative 10⁻⁵.  The tests
   rescale by powers of two, so that the rescaled problem is exactly the same.
"""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.integral import box_box_kernel, point_box_kernel
from pm_dpgp.mechanisms.label.binning import binned_gp, binned_release, make_bins

EDGES = np.array([1e308, 1.2e308, 1.7e308])


def test_bin_centres_of_huge_edges_are_finite_midpoints():
    centres = make_bins(EDGES).centres().ravel()
    assert np.all(np.isfinite(centres))
    np.testing.assert_allclose(centres, [1.1e308, 1.45e308], rtol=1e-15)
    # ordinary edges: the same values as before, bit for bit
    edges = np.array([-3.0, 0.1, 0.7, 2.5])
    np.testing.assert_array_equal(
        make_bins(edges).centres().ravel(), 0.5 * (edges[:-1] + edges[1:])
    )


@pytest.mark.parametrize("secure", [False, True])
def test_a_charged_binned_release_has_finite_bin_centres(secure):
    X = np.array([[1.1e308], [1.5e308]])
    y = np.array([0.2, 0.8])
    ledger = Ledger(epsilon=10.0)
    rng = None if secure else np.random.default_rng(0)
    r = binned_release(
        X,
        y,
        make_bins(EDGES),
        epsilon=1.0,
        y_bounds=(0.0, 1.0),
        ledger=ledger,
        rng=rng,
        bounds_are_public=True,
    )
    assert len(ledger.history) == 1
    x = r.X_star.ravel()
    assert np.all(np.isfinite(x)) and np.all((EDGES[:-1] < x) & (x < EDGES[1:]))
    g = binned_gp(
        r,
        np.array([[1.1e308], [1.6e308]]),
        lengthscale=1e307,
        kernel_scale=1.0,
        noise_sd=0.1,
        method="point",
    )
    assert np.all(np.isfinite(g.draws))


def _grid_kernels(scale):
    lower = np.array([[0.0], [1000.0], [1000.5]]) * scale
    upper = np.array([[1000.0], [2000.0], [1000.5 + 1e-7]]) * scale
    x = np.array([[500.0], [1000.25]]) * scale
    return (
        box_box_kernel(lower, upper, lower, upper, 1.0 * scale, 2.0),
        point_box_kernel(x, lower, upper, 1.0 * scale, 2.0),
    )


@pytest.mark.parametrize("power", [-530, -330, 330, 505, 512, 530, 995])
def test_integral_kernels_are_invariant_under_a_common_rescaling(power):
    # a power of two: the rescaled edges, points and lengthscale are exact
    K1, P1 = _grid_kernels(1.0)
    K, P = _grid_kernels(2.0**power)
    assert K1[0, 0] == pytest.approx(4.0 * 2.50462827e-3, rel=1e-8)
    np.testing.assert_allclose(K, K1, rtol=1e-14, atol=0.0)
    np.testing.assert_allclose(P, P1, rtol=1e-14, atol=0.0)


def test_binned_gp_integral_on_a_rescaled_grid_is_the_same_fit():
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 10.0, (60, 1))
    y = np.sin(X[:, 0])
    edges = np.linspace(0.0, 10.0, 6)
    fits = []
    for scale in (1.0, 2.0**511):  # old code: w_a w_b overflowed, covariances 0
        r = binned_release(
            X * scale,
            y,
            make_bins(edges * scale),
            epsilon=1.0,
            y_bounds=(-1.0, 1.0),
            rng=np.random.default_rng(0),
            bounds_are_public=True,
        )
        g = binned_gp(
            r,
            np.array([[2.5], [7.5]]) * scale,
            lengthscale=0.125 * scale,
            kernel_scale=1.0,
            noise_sd=0.3,
            method="integral",
        )
        fits.append(g.draws)
    np.testing.assert_allclose(fits[1], fits[0], rtol=1e-10)
