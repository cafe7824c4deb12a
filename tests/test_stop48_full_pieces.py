"""Stop 48: an iterator's rows are regrouped into full pieces of ``chunk_size`` rows.

Until stop 48 each chunk of an iterable was cut on its own, so an iterator of one-row chunks made
``n`` pieces: ``n`` kernel calls and products of one row, and ``⌊log₂ n⌋ + 1`` partial sums held by
the pairwise sum instead of ``⌊log₂ ⌈n/L⌉⌋ + 1``.  Now the rows are regrouped
(``pm_dpgp.gp.sparse._full_pieces``) into the pieces a tuple ``(X, y)`` is cut into, so the
statistics are the same bits however the caller chunked them.
"""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.gp.sparse import _full_pieces, sufficient_statistics


def _kernel_counting(calls: list[int]):
    def kernel(Zc, Xc):
        calls.append(len(Xc))
        return np.exp(-0.5 * ((Zc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1))

    return kernel


def _data(n: int = 1000):
    rng = np.random.default_rng(11)
    X = rng.uniform(0, 2, (n, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def _random_chunks(X, y, seed: int):
    """The rows in chunks of random sizes (some empty, some longer than the piece size)."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, len(y) + 1, size=rng.integers(1, 40)))
    edges = [0, *cuts.tolist(), len(y)]
    return [(X[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("L", [1, 7, 64, 1000, 4096])
def test_iterator_statistics_are_the_tuple_statistics_bit_for_bit(seed: int, L: int) -> None:
    X, y = _data()
    Z = np.array([[0.2, 0.3], [1.0, 1.1], [1.7, 0.4]])
    calls_ref: list[int] = []
    ref = sufficient_statistics(_kernel_counting(calls_ref), Z, (X, y), chunk_size=L)
    calls: list[int] = []
    got = sufficient_statistics(
        _kernel_counting(calls), Z, iter(_random_chunks(X, y, seed)), chunk_size=L
    )
    assert calls == calls_ref  # the same pieces: ⌈n/L⌉ kernel calls of L rows (last shorter)
    assert len(calls) == -(-len(y) // L)
    np.testing.assert_array_equal(got.A, ref.A)
    np.testing.assert_array_equal(got.B, ref.B)
    assert got.n == ref.n and got.summation_depth == ref.summation_depth


def test_one_row_chunks_make_full_pieces() -> None:
    X, y = _data(300)
    Z = X[:4] + 0.01
    calls: list[int] = []
    sufficient_statistics(
        _kernel_counting(calls),
        Z,
        ((X[i : i + 1], y[i : i + 1]) for i in range(300)),
        chunk_size=128,
    )
    assert calls == [128, 128, 44]


def test_chunks_of_another_layout_are_not_joined_and_still_summed() -> None:
    """1-d and 2-d inputs (and masked arrays) in consecutive chunks: the rows held so far form a
    shorter piece; every row is summed once, as in the tuple path."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 2, 50)
    y = rng.normal(size=50)
    chunks = [(X[:10, None], y[:10]), (X[10:25], y[10:25]), (X[25:], y[25:])]
    pieces = list(_full_pieces(iter(chunks), 8))
    assert [len(p[0]) for p in pieces] == [8, 2, 8, 8, 8, 8, 8]
    masked = np.ma.masked_array(y[25:], mask=np.arange(25) % 5 == 0)
    joined = list(_full_pieces(iter([(X[:25, None], y[:25]), (X[25:, None], masked)]), 30))
    assert [len(p[0]) for p in joined] == [25, 25]  # masked rows are not joined to plain ones
    assert isinstance(joined[1][1], np.ma.MaskedArray)
    both = list(_full_pieces(iter([(X[:20, None], masked[:20]), (X[20:45, None], masked[5:])]), 30))
    assert [len(p[0]) for p in both] == [30, 15]
    assert isinstance(both[0][1], np.ma.MaskedArray)
    np.testing.assert_array_equal(
        np.ma.getmaskarray(both[0][1])[:20], np.ma.getmaskarray(masked[:20])
    )
    Z = np.array([[0.5], [1.5]])
    mixed = sufficient_statistics(_kernel_counting([]), Z, iter(chunks), chunk_size=8)
    ref = sufficient_statistics(_kernel_counting([]), Z, (X[:, None], y), chunk_size=8)
    np.testing.assert_allclose(mixed.A, ref.A, rtol=1e-13)
    np.testing.assert_allclose(mixed.B, ref.B, rtol=1e-13)
    assert mixed.n == ref.n == 50
