"""Hall et al.'s prior-noise mechanism for GP regression (Smith et al. 2018, §2).

The posterior mean ``f̄(·) = μ + Σ_i α_i k(·, x_i)``, ``α = K⁻¹(y − μ)``,
``K = K' + σ_n² I`` (K' the noise-free kernel matrix at the public training
inputs), lies in the RKHS ``H`` of ``k``.  Changing one label by at most ``d``
changes ``α`` by ``v = d K⁻¹ e_j`` and the mean function by ``h = Σ_i v_i k(·, x_i)``
with squared RKHS norm (Smith et al. 2018, eqs. 1–3)

    ‖h‖²_H = vᵀ K' v.

Hall, Rinaldo & Wasserman (2013, §4) show that adding ``σ · g``, ``g ~ GP(0, k)``,
with ``σ`` calibrated for L2 sensitivity ``Δ ≥ sup ‖h‖_H`` gives (ε, δ)-DP for the
whole function; at finite test points ``X*`` the noise is ``N(0, σ² K**)`` and
``‖h(X*)‖_{K**⁻¹} ≤ ‖h‖_H``.

Sensitivity bounds offered (``bound=``), each per unit label change:

* ``"exact"`` (default): ``Δ/d = sqrt(max_j [K⁻¹ K' K⁻¹]_jj)`` — the supremum itself,
  computable because ``K`` depends only on public inputs.
* ``"inf_norm"``: the paper's bound ``‖K⁻¹‖_∞ · sqrt(max_i k(x_i, x_i))``, from
  ``vᵀK'v ≤ ‖v‖₁² max_ij |K'_ij|`` and ``|K'_ij| ≤ max_i K'_ii`` (PSD).  The paper
  assumes ``|k| ≤ 1``; the factor restores kernels with other scales.
* ``"nonnegative"``: the paper's refinement for kernels with ``0 ≤ k ≤ c``
  (e.g. EQ): ``Δ/d = sqrt(c) · max_j max(P_j, N_j)``, ``P_j``/``N_j`` the sums of
  the positive / absolute negative entries of column ``j`` of ``K⁻¹``.  The paper
  argues through the sup norm of ``h``; ``docs/prior_noise.md`` proves the bound
  for the RKHS norm: ``vᵀK'v = v_j (K'v)_j − σ_n² Σ_{i≠j} v_i² ≤ v_j (K'v)_j ≤ c P_j²``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import cho_solve

from pm_dpgp._validation import row_labels
from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.linalg import jittered_cholesky, solve_lower
from pm_dpgp.mechanisms.label.output_perturbation import label_gaussian_release, model_labels
from pm_dpgp.mechanisms.whitening import centred_whitening
from pm_dpgp.models import GPRegression, PublicGP
from pm_dpgp.models._common import _as_2d_inputs, check_input_columns, input_columns_record
from pm_dpgp.models.guards import require_exact_regression
from pm_dpgp.release import Release

__all__ = [
    "PublicPriorNoise",
    "prior_noise_release",
    "prior_noise_shape",
    "public_prior_noise",
    "rkhs_sensitivity",
]

Bound = Literal["exact", "inf_norm", "nonnegative"]


def rkhs_sensitivity(public_gp: PublicGP, bound: Bound = "exact") -> float:
    """RKHS-norm change of the posterior mean per unit change of one label.

    Multiply by the data sensitivity ``d``.  See the module docstring for the
    three bounds (Smith et al. 2018, eqs. 1–4, and the corrections made here).
    """
    if bound not in ("exact", "inf_norm", "nonnegative"):  # before any O(n³) work
        raise ValueError(f"bound must be 'exact', 'inf_norm' or 'nonnegative', got {bound!r}.")
    X = public_gp.X
    L = public_gp.posterior().L
    K_inv = cho_solve((L, True), np.eye(X.shape[0]))
    if bound == "inf_norm":
        # only the diagonal of K' (stop-48 audit: the whole n × n K' was formed for it)
        k_max = float(np.max(public_gp.kernel_diag(X)))
        return float(np.abs(K_inv).sum(axis=0).max() * np.sqrt(k_max))
    K_prime = public_gp.kernel(X, X)
    if bound == "exact":
        # ‖h_j‖²_H = [K⁻¹ K' K⁻¹]_jj for a unit change of label j (eq. 3)
        form = np.einsum("ij,jk,ki->i", K_inv, K_prime, K_inv, optimize=True)
        return float(np.sqrt(max(form.max(), 0.0)))
    k_max = float(np.max(np.diag(K_prime)))
    if bound == "nonnegative":
        if np.any(K_prime < -1e-12 * k_max):
            raise ValueError(
                "bound='nonnegative' needs a kernel with k(x, x') >= 0 on the training inputs; "
                "use bound='exact' or 'inf_norm'."
            )
        pos = np.clip(K_inv, 0.0, None).sum(axis=0)
        neg = np.clip(-K_inv, 0.0, None).sum(axis=0)
        return float(np.maximum(pos, neg).max() * np.sqrt(k_max))
    raise ValueError(f"bound must be 'exact', 'inf_norm' or 'nonnegative', got {bound!r}.")


def prior_noise_shape(public_gp: PublicGP, X_star: NDArray[np.float64]) -> NDArray[np.float64]:
    """Lower Cholesky factor ``F`` with ``F Fᵀ = K** + j I`` (prior covariance at ``X*``).

    ``j = 1e-10 · mean(diag K**)``, raised tenfold only if round-off makes the factorisation
    fail (``pm_dpgp.gp.linalg.jittered_cholesky``; ``K**`` is public, so is ``j``).  A jitter
    only adds noise, so the Mahalanobis sensitivity w.r.t. ``K**`` still bounds the one
    w.r.t. ``K** + j I``.  The factor is unique, so a seed gives the same draws on every LAPACK
    build (until stop 37 it was an eigen-factor, whose eigenvector signs needed a canonical
    rule).  A zero prior variance at every test input (e.g. a linear kernel at its centre)
    leaves no scale for ``j`` and is refused (stop-37 audit: the refusal said only "NaN
    sensitivity"); where only some test inputs have it, the mean there is exactly ``μ`` and
    the jitter covers them.
    """
    K_ss = public_gp.kernel(X_star, X_star)  # symmetrised: Xb is Xa
    mean_var = float(np.mean(np.diag(K_ss)))
    if not mean_var > 0.0:
        raise ValueError(
            "the prior variance k(x*, x*) is zero at every X_star row (e.g. a linear kernel at "
            "its centre): the posterior mean there is the prior mean and prior noise has no "
            "scale; use other test inputs or another kernel. Nothing was spent or drawn."
        )
    F, _ = jittered_cholesky(K_ss, jitter=1e-10 * mean_var, overwrite_a=True, check=False)
    return np.ascontiguousarray(F)


@dataclass(frozen=True)
class PublicPriorNoise:
    """The public parts of a prior-noise release at ``X_star`` (no label touched)."""

    shape_factor: NDArray[np.float64]  # (m, m) F with F Fᵀ = K** + j I
    W: NDArray[np.float64]  # (m, n) whitening F⁻¹ C
    unit_sensitivity: float  # RKHS sensitivity per unit label change (``bound``)


def public_prior_noise(
    public_gp: PublicGP, X_star: NDArray[np.float64], bound: Bound = "exact"
) -> PublicPriorNoise:
    """Noise shape, whitening and unit sensitivity: public inputs and hyperparameters only.

    Shared by ``prior_noise_release`` and ``pm_dpgp.plan.prior_noise`` so that a plan
    reports exactly the sensitivity the release charges.

    The whitening is ``W = F⁻¹ C`` with ``C = K*f (K + σ²I)⁻¹``, so that
    ``mean − μ = F W (y − μ)``; it is evaluated centred at the bounds' midpoint with its
    round-off bounded (``pm_dpgp/mechanisms/whitening.py``) and the release is charged for
    its computed columns.  With the Cholesky factor ``F = L_**`` it is computed as
    ``W = (L_**⁻¹ K*f)(K + σ²I)⁻¹``: ``L_**⁻¹ K*f`` is the off-diagonal block of the Cholesky
    factor of the joint prior covariance of ``[X*; X]``, whose rows have norm at most
    ``√k(x_i, x_i)``, so no direction of ``K**`` that only the jitter keeps is divided into.
    Computing ``C`` first and then ``F⁻¹ C`` sent the round-off of ``C`` (relative
    ``cond(K + σ²I) · u``) into those directions and amplified it by ``1/√j``: at duplicated
    inputs and ``noise_sd = 1e-7`` the charged sensitivity was 162× the RKHS bound (stop-37
    audit; private all the same, since the computed columns were charged, but with 162× the
    noise).
    """
    unit = rkhs_sensitivity(public_gp, bound)
    shape = prior_noise_shape(public_gp, X_star)
    G = solve_lower(shape, public_gp.kernel(X_star, public_gp.X))  # L_**⁻¹ K*f, (m, n)
    W = public_gp.posterior().solve(G.T).T  # G (K + σ²I)⁻¹
    return PublicPriorNoise(shape, W, unit)


def prior_noise_release(
    gpr: GPRegression,
    X_star: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    y_bounds: tuple[float, float],
    hyperparameters: dict[str, float] | None = None,
    bound: Bound = "exact",
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    clip: Literal["warn"] = "warn",
    bounds_are_public: bool = False,
) -> Release:
    """Release the posterior mean at ``X_star`` plus scaled prior-GP noise (Hall et al.).

    Label privacy: the inputs are public, neighbours differ in one output by at most
    ``d = y_bounds[1] − y_bounds[0]``.  Each of the ``n_draws`` draws is one
    (ε, δ)-DP release; the ledger is charged for all of them before noise is drawn.
    ``rng=None`` (default) draws secure discrete Gaussian noise (OpenDP, OS entropy;
    ``docs/secure_noise.md``); a NumPy Generator selects the simulation mode.
    """
    check_input_columns(X_star, gpr)  # a DataFrame in another column order
    x_star_rows = row_labels(X_star)  # a hold-out Series must match them (stop 42)
    require_exact_regression(gpr, "prior_noise_release")
    public_gp = gpr.public_gp(hyperparameters)
    # named and counted here: the kernel called it "Xa" (stop-41 fuzz)
    X_star = _as_2d_inputs(X_star, "X_star", public_gp.input_dim)
    labels = model_labels(gpr, public_gp, y_bounds, clip=clip, bounds_are_public=bounds_are_public)
    parts = public_prior_noise(public_gp, X_star, bound)
    whitening = centred_whitening(parts.W, labels.y, labels.y_bounds, public_gp.mean)
    shape, unit = parts.shape_factor, parts.unit_sensitivity
    release = label_gaussian_release(
        "prior_noise",
        public_gp,
        labels,
        shape,
        unit,
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
        n_draws=n_draws,
        ledger=ledger,
        rng=rng,
        label="prior-noise GP release (Hall et al. 2013)",
        X_star=X_star,
        whitening=whitening,
        x_star_rows=x_star_rows,
        sensitivity_bound=bound,
        input_columns=input_columns_record(gpr),  # a DataFrame's column names, or None
        # the jitter of the factorisation and the inputs fingerprint, as a cloaked release
        # records them (public: X is public under label privacy)
        **public_gp.cloaking_metadata(),
    )
    return release.remember_training(gpr)  # identity only (Release.remember_training)
