"""The label-privacy posterior that conditions on every release of the counter (§13)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from pm_dpgp.accounting import Ledger
from pm_dpgp.audit import scan_for_values
from pm_dpgp.mechanisms.full.sqrt_counter import SqrtCounter, plan_sqrt_counter
from pm_dpgp.mechanisms.full.tree_aggregation import TreeAggregator, plan_tree
from pm_dpgp.workflow.thompson_tree import all_releases_posterior, public_inputs_posterior
from tests.test_thompson_tree import _run

COUNTERS = {"sqrt": (plan_sqrt_counter, SqrtCounter), "tree": (plan_tree, TreeAggregator)}
pytestmark = pytest.mark.usefixtures("one_blas_thread")


def _stream(kind, rng, M=4, n0=3, t=6, horizon=8, xi=None):
    """A counter fed with ``t`` leaves (``n0`` records in leaf 0, one record per later leaf)."""
    planner, cls = COUNTERS[kind]
    plan = planner(3.0, 1e-5, 2.0, horizon, M, secure=False)
    counter = cls(plan, rng)
    n = n0 + t - 1
    Phi = rng.normal(size=(n, M)) / 2
    leaf = np.r_[np.zeros(n0, dtype=np.intp), np.arange(1, t)]
    xi = rng.uniform(-1, 1, n) if xi is None else xi
    for j in range(t):
        counter.add((Phi[leaf == j] * xi[leaf == j, None]).sum(axis=0))
    return counter, plan, Phi, leaf


@pytest.mark.parametrize("kind", ["sqrt", "tree"])
def test_release_weights_reproduce_the_noiseless_releases(kind):
    """With the noise switched off, each counter's releases are exactly ``W L``."""
    rng = np.random.default_rng(0)
    planner, cls = COUNTERS[kind]
    counter = cls(planner(3.0, 1e-5, 2.0, 8, 4, secure=False), rng)
    counter._noisy = lambda v: v  # test instrumentation: noiseless releases
    L = rng.normal(size=(7, 4))
    for row in L:
        counter.add(row)
    W, Y = counter.release_weights()
    assert W.shape == (7, 7) and Y.shape == (7, 4)
    np.testing.assert_allclose(Y, W @ L, rtol=1e-13, atol=1e-13)
    assert np.all(np.triu(W, 1) == 0)  # release s uses leaves ≤ s only
    if kind == "sqrt":
        np.testing.assert_allclose(np.diag(W, -3), 0.3125, rtol=1e-15)  # c_3 = C(6,3)/4³
    else:
        # the node completed at step s covers the lowest-set-bit block of s
        np.testing.assert_array_equal(W.sum(axis=1), [1, 2, 1, 4, 1, 2, 1])


@pytest.mark.parametrize("kind", ["sqrt", "tree"])
@pytest.mark.parametrize("offset", [0.0, 0.4])
def test_matches_brute_force_gaussian_conditioning(kind, offset):
    """Against the posterior of v from the joint Gaussian of all T·M released coordinates."""
    rng = np.random.default_rng(1)
    counter, plan, Phi, leaf = _stream(kind, rng)
    W, Y = counter.release_weights()
    sig, nv = plan.sigma, 0.3**2
    m, S = all_releases_posterior(W, Y, Phi, leaf, sig, nv, offset)
    H = W[:, leaf]
    P, M, n = W.shape[0], Phi.shape[1], len(leaf)
    F = np.einsum("pi,im->pmi", H, Phi).reshape(P * M, n)  # vec(Y) = F ξ + noise
    cov = F @ Phi @ Phi.T @ F.T + nv * F @ F.T + sig**2 * np.eye(P * M)
    K = Phi.T @ F.T @ np.linalg.inv(cov)
    m_ref = K @ (Y.reshape(-1) - F @ np.full(n, offset))
    S_ref = np.eye(M) - K @ F @ Phi
    # 24 × 24 inverse with condition number < 1e3: agreement to ~1e-13
    np.testing.assert_allclose(m, m_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(S, S_ref, rtol=1e-9, atol=1e-12)


def test_one_release_of_the_whole_sum_is_the_prefix_posterior():
    rng = np.random.default_rng(2)
    Phi = rng.normal(size=(7, 4))
    Y = rng.normal(size=(1, 4))
    m, S = all_releases_posterior(np.ones((1, 7)), Y, Phi, np.arange(7), 2.0, 0.1, 0.0)
    m_ref, S_ref = public_inputs_posterior(Phi.T @ Phi, Y[0], 0.1, 2.0)
    np.testing.assert_allclose(m, m_ref, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(S, S_ref, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["sqrt", "tree"])
def test_at_least_as_concentrated_as_the_prefix_posterior_at_every_step(kind):
    """Ŝ_t is a linear function of the releases, so the precision given all of them
    dominates the precision given Ŝ_t (data processing), and strictly so once t ≥ 2."""
    rng = np.random.default_rng(3)
    planner, cls = COUNTERS[kind]
    M, T = 5, 12
    plan = planner(3.0, 1e-5, 2.0, T, M, secure=False)
    counter = cls(plan, rng)
    Phi = rng.normal(size=(T, M)) / 2
    gains = []
    for t in range(1, T + 1):
        est, k = counter.add(Phi[t - 1] * rng.uniform(-1, 1))
        W, Y = counter.release_weights()
        _, S_all = all_releases_posterior(W, Y, Phi[:t], np.arange(t), plan.sigma, 0.05**2, 0.0)
        sa = plan.sigma * np.sqrt(k)
        _, S_pre = public_inputs_posterior(Phi[:t].T @ Phi[:t], est, 0.05**2, sa)
        prec_pre = np.linalg.inv(S_pre)
        diff = np.linalg.inv(S_all) - prec_pre
        # round-off of two 5 × 5 inverses of condition < 10: far below 1e-9 of the scale
        assert np.linalg.eigvalsh(diff)[0] >= -1e-9 * np.abs(prec_pre).max()
        gains.append(np.trace(S_pre) - np.trace(S_all))
    assert max(gains[1:]) > 1e-3  # a real gain, not equality throughout


@pytest.mark.parametrize("kind", ["sqrt", "tree"])
def test_credible_ellipsoids_cover_the_true_coefficients(kind):
    """v ~ N(0, I), records y = φᵀv + N(0, σ_o²) unclipped: the exact posterior's 90 % ellipsoid
    holds the true v in 90 % of 400 simulated streams (binomial s.e. 1.5 %)."""
    rng = np.random.default_rng(4)
    M, n0, t, nv = 4, 3, 8, 0.3**2
    q90 = stats.chi2.ppf(0.9, M)
    hits = 0
    for _ in range(400):
        v = rng.normal(size=M)
        Phi = rng.normal(size=(n0 + t - 1, M)) / 2
        xi = Phi @ v + np.sqrt(nv) * rng.normal(size=len(Phi))
        planner, cls = COUNTERS[kind]
        plan = planner(10.0, 1e-5, 2.0, t, M, secure=False)
        counter = cls(plan, rng)
        leaf = np.r_[np.zeros(n0, dtype=np.intp), np.arange(1, t)]
        for j in range(t):
            counter.add((Phi[leaf == j] * xi[leaf == j, None]).sum(axis=0))
        W, Y = counter.release_weights()
        m, S = all_releases_posterior(W, Y, Phi, leaf, plan.sigma, nv, 0.0)
        r = v - m
        hits += float(r @ np.linalg.solve(S, r)) <= q90
    assert abs(hits / 400 - 0.9) < 0.05  # 3.3 s.e.; a wrong S scale moves it by far more


def test_posterior_is_checked_before_the_charge():
    for kw in ({"privacy_model": "label", "posterior": "bogus"}, {"posterior": None}):
        ledger = Ledger(epsilon=3.0, delta=1e-5)
        rng = np.random.default_rng(0)
        state = rng.bit_generator.state
        with pytest.raises(ValueError, match="posterior"):
            _run(ledger=ledger, rng=rng, **kw)
        assert ledger.epsilon() == 0.0 and len(ledger.history) == 0
        assert rng.bit_generator.state == state


@pytest.mark.parametrize("model", ["label", "full"])
@pytest.mark.parametrize("counter", ["tree", "sqrt"])
def test_both_posteriors_cost_the_same_and_are_recorded(counter, model):
    runs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for post in ("all_releases", "prefix"):
            runs[post] = _run(n_rounds=8, privacy_model=model, counter=counter, posterior=post)
    a, p = runs["all_releases"], runs["prefix"]
    assert a.ledger.epsilon() == p.ledger.epsilon() and a.events == p.events
    assert a.idata.thompson.attrs["posterior"] == "all_releases"
    assert p.idata.thompson.attrs["posterior"] == "prefix"
    # same noise stream, different posterior: the published queries differ after round 1
    assert not np.array_equal(a.idata.thompson.x_chosen, p.idata.thompson.x_chosen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _run(n_rounds=8, privacy_model=model, counter=counter)  # default: all releases
    np.testing.assert_array_equal(again.idata.thompson.x_chosen, a.idata.thompson.x_chosen)
    assert scan_for_values(a.idata, a.owner.y, rtol=1e-9) == []


def test_full_privacy_all_releases_releases_the_A_stream_alone():
    """Under full privacy the default posterior takes B from the published inputs, so the
    counter releases the M-dimensional A-stream with leaf sensitivity 2 R_y R_φ (§13.5);
    posterior="prefix" keeps the (A, c B̂) stream of eq. (6)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _run(n_rounds=5, privacy_model="full", y_bounds=(-1.0, 1.0))
        p = _run(n_rounds=5, privacy_model="full", y_bounds=(-1.0, 1.0), posterior="prefix")
    M = a.idata.thompson.attrs["n_features"]
    R_phi = a.idata.thompson.attrs["feature_norm"]
    assert a.idata.thompson.attrs["tree_leaf_sensitivity"] == pytest.approx(2 * 1.0 * R_phi)
    assert "A-stream only" in a.idata.thompson.attrs["sensitivity_equation"]
    assert a.idata.thompson.attrs["released_dim"] == M
    assert p.idata.thompson.attrs["released_dim"] == M + M * (M + 1) // 2
    # eq. (6) at R_y = c = R_φ = 1: √4.5 > 2
    assert p.idata.thompson.attrs["tree_leaf_sensitivity"] == pytest.approx(math.sqrt(4.5) * R_phi)
    assert a.ledger.privacy_model == p.ledger.privacy_model == "full"
    assert set(a.idata.thompson["lambda_used"].values) == {0.0}
