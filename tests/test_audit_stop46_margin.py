"""Stop-46: the noise-aware and Dirichlet releases charge the round-off of their sums.

The noise was calibrated to the exact-arithmetic sensitivity Δ of ``v = (A, c·B̂)``, while the
computed sums carry round-off ``e(D)`` with ``‖e(D)‖ ≤ η``, so neighbours' computed statistics
differ by up to ``Δ + 2η`` (docs/noise_aware.md §1).  The releases now calibrate to
``Δ + 2η`` with ``η = γ_h n B_rec`` (``h = summation_depth + 8``), after the statistics and
before any spend; plans with ``n_records`` give the same σ.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.sparse import (
    default_chunk_size,
    public_summation_depth,
    sufficient_statistics,
)
from pm_dpgp.mechanisms import dirichlet_release, noise_aware_release
from pm_dpgp.mechanisms.full import noise_aware as na
from pm_dpgp.mechanisms.full.dirichlet import (
    DirichletTargets,
    dirichlet_margin,
    dirichlet_record_norm,
)
from pm_dpgp.mechanisms.full.noise_aware import (
    l2_sensitivity,
    regression_margin,
    regression_record_norm,
    upper_vector,
    whitened_statistics,
)
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

U = Fraction(1, 2**53)


def _model(n: int = 200, M: int = 6):
    Z = grid_inducing_points([0.0], [2.0], [M])
    X = np.random.default_rng(3).uniform(0, 2, n)
    model = sparse_gp_regression(
        X, np.sin(3 * X), pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.3, mean=0.5
    )
    return model, X


# ------------------------------------------------------------------------ (a) the formula
@pytest.mark.parametrize(
    ("n", "depth", "R_y", "R_k", "c", "M"),
    [(10**4, 10**4 + 1, 1.0, 1.0, 1.0, 100), (10**6, 41967, 2.0, 2.13, 0.5, 100),
     (7, 9, 3.0, 0.2, 20.0, 3)],
)  # fmt: skip
def test_margin_is_twice_gamma_h_n_b_rec(n, depth, R_y, R_k, c, M) -> None:
    """2η against an exact rational γ_h n B_rec (h = depth + 8, Higham Lemma 3.1)."""
    margin = regression_margin(n, depth, R_y, R_k, c, M)
    h = depth + 8
    gamma = h * U / (1 - h * U)
    b_rec_sq = Fraction(R_y) ** 2 * Fraction(R_k) ** 2 + Fraction(c) ** 2 * Fraction(R_k) ** 4
    exact_sq = (2 * gamma * n) ** 2 * b_rec_sq  # (2 γ_h n B_rec)²
    assert Fraction(margin) ** 2 >= exact_sq
    assert Fraction(margin) ** 2 <= exact_sq * (1 + Fraction(1, 10**9)) ** 2
    # the record norm bound: ‖(r k, c t_b(k kᵀ))‖ for |r| = R_y and ‖k‖ = R_k is B_rec exactly
    k = np.random.default_rng(0).normal(size=M)
    k *= R_k / np.linalg.norm(k)
    v = np.concatenate([R_y * k, c * upper_vector(np.outer(k, k))])
    assert np.linalg.norm(v) == pytest.approx(regression_record_norm(R_y, R_k, c), rel=1e-12)


def test_dirichlet_record_norm_is_the_largest_record_contribution() -> None:
    """B_rec of the Dirichlet statistics: a record's whitened vector over all C classes."""
    C, c, M = 4, 1.7, 5
    tg = DirichletTargets.from_alpha(0.01)
    mu = tg.default_prior_mean(C)
    k = np.random.default_rng(1).uniform(0.1, 1.0, M)
    R_k = float(np.linalg.norm(k))
    w_out = tg.var_in / tg.var_out
    for label in range(C):
        parts = []
        for cls in range(C):
            w, r = (1.0, tg.y_in - mu) if cls == label else (w_out, tg.y_out - mu)
            parts.append(np.concatenate([w * r * k, c * w * upper_vector(np.outer(k, k))]))
        norm = float(np.linalg.norm(np.concatenate(parts)))
        assert norm == pytest.approx(dirichlet_record_norm(C, tg, mu, R_k, c), rel=1e-12)
    margin = dirichlet_margin(C, tg, mu, R_k, c, M, 1000, 1003)
    h = 1003 + 8
    expect = (
        2 * (h * 2.0**-53 / (1 - h * 2.0**-53)) * 1000 * dirichlet_record_norm(C, tg, mu, R_k, c)
    )
    assert expect <= margin <= expect * (1 + 1e-9)


# ------------------------------------------------------------- (b) an adversarial pair
def test_adversarial_neighbours_exceed_the_exact_change_and_stay_within_the_charge() -> None:
    """M = 1, k ≡ 1, n = 2²⁰ rows in 64-row chunks, the changed record first (r = +1 against
    r = −1).  Since stop 47 the 2¹⁴ chunk sums are added pairwise: chunk 2ʲ (j = 0…13) sums to
    3u and every other chunk except the first to 0, so the changed record's partial sum meets
    exactly one 3u at each of the 14 levels.  ``1 + 4ju + 3u`` is a tie and rounds up to
    ``1 + 4(j+1)u`` (ties to even), ``−1 + 3ju + 3u`` is exact: the computed sums differ by
    ``2 + 14u`` (``2 + 16u`` once rounded), more than the exact change 2, within ``Δ + 2η``."""
    n, L = 2**20, 64
    r = np.zeros(n)
    for j in range(14):
        r[(2**j) * L] = 3.0 * 2.0**-53  # one row per chunk: every chunk sum is exact
    Z = np.zeros((1, 1))

    def kernel(Zc, X):
        return np.ones((Zc.shape[0], X.shape[0]))

    def stats(first: float):
        rr = r.copy()
        rr[0] = first
        return sufficient_statistics(kernel, Z, (np.zeros((n, 1)), rr), chunk_size=L)

    s_plus, s_minus = stats(1.0), stats(-1.0)
    assert s_plus.summation_depth == s_minus.summation_depth == L + 2 * 20  # since stop 47
    assert s_plus.A[0, 0] == 1.0 + 56 * 2.0**-53 and s_minus.A[0, 0] == -1.0 + 42 * 2.0**-53
    c, R_y, R_k = 1.0, 1.0, 1.0
    measured = float(
        np.linalg.norm(whitened_statistics(s_plus, c) - whitened_statistics(s_minus, c))
    )
    exact = 2.0  # |r − r'| ‖k‖, and B is unchanged
    assert measured > exact  # the exact-arithmetic analysis does not bound the computed sums
    assert measured == exact + 16 * 2.0**-53
    Delta = l2_sensitivity(R_y, R_k, c)
    margin = regression_margin(n, s_plus.summation_depth, R_y, R_k, c, 1)
    assert measured <= exact + margin and measured <= Delta + margin


# ------------------------------------------------------------ release: charged, recorded
@pytest.mark.parametrize("secure", [False, True])
def test_release_charges_delta_plus_margin_and_records_it(secure) -> None:
    model, X = _model()
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0))
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    rel = noise_aware_release(
        model, ledger=ledger, rng=None if secure else np.random.default_rng(4), **kw
    )
    md = rel.metadata
    Delta = l2_sensitivity(md["R_y"], md["R_k"], md["ratio_c"])
    depth = public_summation_depth(len(X), default_chunk_size(6))
    margin = regression_margin(len(X), depth, md["R_y"], md["R_k"], md["ratio_c"], 6)
    assert md["l2_sensitivity"] == Delta
    assert md["summation_depth"] == depth == len(X) + 2 * 8  # min(n, L) + 2⌈log₂ n⌉
    assert md["summation_margin"] == margin > 0
    assert md["charged_sensitivity"] == Delta + margin
    if not secure:
        assert md["sigma_a"] == gaussian_sigma(1.0, 1e-5, Delta + margin)
        assert md["privacy_event"]["noise_multiplier"] == md["sigma_a"] / (Delta + margin)
    p = plan.noise_aware(model, secure=secure, n_records=len(X), **kw)
    assert p.sigma_a == md["sigma_a"] and p.lam == md["lambda"]
    assert p.summation_margin == margin and p.charged_sensitivity == Delta + margin
    assert ledger.epsilon(1e-5) == pytest.approx(p.ledger_epsilon, rel=1e-12)
    # without n_records the plan is at Δ: σ below the release's
    assert plan.noise_aware(model, secure=secure, **kw).sigma_a < p.sigma_a or secure


def test_a_refused_recalibration_spends_and_draws_nothing(monkeypatch) -> None:
    """Nothing is spent or drawn before the recalibration at Δ + 2η."""
    model, X = _model()

    def refuse(*args, **kwargs):
        raise ValueError("refused for the test")

    monkeypatch.setattr(na, "regression_margin", refuse)
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    rng = np.random.default_rng(4)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="refused for the test"):
        noise_aware_release(
            model, epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0), ledger=ledger, rng=rng
        )
    assert ledger.history == [] and ledger.spent_epsilon == 0.0
    assert rng.bit_generator.state == state


# ------------------------------------------------------------ (c) plan equals release
@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 37])
def test_plans_with_n_records_equal_the_releases(secure, chunk_size) -> None:
    model, X = _model()
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=(-1.0, 2.0), chunk_size=chunk_size)
    rel = noise_aware_release(model, rng=None if secure else np.random.default_rng(4), **kw)
    p = plan.noise_aware(model, secure=secure, n_records=len(X), **kw)
    assert p.sigma_a == rel.metadata["sigma_a"] and p.sigma_b == rel.metadata["sigma_b"]
    assert p.lam == rel.metadata["lambda"]
    expect_depth = (len(X) if chunk_size is None else 37) + 2 * math.ceil(math.log2(len(X)))
    assert rel.metadata["summation_depth"] == expect_depth

    lab = np.digitize(X, [0.7, 1.4])
    dkw = dict(n_classes=3, epsilon=1.0, delta=1e-4, chunk_size=chunk_size)
    pub = model.public_sparse_gp()
    drel = dirichlet_release(pub, (X, lab), rng=None if secure else np.random.default_rng(5), **dkw)
    dp = plan.dirichlet(pub, secure=secure, n_records=len(X), **dkw)
    assert dp.sigma_a == drel.metadata["sigma_a"] and dp.lam == drel.metadata["lambda"]
    assert dp.summation_margin == drel.metadata["summation_margin"] > 0
    assert drel.metadata["charged_sensitivity"] == dp.charged_sensitivity
    assert drel.metadata["l2_sensitivity"] == dp.l2_sensitivity


# ------------------------------------------------------------ (d) summation depth by layout
def test_summation_depth_of_every_layout() -> None:
    rng = np.random.default_rng(0)
    n = 1000
    X = rng.uniform(0, 2, (n, 1))
    y = rng.normal(size=n)
    Z = np.linspace(0, 2, 4)[:, None]

    def kernel(Zc, Xc):
        return np.exp(-0.5 * (Zc - Xc.T) ** 2)

    # since stop 47 one public depth for every layout: min(n, L) + 2⌈log₂ n⌉ (the pieces are
    # added pairwise), so that it reveals nothing about the caller's chunks or blocks
    ref = sufficient_statistics(kernel, Z, (X, y), chunk_size=300)
    assert ref.summation_depth == 300 + 2 * 10 == public_summation_depth(n, 300)
    assert sufficient_statistics(kernel, Z, (X, y)).summation_depth == n + 20
    # an iterator: chunks of 100 and 900 rows, the 900 split into 250-row pieces
    it = sufficient_statistics(
        kernel, Z, iter([(X[:100], y[:100]), (X[100:], y[100:])]), chunk_size=250
    )
    assert it.summation_depth == 250 + 20
    it2 = sufficient_statistics(kernel, Z, [(X[:100], y[:100]), (X[100:], y[100:])])
    assert it2.summation_depth == n + 20
    da = pytest.importorskip("dask.array")
    import dask

    Xd, yd = da.from_array(X, chunks=(300, 1)), da.from_array(y, chunks=300)
    with dask.config.set(scheduler="threads"):
        blocks = sufficient_statistics(kernel, Z, (Xd, yd))
        rechunked = sufficient_statistics(kernel, Z, (Xd, yd), chunk_size=128)
    assert blocks.summation_depth == n + 20  # blocks 300 300 300 100, default chunk size
    assert rechunked.summation_depth == 128 + 20
    for s in (it, it2, blocks, rechunked):
        np.testing.assert_allclose(s.A, ref.A, rtol=1e-12)
