"""Stop-45 audit of the binning baselines (Smith et al. 2018 §4) and the integral kernel.

1. ``make_bins`` refused every grid whose dimensions have different numbers of edges (e.g.
   2 × 3 bins) with NumPy's "inhomogeneous shape" ``ValueError``: ``np.ndim`` of the list
   of edge arrays built one array of all of them.
"""

from __future__ import annotations

import numpy as np

from pm_dpgp.accounting import Ledger
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
