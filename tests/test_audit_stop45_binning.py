"""Stop-45 audit of the binning baselines (Smith et al. 2018 §4) and the integral kernel.

1. ``make_bins`` refused every grid whose dimensions have different numbers of edges (e.g.
   2 × 3 bins) with NumPy's "inhomogeneous shape" ``ValueError``: ``np.ndim`` of the list
   of edge arrays built one array of all of them.
2. ``box_box_kernel`` lost ``ε_mach ℓ D/(w_a w_b)`` for narrow boxes a distance ``D``
   apart: bins ``[0, 1e-8]`` and ``[1, 1 + 1e-8]`` at ``ℓ = 1`` had covariance 5.55 (true
   0.607, above the variance 1); ``w = 1e-6``, ``D = 3`` gave 0.0044 for 0.0111; and
   ``point_box_kernel`` gave 0 for a true 0.88 for a box of width 5e-301.
"""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.integral import box_box_kernel
from pm_dpgp.mechanisms.label.binning import binned_gp, binned_predict, binned_release, make_bins


def test_make_bins_grid_with_different_numbers_of_edges_per_dimension():
    bins = make_bins([np.array([0.0, 1.0, 2.0]), np.array([0.0, 10.0, 20.0, 30.0])])
    assert bins.shape == (2, 3)
    assert make_bins([[0, 1, 2], [0, 5]]).shape == (2, 1)
    X = np.array([[0.0, 0.0], [1.0, 10.0], [2.0, 30.0], [0.999, 9.99], [2.0, 0.0], [0.0, 30.0]])
    # half-open bins, the last interval of each dimension closed: row-major flat indices
    np.testing.assert_array_equal(bins.index(X), [0, 4, 5, 0, 3, 2])
    ledger = Ledger(epsilon=1.0)
    rel = binned_release(
        X,
        np.linspace(0.0, 1.0, 6),
        bins,
        epsilon=1.0,
        y_bounds=(0.0, 1.0),
        ledger=ledger,
        rng=np.random.default_rng(0),
    )
    assert rel.draws.shape == (1, 6)
    assert binned_predict(rel, X).shape == (1, 6)
    gp = binned_gp(rel, X, lengthscale=[1.0, 10.0], kernel_scale=1.0, noise_sd=0.1)
    assert np.isfinite(gp.draws).all()


def _box_box_exact(a, b, c, d, ls):
    """The closed form in 250-digit arithmetic (no cancellation left at that precision)."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(250):
        a, b, c, d, ls = (mp.mpf(v) for v in (a, b, c, d, ls))

        def g(z):
            u = z / ls
            return ls**2 * (u * mp.sqrt(mp.pi / 2) * mp.erf(u / mp.sqrt(2)) + mp.exp(-u * u / 2))

        return float((g(b - c) + g(a - d) - g(a - c) - g(b - d)) / ((b - a) * (d - c)))


@pytest.mark.parametrize(
    ("w", "gap", "ratio"),
    [
        (1e-8, 1.0, 1.0),
        (1e-6, 3.0, 0.1),
        (1e-6, 6.0, 10.0),
        (1e-4, 6.0, 0.1),
        (1e-8, 0.5, 0.1),
        (1e-3, 6.0, 1e3),
        (1e-12, 1.0, 1.0),
        (0.3, 0.5, 1.0),
        (1.0, 3.0, 1e-3),
    ],
)
def test_box_box_kernel_narrow_separated_boxes_match_high_precision(w, gap, ratio):
    a = 0.3
    b, c = a + w, a + w + gap
    d = c + w * ratio
    k = box_box_kernel(np.array([[a]]), np.array([[b]]), np.array([[c]]), np.array([[d]]), 1.0, 1.0)
    assert abs(k[0, 0] - _box_box_exact(a, b, c, d, 1.0)) < 1e-10


def test_integral_gram_of_narrow_bins_is_a_covariance():
    # a grid with narrow bins (e.g. edges from quantiles of clustered public inputs)
    edges = np.array([0.0, 1e-8, 1.0, 1.0 + 1e-8, 3.0, 3.0 + 1e-7])
    lo, up = edges[:-1, None], edges[1:, None]
    K = box_box_kernel(lo, up, lo, up, 1.0, 1.0)
    exact = np.array(
        [
            [_box_box_exact(lo[i, 0], up[i, 0], lo[j, 0], up[j, 0], 1.0) for j in range(5)]
            for i in range(5)
        ]
    )
    np.testing.assert_allclose(K, exact, rtol=0, atol=1e-10)
    assert np.all(np.abs(K) <= 1.0 + 1e-12)
    assert np.linalg.eigvalsh(0.5 * (K + K.T)).min() > -1e-10


def test_point_box_kernel_of_a_very_narrow_box_is_the_point_value():
    from pm_dpgp.gp.integral import point_box_kernel

    lo = np.array([[1e-300], [0.1]])
    up = np.array([[1.5e-300], [0.1 + 1e-14]])
    k = point_box_kernel(np.array([[0.5]]), lo, up, 1.0, 1.0)[0]
    np.testing.assert_allclose(k, np.exp(-0.5 * np.array([0.5, 0.4]) ** 2), rtol=1e-9)
