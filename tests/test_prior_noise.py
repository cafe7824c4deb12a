"""Hall et al.'s prior-noise baseline: sensitivity bounds and release."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp.mechanisms import cloaked_release, prior_noise_release, rkhs_sensitivity
from pm_dpgp.models import gp_regression

from .conftest import KUNG_BOUNDS


def _rkhs_changes(public_gp) -> np.ndarray:
    """‖h_j‖_H for a unit change of each label j, computed column by column."""
    X = public_gp.X
    Kp = public_gp.kernel(X, X)
    K = Kp + public_gp.noise_var * np.eye(len(X))
    V = np.linalg.solve(K, np.eye(len(X)))  # columns v_j = K⁻¹ e_j
    return np.sqrt(np.einsum("ij,ik,kj->j", V, Kp, V))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 1000),
    n=st.integers(2, 25),
    ls=st.floats(0.1, 4.0),
    noise=st.floats(0.01, 1.0),
    scale=st.floats(0.3, 3.0),
)
def test_bounds_dominate_the_exact_rkhs_change(seed, n, ls, noise, scale):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, n)
    model = gp_regression(
        X, rng.uniform(-1, 1, n), scale**2 * pm.gp.cov.ExpQuad(1, ls=ls), sigma=noise
    )
    public_gp = model.public_gp()
    exact_changes = _rkhs_changes(public_gp)
    exact = rkhs_sensitivity(public_gp, "exact")
    nonneg = rkhs_sensitivity(public_gp, "nonnegative")
    inf = rkhs_sensitivity(public_gp, "inf_norm")
    assert exact == pytest.approx(exact_changes.max(), rel=1e-6)  # the supremum is attained
    assert exact <= nonneg * (1 + 1e-9)
    assert nonneg <= inf * (1 + 1e-9)
    # Any finite test set: Mahalanobis change w.r.t. K** ≤ RKHS change.
    X_star = rng.uniform(-1, 11, (7, 1))
    C = public_gp.posterior().cloaking_matrix(public_gp.kernel(X_star, public_gp.X))
    K_ss = public_gp.kernel(X_star, X_star) + 1e-9 * scale**2 * np.eye(7)
    maha = np.sqrt(np.einsum("ij,ij->j", C, np.linalg.solve(K_ss, C)))
    assert np.all(maha <= exact_changes * (1 + 1e-6) + 1e-9)


def test_refinement_proof_steps_hold():
    """vᵀK'v ≤ v_j (K'v)_j ≤ c P_j² (docs/prior_noise.md) on a clustered configuration."""
    X = np.array([0.0, 0.05, 0.1, 0.9, 3.0, 3.02])
    model = gp_regression(X, np.zeros(6), 0.7 * pm.gp.cov.ExpQuad(1, ls=0.5), sigma=0.2)
    public_gp = model.public_gp()
    Kp = public_gp.kernel(public_gp.X, public_gp.X)
    V = np.linalg.solve(Kp + 0.04 * np.eye(6), np.eye(6))
    quad = np.einsum("ij,ik,kj->j", V, Kp, V)
    middle = np.diag(V) * np.diag(Kp @ V)
    P = np.clip(V, 0, None).sum(axis=0)
    assert np.all(quad <= middle + 1e-12)
    assert np.all(middle <= 0.7 * P**2 + 1e-12)
    assert rkhs_sensitivity(public_gp, "nonnegative") >= np.sqrt(quad.max())


def test_nonnegative_bound_refuses_negative_kernels():
    X = np.linspace(0, 3, 5)
    model = gp_regression(X, np.zeros(5), pm.gp.cov.Cosine(1, ls=1.0), sigma=0.5)
    with pytest.raises(ValueError, match="k\\(x, x'\\) >= 0"):
        rkhs_sensitivity(model.public_gp(), "nonnegative")


def test_prior_noise_needs_much_more_noise_than_cloaking(kung_model, kung_ages):
    kw = dict(epsilon=1.0, delta=0.01, y_bounds=KUNG_BOUNDS)
    hall = prior_noise_release(kung_model, kung_ages, rng=np.random.default_rng(0), **kw)
    cloak = cloaked_release(kung_model, kung_ages, rng=np.random.default_rng(0), **kw)
    ratio = np.median(hall.noise_sd) / np.median(cloak.noise_sd)
    print(f"prior-noise / cloaking median noise sd on !Kung: {ratio:.1f}")
    assert ratio > 2.0
    assert hall.metadata["sensitivity_bound"] == "exact"
