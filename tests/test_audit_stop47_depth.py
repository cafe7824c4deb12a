"""Stop 47: the summation depth no longer depends on how the caller chunked the data.

Until stop 47 the chunk sums were added one after another and the published depth (metadata
``summation_depth``, and through ``σ_a``) was ``(largest chunk) + (number of chunks)``: an
iterator whose chunks, or Dask blocks whose sizes, depended on private values (grouped by a
private column) revealed them exactly.  Now every chunk or block is cut into pieces of at most
``chunk_size`` rows and the pieces are added pairwise, so ``min(n, L) + 2⌈log₂ n⌉`` bounds every
path and is what is charged (docs/noise_aware.md §1).
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.gp.sparse import (
    _PairwiseSum,
    default_chunk_size,
    public_summation_depth,
    sufficient_statistics,
)
from pm_dpgp.mechanisms import dirichlet_release, noise_aware_release
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression


class _Term:
    """A value that records, for each chunk it contains, how many additions it went through."""

    def __init__(self, depths: dict[int, int]) -> None:
        self.depths = depths

    def __add__(self, other: _Term) -> _Term:
        merged = {k: v + 1 for k, v in self.depths.items()}
        merged.update({k: v + 1 for k, v in other.depths.items()})
        return _Term(merged)

    __iadd__ = __add__


@pytest.mark.parametrize("N", [*range(1, 70), 127, 128, 129, 1000, 1023, 1024, 1025])
def test_pairwise_sum_adds_each_chunk_at_most_ceil_log2_n_times(N: int) -> None:
    """The binary counter's bound (``_PairwiseSum`` docstring), counted addition by addition,
    and every chunk enters the total exactly once."""
    acc = _PairwiseSum(1, 1, 0)
    for i in range(N):
        A = np.empty((1, 1), dtype=object)
        A[0, 0] = _Term({i: 0})
        B = np.empty((1, 1, 1), dtype=object)
        B[0, 0, 0] = _Term({i: 0})
        acc.add(A, B, 1, np.zeros(0), rows=1)
        assert len(acc.levels) <= N.bit_length()  # at most ⌊log₂ N⌋ + 1 partial sums held
    A, B = acc.total()
    for total in (A[0, 0], B[0, 0, 0]):
        assert sorted(total.depths) == list(range(N))
        assert max(total.depths.values()) == math.ceil(math.log2(N))  # ⌈log₂ N⌉, attained
    assert acc.n == N and acc.rows == N


def _data(n: int = 600):
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 2, (n, 1))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y


def _private_chunks(X, y):
    """Chunks grouped by a private value (the sign of y): their sizes are private."""
    order = np.argsort(y > 0, kind="stable")
    Xs, ys = X[order], y[order]
    k = int(np.sum(y <= 0))
    return [(Xs[:k], ys[:k]), (Xs[k:], ys[k:])]


def _kernel(Zc, Xc):
    return np.exp(-0.5 * ((Zc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1))


def test_depth_is_the_same_for_every_chunking() -> None:
    X, y = _data()
    n = len(y)
    Z = np.linspace(0, 2, 5)[:, None]
    by_sign = _private_chunks(X, y)
    y2 = y.copy()
    y2[np.argmax(y)] = -1.0  # a neighbour: one record replaced, the groups' sizes change
    by_sign2 = _private_chunks(X, y2)
    assert len(by_sign[0][1]) != len(by_sign2[0][1])
    for L in (None, 64):
        expect = public_summation_depth(n, default_chunk_size(5) if L is None else L)
        depths = {
            sufficient_statistics(_kernel, Z, data, chunk_size=L).summation_depth
            for data in (
                (X, y),
                by_sign,
                by_sign2,
                iter([(X[i : i + 1], y[i : i + 1]) for i in range(n)]),
            )
        }
        assert depths == {expect}


def test_dask_blocks_sized_by_private_values_give_the_public_depth() -> None:
    da = pytest.importorskip("dask.array")
    import dask

    X, y = _data()
    n = len(y)
    Z = np.linspace(0, 2, 5)[:, None]
    ref = sufficient_statistics(_kernel, Z, (X, y), chunk_size=50)
    k = int(np.sum(y <= 0))
    order = np.argsort(y > 0, kind="stable")
    sizes = (k, 0, 0, n - k, 0)  # private block sizes, with empty blocks
    Xd = da.from_array(X[order], chunks=(sizes, 1))
    yd = da.from_array(y[order], chunks=(sizes,))
    with dask.config.set(scheduler="threads"):
        blocks = sufficient_statistics(_kernel, Z, (Xd, yd), chunk_size=None)
        pieces = sufficient_statistics(_kernel, Z, (Xd, yd), chunk_size=50)
    assert blocks.summation_depth == public_summation_depth(n, default_chunk_size(5))
    assert pieces.summation_depth == ref.summation_depth == public_summation_depth(n, 50)
    for s in (blocks, pieces):
        assert s.n == n
        np.testing.assert_allclose(s.A, ref.A, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(s.B, ref.B, rtol=1e-12, atol=1e-12)


def _model(X, y):
    Z = grid_inducing_points([0.0], [2.0], [6])
    return sparse_gp_regression(
        X[:, 0], y, pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.0
    )


@pytest.mark.parametrize("secure", [False, True])
def test_releases_of_any_chunking_equal_the_plan(secure: bool) -> None:
    """σ_a of a release from private-sized chunks equals the plan from n alone (before, the
    iterator's depth 2 + (largest chunk) differed from the tuple's, and the plan's)."""
    X, y = _data()
    model = _model(X, y)
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.5, 1.5), chunk_size=100)
    p = plan.noise_aware(model, secure=secure, n_records=len(y), **kw)
    for data in ((X, y), _private_chunks(X, y)):
        rel = noise_aware_release(
            model, data, rng=None if secure else np.random.default_rng(1), **kw
        )
        assert rel.metadata["summation_depth"] == public_summation_depth(len(y), 100)
        assert rel.metadata["sigma_a"] == p.sigma_a
        assert rel.metadata["summation_margin"] == p.summation_margin

    labels = (y > 0).astype(int)
    pub = model.public_sparse_gp()
    dkw = dict(n_classes=2, epsilon=1.0, delta=1e-4, chunk_size=100)
    dp = plan.dirichlet(pub, secure=secure, n_records=len(y), **dkw)
    grouped = [(X[labels == c], labels[labels == c]) for c in (0, 1)]
    drel = dirichlet_release(pub, grouped, rng=None if secure else np.random.default_rng(2), **dkw)
    assert drel.metadata["sigma_a"] == dp.sigma_a
    assert drel.metadata["summation_depth"] == public_summation_depth(len(y), 100)
