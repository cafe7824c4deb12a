r"""Continual release of prefix sums with the tree-based (binary) aggregation mechanism.

The binary mechanism of Dwork, Naor, Pitassi & Rothblum (2010, "Differential privacy under
continual observation", STOC, §4) and Chan, Shi & Song (2011, "Private and continual release
of statistics", ACM TISSEC, §3.4, Alg. 2 "Binary Mechanism B").  A stream of vectors
``v_1, v_2, …, v_T`` (the *leaves*) arrives one per step; at step ``t`` the mechanism
publishes an estimate of the prefix sum ``S_t = Σ_{s ≤ t} v_s``.

Nodes.  The dyadic interval ``(t − 2^i, t]`` with ``2^i`` the lowest set bit of ``t`` is
*completed* at step ``t``; its sum ``α_i = Σ_{s ∈ (t−2^i, t]} v_s`` is released once, with
fresh Gaussian noise, ``α̂_i = α_i + N(0, σ² I)`` (Chan et al., Alg. 2, lines 5–8).  The
prefix estimate is ``Ŝ_t = Σ_{i : bit i of t is 1} α̂_i``: a sum of ``popcount(t)`` released
nodes, so ``Ŝ_t − S_t ~ N(0, popcount(t) σ² I)`` (post-processing of the released nodes).

Sensitivity.  Leaf ``s`` lies in the completed nodes ``(t − 2^i, t]`` with ``t ≤ T``,
``2^i | t``, ``s ∈ (t − 2^i, t]``: at most one per level ``i``, and a level-``i`` node needs
``2^i ≤ T``, so at most ``L(T) = ⌊log₂ T⌋ + 1 ≤ ⌈log₂ T⌉ + 1`` nodes
(``max_nodes_per_leaf`` counts them exactly).  If replacing one record changes its leaf
by at most ``Δ`` in L2, the stacked vector of *all* released node sums changes by at most
``√L Δ`` (``docs/thompson_tree.md`` §3).  With noise σ the whole T-step release is one
Gaussian mechanism of noise multiplier ``σ/(√L Δ)`` — also when the stream is chosen
adaptively from earlier releases (``docs/thompson_tree.md`` §4).

Noise source.  Simulation (``rng`` given): float noise ``σ·N(0, I)`` per node, accounted as
one ``pm_dpgp.accounting.GaussianEvent``.  Secure (default): every node is one discrete
Gaussian release of the rounded node sum (``pm_dpgp.mechanisms.noise``), ρ-zCDP for the
per-node sensitivity Δ; a record touches at most ``L`` nodes, so the run is one
``pm_dpgp.accounting.ZCDPEvent`` with ``count = L`` (zCDP composition, Bun & Steinke
2016, Lemma 2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_count, check_delta, check_epsilon, check_flag, check_positive
from pm_dpgp.accounting import GaussianEvent, PrivacyEvent
from pm_dpgp.accounting.planned import PlannedCharge
from pm_dpgp.mechanisms.gaussian import gaussian_sigma, zcdp_rho
from pm_dpgp.mechanisms.noise import (
    DiscreteGaussianPlan,
    noise_source_metadata,
    plan_discrete_gaussian,
)

__all__ = [
    "TreeAggregator",
    "TreePlan",
    "max_nodes_per_leaf",
    "plan_tree",
    "prefix_node_count",
]


def _check_horizon(n_leaves: Any) -> int:
    return check_count(n_leaves, "the horizon n_leaves")


def max_nodes_per_leaf(n_leaves: int) -> int:
    """Largest number of completed dyadic nodes that contain one leaf, over ``T`` leaves.

    A node of level ``i`` exists only if ``2^i ≤ T``; a leaf is in at most one node per
    level, and leaf 1 is in all of them: ``L(T) = ⌊log₂ T⌋ + 1`` (≤ ``⌈log₂ T⌉ + 1``).
    """
    T = _check_horizon(n_leaves)
    return T.bit_length()  # ⌊log₂ T⌋ + 1, exact in integer arithmetic


def prefix_node_count(t: int) -> int:
    """Number of released nodes summed into the prefix estimate at step ``t``: popcount(t)."""
    return bin(_check_horizon(t)).count("1")


@dataclass(frozen=True)
class TreePlan(PlannedCharge):
    """Public calibration of a T-step binary mechanism (no data touched).

    ``sigma``: per-node noise sd (whitened units); ``leaf_sensitivity``: L2 change Δ of one
    leaf under replace-one; ``nodes_per_leaf``: ``L``; ``sensitivity``: ``√L Δ``, the L2
    sensitivity of the stacked released nodes; ``plan``: the per-node discrete Gaussian plan
    (secure noise) or ``None`` (simulation); ``event``: the privacy event of the whole run.
    """

    # the loop takes its privacy model as an argument: fits_in checks the budget only
    privacy_model: ClassVar[str | None] = None

    n_leaves: int
    dim: int
    leaf_sensitivity: float
    nodes_per_leaf: int
    sigma: float
    event: PrivacyEvent
    plan: DiscreteGaussianPlan | None

    @property
    def sensitivity(self) -> float:
        """``√L Δ``: L2 sensitivity of the stacked vector of all released node sums."""
        return math.sqrt(self.nodes_per_leaf) * self.leaf_sensitivity

    def metadata(self) -> dict[str, Any]:
        """Public description for release metadata."""
        md: dict[str, Any] = {
            "tree_leaves": self.n_leaves,
            "tree_nodes_per_leaf": self.nodes_per_leaf,
            "tree_leaf_sensitivity": self.leaf_sensitivity,
            "tree_stacked_sensitivity": self.sensitivity,
            "tree_node_sigma": self.sigma,
            "privacy_event": self.event.to_metadata(),
        }
        return {**md, **noise_source_metadata(self.plan)}


def plan_tree(
    epsilon: float,
    delta: float,
    leaf_sensitivity: float,
    n_leaves: int,
    dim: int,
    *,
    secure: bool,
    label: str = "tree aggregation (binary mechanism)",
) -> TreePlan:
    """Calibrate the node noise so that the whole ``n_leaves``-step release costs (ε, δ).

    Simulation: σ = analytic Gaussian calibration (Balle & Wang 2018) for sensitivity
    ``√L Δ``; event ``GaussianEvent(σ/(√L Δ))``.  Secure: ``ρ = zcdp_rho(ε, δ)`` split evenly
    over the ``L`` nodes a record can touch; each node is a discrete Gaussian plan for
    sensitivity Δ and ρ/L (``pm_dpgp.mechanisms.noise.plan_discrete_gaussian``); event
    ``ZCDPEvent(ρ_node, count=L)``.  Public inputs only.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    Delta = check_positive(leaf_sensitivity, "leaf_sensitivity")
    T = _check_horizon(n_leaves)
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}.")
    L = max_nodes_per_leaf(T)
    if check_flag(secure, "secure"):
        plan = plan_discrete_gaussian(Delta, int(dim), zcdp_rho(epsilon, delta) / L)
        return TreePlan(T, int(dim), Delta, L, plan.sigma, plan.event(L, label), plan)
    sigma = gaussian_sigma(epsilon, delta, math.sqrt(L) * Delta)
    event = GaussianEvent(noise_multiplier=sigma / (math.sqrt(L) * Delta), label=label)
    return TreePlan(T, int(dim), Delta, L, sigma, event, None)


class TreeAggregator:
    """Streaming binary mechanism (Chan, Shi & Song 2011, Alg. 2) on whitened vectors.

    Call ``add`` once per step with the step's leaf (the sum of that step's records);
    it releases the node completed at that step and returns the noisy prefix estimate.
    Only released (noisy) node values and the current partial sums are kept; the partial
    sums ``α_i`` are private and never returned.  The caller charges ``plan.event`` on a
    ledger **before** the first ``add``.
    """

    def __init__(self, plan: TreePlan, rng: np.random.Generator | None = None) -> None:
        if (plan.plan is None) != (rng is not None):
            raise ValueError(
                "a simulation plan needs rng= (a numpy Generator); a secure plan needs rng=None."
            )
        self.plan = plan
        self._rng = rng
        levels = plan.nodes_per_leaf
        self._alpha = np.zeros((levels, plan.dim))  # private partial sums per level
        self._alpha_hat = np.zeros((levels, plan.dim))  # released noisy nodes
        self.t = 0
        #: ``(level, first leaf, last leaf)`` of every released node, in release order (public).
        self.released: list[tuple[int, int, int]] = []
        #: released noisy node values, same order as ``released`` (DP outputs).
        self.node_values: list[NDArray[np.float64]] = []

    def _noisy(self, v: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.plan.plan is not None:
            return self.plan.plan.release(v, 1)[0]
        assert self._rng is not None
        return v + self.plan.sigma * self._rng.standard_normal(self.plan.dim)

    def add(self, leaf: ArrayLike) -> tuple[NDArray[np.float64], int]:
        """Append leaf ``t`` (1-based), release the node it completes; return ``(Ŝ_t, popcount t)``.

        ``Ŝ_t`` is the noisy prefix sum (post-processing of released nodes), its noise is
        ``N(0, popcount(t) σ² I)``.
        """
        if self.t >= self.plan.n_leaves:
            raise ValueError(
                f"the tree was planned for {self.plan.n_leaves} leaves; plan a longer horizon."
            )
        v = np.asarray(leaf, dtype=np.float64).reshape(-1)
        if v.shape[0] != self.plan.dim:
            raise ValueError(f"leaf has {v.shape[0]} entries, expected {self.plan.dim}.")
        self.t += 1
        t = self.t
        i = (t & -t).bit_length() - 1  # level of the node completed now (lowest set bit)
        self._alpha[i] = self._alpha[:i].sum(axis=0) + v
        self._alpha[:i] = 0.0
        self._alpha_hat[i] = self._noisy(self._alpha[i])
        self._alpha_hat[:i] = 0.0
        self.released.append((i, t - (1 << i) + 1, t))
        self.node_values.append(self._alpha_hat[i].copy())
        bits = [j for j in range(len(self._alpha_hat)) if (t >> j) & 1]
        return self._alpha_hat[bits].sum(axis=0), len(bits)

    def release_weights(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(W, Y)``: released node ``p`` is ``Σ_j W[p, j] v_j + N(0, σ² I)`` (public).

        ``W`` (``t × t``) holds 1 on the leaves of node ``p``'s dyadic interval, ``Y``
        (``t × dim``) the released node values, in release order.  For the posterior that
        conditions on every release (``docs/thompson_tree.md`` §13).
        """
        spans = np.asarray(self.released, dtype=np.intp).reshape(-1, 3)[:, 1:]  # (first, last)
        leaf = np.arange(1, self.t + 1)
        W = ((leaf >= spans[:, :1]) & (leaf <= spans[:, 1:])).astype(np.float64)
        return W, np.asarray(self.node_values).reshape(self.t, self.plan.dim)
