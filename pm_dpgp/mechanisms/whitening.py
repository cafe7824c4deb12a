"""Whitened coordinates of a label release, computed so that round-off cannot leak.

A label-private Gaussian release (cloaking, prior noise) is ``μ + F w(y) + noise`` with the
public factor ``F`` and the whitened mean ``w(y) = W (y − μ)``, ``W`` a public ``k × n``
matrix (e.g. ``L_k⁻¹ U_kᵀ C`` for cloaking).  The privacy analysis bounds the exact change
``W e_j (y_j − y′_j)``; the release uses the *computed* ``fl(w)``.  When the labels lie far from
the prior mean (public bounds ``[10¹², 10¹² + 1]`` with μ = 0, say), the rounding of
``fl(W(y − μ))`` is of order ``u·|y − μ|·‖W‖`` — far larger than the change one label can make,
and different for two neighbours — so the computed vectors of neighbours can differ by more
than the sensitivity (found by an adversarial audit: 45× at 10¹², prior noise).

This module removes that dependence in two steps (Higham 2002, §3.1, §3.5 for the bounds):

1. **Centre at the public midpoint** ``c`` of the clipping bounds: ``w = W(y − c·1) +
   (c − μ) W 1``.  The second term is public and computed identically for every dataset; only
   ``v = fl(y − c)`` with ``|v_j| ≤ d/2`` (``d`` the public width) meets private data.
2. **Bound the rounding of the private part from public quantities**: with ``γ_n = n u /
   (1 − n u)``, ``|fl(v) − (y − c)| ≤ u d/2`` and ``|fl(W fl(v)) − W fl(v)| ≤ γ_n |W| |fl(v)|``
   componentwise, so ``‖fl(w_priv) − W(y − c)‖₂ ≤ γ_{n+1} (1 + u) (d/2) ‖ |W| 1 ‖₂ =: r``
   (plus ``√k (n + 4) 2⁻¹⁰⁷⁴`` for products that underflow, which err absolutely).  Two
   neighbours' computed private parts then differ by at most ``Δ_W + 2r`` with the exact
   column sensitivity ``Δ_W = d · max_j ‖W e_j‖₂`` of the *computed* ``W`` (evaluated here
   with a relative allowance for its own rounding).  The releases charge
   ``max(Δ, Δ_W) + 2r``.

The private part is then discretised (secure noise) or perturbed (simulation) on its own, and
the public part is added afterwards (post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from pm_dpgp.gp.linalg import unit_scaled

__all__ = ["CentredWhitening", "centred_whitening", "check_whitened_range"]

_U = float(np.finfo(np.float64).eps) / 2.0  # unit round-off
_SMALLEST_SUBNORMAL = 2.0**-1074  # twice the largest absolute error of an underflowing product


def _gamma(n: int) -> float:
    """Higham's γ_n = n u / (1 − n u), with a 2× allowance for evaluating this bound in float."""
    return 2.0 * n * _U / (1.0 - n * _U)


@dataclass(frozen=True)
class CentredWhitening:
    """``w(y) = private + public`` with the rounding of ``private`` bounded publicly.

    Attributes
    ----------
    private:
        ``fl(W fl(y − c))``, ``(k,)``: the only part that depends on the private labels.
    public:
        ``(c − μ) W 1``, ``(k,)``: the same for every dataset.
    column_sensitivity:
        ``d · max_j ‖W e_j‖₂`` (with its rounding allowance): the exact change of ``W(y − c)``
        when one label moves across the whole public range.
    rounding:
        ``r``, a bound on ``‖private − W(y − c)‖₂`` that holds for every dataset.
    """

    private: NDArray[np.float64]
    public: NDArray[np.float64]
    column_sensitivity: float
    rounding: float


#: Largest public bound on ``|fl(W fl(y − c))|`` accepted (the noise sd has the same limit in
#: ``gaussian._check_representable``): the round-off bound ``r`` assumes no overflow.
_MAX_WHITENED = 1e300


def check_whitened_range(bound: float) -> None:
    """Refuse public settings under which ``fl(W fl(y − c))`` could overflow, before any spend.

    ``bound = (d/2) · max_i Σ_j |W_ij| · (1 + γ_n)`` bounds every computed coordinate for every
    data set in the public range.  Beyond float64 the rounding analysis above fails: one data
    set's coordinate rounded to ``inf`` (clamped by the discretisation) while its neighbour's
    stayed finite, and the computed vectors differed by far more than ``Δ_W + 2r`` (stop-43
    audit: ``y_bounds = ±3e305``, secure noise, the neighbour gave a non-finite draw with
    probability 1.00 against 0.49, where (ε = 0.1, δ = 1e-5)-DP allows 0.54).  Depends on
    the public ``W`` and bounds only.
    """
    if not bound < _MAX_WHITENED:
        raise ValueError(
            f"the whitened mean W(y - c) of labels in y_bounds can reach {bound:.3g}, beyond "
            "float64 arithmetic: the public bounds are far too wide for the kernel and noise; "
            "choose narrower y_bounds or rescale the outputs. Nothing was spent or drawn."
        )


def _largest_column_norm(W: NDArray[np.float64]) -> float:
    """``max_j ‖W e_j‖₂`` (of the columns of a 2-d ``W``; of ``W`` itself when 1-d) computed
    on ``W`` scaled by the power of two that brings its largest entry into ``[½, 1)``
    (exact), so squares do not underflow: unscaled, ``W = 10⁻¹⁷⁰`` everywhere gave a column
    sensitivity 0 and a rounding bound ``r`` 5·10¹³⁶ times below the error it bounds
    (stop-48 audit).  A subnormal result is rounded up one step; otherwise the value is
    bitwise the unscaled one.  Its round-off is the caller's ``γ`` allowance."""
    if not np.any(W):
        return 0.0
    Ws, e = unit_scaled(W)  # W is finite (checked by the caller)
    with np.errstate(under="ignore"):  # entries far below the largest may underflow
        squares = np.einsum("ij,ij->j", Ws, Ws) if Ws.ndim == 2 else np.dot(Ws, Ws)
    norm = math.ldexp(float(np.sqrt(np.max(squares))), e)
    return math.nextafter(norm, math.inf) if norm < 2.0**-1022 else norm


def centred_whitening(
    W: NDArray[np.float64],
    y: NDArray[np.float64],
    y_bounds: tuple[float, float],
    prior_mean: float,
) -> CentredWhitening:
    """Whitened mean ``W (y − μ)`` of labels clipped to the public ``y_bounds``, centred at the
    bounds' midpoint, with a public bound on its round-off (module docstring).

    ``W`` must be computed from public quantities only; ``y`` must already be clipped to
    ``y_bounds``.
    """
    lo, hi = float(y_bounds[0]), float(y_bounds[1])
    k, n = W.shape
    centre = lo + 0.5 * (hi - lo)  # public; any public centre works, the midpoint is tightest
    half_width = max(hi - centre, centre - lo)  # ≥ d/2 despite the rounding of the midpoint
    if not np.all(np.isfinite(W)):  # public: W is computed from public quantities only
        raise ValueError(
            "the whitening map W of the release is not finite in float64 (its noise factor "
            "is subnormal or the kernel's scale extreme): typically the test points are so "
            "far from every training input that the release matrix is nearly zero and says "
            "almost nothing about the labels; drop those test points (their prior is public) "
            "or rescale the inputs and outputs. Nothing was spent or drawn."
        )
    abs_row_sums = np.abs(W).sum(axis=1)
    check_whitened_range(half_width * float(np.max(abs_row_sums, initial=0.0)) * (1.0 + _gamma(n)))
    # the private labels meet arithmetic here: no floating-point error state may depend on
    # them (a label within 1e-308 of the centre made products underflow, FloatingPointError
    # under np.seterr(all="raise") before the spend; stop-48).  Overflow is excluded by
    # check_whitened_range, and underflow is in r below
    with np.errstate(under="ignore"):
        private = W @ (np.asarray(y, dtype=np.float64) - centre)
    public = (centre - float(prior_mean)) * W.sum(axis=1)
    rounding = _gamma(n + 1) * (1.0 + _U) * half_width * _largest_column_norm(abs_row_sums)
    # gradual underflow: a product in the subnormal range errs by up to 2⁻¹⁰⁷⁵ absolutely
    # (fl(xy) = xy(1 + δ) + η, Higham 2002, §2.1, eq. 2.8; sums of subnormals are exact), which
    # no relative bound covers: n per component, ≤ √k n 2⁻¹⁰⁷⁵ in the 2-norm (2× here, and 4
    # more smallest subnormals for the rounding of r itself).  Stop-45 audit: at y_bounds
    # (0, 1e-320) two neighbours' whitened means differed by 1.0005e-320 with 1e-320 charged.
    rounding += (n + 4) * math.sqrt(k) * _SMALLEST_SUBNORMAL
    column = _largest_column_norm(W) * (hi - lo) * (1.0 + _gamma(k + 2))
    return CentredWhitening(private, public, column, rounding * (1.0 + _gamma(n + k)))
