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
from pm_dpgp.workflow.thompson_tree import (
    NystromFeatures,
    all_releases_posterior,
    compress_leaf,
    dp_thompson_sampling_tree,
    posterior_root,
    public_inputs_posterior,
)
from tests.test_thompson import objective
from tests.test_thompson_tree import COV, _run

COUNTERS = {"sqrt": (plan_sqrt_counter, SqrtCounter), "tree": (plan_tree, TreeAggregator)}
pytestmark = pytest.mark.usefixtures("one_blas_thread")


def _loop(noise_sd=0.05, n_rounds=7, X_init=None, objective_fn=None, **kw):
    """The Nyström loop of tests/test_thompson_tree.py with a free model noise sd."""
    kw.setdefault("rng", np.random.default_rng(3))
    kw.setdefault("ledger", Ledger(epsilon=3.0, delta=1e-5))
    return dp_thompson_sampling_tree(
        objective(1003) if objective_fn is None else objective_fn,
        COV,
        domain=(0.0, 1.0),
        X_init=np.array([[0.1], [0.5], [0.9]]) if X_init is None else X_init,
        n_rounds=n_rounds,
        noise_sd=noise_sd,
        inducing=6,
        candidates=64,
        refine_steps=1,
        progressbar=False,
        **kw,
    )


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
    m_ref, S_ref = _brute_force(W, Y, Phi, leaf, sig, nv, np.full(len(leaf), offset))
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


def _brute_force(W, Y, Phi, leaf, sigma, noise_var, offsets):
    """Posterior of v from the joint Gaussian of all released coordinates (explicit inverse)."""
    H = W[:, leaf]
    P, M, n = W.shape[0], Phi.shape[1], len(leaf)
    F = np.einsum("pi,im->pmi", H, Phi).reshape(P * M, n)  # vec(Y) = F ξ + noise
    cov = F @ Phi @ Phi.T @ F.T + noise_var * F @ F.T + sigma**2 * np.eye(P * M)
    K = Phi.T @ F.T @ np.linalg.inv(cov)
    return K @ (Y.reshape(-1) - F @ offsets), np.eye(M) - K @ F @ Phi


@pytest.mark.parametrize("kind", ["sqrt", "tree"])
def test_a_leaf_of_many_records_compresses_to_at_most_M_pseudo_records(kind):
    """compress_leaf: a leaf of 9 records in M = 4 features gives 4 pseudo-records and the
    same posterior as the raw records (which the brute force conditions on directly)."""
    rng = np.random.default_rng(6)
    counter, plan, Phi, leaf = _stream(kind, rng, n0=9, t=5)
    W, Y = counter.release_weights()
    off = 0.3
    m_ref, S_ref = _brute_force(W, Y, Phi, leaf, plan.sigma, 0.2**2, np.full(len(leaf), off))
    parts = [compress_leaf(Phi[leaf == j], off) for j in range(5)]
    assert parts[0][0].shape == (4, 4) and parts[1][0].shape == (1, 4)
    Phi_c = np.vstack([p[0] for p in parts])
    leaf_c = np.concatenate([np.full(len(p[0]), j) for j, p in enumerate(parts)])
    off_c = np.concatenate([p[1] for p in parts])
    m, S = all_releases_posterior(W, Y, Phi_c, leaf_c, plan.sigma, 0.2**2, off_c)
    np.testing.assert_allclose(m, m_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(S, S_ref, rtol=1e-9, atol=1e-12)


def test_eigenbasis_fallback_gives_the_same_posterior(monkeypatch):
    """If a Cholesky factorisation fails, the eigenbasis form is used: same result."""
    rng = np.random.default_rng(7)
    counter, plan, Phi, leaf = _stream("sqrt", rng)
    W, Y = counter.release_weights()
    m0, S0 = all_releases_posterior(W, Y, Phi, leaf, plan.sigma, 0.3**2, 0.4)

    def refuse(*args, **kwargs):
        raise np.linalg.LinAlgError("forced")

    monkeypatch.setattr("pm_dpgp.workflow.thompson_tree.sla.cho_factor", refuse)
    m1, S1 = all_releases_posterior(W, Y, Phi, leaf, plan.sigma, 0.3**2, 0.4)
    np.testing.assert_allclose(m1, m0, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(S1, S0, rtol=1e-9, atol=1e-12)


def test_extreme_settings_complete_after_the_charge():
    """Stop-27 audit: 300 initial records, model noise far above the response range and a huge
    ε made the n × n Cholesky fail after the run was charged.  The initial leaf is now
    compressed to M pseudo-records and a failed factorisation falls back to the eigenbasis."""
    X0 = np.random.default_rng(0).uniform(0, 1, (300, 1))
    for counter, eps, sd, yb in (("sqrt", 1e6, 1.0, 1e-6), ("tree", 1e13, 10.0, 1e-3)):
        ledger = Ledger(epsilon=eps, delta=1e-5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = _loop(
                n_rounds=4,
                X_init=X0,
                ledger=ledger,
                privacy_model="label",
                counter=counter,
                noise_sd=sd,
                y_bounds=(-yb, yb),
                objective_fn=lambda X: 1e-4 * np.sin(5 * X[:, 0]),
            )
        assert res.n_rounds == 4 and res.stop_reason == "completed"


class _Snapshots:
    """Records, at every step, the counter's own (W, Y) and the posterior the loop used."""

    def __init__(self, cls):
        snaps = self

        class Recording(cls):
            def add(self, leaf):
                out = super().add(leaf)
                snaps.releases.append(super().release_weights())
                return out

        self.cls = Recording
        self.releases = []
        self.posteriors = []


@pytest.mark.parametrize("model", ["label", "full"])
@pytest.mark.parametrize("counter", ["tree", "sqrt"])
def test_the_loop_conditions_on_its_own_releases_and_published_inputs(counter, model):
    """Each round's posterior equals the brute-force posterior given the counter's releases so
    far, the features of the published inputs (leaf 1 = X_init, leaf t = x_chosen of round
    t − 1), the release σ, the model noise σ_o² and the offset μ − c, with μ off the midpoint
    of y_bounds so that a wrong or missing offset shows."""
    import pm_dpgp.workflow.thompson_tree as tt

    snaps = _Snapshots(tt.SqrtCounter if counter == "sqrt" else tt.TreeAggregator)
    inner = tt.all_releases_posterior

    def recording_posterior(*args):
        out = inner(*args)
        snaps.posteriors.append(out)
        return out

    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        mp.setattr(tt, "SqrtCounter" if counter == "sqrt" else "TreeAggregator", snaps.cls)
        mp.setattr(tt, "all_releases_posterior", recording_posterior)
        res = _loop(
            n_rounds=7,
            privacy_model=model,
            counter=counter,
            prior_mean=0.3,
            y_bounds=(-1.0, 2.0),
            noise_sd=0.2,
        )
    attrs = res.idata.thompson.attrs
    sigma = attrs["counter_release_sigma" if counter == "sqrt" else "tree_node_sigma"]
    feats = NystromFeatures(COV, np.linspace(0, 1, 6)[:, None], 0.2, 0.3)
    X = res.owner.X
    n0 = res.owner.n_init
    offset = 0.3 - 0.5  # μ − c: both models release the leaves centred at c (§13.5)
    assert len(snaps.posteriors) == len(snaps.releases) == 7
    for t, ((W, Y), (m, S)) in enumerate(
        zip(snaps.releases, snaps.posteriors, strict=True), start=1
    ):
        Phi = feats(X[: n0 + t - 1])
        leaf = np.r_[np.zeros(n0, dtype=np.intp), np.arange(1, t)]
        m_ref, S_ref = _brute_force(W, Y, Phi, leaf, sigma, 0.2**2, np.full(len(leaf), offset))
        np.testing.assert_allclose(m, m_ref, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(S, S_ref, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("model", ["label", "full"])
def test_published_trace_is_data_blind_with_the_sqrt_counter(model):
    """As test_published_trace_depends_on_y_only_through_the_releases, for the sqrt counter."""
    import pm_dpgp.workflow.thompson_tree as tt

    class Blind(tt.SqrtCounter):
        def __init__(self, plan, rng=None):
            super().__init__(plan, rng)
            self._blind = np.random.default_rng(99)

        def _noisy(self, v):
            return self.plan.sigma * self._blind.standard_normal(self.plan.dim)

    out = []
    for fn in (lambda X: np.sin(7 * X[:, 0]), lambda X: -3.0 * np.cos(9 * X[:, 0])):
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
            warnings.simplefilter("ignore")
            mp.setattr(tt, "SqrtCounter", Blind)
            out.append(_run(n_rounds=8, privacy_model=model, counter="sqrt", objective_fn=fn))
    assert not np.array_equal(out[0].owner.y, out[1].owner.y)
    th0, th1 = out[0].idata.thompson, out[1].idata.thompson
    for name in th0.data_vars:
        np.testing.assert_array_equal(th0[name], th1[name])
    assert th0.attrs == th1.attrs


@pytest.mark.parametrize("counter", ["tree", "sqrt"])
@pytest.mark.parametrize(
    ("mu", "bounds"), [(0.0, (-1.0, 1.0)), (0.3, (-1.0, 2.0)), (0.4, (0.1, 0.7))]
)
def test_full_and_label_runs_coincide_for_any_prior_mean(counter, mu, bounds):
    """Both models release the centred A-stream with Δ = R_φ (b − a) (§13.5), so for the same
    seed the published trace is the same, whatever μ (the stop-27 audit found float
    counter-examples when the full leaf was centred at μ instead)."""
    runs = {}
    for model in ("full", "label"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs[model] = _loop(
                n_rounds=6, privacy_model=model, counter=counter, prior_mean=mu, y_bounds=bounds
            )
    full, label = runs["full"].idata.thompson, runs["label"].idata.thompson
    for name in full.data_vars:
        np.testing.assert_array_equal(full[name], label[name])
    assert runs["full"].ledger.privacy_model == "full"
    assert runs["label"].ledger.privacy_model == "label"
    assert full.attrs["leaf_sensitivity"] == label.attrs["leaf_sensitivity"]


def test_posterior_scale_outside_the_safe_range_is_refused_before_the_charge():
    cases = (
        ((-1e200, 1e200), 0.05),  # σ⁻² underflows
        ((-1e-160, 1e-160), 0.05),  # σ⁻² overflows
        ((-1.0, 1.0), 1e-120),  # noise_sd out of range
        ((-1e-80, 1e-80), 1e80),  # σ_o² J overflows though σ and σ_o are in range
    )
    for bounds, sd in cases:
        ledger = Ledger(epsilon=3.0, delta=1e-5)
        rng = np.random.default_rng(0)
        state = rng.bit_generator.state
        # (±1e200 is refused first by the round-off margin's overflow check, stop 47)
        with pytest.raises(ValueError, match="outside|beyond float64"):
            _loop(n_rounds=3, y_bounds=bounds, noise_sd=sd, ledger=ledger, rng=rng)
        assert ledger.epsilon() == 0.0 and len(ledger.history) == 0
        assert rng.bit_generator.state == state


def test_partition_features_are_immutable_and_subclasses_are_refused():
    from pm_dpgp.workflow import DyadicPartitionFeatures

    feats = DyadicPartitionFeatures(0.0, 1.0, 3)
    with pytest.raises(AttributeError, match="immutable"):
        feats.weights = np.array([5.0, 5.0, 5.0])
    assert feats.R == pytest.approx(1.0)

    class Louder(DyadicPartitionFeatures):
        def __call__(self, X):
            return 10.0 * super().__call__(X)

    ledger = Ledger(epsilon=3.0, delta=1e-5)
    with pytest.raises(TypeError, match="DyadicPartitionFeatures"):
        dp_thompson_sampling_tree(
            objective(0), None, features=Louder(0.0, 1.0, 3), domain=(0.0, 1.0),
            X_init=np.array([[0.5]]), n_rounds=3, noise_sd=0.05, ledger=ledger,
            progressbar=False, rng=np.random.default_rng(0),
        )  # fmt: skip
    assert ledger.history == []


def test_copies_of_the_partition_basis_stay_immutable_and_the_loop_uses_its_own():
    """Stop-27 review: a pickled or deep-copied basis had writable weights, and the loop
    charged the old R_φ for them.  Copies now go through __init__ (read-only arrays), and the
    loop rebuilds the basis from its public parameters, so R_φ is that of the weights used."""
    import copy
    import pickle

    from pm_dpgp.workflow import DyadicPartitionFeatures

    feats = DyadicPartitionFeatures(0.0, 1.0, 2)
    for other in (copy.deepcopy(feats), pickle.loads(pickle.dumps(feats)), copy.copy(feats)):
        with pytest.raises(ValueError, match="read-only"):
            other.weights[:] = [6.0, 6.0]
        with pytest.raises(ValueError, match="read-only"):
            other.offsets[-1] = 3
        with pytest.raises(AttributeError, match="immutable"):
            del other.weights
        X = np.linspace(0, 1, 7)[:, None]
        np.testing.assert_array_equal(other(X), feats(X))
        assert other.R == feats.R
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling_tree(
            objective(0), None, features=feats, domain=(0.0, 1.0),
            X_init=np.array([[0.5]]), n_rounds=3, noise_sd=0.05,
            ledger=Ledger(epsilon=3.0, delta=1e-5), progressbar=False,
            rng=np.random.default_rng(0),
        )  # fmt: skip
    assert res.idata.thompson.attrs["leaf_sensitivity"] == pytest.approx(2.0 * feats.R)


@pytest.mark.parametrize("counter", ["tree", "sqrt"])
def test_sensitivity_equation_names_the_counter(counter):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _loop(n_rounds=3, counter=counter)
    eq = res.idata.thompson.attrs["sensitivity_equation"]
    assert eq.startswith("sqrt(L)" if counter == "tree" else "column_norm")


def test_posterior_root_is_a_root_and_continuous_under_round_off():
    """The draw ``m + R z`` must not jump when ``S`` changes by round-off (repeated eigenvalues).

    The eigenvector root of a covariance with a repeated eigenvalue rotates under a 1e-15
    perturbation (the draw moves by O(1)); the Cholesky root moves by O(1e-15).
    """
    rng = np.random.default_rng(3)
    M = 24
    U, _ = np.linalg.qr(rng.standard_normal((M, M)))
    S = (U * np.repeat([1.0, 0.3, 0.02], 8)) @ U.T
    E = 1e-15 * rng.standard_normal((M, M))
    z = rng.standard_normal(M)
    R = posterior_root(S)
    np.testing.assert_allclose(R @ R.T, S, atol=1e-13)
    assert np.max(np.abs(R @ z - posterior_root(S + E + E.T) @ z)) < 1e-12
    # the eigenvector root is not continuous here: the test can tell the two apart
    w, V = np.linalg.eigh(S + E + E.T)
    w0, V0 = np.linalg.eigh(S)
    eig_move = np.max(np.abs((V0 * np.sqrt(w0)) @ z - (V * np.sqrt(np.clip(w, 0, None))) @ z))
    assert eig_move > 1e-6


def test_posterior_root_falls_back_on_a_singular_covariance():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((10, 4))
    S = A @ A.T  # rank 4: Cholesky fails
    R = posterior_root(S)
    np.testing.assert_allclose(R @ R.T, S, atol=1e-10)
