"""Stop-47 audit of the label mechanisms other than cloaking (binning, prior noise,
classification).

1. ``Bins.centres`` computed ``0.5 * (lower + upper)``, which overflows for edges beyond about
   9·10³⁰⁷: the bin ``[1e308, 1.5e308]`` had the centre ``inf``, returned as the ``X_star`` of a
   charged ``binned_release``, and ``binned_gp(method="point")`` refused that release with a
   message about box integrals.
"""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.accounting import Ledger
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
