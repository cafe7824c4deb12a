"""Gaussian output perturbation of a linear function of private labels.

Both label-private mechanisms of Smith et al. (cloaking, 2018 §3; Hall et al.'s
prior-noise method, 2018 §2) release ``f̃ = f + σ · F z`` with ``z ~ N(0, I_k)``,
where ``f = C (y − μ) + μ_*`` is linear in the private outputs ``y``.  If changing
one output by at most ``d`` moves ``f`` by a vector whose Mahalanobis norm with
respect to ``F Fᵀ`` is at most ``d · s`` (``s`` = ``unit_sensitivity``), the release
is the Gaussian mechanism with L2 sensitivity ``d · s`` in the whitened space
(Hall et al. 2013, Prop. 3), so ``σ = gaussian_sigma(ε, δ, d·s)``.

This module holds the steps the mechanisms share, in the order privacy needs:
validate, clip, build the privacy event, charge the ledger (which refuses
*before* any noise is drawn), then draw.

Noise source (``pm_dpgp.mechanisms.noise``): with ``rng=None`` (default) the draw is
``offset + F·(γ ñ)``, ``ñ`` a discrete Gaussian release (OpenDP) of the rounded whitened mean
``w`` (``mean = offset + F w``), accounted as a ``ZCDPEvent``; with a
NumPy Generator it is the continuous simulation ``mean + σ F z`` and a
``GaussianEvent``, exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from pm_dpgp._validation import (
    check_clip_option,
    check_count,
    check_delta,
    check_draws_fit,
    check_epsilon,
    check_public_bounds,
    clip_to_bounds,
    private_array,
    warn_public_settings,
)
from pm_dpgp.accounting import GaussianEvent, Ledger, PrivacyEvent
from pm_dpgp.mechanisms.gaussian import _check_representable as check_representable
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
from pm_dpgp.mechanisms.noise import (
    SEED_POLICY_SECURE,
    SEED_POLICY_SIMULATION,
    SIMULATION,
    secure_plan,
    simulation_rng,
)
from pm_dpgp.mechanisms.whitening import CentredWhitening, centred_whitening
from pm_dpgp.models import PublicGP
from pm_dpgp.release import Release

#: What the label-private releases protect (``docs/privacy_model.md``).
LABEL_PRIVACY_MODEL = "label"
LABEL_RELATION = "replace-one-label, |y_i - y_i'| <= d (inputs public)"

__all__ = [
    "LABEL_PRIVACY_MODEL",
    "LABEL_RELATION",
    "LabelData",
    "prepare_labels",
    "GaussianPerturbation",
    "perturb",
    "label_release_metadata",
    "label_gaussian_release",
    "SEED_POLICY",
]


@dataclass(frozen=True)
class LabelData:
    """Private labels after clipping to the public range, with the public constants."""

    y: NDArray[np.float64]
    y_bounds: tuple[float, float]
    data_sensitivity: float  # d = upper - lower (replace-one-label neighbours)
    n_clipped: int


def prepare_labels(
    y: NDArray[np.float64],
    y_bounds: tuple[float, float],
    *,
    clip: Literal["warn"] = "warn",
    bounds_are_public: bool = False,
    n_inputs: int | None = None,
) -> LabelData:
    """Check the private outputs' shape and clip them to the public range, silently.

    Nothing here depends on the values of ``y`` (``docs/errors.md``): the range is checked
    from the arguments alone, ``clip`` must be ``"warn"`` (``"raise"`` is refused from the
    argument), and values outside the range (non-finite ones: the midpoint) are clipped
    without reporting how many.  The data sensitivity is the width of the range: neighbouring
    datasets differ in one label by at most ``d = upper − lower`` (label privacy,
    ``docs/privacy_model.md``).  ``n_clipped`` is kept for compatibility and is always 0 (never
    computed).  ``n_inputs``, if given, is the number of public input rows the labels must
    match (a shape, so the error quotes only the two counts).
    """
    check_clip_option(clip)
    y = private_array(y, "y", ndim=1)
    if n_inputs is not None and y.shape[0] != n_inputs:
        raise ValueError(
            f"the model has {n_inputs} input rows but {y.shape[0]} labels; give one label per "
            "input row (e.g. pm.set_data both containers together)."
        )
    bounds = check_public_bounds(y_bounds, name="y_bounds", bounds_are_public=bounds_are_public)
    return LabelData(clip_to_bounds(y, bounds), bounds, bounds[1] - bounds[0], 0)


def model_labels(
    model: Any,
    public: Any,
    y_bounds: tuple[float, float],
    *,
    clip: Literal["warn"] = "warn",
    bounds_are_public: bool = False,
) -> LabelData:
    """``prepare_labels`` of a model's labels as stored (``unchecked_data``), one per row of
    its public view ``public``: a non-finite label maps to the midpoint of ``y_bounds``, never
    a refusal (that would depend on one private label; ``docs/errors.md``)."""
    return prepare_labels(
        model.unchecked_data()[1],
        y_bounds,
        clip=clip,
        bounds_are_public=bounds_are_public,
        n_inputs=public.n,
    )


@dataclass(frozen=True)
class GaussianPerturbation:
    """The calibrated noise of one release and what it cost."""

    draws: NDArray[np.float64]  # (n_draws, m)
    noise_factor: NDArray[np.float64]  # (m, k): DP-noise covariance = noise_factor @ noise_factor.T
    sigma: float  # multiplier of the unit-shaped noise F z
    l2_sensitivity: float  # d · unit_sensitivity
    event: PrivacyEvent  # GaussianEvent (simulation) or ZCDPEvent (secure)
    epsilon: float
    delta: float
    calibration: str
    noise_multiplier: float  # noise std / L2 sensitivity (grid units for the secure source)
    noise: dict[str, object]  # public description of the noise source (noise_source, grid, ...)


def perturb(
    mean: NDArray[np.float64],
    shape_factor: NDArray[np.float64],
    *,
    unit_sensitivity: float,
    data_sensitivity: float,
    epsilon: float,
    delta: float,
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    label: str = "",
    offset: NDArray[np.float64] | None = None,
    whitened_mean: NDArray[np.float64] | None = None,
    whitened_rounding: float = 0.0,
) -> GaussianPerturbation:
    """Charge the ledger for ``n_draws`` Gaussian releases, then draw them.

    Parameters
    ----------
    mean:
        ``(m,)`` the exact (non-DP) released vector; it never leaves this function
        except inside the noisy draws.
    shape_factor:
        ``(m, k)`` public factor ``F`` of the noise shape ``F Fᵀ``.
    unit_sensitivity:
        ``s``: max Mahalanobis norm w.r.t. ``F Fᵀ`` of the change of ``mean`` when
        one label changes by 1.
    data_sensitivity:
        ``d``: the largest change of one label (public clipping width).
    rng:
        ``None`` (default): secure discrete Gaussian noise from OpenDP (OS entropy),
        accounted in zCDP; a Generator: the continuous simulation mode.
    offset, whitened_mean:
        public ``(m,)`` offset and private ``(k,)`` whitened mean with
        ``mean = offset + F @ whitened_mean``; required for secure noise, whose release
        depends on the private data only through ``rint(whitened_mean / γ)``.
    whitened_rounding:
        public bound ``r`` on the round-off of ``whitened_mean`` (every dataset); the
        sensitivity charged is ``d·s + 2r`` (``pm_dpgp.mechanisms.whitening``).

    Each draw is one (ε, δ)-DP Gaussian mechanism; the ledger composes the ``n_draws``
    of them.  The ledger is charged before any noise is drawn, so a refused release
    (``BudgetExceededError``) consumes no randomness.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    rng = simulation_rng(rng)
    n_draws = check_count(n_draws, "n_draws")
    check_draws_fit(n_draws, max(shape_factor.shape))
    l2 = float(data_sensitivity) * float(unit_sensitivity) + 2.0 * float(whitened_rounding)
    if not np.isfinite(l2) or l2 <= 0.0:
        raise ValueError(f"The L2 sensitivity d·s must be finite and > 0, got {l2!r}.")
    if rng is not None:
        return _simulate(
            mean,
            shape_factor,
            l2,
            epsilon,
            delta,
            calibration,
            n_draws,
            ledger,
            rng,
            label,
            None if offset is None or whitened_mean is None else (offset, whitened_mean),
        )
    if offset is None or whitened_mean is None:
        raise ValueError("secure noise needs the public offset and the whitened mean.")
    plan = secure_plan(epsilon, delta, l2, shape_factor.shape[1], calibration)
    # the simulation mode's limit on the noise sd (gaussian_sigma), here too: at 1e307 every
    # draw was non-finite, and charged (stop-43 audit)
    check_representable(plan.sigma, l2)
    event = plan.event(n_draws, label)
    noise = {**plan.metadata(), "seed_policy": SEED_POLICY_SECURE}  # built before spending
    if ledger is not None:
        ledger.spend(
            event,
            label=label,
            privacy_model=LABEL_PRIVACY_MODEL,
            neighbouring_relation=LABEL_RELATION,
        )
    draws = offset[None, :] + plan.release(whitened_mean, n_draws) @ shape_factor.T
    return GaussianPerturbation(
        draws=draws,
        noise_factor=plan.sigma * shape_factor,
        sigma=plan.sigma,
        l2_sensitivity=l2,
        event=event,
        epsilon=epsilon,
        delta=delta,
        calibration=f"zcdp ({calibration})",
        noise_multiplier=plan.noise_multiplier,
        noise=noise,
    )


def _simulate(
    mean: NDArray[np.float64],
    shape_factor: NDArray[np.float64],
    l2: float,
    epsilon: float,
    delta: float,
    calibration: Literal["analytic", "classic"],
    n_draws: int,
    ledger: Ledger | None,
    rng: np.random.Generator,
    label: str,
    split: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
) -> GaussianPerturbation:
    """The simulation mode: continuous float noise from ``rng``, a ``GaussianEvent``.

    With ``split = (offset, w)`` (``mean = offset + F w``) the noise is added to the whitened
    mean first and the public offset last, ``offset + F (w + σ z)``: the same law, but the
    offset's rounding is then post-processing of the noisy value.  Adding the noise to
    ``offset + F w`` instead rounds the private mean at the offset's magnitude before any
    noise; with ``|offset|`` about ``2⁵²`` times the sensitivity that step alone exceeded
    it 16-fold (stop-30 audit: exact hockey-stick δ 0.94 where 1e-5 was charged).
    """
    sigma = gaussian_sigma(epsilon, delta, l2, method=calibration)
    event = GaussianEvent(noise_multiplier=sigma / l2, count=n_draws, label=label)
    if ledger is not None:  # refuses a Generator state already used on this ledger
        ledger.spend(
            event,
            label=label,
            privacy_model=LABEL_PRIVACY_MODEL,
            neighbouring_relation=LABEL_RELATION,
            rng=rng,
        )
    z = rng.standard_normal((n_draws, shape_factor.shape[1]))
    if split is None:
        draws = mean[None, :] + sigma * (z @ shape_factor.T)
    else:
        offset, whitened_mean = split
        draws = offset[None, :] + (whitened_mean[None, :] + sigma * z) @ shape_factor.T
    return GaussianPerturbation(
        draws=draws,
        noise_factor=sigma * shape_factor,
        sigma=sigma,
        l2_sensitivity=l2,
        event=event,
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
        noise_multiplier=event.noise_multiplier,
        noise={"noise_source": SIMULATION, "seed_policy": SEED_POLICY_SIMULATION},
    )


def prior_sd_of_y(public_gp: PublicGP, points: NDArray[np.float64]) -> float:
    """``sqrt(max_x k(x, x) + σ_n²)`` over the public ``points``: the model's prior sd of y.

    Public (public hyperparameters and public points); the scale against which
    ``warn_public_settings`` judges a public range.
    """
    return float(np.sqrt(np.max(public_gp.kernel_diag(points)) + public_gp.noise_var))


#: Kept for existing imports: the policy of the simulation mode.
SEED_POLICY = SEED_POLICY_SIMULATION


def release_guarantee(result: GaussianPerturbation) -> dict[str, float]:
    """The guarantee of a label release, under the keys every release type uses.

    ``epsilon``/``delta`` are the (ε, δ) of the whole release (all ``n_draws`` draws: its
    charged event converted at the per-draw δ), the keys under which full-privacy releases
    record theirs; ``epsilon_per_draw``/``delta_per_draw`` are the calibration of one draw
    and ``epsilon_total`` is ``epsilon`` (kept for existing readers; ``docs/workflow.md``,
    "Privacy metadata").
    """
    total = float(result.event.epsilon(result.delta))
    return {
        "epsilon": total,
        "delta": float(result.delta),
        "epsilon_per_draw": float(result.epsilon),
        "delta_per_draw": float(result.delta),
        "epsilon_total": total,
    }


def label_release_metadata(
    public_gp: PublicGP, labels: LabelData, result: GaussianPerturbation, **extra: object
) -> dict[str, object]:
    """Privacy metadata shared by the label-private Gaussian releases
    (``docs/privacy_model.md``)."""
    metadata: dict[str, object] = {
        "privacy_model": LABEL_PRIVACY_MODEL,
        "neighbouring_relation": LABEL_RELATION,
        **release_guarantee(result),
        "calibration": result.calibration,
        "l2_sensitivity": result.l2_sensitivity,
        "data_sensitivity": labels.data_sensitivity,
        "clipping_bounds": list(labels.y_bounds),
        "noise_multiplier": result.noise_multiplier,
        "kernel": public_gp.description,
        "hyperparameters": public_gp.hyperparameters,
        "hyperparameter_source": public_gp.hyperparameter_source,
        "noise_var": public_gp.noise_var,
        "prior_mean": public_gp.mean,
        "privacy_event": result.event.to_metadata(),
        **result.noise,
    }
    metadata.update(extra)
    return metadata


def charged_unit_sensitivity(
    unit_sensitivity: float, data_sensitivity: float, whitening: CentredWhitening
) -> float:
    """``max(s, column sensitivity of W / d)``: the unit sensitivity a label release charges."""
    return max(float(unit_sensitivity), whitening.column_sensitivity / data_sensitivity)


def charged_l2_sensitivity(
    unit_sensitivity: float, data_sensitivity: float, whitening: CentredWhitening
) -> float:
    """``d·s + 2r``: the L2 sensitivity ``perturb`` charges (its round-off ``r`` included)."""
    s = charged_unit_sensitivity(unit_sensitivity, data_sensitivity, whitening)
    return float(data_sensitivity) * float(s) + 2.0 * float(whitening.rounding)


def planned_l2_sensitivity(
    unit_sensitivity: float,
    W: NDArray[np.float64],
    y_bounds: tuple[float, float],
    *,
    shape_factor: NDArray[np.float64] | None = None,
    prior_mean: float = 0.0,
) -> float:
    """``charged_l2_sensitivity`` before any label is read (plans, public parts).

    The whitening's column sensitivity and round-off depend on the public ``W`` and
    ``y_bounds`` only, never on y, so they are evaluated at the bounds' midpoint.  With the
    release's ``shape_factor`` F and ``prior_mean`` μ, the public offset ``μ + F (c − μ) W 1``
    of that same whitening is checked too (``check_public_offset``), so that a plan refuses
    what its release refuses.
    """
    lower, upper = float(y_bounds[0]), float(y_bounds[1])
    mid = np.full(W.shape[1], 0.5 * (lower + upper))
    public_part = centred_whitening(W, mid, y_bounds, prior_mean)
    if shape_factor is not None:
        check_public_offset(prior_mean + shape_factor @ public_part.public, y_bounds, prior_mean)
    return charged_l2_sensitivity(unit_sensitivity, upper - lower, public_part)


def check_public_offset(
    offset: NDArray[np.float64], y_bounds: tuple[float, float], prior_mean: float
) -> None:
    """Refuse a non-finite public offset ``μ + F (c − μ) W 1`` before anything is spent.

    The offset depends on the public ``F``, ``W``, bounds and prior mean only.  When it
    overflows (labels near +1.7e308 with the prior mean near −1.7e308: ``c − μ`` is ``inf``)
    every draw is ``inf`` or NaN whatever the noise; before stop 44 the release was charged
    and returned them (``tests/test_audit_stop44_label_noise.py``).
    """
    if not np.all(np.isfinite(offset)):
        raise ValueError(
            f"the release's public offset mu + F (c - mu) W 1 (prior mean {prior_mean!r}, "
            f"y_bounds {tuple(y_bounds)!r}) is not finite in float64: the prior mean is far "
            "too far from the bounds; rescale the outputs or use a prior mean inside "
            "y_bounds. Nothing was spent or drawn."
        )


def label_gaussian_release(
    mechanism: str,
    public_gp: PublicGP,
    labels: LabelData,
    shape_factor: NDArray[np.float64],
    unit_sensitivity: float,
    *,
    epsilon: float,
    delta: float,
    calibration: Literal["analytic", "classic"] = "analytic",
    n_draws: int = 1,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    label: str = "",
    X_star: NDArray[np.float64],
    whitening: CentredWhitening,
    x_star_rows: Any = None,
    **extra_metadata: object,
) -> Release:
    """``perturb`` the clipped-label mean and wrap the draws as a ``Release``
    (``x_star_rows``: the row index of a pandas ``X_star``, ``Release.x_star_rows``).

    ``whitening`` (``centred_whitening``) gives the mean
    as ``μ + F (public + private)`` with ``F = shape_factor``: the noise is added to the private
    part only, the public part afterwards (post-processing), and the sensitivity charged is
    ``max(d·s, column sensitivity of W) + 2 r`` (its round-off ``r`` included).  The data
    sensitivity is ``labels.data_sensitivity``; the metadata is ``label_release_metadata``
    plus ``extra_metadata``.  Absurd but valid settings
    (δ > 1/n, ε above ``EPSILON_WARN_THRESHOLD``, a public range
    wider than ``WIDE_RANGE_FACTOR`` prior sd of y at ``X_star``)
    get a ``PrivacyWarning`` before anything is spent or drawn;
    all of these are public (the inputs, hence n, are public under label privacy).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    warn_public_settings(
        epsilon=epsilon,
        delta=delta,
        n_records=public_gp.n,
        range_width=labels.data_sensitivity,
        prior_sd=prior_sd_of_y(public_gp, X_star),
    )
    d = labels.data_sensitivity
    offset = public_gp.mean + shape_factor @ whitening.public
    check_public_offset(offset, labels.y_bounds, public_gp.mean)
    unit_sensitivity = charged_unit_sensitivity(unit_sensitivity, d, whitening)
    # the private mean μ + F W (y − c): no floating-point error state may depend on the labels
    # (stop-48 review: y = (1e-310, 0, …, 0) made W (y − c) subnormal and this product
    # underflow, FloatingPointError under np.seterr(all="raise") before the spend, while the
    # neighbour y = 0 was released); the draws are built from the whitened mean (``perturb``)
    with np.errstate(under="ignore"):
        private_mean = offset + shape_factor @ whitening.private
    result = perturb(
        private_mean,
        shape_factor,
        unit_sensitivity=unit_sensitivity,
        data_sensitivity=labels.data_sensitivity,
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
        n_draws=n_draws,
        ledger=ledger,
        rng=rng,
        label=label,
        offset=offset,
        whitened_mean=whitening.private,
        whitened_rounding=whitening.rounding,
    )
    return Release(
        mechanism=mechanism,
        draws=result.draws,
        X_star=X_star,
        noise_factor=result.noise_factor,
        metadata=label_release_metadata(public_gp, labels, result, **extra_metadata),
        x_star_rows=x_star_rows,
    )
