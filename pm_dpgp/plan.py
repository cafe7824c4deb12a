"""Planning before data: what a release will cost, or what it needs for a target ε.

Every function here reads public quantities only (the public inputs and hyperparameters of a
label-private model, the public inducing inputs and kernel of a sparse model, the number of
records and the public bounds of a fully private one) and never the private responses, so it
can be run, and its answer published, before the data are touched.  Each returns the very
privacy event the release will charge: passing the plan's answer to the release gives exactly
the plan's ε in the ledger (``tests/test_plan.py``).

* ``cloaked``: ε is an input; the plan gives the DP noise sd the release adds at each
  public test input (Smith et al. 2018, §3; ``docs/cloaking.md``).
* ``prior_noise``: as ``cloaked`` for Hall et al.'s prior-noise release (Smith et al. 2018,
  §2; ``docs/prior_noise.md``).
* ``classification``: as ``cloaked`` for the one-step Laplace GP classifier (Smith et al.
  2021, §4; ``docs/classification.md``): the DP noise sd of the latent values.
* ``binned``: ε is an input; the plan gives the public bin counts, each bin mean's Laplace
  scale and the pure-DP event of the binning baseline (``docs/binning.md``).
* ``noise_aware``: ε is an input; the plan gives the noise scales ``σ_a``, ``σ_b`` of
  the perturbed statistics and the regulariser λ (Honkela et al., Alg. 1 and eq. 10;
  ``docs/noise_aware.md``).
* ``dirichlet``: as ``noise_aware`` for the Dirichlet GP classifier (Honkela §5): the joint
  sensitivity over the public number of classes and the noise scales.
* ``sample_path``: ε is an *output* of the public setting (Maciazek; eqs. SP1–SP9 of
  ``docs/sample_paths.md``): the plan gives ε for a setting, or the smallest observation
  noise sd ``noise_sd`` (equivalently the ridge ``r² = noise_sd²/kernel_scale²``) that meets a
  target ε, and the number of draws that fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import (
    centred_bound,
    check_count,
    check_delta,
    check_epsilon,
    check_finite_array,
    check_finite_number,
    check_flag,
    check_positive,
    check_public_bounds,
    check_scale,
)
from pm_dpgp.accounting import BUDGET_RTOL, GaussianEvent, Ledger, PrivacyEvent
from pm_dpgp.accounting.ledger import FilterName
from pm_dpgp.accounting.planned import PlannedCharge
from pm_dpgp.mechanisms.full.sample_path import (
    _NOT_PROVED_COVARIANCE,
    _check_given_kappa,
    _check_public_kernel,
    _public_probes,
    require_domain_unless_stationary,
    resolve_kappa,
    sample_path_event,
)
from pm_dpgp.mechanisms.full.sample_path_bounds import (
    CovBound,
    SamplePathBound,
    Sensitivity,
    check_kappa,
    parse_domain,
    paths_affordable,
)
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
from pm_dpgp.mechanisms.noise import secure_plan
from pm_dpgp.models._common import check_input_columns
from pm_dpgp.models.exact import gp_regression
from pm_dpgp.models.guards import refuse_dirichlet_model, require_exact_regression
from pm_dpgp.models.sparse import (
    depends_on_random_variables,
    is_stationary_decreasing,
    kernel_structure_at,
)
from pm_dpgp.release import noise_sd_of

__all__ = [
    "BinnedPlan",
    "CloakedPlan",
    "DirichletPlan",
    "GaussianReleasePlan",
    "NoiseAwarePlan",
    "SamplePathPlan",
    "ThompsonPlan",
    "binned",
    "classification",
    "cloaked",
    "dirichlet",
    "noise_aware",
    "prior_noise",
    "sample_path",
    "thompson",
]

KernelClass = Literal["generic", "exponential_1d", "constant"]


def _gaussian_event(
    epsilon: float,
    delta: float,
    sensitivity: float,
    dim: int,
    calibration: Literal["analytic", "classic"],
    n_draws: int,
    label: str,
    secure: bool,
) -> tuple[float, PrivacyEvent]:
    """Noise sd and event of a Gaussian release, as the releases calibrate them."""
    if check_flag(secure, "secure"):  # None planned the simulation mode (stop 40)
        plan = secure_plan(epsilon, delta, sensitivity, dim, calibration)
        return plan.sigma, plan.event(n_draws, label)
    sigma = gaussian_sigma(epsilon, delta, sensitivity, method=calibration)
    return sigma, GaussianEvent(noise_multiplier=sigma / sensitivity, count=n_draws, label=label)


class _LedgerEpsilon(PlannedCharge):
    """``ledger_epsilon`` (the charged event's composition ε at the plan's ``delta``),
    ``filter_epsilon`` and ``fits`` on a fresh ledger, and ``filter_epsilon_in(ledger)`` /
    ``fits_in(ledger)`` for a given one (``PlannedCharge``: the ledger's own previews)."""

    delta: float
    event: PrivacyEvent

    @property
    def ledger_epsilon(self) -> float:
        """ε at ``delta`` of the event the ledger will be charged: its composition value,
        what ``Ledger(delta=delta).epsilon()`` shows after the release.  A ledger decides on
        its privacy filter's ε instead, which can be larger (``filter_epsilon_in``)."""
        return float(self.event.epsilon(self.delta))

    @property
    def filter_epsilon(self) -> float:
        """What the privacy filter of a fresh ``Ledger(delta=delta)`` (default filter and
        orders) counts for the release, as ``SamplePathPlan.filter_epsilon``."""
        return self.filter_epsilon_in(Ledger(delta=self.delta))

    @property
    def fits(self) -> bool:
        """Whether a fresh ``Ledger(epsilon=ledger_epsilon, delta=delta)`` (default filter
        and orders) accepts the release; for another ledger, or one already charged, ask
        ``fits_in(ledger)``."""
        return self.fits_in(Ledger(epsilon=self.ledger_epsilon, delta=self.delta))


# ------------------------------------------------------------------ Gaussian label releases
@dataclass(frozen=True)
class GaussianReleasePlan(_LedgerEpsilon):
    """What a Gaussian label-private release at ``X_star`` will add and charge (public).

    Returned by ``cloaked``, ``prior_noise`` and ``classification``.  ``ledger_epsilon`` is
    the composition ε of the charged event; whether a given ledger accepts the release is
    ``fits_in(ledger)`` (its filter counts ``filter_epsilon_in(ledger)``).
    """

    privacy_model: ClassVar[str] = "label"

    epsilon: float
    delta: float
    n_draws: int
    l2_sensitivity: float
    noise_multiplier_sd: float  # σ, multiplier of the unit-shaped noise
    noise_sd: NDArray[np.float64]  # (m,) DP noise sd at each test input
    event: PrivacyEvent


CloakedPlan = GaussianReleasePlan  # the name the cloaked plan has always had


def _gaussian_plan(
    epsilon: float,
    delta: float,
    l2_sensitivity: float,
    shape_factor: NDArray[np.float64],
    calibration: Literal["analytic", "classic"],
    n_draws: int,
    label: str,
    secure: bool,
) -> GaussianReleasePlan:
    """The plan of ``perturb``: noise ``σ · shape_factor · z`` for the charged sensitivity."""
    sigma, event = _gaussian_event(
        epsilon, delta, l2_sensitivity, shape_factor.shape[1], calibration, n_draws, label, secure
    )
    noise_sd = noise_sd_of(sigma * shape_factor)  # the release's noise factor and row norms
    return GaussianReleasePlan(epsilon, delta, n_draws, l2_sensitivity, sigma, noise_sd, event)


def cloaked(
    model: Any,
    X_star: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    y_bounds: tuple[float, float],
    hyperparameters: dict[str, float] | None = None,
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    secure: bool = True,
    tol: float = 1e-9,
    rank_tol: float | Literal["auto"] = "auto",
    design: Literal["logdet", "trace"] = "logdet",
) -> CloakedPlan:
    """Plan a ``cloaked_release`` before touching the private labels.

    Uses the public inputs and hyperparameters of ``model`` only (label privacy: inputs are
    public), never ``model.y``.  Returns the DP noise sd at every ``X_star`` for the target
    (ε, δ) and the event the ledger will be charged.  ``secure=False`` plans the simulation
    mode (``rng=`` given to the release).  Costs one noise-covariance solve, like the release.
    ``design`` and ``rank_tol`` must match the release's (``"logdet"`` or ``"trace"``,
    ``docs/cloaking.md`` §8; ``"auto"`` is the same public rule in both).
    """
    from pm_dpgp.mechanisms.label.cloaking_release import public_cloaking

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    n_draws = check_count(n_draws, "n_draws")
    lower, upper = check_public_bounds(y_bounds)
    check_input_columns(X_star, model)  # as the release does (stop-41 walkthrough)
    public_gp = model.public_cloaking(hyperparameters)
    X_star = check_finite_array(X_star, "X_star", ndim=2)
    parts = public_cloaking(
        public_gp,
        X_star,
        (lower, upper),
        tol=tol,
        rank_tol=rank_tol,
        design=design,
        privacy=(epsilon, delta),
    )
    return _gaussian_plan(
        epsilon,
        delta,
        parts.l2_sensitivity,
        parts.shape_factor,
        calibration,
        n_draws,
        "cloaked GP release (Smith et al. 2018)",
        secure,
    )


def prior_noise(
    model: Any,
    X_star: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    y_bounds: tuple[float, float],
    hyperparameters: dict[str, float] | None = None,
    bound: Literal["exact", "inf_norm", "nonnegative"] = "exact",
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    secure: bool = True,
) -> GaussianReleasePlan:
    """Plan a ``prior_noise_release`` (Hall et al.) before touching the private labels.

    Public inputs, hyperparameters and ``y_bounds`` only: the RKHS sensitivity ``bound``
    (Smith et al. 2018, eqs. 1–4), the prior covariance shape at ``X_star`` and the charged
    L2 sensitivity ``d·s + 2r`` as ``prior_noise_release`` computes them.
    """
    from pm_dpgp.mechanisms.label.output_perturbation import planned_l2_sensitivity
    from pm_dpgp.mechanisms.label.prior_noise import public_prior_noise

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    n_draws = check_count(n_draws, "n_draws")
    lower, upper = check_public_bounds(y_bounds)
    require_exact_regression(model, "prior_noise_release (planned here)")
    check_input_columns(X_star, model)  # as the release does
    public_gp = model.public_gp(hyperparameters)
    X_star = check_finite_array(X_star, "X_star", ndim=2)
    parts = public_prior_noise(public_gp, X_star, bound)
    l2 = planned_l2_sensitivity(
        parts.unit_sensitivity,
        parts.W,
        (lower, upper),
        shape_factor=parts.shape_factor,
        prior_mean=public_gp.mean,
    )
    label = "prior-noise GP release (Hall et al. 2013)"
    return _gaussian_plan(
        epsilon, delta, l2, parts.shape_factor, calibration, n_draws, label, secure
    )


def classification(
    model: Any,
    X_star: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    hyperparameters: dict[str, float] | None = None,
    f0: ArrayLike | None = None,
    inducing_points: ArrayLike | int | None = None,
    kmeans_seed: int = 0,
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    secure: bool = True,
    tol: float = 1e-9,
    rank_tol: float | Literal["auto"] = "auto",
    design: Literal["logdet", "trace"] = "logdet",
) -> GaussianReleasePlan:
    """Plan a ``classification_release`` (one-step Laplace, Smith et al. 2021 §4).

    Public inputs, hyperparameters, linearisation point ``f0`` and inducing inputs only; the
    labels lie in ``[0, 1]`` (data sensitivity 1); ``design`` as for ``cloaked``.  ``noise_sd``
    is the DP noise sd of the released latent values at ``X_star``.  Costs one noise-covariance
    solve, like the release.
    """
    from pm_dpgp.mechanisms.label.classification import (
        CLASSIFICATION_LABEL,
        LABEL_BOUNDS,
        public_one_step,
    )
    from pm_dpgp.mechanisms.label.cloaking_release import cloaking_parts

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    n_draws = check_count(n_draws, "n_draws")
    check_input_columns(X_star, model)  # as the release does
    C = public_one_step(model, X_star, hyperparameters, f0, inducing_points, kmeans_seed)[3][0]
    parts = cloaking_parts(
        C, LABEL_BOUNDS, tol=tol, rank_tol=rank_tol, design=design, privacy=(epsilon, delta)
    )
    label = CLASSIFICATION_LABEL
    return _gaussian_plan(
        epsilon,
        delta,
        parts.l2_sensitivity,
        parts.shape_factor,
        calibration,
        n_draws,
        label,
        secure,
    )


# ---------------------------------------------------------------------------------- binning
@dataclass(frozen=True)
class BinnedPlan(PlannedCharge):
    """The public bin counts, Laplace scales and pure-DP event of a ``binned_release``;
    ``fits_in(ledger)`` asks a ledger whether it accepts the release (``PlannedCharge``)."""

    privacy_model: ClassVar[str | None] = "label"

    epsilon: float
    n_draws: int
    counts: NDArray[np.int64]  # (n_bins,) public: the inputs are public
    laplace_scale: NDArray[np.float64]  # (n_bins,) scale of each bin mean's noise, 0 if empty
    event: PrivacyEvent

    @property
    def epsilon_total(self) -> float:
        """Pure-DP ε of all ``n_draws`` draws (δ = 0), as the release reports it."""
        return float(self.event.count * self.event.eps)  # type: ignore[attr-defined]


def binned(
    X: ArrayLike,
    bins: Any,
    *,
    epsilon: float,
    y_bounds: tuple[float, float],
    out_of_range: Literal["raise", "drop", "clip"] = "raise",
    n_draws: int = 1,
    secure: bool = True,
) -> BinnedPlan:
    """Plan a ``binned_release`` (Laplace bin means, Smith et al. 2018 §4).

    Public inputs ``X`` and edges only (label privacy): the counts ``n_j`` set the scales
    ``d/(n_j ε)`` (simulation) or their discrete-Laplace equivalents (secure mode).
    """
    from pm_dpgp.mechanisms.label.binning import Bins, binning_noise

    epsilon = check_epsilon(epsilon)
    n_draws = check_count(n_draws, "n_draws")
    if not isinstance(bins, Bins):
        raise TypeError("bins must come from make_bins(edges).")
    lower, upper = check_public_bounds(y_bounds)
    X_arr = check_finite_array(X, "X", ndim=2)
    counts = bins.counts(X_arr, out_of_range)[1]
    noise = binning_noise(counts, epsilon, (lower, upper), n_draws, secure=secure)
    return BinnedPlan(epsilon, n_draws, counts, noise.scale, noise.event)


# ------------------------------------------------------------------------------ noise-aware
@dataclass(frozen=True)
class NoiseAwarePlan(_LedgerEpsilon):
    """The noise of a noise-aware sparse-GP release (Honkela Alg. 1), before any data."""

    epsilon: float
    delta: float
    l2_sensitivity: float
    sigma_a: float
    sigma_b: float
    lam: float
    R_y: float
    R_k: float
    event: PrivacyEvent
    ratio_c: float  # c = sigma_a / sigma_b as the release uses it (ratio, or "auto": R_y / R_k)
    summation_margin: float = 0.0  # 2η charged on top of l2_sensitivity (0 without n_records)

    @property
    def charged_sensitivity(self) -> float:
        """``l2_sensitivity + summation_margin``: what σ_a is calibrated to."""
        return self.l2_sensitivity + self.summation_margin


def _planned_depth(n_records: int | None, chunk_size: int | None, n_inducing: int) -> int | None:
    """``summation_depth`` of a release of ``n_records`` rows with ``chunk_size`` (default
    ``default_chunk_size``), the same for every chunking of the data, or None."""
    from pm_dpgp.gp.sparse import default_chunk_size, public_summation_depth

    if n_records is None:
        if chunk_size is not None:
            raise ValueError("chunk_size needs n_records (the summation depth of n_records rows).")
        return None
    n = check_count(n_records, "n_records")
    chunk = (
        default_chunk_size(n_inducing)
        if chunk_size is None
        else check_count(chunk_size, "chunk_size")
    )
    return public_summation_depth(n, chunk)


def noise_aware(
    model: Any,
    *,
    epsilon: float,
    delta: float,
    y_bounds: tuple[float, float],
    hyperparameters: dict[str, Any] | None = None,
    ratio: float | Literal["auto"] = 1.0,
    kernel_norm: Any = "auto",
    rho: float = 0.01,
    calibration: Literal["analytic", "classic"] = "analytic",
    secure: bool = True,
    noise_var_floor: float | None = None,
    n_records: int | None = None,
    chunk_size: int | None = None,
) -> NoiseAwarePlan:
    """Plan a ``noise_aware_release``.

    Public quantities only: the inducing inputs ``Z``, the kernel, the noise sd and prior mean
    of ``model`` (a sparse model or a ``PublicSparseGP``) and ``y_bounds``.  ``R_y`` is
    derived from ``y_bounds`` and the prior mean as the release does.  For a heteroscedastic
    release pass its public ``noise_var_floor``: the release then scales the statistics by
    ``1/noise_var_floor`` instead of ``1/noise_var``, which sets the regulariser ``λ`` and the
    arithmetic check (stop-35 audit: the plan's ``λ`` was 890 where the release used 1603).

    The release charges ``Δ + 2η``, ``2η`` the floating-point round-off of its sums, which
    depends on the public number of records and chunk size only (``docs/noise_aware.md`` §1).
    With ``n_records`` (and the release's ``chunk_size``, default ``default_chunk_size``) the
    plan computes that margin and equals the release's ``σ_a``, for a tuple ``(X, y)``, an
    iterator of chunks or Dask collections alike; without it the plan is at ``Δ`` alone
    (``summation_margin`` 0), slightly below what the release charges (relative ``2η/Δ``
    about 1.5·10⁻⁸ at ``n = 10⁴``, 6·10⁻⁶ at ``10⁶``, 6·10⁻⁴ at ``10⁸``, for ``M = 100``).
    """
    from pm_dpgp.mechanisms.full.noise_aware import (
        _as_public,
        check_inducing_covariance,
        kernel_norm_bound,
        l2_sensitivity,
        regression_margin,
        resolve_ratio,
        statistics_noise,
    )

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    refuse_dirichlet_model(model, "plan.noise_aware")
    public = _as_public(model, hyperparameters)
    R_y = centred_bound(y_bounds, public.mean)[2]
    bound = kernel_norm_bound(public, kernel_norm)
    c = resolve_ratio(ratio, R_y, bound.R_k)
    Delta = l2_sensitivity(R_y, bound.R_k, c)
    M = public.n_inducing
    depth = _planned_depth(n_records, chunk_size, M)
    margin = 0.0 if depth is None else regression_margin(n_records, depth, R_y, bound.R_k, c, M)
    # the scale of the statistics, as the release sets it
    floor = None if noise_var_floor is None else check_positive(noise_var_floor, "noise_var_floor")
    scale = 1.0 / (floor if floor is not None else public.noise_var)
    # as the release: calibration, arithmetic check and λ
    noise = statistics_noise(
        epsilon, delta, Delta + margin, calibration, n_outputs=1, n_inducing=M, secure=secure,
        scale=scale, ratio=c, rho=rho,
    )  # fmt: skip
    event = _statistics_event(
        noise.sigma_a, Delta + margin, noise.plan, "noise-aware DP sparse GP (Honkela)"
    )
    check_inducing_covariance(public)  # as the release (stop-46 audit)
    return NoiseAwarePlan(
        epsilon, delta, Delta, noise.sigma_a, noise.sigma_b, noise.lam, R_y, bound.R_k, event, c,
        margin,
    )  # fmt: skip


def _statistics_event(sigma_a: float, Delta: float, dplan: Any, label: str) -> PrivacyEvent:
    """The event of the perturbed statistics, as ``noise_aware`` releases charge it."""
    if dplan is None:
        return GaussianEvent(noise_multiplier=sigma_a / Delta, label=label)
    return dplan.event(1, label)


@dataclass(frozen=True)
class DirichletPlan(_LedgerEpsilon):
    """The noise of a Dirichlet GP classification release (Honkela §5), before any data."""

    epsilon: float
    delta: float
    n_classes: int
    l2_sensitivity: float  # joint over all classes
    sigma_a: float
    sigma_b: float
    lam: float
    prior_mean: float
    R_k: float
    event: PrivacyEvent
    ratio_c: float = 1.0  # c = sigma_a / sigma_b as the release uses it ("auto": R_y / R_k)
    summation_margin: float = 0.0  # 2η charged on top of l2_sensitivity (0 without n_records)

    @property
    def charged_sensitivity(self) -> float:
        """``l2_sensitivity + summation_margin``: what σ_a is calibrated to."""
        return self.l2_sensitivity + self.summation_margin


def dirichlet(
    model: Any,
    *,
    epsilon: float,
    delta: float,
    n_classes: int | None = None,
    alpha_epsilon: float | None = None,
    prior_mean: float | None = None,
    hyperparameters: dict[str, Any] | None = None,
    ratio: float | Literal["auto"] = 1.0,
    kernel_norm: Any = "auto",
    rho: float = 0.01,
    calibration: Literal["analytic", "classic"] = "analytic",
    secure: bool = True,
    n_records: int | None = None,
    chunk_size: int | None = None,
) -> DirichletPlan:
    """Plan a ``dirichlet_release``: public ``Z``, kernel, number of classes and ``α_ε`` only.

    Defaults follow the release: a ``dirichlet_gp_classification`` model supplies
    ``n_classes``, ``alpha_epsilon`` and the prior mean.  With ``n_records`` (and
    ``chunk_size``) the plan includes the summation margin ``2η`` and equals the release's
    ``σ_a`` (for every chunking of the data); without it the plan is at ``Δ`` alone, slightly
    below the release's charge (``noise_aware``; ``docs/noise_aware.md`` §1).
    """
    from pm_dpgp.mechanisms.full.dirichlet import dirichlet_calibration, dirichlet_settings
    from pm_dpgp.mechanisms.full.noise_aware import _as_public, check_rho

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    public = _as_public(model, hyperparameters)
    C, alpha_epsilon, prior_mean = dirichlet_settings(model, n_classes, alpha_epsilon, prior_mean)
    rho = check_rho(rho)  # before anything is spent or drawn
    cal = dirichlet_calibration(
        public,
        C,
        alpha_epsilon=alpha_epsilon,
        prior_mean=prior_mean,
        kernel_norm=kernel_norm,
        ratio=ratio,  # resolve_ratio checks it ("auto" or a positive number)
        rho=rho,
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
        secure=secure,
        n_records=n_records,
        summation_depth=_planned_depth(n_records, chunk_size, public.n_inducing),
    )
    label = f"noise-aware DP Dirichlet GP classification, {C} classes (Honkela §5)"
    event = _statistics_event(cal.sigma_a, cal.charged, cal.plan, label)
    return DirichletPlan(
        epsilon,
        delta,
        C,
        cal.Delta,
        cal.sigma_a,
        cal.sigma_b,
        cal.lam,
        cal.mu,
        cal.bound.R_k,
        event,
        cal.ratio_c,
        cal.margin,
    )


# ------------------------------------------------------------------------------ sample paths
@dataclass(frozen=True)
class SamplePathPlan(PlannedCharge):
    """A public sample-path setting, its cost, and how many draws fit a target.

    ``filter_epsilon`` and ``fits`` are for a fresh ledger; ``fits_in(ledger)`` and
    ``filter_epsilon_in(ledger)`` ask a given one (e.g. already charged) for ``n_draws`` paths.
    """

    n: int
    kernel_scale: float
    noise_sd: float
    r2: float
    M_Y: float
    prior_mean: float  # the centre of M_Y: build the model with ``mean=plan.prior_mean``
    kappa: float
    eta: float
    n_draws: int
    delta: float
    epsilon: float  # cost of ``n_draws`` draws at ``delta``, as the release reports it
    ledger_epsilon: float  # what ``Ledger(delta=delta).epsilon()`` shows after the release
    filter_epsilon: float  # what a ledger's budget must cover to accept it (privacy filter)
    target_epsilon: float | None
    max_n_draws: int | None  # the most draws that fit ``target_epsilon`` (None: no target)
    bound: SamplePathBound

    @property
    def fits(self) -> bool:
        """Whether ``n_draws`` draws fit the target (True without a target)."""
        return self.target_epsilon is None or _fits(
            self.epsilon, self.filter_epsilon, self.target_epsilon
        )

    @property
    def planned_event(self) -> PrivacyEvent:
        """The event of ``n_draws`` paths, as the release charges it."""
        return sample_path_event(self.bound, self.n_draws)

    def _release_accepts(self) -> bool:
        """The release's own check of its cost against ``epsilon=target_epsilon``."""
        target = self.target_epsilon
        return target is None or self.epsilon <= target * (1.0 + BUDGET_RTOL)


def _fits(epsilon: float, filter_epsilon: float, target: float) -> bool:
    """The release's own check and a fresh ledger with budget ``target`` both accept."""
    return epsilon <= target * (1.0 + BUDGET_RTOL) and filter_epsilon <= target * (
        1.0 + BUDGET_RTOL
    )


def _path_costs(bound: SamplePathBound, n_draws: int, delta: float) -> tuple[float, float, float]:
    """(release ε, ledger ε, filter ε) of ``n_draws`` paths on a fresh ledger at ``delta``."""
    event = bound.event(n_draws)
    ledger = Ledger(delta=delta)
    return float(event.epsilon(delta)), ledger.preview(event), ledger.preview_filter(event)


def _path_fits(bound: SamplePathBound, n_draws: int, delta: float, target: float) -> bool:
    eps, _, filt = _path_costs(bound, n_draws, delta)
    return _fits(eps, filt, target)


def sample_path(
    n: int,
    *,
    kernel_scale: float,
    y_bounds: tuple[float, float],
    delta: float,
    noise_sd: float | None = None,
    epsilon: float | None = None,
    n_draws: int = 1,
    prior_mean: float | None = None,
    kappa: float | None = None,
    cov_func: Any = None,
    domain: ArrayLike | None = None,
    eta: float = 0.0,
    kernel_class: KernelClass = "generic",
    sensitivity: Sensitivity = "coupled",
    cov_bound: CovBound = "inertia",
) -> SamplePathPlan:
    """ε of a ``sample_path_release`` setting, or the noise it needs.

    * ``noise_sd`` given: the plan's ``epsilon`` is what ``n_draws`` draws cost at ``delta``
      (and, with ``epsilon=`` as a target, ``max_n_draws`` is the most that fit);
    * ``noise_sd`` omitted, ``epsilon`` given: the smallest observation noise sd (to 1e-4
      relative, rounded up) whose ``n_draws`` draws cost at most ``epsilon``; build the model
      with ``noise_sd=plan.noise_sd`` and ``mean=plan.prior_mean`` (the builders' default mean
      is 0, the plan's the midpoint of ``y_bounds``: another mean changes ``M_Y``), release
      with the same ``eta``, ``kernel_class``, ``sensitivity`` and ``cov_bound``, and the
      release reports exactly ``plan.epsilon``; a
      ledger shows ``plan.ledger_epsilon``, and one whose budget is the target accepts it
      (its privacy filter counts ``plan.filter_epsilon``, ``docs/accounting.md``).

    Public quantities only: ``n`` (public under replace-one neighbours), the kernel scale,
    ``y_bounds`` with the model's public ``prior_mean`` (default: the midpoint, where ``M_Y``
    is the half-width), and ``kappa`` (or the public ``domain`` and ``cov_func`` to compute it
    as the release does, ``certified_kappa``: the corner bound for decreasing stationary
    kernels, 0 for any other kernel).  A given ``kappa`` is checked against that proved
    value when ``domain`` and ``cov_func`` are given too (refused above it, as the release
    refuses it); without a domain a ``kappa > 0`` is refused, as the release refuses it; with
    a domain and no ``cov_func`` it is used as is.  With ``cov_func`` and ``domain`` the plan
    also runs the release's public kernel checks (finite kernel, ``k(x, x) ≤ 1``,
    ``kernel_class``) on the domain grid, with the release's own functions and errors.
    The cost decreases as the noise grows (``docs/sample_paths.md``, monotonicity in r²), which
    the bisection relies on; the returned value is checked to fit.
    """
    n = check_count(n, "n")  # stop-32 audit: n = 0 or 2.5 got "no noise_sd meets epsilon"
    kernel_scale = check_scale(kernel_scale, "kernel_scale")
    delta = check_delta(delta)
    n_draws = check_count(n_draws, "n_draws")
    target = None if epsilon is None else check_epsilon(epsilon)
    lower, upper = check_public_bounds(y_bounds)
    centre = 0.5 * (lower + upper) if prior_mean is None else prior_mean
    M_Y = centred_bound((lower, upper), centre)[2]  # refuses a boolean or text centre
    kappa = _planned_kappa(kappa, cov_func, domain, kernel_scale, kernel_class)

    def bound_for(sd: float) -> SamplePathBound:
        return SamplePathBound(
            n=n,
            kernel_scale=kernel_scale,
            r2=sd**2 / kernel_scale**2,  # the release's r² = noise_var / kernel_scale²
            M_Y=M_Y,
            kappa=float(kappa),
            eta=eta,
            kernel_class=kernel_class,
            sensitivity=sensitivity,
            cov_bound=cov_bound,
        )

    if noise_sd is None:
        if target is None:
            raise ValueError("give noise_sd= (to get its epsilon) or epsilon= (to get noise_sd).")
        noise_sd = _noise_sd_for(bound_for, n_draws, delta, target, kernel_scale)
    noise_sd = check_positive(noise_sd, "noise_sd")
    bound = bound_for(noise_sd)
    cost, ledger_cost, filter_cost = _path_costs(bound, n_draws, delta)
    max_draws = None
    if target is not None:
        hi = paths_affordable(bound, target, delta)  # at least as tight as the event's
        lo_L, hi_L = 0, hi + 1  # lo fits (or is 0), hi does not
        while hi_L - lo_L > 1:
            mid = (lo_L + hi_L) // 2
            lo_L, hi_L = (mid, hi_L) if _path_fits(bound, mid, delta, target) else (lo_L, mid)
        max_draws = lo_L
    return SamplePathPlan(
        n=int(n),
        kernel_scale=kernel_scale,
        noise_sd=noise_sd,
        r2=bound.r2,
        M_Y=M_Y,
        prior_mean=centre,
        kappa=float(kappa),
        eta=float(eta),
        n_draws=n_draws,
        delta=delta,
        epsilon=cost,
        ledger_epsilon=ledger_cost,
        filter_epsilon=filter_cost,
        target_epsilon=target,
        max_n_draws=max_draws,
        bound=bound,
    )


def _planned_kappa(
    kappa: float | None,
    cov_func: Any,
    domain: ArrayLike | None,
    kernel_scale: float,
    kernel_class: KernelClass,
    *,
    loop: bool = False,
) -> float:
    """The κ the release (or loop) will use, after the release's own public checks, by the
    release's own functions (``pm_dpgp.mechanisms.full.sample_path``), so that the plan
    refuses what the release refuses with the same error:

    * with ``cov_func`` and ``domain``: ``_check_public_kernel`` at the domain grid (finite
      kernel, ``k(x, x) ≤ 1``, ``kernel_class``; the release also checks ``X_star``, the loop
      ``X_init`` and fixed candidates, which the plan does not know), then ``resolve_kappa``
      (the proved ``certified_kappa`` when no κ is given, else the given κ checked against
      it);
    * without a domain: for ``sample_path_release`` a given κ > 0 is refused
      (``_check_given_kappa``: private inputs are not confined), and so is a kernel not
      recognised as stationary (``require_domain_unless_stationary``);
    * with a domain and no ``cov_func``: the given κ is used as is (it cannot be checked
      without the kernel; the release checks it);
    * for the Thompson loop (``loop=True``), which always has its kernel and domain, a κ
      given without both is used as is: the loop checks it against the bound proved for its
      kernel on its domain, and may refuse a κ the plan accepted (stop-43 audit:
      ``kappa=0.5`` was planned, and refused by the loop, whose proved value on (0, 1) was
      3.7e-6); ``plan.thompson`` says so.
    """
    if domain is None or cov_func is None:
        if kappa is None:
            raise ValueError(
                "give kappa (a public lower bound of the normalised kernel, 0 is always valid) "
                "or the public domain= and cov_func= to compute it."
            )
        if loop:
            return check_kappa(kappa)
        if domain is None:  # the release's rules: κ > 0 needs the domain, and so does a
            # kernel not recognised as stationary (stop-43 audit: the plan accepted them)
            if cov_func is not None:
                # the release's rule: a recognised stationary kernel needs no domain, and is
                # refused (with or without one) unless it is a covariance by construction at
                # its public hyperparameter values.  Those are decided here for a kernel of
                # no random variable; a hyperparameter's value is given at release time only
                # (stop-44 review: a model's eta**2 * ExpQuad(ls=ell), which the release takes
                # without a domain, was refused as "not recognised as stationary", and with a
                # domain the plan cannot build a kernel of another model's variables)
                stationary = is_stationary_decreasing(cov_func)
                if (
                    stationary
                    and not depends_on_random_variables(cov_func)
                    and not kernel_structure_at(cov_func, {}).covariance
                ):
                    raise ValueError(_NOT_PROVED_COVARIANCE)
                require_domain_unless_stationary(stationary)
            return _check_given_kappa(kappa, None, kernel_scale, None, cov_func)  # type: ignore[arg-type]
        return check_kappa(kappa)
    the_box = parse_domain(domain)  # passed on as a Box: a 2 × 2 array reads two ways
    box = the_box.pairs
    # the kernel as the release and the loop compile it (gp_regression), at no data: a public
    # input is needed to build the model, the domain's lower corner; it is not used
    public_gp = gp_regression(
        box[None, :, 0], np.zeros(1), cov_func, noise_sd=1.0, mean_is_public=True
    ).public_gp_without_data()
    probes = _public_probes(np.empty((0, box.shape[0])), the_box)
    _check_public_kernel(public_gp, kernel_scale, kernel_class, probes, cov=cov_func)
    return float(resolve_kappa(kappa, public_gp, kernel_scale, the_box, cov_func))


# ------------------------------------------------------------------- DP Thompson sampling
@dataclass(frozen=True)
class ThompsonPlan:
    """The observation noise of a ``dp_thompson_sampling`` run, and how many rounds fit."""

    noise_sd: float  # pass as dp_thompson_sampling(noise_sd=...)
    r2: float
    M_Y: float
    prior_mean: float
    kappa: float
    n_init: int
    n_rounds: int
    rounds_that_fit: int  # rounds a fresh Ledger(epsilon=target, delta) accepts at noise_sd
    delta: float
    epsilon: float  # the ledger's ε after the rounds that fit
    filter_epsilon: float  # what its privacy filter counts (≤ the target)
    target_epsilon: float

    @property
    def fits(self) -> bool:
        """Whether all ``n_rounds`` rounds fit the target."""
        return self.rounds_that_fit >= self.n_rounds


#: ``plan.thompson`` plans each round's event in turn (10,000 rounds took 58 s in the stop-40
#: review); beyond this many the loop it plans (one exact GP per round on every observation
#: so far) is out of reach anyway.
MAX_PLANNED_ROUNDS = 10_000


def thompson(
    n_init: int,
    n_rounds: int,
    *,
    epsilon: float,
    delta: float,
    kernel_scale: float = 1.0,
    y_bounds: tuple[float, float] | None = None,
    prior_mean: float = 0.0,
    noise_sd: float | None = None,
    kappa: float | None = None,
    cov_func: Any = None,
    domain: ArrayLike | None = None,
    eta: float = 0.0,
    kernel_class: KernelClass = "generic",
    sensitivity: Sensitivity = "coupled",
    filter: FilterName = "auto",  # noqa: A002 - the Ledger's own argument name
) -> ThompsonPlan:
    """Plan a ``dp_thompson_sampling`` run: the observation noise sd for ``n_rounds`` rounds
    within ``epsilon``, or (with ``noise_sd=``) how many rounds fit.

    Round ``t`` releases one posterior sample path on ``n_init + t − 1`` points (Maciazek's
    bound, ``SamplePathBound`` with ``r² = noise_sd²/kernel_scale²``), so later rounds cost
    more.  The plan replays the rounds' events on a fresh ``Ledger(epsilon, delta,
    filter=filter)`` exactly as the loop charges them (``can_afford`` then ``spend``), so the
    loop run with ``noise_sd=plan.noise_sd``, the same public settings (``kernel_scale``,
    ``y_bounds``, ``prior_mean``, ``kappa`` or ``domain``/``cov_func``, ``eta``,
    ``kernel_class``, ``sensitivity``) and such a ledger completes ``plan.rounds_that_fit``
    rounds.  Without ``noise_sd``: the smallest sd (geometric bisection, 1e-4 relative,
    rounded up) whose ``n_rounds`` rounds all fit.  Public quantities only.  The loop's
    defaults apply: ``y_bounds = prior_mean ± 1``.  With ``cov_func`` and ``domain`` the
    loop's public kernel checks (finite kernel, ``k(x, x) ≤ 1``, ``kernel_class``, κ) run here
    too, with the release's own functions and errors (on the domain grid: the plan does not
    know ``X_init`` or fixed candidates).  A ``kappa`` given without ``cov_func`` and
    ``domain`` is used as is: the loop checks it against the bound proved for its kernel on
    its domain and refuses a larger one (give both to have the plan check it, or take
    ``kappa`` from such a plan).  The plan is for a fresh ledger; the rounds a ledger
    already charged accepts are not planned (``docs/accounting.md``, "What plans cannot do").
    """
    n_init = check_count(n_init, "n_init")
    n_rounds = check_count(n_rounds, "n_rounds")
    if n_rounds > MAX_PLANNED_ROUNDS:  # 10**400 rounds looped for ever (stop-40 fuzz)
        raise ValueError(
            f"n_rounds={n_rounds} is more than {MAX_PLANNED_ROUNDS} rounds: the loop conditions "
            "an exact GP on every observation (an n x n Cholesky factor per round), so such a "
            "run is not feasible; plan fewer rounds."
        )
    target = check_epsilon(epsilon)
    delta = check_delta(delta)
    kernel_scale = check_scale(kernel_scale, "kernel_scale")
    prior_mean = check_finite_number(prior_mean, "prior_mean")
    y_bounds = (prior_mean - 1.0, prior_mean + 1.0) if y_bounds is None else y_bounds
    lower, upper = check_public_bounds(y_bounds)
    M_Y = centred_bound((lower, upper), prior_mean)[2]
    # the loop's domain, in any form dp_thompson_sampling takes (pm_dpgp.domain)
    kernel_dim = getattr(cov_func, "input_dim", None)  # (0, 1) for every dimension, as the loop
    box = (
        None
        if domain is None
        else parse_domain(
            domain,
            kernel_dim if isinstance(kernel_dim, int) else None,
            strict=True,
            layout="corners",
        )
    )
    kappa = _planned_kappa(kappa, cov_func, box, kernel_scale, kernel_class, loop=True)

    def round_bound(n: int, sd: float) -> SamplePathBound:
        return SamplePathBound(
            n=n, kernel_scale=kernel_scale, r2=sd**2 / kernel_scale**2, M_Y=M_Y, kappa=kappa,
            eta=eta, kernel_class=kernel_class, sensitivity=sensitivity,
        )  # fmt: skip

    # the filter name, and whether it can hold the rounds' curve events at all, as the loop
    Ledger(target, delta, filter=filter).check_accounts_for(
        sample_path_event(round_bound(n_init, kernel_scale), 1), "the rounds' Renyi-DP curve events"
    )

    def rounds_for(sd: float) -> tuple[int, Ledger]:
        ledger = Ledger(target, delta, filter=filter)
        for t in range(n_rounds):
            event = sample_path_event(round_bound(n_init + t, sd), 1)
            if not ledger.can_afford(event):
                return t, ledger
            ledger.spend(event)
        return n_rounds, ledger

    if noise_sd is None:

        def all_fit(sd: float) -> bool:
            try:
                return rounds_for(sd)[0] == n_rounds
            except ValueError:  # no valid Rényi order: far too little noise
                return False

        noise_sd = _bisect_noise_sd(
            all_fit, kernel_scale, f"epsilon={target:g} for {n_rounds} Thompson round(s)"
        )
    noise_sd = check_positive(noise_sd, "noise_sd")
    fit, ledger = rounds_for(noise_sd)
    return ThompsonPlan(
        noise_sd=noise_sd,
        r2=noise_sd**2 / kernel_scale**2,
        M_Y=M_Y,
        prior_mean=prior_mean,
        kappa=kappa,
        n_init=n_init,
        n_rounds=n_rounds,
        rounds_that_fit=fit,
        delta=delta,
        epsilon=float(ledger.epsilon()),
        filter_epsilon=float(ledger.filter_epsilon),
        target_epsilon=target,
    )


def _noise_sd_for(
    bound_for: Any, n_draws: int, delta: float, target: float, kernel_scale: float
) -> float:
    """Smallest noise sd (geometric bisection, 1e-4 relative) whose cost fits ``target``."""

    def fits(sd: float) -> bool:
        try:
            return _path_fits(bound_for(sd), n_draws, delta, target)
        except ValueError:  # no valid Rényi order: far too little noise
            return False

    return _bisect_noise_sd(fits, kernel_scale, f"epsilon={target:g} for {n_draws} draw(s)")


def _bisect_noise_sd(fits: Any, kernel_scale: float, what: str = "the target") -> float:
    """Smallest sd with ``fits(sd)`` (geometric bisection to 1e-4 relative, rounded up); the
    cost decreases as the noise grows (``docs/sample_paths.md``, monotonicity in r²)."""
    lo, hi = kernel_scale * 1e-6, kernel_scale
    while not fits(hi):
        lo, hi = hi, hi * 4.0
        if hi > kernel_scale * 1e12:
            raise ValueError(
                f"no noise_sd up to {hi:.3g} meets {what}: the mean term does not vanish with "
                "more noise at this M_Y; narrow y_bounds, add eta, or choose a larger epsilon."
            )
    if fits(lo):
        return lo
    while hi / lo > 1.0 + 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi
