r"""The default rank cut of cloaked releases: drop what the noise would drown anyway.

A cloaked release (Smith et al. 2018 §3) keeps the directions of the cloaking matrix ``C``
whose singular values exceed ``rank_tol · σ_1`` and projects the rest out of the released
mean (``docs/cloaking.md`` §4).  Every kept direction must be covered by noise, so the cut
trades a bias for noise: the projected-out part of the mean is

    ‖(I − U_k U_kᵀ) C r‖ ≤ (rank_tol σ_1 + ρ) ‖r‖ ≤ 1.1 · rank_tol · σ_1 · R,            (1)

``r = y − μ`` the centred clipped labels, ``R = √n · max(|lower − μ|, |upper − μ|)`` the
largest ``‖r‖`` the public bounds allow and ``ρ ≤ max(0.1 rank_tol σ_1, ρ_round)`` the range
finder's residual (``_column_space``; exact SVDs have ``ρ = 0``).  Its rounding level
``ρ_round = 10 √m ε_M ‖QᵀC‖_F ≤ 10 √(m·min(m, n)) ε_M σ_1`` (``ε_M = 2⁻⁵²``) exceeds
``0.1 rank_tol σ_1`` only for a ``rank_tol`` near ``10⁻¹⁰`` with ``m ≳ 10⁵`` test points, or a
smaller one given by the caller; the recorded ratio (3) then uses ``rank_tol + ρ_round/σ_1``
in place of ``1.1 rank_tol``.  The noise of one draw has covariance ``σ² F Fᵀ`` with
``σ = s · Δ₂``, ``s`` the noise multiplier of the calibration and ``Δ₂ ≥ d · max_i ‖a_i‖_{M⁺}``
the charged L2 sensitivity (``d = upper − lower``).  Along the unit vector ``u = c̃_i / ‖c̃_i‖``
of any projected column ``c̃_i = U_k U_kᵀ c_i``, Cauchy–Schwarz in the ``M``-inner product gives
``uᵀ M u ≥ ‖c̃_i‖² / (c̃_iᵀ M⁺ c̃_i)``, so

    E‖noise‖² ≥ σ² uᵀ F Fᵀ u ≥ s² d² ‖c̃_i‖²  for every i,  hence  ≥ s² d² σ_1² / n,     (2)

because ``max_i ‖c̃_i‖² ≥ ‖U_k U_kᵀ C‖_F² / n ≥ σ_1² / n`` (the top direction is always kept).
``s`` is at least the analytic Gaussian multiplier ``s_a(ε, δ)`` of Balle & Wang (2018): the
classic constant and the secure (discrete Gaussian, zCDP) calibration need more noise.
Dividing (1) by the square root of (2),

    ‖bias‖ / sqrt(E‖noise‖²) ≤ 1.1 · rank_tol · √n · R / (s_a d) =: ratio(rank_tol).       (3)

``rank_tol="auto"`` takes the largest ``rank_tol`` with ``ratio ≤ η = 0.01``: whatever the
labels, the mean loses less than 1 % of the root-mean-square norm of one draw's noise.  On
typical problems the worst label vector stays 7–15 times below that (the noise spreads over
all ``k`` directions, (2) counts one), but the bound is attained up to the factor 1.1: two
symmetric training inputs and two symmetric test points whose second singular value sits
just below the cut reach 0.0091 (``tests/test_rank_rule.py``).  Everything in (3)
is public (ε, δ, n, m, the bounds, the prior mean), so the rule spends no budget and the plan
reproduces it.  The result is clamped to ``[10⁻¹⁰, 10⁻²]``: below ``10⁻¹⁰`` the whitened
problem is ill-conditioned (``docs/cloaking.md`` §4) and (1) no longer holds with 1.1 once the
residual reaches its rounding level; the clamp is reported through the recorded ratio.

The bound (3) is per draw; the average of ``S`` independent draws has ``√S`` times less noise,
so its ratio is at most ``√S · ratio``.  Derivation and measurements: ``docs/cloaking.md``,
"The default rank cut".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pm_dpgp._validation import check_finite_number
from pm_dpgp.mechanisms.gaussian import gaussian_sigma

__all__ = [
    "RANK_TOL_CEILING",
    "RANK_TOL_FLOOR",
    "RANK_TOL_MIN",
    "TRUNCATION_ETA",
    "RankCut",
    "TruncationSetting",
    "check_rank_tol",
]

#: Largest allowed ratio of the worst-case truncation bias to one draw's RMS noise norm.
TRUNCATION_ETA = 0.01
#: Smallest ``rank_tol`` the rule returns (the whitened problem's conditioning).
RANK_TOL_FLOOR = 1e-10
#: Largest ``rank_tol`` the rule returns.
RANK_TOL_CEILING = 1e-2
#: Smallest ``rank_tol`` accepted: the float64 unit round-off.  A smaller cut keeps directions
#: of ``C`` that are round-off, not signal, and pays noise for them (stop-39 audit: an exactly
#: rank-8 matrix kept k = 40 directions at 1e-17, whitened conditioning up to 1.7e3).
RANK_TOL_MIN = float(np.finfo(np.float64).eps)


def check_rank_tol(rank_tol: float) -> float:
    """``rank_tol`` as a float in ``[RANK_TOL_MIN, 1)``, else ``ValueError`` (a public
    argument: checked before any budget is spent or noise drawn)."""
    value = check_finite_number(rank_tol, "rank_tol")
    if not RANK_TOL_MIN <= value < 1.0:
        raise ValueError(
            f"rank_tol must be 'auto' or a number in [{RANK_TOL_MIN:.3g}, 1), got {rank_tol!r}"
            + (
                ": below the float64 round-off a cut keeps directions of C that are round-off."
                if 0.0 < value < RANK_TOL_MIN
                else "."
            )
        )
    return value


#: The range finder accepts a residual ``ρ ≤ max(0.1 rank_tol σ_1, ρ_round)``.
_RESIDUAL_SHARE = 0.1
#: ``ρ_round / (σ_1 √(m · min(m, n)))``: ``10 ε_M`` (``_column_space``'s rounding level).
_ROUNDING = 10.0 * float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class RankCut:
    """The cut a release uses: its ``rank_tol``, how it was chosen, and bound (3)."""

    rank_tol: float
    rule: Literal["auto", "given"]
    bias_ratio: float  # (3): worst-case truncation bias / RMS noise norm of one draw


@dataclass(frozen=True)
class TruncationSetting:
    """The public quantities of bound (3): ``(ε, δ)`` of one draw, ``n`` training and ``m`` test
    inputs, the clipping bounds and the prior mean."""

    epsilon: float
    delta: float
    n: int
    m: int  # test inputs: the range finder's rounding level grows with √m
    y_bounds: tuple[float, float]
    prior_mean: float

    def _unit_ratio(self) -> float:
        """``√n · R / (s_a d)``: bound (3) per unit of relative bias ``‖(I − P)C‖₂ / σ_1``."""
        lower, upper = float(self.y_bounds[0]), float(self.y_bounds[1])
        mu = float(self.prior_mean)
        # R: the largest ‖y − μ‖ for labels clipped to the bounds
        R = math.sqrt(self.n) * max(abs(lower - mu), abs(upper - mu))
        s_a = gaussian_sigma(self.epsilon, self.delta, 1.0, method="analytic")
        return math.sqrt(self.n) * R / (s_a * (upper - lower))

    def ratio(self, rank_tol: float) -> float:
        """Bound (3) of the module docstring at ``rank_tol``, the rounding level included."""
        rounding = _ROUNDING * math.sqrt(self.m * min(self.m, self.n))
        relative_bias = float(rank_tol) + max(_RESIDUAL_SHARE * float(rank_tol), rounding)
        return relative_bias * self._unit_ratio()

    def auto_rank_tol(self) -> float:
        """The largest ``rank_tol`` with ``1.1 · rank_tol · unit ≤ TRUNCATION_ETA``, clamped."""
        unit = (1.0 + _RESIDUAL_SHARE) * self._unit_ratio()
        if not (math.isfinite(unit) and unit > 0.0):
            return RANK_TOL_FLOOR
        return min(max(TRUNCATION_ETA / unit, RANK_TOL_FLOOR), RANK_TOL_CEILING)

    def cut(self, rank_tol: float | str) -> RankCut:
        """``"auto"`` → ``auto_rank_tol``; a number in ``[RANK_TOL_MIN, 1)`` is used as given.

        Anything else raises ``ValueError`` (before any budget is spent or noise drawn).
        """
        if isinstance(rank_tol, str):
            if rank_tol != "auto":
                raise ValueError(f"rank_tol must be 'auto' or a number, got {rank_tol!r}.")
            value = self.auto_rank_tol()
            return RankCut(value, "auto", self.ratio(value))
        value = check_rank_tol(rank_tol)
        return RankCut(value, "given", self.ratio(value))
