r"""Exact GP regression posterior at fixed hyperparameters (numpy/scipy only).

With training inputs ``X`` (n points), test inputs ``X*`` (m points), kernel
matrices ``K_ff = k(X, X)``, ``K_sf = k(X*, X)``, ``K_ss = k(X*, X*)``, Gaussian
observation noise variance ``σ_n²`` and prior means ``μ_f`` (at ``X``) and ``μ_s``
(at ``X*``), the posterior of the latent function at ``X*`` is Gaussian with
(Rasmussen & Williams 2006, *Gaussian Processes for Machine Learning*, eqs. 2.22–2.24,
with a non-zero prior mean as in eq. 2.38)

.. math::

    \bar f_* = \mu_s + K_{sf}(K_{ff} + \sigma_n^2 I)^{-1}(y - \mu_f), \qquad
    \operatorname{cov}(f_*) = K_{ss} - K_{sf}(K_{ff} + \sigma_n^2 I)^{-1}K_{fs}.

The posterior mean is linear in the (private) outputs: ``f̄* − μ_s = C (y − μ_f)``
with the *cloaking matrix* ``C = K_sf (K_ff + σ_n² I)⁻¹`` (Smith, Álvarez,
Zwiessele & Lawrence 2018, "Differentially private regression with Gaussian
processes", AISTATS, §3).  Its columns ``c_i`` say how much one training output
moves the released mean, which is what the cloaking mechanism calibrates noise to.

All solves go through one Cholesky factor of ``K_ff + σ_n² I`` (R&W Algorithm 2.1);
no explicit inverse is formed.  No privacy logic lives here.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_finite_array, check_positive
from pm_dpgp.gp.linalg import (
    check_square_symmetric,
    cho_solve_lower,
    jittered_cholesky,
    solve_lower,
)

__all__ = ["ExactPosterior", "cloaking_matrix", "posterior_mean_cov"]


def _as_mean(value: ArrayLike, size: int, name: str) -> NDArray[np.float64] | float:
    """A scalar prior mean, or a vector of length ``size``; finite."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        v = float(arr)
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {value!r}.")
        return v
    arr = check_finite_array(arr, name, ndim=1)
    if arr.shape[0] != size:
        raise ValueError(f"{name} must be a scalar or have length {size}, got shape {arr.shape}.")
    return arr


class ExactPosterior:
    r"""Factorisation of ``K_ff + σ_n² I`` and the exact GP posterior built on it.

    Parameters
    ----------
    K_ff
        Training kernel matrix ``k(X, X)``, shape ``(n, n)``, symmetric PSD.
    noise_var
        Observation noise variance ``σ_n² >= 0``.
    jitter
        Initial jitter passed to ``jittered_cholesky``
        (default 0: factorise exactly, add jitter only if the factorisation fails).
    overwrite_K
        Allow the factorisation to destroy ``K_ff`` (a writeable float64 array; its memory
        then holds ``L``): peak memory one ``n × n`` matrix instead of two.
    validated
        The caller has just made ``K_ff`` a finite, exactly symmetric (``½(K + Kᵀ)``),
        square float64 array (``PublicGP`` does, for the kernel matrix it evaluates), so the
        blocked check ``check_square_symmetric`` (≈ 0.2 Cholesky at ``n = 3,000``) is
        skipped; the factorisation is then bitwise the same.

    Attributes
    ----------
    L : numpy.ndarray
        Lower Cholesky factor, ``L Lᵀ = K_ff + (σ_n² + jitter) I``.
    jitter : float
        Jitter actually added to the diagonal (0.0 if none was needed).  It is part
        of the model that was computed: record it with any release.
    noise_var : float
        ``σ_n²`` as given (without the jitter).
    n : int
        Number of training points.

    Notes
    -----
    Implements Rasmussen & Williams (2006) Algorithm 2.1 / eqs. 2.22–2.24 and the
    cloaking matrix of Smith et al. (2018, §3).
    """

    L: NDArray[np.float64]
    jitter: float
    noise_var: float
    n: int

    def __init__(
        self,
        K_ff: ArrayLike,
        noise_var: float,
        *,
        jitter: float = 0.0,
        overwrite_K: bool = False,
        validated: bool = False,
    ) -> None:
        # the one validation pass over K_ff (done by the caller when ``validated``)
        K = K_ff if validated else check_square_symmetric(K_ff, "K_ff")
        self.noise_var = check_positive(noise_var, "noise_var", allow_zero=True)
        self.n = K.shape[0]
        # One working n×n matrix: K_ff itself with overwrite_K (the caller gives it up, as
        # PublicGP does with the kernel matrix it just evaluated), else one copy.  The noise
        # goes on its diagonal, and the Cholesky factor overwrites it.
        A = K if overwrite_K and K is K_ff and K.flags.writeable else np.array(K, order="F")
        np.einsum("ii->i", A)[:] += self.noise_var
        self.L, self.jitter = jittered_cholesky(A, jitter=jitter, overwrite_a=True, check=False)

    # ------------------------------------------------------------------ checks
    def _check_K_sf(self, K_sf: ArrayLike) -> NDArray[np.float64]:
        arr = check_finite_array(K_sf, "K_sf")
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.n:
            raise ValueError(
                f"K_sf must have shape (m, {self.n}) (test points × training points), "
                f"got {arr.shape}."
            )
        return arr

    def _check_y(self, y: ArrayLike) -> NDArray[np.float64]:
        arr = check_finite_array(y, "y", ndim=1)
        if arr.shape[0] != self.n:
            raise ValueError(f"y must have length {self.n}, got {arr.shape[0]}.")
        return arr

    # ----------------------------------------------------------------- algebra
    def solve(self, B: ArrayLike) -> NDArray[np.float64]:
        """``(K_ff + σ_n² I + jitter I)⁻¹ B`` by two triangular solves."""
        return cho_solve_lower(self.L, B)

    def cloaking_matrix(self, K_sf: ArrayLike) -> NDArray[np.float64]:
        r"""Cloaking matrix ``C = K_sf (K_ff + σ_n² I)⁻¹``, shape ``(m, n)``.

        Smith et al. (2018, §3): the posterior mean is ``μ_s + C (y − μ_f)``.
        Computed as ``(A⁻¹ K_fs)ᵀ`` with ``A = K_ff + σ_n² I`` symmetric.
        """
        K = self._check_K_sf(K_sf)
        return self.solve(K.T).T

    def alpha(self, y: ArrayLike, *, mean_f: ArrayLike = 0.0) -> NDArray[np.float64]:
        r"""``α = (K_ff + σ_n² I)⁻¹ (y − μ_f)`` (R&W Algorithm 2.1, line 3)."""
        y_arr = self._check_y(y)
        return self.solve(y_arr - _as_mean(mean_f, self.n, "mean_f"))

    def mean(
        self,
        K_sf: ArrayLike,
        y: ArrayLike,
        *,
        mean_f: ArrayLike = 0.0,
        mean_s: ArrayLike = 0.0,
    ) -> NDArray[np.float64]:
        r"""Posterior mean ``μ_s + K_sf (K_ff + σ_n² I)⁻¹ (y − μ_f)`` (R&W eq. 2.23 / 2.38).

        Equal to ``μ_s + C (y − μ_f)`` with ``C`` the cloaking matrix.
        """
        K = self._check_K_sf(K_sf)
        m_s = _as_mean(mean_s, K.shape[0], "mean_s")
        return m_s + K @ self.alpha(y, mean_f=mean_f)

    def cov(self, K_sf: ArrayLike, K_ss: ArrayLike) -> NDArray[np.float64]:
        r"""Posterior covariance ``K_ss − K_sf (K_ff + σ_n² I)⁻¹ K_fs`` (R&W eq. 2.24).

        Computed as ``K_ss − Vᵀ V`` with ``V = L⁻¹ K_fs``; symmetrised exactly.
        Latent function, no observation noise added.
        """
        K = self._check_K_sf(K_sf)
        Kss = check_square_symmetric(K_ss, "K_ss")
        if Kss.shape[0] != K.shape[0]:
            raise ValueError(
                f"K_ss must have shape ({K.shape[0]}, {K.shape[0]}) to match K_sf, got {Kss.shape}."
            )
        V = solve_lower(self.L, K.T)
        S = Kss - V.T @ V
        return 0.5 * (S + S.T)

    def var(self, K_sf: ArrayLike, K_ss_diag: ArrayLike) -> NDArray[np.float64]:
        r"""Diagonal of ``cov``: ``k(x*, x*) − ‖L⁻¹ k(X, x*)‖²`` (R&W Algorithm 2.1, line 6)."""
        K = self._check_K_sf(K_sf)
        d = check_finite_array(K_ss_diag, "K_ss_diag", ndim=1)
        if d.shape[0] != K.shape[0]:
            raise ValueError(f"K_ss_diag must have length {K.shape[0]}, got {d.shape[0]}.")
        V = solve_lower(self.L, K.T)
        return d - np.sum(V * V, axis=0)

    def log_marginal_likelihood(self, y: ArrayLike, *, mean_f: ArrayLike = 0.0) -> float:
        r"""``log N(y | μ_f, K_ff + σ_n² I)`` (R&W eq. 2.30, Algorithm 2.1 line 8).

        Includes the jitter actually used.  This is a function of the private
        ``y``: never release it without a privacy mechanism.
        """
        y_arr = self._check_y(y)
        r = y_arr - _as_mean(mean_f, self.n, "mean_f")
        a = self.solve(r)
        return float(
            -0.5 * r @ a - np.sum(np.log(np.diag(self.L))) - 0.5 * self.n * math.log(2 * math.pi)
        )


def cloaking_matrix(K_ff: ArrayLike, K_sf: ArrayLike, noise_var: float) -> NDArray[np.float64]:
    """Cloaking matrix ``C = K_sf (K_ff + σ_n² I)⁻¹`` (Smith et al. 2018, §3).

    Convenience wrapper around ``ExactPosterior.cloaking_matrix``; use the
    class directly to reuse one factorisation or to read the jitter used.
    """
    return ExactPosterior(K_ff, noise_var).cloaking_matrix(K_sf)


def posterior_mean_cov(
    K_ff: ArrayLike,
    K_sf: ArrayLike,
    K_ss: ArrayLike,
    y: ArrayLike,
    noise_var: float,
    *,
    mean_f: ArrayLike = 0.0,
    mean_s: ArrayLike = 0.0,
    full_cov: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Exact GP posterior mean and covariance (R&W 2006, eqs. 2.23–2.24).

    ``K_ss`` is the full ``(m, m)`` test covariance if ``full_cov`` else its
    diagonal ``(m,)``; the second output is correspondingly the posterior
    covariance matrix or the vector of variances.
    """
    post = ExactPosterior(K_ff, noise_var)
    mu = post.mean(K_sf, y, mean_f=mean_f, mean_s=mean_s)
    second = post.cov(K_sf, K_ss) if full_cov else post.var(K_sf, K_ss)
    return mu, second
