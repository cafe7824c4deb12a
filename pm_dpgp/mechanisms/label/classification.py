r"""DP binary GP classification: the one-step cloaked Laplace release (Smith et al. 2021, §4).

Label privacy: the inputs ``X`` are public, the labels ``t_i ∈ {0, 1}`` private, neighbours
differ in one label (``|t_i − t′_i| ≤ 1``, so ``d = 1``).  The latent function has a GP prior
``f ~ GP(μ, K)`` and the logistic likelihood.

**The mechanism.**  One Newton step of the Laplace approximation (Rasmussen & Williams 2006,
eq. 3.18) from a PUBLIC linearisation point ``f₀`` (default: the prior mean ``μ·1``), followed
by the predictive mean at the public test inputs (R&W Alg. 3.2, ``k*ᵀ K⁻¹ (f₁ − μ)`` as in
Smith et al. 2021, §4):

    f̄* = μ + C* (W₀ (f₀ − μ) − π₀) + C* t,        C* = K*f (I + W₀ K)⁻¹,

with ``π₀ = σ(f₀)`` and ``W₀ = diag(π₀ (1 − π₀))``.  Because ``f₀`` is public, so are ``W₀``,
``π₀``, ``C*`` and the first two terms; only ``C* t`` depends on the labels, linearly.  One
label flip moves ``f̄*`` by ``± c_j`` (column ``j`` of ``C*``), so the cloaking noise covariance
``M`` of ``pm_dpgp.mechanisms.label.cloaking.solve_noise_covariance`` and the Gaussian
calibration for the whitened L2 sensitivity ``1 · sqrt(max_j c_jᵀ M⁺ c_j)`` make the release
(ε, δ)-DP (Smith et al. 2018 §3; Hall et al. 2013, Prop. 3), exactly as for regression.  At
``X* = X`` the released vector is the one-step ``f̂`` itself and ``C* = (K⁻¹ + W₀)⁻¹``, which is
``2 C`` with the paper's ``C = ½ (K⁻¹ + W)⁻¹`` (eq. 11) acting on labels ``y ∈ {−1, 1}``
(``d = 2``): the same mechanism.

**What the proof needs.**  The linearisation point must not depend on the private labels.  The
paper runs one step from ``f̂ = 0`` (its §6.5; ``f₀ = μ·1`` here); a step from the *non-private*
mode, or from any iterate computed from the labels without noise, would make ``W`` and ``π``
functions of ``t`` and is not covered.  Further steps are allowed when each starts from a
*released* ``f̂`` (``X* = X``, then ``f0=release.draws[0]``): each step is one more charge on the
ledger (adaptive composition).  The paper found one step best (§6.5, §6.6).

**Sparse (SoR) variant** (§4.1): ``K`` replaced by ``K_NM K_MM⁻¹ K_MN`` with public inducing
inputs (given, or k-means on the public ``X``), ``C* = K*M (K_MM + K_MN W₀ K_NM)⁻¹ K_MN`` (rank
≤ M; ``pm_dpgp.gp.laplace.sor_one_step_matrix``).

**Class probabilities** are post-processing: ``class_probabilities`` maps each released
latent vector through the probit approximation with the public latent variance (computed at
``W₀``), optionally widened by the public DP-noise variance.
"""

from __future__ import annotations

import numbers
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from pm_dpgp._progress import progress_bar
from pm_dpgp._validation import (
    check_delta,
    check_epsilon,
    check_finite_array,
    check_flag,
    public_real_array,
    row_labels,
    warn_public_settings,
)
from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.laplace import (
    laplace_linearisation,
    one_step_matrix,
    probit_averaged_probability,
    sor_one_step_matrix,
)
from pm_dpgp.mechanisms.label.cloaking_release import cloaking_parts
from pm_dpgp.mechanisms.label.output_perturbation import (
    LABEL_PRIVACY_MODEL,
    charged_unit_sensitivity,
    model_labels,
    perturb,
    release_guarantee,
)
from pm_dpgp.mechanisms.whitening import centred_whitening
from pm_dpgp.models._common import _as_2d_inputs, check_input_columns, input_columns_record
from pm_dpgp.models.classification import GPClassification, PublicLatentGP, binary_labels
from pm_dpgp.models.fitc import kmeans_public_inducing
from pm_dpgp.release import Release

__all__ = ["LABEL_BOUNDS", "class_probabilities", "classification_release", "one_step_cloaking"]

#: Labels are clipped (silently) to this public range; one flip changes a label by d = 1.
LABEL_BOUNDS = (0.0, 1.0)
CLASSIFICATION_LABEL = "one-step Laplace GP classification (Smith et al. 2021 §4)"
CLASSIFICATION_RELATION = "replace-one-label, t_i in [0, 1] (inputs public)"


def _linearisation_point(f0: ArrayLike | None, public: PublicLatentGP) -> NDArray[np.float64]:
    if f0 is None:
        return np.full(public.n, public.mean)
    f0_arr = public_real_array(f0, "f0")  # True was f0 = 1 (stop-40 fuzz)
    if f0_arr.ndim == 0:
        f0_arr = np.full(public.n, float(f0_arr))
    f0_arr = check_finite_array(f0_arr, "f0", ndim=1)
    if f0_arr.shape[0] != public.n:
        raise ValueError(
            f"f0 must have one entry per training input ({public.n}), got {f0_arr.shape[0]}."
        )
    return f0_arr


def _inducing(
    inducing_points: ArrayLike | int | None, public: PublicLatentGP, seed: int
) -> NDArray[np.float64] | None:
    """The SoR inducing inputs: none, k-means centres of the (public) training inputs, or
    the given array; anything else is refused with a clear message before any spend."""
    if inducing_points is None:
        return None
    if isinstance(inducing_points, (bool, np.bool_)) or (
        isinstance(inducing_points, numbers.Real)
        and not isinstance(inducing_points, numbers.Integral)
    ):
        raise ValueError(
            "inducing_points must be None (exact), a positive integer M (k-means centres of "
            "the public training inputs) or an (M, d) array of public inputs, got "
            f"{inducing_points!r}."
        )
    if isinstance(inducing_points, numbers.Integral):
        # k-means on the training inputs, public under label privacy (Smith et al. 2021,
        # §4.1), as for FITC: SciPy's kmeans2 from 10 seeded k-means++ starts, coinciding
        # centres refused (stop-37 audit: a duplicated Z went through with a jitter)
        return kmeans_public_inducing(public.X, int(inducing_points), seed=seed)
    # read by position: a DataFrame in another column order than the model's inputs put the
    # inducing inputs elsewhere, silently (stop-47 audit)
    check_input_columns(inducing_points, public, "inducing_points")
    return _as_2d_inputs(inducing_points, "inducing_points", public.input_dim)


def one_step_cloaking(
    public: PublicLatentGP,
    X_star: ArrayLike,
    *,
    f0: ArrayLike | None = None,
    inducing_points: ArrayLike | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], float]:
    """Public parts of the one-step release: ``(C*, offset, latent_var, jitter)``.

    ``offset = μ + C* (W₀(f₀ − μ) − π₀)``, so the non-private one-step latent mean is
    ``offset + C* t``.  Everything returned depends on public quantities only.
    """
    Xs = _as_2d_inputs(X_star, "X_star", public.input_dim)
    f0_arr = _linearisation_point(f0, public)
    sqrt_w, b_public = laplace_linearisation(f0_arr, public.mean)
    jitter = 0.0
    if inducing_points is None:
        C, var = one_step_matrix(
            public.K, public.kernel(Xs, public.X), public.kernel_diag(Xs), sqrt_w
        )
    else:
        Z = _as_2d_inputs(inducing_points, "inducing_points", public.input_dim)
        C, var, jitter = sor_one_step_matrix(
            public.kernel(Z), public.kernel(Z, public.X), public.kernel(Z, Xs), sqrt_w
        )
    offset = public.mean + C @ b_public
    if not np.all(np.isfinite(offset)):
        # public: f₀ = 1e308 with μ = −1e308 gave W₀(f₀ − μ) = 0·inf = NaN, and a charged
        # release of NaN draws (stop-45 audit)
        raise ValueError(
            "the public part of the one-step release, mu + C*(W0 (f0 - mu) - pi0), is not "
            "finite in float64: the linearisation point f0 and the prior mean are too far "
            "apart (or too large); choose a moderate f0. Nothing was spent or drawn."
        )
    return C, offset, var, jitter


def public_one_step(
    gpc: GPClassification,
    X_star: ArrayLike,
    hyperparameters: dict[str, float] | None,
    f0: ArrayLike | None,
    inducing_points: ArrayLike | int | None,
    kmeans_seed: int,
) -> tuple[
    PublicLatentGP,
    NDArray[np.float64],
    NDArray[np.float64] | None,
    tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], float],
]:
    """``(public GP, X*, Z, one_step_cloaking(...))`` of a classification model: no label read.

    Shared by ``classification_release`` and ``pm_dpgp.plan.classification``.
    """
    if not isinstance(gpc, GPClassification):
        raise TypeError(
            f"gpc must come from pm_dpgp.models.gp_classification, got {type(gpc).__name__}."
        )
    public = gpc.public_gp(hyperparameters)
    Xs = _as_2d_inputs(X_star, "X_star", public.input_dim)
    Z = _inducing(inducing_points, public, kmeans_seed)
    return public, Xs, Z, one_step_cloaking(public, Xs, f0=f0, inducing_points=Z)


def classification_release(
    gpc: GPClassification,
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
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    tol: float = 1e-9,
    rank_tol: float | Literal["auto"] = "auto",
    progressbar: bool = False,
    design: Literal["logdet", "trace"] = "logdet",
) -> Release:
    """(ε, δ)-DP one-step Laplace GP classification at public ``X_star`` (Smith et al. 2021, §4).

    Parameters
    ----------
    gpc:
        from ``pm_dpgp.models.gp_classification`` (inputs public, labels private).
    X_star:
        public test inputs; ``X_star = gpc.X`` releases the one-step ``f̂`` (paper eq. 10–11).
    epsilon, delta:
        guarantee of each draw.
    hyperparameters:
        public values for hyperparameters with priors.
    f0:
        PUBLIC linearisation point (scalar or ``(n,)``), default the prior mean.  Never the
        non-private mode; a previous release at ``X* = X`` is allowed (module docstring).
    inducing_points:
        ``None`` (exact), an ``(M, d)`` array of public inducing inputs, or an integer ``M``
        for k-means centres of the public training inputs: the SoR variant (§4.1).  The
        centres are found as for FITC (``pm_dpgp.models.fitc.kmeans_public_inducing``:
        SciPy's ``kmeans2`` from 10 k-means++ starts seeded by ``kmeans_seed``, an integer;
        coinciding centres, i.e. fewer distinct inputs than ``M``, are refused) and recorded
        in the metadata with ``n_inducing``, ``inducing_method`` and the seed.
    calibration, n_draws, ledger, rng, tol, rank_tol, progressbar, design:
        as for ``pm_dpgp.mechanisms.cloaked_release``; ``rng=None`` is the secure
        (OpenDP discrete Gaussian) noise, a Generator the simulation mode.

    Returns
    -------
    Release
        DP latent values at ``X_star`` (``variable_name="f_dp"``); its metadata holds the
        public latent variance (``latent_var``) used by ``class_probabilities``.
    """
    check_input_columns(X_star, gpc)  # a DataFrame in another column order
    x_star_rows = row_labels(X_star)  # a hold-out Series must match them (stop 42)
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    public, Xs, Z, (C, offset, latent_var, jitter) = public_one_step(
        gpc, X_star, hyperparameters, f0, inducing_points, kmeans_seed
    )
    labels = model_labels(gpc, public, LABEL_BOUNDS, bounds_are_public=True)
    t = binary_labels(labels.y)  # the 0/1 labels of the PyMC model and of laplace (stop 32)
    with progress_bar(2, "Classification release", enabled=progressbar) as bar:
        parts = cloaking_parts(
            C, LABEL_BOUNDS, tol=tol, rank_tol=rank_tol, design=design, privacy=(epsilon, delta)
        )
        noise, F, cut = parts.noise, parts.shape_factor, parts.cut
        assert cut is not None  # privacy was given
        bar.advance("noise covariance solved")
        # whitened mean w = L_k⁻¹ U_kᵀ C* t, centred at ½ with its round-off bounded (whitening.py)
        whitening = centred_whitening(parts.W, t, LABEL_BOUNDS, 0.0)
        warn_public_settings(epsilon=epsilon, delta=delta, n_records=public.n)
        offset = offset + F @ whitening.public
        unit = charged_unit_sensitivity(parts.unit_sensitivity, 1.0, whitening)
        label = CLASSIFICATION_LABEL
        result = perturb(
            offset + F @ whitening.private,
            F,
            unit_sensitivity=unit,
            data_sensitivity=1.0,
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
        bar.advance("noise drawn")
    metadata: dict[str, object] = {
        "input_columns": input_columns_record(gpc),  # a DataFrame's column names, or None
        "privacy_model": LABEL_PRIVACY_MODEL,
        "neighbouring_relation": CLASSIFICATION_RELATION,
        **release_guarantee(result),
        "calibration": result.calibration,
        "l2_sensitivity": result.l2_sensitivity,
        "data_sensitivity": 1.0,
        "clipping_bounds": list(LABEL_BOUNDS),
        "noise_multiplier": result.noise_multiplier,
        "kernel": public.description,
        "hyperparameters": public.hyperparameters,
        "hyperparameter_source": public.hyperparameter_source,
        "noise_var": None,  # Bernoulli likelihood: no observation-noise variance (stop 47)
        "prior_mean": public.mean,
        "likelihood": "bernoulli-logit",
        "newton_steps": 1,
        "linearisation_point": "prior mean" if f0 is None else "given (public)",
        # the given point itself (public), so that anyone can recompute C* and the offset
        "f0": None if f0 is None else _linearisation_point(f0, public).tolist(),
        "approximation": "exact" if Z is None else "SoR",
        # JSON values, as the Release docstring promises (an ndarray and np.int64 seed broke
        # json.dumps(release.metadata); stop-40 fuzz)
        # "inducing_inputs", as in FITC and noise-aware releases ("inducing_points" before
        # stop 41, after the argument's name)
        "inducing_inputs": None if Z is None else np.asarray(Z, dtype=np.float64).tolist(),
        "n_inducing": None if Z is None else int(Z.shape[0]),
        "inducing_method": None
        if Z is None
        else (
            "kmeans2 on the public inputs (10 k-means++ starts)"
            if isinstance(inducing_points, numbers.Integral)
            else "given"
        ),
        "kmeans_seed": int(kmeans_seed) if isinstance(inducing_points, numbers.Integral) else None,
        "kmm_jitter": jitter,
        "latent_var": np.asarray(latent_var, dtype=np.float64).tolist(),  # JSON-serialisable
        "max_mahalanobis": noise.max_mahalanobis,
        "noise_rank": noise.rank,
        "rank_tol": noise.rank_tol,
        "rank_rule": cut.rule,
        "truncation_bias_ratio": cut.bias_ratio,
        "solver_gap_bound": noise.gap_bound,
        "solver_converged": bool(noise.converged),
        "noise_design": noise.design,
        "privacy_event": result.event.to_metadata(),
        **result.noise,
    }
    # identity only, as every other label release: plot_dp_release drew the training labels
    # as the "public hold-out set" (stop-46 review)
    return Release(
        mechanism="laplace_classification_cloaking",
        draws=result.draws,
        X_star=Xs,
        noise_factor=result.noise_factor,
        metadata=metadata,
        x_star_rows=x_star_rows,
    ).remember_training(gpc)


def class_probabilities(
    release: Release, *, average: bool = True, include_dp_noise: bool = False
) -> NDArray[np.float64]:
    """Class-1 probabilities ``(n_draws, m)`` from a classification release (post-processing).

    ``average=False``: ``σ(f̃*)``.  ``average=True``: the probit approximation of
    ``E[σ(f*)]`` with the public latent variance of the release (R&W eq. 3.25), plus the public
    DP-noise variance when ``include_dp_noise`` (the paper's suggested treatment, §7).  Every
    input is DP or public, so the result is as private as the release.  Values lie in
    ``[0, 1]`` (a logistic function of finite numbers).
    """
    if release.mechanism != "laplace_classification_cloaking":
        raise ValueError(f"expected a classification release, got {release.mechanism!r}.")
    # both switches as bools: average="False" was read by truthiness as True (stop-43 audit)
    average = check_flag(average, "average")
    include_dp_noise = check_flag(include_dp_noise, "include_dp_noise")
    if not average:
        return expit(release.draws)
    var = np.asarray(release.metadata["latent_var"], dtype=np.float64)
    if include_dp_noise:
        var = var + release.noise_sd**2
    return probit_averaged_probability(release.draws, var[None, :])
