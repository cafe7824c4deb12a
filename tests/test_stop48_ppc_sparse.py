"""Stop 48: ``dp_ppc(interpolate=True)`` builds its interpolation weights sparse."""

from __future__ import annotations

import numpy as np


def test_interpolation_weights_are_sparse_and_match_np_interp() -> None:
    """``dp_ppc(interpolate=True)``'s weights hold two entries per hold-out row (stop 48: a dense
    ``h × m`` array, 640 MB for 400 hold-out points between 200,000 bin centres)."""
    import scipy.sparse

    from pm_dpgp.workflow.ppc import _interpolation_matrix

    rng = np.random.default_rng(2)
    m = 200_000
    X_star = rng.permutation(np.linspace(0.0, 1.0, m))
    order = np.argsort(X_star, kind="stable")
    xs = X_star[order]
    x = np.append(rng.uniform(0.0, 1.0, 400), [0.0, 1.0])
    W = _interpolation_matrix(xs, order, x)
    assert scipy.sparse.issparse(W) and W.nnz <= 2 * len(x)
    d = rng.standard_normal(m)
    np.testing.assert_allclose(W @ d, np.interp(x, xs, d[order]), rtol=1e-12, atol=1e-15)
