r"""Non-stationary (input-dependent lengthscale) GP regression (Smith et al. 2021, §3.1).

The Gibbs (1998) covariance with a lengthscale function ``r_l(x)`` per input dimension,
Smith et al. (2021, eq. 8):

.. math::

    k(x, x') = \theta_1 \prod_l \Bigl(\frac{2 r_l(x) r_l(x')}{r_l^2(x) + r_l^2(x')}\Bigr)^{1/2}
               \exp\Bigl(-\sum_l \frac{(x_l - x'_l)^2}{r_l^2(x) + r_l^2(x')}\Bigr).

It is positive semi-definite for every positive ``r_l`` (Paciorek & Schervish 2004, Thm 1,
with ``Σ(x) = diag(2 r_l(x)²)`` and ``R(τ) = exp(−τ²)``: ``((Σ(x) + Σ(x'))/2)⁻¹`` then has
entries ``1/(r_l²(x) + r_l²(x'))``; stop-47 audit, the text said ``diag(r_l(x)²/2)``, which
gives exponent ``−4Δ²/(r² + r'²)``), has ``k(x, x) = θ₁``, and reduces to ``exp(−Δ²/(2r²))``, PyMC's
``ExpQuad(ls=r)``, for a constant ``r``; in one dimension it is
PyMC's ``pm.gp.cov.Gibbs`` (which only supports ``input_dim=1``).

Under label privacy the inputs are public, so the lengthscale function may be built from
them: ``KDELengthscale`` is the paper's ``r(x) = [1/r_max + ρ(x)/n_target]⁻¹`` with
``ρ`` a Gaussian kernel density estimate of the public inputs (counts per unit), using the
smallest density in a neighbourhood of ``x`` (the §6.1 modification: "the smallest value of
ρ(x) from a region neighbouring x").  The model is an exact GP with this kernel, so the
release is the ordinary ``pm_dpgp.mechanisms.label.cloaking_release.cloaked_release``
with ``C = K_*f (K_ff + σ²I)⁻¹`` — the sensitivity argument is unchanged because ``C`` does
not depend on ``y`` (the lengthscale function depends on public inputs only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._ieee import ieee_function
from pm_dpgp._validation import check_finite_array, check_positive, check_scale
from pm_dpgp.models._common import data_input, dataframe_columns
from pm_dpgp.models.exact import GPRegression, gp_regression

__all__ = ["GibbsKernel", "KDELengthscale", "nonstationary_gp_regression"]


class GibbsKernel(pm.gp.cov.Covariance):
    """Gibbs (1998) non-stationary EQ covariance in any dimension (Smith et al. 2021, eq. 8).

    ``lengthscale_func(X)`` maps a PyTensor ``(n, d)`` matrix to positive lengthscales,
    ``(n, d)`` or ``(n,)`` (the same in every dimension).  It must depend on public
    quantities only.  Unit variance; multiply by ``kernel_scale**2`` for ``θ₁``.
    """

    def __init__(
        self, input_dim: int, lengthscale_func: Callable[[Any], Any], active_dims=None
    ) -> None:
        super().__init__(input_dim, active_dims)
        if not callable(lengthscale_func):
            raise TypeError("lengthscale_func must be callable (a PyTensor function of X).")
        self.lengthscale_func = lengthscale_func
        centres = getattr(lengthscale_func, "centres", None)  # a KDELengthscale's public inputs
        if centres is not None and np.shape(centres)[1] != self.n_dims:
            # stop-32 audit: active_dims=[0] with a 2-D KDE broadcast silently (0.57 off)
            raise ValueError(
                f"lengthscale_func is built on {np.shape(centres)[1]}-column inputs but this "
                f"kernel acts on {self.n_dims} column(s) (active_dims); build the lengthscale "
                "on the same columns."
            )

    def check_lengthscales(self, X: NDArray[np.float64]) -> None:
        """Evaluate ``lengthscale_func`` once at the PUBLIC inputs ``X`` and refuse a result
        that is not ``(n,)`` or ``(n, d)`` finite positive floats.

        A function returning 3 columns for 1-D inputs was broadcast (distances counted three
        times), a scalar raised ``IndexError`` deep in PyTensor, and a boolean tensor was the
        lengthscale 1 (stop-40 fuzz).  Public values only: the message may quote them.
        """
        Xs = np.asarray(X, dtype=np.float64)[:, self.active_dims]
        try:
            out = pt.as_tensor_variable(self.lengthscale_func(pt.as_tensor_variable(Xs)))
            r = np.asarray(ieee_function([], out)())
        except Exception as err:  # noqa: BLE001 - any failure of the user's function
            raise ValueError(
                f"lengthscale_func failed on the public inputs ({type(err).__name__}: {err})."
            ) from err
        n, d = Xs.shape
        if r.dtype.kind != "f" or r.shape not in ((n,), (n, d)):
            raise ValueError(
                f"lengthscale_func must return floats of shape ({n},) or ({n}, {d}) for inputs "
                f"of shape ({n}, {d}), got dtype {r.dtype} and shape {r.shape}."
            )
        if not np.all(np.isfinite(r)) or np.any(r <= 0.0):
            raise ValueError("lengthscale_func must return finite lengthscales > 0.")

    def _ls(self, X: Any) -> Any:
        r = pt.as_tensor_variable(self.lengthscale_func(X))
        # a lengthscale that is not finite and > 0 makes the kernel NaN there, which every
        # public evaluation refuses (``_eval_kernel``): ``check_lengthscales`` sees only the
        # training inputs, and 0 at a test input gave a cloaked release equal to the prior
        # mean with noise sd 0, silently (stop-43 audit)
        r = pt.switch(pt.gt(r, 0.0) & pt.lt(r, np.inf), r, np.nan)
        if r.ndim == 1:
            return r[:, None] * pt.ones((1, self.n_dims))
        return r

    def full(self, X: Any, Xs: Any = None) -> Any:
        X, Xs = self._slice(X, Xs)
        X = pt.as_tensor_variable(X)
        Z = X if Xs is None else pt.as_tensor_variable(Xs)
        rx = self._ls(X)[:, None, :]
        rz = self._ls(Z)[None, :, :]
        # eq. 8 in units of m = max(r(x), r(x')): 2 r r' / (r² + r'²) = 2 a b / (a² + b²) and
        # Δ² / (r² + r'²) = (Δ/m)² / (a² + b²) with a, b = r/m, r'/m in (0, 1].  The squares of
        # the lengthscales themselves overflowed near 1e155 and lost digits to underflow near
        # 1e-160 (1.7e-4 off a cloaked mean), where the kernel depends on ratios only (stop-48)
        m = pt.maximum(rx, rz)
        a, b = rx / m, rz / m
        s2 = pt.square(a) + pt.square(b)
        pref = pt.prod(pt.sqrt(2.0 * a * b / s2), axis=2)
        diff2 = pt.square((X[:, None, :] - Z[None, :, :]) / m)
        return pref * pt.exp(-pt.sum(diff2 / s2, axis=2))

    def diag(self, X: Any) -> Any:
        return self._alloc(1.0, X.shape[0])

    def describe(self) -> str:
        """For release metadata."""
        inner = getattr(self.lengthscale_func, "describe", None)
        text = inner() if callable(inner) else getattr(self.lengthscale_func, "__name__", "?")
        return f"Gibbs(input_dim={self.input_dim}, lengthscale={text})"


class KDELengthscale:
    r"""Public density-adapted lengthscale ``r_l(x) = s_l [1/r_max + ρ_min(x)/n_target]⁻¹``.

    Smith et al. (2021, §3.1 and §6.1).  ``ρ(u) = Σ_j N(u; u_j, h² I)`` is the Gaussian KDE
    (count density) of the public inputs in scaled coordinates ``u = x / s``;
    ``ρ_min(x)`` is its minimum over ``x`` and the ``2d`` points ``x ± w s_l e_l``
    (``w = neighbourhood``; 0 gives the unmodified §3.1 design).  ``n_target`` is the number
    of training points wanted within half a lengthscale (1-d), ``r_max`` bounds the
    lengthscale (in scaled units).  Depends only on the PUBLIC inputs: under full privacy
    (``sample_path_release``) ``X_public`` must not be the private training inputs, which the
    release does not check (``docs/models.md``).
    """

    def __init__(
        self,
        X_public: ArrayLike,
        *,
        n_target: float,
        max_lengthscale: float,
        bandwidth: float,
        neighbourhood: float = 0.0,
        scales: ArrayLike | None = None,
    ) -> None:
        # the schema of labelled inputs (public), checked against the model's by
        # nonstationary_gp_regression: the centres are read by position (stop-47 audit)
        self.input_columns = dataframe_columns(X_public)
        X = check_finite_array(X_public, "X_public", ndim=2)
        d = X.shape[1]
        self.scales = np.ones(d) if scales is None else check_finite_array(scales, "scales", ndim=1)
        if self.scales.shape != (d,) or np.any(self.scales <= 0):
            raise ValueError(f"scales must be {d} positive numbers.")
        self.n_target = check_positive(n_target, "n_target")
        self.max_lengthscale = check_positive(max_lengthscale, "max_lengthscale")
        self.bandwidth = check_positive(bandwidth, "bandwidth")
        self.neighbourhood = check_positive(neighbourhood, "neighbourhood", allow_zero=True)
        self.centres = X / self.scales
        offsets = [np.zeros(d)]
        if self.neighbourhood > 0:
            for sign in (-1.0, 1.0):
                for j in range(d):
                    e = np.zeros(d)
                    e[j] = sign * self.neighbourhood
                    offsets.append(e)
        self.offsets = np.array(offsets)
        self._fn: Any = None

    def _kernel_sum(self, U: Any) -> Any:
        """``S(u) = Σ_j exp(−½ ‖(u − u_j)/h‖²)``, so that ``ρ(u) = S(u) / (2π h²)^{d/2}``: the
        distances in bandwidths, never squared in the inputs' own units."""
        W = (U[:, None, :] - self.centres[None, :, :]) / self.bandwidth
        return pt.sum(pt.exp(-0.5 * pt.sum(pt.square(W), axis=2)), axis=1)

    def __call__(self, X: Any) -> Any:
        """PyTensor ``(n, d)`` lengthscales at the rows of ``X``.

        ``r = [1/r_max + ρ/n_target]⁻¹ = r_max / (1 + a S)`` with
        ``a = r_max / ((2π)^{d/2} h^d n_target)``, evaluated as ``exp(log a + log S)``: with
        ``(2π h²)^{d/2}`` and the squared distances in the inputs' units, inputs near 1e155
        (bandwidth and maximum lengthscale alike) raised Python's ``OverflowError`` and near
        1e-155 gave NaN and ``r_max`` (the density lost to underflow), where the lengthscales
        are ``s`` × those at scale 1 (stop-48 audit).
        """
        U = pt.as_tensor_variable(X) / self.scales
        S = pt.min(pt.stack([self._kernel_sum(U + off) for off in self.offsets]), axis=0)
        d = self.centres.shape[1]
        log_a = (
            math.log(self.max_lengthscale)
            - d * math.log(self.bandwidth)
            - 0.5 * d * math.log(2.0 * math.pi)
            - math.log(self.n_target)
        )
        g = self.max_lengthscale / (1.0 + pt.exp(log_a + pt.log(S)))
        return g[:, None] * pt.as_tensor_variable(self.scales)[None, :]

    def evaluate(self, X: ArrayLike) -> NDArray[np.float64]:
        """NumPy values of the lengthscales at ``X`` (for plots and documentation)."""
        if self._fn is None:
            Xt = pt.matrix("X", dtype="float64")
            self._fn = ieee_function([Xt], self(Xt))
        return np.asarray(self._fn(check_finite_array(X, "X", ndim=2)))

    def describe(self) -> str:
        return (
            f"KDE(n_target={self.n_target:g}, max={self.max_lengthscale:g}, "
            f"bandwidth={self.bandwidth:g}, neighbourhood={self.neighbourhood:g}, "
            f"scales={self.scales.tolist()}, {self.centres.shape[0]} public centres)"
        )


def nonstationary_gp_regression(
    X: ArrayLike,
    y: ArrayLike,
    lengthscale_func: Callable[[Any], Any],
    *,
    kernel_scale: float,
    noise_sd: float,
    mean: float = 0.0,
    name: str = "f",
    model: pm.Model | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
) -> GPRegression:
    """Exact GP regression with the Gibbs kernel ``kernel_scale² · GibbsKernel(lengthscale_func)``.

    Smith et al. (2021, §3.1, eq. 8).  ``lengthscale_func`` must be public (e.g.
    ``KDELengthscale`` of the public inputs).  Release with
    ``pm_dpgp.mechanisms.label.cloaking_release.cloaked_release``.
    """
    X_arr = data_input(X, "X", 2)[0]  # a pm.Data container passes through to gp_regression
    # a KDELengthscale built on a DataFrame in another column order than X's had its density
    # centres in the wrong coordinates, silently (stop-47 audit)
    built_on, columns = getattr(lengthscale_func, "input_columns", None), dataframe_columns(X)
    if built_on is not None and columns is not None and built_on != columns:
        raise ValueError(
            f"the lengthscale function was built on the columns {list(built_on)} but X has "
            f"{list(columns)}: inputs are used by position, so build it on X's columns in "
            "X's order."
        )
    scale = check_scale(kernel_scale, "kernel_scale")
    gibbs = GibbsKernel(X_arr.shape[1], lengthscale_func)
    gibbs.check_lengthscales(X_arr)  # public inputs, before any release
    cov = scale**2 * gibbs
    return gp_regression(
        X, y, cov, noise_sd=noise_sd, mean=mean, name=name, model=model, coords=coords
    )
