r"""Continual release of prefix sums by the square-root factorisation of the counting matrix.

A matrix mechanism for the same task as ``pm_dpgp.mechanisms.full.tree_aggregation``: leaves
``v_1, …, v_T`` (vectors of ``dim`` entries) arrive one per step and at step ``t`` an
estimate of ``S_t = Σ_{s ≤ t} v_s`` is published.  The prefix-sum matrix ``A`` (lower
triangular, all ones) is factorised as ``A = L R`` with ``L = R = A^{1/2}``, the lower
triangular Toeplitz matrix with entries ``R_{st} = c_{s−t}``,

.. math:: c_k = \binom{2k}{k} 4^{-k},\qquad c_0 = 1,\ c_k = c_{k-1}\,\frac{2k - 1}{2k},

the coefficients of ``(1 − x)^{-1/2}`` (whose square is ``(1 − x)^{-1}``, i.e. ``A``)
(Fichtenberger, Henzinger & Upadhyay 2023, "Constant matters: fine-grained error bound on
differentially private continual observation", ICML, §3; Henzinger, Upadhyay & Upadhyay 2023,
SODA).  At step ``s`` the mechanism releases

.. math:: y_s = Σ_{j ≤ s} c_{s−j} v_j + z_s,\qquad z_s \sim N(0, σ^2 I),

and the prefix estimate is the post-processing ``Ŝ_t = Σ_{s ≤ t} c_{t−s} y_s = S_t +
Σ_{s≤t} c_{t−s} z_s``, whose noise is ``N(0, σ² Σ_{k<t} c_k² I)``.

Sensitivity.  Leaf ``t`` enters the releases ``s ≥ t`` with weights ``c_{s−t}``; if
replacing one record changes its leaf by at most ``Δ`` in L2, the stacked vector of all ``T``
releases changes by ``‖R_{:,t}‖ Δ = (Σ_{k ≤ T−t} c_k²)^{1/2} Δ ≤ (Σ_{k<T} c_k²)^{1/2} Δ``
(attained by leaf 1).  ``R`` is lower triangular, so ``y_s`` depends on leaves ``≤ s`` only:
with the stream chosen adaptively from earlier releases the whole run is still one Gaussian
mechanism with that sensitivity (Denisov, McMahan, Rush, Smith & Thakurta 2022, Thm. 2.1;
the transcript argument of ``docs/thompson_tree.md`` §4 and §9.3 with the tree's node
weights replaced by ``c_{s−t}``; §11).  ``Σ_{k<T} c_k² ≈ (ln T + γ + 4 ln 2)/π``
(γ Euler's constant; 2.53 at T = 100, within 0.01 for T ≥ 10) grows like ``log T``, against
``⌊log₂ T⌋ + 1`` nodes per leaf for the tree, and every prefix sums all ``t`` releases
with decaying weights instead of ``popcount(t)`` nodes.

Noise source.  Simulation (``rng``): float Gaussian noise, one ``GaussianEvent``.  Secure
(default): the ``T·dim`` released coordinates are one multivariate discrete Gaussian
(Canonne, Kamath & Steinke 2020) on the rounded ``R v`` (grid ``γ``; ``integer_sensitivity``
covers the rounding of all ``T·dim`` coordinates), revealed step by step; one ``ZCDPEvent``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_count, check_delta, check_epsilon, check_flag, check_positive
from pm_dpgp.accounting import GaussianEvent, PrivacyEvent
from pm_dpgp.accounting.planned import PlannedCharge
from pm_dpgp.gp.linalg import norm_rounded_up
from pm_dpgp.mechanisms.gaussian import gaussian_sigma, zcdp_rho
from pm_dpgp.mechanisms.noise import (
    DiscreteGaussianPlan,
    noise_source_metadata,
    plan_discrete_gaussian,
)

__all__ = ["SqrtCounter", "SqrtCounterPlan", "plan_sqrt_counter", "sqrt_factor_coefficients"]


def sqrt_factor_coefficients(n: int) -> NDArray[np.float64]:
    """``c_0, …, c_{n−1}`` with ``c_k = C(2k, k)/4^k`` (module docstring), by the recurrence."""
    n = check_count(n, "the horizon n")
    k = np.arange(1, n, dtype=np.float64)
    return np.concatenate([[1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))])


@dataclass(frozen=True)
class SqrtCounterPlan(PlannedCharge):
    """Public calibration of a ``T``-step square-root-factorisation counter (no data touched).

    ``sigma``: noise sd of every release (whitened units); ``leaf_sensitivity``: Δ;
    ``column_norm``: ``(Σ_{k<T} c_k²)^{1/2}``; ``sensitivity``: their product, the L2
    sensitivity of the stacked releases; ``plan``: the discrete Gaussian plan of the stacked
    ``T·dim`` coordinates (secure) or ``None`` (simulation); ``event``: the whole run.
    """

    # the loop takes its privacy model as an argument: fits_in checks the budget only
    privacy_model: ClassVar[str | None] = None

    n_leaves: int
    dim: int
    leaf_sensitivity: float
    column_norm: float
    sigma: float
    event: PrivacyEvent
    plan: DiscreteGaussianPlan | None

    @property
    def sensitivity(self) -> float:
        """``‖R_{:,1}‖ Δ``: L2 sensitivity of the stacked vector of all releases."""
        return self.column_norm * self.leaf_sensitivity

    def metadata(self) -> dict[str, Any]:
        """Public description for release metadata."""
        md: dict[str, Any] = {
            "counter_mechanism": "square-root factorisation",
            "counter_leaves": self.n_leaves,
            "counter_column_norm": self.column_norm,
            "counter_leaf_sensitivity": self.leaf_sensitivity,
            "counter_stacked_sensitivity": self.sensitivity,
            "counter_release_sigma": self.sigma,
            "privacy_event": self.event.to_metadata(),
        }
        return {**md, **noise_source_metadata(self.plan)}


def plan_sqrt_counter(
    epsilon: float,
    delta: float,
    leaf_sensitivity: float,
    n_leaves: int,
    dim: int,
    *,
    secure: bool,
    label: str = "square-root factorisation counter",
) -> SqrtCounterPlan:
    """Calibrate the release noise so that the whole ``n_leaves``-step run costs (ε, δ).

    Simulation: σ from the analytic Gaussian calibration (Balle & Wang 2018) at sensitivity
    ``‖R_{:,1}‖ Δ``; event ``GaussianEvent(σ/(‖R_{:,1}‖ Δ))``.  Secure: ρ = ``zcdp_rho`` (ε,
    δ) for the one discrete Gaussian of the ``T·dim`` stacked coordinates at sensitivity
    ``‖R_{:,1}‖ Δ``; event ``ZCDPEvent(ρ)``.  Public inputs only.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    Delta = check_positive(leaf_sensitivity, "leaf_sensitivity")
    c = sqrt_factor_coefficients(n_leaves)
    T = len(c)
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}.")
    norm = norm_rounded_up(c)  # ‖R_{:,1}‖ of the weights used (the computed c_k)
    if check_flag(secure, "secure"):
        plan = plan_discrete_gaussian(norm * Delta, T * int(dim), zcdp_rho(epsilon, delta))
        return SqrtCounterPlan(T, int(dim), Delta, norm, plan.sigma, plan.event(1, label), plan)
    sigma = gaussian_sigma(epsilon, delta, norm * Delta)
    event = GaussianEvent(noise_multiplier=sigma / (norm * Delta), label=label)
    return SqrtCounterPlan(T, int(dim), Delta, norm, sigma, event, None)


class SqrtCounter:
    """Streaming square-root-factorisation counter on whitened vectors (module docstring).

    ``add`` takes the step's leaf, releases ``y_t`` and returns the prefix estimate with its
    noise-variance factor ``Σ_{k<t} c_k²``.  The private leaves are kept (to form
    ``Σ_j c_{t−j} v_j``) and never returned; the caller charges ``plan.event`` on a ledger
    **before** the first ``add``.
    """

    def __init__(self, plan: SqrtCounterPlan, rng: np.random.Generator | None = None) -> None:
        if (plan.plan is None) != (rng is not None):
            raise ValueError(
                "a simulation plan needs rng= (a numpy Generator); a secure plan needs rng=None."
            )
        self.plan = plan
        self._rng = rng
        self._c = sqrt_factor_coefficients(plan.n_leaves)
        self._leaves = np.zeros((plan.n_leaves, plan.dim))  # private
        self._step_plan = (
            None if plan.plan is None else dataclasses.replace(plan.plan, dim=plan.dim)
        )
        self.t = 0
        #: released noisy values ``y_1, …, y_t`` (DP outputs, public).
        self.released: list[NDArray[np.float64]] = []

    def _noisy(self, v: NDArray[np.float64]) -> NDArray[np.float64]:
        if self._step_plan is not None:
            # one block of the stacked discrete Gaussian: same grid and scale, fresh noise
            return self._step_plan.release(v, 1)[0]
        assert self._rng is not None
        return v + self.plan.sigma * self._rng.standard_normal(self.plan.dim)

    def add(self, leaf: ArrayLike) -> tuple[NDArray[np.float64], float]:
        """Append leaf ``t``, release ``y_t``; return ``(Ŝ_t, Σ_{k<t} c_k²)``."""
        if self.t >= self.plan.n_leaves:
            raise ValueError(
                f"the counter was planned for {self.plan.n_leaves} leaves; plan a longer horizon."
            )
        v = np.asarray(leaf, dtype=np.float64).reshape(-1)
        if v.shape[0] != self.plan.dim:
            raise ValueError(f"leaf has {v.shape[0]} entries, expected {self.plan.dim}.")
        self._leaves[self.t] = v
        self.t += 1
        t = self.t
        weights = self._c[:t][::-1]  # c_{t−j} for j = 1..t
        self.released.append(self._noisy(weights @ self._leaves[:t]))
        estimate = weights @ np.asarray(self.released)
        return estimate, float(self._c[:t] @ self._c[:t])

    def release_weights(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(W, Y)``: release ``y_s = Σ_j W[s, j] v_j + N(0, σ² I)`` (public).

        ``W = R`` restricted to the first ``t`` steps (``W[s, j] = c_{s−j}``, ``j ≤ s``), ``Y``
        (``t × dim``) the released values.  For the posterior that conditions on every
        release (``docs/thompson_tree.md`` §13).
        """
        t = self.t
        k = np.subtract.outer(np.arange(t), np.arange(t))
        W = np.where(k >= 0, self._c[np.clip(k, 0, None)], 0.0)
        return W, np.asarray(self.released).reshape(t, self.plan.dim)
