"""Reference values and tolerances for Titsias' optimal q(u) (Honkela 2024, eq. 2), shared by
``test_sparse_gp.py``, ``test_noise_aware.py`` and ``test_dirichlet.py``; reasons in the
docstrings (Higham 2002 for the error bounds)."""

from __future__ import annotations

import mpmath
import numpy as np

from tests.tolerances import EPS, cond_rtol, condition_number


def summation_atol(n: int, abs_terms: np.ndarray) -> np.ndarray:
    """Componentwise bound on the difference of two float sums of the same ``n`` terms.

    Any order (BLAS blocking, threads, chunks, Dask's tree) has error ``≤ γ_{n−1} Σ|termᵢ|``
    (Higham 2002, §4.2); two differ by at most twice that.  ``abs_terms`` is ``Σ|termᵢ|``.
    """
    return 2 * (n + 1) * EPS * abs_terms


def whitened_rtol(K, B, scale) -> float:
    """Tolerance for two computations of Titsias' q(u) in the whitened form.

    Both go through ``K = L Lᵀ`` and ``Λ = I + s L⁻¹ B L⁻ᵀ = L_Λ L_Λᵀ``; Cholesky and
    triangular-solve forward errors are bounded by ``c·M·κ·EPS`` for κ(K) and κ(Λ)
    (Higham 2002, Thms 8.5, 10.4), so the normwise difference of m and S is at most
    ``4·M·(κ(K) + κ(Λ))·EPS`` (in test_noise_aware κ(K) ≈ 2e6, κ(Λ) ≈ 1e4: 2.8e-8).
    κ(K + sB) ≈ 2e10 is *not* the relevant number: the whitened form never solves with K + sB.
    """
    L = np.linalg.cholesky(K)
    LiB = np.linalg.solve(L, B)
    Lam = np.eye(len(K)) + scale * np.linalg.solve(L, LiB.T)
    return cond_rtol(condition_number(K) + condition_number(Lam), len(K))


def titsias_eq2_exact(K, A, B, scale) -> tuple[np.ndarray, np.ndarray]:
    """Literal eq. (2) — ``Σ = (K + sB)⁻¹``, ``m = s K Σ A``, ``S = K Σ K`` — in 40 digits.

    mpmath (a dependency of dp-accounting) from the float64 inputs: κ(K + sB) ≈ 1e10 costs
    10 of the 40 digits, so the result is exact to float64 precision and a comparison with it
    sees only the float64 error of the code under test (the whitened bound above).  In
    float64 the explicit inverse of K + sB would itself be off by up to M·κ(K + sB)·EPS ≈ 1e-4.
    """
    with mpmath.workdps(40):
        Km = mpmath.matrix(np.asarray(K).tolist())
        Sig = mpmath.inverse(Km + mpmath.mpf(scale) * mpmath.matrix(np.asarray(B).tolist()))
        KS = Km * Sig
        m = mpmath.mpf(scale) * KS * mpmath.matrix(np.asarray(A).tolist())
        S = KS * Km
        return np.array(m.tolist(), dtype=float)[:, 0], np.array(S.tolist(), dtype=float)


def reordered_sums_rtol(K, Kzx, abs_r, a_noisy, B_noisy, scale, lam) -> float:
    """Normwise tolerance between two releases whose statistics were summed in other orders.

    The sums differ by ≤ 2γ_n‖K_ZX |r|‖ (A) and 2γ_n‖K_ZX K_XZ‖ (B, k ≥ 0) (Higham 2002,
    §4.2): relative to ã and P = K + sB̃ + λI that is η, amplified by κ(P) (Higham Thm 7.2).
    On top, each release's own rounding: the whitened bound for the matrices actually
    factorised, K and Λ = I + L⁻¹(sB̃ + λI)L⁻ᵀ (``whitened_rtol``).
    """
    n, eye = Kzx.shape[1], np.eye(len(K))
    P = K + scale * B_noisy + lam * eye
    eta_A = np.linalg.norm(np.abs(Kzx) @ abs_r) / np.linalg.norm(a_noisy)
    eta_B = scale * np.linalg.norm(Kzx @ Kzx.T) / np.linalg.norm(P)
    eta = 2 * (n + 1) * EPS * (eta_A + eta_B)
    return whitened_rtol(K, B_noisy + lam / scale * eye, scale) + condition_number(P) * eta
