r"""DP Thompson sampling on sufficient statistics, released by tree aggregation.

The model (``docs/thompson_tree.md`` §1) is GP regression on a finite *public* feature basis,
the whitened Nyström features on public inducing inputs ``Z`` (a grid on the public box):

.. math:: φ(x) = L^{-1} k(Z, x),\quad L L^\top = K_{ZZ} + jI,\qquad
          f(x) = μ + φ(x)^\top v,\ v \sim N(0, I),

whose prior covariance is the Nyström kernel ``Q(x, x') = k(x, Z)(K_ZZ + jI)^{-1}k(Z, x')``
(the subset-of-regressors / DTC model; Quiñonero-Candela & Rasmussen 2005, eq. 16).  Because
``[[K_ZZ + jI, k(Z, x)], [k(x, Z), k(x, x)]]`` is positive semi-definite, its Schur
complement gives ``‖φ(x)‖² = Q(x, x) ≤ k(x, x)``: for a stationary kernel the public bound
``R_φ = √k(x, x)`` holds for every ``x`` in any dimension (features are still clipped to
``R_φ``, so the bound holds after rounding too).

The posterior of ``v`` depends on the data only through (Honkela 2024, eq. 3, in these
features) ``A = Σᵢ rᵢ φ(xᵢ)`` and ``B = Σᵢ φ(xᵢ)φ(xᵢ)ᵀ`` with
``rᵢ = clip(yᵢ − μ, ±R_y)``.  Each round ``t``:

1. the leaf of step ``t`` (the initial design's records at ``t = 1``, the previous round's
   observation afterwards) enters the continual counter (the binary mechanism
   ``pm_dpgp.mechanisms.full.tree_aggregation.TreeAggregator``, or the square-root
   factorisation): by default the centred ``A``-stream ``Σ φ(xᵢ)(clip(yᵢ, a, b) − c)``
   (``docs/thompson_tree.md`` §13.5); with ``posterior="prefix"`` under full privacy the
   whitened ``(A, c B̂)`` of the residuals, whose prefix estimate ``(Ã, B̃)`` has noise
   ``N(0, popcount(t) σ² I)`` (§3);
2. the posterior of ``v`` is computed from the released values: by default exactly, given
   every value the counter has released and the public features of the loop's records
   (``all_releases_posterior``, ``docs/thompson_tree.md`` §13); with
   ``posterior="prefix"`` from the prefix estimate alone (the noise-aware posterior, Honkela
   eq. 9 with ``K = I``, S₂ of eqs. 11–14, ``pm_dpgp.mechanisms.full.noise_aware.dp_qu``);
3. one ``v`` is sampled and ``f(x) = μ + φ(x)ᵀv`` maximised over candidates (free);
4. the objective is observed at the maximiser (private).

The whole ``T``-round run is one Gaussian mechanism, charged on the ledger before the first
round (``docs/thompson_tree.md`` §3–4), at the leaf sensitivity plus the floating-point
round-off of the leaf and counter sums (``counter_summation_depth``, §3.1).  Published: the
chosen inputs, the sampled path values there, the per-round noise level; the observed values
stay in the ``pm_dpgp.workflow.thompson.OwnerRecord``.

``privacy_model="label"`` is the weaker label-privacy model of DP bandits
(``docs/thompson_tree.md`` §9): neighbouring runs differ in one round's observed value, the
queried inputs are post-processing of the transcript, ``B`` is computed exactly from them and
only the ``A``-stream goes through the tree (per-leaf sensitivity ``R_φ (b − a)`` for the
public response range ``[a, b]``); the ``"prefix"`` posterior is exact linear-Gaussian
conditioning on ``Ã`` (``public_inputs_posterior``).  The default ``privacy_model="full"``
protects one observation's ``(x, y)``.

``features=DyadicPartitionFeatures(...)`` replaces the Nyström features by the indicators of
nested dyadic partitions of the box (``pm_dpgp.workflow.partition_features``,
``docs/thompson_tree.md`` §10): ``‖φ(x)‖ = R_φ`` exactly, so the same plan and proofs apply.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import (
    bounds_from_centred,
    centred_bound,
    check_delta,
    check_doubles_fit,
    check_epsilon,
    check_finite_number,
    check_flag,
    check_positive,
    check_rng,
    check_scale,
    public_real_array,
    reject_unexpected,
)
from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.linalg import jittered_cholesky, psd_eigen_root
from pm_dpgp.gp.sparse import check_column_norm, clip_columns
from pm_dpgp.mechanisms.full.noise_aware import (
    NEIGHBOURING_RELATION,
    PRIVACY_MODEL,
    check_posterior_arithmetic,
    check_rho,
    check_variant,
    dp_qu,
    l2_sensitivity,
    product_factor_bound,
    regression_record_norm,
    regularisation_lambda,
    summation_margin,
    symmetric_from_upper,
    upper_vector,
)
from pm_dpgp.mechanisms.full.sqrt_counter import SqrtCounter, SqrtCounterPlan, plan_sqrt_counter
from pm_dpgp.mechanisms.full.tree_aggregation import (
    TreeAggregator,
    TreePlan,
    max_nodes_per_leaf,
    plan_tree,
)
from pm_dpgp.mechanisms.label.output_perturbation import LABEL_PRIVACY_MODEL
from pm_dpgp.mechanisms.noise import (
    SEED_POLICY_SECURE,
    SEED_POLICY_SIMULATION,
    simulation_rng,
)
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures
from pm_dpgp.workflow.progress import progress_bar
from pm_dpgp.workflow.thompson import (
    Objective,
    OwnerRecord,
    StopReason,
    ThompsonResult,
    _maximise,
    _observe,
    check_loop_inputs,
    check_refine,
    loop_failure,
    trace_inference_data,
    warn_no_round,
)

__all__ = [
    "NystromFeatures",
    "TREE_PRIVACY_MODELS",
    "dp_thompson_sampling_tree",
    "label_statistics",
    "public_inputs_posterior",
    "all_releases_posterior",
    "compress_leaf",
    "record_statistics",
    "posterior_root",
]

LABEL_RELATION = (
    "replace-one y: one round's observed value replaced (within the public y_bounds); the "
    "queried inputs are the published x_chosen (post-processing of the transcript)"
)

#: ``privacy_model=`` values of the loop: ``"full"`` (one observation's (x, y) private, the
#: default) and ``"label"`` (one round's observed value private; docs/thompson_tree.md §9).
TREE_PRIVACY_MODELS: tuple[str, ...] = (PRIVACY_MODEL, LABEL_PRIVACY_MODEL)

#: ``counter=`` values and their names (planner and streaming class: ``_counter``).
COUNTER_NAMES = {"tree": "tree aggregation", "sqrt": "square-root factorisation counter"}

#: With ``epsilon=None`` the run gets the largest ε the ledger affords; below this share of the
#: ledger's budget (the rest spent before) the loop warns, with the node noise sd it will add.
SMALL_RUN_SHARE = 0.1

#: the step a ``ReleaseError`` of this loop names (public words only)
RELEASE_STAGE = "the counter's release or the round's posterior sample"

#: per-round columns of the published trace (``nodes_in_prefix`` for the tree only)
_TRACE_DTYPES: dict[str, Any] = {
    "f_path_at_chosen": float,
    "n_data": np.int64,
    "prefix_noise_sd": float,
    "nodes_in_prefix": np.int64,
    "lambda_used": float,
}


class NystromFeatures:
    """Whitened Nyström features ``φ(x) = L⁻¹k(Z, x)`` clipped to ``‖φ‖ ≤ R_φ`` (public).

    ``feature_norm=None`` uses ``R_φ = √max k(z, z)`` for a stationary kernel (then
    ``‖φ(x)‖² = Q(x, x) ≤ k(x, x) = R_φ²`` everywhere, the clipping only removes round-off);
    otherwise a public float bound is required.
    """

    def __init__(
        self,
        cov_func: Any,
        Z: NDArray[np.float64],
        noise_sd: float,
        prior_mean: float,
        feature_norm: float | None = None,
    ) -> None:
        model = sparse_gp_regression(
            None,
            None,
            cov_func,
            Z=Z,
            noise_sd=noise_sd,
            mean=prior_mean,
            mean_is_public=True,
            z_is_public=True,
        )
        self.public = model.public_sparse_gp()
        self.Z = self.public.Z
        self.L = sla.cholesky(self.public.kzz(), lower=True)
        if feature_norm is None:
            if not self.public.stationary:
                raise ValueError(
                    "the kernel is not recognised as stationary, so k(x, x) is not known to be "
                    "constant; pass a public feature_norm >= sqrt(max_x k(x, x))."
                )
            feature_norm = math.sqrt(float(np.max(self.public.kernel_diag(self.Z))))
        # the computed feature rows are clipped to it: proved for R ≥ 2⁻¹⁰⁰⁰ (stop-48 audit)
        self.R = check_column_norm(feature_norm, "feature_norm")

    name = "Nystrom"

    @property
    def M(self) -> int:
        """Number of features ``|Z|``."""
        return int(self.Z.shape[0])

    @property
    def description(self) -> str:
        """The public kernel's description."""
        return str(self.public.description)

    def metadata(self) -> dict[str, Any]:
        """Public description for the InferenceData attributes."""
        return {"feature_basis": self.name, "n_inducing": self.M}

    def __call__(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        """``(n, M)`` features of the rows of ``X``, each row clipped to norm ``R_φ``."""
        Phi = sla.solve_triangular(self.L, self.public.kernel_private(self.Z, X), lower=True).T
        Phi = np.where(np.isfinite(Phi), Phi, 0.0)
        # rows of norm ≤ R_φ in exact arithmetic on the returned floats (clip_columns: the
        # target is R_φ(1 − 2γ_{M+6}), which covers the round-off of the norm and the scaling)
        return clip_columns(Phi.T, self.R).T


def counter_summation_depth(counter: str, n_leaves: int, leaf_rows: int) -> int:
    r"""Public bound on the floating-point additions on one record's path into a released
    counter value (``docs/thompson_tree.md`` §3.1).

    A leaf ``Φᵀξ`` (or ``(Φᵀr, c t_b(ΦᵀΦ))``) of at most ``leaf_rows`` rows is one product:
    at most ``leaf_rows − 1`` additions per term, in any order.  Tree: the level-``i`` node is
    ``α_i = (α_0 + … + α_{i−1}) + v`` (``TreeAggregator.add``), adding a term at most ``i``
    times, and the nodes a term passes through have increasing levels ``≤ ℓ = L(T) − 1``: at
    most ``ℓ(ℓ + 1)/2``.  Square-root counter: ``y_t = Σ_{j ≤ t} c_{t−j} v_j``, one dot
    product over at most ``T`` leaves: ``T − 1``.  Higham (2002), Lemma 3.1 and eq. 3.5.
    """
    T = int(n_leaves)
    if T <= 0:
        return 0
    within_leaf = max(int(leaf_rows), 1) - 1
    if counter == "sqrt":
        return within_leaf + T - 1
    top = max_nodes_per_leaf(T) - 1
    return within_leaf + top * (top + 1) // 2


def record_statistics(
    Phi: NDArray[np.float64], r: NDArray[np.float64], ratio: float
) -> NDArray[np.float64]:
    r"""Whitened statistics ``(A, c B̂)`` of a batch: ``A = Φᵀr``, ``B̂ = t_b(ΦᵀΦ)`` (eq. 3, 23).

    ``Φ`` holds clipped features (``‖φᵢ‖ ≤ R_φ``) and ``r`` clipped residuals (``|rᵢ| ≤ R_y``);
    one record changes this vector by at most ``l2_sensitivity`` ``(R_y, R_φ, c)``.
    """
    return np.concatenate([Phi.T @ r, ratio * upper_vector(Phi.T @ Phi)])


def label_statistics(
    Phi: NDArray[np.float64],
    y: NDArray[np.float64],
    y_bounds: tuple[float, float],
) -> NDArray[np.float64]:
    r"""Leaf of the ``A``-stream under label privacy: ``Φᵀ (clip(y, a, b) − c)``, ``c = (a + b)/2``.

    ``Φ`` holds clipped features (``‖φᵢ‖ ≤ R_φ``) and ``[a, b]`` is the public response range.
    Replacing one observed value at a fixed (published) input changes this vector by
    ``φ(x)(y' − y)`` with ``y, y' ∈ [a, b]``: at most ``R_φ (b − a)`` (``docs/thompson_tree.md``
    §9; the label sensitivity of Smith et al. 2018 with ``d = b − a``).  Centring at the
    midpoint keeps every residual within ``±(b − a)/2``, so the floating-point sums of the
    counter carry round-off relative to ``b − a`` only (centring at a prior mean far outside
    ``[a, b]`` would let round-off of order ``|μ|·u`` exceed the charged sensitivity).  The
    loop adds the public ``(c − μ) Σ φ(xᵢ)`` after the noise (post-processing: the inputs are
    published).
    The residual is clipped to ``±h``, ``h = (b − a)/2`` as computed: the midpoint is rounded
    (``(1e16, 1e16 + 2)`` has the midpoint ``1e16`` in float64), and a residual of up to
    ``b − a`` moved one leaf by √2 times the charge under full privacy (stop-42 audit); with
    the clip ``|ξ − ξ'| ≤ 2h = b − a`` holds in floating point too.
    """
    lo, hi = y_bounds
    h = 0.5 * (hi - lo)
    return Phi.T @ np.clip(np.clip(y, lo, hi) - 0.5 * (lo + hi), -h, h)


def public_inputs_posterior(
    B: NDArray[np.float64], a_noisy: NDArray[np.float64], noise_var: float, sigma_a: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Exact posterior of ``v`` given the public ``B`` and the noisy ``ã = A + N(0, σ_a² I)``.

    With ``v ~ N(0, I)``, ``A | v ~ N(B v, σ² B)`` (``A = Σφᵢyᵢ``, ``yᵢ = φᵢᵀv + N(0, σ²)``), so
    ``ã | v ~ N(Bv, C)``, ``C = σ²B + σ_a²I``: ``Λ = I + B C⁻¹ B``, ``m = Λ⁻¹ B C⁻¹ ã``,
    ``S = Λ⁻¹`` (linear-Gaussian conditioning; Bishop 2006, eqs. 2.116–2.117).  All three are
    diagonal in the eigenbasis ``B = U diag(b) Uᵀ``.  Post-processing of released values.
    """
    b, U = np.linalg.eigh(0.5 * (B + B.T))
    b = np.clip(b, 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        denom = noise_var * b + sigma_a**2
        # B C^-1 in the eigenbasis.  Where σ²b + σ_a² underflows to 0 (σ_a ≲ 1e-162, e.g.
        # y_bounds = ±1e-200, and b = 0 or tiny) it is 1/(σ² + (σ_a/√b)²), 0 for b = 0: the
        # plain quotient was 0/0 = nan, after the run was charged (stop-48 audit)
        tiny = 1.0 / (noise_var + (sigma_a / np.sqrt(np.where(b > 0.0, b, 1.0))) ** 2)
        gain = np.where(denom > 0.0, b / denom, np.where(b > 0.0, tiny, 0.0))
    prec = 1.0 + b * gain
    m = U @ (gain * (U.T @ a_noisy) / prec)
    return m, (U / prec) @ U.T


def compress_leaf(
    Phi: NDArray[np.float64], offset: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Pseudo-records of one leaf: at most ``M`` rows, the same likelihood for every release.

    A leaf enters the releases only through ``ℓ = Φᵀξ``.  With the thin QR ``Φ = Q R``
    (``Q`` n × r orthonormal, ``r = min(n, M)``), ``Φᵀξ = Rᵀη`` with ``η = Qᵀξ`` and, under
    ``ξ = Φv + o 1 + e``, ``η = R v + o Qᵀ1 + Qᵀe`` with ``Qᵀe ~ N(0, σ_o² I_r)``: ``r``
    records with features the rows of ``R`` and offsets ``o Qᵀ1`` (``docs/thompson_tree.md``
    §13.1).  Leaves of at most ``M`` records are returned unchanged.
    """
    n, M = Phi.shape
    if n <= M:
        return Phi, np.full(n, float(offset))
    Q, R = np.linalg.qr(Phi, mode="reduced")
    return R, float(offset) * Q.sum(axis=0)


def all_releases_posterior(
    W: NDArray[np.float64],
    Y: NDArray[np.float64],
    Phi: NDArray[np.float64],
    leaf: NDArray[np.intp],
    sigma: float,
    noise_var: float,
    offset: float | NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Exact posterior of ``v`` given **every** release of the counter's ``A``-stream.

    The counter released ``Y = W L + Z`` (``Z`` i.i.d. ``N(0, σ²)``), where row ``j`` of
    ``L`` is the leaf ``ℓ_j = Σ_{i ∈ j} φᵢ ξᵢ`` with ``ξᵢ = clip(yᵢ, a, b) − c`` (both privacy
    models, ``docs/thompson_tree.md`` §13.5).  The loop's records lie at the public initial
    design and the published queries, so every ``φᵢ`` and leaf index is public and ``Y`` is
    linear in the ``n`` scalars ``ξ``: with ``H = W[:, leaf]``,

        ``log p(Y | ξ) = −½ ξᵀ J ξ + bᵀ ξ + const``,
        ``J = (HᵀH) ∘ (ΦΦᵀ) / σ²``,  ``bᵢ = φᵢᵀ (HᵀY)ᵢ / σ²``.

    The model ``ξ = Φ v + o + e`` (``v ~ N(0, I)``, ``e ~ N(0, σ_o² I)``, ``o`` the public
    offsets, ``(μ − c) 1`` or their ``compress_leaf`` images; clipping ignored as in
    ``public_inputs_posterior``) gives, after integrating out ``e``, a Gaussian likelihood of
    ``u = Φ v + o`` with precision ``J' = J (I + σ_o² J)⁻¹`` and linear term
    ``b' = (I + σ_o² J)⁻¹ b``; hence

        ``Λ = I + Φᵀ J' Φ``,  ``m = Λ⁻¹ Φᵀ (b' − J' o)``,  ``S = Λ⁻¹``

    (``docs/thompson_tree.md`` §13.1).  ``J'`` itself is never formed: with
    ``G = I + σ_o² J``, ``J'Φ = G⁻¹(JΦ)`` and ``ΦᵀJ'o = (J'Φ)ᵀo``, one n × n factorisation
    and ``M + 1`` right-hand sides, ``O(n²M)`` beyond the factorisation.  The prefix estimate
    ``Ŝ_t`` is a linear function of ``Y``, so this posterior is at least as concentrated as
    ``public_inputs_posterior`` (data processing); with one release of weight 1 on every leaf
    the two coincide.  ``J`` is PSD but can be numerically indefinite (a leaf of more than
    ``M`` records: pass it through ``compress_leaf``); if a Cholesky factorisation fails, the
    same formulas are evaluated in the eigenbasis with eigenvalues clipped at their exact
    lower bounds (0 for ``J``, 1 for ``Λ``).  Post-processing of released values: no privacy
    cost.
    """
    H = W[:, leaf]
    inv_var = 1.0 / sigma**2
    J = (H.T @ H) * (Phi @ Phi.T) * inv_var
    J = 0.5 * (J + J.T)
    b = np.einsum("im,im->i", H.T @ Y, Phi) * inv_var
    n, M = Phi.shape
    o = np.broadcast_to(np.asarray(offset, dtype=np.float64), (n,))
    try:
        G = sla.cho_factor(np.eye(n) + noise_var * J, lower=True)
        JpPhi = sla.cho_solve(G, J @ Phi)  # J'Φ = (I + σ_o² J)⁻¹ JΦ (J and G commute)
        bp = sla.cho_solve(G, b)
    except np.linalg.LinAlgError:
        lam, U = np.linalg.eigh(J)
        lam = np.clip(lam, 0.0, None)
        shrink = 1.0 / (1.0 + noise_var * lam)
        JpPhi = U @ ((lam * shrink)[:, None] * (U.T @ Phi))
        bp = U @ (shrink * (U.T @ b))
    Lam = np.eye(M) + Phi.T @ JpPhi
    Lam = 0.5 * (Lam + Lam.T)
    rhs = Phi.T @ bp - JpPhi.T @ o  # Φᵀ(b' − J'o), J' symmetric
    try:
        L_lam = sla.cho_factor(Lam, lower=True)
        m = sla.cho_solve(L_lam, rhs)
        S = sla.cho_solve(L_lam, np.eye(M))
    except np.linalg.LinAlgError:
        w, V = np.linalg.eigh(Lam)
        w = np.clip(w, 1.0, None)  # Λ ⪰ I exactly
        S = (V / w) @ V.T
        m = S @ rhs
    return m, 0.5 * (S + S.T)


def posterior_root(S: NDArray[np.float64]) -> NDArray[np.float64]:
    r"""A square root ``R`` of the posterior covariance (``S = R Rᵀ``), continuous in ``S``.

    The Cholesky factor, so that the draw ``v = m + R z`` depends continuously on ``S``: the
    eigenvectors of a covariance with repeated eigenvalues (the partition basis gives many)
    are not, and a round-off change of ``S`` (another BLAS, another summation order) would
    rotate them and change the draw of the same seed.  The factor is the package's
    ``jittered_cholesky`` with one attempt and no jitter (an exact root, never an inflated
    covariance); a covariance that is only numerically positive semi-definite falls back to
    the eigenvector root with eigenvalues clipped at 0, its eigenvector signs made canonical
    (``pm_dpgp.gp.linalg.canonical_signs``: LAPACK builds differ in the signs they return).
    """
    S = 0.5 * (S + S.T)
    try:
        return jittered_cholesky(S, max_tries=1, check=False)[0]
    except np.linalg.LinAlgError:  # CholeskyError
        return psd_eigen_root(S)


def dp_thompson_sampling_tree(
    objective: Objective,
    cov_func: Any,
    *,
    domain: tuple[ArrayLike, ArrayLike],
    X_init: ArrayLike,
    n_rounds: int,
    noise_sd: float,
    inducing: ArrayLike | int | None = None,
    features: DyadicPartitionFeatures | None = None,
    y_bounds: tuple[float, float] | None = None,
    prior_mean: float = 0.0,
    ledger: Ledger,
    epsilon: float | None = None,
    delta: float | None = None,
    feature_norm: float | None = None,
    ratio: float = 1.0,
    rho: float = 0.01,
    variant: Literal["noise_aware", "naive"] = "noise_aware",
    privacy_model: Literal["full", "label"] | None = None,
    counter: Literal["tree", "sqrt"] = "tree",
    posterior: Literal["all_releases", "prefix"] = "all_releases",
    candidates: ArrayLike | int = 256,
    refine_steps: int = 0,
    refine_points: int = 32,
    progressbar: bool = True,
    rng: np.random.Generator | None = None,
    **deprecated: Any,
) -> ThompsonResult:
    """Run DP Thompson sampling on tree-released sufficient statistics (see the module doc).

    Parameters
    ----------
    objective, cov_func, domain, X_init, n_rounds, candidates, refine_steps, refine_points,
    progressbar:
        as ``pm_dpgp.workflow.dp_thompson_sampling``.
    noise_sd:
        public observation-noise sd of the model (``s = noise_sd⁻²``).
    inducing:
        public inducing inputs ``Z`` (``(M, d)``), or the number of grid points per dimension
        of a regular grid on the public box (default 8), for the Nyström features of
        ``cov_func``.
    features:
        a public ``DyadicPartitionFeatures`` basis instead of the Nyström features
        (``docs/thompson_tree.md`` §10); then ``cov_func``, ``inducing`` and ``feature_norm``
        must be ``None`` (its norm bound ``R_φ = √Σ w_j²`` is exact).
    y_bounds, prior_mean:
        public response range ``(lower, upper)`` (default ``(μ − 1, μ + 1)``) and prior mean
        ``μ``.  By default (both models) ``y`` is clipped to ``[lower, upper]`` and centred at
        the midpoint (leaf sensitivity ``R_φ (upper − lower)``); full privacy with
        ``posterior="prefix"`` clips the residuals ``y − μ`` to ``±R_y`` with
        ``R_y = max(|lower − μ|, |upper − μ|)`` (the deprecated centred ``y_bound=R_y``
        works).
    ledger, epsilon, delta:
        the run's (ε, δ) is charged once, before the first round; if the ledger cannot afford
        it the run returns with no rounds (``stop_reason="budget"``) and no noise drawn.
        ``epsilon`` defaults to the largest run ε the ledger accepts (its whole remaining
        budget under the ledger's own composition and filter, found by bisection, without the
        ledger's round-off slack; a warning when it is below ``SMALL_RUN_SHARE`` of the
        budget, and when nothing is left), ``delta`` to the ledger's δ.  A ledger whose
        filter cannot account for the run's event type at all raises
        ``FilterMismatchError`` (a ``BudgetExceededError`` naming the filter to use).
    feature_norm:
        public ``R_φ`` (default ``√k(x, x)`` for stationary kernels).
    ratio, rho, variant:
        ``c = σ_a/σ_b``, the failure probability of λ (eq. 10) and ``"noise_aware"`` (with S₂)
        or ``"naive"`` posterior (``pm_dpgp.mechanisms.full.noise_aware.dp_qu``); all three
        are used by ``posterior="prefix"`` under full privacy only (always checked).
    privacy_model:
        ``"full"`` (default): neighbouring runs replace one observation ``(x, y)``; the
        counter releases the centred ``A``-stream (§13.5; ``(A, c B̂)`` with
        ``posterior="prefix"``, ``docs/thompson_tree.md`` §2–4).  ``"label"``: the privacy
        model of DP bandits — neighbouring runs differ in **one round's observed value**; the
        queried inputs are chosen by the algorithm from earlier releases and fresh randomness,
        so they are post-processing of the transcript (published as ``x_chosen``), ``B`` is
        computed exactly from them and the tree releases the ``A``-stream alone, with
        per-leaf sensitivity ``R_φ (b − a)`` for ``y_bounds = (a, b)`` (§9).  A weaker
        guarantee in general (nothing is promised about the inputs; for runs of this loop,
        which publishes its queries under both models, the two coincide, §13.1); the ledger
        records
        ``privacy_model="label"`` and refuses to mix it with full-privacy entries.  The
        deprecated ``inputs_public=True`` / ``False`` means ``"label"`` / ``"full"``.
    counter:
        the continual counter of the prefix sums: ``"tree"`` (default; the binary mechanism,
        ``pm_dpgp.mechanisms.full.tree_aggregation``) or ``"sqrt"`` (the square-root
        factorisation of the counting matrix, ``pm_dpgp.mechanisms.full.sqrt_counter``:
        same privacy model and charge, about half the prefix noise sd at T = 100;
        ``docs/thompson_tree.md`` §11).
    posterior:
        ``"all_releases"`` (default): exact linear-Gaussian conditioning on every value the
        counter has released in the ``A``-stream, with ``B`` and the features computed from
        the loop's own records, whose inputs are the public initial design and the published
        queries (``all_releases_posterior``; ``docs/thompson_tree.md`` §13).  ``"prefix"``:
        the posterior of the prefix estimate alone, as before stop 27 (label privacy:
        ``public_inputs_posterior``, §9.4; full privacy: the noise-aware ``dp_qu`` of
        ``(Ã, B̃)`` with the regulariser λ of eq. 10, §6).  Under label privacy both are
        post-processing of the same releases.  Under full privacy ``"all_releases"`` needs
        no ``B̃``, so the counter releases the centred ``A``-stream of label privacy, with
        leaf sensitivity ``R_φ (b − a)`` (§13.5; the runs are those of label privacy);
        ``"prefix"`` releases ``(A, c B̂)`` of the residuals ``y − μ`` as in §3.  The charge
        is the run's (ε, δ) either way.
    rng:
        ``None`` (default): secure discrete Gaussian node noise (OpenDP, OS entropy) and an
        OS-entropy Generator for the posterior samples and candidates.  A Generator: the
        simulation mode (float noise), the only source of randomness (reproducible).
    """
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    noise_rng = simulation_rng(rng)
    rng = check_rng(rng)
    X0, lower, upper, fixed_cand, n_cand = check_loop_inputs(X_init, domain, n_rounds, candidates)
    check_refine(refine_steps, refine_points)
    d = X0.shape[1]
    T = int(n_rounds)
    # its square and inverse square are used (s = noise_sd⁻²): 1e-170 raised ZeroDivisionError
    # and 1e160 OverflowError with the partition basis (stop-48 audit); nothing is spent yet
    noise_sd = check_scale(noise_sd, "noise_sd")
    func = "dp_thompson_sampling_tree"
    # a float before anything else: "0.0" was used raw after the spend (stop-40 fuzz: the
    # whole budget charged, then a TypeError)
    prior_mean = check_finite_number(prior_mean, "prior_mean")
    y_bounds = bounds_from_centred("y_bound", deprecated, y_bounds, prior_mean, func=func)
    privacy_model = _privacy_model_argument(privacy_model, deprecated, func)
    if counter not in COUNTER_NAMES:
        raise ValueError(f"counter must be one of {tuple(COUNTER_NAMES)}, got {counter!r}.")
    reject_unexpected(deprecated, func=func)
    if posterior not in ("all_releases", "prefix"):
        raise ValueError(f"posterior must be 'all_releases' or 'prefix', got {posterior!r}.")
    if y_bounds is None:
        y_bounds = (prior_mean - 1.0, prior_mean + 1.0)
    y_lo, y_hi, R_y = centred_bound(y_bounds, prior_mean)
    y_bounds = (y_lo, y_hi)
    label = privacy_model == LABEL_PRIVACY_MODEL
    c = check_positive(ratio, "ratio")
    # the full-privacy posterior's settings (eq. 10's ρ, the variant): checked here, before
    # the charge, not first in round 1
    check_rho(rho)
    check_variant(variant)
    if not isinstance(ledger, Ledger):
        raise ValueError("ledger must be a pm_dpgp Ledger holding the privacy budget.")
    delta = check_delta(ledger.delta if delta is None else delta)
    remaining = None
    if epsilon is None:
        remaining = ledger.remaining_epsilon
        if remaining is None:
            raise ValueError("the ledger has no budget; pass epsilon= for the run.")
        epsilon = float(remaining)  # 0 when the budget is used up: the run stops at once
    else:
        epsilon = check_epsilon(epsilon)
    feats = _feature_basis(
        cov_func, features, inducing, feature_norm, lower, upper, noise_sd, prior_mean
    )
    M = feats.M
    scale = 1.0 / noise_sd**2

    # the initial design is observed first: a wrong-shaped objective fails before any charge
    # (the count is public; the values are only clipped, never inspected)
    y_all = _observe(objective, X0, float(prior_mean))

    # --- public plan and the one charge, before any noise ----------------------------------
    # the all-releases posterior takes B from the loop's own (public) inputs, so the
    # full-privacy loop then releases the A-stream only (§13.5)
    all_releases = posterior == "all_releases"
    if label:  # §9: one observed value at a published input, y, y' in [a, b]
        model_name, relation = LABEL_PRIVACY_MODEL, LABEL_RELATION
    else:
        model_name, relation = PRIVACY_MODEL, NEIGHBOURING_RELATION
    if label or all_releases:
        # the centred A-stream alone: R_φ (b − a) under label privacy (§9.3) and under
        # replace-one (x, y) too, ‖φ(x)ξ − φ(x')ξ'‖ ≤ R_φ (b − a) for |ξ|, |ξ'| ≤ (b − a)/2
        # (§13.5; B from the public inputs)
        Delta, dim = (y_hi - y_lo) * feats.R, M
        leaf_equation = " * R_phi * (upper - lower), " + (
            "docs/thompson_tree.md §9"
            if label
            else "centred A-stream only, docs/thompson_tree.md §13.5"
        )
    else:  # §3: replace-one (x, y), the stacked (A, c B̂)
        Delta, dim = l2_sensitivity(R_y, feats.R, c), M + M * (M + 1) // 2
        leaf_equation = " * eq. (6) with R_k = R_phi, docs/thompson_tree.md §3"
    # the floating-point round-off of the leaf and counter sums: neighbours' computed releases
    # differ by up to Δ + 2η per released value, charged (docs/thompson_tree.md §3.1)
    if label or all_releases:
        record_norm, value_bound = 0.5 * (y_hi - y_lo) * feats.R, 0.5 * (y_hi - y_lo)
    else:
        record_norm, value_bound = regression_record_norm(R_y, feats.R, c), R_y
    depth = counter_summation_depth(counter, T, len(X0))
    margin = summation_margin(
        len(X0) + max(T - 1, 0),
        depth,
        record_norm,
        dimension=dim,
        factor_bound=product_factor_bound(value_bound, feats.R, c),
    )
    if counter == "sqrt":  # every release s ≥ t moves by c_{s−t}Δ + 2η: ‖R_{:,1}‖Δ + 2η√T
        margin *= math.sqrt(T)
    if counter == "sqrt" and T > 0:
        # the square-root counter keeps every leaf and every release (T × dim each) and stacks
        # the releases for each prefix: refused here, before the charge (stop-44 audit: T = 2·10⁶
        # rounds of dim 2144 charged the run, then raised MemoryError in SqrtCounter)
        check_doubles_fit(
            3 * T * dim,
            f"the square-root counter of {T} rounds of {dim} released values (it keeps every "
            "leaf and release; use counter='tree' or fewer rounds)",
        )
    if all_releases and T > 0:
        # the last round's all-releases posterior holds W (T × T), H = W[:, leaf] (T × n) and
        # four n × n matrices (J, ΦΦᵀ, HᵀH, G) for n = min(n₀, M) + T − 1 (pseudo-)records
        # (``all_releases_posterior``): refused before the charge, not after T rounds
        n_max = min(len(X0), M) + T - 1
        check_doubles_fit(
            4 * n_max**2 + T * n_max + T * T,
            f"the all-releases posterior of {T} rounds ({n_max} records; it conditions on "
            "every release, docs/thompson_tree.md §13; use posterior='prefix' or fewer rounds)",
        )
    if T > 0:
        # every round evaluates the features of a batch of public rows: the initial design
        # (round 1; its leaf is then compressed by a QR factorisation), the candidates and the
        # refinement points, each an (rows × M) matrix held with up to three more of its size
        # (the kernel block, the clipped copy, the QR factor): refused before the charge
        # (stop-46 audit: 10⁵ initial rows or 10⁵ candidates of the 2046-feature partition
        # basis charged the run, then raised MemoryError under a 1 GiB allowance)
        rows_max = max(len(X0), n_cand, refine_points if refine_steps else 0)
        check_doubles_fit(
            4 * rows_max * M,
            f"the features of {rows_max} rows (initial design, candidates or refinement "
            f"points) in a basis of {M} features (use fewer rows or a smaller basis)",
        )
    plan: TreePlan | SqrtCounterPlan | None = None
    stop: StopReason = "completed"

    def make_plan(eps: float) -> TreePlan | SqrtCounterPlan:
        return _counter(counter)[0](
            eps,
            delta,
            Delta + margin,
            T,
            dim,
            secure=noise_rng is None,
            label=f"Thompson {COUNTER_NAMES[counter]} ({T} rounds)",
        )

    if T > 0 and epsilon > 0.0:
        plan = make_plan(epsilon)
        if ledger.epsilon_budget is not None:
            # the ledger's filter cannot account for this event type at all: a setting
            # error, not an exhausted budget (nothing is recorded and no noise is drawn);
            # the ledger's own refusal names the filters that can hold it
            source = "secure" if noise_rng is None else "simulation"
            ledger.check_accounts_for(
                plan.event, f"this run's {type(plan.event).__name__} ({source} noise)"
            )
        if remaining is not None:
            # default: the largest run ε the ledger accepts.  Its composition can charge the
            # event more than its own ε (another filter's conversion) or less than the
            # remaining budget suggests (sub-additive composition with earlier events), so
            # search (0, budget] by bisection on public quantities only
            epsilon = _largest_affordable(make_plan, ledger, float(ledger.epsilon_budget))
            plan = make_plan(epsilon) if epsilon > 0.0 else None
            if plan is not None and epsilon < SMALL_RUN_SHARE * float(ledger.epsilon_budget):
                warnings.warn(
                    f"dp_thompson_sampling_tree: the ledger affords a run of epsilon = "
                    f"{epsilon:.3g} only ({epsilon / float(ledger.epsilon_budget):.2%} of its "
                    f"budget {float(ledger.epsilon_budget):g}; the rest was spent before): "
                    f"the node noise sd is {plan.sigma:.3g} against a response range of "
                    f"{y_hi - y_lo:g}. Pass epsilon= to run at a chosen epsilon without this "
                    "warning, or use a ledger with budget left.",
                    UserWarning,
                    stacklevel=2,
                )
        if plan is not None and all_releases:
            _check_posterior_scale(plan.sigma, noise_sd, feats.R, T, len(X0))
        elif plan is not None and not label:
            # the prefix posterior's S₂ factors at the largest prefix noise (≤ T nodes): an
            # overflow there used to raise after the charge (stop-32 audit: noise_sd=1e-40)
            sa_max = plan.sigma * math.sqrt(T)
            check_posterior_arithmetic(scale, sa_max, sa_max / c)
        if plan is None or not ledger.can_afford(plan.event):
            plan, stop = None, "budget"
            warn_no_round(
                "dp_thompson_sampling_tree",
                "The run is charged once, up front: plan it with "
                "pm_dpgp.mechanisms.full.tree_aggregation.plan_tree (fewer rounds, more noise) or "
                "give the ledger a larger budget.",
            )
        else:
            ledger.spend(
                plan.event,
                privacy_model=model_name,
                neighbouring_relation=relation,
                rng=noise_rng,
            )
    elif T > 0:  # the default epsilon on a ledger with nothing left
        stop = "budget"
        warn_no_round(
            "dp_thompson_sampling_tree",
            "Its budget is used up: give the run a ledger with budget left.",
        )

    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "x_chosen",
            "f_path_at_chosen",
            "n_data",
            "prefix_noise_sd",
            *(("nodes_in_prefix",) if counter == "tree" else ()),
            "lambda_used",
        )
    }
    X_all = X0.copy()
    failure: Exception | None = None
    if plan is not None:
        # the run is charged: from here on nothing may lose the completed rounds (stop-49
        # audit: an error in a round's posterior, or a MemoryError building the counter, was
        # raised as it was, the ledger holding a charge the caller had no record of).  A
        # Ctrl-C anywhere here returns them (stop_reason='interrupted'); any error other than
        # the objective's is a ReleaseError holding them, as in the sample-path loop
        try:
            tree = _counter(counter)[1](plan, noise_rng)
            leaf = (X0, y_all)
            B_public = np.zeros((M, M))  # exact B from the published queries (label only)
            phi_sum = np.zeros(M)  # Σ φ(x) over the published queries (label only)
            shift = 0.5 * (y_bounds[0] + y_bounds[1]) - prior_mean  # leaves centred at c, not μ
            # public features, leaf index and offset μ − c of every (pseudo-)record: the inputs
            # are X_init and x_chosen (all-releases posterior, §13)
            Phi_records: list[NDArray[np.float64]] = []
            leaf_of: list[NDArray[np.intp]] = []
            off_records: list[NDArray[np.float64]] = []
            with progress_bar(T, "DP Thompson sampling (tree)", enabled=progressbar) as bar:
                try:
                    for _ in range(T):
                        Phi = feats(leaf[0])
                        lam_used = 0.0
                        if all_releases:
                            # §13: the centred A-stream (both models); the leaf's pseudo-records
                            # (at most M, public features and offsets μ − c) enter the posterior
                            est, k = tree.add(label_statistics(Phi, leaf[1], y_bounds))
                            sa = plan.sigma * math.sqrt(k)
                            Phi_c, off_c = compress_leaf(Phi, -shift)
                            Phi_records.append(Phi_c)
                            off_records.append(off_c)
                            leaf_of.append(np.full(len(Phi_c), len(leaf_of), dtype=np.intp))
                            W_rel, Y_rel = tree.release_weights()
                            m_v, S_v = all_releases_posterior(
                                W_rel,
                                Y_rel,
                                np.vstack(Phi_records),
                                np.concatenate(leaf_of),
                                plan.sigma,
                                noise_sd**2,
                                np.concatenate(off_records),
                            )
                        elif label:
                            # §9.4: the A-stream only; B from the published inputs (no y enters it)
                            est, k = tree.add(label_statistics(Phi, leaf[1], y_bounds))
                            B_public += Phi.T @ Phi
                            phi_sum += Phi.sum(axis=0)
                            sa = plan.sigma * math.sqrt(k)
                            # Ã relative to μ: Σφ(y − μ) = Σφ(y − c) + (c − μ)Σφ, public shift
                            a_mu = est + shift * phi_sum if shift != 0.0 else est
                            m_v, S_v = public_inputs_posterior(B_public, a_mu, noise_sd**2, sa)
                        else:
                            # §3, §6: (A, c B̂) of the residuals y − μ, Honkela's noise-aware
                            # posterior
                            r = np.clip(leaf[1] - prior_mean, -R_y, R_y)
                            est, k = tree.add(record_statistics(Phi, r, c))
                            sa = plan.sigma * math.sqrt(k)
                            q = dp_qu(
                                np.eye(M),
                                est[:M],
                                symmetric_from_upper(est[M:] / c, M),
                                scale=scale,
                                sigma_a=sa,
                                sigma_b=sa / c,
                                lam=regularisation_lambda(sa / c, scale, M, rho),
                                variant=variant,
                            )
                            m_v, S_v, lam_used = q.m, q.S, q.lam_used
                        v = m_v + posterior_root(S_v) @ rng.standard_normal(M)

                        def path(Xn: NDArray[np.float64], _v: Any = v) -> NDArray[np.float64]:
                            return prior_mean + feats(Xn) @ _v

                        X_c = (
                            fixed_cand
                            if fixed_cand is not None
                            else rng.uniform(lower, upper, (n_cand, d))
                        )
                        x_new, f_new = _maximise(
                            path, (X_c, path(X_c)), lower, upper, refine_steps, refine_points, rng
                        )
                        try:
                            y_new = _observe(objective, x_new[None, :], float(prior_mean))
                        except Exception as err:  # re-raised below, with the completed rounds
                            failure, stop = err, "objective_error"
                            break
                        rows["x_chosen"].append(x_new)
                        rows["f_path_at_chosen"].append(f_new)
                        rows["n_data"].append(len(X_all))
                        rows["prefix_noise_sd"].append(sa)
                        if counter == "tree":
                            rows["nodes_in_prefix"].append(k)
                        rows["lambda_used"].append(lam_used)
                        X_all = np.vstack([X_all, x_new[None, :]])
                        y_all = np.concatenate([y_all, y_new])
                        leaf = (x_new[None, :], y_new)
                        bar.advance(f"ε = {ledger.epsilon():.3g}")
                except KeyboardInterrupt:
                    stop = "interrupted"
        except KeyboardInterrupt:  # e.g. while the counter was built, before round 1
            stop = "interrupted"
        except Exception as err:  # re-raised below as a ReleaseError, with the rounds so far
            failure, stop = err, "release_error"
    attrs: dict[str, Any] = {
        "mechanism": (
            f"sufficient-statistics Thompson sampling ({COUNTER_NAMES[counter]}, "
            f"{feats.name} features)"
        ),
        "counter": counter,
        "privacy_model": privacy_model,
        "privacy_model_description": (
            "label (one round's observed value private; queried inputs are published)"
            if label
            else (
                "full (neighbouring runs replace one observation (x, y); the queried inputs "
                "are published as x_chosen)"
            )
        ),
        "neighbouring_relation": relation,
        "stop_reason": stop,
        "n_rounds_requested": T,
        "n_rounds_completed": len(rows["x_chosen"]),
        "noise_sd": noise_sd,
        "y_bounds": [float(b) for b in y_bounds],
        "R_y": R_y,
        "prior_mean": float(prior_mean),
        "feature_norm": feats.R,
        "n_features": M,
        "ratio_c": c,
        "rho": float(rho),
        "variant": variant,
        "posterior": posterior,
        "kernel": feats.description,
        **feats.metadata(),
        "leaf_sensitivity": Delta,
        "summation_depth": depth,
        "summation_margin": margin,
        "charged_leaf_sensitivity": Delta + margin,
        "released_dim": dim,  # coordinates released per step: M (A-stream) or M + M(M+1)/2
        # stacked sensitivity = (nodes per leaf √L, or the column norm ‖R_{:,1}‖ of §11)
        # times the leaf sensitivity
        "sensitivity_equation": (
            ("sqrt(L)" if counter == "tree" else "column_norm ||R[:, 1]|| (§11)") + leaf_equation
        ),
        "delta": float(delta),
        "epsilon_run": float(epsilon),
        "epsilon_budget": "none" if ledger.epsilon_budget is None else float(ledger.epsilon_budget),
        "epsilon_spent_total": float(ledger.epsilon()),
        "ledger_delta": float(ledger.delta),  # the δ of epsilon_spent_total (epsilon_run: delta)
        "published": "chosen inputs and sampled path values only; observed values are private",
    }
    if plan is not None:
        attrs.update(
            {k: json.dumps(v) if isinstance(v, dict) else v for k, v in plan.metadata().items()}
        )
        attrs["seed_policy"] = SEED_POLICY_SECURE if noise_rng is None else SEED_POLICY_SIMULATION
    idata = trace_inference_data(
        rows,
        {k: v for k, v in _TRACE_DTYPES.items() if k in rows},
        X0,
        lower,
        upper,
        attrs,
        X_init,
    )
    owner = OwnerRecord(X=X_all, y=y_all, n_init=len(X0))
    result = ThompsonResult(
        idata=idata,
        owner=owner,
        ledger=ledger,
        events=[plan.event] if plan is not None else [],
        stop_reason=stop,
    )
    if failure is not None:
        if stop == "release_error":
            raise loop_failure(result, "release", what=RELEASE_STAGE) from failure
        raise loop_failure(result) from failure
    return result


#: the release σ and model noise sd the all-releases posterior handles (their squares and
#: inverse squares stay normal floats), and the largest bound accepted for the entries of
#: ``J`` and ``σ_o² J`` (far below the float64 maximum 1.8·10³⁰⁸)
POSTERIOR_SCALE_RANGE = (1e-100, 1e100)
POSTERIOR_ENTRY_BOUND = 1e200


def _check_posterior_scale(
    sigma: float, noise_sd: float, feature_norm: float, n_leaves: int, n_init: int
) -> None:
    """Refuse, before the charge, settings whose posterior arithmetic could overflow.

    Public quantities only (the plan's σ follows from ε, δ, ``y_bounds`` and the basis).
    Every (pseudo-)record's features have norm ``≤ √n₀ R_φ`` and every weight of ``W`` lies
    in ``[0, 1]``, so ``|J_ik| ≤ T n₀ R_φ² / σ²``: both that bound and its ``σ_o²`` multiple
    must stay below ``POSTERIOR_ENTRY_BOUND``, and σ and σ_o within ``POSTERIOR_SCALE_RANGE``
    (stop-27 audit and review: ``y_bounds = ±10²⁰⁰`` overflowed ``σ⁻²``, and
    ``noise_sd/σ = 10¹⁶⁰`` overflowed ``σ_o² J``, after the run was charged).
    """
    lo, hi = POSTERIOR_SCALE_RANGE
    for name, value in (("the release noise sd", sigma), ("noise_sd", noise_sd)):
        if not lo <= value <= hi:
            raise ValueError(
                f"{name} would be {value:.3g}, outside [{lo:g}, {hi:g}] where the posterior's "
                "arithmetic is safe: rescale the response (y_bounds, noise_sd) towards unit "
                "scale. Nothing was recorded and no noise was drawn."
            )
    log_j = 2.0 * (math.log10(feature_norm) - math.log10(sigma)) + math.log10(
        max(n_leaves, 1) * max(n_init, 1)
    )
    log_bound = math.log10(POSTERIOR_ENTRY_BOUND)
    if log_j > log_bound or log_j + 2.0 * math.log10(noise_sd) > log_bound:
        raise ValueError(
            f"the posterior's precision entries could reach 1e{log_j:.0f} (noise_sd "
            f"{noise_sd:.3g} against a release noise sd {sigma:.3g}): outside the range where "
            "its arithmetic is safe; rescale the response (y_bounds, noise_sd). Nothing was "
            "recorded and no noise was drawn."
        )


def _largest_affordable(
    make_plan: Callable[[float], Any], ledger: Ledger, epsilon: float, steps: int = 40
) -> float:
    """Largest run ε in ``(0, epsilon]`` whose planned event ``ledger`` accepts (0 if none).

    Bisection to ``2⁻⁴⁰`` relative: the filter's charge increases with the run's ε.  Reads the
    ledger's totals and public settings only.  The filter's ε must stay within the budget
    itself: the ledger's round-off slack ``BUDGET_RTOL`` (which ``spend`` allows) is not budget
    to size a run from (stop-39 walkthrough: on a spent ledger of 3 the slack 3e-9 bought a
    "completed" run at ε = 4.3e-6, node noise sd 8.9e4, the total then 3.000000003).
    """
    budget = ledger.epsilon_budget

    def fits(eps: float) -> bool:  # ledger.can_afford without the slack (one preview)
        total = ledger.preview_filter(make_plan(eps).event)
        return math.isfinite(total) and total <= budget

    if fits(epsilon):  # e.g. a fresh ledger: the whole budget
        return epsilon
    lo, hi = 0.0, epsilon
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _counter(counter: str) -> tuple[Any, Any]:
    """(planner, streaming class) of the continual counter ``counter`` (looked up per call)."""
    if counter == "tree":
        return plan_tree, TreeAggregator
    return plan_sqrt_counter, SqrtCounter


def _feature_basis(
    cov_func: Any,
    features: DyadicPartitionFeatures | None,
    inducing: ArrayLike | int | None,
    feature_norm: float | None,
    lower: NDArray[np.float64],
    upper: NDArray[np.float64],
    noise_sd: float,
    prior_mean: float,
) -> NystromFeatures | DyadicPartitionFeatures:
    """The loop's public feature basis: the given partition, or Nyström features of the kernel.

    Checked before any spend: exactly one basis, and a partition on the loop's own box (its
    cells must cover the domain the candidates are drawn from).
    """
    if features is None:
        if cov_func is None:
            raise ValueError("pass a PyMC covariance function, or features= (a public basis).")
        if inducing is None:
            inducing = 8
        if isinstance(inducing, int | np.integer) and not isinstance(inducing, bool | np.bool_):
            Z = grid_inducing_points(lower, upper, int(inducing))
        else:  # True was a grid of one point per dimension (stop-40 fuzz)
            Z = public_real_array(inducing, "inducing")
            d = len(lower)
            if Z.ndim != 2 or Z.shape[1] != d or not np.all(np.isfinite(Z)):
                raise ValueError(f"inducing must be a finite (M, {d}) array or a grid size.")
        return NystromFeatures(cov_func, Z, noise_sd, prior_mean, feature_norm)
    if type(features) is not DyadicPartitionFeatures:
        # the exact class only: its norm bound R_φ is proved; a subclass could return other
        # features (stop-27 audit)
        raise TypeError(
            "features must be a pm_dpgp DyadicPartitionFeatures (its norm bound is proved); "
            f"got {type(features).__name__}."
        )
    given = [n for n, v in (("cov_func", cov_func), ("inducing", inducing)) if v is not None]
    if feature_norm is not None:
        given.append("feature_norm")
    if given:
        raise ValueError(
            f"features= replaces the Nyström basis: pass {', '.join(given)} as None "
            "(the partition's kernel and norm bound are its own)."
        )
    if features.d != len(lower) or not (
        np.array_equal(features.lower, lower) and np.array_equal(features.upper, upper)
    ):
        raise ValueError("features= must partition the loop's domain (same lower and upper).")
    # the loop's own copy, rebuilt from the public parameters: R_φ is recomputed from the
    # weights the features will use, whatever happens to the caller's object (stop-27 review)
    return DyadicPartitionFeatures(
        features.lower, features.upper, features.levels, None, np.array(features.weights)
    )


def _privacy_model_argument(
    privacy_model: str | None, deprecated: dict[str, Any], func: str
) -> str:
    """``privacy_model=`` validated (before any spend); the deprecated ``inputs_public`` mapped."""
    if "inputs_public" in deprecated:
        old = deprecated.pop("inputs_public")
        if privacy_model is not None:
            raise TypeError(
                f"{func}() got both 'inputs_public' (deprecated) and 'privacy_model'; pass only "
                "privacy_model=."
            )
        if not isinstance(old, bool | np.bool_):
            raise TypeError("inputs_public must be True or False; pass privacy_model= instead.")
        warnings.warn(
            f"{func}(): inputs_public= is replaced by privacy_model= ('label' for True, 'full' "
            "for False) and will be removed in the next release.",
            DeprecationWarning,
            stacklevel=3,
        )
        privacy_model = LABEL_PRIVACY_MODEL if old else PRIVACY_MODEL
    if privacy_model is None:
        return PRIVACY_MODEL
    if privacy_model not in TREE_PRIVACY_MODELS:
        raise ValueError(
            f"privacy_model must be one of {TREE_PRIVACY_MODELS}, got {privacy_model!r}; use "
            "'full' (one (x, y) private) or 'label' (one observed value private)."
        )
    return str(privacy_model)
