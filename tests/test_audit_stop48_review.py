"""Stop-48 review of the stop's changes (adversarial): defects found in them or next to them.

Each test fails on the code at a049610 and passes after the fix it names.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pm_dpgp.gp.sparse import sufficient_statistics


def _kernel(Zc, Xc):
    return np.exp(-0.5 * ((Zc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1))


# ------------------------------------------- chunks whose arrays differ in length (_full_pieces)
@pytest.mark.parametrize("chunk_size", [2, 4, 10])
@pytest.mark.parametrize(
    "cuts",
    [
        [(4, 6)],  # one chunk: y longer than X (its 2 extra rows were dropped, silently)
        [(3, 3), (2, 3)],  # the second chunk's extra y row (old: n = 5, silently)
        [(3, 3), (4, 3)],
        [(4, 4), (3, 2)],  # y shorter than X
    ],
)
def test_a_chunk_whose_arrays_differ_in_length_is_refused(cuts, chunk_size) -> None:
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(20, 1)), rng.normal(size=20)
    secret = 98765.4321
    y[:] = secret
    chunks, i, j = [], 0, 0
    for nx, ny in cuts:
        chunks.append((X[i : i + nx], y[j : j + ny]))
        i, j = i + nx, j + ny
    Z = np.linspace(-1, 1, 3)[:, None]
    with pytest.raises(ValueError, match="each chunk must have the same number of rows") as err:
        sufficient_statistics(_kernel, Z, iter(chunks), chunk_size=chunk_size)
    assert "98765" not in str(err.value)


def test_aligned_chunks_are_still_summed_as_a_tuple() -> None:
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(23, 1)), rng.normal(size=23)
    Z = np.linspace(-1, 1, 3)[:, None]
    ref = sufficient_statistics(_kernel, Z, (X, y), chunk_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sufficient_statistics(
            _kernel, Z, iter([(X[:5], y[:5]), (X[5:5], y[5:5]), (X[5:], y[5:])]), chunk_size=4
        )
    np.testing.assert_array_equal(got.A, ref.A)
    np.testing.assert_array_equal(got.B, ref.B)
    assert got.n == ref.n == 23
