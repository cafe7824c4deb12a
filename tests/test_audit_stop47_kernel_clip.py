"""Stop 47: the noise-aware and Dirichlet releases clip every computed kernel column to ``R_k``.

The sensitivity (Honkela eq. 6) assumes ``‖k(Z, x)‖ ≤ R_k`` for every record.  ``R_k`` is a
bound on the exact kernel (or the caller's ``kernel_norm``, used as is), while the statistics
use computed kernel columns: a wrong ``kernel_norm`` — or round-off — let one record move the
statistics by more than the charged sensitivity.  ``clip_columns`` now enforces the bound on
the returned floats (a record-wise map of public form), so the charge holds whatever ``R_k``
was given; for a correct ``R_k`` it changes nothing but columns within ulps of the bound.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pymc as pm
import pytest

import pm_dpgp.mechanisms.full.noise_aware as na
from pm_dpgp.gp.sparse import clip_columns, sufficient_statistics
from pm_dpgp.mechanisms import noise_aware_release
from pm_dpgp.mechanisms.full.noise_aware import whitened_statistics
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression


def _exact_norm_sq(col: np.ndarray) -> Fraction:
    return sum((Fraction(float(v)) ** 2 for v in col), Fraction(0))


@pytest.mark.parametrize("M", [1, 2, 7, 60])
def test_clipped_columns_are_within_the_bound_in_exact_arithmetic(M: int) -> None:
    rng = np.random.default_rng(M)
    K = rng.normal(size=(M, 400)) * 10.0 ** rng.uniform(-3, 3, 400)
    R = float(np.median(np.linalg.norm(K, axis=0)))
    # columns with norms within a few ulps of R, both sides: the hardest case for rounding
    K[:, :100] *= (R / np.linalg.norm(K[:, :100], axis=0)) * (1 + rng.integers(-8, 9, 100) * 2e-16)
    out = clip_columns(K, R)
    R_sq = Fraction(R) ** 2
    for j in range(K.shape[1]):
        assert _exact_norm_sq(out[:, j]) <= R_sq
    small = np.linalg.norm(K, axis=0) < 0.99 * R
    np.testing.assert_array_equal(out[:, small], K[:, small])  # untouched below the bound
    big = np.linalg.norm(K, axis=0) > 1.01 * R
    np.testing.assert_allclose(np.linalg.norm(out[:, big], axis=0), R, rtol=1e-13)


def _model(Z):
    X = np.linspace(0.0, 3.0, 20)
    return sparse_gp_regression(
        X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.5), Z=Z, noise_sd=0.3, mean=0.0
    ), X


def test_a_wrong_kernel_norm_no_longer_breaks_the_charged_sensitivity(monkeypatch) -> None:
    """kernel_norm = 0.5 while ‖k(Z, x)‖ reaches 1.4 for these inducing points: neighbouring
    datasets' statistics (recorded as the release privatises them) differ by at most the
    charged Δ + 2η; before, by 3.1 times it (3.149 against 1.000)."""
    Z = grid_inducing_points([0.0], [3.0], [4])
    model, X = _model(Z)
    seen: list[np.ndarray] = []

    def recording(stats, t, sigma_a, sigma_b, rng):
        seen.append(whitened_statistics(stats, 1.0))
        return stats.A[:, t].copy(), stats.B[t].copy()

    monkeypatch.setattr(na, "_privatise", recording)
    y = np.full(20, -1.0)
    y2 = y.copy()
    y2[7] = 1.0  # one record's output replaced, within y_bounds
    charged = []
    for outputs in (y, y2):
        rel = noise_aware_release(
            model, (X, outputs), epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 1.0),
            kernel_norm=0.5, rng=np.random.default_rng(0),
        )  # fmt: skip
        charged.append(rel.metadata["charged_sensitivity"])
    assert charged[0] == charged[1]
    moved = float(np.linalg.norm(seen[0] - seen[1]))
    assert moved <= charged[0]
    assert moved > 0.9 * 2 * 0.5  # the clipped record moves by ≈ |r − r'| R_k


def test_sufficient_statistics_clip_on_every_path() -> None:
    da = pytest.importorskip("dask.array")
    import dask

    Z = np.linspace(0, 1, 3)[:, None]
    X = np.random.default_rng(2).uniform(0, 1, (300, 1))
    y = np.ones(300)

    def kernel(Zc, Xc):
        return np.exp(-0.5 * (Zc - Xc.T) ** 2)  # column norms ≈ 1.5 > 1

    ref = sufficient_statistics(kernel, Z, (X, y), column_norm=1.0, chunk_size=64)
    assert np.all(np.diag(ref.B[0]) <= 300.0)
    it = sufficient_statistics(kernel, Z, iter([(X[:100], y[:100]), (X[100:], y[100:])]),
                               column_norm=1.0)  # fmt: skip
    with dask.config.set(scheduler="threads"):
        dk = sufficient_statistics(
            kernel, Z, (da.from_array(X, chunks=(70, 1)), da.from_array(y, chunks=70)),
            column_norm=1.0,
        )  # fmt: skip
    for s in (it, dk):
        np.testing.assert_allclose(s.A, ref.A, rtol=1e-12)
        np.testing.assert_allclose(s.B, ref.B, rtol=1e-12)
    # every clipped column has norm 1: trace(B) = Σ ‖k‖² ≤ 300
    assert np.trace(ref.B[0]) <= 300.0 and np.trace(ref.B[0]) > 299.0
