r"""DP Dirichlet-based GP classification with inputs and labels private (Honkela 2024, §5).

Milios, Camoriano, Michiardi, Rosasco & Filippone (2018, "Dirichlet-based Gaussian processes
for large-scale calibrated classification", NeurIPS, §4) turn a label ``lᵢ ∈ {0, …, C−1}``
into ``C`` regression targets with heteroscedastic Gaussian noise: for class ``c``

.. math:: \alpha_{ic} = 1\{l_i = c\} + \alpha_\varepsilon,\quad
          \tilde\sigma^2_{ic} = \log(1/\alpha_{ic} + 1),\quad
          \tilde y_{ic} = \log\alpha_{ic} - \tilde\sigma^2_{ic}/2

(Honkela eq. 21, whose ``α₁`` in ``σ̃²`` is a typo for ``αᵢ``).  The transformation is public
and point-wise, so each class is a heteroscedastic sparse-GP regression (App. D): with
``σ²_in = log(1/(1+α_ε) + 1)`` (the smallest noise variance), scale ``s = 1/σ²_in`` and
weights ``ω_in = 1``, ``ω_out = σ²_in/σ²_out``, class ``c`` has statistics
``A_c = Σ ω_ic r_ic kᵢ`` and ``B_c = Σ ω_ic kᵢkᵢᵀ`` with ``r_ic = ỹ_ic − μ`` (``μ`` a public
prior mean).

**Privacy accounting.**  Replacing one record ``(x, l)`` changes the statistics of *every*
class.  All ``C`` statistics are released by one Gaussian mechanism on their concatenation
(whitened as in ``noise_aware``), whose L2 sensitivity is computed
jointly: the inner product ``t = ⟨k, k'⟩`` is common to all classes, and the per-class values
``(ω r, ω)`` of the two records are known up to which classes are ``l`` and ``l'``, so
``Δ² = max_{same/different label} max_t Σ_c (…)``
(``worst_case_sensitivity``).  One
``GaussianEvent`` with multiplier ``σ_a/Δ`` is exactly the
Gaussian-DP composition of the per-class releases (``μ = Δ/σ_a``), and the joint ``Δ`` is never
larger than ``√C`` times the per-class sensitivity (what one event per class would charge),
because the worst case cannot occur in all classes at once.

Class probabilities (post-processing, eq. 17 per class):
``p_c(x) = E[exp f_c / Σ_c' exp f_c']`` by Monte Carlo (``method="mc"``, as Milios et al.) or
the log-normal moment approximation ``∝ exp(μ_c + v_c/2)`` (``method="moment"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._progress import progress_bar
from pm_dpgp._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_flag,
    check_rng,
    real_or_nan,
    warn_public_settings,
)
from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.sparse import sufficient_statistics
from pm_dpgp.mechanisms.full.noise_aware import (
    KernelNorm,
    SparseQuRelease,
    _account_draw_release,
    _as_public,
    _default_data,
    _inputs_chunk,
    check_inducing_covariance,
    check_rho,
    kernel_norm_bound,
    l2_sensitivity,
    product_factor_bound,
    resolve_ratio,
    statistics_noise,
    summation_margin,
    worst_case_sensitivity,
)
from pm_dpgp.mechanisms.noise import DiscreteGaussianPlan, simulation_rng
from pm_dpgp.models._common import check_input_columns, input_columns_record
from pm_dpgp.models.sparse import (
    DirichletGPClassification,
    DirichletTargets,
    PublicSparseGP,
    SparseGPRegression,
    check_n_classes,
    dirichlet_targets,
    sanitise_labels,
)

__all__ = [
    "DirichletCalibration",
    "DirichletRelease",
    "DirichletTargets",
    "dirichlet_calibration",
    "dirichlet_margin",
    "dirichlet_record_norm",
    "dirichlet_release",
    "dirichlet_settings",
    "dirichlet_sensitivity",
    "dirichlet_targets",
]


def dirichlet_sensitivity(
    n_classes: int,
    targets: DirichletTargets,
    prior_mean: float,
    R_k: float,
    ratio: float = 1.0,
    *,
    nonnegative_kernel: bool = False,
) -> float:
    r"""Joint L2 sensitivity of all classes' whitened ``(A_c, c B̂_c)`` under replace-one.

    Records contribute ``a = ω r``, ``w = ω`` per class (``ω_in = 1``,
    ``ω_out = σ²_in/σ²_out``, ``r = ỹ − μ``).  Two cases: same label (``l = l'``, only ``x``
    changes) and different labels; ``Δ`` is the larger
    ``worst_case_sensitivity`` (``t ≥ 0`` when the kernel
    is non-negative).
    """
    C = check_n_classes(n_classes)
    w_in, w_out = 1.0, targets.var_in / targets.var_out
    a_in = w_in * (targets.y_in - prior_mean)
    a_out = w_out * (targets.y_out - prior_mean)
    inn, out = (a_in, w_in), (a_out, w_out)
    same = np.array([[*inn, *inn]] + [[*out, *out]] * (C - 1))
    diff = np.array([[*inn, *out], [*out, *inn]] + [[*out, *out]] * (C - 2))
    t_min = 0.0 if check_flag(nonnegative_kernel, "nonnegative_kernel") else None
    return max(
        worst_case_sensitivity(same, R_k, ratio, t_min=t_min),
        worst_case_sensitivity(diff, R_k, ratio, t_min=t_min),
    )


def dirichlet_record_norm(
    n_classes: int, targets: DirichletTargets, prior_mean: float, R_k: float, ratio: float = 1.0
) -> float:
    r"""``B_rec ≥ ‖vᵢ‖₂``, one record's contribution to the whitened statistics of all classes.

    A record with label ``l`` contributes ``(a_c k, c w_c t_b(k kᵀ))`` to class ``c``, with
    ``(a, w) = (ω_in r_in, ω_in)`` for ``c = l`` and ``(ω_out r_out, ω_out)`` otherwise
    (``dirichlet_sensitivity``), so ``‖vᵢ‖² = Σ_c (a_c² ‖k‖² + c² w_c² ‖k‖⁴)``
    ``≤ (a_in² + (C−1) a_out²) R_k² + c² (w_in² + (C−1) w_out²) R_k⁴``, the same for every label
    (``docs/noise_aware.md`` §9).
    """
    C = check_n_classes(n_classes)
    w_in, w_out = 1.0, targets.var_in / targets.var_out
    a_in = w_in * (targets.y_in - prior_mean)
    a_out = w_out * (targets.y_out - prior_mean)
    a_in, a_out, w_out = np.float64(a_in), np.float64(a_out), np.float64(w_out)
    Rk, c = np.float64(R_k), np.float64(ratio)
    # R_k √(…) with (c R_k)² floored at the smallest normal number (an upper bound): R_k² and
    # R_k⁴ underflowed for R_k ≲ 1e-154 (16% low at 2.65e-162; stop-47 audit)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        cr2 = max((c * Rk) ** 2, np.float64(np.finfo(np.float64).tiny))
        sq = (a_in**2 + (C - 1) * a_out**2) + cr2 * (w_in**2 + (C - 1) * w_out**2)
        return float(Rk * np.sqrt(sq))


def dirichlet_margin(
    n_classes: int,
    targets: DirichletTargets,
    prior_mean: float,
    R_k: float,
    ratio: float,
    n_inducing: int,
    n_records: int,
    summation_depth: int,
) -> float:
    """``2η`` of a Dirichlet release (``summation_margin`` with ``dirichlet_record_norm``)."""
    M = int(n_inducing)
    R_y = max(abs(targets.y_in - prior_mean), abs(targets.y_out - prior_mean))
    return summation_margin(
        n_records,
        summation_depth,
        dirichlet_record_norm(n_classes, targets, prior_mean, R_k, ratio),
        dimension=n_classes * (M + M * (M + 1) // 2),
        factor_bound=product_factor_bound(R_y, R_k, ratio),
    )


@dataclass(frozen=True, eq=False, repr=False)  # SparseQuRelease's one-line repr
class DirichletRelease(SparseQuRelease):
    """DP per-class ``q(u_c)`` (``u_mean`` ``(C, M)``, ``u_cov`` ``(C, M, M)``) + probabilities."""

    def predict_proba(
        self,
        X_star: ArrayLike,
        *,
        method: Literal["moment", "mc"] = "moment",
        n_samples: int = 1000,
        rng: np.random.Generator | None = None,
    ) -> NDArray[np.float64]:
        r"""Class probabilities ``(n, C)`` at ``X_star`` (post-processing, no privacy cost).

        ``"moment"``: ``p_c ∝ E[exp f_c] = exp(μ_c + v_c/2)`` (log-normal mean).
        ``"mc"``: ``E[softmax(f)]`` with ``n_samples`` draws of independent per-class
        marginals ``f_c(x) ~ N(μ_c, v_c)`` from ``rng`` (Milios et al. 2018, §4).
        """
        mu, var = self.predict(X_star)  # (C, n)
        var = np.maximum(var, 0.0)
        if method == "moment":
            logits = mu + var / 2.0
            logits = logits - logits.max(axis=0, keepdims=True)
            p = np.exp(logits)
            return (p / p.sum(axis=0, keepdims=True)).T
        if method != "mc":
            raise ValueError(f"method must be 'moment' or 'mc', got {method!r}.")
        # a whole number >= 1, before the generator is used (stop-44 audit: n_samples=0 gave
        # NaN probabilities, 2.5 two draws and the text "10" ten)
        n = check_count(n_samples, "n_samples")
        g = check_rng(rng)
        f = mu[None] + np.sqrt(var)[None] * g.standard_normal((n, *mu.shape))
        f = f - f.max(axis=1, keepdims=True)
        e = np.exp(f)
        return (e / e.sum(axis=1, keepdims=True)).mean(axis=0).T

    def predict_class(self, X_star: ArrayLike) -> NDArray[np.int64]:
        """Most probable class (moment approximation)."""
        return np.argmax(self.predict_proba(X_star), axis=1)


def dirichlet_settings(
    model: Any, n_classes: int | None, alpha_epsilon: float | None, prior_mean: float | None
) -> tuple[int, float, float | None]:
    """Public ``(C, α_ε, prior mean)``: a Dirichlet model's own unless given (they must agree)."""
    if isinstance(model, DirichletGPClassification):
        if n_classes is not None and n_classes != model.n_classes:
            raise ValueError(
                f"n_classes={n_classes} differs from the model's {model.n_classes}; omit "
                "n_classes or pass the model's."
            )
        n_classes = model.n_classes
        alpha_epsilon = model.alpha_epsilon if alpha_epsilon is None else alpha_epsilon
        prior_mean = model.mean if prior_mean is None else prior_mean
    if n_classes is None:
        raise ValueError("n_classes (public) is required unless the model is a Dirichlet model.")
    return check_n_classes(n_classes), 0.01 if alpha_epsilon is None else alpha_epsilon, prior_mean


@dataclass(frozen=True)
class DirichletCalibration:
    """Sensitivity and noise of a Dirichlet release: public quantities only (no record)."""

    tg: DirichletTargets
    mu: float  # public prior mean of every latent f_c
    bound: Any  # kernel_norm_bound result (R_k, nonnegativity)
    Delta: float  # joint L2 sensitivity over all classes
    R_y: float
    ratio_c: float  # c = sigma_a / sigma_b as used ("auto": R_y / R_k)
    per_class: float  # one class's noise-aware sensitivity (for comparison)
    sigma_a: float
    sigma_b: float
    lam: float
    scale: float  # 1 / var_in, the noise-variance floor's precision
    plan: DiscreteGaussianPlan | None  # secure noise plan, None in simulation
    margin: float = 0.0  # 2η, the summation round-off charged on top of Delta (0: not yet)

    @property
    def charged(self) -> float:
        """The charged sensitivity ``Δ + 2η`` (σ_a is calibrated to it)."""
        return self.Delta + self.margin


def dirichlet_calibration(
    public: PublicSparseGP,
    n_classes: int,
    *,
    alpha_epsilon: float,
    prior_mean: float | None,
    kernel_norm: KernelNorm | float,
    ratio: float | Literal["auto"],
    rho: float,
    epsilon: float,
    delta: float,
    calibration: Literal["analytic", "classic"],
    secure: bool,
    n_records: int | None = None,
    summation_depth: int | None = None,
) -> DirichletCalibration:
    """Targets, joint sensitivity (``dirichlet_sensitivity``) and noise scales (Honkela §5).

    Shared by ``dirichlet_release`` and ``pm_dpgp.plan.dirichlet`` so that the plan charges
    exactly what the release does.  With ``n_records`` and ``summation_depth`` (public) the
    noise is calibrated to ``Δ + 2η`` (``dirichlet_margin``), as the release charges it;
    without them to ``Δ`` alone (the release's first check, before the data are read).
    """
    tg = DirichletTargets.from_alpha(alpha_epsilon)
    mu = (
        tg.default_prior_mean(n_classes)
        if prior_mean is None
        else real_or_nan(prior_mean, "prior_mean")  # True / "0.5" refused (stop-40 fuzz)
    )
    if not math.isfinite(mu):
        raise ValueError(f"prior_mean must be finite, got {prior_mean!r}.")
    bound = kernel_norm_bound(public, kernel_norm)
    R_y = max(abs(tg.y_in - mu), abs(tg.y_out - mu))
    ratio = resolve_ratio(ratio, R_y, bound.R_k)  # "auto": R_y / R_k, as noise_aware_release
    Delta = dirichlet_sensitivity(
        n_classes, tg, mu, bound.R_k, ratio, nonnegative_kernel=bound.nonnegative
    )
    if not math.isfinite(Delta):  # public settings only, before any data (stop-47 audit)
        raise ValueError(
            f"the joint sensitivity of these public settings (R_k={bound.R_k:.3g}, "
            f"ratio={ratio:.3g}, prior mean {mu:.3g}) overflows float64; rescale the kernel "
            "amplitude or use ratio='auto'. Nothing was spent or drawn."
        )
    per_class = l2_sensitivity(R_y, bound.R_k, ratio)
    M = public.n_inducing
    scale = 1.0 / tg.var_in
    noise = statistics_noise(
        epsilon, delta, Delta, calibration, n_outputs=n_classes, n_inducing=M, secure=secure,
        scale=scale, ratio=ratio, rho=rho,
    )  # fmt: skip
    check_inducing_covariance(public)  # K_ZZ must factorise: before any data (stop-46 audit)
    cal = DirichletCalibration(
        tg, mu, bound, Delta, R_y, ratio, per_class,
        noise.sigma_a, noise.sigma_b, noise.lam, scale, noise.plan,
    )  # fmt: skip
    if n_records is None and summation_depth is None:
        return cal
    if n_records is None or summation_depth is None:
        raise ValueError("give both n_records and summation_depth, or neither.")
    return charge_summation_margin(
        cal,
        n_classes,
        n_inducing=M,
        n_records=n_records,
        summation_depth=summation_depth,
        rho=rho,
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
        secure=secure,
    )


def charge_summation_margin(
    cal: DirichletCalibration,
    n_classes: int,
    *,
    n_inducing: int,
    n_records: int,
    summation_depth: int,
    rho: float,
    epsilon: float,
    delta: float,
    calibration: Literal["analytic", "classic"],
    secure: bool,
) -> DirichletCalibration:
    """``cal`` recalibrated to ``Δ + 2η`` (public ``n`` and chunk size): σ_a, σ_b, λ and the plan,
    with the posterior's arithmetic checked again.  Nothing is spent or drawn."""
    margin = dirichlet_margin(
        n_classes,
        cal.tg,
        cal.mu,
        cal.bound.R_k,
        cal.ratio_c,
        n_inducing,
        n_records,
        summation_depth,
    )
    noise = statistics_noise(
        epsilon, delta, cal.Delta + margin, calibration, n_outputs=n_classes,
        n_inducing=n_inducing, secure=secure, scale=cal.scale, ratio=cal.ratio_c, rho=rho,
    )  # fmt: skip
    return replace(
        cal, sigma_a=noise.sigma_a, sigma_b=noise.sigma_b, lam=noise.lam, plan=noise.plan,
        margin=margin,
    )  # fmt: skip


def dirichlet_release(
    model: SparseGPRegression | PublicSparseGP,
    data: Any = None,
    *,
    epsilon: float,
    delta: float,
    n_classes: int | None = None,
    alpha_epsilon: float | None = None,
    prior_mean: float | None = None,
    hyperparameters: dict[str, Any] | None = None,
    ratio: float | Literal["auto"] = 1.0,
    kernel_norm: KernelNorm | float = "auto",
    rho: float = 0.01,
    variant: Literal["noise_aware", "naive"] = "noise_aware",
    s22_form: Literal["linearised", "eq14"] = "linearised",
    calibration: Literal["analytic", "classic"] = "analytic",
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    z_is_public: bool | None = None,
    chunk_size: int | None = None,
    progressbar: bool = False,
) -> DirichletRelease:
    r"""(ε, δ)-DP Dirichlet-based GP classifier: one noise-aware DP ``q(u_c)`` per class.

    Parameters
    ----------
    model
        A ``dirichlet_gp_classification`` model (its ``X``, labels,
        ``C``, ``α_ε`` and prior mean are the defaults), or any sparse model /
        ``PublicSparseGP`` giving the public ``Z`` and kernel shared by all classes (its
        noise variance is not used: the noise comes from eq. 21).
    data
        ``(X, labels)`` arrays, Dask arrays, or an iterable of chunks; ``labels`` integers in
        ``0 … n_classes−1`` (private).  Default: the model's ``X`` and ``y`` as labels.
    n_classes
        Public number of classes ``C ≥ 2`` (required unless the model is a Dirichlet model).
    alpha_epsilon
        Milios et al.'s ``α_ε`` (public; default 0.01).
    prior_mean
        Public constant prior mean of every latent ``f_c``; default
        ``(ỹ_in + (C−1) ỹ_out)/C`` (the targets' mean under uniform class frequencies — a
        function of ``C`` and ``α_ε`` only).
    hyperparameters
        Public values for any hyperparameter with a prior in ``model``.
    epsilon, delta, ratio, kernel_norm, rho, variant, s22_form, calibration, ledger, rng,
    z_is_public, chunk_size, progressbar
        As in ``noise_aware_release``.  The ledger is
        charged once (joint mechanism over all classes) before any noise is drawn.
    """
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    public = _as_public(model, hyperparameters)
    given = data
    if data is None and isinstance(model, DirichletGPClassification):
        model.check_data_containers()  # pm.set_data after the build: refused, not ignored
    data = _default_data(model, data)
    C, alpha_epsilon, prior_mean = dirichlet_settings(model, n_classes, alpha_epsilon, prior_mean)
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    rho = check_rho(rho)  # before anything is spent or drawn
    if variant not in ("noise_aware", "naive"):  # before anything is spent or drawn
        raise ValueError(f"variant must be 'noise_aware' or 'naive', got {variant!r}; use one.")
    if s22_form not in ("linearised", "eq14"):
        raise ValueError(f"s22_form must be 'linearised' or 'eq14', got {s22_form!r}; use one.")
    rng = simulation_rng(rng)
    del z_is_public  # compatibility only: Z is never compared with the private inputs
    cal = dirichlet_calibration(
        public,
        C,
        alpha_epsilon=alpha_epsilon,
        prior_mean=prior_mean,
        kernel_norm=kernel_norm,
        ratio=ratio,
        rho=float(rho),
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
        secure=rng is None,
    )
    tg, mu, bound, Delta, R_y, per_class = (
        cal.tg,
        cal.mu,
        cal.bound,
        cal.Delta,
        cal.R_y,
        cal.per_class,
    )
    sigma_a, sigma_b, lam, scale, plan = cal.sigma_a, cal.sigma_b, cal.lam, cal.scale, cal.plan
    w_out = tg.var_in / tg.var_out
    r_in, r_out = tg.y_in - mu, tg.y_out - mu
    Z, d = public.Z, public.input_dim
    classes = np.arange(C)

    def preprocess(X: Any, labels: Any, *extra: Any) -> tuple[Any, Any, Any, Any]:
        # Records with a non-finite input or a label outside 0 … C−1 are dropped (they
        # contribute zero, within the sensitivity); nothing reports whether that happened.
        if extra:  # schema only (stop-44 audit: "preprocess() takes 2 positional arguments")
            raise ValueError(
                f"data must be (X, labels), got {2 + len(extra)} arrays per chunk; a Dirichlet "
                "release takes no per-point noise variances (they follow from the labels, "
                "Honkela eq. 21)."
            )
        Xa, ok = _inputs_chunk(X, d)
        if np.ndim(labels) > 1 and np.shape(labels)[1:] != (1,):  # schema only
            # one-hot labels were ravelled and reported as "600 rows" (stop-41 fuzz)
            raise ValueError(
                f"labels must hold one class index per record, shape (n,), got shape "
                f"{np.shape(labels)}; for one-hot labels pass labels.argmax(axis=1)."
            )
        lab, ok_lab = sanitise_labels(labels, C)
        if lab.shape[0] != Xa.shape[0]:
            raise ValueError(
                f"labels has {lab.shape[0]} rows but X has {Xa.shape[0]}; pass one label per "
                "record."
            )
        ok &= ok_lab
        onehot = lab[ok, None] == classes[None, :]
        R = np.where(onehot, r_in, r_out)
        W = np.where(onehot, 1.0, w_out)
        return Xa[ok], R, W, np.array([float(Xa.shape[0])])

    with progress_bar(2, "Dirichlet release", enabled=progressbar) as bar:
        stats = sufficient_statistics(
            public.kernel_private,
            Z,
            data,
            preprocess=preprocess,
            n_targets=C,
            n_extras=1,
            chunk_size=chunk_size,
            # a DataFrame in another column order than the model's was used by position
            # (stop-43 audit): the column names are the schema, checked before the spend
            check_inputs=lambda X: check_input_columns(X, model, "X"),
            # ‖k(Z, x)‖ ≤ R_k for the computed columns too (docs/noise_aware.md §1)
            column_norm=cal.bound.R_k,
        )
        if stats.extras[0] == 0:  # the number of records is public
            raise ValueError("the data contain no records; pass at least one (x, label) record.")
        bar.advance("statistics")
        # public settings only (n is public under replace-one neighbours), before any spend
        warn_public_settings(epsilon=epsilon, delta=delta, n_records=int(stats.extras[0]))
        # the round-off of the computed sums: neighbours' computed statistics differ by up to
        # Δ + 2η (from the public n and chunk size), charged before any spend
        cal = charge_summation_margin(
            cal,
            C,
            n_inducing=public.n_inducing,
            n_records=int(stats.extras[0]),
            summation_depth=stats.summation_depth,
            rho=float(rho),
            epsilon=epsilon,
            delta=delta,
            calibration=calibration,
            secure=rng is None,
        )
        sigma_a, sigma_b, lam, plan = cal.sigma_a, cal.sigma_b, cal.lam, cal.plan
        release = _account_draw_release(
            DirichletRelease,
            public,
            stats,
            mechanism="noise_aware_dirichlet_gp"
            if variant == "noise_aware"
            else "naive_dirichlet_gp",
            label=f"noise-aware DP Dirichlet GP classification, {C} classes (Honkela §5)",
            prior_mean=mu,
            noise_var=None,
            output_names=tuple(f"class_{k}" for k in range(C)),
            bound=bound,
            epsilon=epsilon,
            delta=delta,
            Delta=cal.charged,
            sigma_a=sigma_a,
            sigma_b=sigma_b,
            ratio=cal.ratio_c,
            lam=lam,
            rho=float(rho),
            R_y=R_y,
            scale=scale,
            variant=variant,
            s22_form=s22_form,
            calibration=calibration,
            ledger=ledger,
            rng=rng,
            plan=plan,
            sensitivity_equation=(
                "joint over all classes (docs/noise_aware.md): max over same/different label of "
                "max_t sum_c [(a_c^2 + a_c'^2) Rk^2 + c^2 (w_c^2 + w_c'^2) Rk^4 - 2 t a_c a_c' "
                "- 2 c^2 t^2 w_c w_c']; charged: D + summation_margin (docs/noise_aware.md §1)"
            ),
            l2_sensitivity=Delta,
            summation_margin=cal.margin,
            summation_depth=stats.summation_depth,
            charged_sensitivity=cal.charged,
            noise_model="heteroscedastic Dirichlet (Milios et al. 2018; Honkela eq. 21, App. D)",
            noise_var_floor=tg.var_in,
            n_classes=C,
            alpha_epsilon=tg.alpha_epsilon,
            dirichlet_targets={
                "y_in": tg.y_in,
                "y_out": tg.y_out,
                "var_in": tg.var_in,
                "var_out": tg.var_out,
            },
            per_class_sensitivity=per_class,
            sqrt_C_times_per_class=math.sqrt(C) * per_class,
            composition="one joint Gaussian mechanism over all classes (one ledger event)",
            # a DataFrame's column names (schema), so that predictions can refuse another order
            closing_metadata={
                "input_columns": input_columns_record(data) or input_columns_record(model)
            },
        )
        bar.advance("noise drawn")
    # weak references (identity only): to_inference_data refuses the training inputs as
    # X_star, as for the sparse-GP release (stop-45 audit)
    return release.remember_training(model if given is None else given)
