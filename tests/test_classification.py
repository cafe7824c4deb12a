"""DP GP classification (Smith et al. 2021 §4): Laplace algebra, the one-step cloaked release.

References computed here independently of the library: a Newton iteration on the log
posterior with the dense Hessian ``−(K⁻¹ + W)`` (``np.linalg.solve``, no B-factorisation), and
the cloaking matrix ``K*f (I + W K)⁻¹`` by a dense LU solve.  Tolerances: ``cond_rtol`` of the
matrix solved with (tests/tolerances.py), or the Newton stopping tolerance where stated.
"""

from __future__ import annotations

import copy
import io
from types import SimpleNamespace

import numpy as np
import pymc as pm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from pm_dpgp.accounting import BudgetExceededError, Ledger
from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import to_netcdf
from pm_dpgp.datasets import load_hmeq
from pm_dpgp.gp.laplace import (
    laplace_mode,
    one_step_matrix,
    probit_averaged_probability,
    sor_one_step_matrix,
)
from pm_dpgp.mechanisms.label.classification import (
    class_probabilities,
    classification_release,
    one_step_cloaking,
)
from pm_dpgp.models import PrivateHyperparameterError
from pm_dpgp.models.classification import gp_classification
from tests.tolerances import EPS, assert_normwise_close, cond_rtol

from .test_cloaked_release import (
    _assert_in_noise_range,
    _assert_within_sensitivity,
    _draw_rounding,
    _privacy_losses,
)


def _data(seed: int, n: int = 40):
    """Well-spaced 1-D inputs (spacing 10/n, jittered by ±10%), labels from a smooth logit."""
    rng = np.random.default_rng(seed)
    X = (np.linspace(0, 10, n) + rng.uniform(-0.1, 0.1, n) * 10 / n)[:, None]
    t = (rng.uniform(size=n) < expit(np.sin(X[:, 0]) * 2.0)).astype(float)
    return X, t


def _newton_reference(K, t, mean, steps=200, f0=None):
    """Independent Newton iteration on Ψ(f) = log p(t|f) − ½(f−μ)ᵀK⁻¹(f−μ) (dense solves)."""
    n = len(t)
    Kinv = np.linalg.inv(K)
    f = np.full(n, mean) if f0 is None else f0.copy()
    for _ in range(steps):
        pi = expit(f)
        grad = t - pi - Kinv @ (f - mean)
        hess = Kinv + np.diag(pi * (1 - pi))
        step = np.linalg.solve(hess, grad)
        f = f + step
        if np.max(np.abs(step)) < 1e-13:
            break
    return f


@pytest.fixture(scope="module")
def small():
    X, t = _data(0, n=20)  # κ(K) ≈ 1e3: the dense K⁻¹ of the reference is accurate
    model = gp_classification(X, t, 2.0 * pm.gp.cov.ExpQuad(1, ls=0.6), mean=-0.3)
    return model, model.public_gp(), t


def test_laplace_mode_and_predictions_match_independent_newton(small):
    model, pub, t = small
    K = pub.K
    state = pub.laplace(t, tol=1e-13)
    assert state.converged and state.n_iter < 20
    ref = _newton_reference(K, t, pub.mean)
    hess = np.linalg.inv(K) + np.diag(expit(ref) * (1 - expit(ref)))
    assert_normwise_close(state.f, ref, cond_rtol(hess) + 1e-12)
    # mode equation f̂ = μ + K (t − π(f̂)) (R&W eq. 3.17)
    assert_normwise_close(state.f, pub.mean + K @ (t - expit(state.f)), cond_rtol(hess))
    Xs = np.linspace(-1, 11, 9)[:, None]
    mu, var = pub.predict(t, Xs)
    Ks = pub.kernel(Xs, pub.X)
    w = expit(ref) * (1 - expit(ref))
    mu_ref = pub.mean + Ks @ np.linalg.solve(K, ref - pub.mean)  # k*ᵀ K⁻¹ (f̂ − μ)
    var_ref = pub.kernel_diag(Xs) - np.einsum(
        "ij,ji->i", Ks, np.linalg.solve(K + np.diag(1 / w), Ks.T)
    )
    tol = cond_rtol(K) * 10
    assert_normwise_close(mu, mu_ref, tol)
    assert_normwise_close(var, var_ref, cond_rtol(K + np.diag(1 / w)))
    # probit approximation against its closed form and against quadrature (approximation error)
    p = probit_averaged_probability(mu, var)
    np.testing.assert_allclose(p, expit(mu / np.sqrt(1 + np.pi * var / 8)), rtol=1e-14)
    g, wq = np.polynomial.hermite_e.hermegauss(80)
    quad = (expit(mu[:, None] + np.sqrt(var)[:, None] * g[None]) @ wq) / np.sqrt(2 * np.pi)
    assert np.max(np.abs(p - quad)) < 0.02  # MacKay's approximation is within 0.02 here


def test_one_step_is_one_newton_step_and_paper_matrix(small):
    model, pub, t = small
    K = pub.K
    f0 = np.linspace(-1, 1, pub.n)
    one = laplace_mode(K, t, mean=pub.mean, f0=f0, max_iter=1)
    ref = _newton_reference(K, t, pub.mean, steps=1, f0=f0)
    assert_normwise_close(one.f, ref, cond_rtol(K) * 10)
    # released vector at X* = X is the one-step f̂, with C* = (K⁻¹ + W)⁻¹ = 2 C_paper (eq. 11)
    C, offset, _, _ = one_step_cloaking(pub, pub.X, f0=f0)
    w = expit(f0) * (1 - expit(f0))
    C_paper = 0.5 * np.linalg.inv(np.linalg.inv(K) + np.diag(w))
    assert_normwise_close(C, 2 * C_paper, cond_rtol(K))
    assert_normwise_close(offset + C @ t, ref, cond_rtol(K) * 10)
    # the paper's labels y = 2t − 1 and d = 2 give the same vector: C_paper·y = C t − C_paper·1
    y = 2 * t - 1
    assert_normwise_close(C_paper @ y + C_paper @ np.ones(pub.n), C @ t, cond_rtol(K))


@pytest.mark.parametrize("weights", ["constant", "varying"])
def test_sor_matrix_matches_dense_and_equals_exact_with_all_points(weights):
    """Against the dense formula, with a constant ``W₀`` and with the ``W₀ = π(1 − π)`` of a
    random public linearisation point (stop-37 audit: a mutant replacing ``W₀`` by its mean,
    10.9 % wrong here, passed with the constant weights alone)."""
    X, t = _data(1, n=12)
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=0.8))
    pub = model.public_gp()
    Xs = np.linspace(0, 10, 7)[:, None]
    if weights == "constant":
        w = np.full(pub.n, 0.2)
    else:
        f0 = 2.5 * np.random.default_rng(3).standard_normal(pub.n)
        w = expit(f0) * (1 - expit(f0))
        assert w.max() / w.min() > 5  # the weights really vary
    Z = np.linspace(0, 10, 6)[:, None]
    C, var, _ = sor_one_step_matrix(pub.kernel(Z), pub.kernel(Z, X), pub.kernel(Z, Xs), np.sqrt(w))
    Kmm = pub.kernel(Z)
    Q = pub.kernel(X, Z) @ np.linalg.solve(Kmm, pub.kernel(Z, X))
    Qs = pub.kernel(Xs, Z) @ np.linalg.solve(Kmm, pub.kernel(Z, X))
    A = Q + np.diag(1 / w)
    C_ref = np.linalg.solve(A, Qs.T).T / w[None, :]  # Q*f (Q + W⁻¹)⁻¹ W⁻¹
    A_m = Kmm + pub.kernel(Z, X) @ np.diag(w) @ pub.kernel(X, Z)
    tol = cond_rtol(A_m) * 10
    assert_normwise_close(C, C_ref, tol)
    var_ref = np.einsum("ij,ji->i", pub.kernel(Xs, Z), np.linalg.solve(A_m, pub.kernel(Z, Xs)))
    assert_normwise_close(var, var_ref, tol)
    # with every training input as inducing input, SoR is the exact model (Q = K)
    # (the variances differ: SoR's prior variance at X* is Q**, not k**: its known degeneracy)
    Ce, _ = one_step_matrix(pub.K, pub.kernel(Xs, X), pub.kernel_diag(Xs), np.sqrt(w))
    Cs, _, _ = sor_one_step_matrix(pub.K, pub.K, pub.kernel(X, Xs), np.sqrt(w))
    assert_normwise_close(Cs, Ce, cond_rtol(pub.K) * 10)


def _dense_one_step(pub, X_star, f0):
    w = expit(f0) * (1 - expit(f0))
    A = np.eye(pub.n) + w[:, None] * pub.K  # I + W K
    return np.linalg.solve(A.T, pub.kernel(pub.X, X_star)).T, A


_PROPERTY = dict(
    seed=st.integers(0, 10_000),
    n=st.integers(3, 30),
    m=st.integers(1, 25),
    dim=st.integers(1, 2),
    ls=st.floats(0.3, 5.0),
    scale=st.floats(0.2, 4.0),
    f0_scale=st.floats(0.0, 3.0),
)


@settings(max_examples=10, deadline=None)
@given(kernel=st.just("expquad"), **_PROPERTY)
def test_mahalanobis_sensitivity_property(seed, n, m, dim, kernel, ls, scale, f0_scale):
    """Default run: the EQ kernel (compiled once for the module; see the slow variant)."""
    _check_sensitivity(seed, n, m, dim, kernel, ls, scale, f0_scale)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(kernel=st.sampled_from(["expquad", "sum"]), **_PROPERTY)
def test_mahalanobis_sensitivity_property_more_kernels(
    seed, n, m, dim, kernel, ls, scale, f0_scale
):
    """More examples and a sum kernel (each new kernel structure costs a PyTensor compile)."""
    _check_sensitivity(seed, n, m, dim, kernel, ls, scale, f0_scale)


def _check_sensitivity(seed, n, m, dim, kernel, ls, scale, f0_scale):
    """Every single-label flip moves the released latent vector by at most the calibrated
    Mahalanobis sensitivity; the worst flip, released with the same noise, agrees."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, dim))
    X_star = rng.uniform(-2, 12, (m, dim))
    t = (rng.uniform(size=n) < 0.5).astype(float)
    cov = {
        "expquad": scale * pm.gp.cov.ExpQuad(dim, ls=ls),
        "sum": scale * pm.gp.cov.ExpQuad(dim, ls=ls) + 0.3 * pm.gp.cov.Matern52(dim, ls=2 * ls),
    }[kernel]
    f0 = f0_scale * rng.standard_normal(n)  # a public linearisation point
    model = gp_classification(X, t, cov)
    pub = model.public_gp()
    kw = dict(epsilon=1.0, delta=1e-3, f0=f0)
    if np.max(np.abs(pub.kernel(X_star, X))) < np.finfo(np.float64).tiny:
        with pytest.raises(ValueError):
            classification_release(model, X_star, rng=np.random.default_rng(1), **kw)
        return
    release = classification_release(model, X_star, rng=np.random.default_rng(1), **kw)
    C, A = _dense_one_step(pub, X_star, f0)
    vec_err = cond_rtol(A) * float(np.linalg.norm(C))
    norms = _assert_within_sensitivity(release, C, vec_err)
    j = int(np.argmax(norms))
    t2 = t.copy()
    t2[j] = 1.0 - t[j]  # adversarial flip of the most exposed label
    neighbour = copy.copy(model)  # same public model (compiled kernel), one label changed
    neighbour._y = t2
    release2 = classification_release(neighbour, X_star, rng=np.random.default_rng(1), **kw)
    diff = release2.draws[0] - release.draws[0]
    rounding = _draw_rounding(
        release, SimpleNamespace(mean=0.0), C, [t, t2], [release.draws, release2.draws]
    )
    _assert_in_noise_range(release, diff[:, None], rounding)
    _assert_within_sensitivity(release, diff[:, None], rounding)


@pytest.mark.parametrize("calibration", ["analytic", "classic"])
def test_monte_carlo_privacy_loss(calibration):
    """Hockey-stick divergence of the actual release on the adversarial label flip ≤ δ."""
    eps, delta = 1.0, 0.01
    X, t = _data(3, n=60)
    cov = 2.0 * pm.gp.cov.ExpQuad(1, ls=1.0)
    Xs = np.linspace(-2, 12, 30)[:, None]
    pub = gp_classification(X, t, cov).public_gp()
    C, _, _, _ = one_step_cloaking(pub, Xs)
    r0 = classification_release(
        gp_classification(X, t, cov), Xs, epsilon=eps, delta=delta, rng=np.random.default_rng(5)
    )
    coef, *_ = np.linalg.lstsq(r0.noise_factor, C, rcond=None)
    j = int(np.argmax(np.linalg.norm(coef, axis=0)))
    t_low, t_high = t.copy(), t.copy()
    t_low[j], t_high[j] = 0.0, 1.0
    r1, r2 = (
        classification_release(
            gp_classification(X, tt, cov),
            Xs,
            epsilon=eps,
            delta=delta,
            calibration=calibration,
            rng=np.random.default_rng(3),
        )
        for tt in (t_low, t_high)
    )
    n = 400_000
    losses = _privacy_losses(
        r1, np.zeros(30), r2.draws[0] - r1.draws[0], n, np.random.default_rng(11)
    )
    hs = np.clip(1.0 - np.exp(eps - losses), 0.0, None)
    margin = 4.0 * hs.std() / np.sqrt(n)
    assert hs.mean() <= delta + margin
    if calibration == "analytic":
        assert hs.mean() >= delta - margin  # tight on the worst flip: not over-noised


def test_release_metadata_ledger_probabilities_and_idata():
    X, t = load_hmeq(("DELINQ",))
    X, t = X[:200], t[:200]
    model = gp_classification(X, t, 1.0 * pm.gp.cov.ExpQuad(1, ls=4.0))
    ledger = Ledger(epsilon=2.0, delta=1e-3, filter="zcdp")  # simulation then secure events
    grid = np.arange(0.0, 15.0)[:, None]
    r = classification_release(
        model, grid, epsilon=1.0, delta=1e-4, ledger=ledger, rng=np.random.default_rng(0)
    )
    assert len(ledger.history) == 1
    md = r.metadata
    assert md["privacy_model"] == "label" and md["data_sensitivity"] == 1.0
    assert md["approximation"] == "exact" and md["noise_source"] == "numpy_simulation"
    assert md["l2_sensitivity"] == pytest.approx(np.sqrt(md["max_mahalanobis"]), rel=1e-5)
    for average in (False, True):
        for noise in (False, True):
            p = class_probabilities(r, average=average, include_dp_noise=noise)
            assert p.shape == (1, 15) and np.all((p >= 0) & (p <= 1))
    # extreme noise still gives valid probabilities
    r_noisy = classification_release(
        model, grid, epsilon=1e-3, delta=1e-4, rng=np.random.default_rng(1)
    )
    p = class_probabilities(r_noisy)
    assert np.all(np.isfinite(p) & (p >= 0) & (p <= 1))
    # secure default and the SoR variant (k-means inducing inputs recorded)
    rs = classification_release(
        model, grid, epsilon=1.0, delta=1e-4, inducing_points=4, ledger=ledger
    )
    assert rs.metadata["noise_source"] == "opendp_discrete_gaussian"
    assert rs.metadata["approximation"] == "SoR" and len(rs.metadata["inducing_inputs"]) == 4
    assert len(ledger.history) == 2
    idata = r.to_inference_data()
    # latent values, not outcomes: no posterior_predictive copy (stop 38; it had one)
    assert "posterior" in idata and "posterior_predictive" not in idata


def test_leak_scan_finds_no_private_label_or_non_private_value():
    X, t = load_hmeq(("DELINQ", "NINQ"))
    X, t = X[:150], t[:150]
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(2, ls=3.0))
    pub = model.public_gp()
    Xs = X[:40]
    r = classification_release(model, Xs, epsilon=1.0, delta=1e-4, rng=np.random.default_rng(2))
    idata = r.to_inference_data()
    C, offset, _, _ = one_step_cloaking(pub, Xs)
    mode_pred, _ = pub.predict(t, Xs)
    private = np.concatenate([offset + C @ t, pub.laplace(t).f, mode_pred])
    assert scan_for_values(idata, private) == []
    # the label vector as a whole (in any common encoding) is not in the serialised bytes
    buf = io.BytesIO()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = to_netcdf(idata, f"{tmp}/r.nc")
        blob = open(path, "rb").read()
    del buf
    for enc in (t.astype("<f8"), t.astype(">f8"), t.astype(np.int8), t.astype("<i8")):
        assert enc.tobytes() not in blob
    assert str(t.astype(int).tolist()) not in blob.decode("latin-1")


def test_bad_input_refused_before_spending():
    X, t = _data(4, n=20)
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=1.0))
    ledger = Ledger(epsilon=1.0, delta=1e-3)
    Xs = np.linspace(0, 10, 5)[:, None]
    bad_calls = [
        dict(X_star=np.array([[np.nan]])),
        dict(X_star=np.ones((3, 2))),
        dict(f0=np.zeros(7)),
        dict(f0=np.full(20, np.inf)),
        dict(epsilon=0.0),
        dict(delta=1.5),
        dict(inducing_points=np.ones((3, 2))),
        dict(hyperparameters={"nope": 1.0}),
        dict(n_draws=0),
    ]
    for bad in bad_calls:
        kw = dict(X_star=Xs, epsilon=0.5, delta=1e-4, ledger=ledger, rng=np.random.default_rng(0))
        kw.update(bad)
        with pytest.raises((ValueError, TypeError)):
            classification_release(model, **kw)
        assert len(ledger.history) == 0, bad
    classification_release(
        model, Xs, epsilon=0.9, delta=1e-4, ledger=ledger, rng=np.random.default_rng(0)
    )
    with pytest.raises(BudgetExceededError):
        classification_release(
            model, Xs, epsilon=0.9, delta=1e-4, ledger=ledger, rng=np.random.default_rng(1)
        )
    assert len(ledger.history) == 1
    with pytest.raises(TypeError):
        classification_release(object(), Xs, epsilon=1.0, delta=1e-4)  # type: ignore[arg-type]


def test_hyperparameters_with_priors_need_public_values():
    X, t = _data(5, n=15)
    model = gp_classification(X, t, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)))
    with pytest.raises(PrivateHyperparameterError):
        classification_release(model, X[:3], epsilon=1.0, delta=1e-4)
    r = classification_release(
        model,
        X[:3],
        epsilon=1.0,
        delta=1e-4,
        hyperparameters={"ell": 2.0},
        rng=np.random.default_rng(0),
    )
    assert r.metadata["hyperparameters"] == {"ell": 2.0}


@pytest.mark.slow
def test_pymc_builder_map_equals_laplace_mode():
    """The PyMC model (pm.gp.Latent + Bernoulli) has its MAP at the Laplace mode."""
    X, t = _data(6, n=15)
    model = gp_classification(X, t, 1.5 * pm.gp.cov.ExpQuad(1, ls=2.0), mean=0.2)
    with model.model:
        map_est = pm.find_MAP(progressbar=False, maxeval=5000)
    mode = model.public_gp().laplace(t).f
    # PyMC adds 1e-6 jitter to K in Latent.prior; find_MAP stops at its own gradient tolerance
    np.testing.assert_allclose(map_est["f"], mode, atol=1e-3)


def test_n_iter_and_max_iter_validation():
    K = np.eye(3)
    with pytest.raises(ValueError):
        laplace_mode(K, np.zeros(3), max_iter=0)
    s = laplace_mode(K, np.array([0.0, 1.0, 1.0]), tol=1e-14)
    assert s.converged and EPS > 0


def test_hmeq_loader_and_regression_mechanisms_refuse_classification_models():
    X, bad = load_hmeq(("DELINQ", "CLAGE"))
    assert X.shape == (800, 2) and set(np.unique(bad)) == {0.0, 1.0} and bad.mean() == 0.5
    with pytest.raises(ValueError):
        load_hmeq(("BAD",))
    from pm_dpgp.mechanisms import cloaked_release

    model = gp_classification(X[:20, :1], bad[:20], pm.gp.cov.ExpQuad(1, ls=4.0))
    with pytest.raises(TypeError, match="classification_release"):
        cloaked_release(model, X[:3, :1], epsilon=1.0, delta=1e-3, y_bounds=(0.0, 1.0))


def test_pm_set_data_reaches_the_release_and_the_pymc_model():
    """Stop-26 audit: ``gp_classification`` snapshotted ``pm.Data`` containers, so a release
    after ``pm.set_data`` used the old labels (and the PyMC likelihood stayed constant).  Now
    a release after ``pm.set_data`` equals one of a model built with the new labels, a
    non-finite new label is mapped record-wise (no refusal), and a wrong label count is a
    clear error before any spend."""
    X = np.linspace(0.0, 5.0, 12)[:, None]
    new = (np.arange(12) % 3 == 0).astype(float)
    cov = pm.gp.cov.ExpQuad(1, ls=1.5)
    X_star = np.linspace(0.0, 5.0, 7)[:, None]
    with pm.Model() as m:
        model = gp_classification(pm.Data("X", X), pm.Data("t", np.zeros(12)), cov)
    pm.set_data({"t": new}, model=m)
    fresh = gp_classification(X, new, cov)
    kw = dict(epsilon=1.0, delta=1e-5)
    a = classification_release(model, X_star, rng=np.random.default_rng(3), **kw)
    b = classification_release(fresh, X_star, rng=np.random.default_rng(3), **kw)
    np.testing.assert_allclose(a.draws, b.draws, rtol=0, atol=1e-12)
    logp = m.compile_logp()(m.initial_point())
    assert np.isclose(logp, fresh.model.compile_logp()(fresh.model.initial_point()))
    pm.set_data({"t": np.where(np.arange(12) == 4, np.nan, new)}, model=m)
    classification_release(model, X_star, rng=np.random.default_rng(4), **kw)  # no refusal
    pm.set_data({"t": np.zeros(10)}, model=m)
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    with pytest.raises(ValueError, match="12 input rows but 10 labels"):
        classification_release(model, X_star, rng=np.random.default_rng(5), ledger=ledger, **kw)
    assert ledger.history == []


def test_sor_k_means_is_found_as_for_fitc_and_refuses_what_fitc_refuses():
    """``inducing_points=M``: the centres of ``kmeans_public_inducing`` (as for FITC), recorded
    with their method and seed; fewer distinct inputs than ``M`` (coinciding centres), a
    non-integer ``M`` and a non-integer seed are refused before any spend (stop-37 audit:
    ``M = 5`` on 3 distinct inputs was released with a duplicated ``Z`` and a jitter)."""
    from pm_dpgp.models.fitc import kmeans_public_inducing

    X, t = _data(1, n=30)
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=0.8))
    Xs = np.linspace(0, 10, 4)[:, None]
    kw = dict(epsilon=1.0, delta=1e-3, rng=np.random.default_rng(0))
    rel = classification_release(model, Xs, inducing_points=4, kmeans_seed=7, **kw)
    np.testing.assert_array_equal(
        rel.metadata["inducing_inputs"], kmeans_public_inducing(X, 4, seed=7)
    )
    assert rel.metadata["n_inducing"] == 4 and rel.metadata["kmeans_seed"] == 7
    assert rel.metadata["inducing_method"].startswith("kmeans2")
    f0 = np.linspace(-1, 1, 30)
    given = classification_release(model, Xs, inducing_points=X[:5], f0=f0, **kw)
    assert given.metadata["inducing_method"] == "given"
    np.testing.assert_array_equal(given.metadata["f0"], f0)
    assert rel.metadata["f0"] is None
    few = gp_classification(
        np.repeat([1.0, 2.0, 3.0], 4), np.tile([0, 1], 6), pm.gp.cov.ExpQuad(1, ls=1.0)
    )
    ledger = Ledger(epsilon=10.0, delta=1e-3)
    bad = [
        (few, dict(inducing_points=5), "coinciding centres"),
        (model, dict(inducing_points=3.0), "positive integer M"),
        (model, dict(inducing_points=True), "positive integer M"),
        (model, dict(inducing_points=3, kmeans_seed=None), "seed must be an integer"),
        (model, dict(inducing_points=3, kmeans_seed=1.5), "seed must be an integer"),
    ]
    for m, extra, message in bad:
        rng = np.random.default_rng(1)
        state = rng.bit_generator.state
        with pytest.raises(ValueError, match=message):
            classification_release(m, Xs, epsilon=1.0, delta=1e-3, ledger=ledger, rng=rng, **extra)
        assert ledger.history == [] and rng.bit_generator.state == state


def test_classification_release_is_refused_by_dp_ppc_for_what_it_is_and_has_no_predictive(small):
    """Stop-38 usability audit: ``dp_ppc`` on a classification release first said "pass
    noise_sd", and passing one only led to the real refusal; and ``to_inference_data`` copied
    the latent logits into ``posterior_predictive``, where ``az.plot_ppc`` reads outcomes."""
    from pm_dpgp.compat import group_names
    from pm_dpgp.workflow import dp_ppc

    model, _, _ = small
    X_star = np.linspace(0.5, 9.5, 5)[:, None]
    rel = classification_release(
        model, X_star, epsilon=1.0, delta=1e-3, rng=np.random.default_rng(0)
    )
    with pytest.raises(ValueError, match="Gaussian predictive y = f \\+ e does not apply"):
        dp_ppc(rel, X_star, np.array([0.0, 1.0, 0.0, 1.0, 1.0]), training=model)
    with pytest.raises(ValueError, match="Gaussian predictive y = f \\+ e does not apply"):
        dp_ppc(rel, X_star, np.array([0.0, 1.0, 0.0, 1.0, 1.0]), noise_sd=0.3, training=model)
    assert "posterior_predictive" not in group_names(rel.to_inference_data())
