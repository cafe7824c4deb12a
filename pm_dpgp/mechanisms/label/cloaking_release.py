"""Cloaked release of GP posterior-mean predictions (Smith et al. 2018 §3; 2021 §2.3).

With public training inputs ``X``, public test inputs ``X*`` and private outputs
``y``, the exact posterior mean is ``f* = μ + C (y − μ)`` with cloaking matrix
``C = K*f (K + σ_n² I)⁻¹``.  Changing label ``i`` by at most ``d`` moves ``f*`` by
``d·cᵢ``.  The release is

    f̃* = μ + P C (y − μ) + σ · U_k L_k z,   z ~ N(0, I_k),

where ``M = U_k L_k L_kᵀ U_kᵀ`` is the optimal noise covariance of
``solve_noise_covariance`` (minimum-volume
ellipsoid enclosing ``±cᵢ``), ``P = U_k U_kᵀ`` the projector onto the retained
column space of ``C`` (directions treated as numerically zero are projected out
of the mean, never left unprotected), and ``σ`` is the analytic Gaussian
calibration for L2 sensitivity ``d · sqrt(max_i cᵢᵀ M⁺ cᵢ)`` in the
``M``-whitened space — a square root, see ``docs/cloaking.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import solve_triangular

from pm_dpgp._progress import progress_bar
from pm_dpgp._validation import (
    check_delta,
    check_epsilon,
    check_finite_array,
    check_flag,
    row_labels,
)
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.label.cloaking import (
    NoiseCovariance,
    solve_noise_covariance,
)
from pm_dpgp.mechanisms.label.output_perturbation import (
    label_gaussian_release,
    model_labels,
    planned_l2_sensitivity,
)
from pm_dpgp.mechanisms.label.truncation import RankCut, TruncationSetting
from pm_dpgp.mechanisms.whitening import centred_whitening
from pm_dpgp.models import GPRegression, PublicGP
from pm_dpgp.models._common import check_input_columns, input_columns_record
from pm_dpgp.models.fitc import PublicFITC
from pm_dpgp.models.hyperparameters import warn_if_not_planned
from pm_dpgp.release import Release

__all__ = [
    "SENSITIVITY_SAFETY",
    "PublicCloaking",
    "cloaking_noise",
    "cloaking_parts",
    "cloaked_release",
    "public_cloaking",
]

#: Relative safety factor on the computed Mahalanobis sensitivity.  ``max cᵢᵀM⁺cᵢ`` is
#: evaluated in floating point, so the calibration uses a slightly larger sensitivity (the
#: noise grows by 1e-6 relative).  The release forms its mean and its calibration from the
#: same computed whitened map ``W``, so every neighbour's change of the released mean is
#: within the calibrated radius up to this round-off (a stop-26 audit measured ≤ 0.999999 of
#: it on 60 same-seed neighbour pairs).  ``C`` itself is only as accurate as its
#: conditioning allows: against an independent float64 computation of ``C`` the ratio
#: reached 1.005 for a Gibbs kernel with noise sd 1e-3 (cond 4e8).  That is the accuracy of
#: the model's ``C``, not a leak: the released map is the computed one.
SENSITIVITY_SAFETY = 1.0 + 1e-6


def cloaking_noise(
    public_gp: PublicGP | PublicFITC,
    X_star: ArrayLike,
    *,
    tol: float = 1e-9,
    rank_tol: float = 1e-8,
    design: Literal["logdet", "trace"] = "logdet",
) -> tuple[np.ndarray, NoiseCovariance]:
    """Return the cloaking matrix ``C`` (m × n) and its optimal noise covariance.

    Both depend only on public quantities (inputs, hyperparameters), so they can be
    inspected before any private data is touched.  ``rank_tol`` defaults to ``1e-8`` here;
    ``cloaked_release`` defaults to the public rule ``"auto"``
    (``pm_dpgp.mechanisms.label.truncation``), so pass ``release.metadata["rank_tol"]`` to
    reproduce a release's basis.  ``public_gp`` is any public view with a
    ``cloaking_operator`` (exact ``pm_dpgp.models.PublicGP``, FITC
    ``pm_dpgp.models.fitc.PublicFITC``); ``C`` is formed here (``m × n``).
    """
    # before the conversion to an array drops a DataFrame's column names (stop-47 audit: the
    # columns in another order gave another C, silently; cloaked_release refused them)
    check_input_columns(X_star, public_gp)
    X_star = check_finite_array(X_star, "X_star", ndim=2)
    C = public_gp.cloaking_operator(X_star).dense()
    return C, solve_noise_covariance(C, tol=tol, rank_tol=rank_tol, design=design)


@dataclass(frozen=True)
class PublicCloaking:
    """The public parts of a cloaked release at ``X_star`` (no label touched)."""

    noise: NoiseCovariance
    W: np.ndarray  # (k, n) whitening L_k⁻¹ U_kᵀ C
    shape_factor: np.ndarray  # (m, k) U_k L_k
    unit_sensitivity: float  # sqrt(max cᵢᵀ M⁺ cᵢ) with the safety factor
    l2_sensitivity: float  # what the release charges for the public range y_bounds
    cut: RankCut | None = None  # the rank cut and its bias bound (given ``privacy``)


def public_cloaking(
    public_gp: PublicGP,
    X_star: np.ndarray,
    y_bounds: tuple[float, float],
    *,
    tol: float = 1e-9,
    rank_tol: float | Literal["auto"] = 1e-8,
    design: Literal["logdet", "trace"] = "logdet",
    privacy: tuple[float, float] | None = None,
) -> PublicCloaking:
    """Noise covariance, whitening and charged sensitivity: public inputs and bounds only.

    Shared by ``cloaked_release`` and ``pm_dpgp.plan.cloaked``, so that a plan
    reports exactly the sensitivity the release charges (and cuts the rank where it does:
    ``privacy`` and ``rank_tol`` as for ``cloaking_parts``, prior mean the model's).
    """
    # C is used as an operator, never the m×n matrix: exact, K*f (K + σ²I)⁻¹ through one n×n
    # Cholesky factor; FITC, the low-rank product of pm_dpgp.gp.fitc (Smith et al. 2021, eq. 9)
    C = public_gp.cloaking_operator(X_star)
    return cloaking_parts(
        C,
        y_bounds,
        tol=tol,
        rank_tol=rank_tol,
        design=design,
        privacy=privacy,
        prior_mean=public_gp.mean,
    )


def cloaking_parts(
    C: Any,
    y_bounds: tuple[float, float],
    *,
    tol: float = 1e-9,
    rank_tol: float | Literal["auto"] = 1e-8,
    design: Literal["logdet", "trace"] = "logdet",
    privacy: tuple[float, float] | None = None,
    prior_mean: float = 0.0,
) -> PublicCloaking:
    """``public_cloaking`` for a given public cloaking matrix or operator ``C`` (m × n).

    Also used by the one-step classification release (labels in ``[0, 1]``, prior mean 0 for
    the rank rule: the labels enter as ``C* (t − 0)``) and its plan.  ``privacy``: the
    ``(ε, δ)`` of one draw; with it the rank cut is resolved here, once for a release and its
    plan (``"auto"``: ``pm_dpgp.mechanisms.label.truncation``) and returned with its bias bound
    as ``cut``.  Without it ``rank_tol`` must be a number.
    """
    cut = None
    if privacy is not None:
        setting = TruncationSetting(*privacy, C.shape[1], C.shape[0], y_bounds, prior_mean)
        cut = setting.cut(rank_tol)
        rank_tol = cut.rank_tol
    elif isinstance(rank_tol, str):
        raise ValueError("rank_tol='auto' needs the release's (epsilon, delta): pass privacy=.")
    noise = solve_noise_covariance(C, tol=tol, rank_tol=rank_tol, design=design)
    # U_k (U_kᵀ C) r with the same U_kᵀ C the sensitivity was computed from (docs §4):
    # mean = μ + (U L_k) w with w = W (y − μ), W = L_k⁻¹ U_kᵀ C public (k × n)
    W = solve_triangular(noise.chol_k, noise.projected, lower=True)
    unit = float(np.sqrt(noise.max_mahalanobis)) * SENSITIVITY_SAFETY
    F = noise.basis @ noise.chol_k
    l2 = planned_l2_sensitivity(unit, W, y_bounds, shape_factor=F, prior_mean=prior_mean)
    return PublicCloaking(noise, W, F, unit, l2, cut)


def cloaked_release(
    gpr: GPRegression,
    X_star: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    y_bounds: tuple[float, float],
    hyperparameters: dict[str, float] | None = None,
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    clip: Literal["warn"] = "warn",
    bounds_are_public: bool = False,
    tol: float = 1e-9,
    rank_tol: float | Literal["auto"] = "auto",
    progressbar: bool = False,
    design: Literal["logdet", "trace"] = "logdet",
) -> Release:
    """(ε, δ)-DP cloaked release of the posterior mean at the public ``X_star``.

    ``pm_dpgp.plan.cloaked`` gives the noise sd at ``X_star`` and the charged event for a
    target (ε, δ) before the labels are touched.

    Parameters
    ----------
    gpr:
        the model (inputs public, outputs private): exact
        (``pm_dpgp.models.gp_regression``, also with the non-stationary Gibbs kernel of
        ``pm_dpgp.models.nonstationary_gp_regression``) or FITC
        (``pm_dpgp.models.fitc_gp_regression``).  Its ``public_cloaking`` view supplies
        the cloaking matrix ``C`` as an operator (Smith et al. 2018 §3; 2021 §3.2 eq. 9 for
        FITC, ``C = k_*M Q⁻¹ K_MN (Λ + σ²I)⁻¹``, never an ``n × n`` matrix); everything
        else (solver, calibration, ledger, noise source, metadata) is shared.
    X_star:
        public test inputs, fixed before the release (Smith et al. 2018 §3).
    epsilon, delta:
        the guarantee of *each* draw.
    y_bounds:
        public clipping range; the data sensitivity is ``d = upper − lower``.
    hyperparameters:
        public values for any hyperparameter that has a prior in ``gpr``.
    calibration:
        ``"analytic"`` (Balle & Wang 2018, any ε > 0) or ``"classic"``
        (``c(δ) = sqrt(2 ln(2/δ))``, ε ≤ 1 only).
    n_draws:
        number of independent noisy draws; each is a release and the ledger is
        charged for all ``n_draws`` (composed in RDP / Gaussian DP).
    ledger:
        charged before any noise is drawn; refuses with ``BudgetExceededError``.
    rng:
        ``None`` (default): secure noise, a discrete Gaussian release of the rounded whitened
        mean sampled by OpenDP from OS entropy and charged as a
        ``ZCDPEvent`` (``docs/secure_noise.md``).  A NumPy
        Generator: the simulation mode (continuous float noise, a ``GaussianEvent``), for
        tests and reproducible notebooks.
    clip:
        outputs outside ``y_bounds`` are clipped silently (a warning or refusal would
        tell whether a private value lies outside; ``docs/errors.md``); only ``"warn"``,
        the default, is accepted (the name is kept for compatibility).
    bounds_are_public:
        set to ``True`` only if bounds that coincide with the data's min/max really are public.
    tol:
        optimality tolerance of the noise-covariance solver.
    rank_tol:
        relative singular-value tolerance of the column space of ``C``: directions of ``C``
        weaker than ``rank_tol`` × the largest are projected out of the mean (never
        released unnoised).  ``"auto"`` (default): the largest tolerance whose worst-case
        bias, over every label vector in ``y_bounds``, is below 1 % of the RMS norm of one
        draw's noise (``pm_dpgp.mechanisms.label.truncation``; public inputs only, recorded
        with the bound in the metadata).  A number in ``[2.2e-16, 1)`` (``RANK_TOL_MIN``, the
        float64 round-off, up to 1; smaller ones are refused) is used as given (``1e-8``
        was the default before; values far below ``1e-10`` make the Mahalanobis
        sensitivity ill-conditioned).
    progressbar:
        show a progress bar over the stages (noise covariance, draw), as PyMC's samplers do;
        worth it from a few thousand training points (``docs/cloaking.md``, scaling table).
    design:
        ``"logdet"`` (default): the paper's noise covariance, least ``log|M|`` (Smith et al.
        2018, supplement).  ``"trace"``: least ``tr M`` under the same constraints, i.e. the
        least mean noise variance over ``X_star`` (``docs/cloaking.md`` §8; 0.67× the log det
        variance on !Kung with the default rank cut, 0.45× at ``rank_tol=1e-8``).  Privacy
        is the same: the sensitivity is computed for the ``M`` used.
    """
    check_input_columns(X_star, gpr)  # a DataFrame in another column order
    x_star_rows = row_labels(X_star)  # a hold-out Series must match them (stop 42)
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    public_gp = gpr.public_cloaking(hyperparameters)
    X_star = check_finite_array(X_star, "X_star", ndim=2)
    labels = model_labels(gpr, public_gp, y_bounds, clip=clip, bounds_are_public=bounds_are_public)
    warn_if_not_planned(  # public values, before the spend
        hyperparameters,
        epsilon=check_epsilon(epsilon),
        delta=check_delta(delta),
        y_bounds=labels.y_bounds,
        calibration=calibration,
    )
    with progress_bar(2, "Cloaked release", enabled=progressbar) as bar:
        parts = public_cloaking(
            public_gp,
            X_star,
            labels.y_bounds,
            tol=tol,
            rank_tol=rank_tol,
            design=design,
            privacy=(epsilon, delta),
        )
        noise, cut = parts.noise, parts.cut
        assert cut is not None  # privacy was given
        bar.advance("noise covariance solved")
        # the whitened mean, centred at the bounds' midpoint with its round-off bounded
        # (pm_dpgp/mechanisms/whitening.py)
        whitening = centred_whitening(parts.W, labels.y, labels.y_bounds, public_gp.mean)
        release = label_gaussian_release(
            "cloaking",
            public_gp,
            labels,
            parts.shape_factor,
            parts.unit_sensitivity,
            epsilon=epsilon,
            delta=delta,
            calibration=calibration,
            n_draws=n_draws,
            ledger=ledger,
            rng=rng,
            label="cloaked GP release (Smith et al. 2018)",
            X_star=X_star,
            whitening=whitening,
            x_star_rows=x_star_rows,
            max_mahalanobis=noise.max_mahalanobis,
            noise_rank=noise.rank,
            rank_tol=noise.rank_tol,
            rank_rule=cut.rule,
            truncation_bias_ratio=cut.bias_ratio,
            solver_gap_bound=noise.gap_bound,
            solver_converged=bool(noise.converged),
            noise_design=noise.design,
            input_columns=input_columns_record(gpr),  # a DataFrame's column names, or None
            **public_gp.cloaking_metadata(),
        )
        bar.advance("noise drawn")
    # weak references to the model (identity only): to_inference_data refuses its training
    # outputs as observed_data (stop-45 audit)
    return release.remember_training(gpr)
