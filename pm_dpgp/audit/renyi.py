r"""Exact Rényi divergences between Gaussians and between neighbouring GP posteriors.

For ``P_i = N(μ_i, Σ_i)`` and order α > 1 (Gil, Alajaji & Linder 2013, Table 2;
``docs/sample_paths.md``)

.. math::

    D_α(P_1 \| P_2) = \frac{α}{2} Δμ^T Σ_α^{-1} Δμ
        - \frac{1}{2(α-1)} \ln\frac{|Σ_α|}{|Σ_1|^{1-α} |Σ_2|^{α}},
    \qquad Σ_α = α Σ_2 + (1-α) Σ_1,\ Δμ = μ_1 - μ_2,

and ``D_α = +∞`` when ``Σ_α`` is not positive definite.  We evaluate it in the coordinates
whitened by the Cholesky factor ``L_1`` of ``Σ_1``: with ``E = L_1^{-1}(Σ_2 − Σ_1)L_1^{-T}``
(eigenvalues ``δ_i``, eigenvectors ``Q``) and ``w = Qᵀ L_1^{-1} Δμ``,

    mean part  = (α/2) Σ_i w_i² / (1 + α δ_i),
    cov part   = Σ_i [α log1p(δ_i) − log1p(α δ_i)] / (2(α−1)),

``Σ_α`` PD ⇔ ``1 + α δ_i > 0`` for all i.  Degenerate covariances (repeated test points,
the constant kernel) are handled on the common support (pseudo-determinants); if the two
supports differ, or the mean difference leaves them, the divergence is ``+∞``.

The posterior of the released paths uses the σ²k / σ²r² parametrisation of Maciazek
(Rasmussen & Williams 2006, eq. 2.25–2.26; ``docs/sample_paths.md``): mean ``k(T,X)(K + r²I)⁻¹y``,
covariance ``σ²[k(T,T) − k(T,X)(K + r²I)⁻¹k(X,T)]``
(+ ``η² k(T,T)`` with extra noise), via ``pm_dpgp.gp.exact.ExactPosterior``.  ``L``
independent paths: the divergence of a product is the sum, ``L`` times one path.

Small stationary kernels (normalised, ``k(x, x) = 1``) for audits are provided too; they accept
inputs of shape ``(n, d)`` (or ``(n,)`` for 1-D) and also stacks ``(..., n, d)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import (
    check_finite_array,
    check_positive,
    check_scale,
    public_real_array,
    real_or_nan,
    reject_unexpected,
    renamed,
    require,
)
from pm_dpgp.gp.exact import ExactPosterior

__all__ = [
    "RenyiTerms",
    "gaussian_renyi_terms",
    "gaussian_renyi_divergence",
    "posterior_mean_cov",
    "posterior_renyi_terms",
    "posterior_renyi_divergence",
    "eq_kernel",
    "matern32_kernel",
    "matern52_kernel",
    "exponential_kernel",
    "constant_kernel",
]

Kernel = Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]]


@dataclass(frozen=True)
class RenyiTerms:
    """The two parts of an exact Gaussian Rényi divergence at order ``alpha``.

    ``mean`` = (α/2)Δμᵀ Σ_α⁻¹ Δμ; ``cov`` = −ln(|Σ_α|/(|Σ_1|^{1−α}|Σ_2|^α))/(2(α−1)).
    The sample-path bound dominates them separately (``mean_term`` and ``cov_term`` of
    ``SamplePathBound``).
    """

    alpha: float
    mean: float
    cov: float

    @property
    def total(self) -> float:
        """D_α = mean + cov."""
        return self.mean + self.cov

    def scaled(self, k: float) -> RenyiTerms:
        """Both parts times ``k`` (e.g. ``L`` independent paths)."""
        return RenyiTerms(self.alpha, k * self.mean, k * self.cov)


def _inf(alpha: float) -> RenyiTerms:
    return RenyiTerms(alpha, math.inf, math.inf)


def _check_alpha(alpha: float) -> float:
    a = real_or_nan(alpha, "alpha")  # "2" parsed (stop-40 fuzz)
    if not math.isfinite(a) or a <= 1.0:
        raise ValueError(f"alpha must be a finite Renyi order > 1, got {alpha!r}.")
    return a


def _whitened_terms(
    L1: NDArray[np.float64], D: NDArray[np.float64], dmu: NDArray[np.float64], alpha: float
) -> RenyiTerms:
    """Terms from ``Σ_1 = L1 L1ᵀ``, ``D = Σ_2 − Σ_1`` and ``Δμ`` (see module docstring)."""
    Z = scipy.linalg.solve_triangular(L1, D, lower=True, check_finite=False)
    E = scipy.linalg.solve_triangular(L1, Z.T, lower=True, check_finite=False)
    E = 0.5 * (E + E.T)
    delta, Q = np.linalg.eigh(E)
    if np.any(1.0 + delta <= 0.0) or np.any(1.0 + alpha * delta <= 0.0):
        return _inf(alpha)  # Σ_2 or Σ_α not positive definite
    z = scipy.linalg.solve_triangular(L1, dmu, lower=True, check_finite=False)
    w = Q.T @ z
    mean = 0.5 * alpha * float(np.sum(w * w / (1.0 + alpha * delta)))
    cov = float(np.sum(alpha * np.log1p(delta) - np.log1p(alpha * delta))) / (2.0 * (alpha - 1.0))
    return RenyiTerms(alpha, mean, max(cov, 0.0))  # the cov part is ≥ 0; clip round-off


def gaussian_renyi_terms(
    mu1: ArrayLike,
    cov1: ArrayLike,
    mu2: ArrayLike,
    cov2: ArrayLike,
    alpha: float,
    *,
    support_rtol: float = 1e-11,
) -> RenyiTerms:
    r"""Exact ``D_α(N(μ1, Σ1) ‖ N(μ2, Σ2))`` split into mean and covariance parts.

    Cholesky of ``Σ1`` and an eigen-decomposition of the whitened difference (module
    docstring).  If ``Σ1`` is numerically singular (relative pivot below ``support_rtol``), the
    computation moves to the common support: the span of the eigenvectors of ``Σ1 + Σ2`` with
    eigenvalues above ``support_rtol`` times the largest.  Returns ``+inf`` terms when ``Σ_α`` is
    not positive definite, when the supports differ, or when ``Δμ`` leaves the support.

    The cut is numerical: two GP test inputs a few 10⁻⁵ lengthscales apart make ``Σ1``
    singular to ``10⁻¹¹``, and the part of ``Δμ`` along their difference (finite in exact
    arithmetic, the derivative process's share) then "leaves the support": ``+inf`` there is
    an artefact, not a divergence (stop 36: two test inputs 3.2·10⁻⁵ apart, EQ lengthscale
    0.4).  Drop near-duplicate test inputs before calling.  The cut also drops the
    *covariance* part of directions where both variances are below ``support_rtol`` times the
    largest, which can understate the divergence: ``Σ1 = diag(1, 1e-13)``,
    ``Σ2 = diag(1, 1e-12)`` give 0 at α = 2, exactly 0.830 (stop-45 audit).  In a GP
    posterior such variances are round-off (~1e-16 ‖K‖·cond), so no value there is reliable.
    """
    alpha = _check_alpha(alpha)
    support_rtol = check_positive(support_rtol, "support_rtol")  # True gave +inf (stop 40)
    if support_rtol >= 1.0:
        raise ValueError(f"support_rtol must be < 1, got {support_rtol!r}; e.g. 1e-11.")
    m1 = check_finite_array(mu1, "mu1", ndim=1)
    m2 = check_finite_array(mu2, "mu2", ndim=1)
    S1 = check_finite_array(cov1, "cov1", ndim=2)
    S2 = check_finite_array(cov2, "cov2", ndim=2)
    m = m1.size
    if m2.size != m or S1.shape != (m, m) or S2.shape != (m, m):
        raise ValueError(
            f"shapes do not match: mu1 {m1.shape}, mu2 {m2.shape}, cov1 {S1.shape}, "
            f"cov2 {S2.shape}."
        )
    S1 = 0.5 * (S1 + S1.T)
    S2 = 0.5 * (S2 + S2.T)
    dmu = m1 - m2
    try:
        L1 = scipy.linalg.cholesky(S1, lower=True, check_finite=False)
        piv = np.diag(L1) ** 2
        if np.min(piv) > support_rtol * np.max(piv):
            return _whitened_terms(L1, S2 - S1, dmu, alpha)
    except np.linalg.LinAlgError:
        pass
    # Common support of Σ1 and Σ2 (pseudo-determinants / pseudo-inverses).
    lam, U = np.linalg.eigh(0.5 * (S1 + S2))
    if lam[-1] <= 0.0:  # two point masses: +inf unless they coincide (allclose's absolute
        # 1e-8 gave 0 for means 5e-9 apart, stop-45 audit; the support rule below is the same)
        return RenyiTerms(alpha, 0.0 if not np.any(dmu) else math.inf, 0.0)
    keep = lam > support_rtol * lam[-1]
    U = U[:, keep]
    resid = dmu - U @ (U.T @ dmu)
    # relative to Δμ alone (the projection's round-off is ~ m u ‖Δμ‖): against the largest sd
    # too, a deterministic coordinate whose means differ by less than 1e-9 sd was ignored and
    # gave 0 where the divergence is +inf (stop-43 audit: Δμ = (0, 5e-10), Σ = diag(1, 0))
    if np.linalg.norm(resid) > 1e-9 * np.linalg.norm(dmu):
        return _inf(alpha)  # the means differ along a direction neither law charges
    P1 = U.T @ S1 @ U
    P2 = U.T @ S2 @ U
    try:
        L1 = scipy.linalg.cholesky(0.5 * (P1 + P1.T), lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return _inf(alpha)  # Σ1 has a smaller support than Σ2
    piv = np.diag(L1) ** 2
    if np.min(piv) <= 1e-3 * support_rtol * np.max(piv):
        return _inf(alpha)
    return _whitened_terms(L1, P2 - P1, U.T @ dmu, alpha)


def gaussian_renyi_divergence(
    mu1: ArrayLike, cov1: ArrayLike, mu2: ArrayLike, cov2: ArrayLike, alpha: float
) -> float:
    """Exact ``D_α(N(μ1, Σ1) ‖ N(μ2, Σ2))`` (``+inf`` where ``Σ_α`` is not PD)."""
    return gaussian_renyi_terms(mu1, cov1, mu2, cov2, alpha).total


# --------------------------------------------------------------------------------------------
# GP posteriors of neighbouring datasets
# --------------------------------------------------------------------------------------------
def _as_inputs(X: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = check_finite_array(X, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d) or (n,), got {arr.shape}.")
    return arr


def _kernel_scale_argument(kernel_scale: Any, deprecated: dict[str, Any], func: str) -> float:
    """``kernel_scale=``, taking the deprecated ``sigma=`` (issue 14: one vocabulary)."""
    value = renamed("sigma", "kernel_scale", deprecated, kernel_scale, func=func, stacklevel=4)
    reject_unexpected(deprecated, func=func)
    return check_scale(require(value, "kernel_scale", func=func), "kernel_scale")


def posterior_mean_cov(
    kernel_fn: Kernel,
    X: ArrayLike,
    y: ArrayLike,
    X_test: ArrayLike,
    *,
    kernel_scale: float | None = None,
    r2: float,
    eta: float = 0.0,
    **deprecated: Any,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Mean and covariance of one released path at ``X_test`` (``docs/sample_paths.md``, §1).

    ``m = k(T,X)(K + r²I)⁻¹y`` and ``σ²[k(T,T) − k(T,X)(K + r²I)⁻¹k(X,T)] + η² k(T,T)``,
    computed by ``ExactPosterior`` (one Cholesky factor of ``K + r²I``).
    """
    sigma = _kernel_scale_argument(kernel_scale, deprecated, "posterior_mean_cov")
    r2 = check_positive(r2, "r2")
    eta = check_positive(eta, "eta", allow_zero=True)
    Xa = _as_inputs(X, "X")
    T = _as_inputs(X_test, "X_test")
    post = ExactPosterior(np.asarray(kernel_fn(Xa, Xa), dtype=np.float64), r2)
    K_sf = np.asarray(kernel_fn(T, Xa), dtype=np.float64)
    K_ss = np.asarray(kernel_fn(T, T), dtype=np.float64)
    K_ss = 0.5 * (K_ss + K_ss.T)
    mean = post.mean(K_sf, y)
    cov = sigma**2 * post.cov(K_sf, K_ss)
    if eta > 0.0:
        cov = cov + eta**2 * K_ss
    return mean, cov


def posterior_renyi_terms(
    kernel_fn: Kernel,
    X1: ArrayLike,
    y1: ArrayLike,
    X2: ArrayLike,
    y2: ArrayLike,
    X_test: ArrayLike,
    *,
    alpha: float,
    kernel_scale: float | None = None,
    r2: float,
    eta: float = 0.0,
    L: int = 1,
    **deprecated: Any,
) -> RenyiTerms:
    """Exact ``D_α`` between the released-path laws of datasets ``(X1, y1)`` and ``(X2, y2)``.

    On the finite test set ``X_test``; ``L`` independent paths give ``L`` times one path.
    """
    ks = _kernel_scale_argument(kernel_scale, deprecated, "posterior_renyi_terms")
    if isinstance(L, bool) or not isinstance(L, int | np.integer) or L < 1:
        raise ValueError(f"L must be a whole number >= 1, got {L!r}.")
    m1, c1 = posterior_mean_cov(kernel_fn, X1, y1, X_test, kernel_scale=ks, r2=r2, eta=eta)
    m2, c2 = posterior_mean_cov(kernel_fn, X2, y2, X_test, kernel_scale=ks, r2=r2, eta=eta)
    return gaussian_renyi_terms(m1, c1, m2, c2, alpha).scaled(int(L))


def posterior_renyi_divergence(
    kernel_fn: Kernel,
    X1: ArrayLike,
    y1: ArrayLike,
    X2: ArrayLike,
    y2: ArrayLike,
    X_test: ArrayLike,
    *,
    alpha: float,
    kernel_scale: float | None = None,
    r2: float,
    eta: float = 0.0,
    L: int = 1,
    **deprecated: Any,
) -> float:
    """Total of ``posterior_renyi_terms`` (``kernel_scale`` formerly ``sigma``)."""
    ks = _kernel_scale_argument(kernel_scale, deprecated, "posterior_renyi_divergence")
    return posterior_renyi_terms(
        kernel_fn, X1, y1, X2, y2, X_test, alpha=alpha, kernel_scale=ks, r2=r2, eta=eta, L=L
    ).total


# --------------------------------------------------------------------------------------------
# normalised stationary kernels for audits (k(x, x) = 1)
# --------------------------------------------------------------------------------------------
def _points(A: ArrayLike) -> NDArray[np.float64]:
    """Inputs as an ``(n, d)`` array; a 1-D array is ``n`` one-dimensional points."""
    arr = np.asarray(A, dtype=np.float64)
    return arr.reshape(-1, 1) if arr.ndim <= 1 else arr


def _scaled_dist(lengthscale: float | ArrayLike) -> Callable[[NDArray, NDArray], NDArray]:
    ls = np.atleast_1d(public_real_array(lengthscale, "lengthscale"))  # no text or booleans
    if ls.ndim != 1 or np.any(~np.isfinite(ls)) or np.any(ls <= 0.0):
        raise ValueError(
            f"lengthscale must be > 0 (scalar or one per dimension), got {lengthscale!r}."
        )

    def dist(A: NDArray, B: NDArray) -> NDArray:
        A = _points(A) / ls
        B = _points(B) / ls
        # exact differences (repeated points at distance exactly 0); leading batch axes allowed
        d2 = np.sum((A[..., :, None, :] - B[..., None, :, :]) ** 2, axis=-1)
        return np.sqrt(d2)

    return dist


def eq_kernel(lengthscale: float | ArrayLike = 1.0) -> Kernel:
    """Exponentiated quadratic ``exp(−‖(x−x')/ℓ‖²/2)`` (ARD if ``lengthscale`` is a vector)."""
    dist = _scaled_dist(lengthscale)
    return lambda A, B: np.exp(-0.5 * dist(A, B) ** 2)


def matern32_kernel(lengthscale: float | ArrayLike = 1.0) -> Kernel:
    """Matérn-3/2 ``(1 + √3 ρ) exp(−√3 ρ)``, ``ρ = ‖(x−x')/ℓ‖``."""
    dist = _scaled_dist(lengthscale)

    def k(A: NDArray, B: NDArray) -> NDArray:
        s = math.sqrt(3.0) * dist(A, B)
        return (1.0 + s) * np.exp(-s)

    return k


def matern52_kernel(lengthscale: float | ArrayLike = 1.0) -> Kernel:
    """Matérn-5/2 ``(1 + √5 ρ + 5ρ²/3) exp(−√5 ρ)``."""
    dist = _scaled_dist(lengthscale)

    def k(A: NDArray, B: NDArray) -> NDArray:
        r = dist(A, B)
        s = math.sqrt(5.0) * r
        return (1.0 + s + 5.0 * r * r / 3.0) * np.exp(-s)

    return k


def exponential_kernel(lengthscale: float = 1.0) -> Kernel:
    """Exponential (Ornstein–Uhlenbeck) kernel ``exp(−|x − x'|/ℓ)`` (1-D in the bound)."""
    dist = _scaled_dist(lengthscale)
    return lambda A, B: np.exp(-dist(A, B))


def constant_kernel() -> Kernel:
    """The constant kernel ``k ≡ 1``."""

    def k(A: NDArray, B: NDArray) -> NDArray:
        A, B = _points(A), _points(B)
        return np.ones(np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-2]))

    return k
