"""Hall et al.'s prior-noise baseline: sensitivity bounds and release.

Tolerances (see ``tests/tolerances.py``): every quantity here comes from solves with
``K = K' + σ²I`` (κ up to ~1e6 for the generated problems) or with the jittered ``K**``
(κ up to ~1e10); the slack of each comparison is the error bound of the computed sides
(:func:`_rkhs_change_error`, :func:`_inverse_sums_error`, :func:`_mahalanobis_error`).
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release, prior_noise_release, rkhs_sensitivity
from pm_dpgp.mechanisms.label.prior_noise import public_prior_noise
from pm_dpgp.models import gp_regression
from tests.tolerances import EPS, cond_rtol, scalar_rtol

from .conftest import KUNG_BOUNDS


def _rkhs_changes(public_gp) -> np.ndarray:
    """‖h_j‖_H for a unit change of each label j, computed column by column."""
    X = public_gp.X
    Kp = public_gp.kernel(X, X)
    K = Kp + public_gp.noise_var * np.eye(len(X))
    V = np.linalg.solve(K, np.eye(len(X)))  # columns v_j = K⁻¹ e_j
    return np.sqrt(np.einsum("ij,ik,kj->j", V, Kp, V))


def _kernel_matrices(public_gp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K', K = K' + σ²I and V = K⁻¹ (columns v_j) at the training inputs."""
    Kp = public_gp.kernel(public_gp.X, public_gp.X)
    K = Kp + public_gp.noise_var * np.eye(len(Kp))
    return Kp, K, np.linalg.solve(K, np.eye(len(Kp)))


def _rkhs_change_error(public_gp) -> np.ndarray:
    """Per label j, a bound on the difference of two computations of ‖h_j‖_H = √(v_jᵀK'v_j).

    Two backward-stable solves give v_j to ``cond_rtol(K)`` (normwise, Higham 2002, Thm 7.2),
    which moves ``q_j = v_jᵀK'v_j`` by ``≤ 2‖K'v_j‖‖Δv_j‖``; evaluating the form adds
    ``c·n·EPS·‖K'‖‖v_j‖²``.  Then ``|Δ√q| ≤ min(Δq / (2√q), √Δq)``.  Relative to ‖h_j‖_H
    this is ~1e-10 typically and reaches ~1e-6 when σ² is small (cancellation in
    ``q_j = v_jj − σ²‖v_j‖²``).
    """
    Kp, K, V = _kernel_matrices(public_gp)
    vn = np.linalg.norm(V, axis=0)
    dq = 2.0 * cond_rtol(K) * vn * np.linalg.norm(Kp @ V, axis=0)
    dq += 8.0 * len(K) * EPS * np.linalg.norm(Kp, 2) * vn**2
    q = np.einsum("ij,ik,kj->j", V, Kp, V)
    return np.minimum(dq / (2.0 * np.sqrt(q)), np.sqrt(dq))


def _inverse_sums_error(public_gp) -> float:
    """Bound on the change of √k_max·Σ_i |K⁻¹_ij| (or its positive / negative part) between two
    computations of K⁻¹: ‖ΔK⁻¹ e_j‖₁ ≤ √n·cond_rtol(K)·‖K⁻¹‖_F, plus the rounding of an
    n-term sum of non-negative numbers (``scalar_rtol(n)`` relative)."""
    Kp, K, V = _kernel_matrices(public_gp)
    n = len(K)
    spread = math.sqrt(n) * cond_rtol(K) * np.linalg.norm(V)
    spread += scalar_rtol(n) * np.abs(V).sum(axis=0).max()
    return math.sqrt(float(np.max(np.diag(Kp)))) * spread


def _mahalanobis_error(public_gp, A: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Per column, a bound on the error of √(c_jᵀA⁻¹c_j) computed from the library's C.

    The solve with A is backward stable, ``(A + ΔA)x̂_j = c_j`` with ``‖ΔA‖ ≤ c·m·EPS·‖A‖``, so
    the form moves by ``≤ ‖ΔA‖‖x̂_j‖²`` (no κ(A) ≈ 1e10 factor: Higham 2002, §7.1), plus the
    rounding of the dot product; C itself is off by ≤ cond_rtol(K)·‖C‖_F (solve with K),
    which the A⁻¹-norm amplifies by at most 1/√λ_min(A).
    """
    m = len(A)
    x = np.linalg.solve(A, C)
    dq = 4.0 * m * EPS * np.linalg.norm(A, 2) * np.linalg.norm(x, axis=0) ** 2
    dq += 4.0 * m * EPS * np.einsum("ij,ij->j", np.abs(C), np.abs(x))
    maha = np.sqrt(np.maximum(np.einsum("ij,ij->j", C, x), 0.0))
    solve_err = np.minimum(dq / (2.0 * np.maximum(maha, np.finfo(float).tiny)), np.sqrt(dq))
    _, K, _ = _kernel_matrices(public_gp)
    lam_min = float(np.linalg.eigvalsh(A)[0])
    return solve_err + cond_rtol(K) * np.linalg.norm(C) / math.sqrt(lam_min)


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
        X, rng.uniform(-1, 1, n), scale**2 * pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=noise
    )
    public_gp = model.public_gp()
    exact_changes = _rkhs_changes(public_gp)
    change_err = _rkhs_change_error(public_gp)
    exact = rkhs_sensitivity(public_gp, "exact")
    nonneg = rkhs_sensitivity(public_gp, "nonnegative")
    inf = rkhs_sensitivity(public_gp, "inf_norm")
    # the supremum is attained: two computations of max_j ‖h_j‖_H (|Δmax| ≤ max |Δ_j|)
    assert exact == pytest.approx(exact_changes.max(), abs=change_err.max())
    # exact ≤ nonneg ≤ inf hold exactly for K⁻¹ and can be equalities (e.g. well-separated
    # inputs, K' ≈ diagonal): the slack is the error of the computed sides
    sums_err = _inverse_sums_error(public_gp)
    assert exact <= nonneg + change_err.max() + sums_err
    assert nonneg <= inf + sums_err
    # Any finite test set: Mahalanobis change w.r.t. K** ≤ RKHS change.  The jitter is part of
    # the statement (it only lowers the left side), not a tolerance.
    X_star = rng.uniform(-1, 11, (7, 1))
    C = public_gp.posterior().cloaking_matrix(public_gp.kernel(X_star, public_gp.X))
    K_ss = public_gp.kernel(X_star, X_star) + 1e-9 * scale**2 * np.eye(7)
    maha = np.sqrt(np.einsum("ij,ij->j", C, np.linalg.solve(K_ss, C)))
    slack = change_err + _mahalanobis_error(public_gp, K_ss, C)
    assert np.all(maha <= exact_changes + slack)


def test_exact_sensitivity_check_rejects_a_near_miss():
    """The slack of the comparison above is not vacuous: a 1e-4 relative error is rejected."""
    X = np.array([0.0, 0.05, 0.1, 0.9, 3.0, 3.02])
    public_gp = gp_regression(
        X, np.zeros(6), 0.7 * pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.2
    ).public_gp()
    exact = rkhs_sensitivity(public_gp, "exact")
    reference = _rkhs_changes(public_gp).max()
    tol = _rkhs_change_error(public_gp).max()
    assert exact == pytest.approx(reference, abs=tol)
    assert exact * (1.0 + 1e-4) != pytest.approx(reference, abs=tol)
    sums_err = _inverse_sums_error(public_gp)
    nonneg = rkhs_sensitivity(public_gp, "nonnegative")
    inf = rkhs_sensitivity(public_gp, "inf_norm")
    assert nonneg <= inf + sums_err
    assert tol < 1e-4 * exact and sums_err < 1e-4 * nonneg  # a 1e-4 violation would be seen


def test_refinement_proof_steps_hold():
    """vᵀK'v ≤ v_j (K'v)_j ≤ c P_j² (docs/prior_noise.md) on a clustered configuration."""
    X = np.array([0.0, 0.05, 0.1, 0.9, 3.0, 3.02])
    model = gp_regression(X, np.zeros(6), 0.7 * pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.2)
    public_gp = model.public_gp()
    Kp = public_gp.kernel(public_gp.X, public_gp.X)
    K = Kp + 0.04 * np.eye(6)
    V = np.linalg.solve(K, np.eye(6))
    quad = np.einsum("ij,ik,kj->j", V, Kp, V)
    middle = np.diag(V) * np.diag(Kp @ V)
    P = np.clip(V, 0, None).sum(axis=0)
    # With the computed V, Kv_j = e_j + ρ_j: quad_j = middle_j − 0.04 Σ_{i≠j} v_i² + vᵀρ − v_jρ_j.
    # A backward-stable solve has ‖ρ_j‖ ≤ c·n·EPS·‖K‖‖v_j‖ (Higham 2002, Thm 9.4) whatever κ(K),
    # so the slack is 2‖v_j‖‖ρ_j‖ plus the rounding of both forms.
    vn2 = np.linalg.norm(V, axis=0) ** 2
    assert np.all(quad <= middle + 16 * 6 * EPS * np.linalg.norm(K, 2) * vn2)
    # v_j (K'v)_j ≤ 0.7 P_j² holds for any v with v_j > 0 when 0 ≤ K' ≤ 0.7 (as here), so only
    # the evaluation's rounding counts: a 6-term dot product, a 6-term sum, two products.
    assert np.all(middle <= 0.7 * P**2 * (1 + scalar_rtol(2 * 6 + 4)))
    assert rkhs_sensitivity(public_gp, "nonnegative") >= np.sqrt(quad.max())


def test_nonnegative_bound_refuses_negative_kernels():
    X = np.linspace(0, 3, 5)
    model = gp_regression(X, np.zeros(5), pm.gp.cov.Cosine(1, ls=1.0), noise_sd=0.5)
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


def _sign_test_model():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)


#: five test inputs 0.8 length-scales apart: K** has well-separated eigenvalues (0.028 … 2.6),
#: so its eigenvectors are unique up to sign and the canonical signs fix the factor
_SIGN_X = np.array([0.5, 1.7, 2.9, 4.1, 5.3])[:, None]


def test_prior_noise_shape_does_not_depend_on_the_eigenvector_signs(monkeypatch) -> None:
    """Audit of the two stacks: ``eigh`` returns either sign of an eigenvector depending on
    the LAPACK build, and ``F = V·sqrt(λ + j)`` inherited it, so a seed gave different
    prior-noise draws on the two stacks.  Flipping columns of ``V`` must change nothing.
    Since stop 37 ``F`` is the (unique) Cholesky factor; an eigendecomposition anywhere on
    the path, with either sign, must still change nothing."""
    import scipy.linalg

    from pm_dpgp.mechanisms.label import prior_noise as pn

    eigh = scipy.linalg.eigh
    model = _sign_test_model()
    public = model.public_gp()
    kw = {"epsilon": 1.0, "delta": 1e-3, "y_bounds": (-2.0, 2.0), "n_draws": 2}
    F0 = pn.prior_noise_shape(public, _SIGN_X)
    d0 = prior_noise_release(model, _SIGN_X, rng=np.random.default_rng(1), **kw).draws

    def flipped_eigh(A, *args, **kwargs):
        w, V = eigh(A, *args, **kwargs)
        return w, V * np.where(np.arange(V.shape[1]) % 2 == 0, -1.0, 1.0)

    monkeypatch.setattr(scipy.linalg, "eigh", flipped_eigh)
    np.testing.assert_array_equal(pn.prior_noise_shape(public, _SIGN_X), F0)
    d1 = prior_noise_release(model, _SIGN_X, rng=np.random.default_rng(1), **kw).draws
    np.testing.assert_array_equal(d1, d0)


def test_prior_noise_draws_of_a_seed_are_pinned() -> None:
    """The same seed gives the same draws on every stack (ArviZ 0.x / PyMC 5 and ArviZ 1 /
    PyMC 6 builds agree to ~1e-13 relative)."""
    rel = prior_noise_release(
        _sign_test_model(), _SIGN_X, epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0),
        n_draws=2, rng=np.random.default_rng(1),
    )  # fmt: skip
    # since stop 37 the noise factor is the (unique) Cholesky factor of K** + jI
    expected = [
        [3.47378839686058, 8.227950363931283, 8.58281578446007, -1.8952834670680598,
         -3.845362496386292],
        [4.365596836312231, 0.610757367042607, 0.9605546940110097, 3.6684973631606743,
         4.569573335610468],
    ]  # fmt: skip
    np.testing.assert_allclose(rel.draws, expected, rtol=1e-9, atol=1e-9)


def test_ill_conditioned_k_does_not_inflate_the_charge() -> None:
    """Stop-37 audit: with duplicated inputs and a tiny noise variance (``cond(K + σ²I)`` up to
    1e15) the whitening ``F⁻¹C``, computed from ``C``, carried ``C``'s round-off into the
    directions of ``K**`` that only the jitter keeps, and the charged sensitivity (that of the
    computed columns) reached 162× the RKHS bound.  Computed as ``(L_**⁻¹K*f)(K + σ²I)⁻¹`` it
    stays at the bound, and the release is still centred at the posterior mean."""
    X = np.r_[np.zeros(4), np.full(4, 0.5), np.ones(4)]
    Xs = np.linspace(-0.5, 1.5, 10)[:, None]
    y = np.r_[np.zeros(4), np.full(4, 0.8), np.full(4, 0.3)]
    for noise_sd in (1e-3, 1e-6, 3e-7, 1e-7):
        model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=noise_sd)
        public = model.public_gp()
        parts = public_prior_noise(public, Xs)
        assert np.allclose(parts.shape_factor, np.tril(parts.shape_factor))  # Cholesky
        columns = np.sqrt(np.max(np.sum(parts.W**2, axis=0)))
        # both sides computed through (K + σ²I)⁻¹: round-off of order cond(K + σ²I)·u
        # (measured: 7e-6 above at 1e-6, below at the others); the old order gave 4.4×, 39×
        # and 162× at 1e-6, 3e-7 and 1e-7
        K = public.kernel(public.X, public.X) + public.noise_var * np.eye(12)
        tol = 1.0 + np.linalg.cond(K) * np.finfo(float).eps
        assert columns <= parts.unit_sensitivity * tol, (noise_sd, columns)
        rel = prior_noise_release(
            model, Xs, epsilon=1.0, delta=1e-5, y_bounds=(0.0, 1.0),
            rng=np.random.default_rng(0),
        )  # fmt: skip
        assert rel.metadata["l2_sensitivity"] <= 1.01 * parts.unit_sensitivity
    # the mean part is the posterior mean (well-conditioned case, independent dense formula)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.1)
    public = model.public_gp()
    parts = public_prior_noise(public, Xs)
    K = public.kernel(public.X, public.X) + 0.01 * np.eye(12)
    C = public.kernel(Xs, public.X) @ np.linalg.inv(K)
    np.testing.assert_allclose(parts.shape_factor @ parts.W, C, rtol=0, atol=1e-9)


def test_zero_prior_variance_at_a_test_input_is_refused_clearly() -> None:
    """Stop-37 audit: a linear kernel at its centre has ``k(x*, x*) = 0``; at every test input
    the shape was singular and the refusal said only that the sensitivity was NaN.  With one
    such input among others the release works (the mean there is exactly μ)."""
    model = gp_regression(
        np.linspace(-1, 1, 8), np.zeros(8), pm.gp.cov.Linear(1, c=0.0), noise_sd=0.5
    )
    ledger = Ledger(epsilon=5.0, delta=1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="prior variance k\\(x\\*, x\\*\\) is zero at every"):
        prior_noise_release(
            model, np.array([[0.0], [0.0]]), epsilon=1.0, delta=1e-3, y_bounds=(-1.0, 1.0),
            ledger=ledger, rng=rng,
        )  # fmt: skip
    assert ledger.history == [] and rng.bit_generator.state == state
    rel = prior_noise_release(
        model, np.array([[0.0], [1.0]]), epsilon=1.0, delta=1e-3, y_bounds=(-1.0, 1.0),
        ledger=ledger, rng=rng,
    )  # fmt: skip
    assert np.all(np.isfinite(rel.draws)) and len(ledger.history) == 1
    assert abs(rel.draws[0, 0] - model.public_gp().mean) < 1e-3  # the jitter's noise only
