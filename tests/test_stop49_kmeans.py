"""``kmeans_public_inducing`` with fewer distinct inputs than centres: refused up front.

SciPy's k-means++ then divides by a zero total distance: each of the 10 starts warned
"invalid value encountered in divide" (NaN selection probabilities) before the refusal of
the coinciding centres.  The count of distinct rows is checked first (public inputs).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pm_dpgp.models.fitc import kmeans_public_inducing


def test_too_few_distinct_inputs_are_refused_before_any_k_means_run(monkeypatch) -> None:
    import pm_dpgp.models.fitc as fitc

    runs = []
    real = fitc.kmeans2

    def counted(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fitc, "kmeans2", counted)
    X = np.repeat([[1.0], [2.0], [3.0]], 4, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SciPy RuntimeWarning on the way
        with pytest.raises(ValueError, match="3 distinct rows, fewer than n_inducing=5"):
            kmeans_public_inducing(X, 5, seed=0)
    assert runs == []
    # as many distinct rows as centres: the centres are those rows
    Z = kmeans_public_inducing(X, 3, seed=0)
    np.testing.assert_array_equal(np.sort(Z[:, 0]), [1.0, 2.0, 3.0])
    assert len(runs) == 10
