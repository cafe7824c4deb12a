"""Stop-45 audit of DP GP classification (Smith et al. 2021 §4; laplace.py, classification.py).

1. ``laplace_mode`` took the full Newton step every iteration; with a large kernel variance
   it diverged (EQ variance 10⁵, lengthscale 0.3, 60 inputs on [0, 10]: max |f| = 4.9·10⁵,
   Ψ = −9.2·10⁶ after 100 steps, where the mode has max |f| = 123, Ψ = −8.5), and the owner's
   ``PublicLatentGP.predict`` returned that iterate silently.  The reference here is an
   independent trust-region maximisation of Ψ in whitened coordinates (eigendecomposition
   of K, SciPy ``trust-exact``), without the library's Newton step.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
import scipy.optimize
from scipy.special import expit

from pm_dpgp.gp.laplace import laplace_mode
from pm_dpgp.models.classification import gp_classification


def _diverging_data():
    """The audit's data: the second draw (n = 60) of ``default_rng(0)``."""
    rng = np.random.default_rng(0)
    for n in (20, 60):
        X = np.sort(rng.uniform(0, 10, n))
        t = (rng.uniform(size=n) < expit(2 * np.sin(X))).astype(float)
    return X, t


def _eq(X, variance, ls):
    d = X[:, None] - X[None, :]
    return variance * np.exp(-0.5 * d**2 / ls**2)


def _reference_mode(K, t):
    """argmax Ψ over f = R u (K = R Rᵀ from the eigendecomposition), trust-region Newton."""
    lam, Q = np.linalg.eigh(K)
    keep = lam > lam.max() * 1e-13
    R = Q[:, keep] * np.sqrt(lam[keep])
    s = 2 * t - 1

    def fun(u):
        return np.sum(np.logaddexp(0, -s * (R @ u))) + 0.5 * u @ u

    def jac(u):
        return -R.T @ (t - expit(R @ u)) + u

    def hess(u):
        p = expit(R @ u)
        return R.T @ ((p * (1 - p))[:, None] * R) + np.eye(len(u))

    res = scipy.optimize.minimize(
        fun,
        np.zeros(R.shape[1]),
        jac=jac,
        hess=hess,
        method="trust-exact",
        options={"gtol": 1e-9},
    )
    # SciPy may stop at the round-off floor without 'success': check stationarity instead
    assert np.max(np.abs(jac(res.x))) < 1e-6 * (1 + np.max(np.abs(res.x)))
    return R @ res.x, -res.fun


def test_newton_iteration_does_not_diverge_for_a_large_kernel_variance():
    X, t = _diverging_data()
    K = _eq(X, 1e5, 0.3)
    f_ref, psi_ref = _reference_mode(K, t)
    assert 100 < np.max(np.abs(f_ref)) < 150  # the mode is moderate (max |f| = 123)
    state = laplace_mode(K, t)
    assert state.converged
    # the old code: max |f| = 4.9e5, error 3.9e3 relative to 1 + max |f_ref|
    err = np.max(np.abs(state.f - f_ref)) / (1 + np.max(np.abs(f_ref)))
    assert err < 1e-6, err
    # the owner's predictive mean through the PyMC model agrees with k*ᵀ K⁻¹ f̂
    model = gp_classification(X[:, None], t, 1e5 * pm.gp.cov.ExpQuad(1, ls=0.3))
    pub = model.public_gp()
    Xs = np.linspace(0.5, 9.5, 5)[:, None]
    mu, _ = pub.predict(t, Xs)
    Ks = pub.kernel(Xs, pub.X)
    lam, Q = np.linalg.eigh(pub.K)
    keep = lam > lam.max() * 1e-13
    mu_ref = Ks @ (Q[:, keep] @ ((Q[:, keep].T @ f_ref) / lam[keep]))
    assert np.max(np.abs(mu - mu_ref)) < 1e-4 * (1 + np.max(np.abs(mu_ref)))


def test_one_newton_step_is_still_the_full_step():
    """``max_iter=1`` stays the full Newton step from f₀ (the DP mechanism's step), even
    where a line search would shorten it."""
    X, t = _diverging_data()
    K = _eq(X, 1e5, 0.3)
    f0 = np.linspace(-3, 3, len(t))
    one = laplace_mode(K, t, f0=f0, max_iter=1)
    w = expit(f0) * (1 - expit(f0))
    ref = K @ np.linalg.solve(np.eye(len(t)) + w[:, None] * K, w * f0 + t - expit(f0))
    assert np.max(np.abs(one.f - ref)) < 1e-6 * (1 + np.max(np.abs(ref)))


def test_non_finite_public_offset_refused_before_spending():
    """f₀ = 1e308 with prior mean −1e308: W₀ = 0 and f₀ − μ = inf, so the public offset was
    NaN and the release charged the ledger for NaN draws."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.plan import classification as plan_classification

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 5, (20, 1))
    t = (rng.uniform(size=20) < 0.5).astype(float)
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=0.8), mean=-1e308)
    ledger = Ledger(epsilon=10.0, delta=1e-2)
    gen = np.random.default_rng(1)
    state = gen.bit_generator.state
    Xs = np.linspace(0, 5, 4)[:, None]
    with pytest.raises(ValueError, match="not finite"):
        classification_release(model, Xs, epsilon=1.0, delta=1e-3, f0=1e308, ledger=ledger, rng=gen)
    assert len(ledger.history) == 0
    assert gen.bit_generator.state == state
    with pytest.raises(ValueError, match="not finite"):
        plan_classification(model, Xs, epsilon=1.0, delta=1e-3, f0=1e308)
