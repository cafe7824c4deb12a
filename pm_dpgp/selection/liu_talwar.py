r"""Fully private hyperparameter selection by random stopping (Honkela 2024, §4, Alg. 2).

Privacy model: **full** (inputs and outputs private; replace one record ``(x, y)``).  The
split of the rows into a training part D₁ and a validation part D₂ is public (a function of
``n`` only), the grid is public, the inducing inputs ``Z`` are public.

One run of the base mechanism Q (Honkela, Lemma 3):

1. draw a candidate ``i`` uniformly from the grid (public randomness, data-independent);
2. release the noise-aware ``q(u)`` on D₁ with hyperparameters θ_i
   (``pm_dpgp.mechanisms.full.noise_aware.noise_aware_release``, Alg. 1; ρ_M-zCDP, or a
   Gaussian event with ρ_M = 1/(2z²) in simulation mode);
3. score it on D₂: per-record validation log-likelihoods (eq. 18) clipped to
   ``[L_min, L_max]`` (eqs. 30–31, i.e. centre/radius eqs. 32–33) and averaged by 1-D COINPRESS
   (``pm_dpgp.selection.coinpress``, ρ_CP-zCDP w.r.t. D₂).

Because D₁ and D₂ are disjoint and a replace-one neighbour changes only one of them, the pair
(release, score) is max(ρ_M, ρ_CP)-zCDP: for a change in D₁ the score is post-processing of the
release; for a change in D₂ the release has the same law and, conditionally on it, the score's
Rényi divergence is at most α·ρ_CP (the Rényi divergence of two joint laws with a common
marginal is at most the supremum of the conditional ones); the uniform choice of ``i`` is
a mixture with public weights, which cannot increase the maximum (``docs/selection.md`` §5).
So the score runs at ρ_CP = max(ρ_CP⁰, max_i ρ_M,i), ρ_CP⁰ = ``zcdp_rho(ε, δ)``: the charge is
max_i ρ_M,i ∨ ρ_CP⁰ either way, and the score is less noisy when a release costs more than
ρ_CP⁰ (simulation mode: 1.11–1.22 ×; stop 39, it ran at ρ_CP⁰).

Random stopping (Liu & Talwar 2019, Alg. 2): after every run, stop with probability γ and
publish the best valid candidate seen; the number of runs K is geometric (never published).
Accounting: ``pm_dpgp.accounting.RepeatAndSelectEvent`` with the base event
``ZCDPEvent(max(ρ_M, ρ_CP))`` and η = 1 (Papernot & Steinke 2022, Thm. 2) — an RDP curve that
composes on ``renyi`` and ``fixed`` ledgers.  This replaces Honkela's eq. (20), which is Liu &
Talwar's (ε, δ) bound for the *truncated* procedure (T = ln(1/δ₂)/γ runs at most); we do not
truncate (the RDP theorem is for the untruncated K; P(K > T) = (1 − γ)^T).
"""

from __future__ import annotations

import math
import secrets
import warnings
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import (
    bounds_from_centred,
    centred_bound,
    check_delta,
    check_epsilon,
    check_flag,
    check_positive,
    check_rng,
    reject_unexpected,
    require,
    warn_public_settings,
)
from pm_dpgp.accounting import (
    GaussianEvent,
    Ledger,
    PrivacyEvent,
    RepeatAndSelectEvent,
    ZCDPEvent,
    event_from_metadata,
    stopping_mean,
)
from pm_dpgp.gp.sparse import (
    default_chunk_size,
    predict_from_qu,
    public_summation_depth,
    titsias_qu,
)
from pm_dpgp.mechanisms.full.noise_aware import (
    NEIGHBOURING_RELATION,
    PRIVACY_MODEL,
    KernelNorm,
    SparseQuRelease,
    calibrate_statistics_noise,
    check_inducing_covariance,
    check_posterior_arithmetic,
    kernel_norm_bound,
    l2_sensitivity,
    noise_aware_release,
    regression_margin,
    resolve_ratio,
)
from pm_dpgp.mechanisms.gaussian import zcdp_rho
from pm_dpgp.mechanisms.noise import SIMULATION
from pm_dpgp.models.guards import refuse_dirichlet_model
from pm_dpgp.models.sparse import PublicSparseGP, SparseGPRegression
from pm_dpgp.selection.coinpress import (
    check_coinpress_settings,
    check_secure_coinpress_noise,
    coinpress_mean,
)
from pm_dpgp.selection.grids import check_grid, prior_quantile_grid
from pm_dpgp.selection.private_data import (
    as_private_arrays,
    check_data_schema,
    private_data,
    public_split,
    usable_rows,
)
from pm_dpgp.selection.result import SelectionResult

__all__ = [
    "Scorer",
    "checked_loglik_bounds",
    "loglik_bounds",
    "random_stopping",
    "random_stopping_event",
    "sample_stopping_time",
    "select_by_random_stopping",
    "stopping_pmf",
    "validation_loglik",
]


def stopping_pmf(k: ArrayLike, gamma: float) -> NDArray[np.float64]:
    """P(K = k) = γ(1 − γ)^{k−1}, k ≥ 1: the geometric law of "stop with probability γ after
    every run" (Liu & Talwar 2019, Alg. 2; Papernot & Steinke 2022, Def. 1 with η = 1)."""
    stopping_mean(gamma, 1.0)  # validates γ
    kk = np.asarray(k, dtype=np.float64)
    out = gamma * np.exp((kk - 1.0) * math.log1p(-gamma))
    return np.where(kk >= 1, out, 0.0)


def _coin(gamma: Fraction, rng: np.random.Generator | None) -> bool:
    """One Bernoulli(γ): exact from OS entropy (γ = p/2^k as a dyadic fraction) or simulated."""
    if rng is None:
        return secrets.randbelow(gamma.denominator) < gamma.numerator
    return bool(rng.random() < float(gamma))


def _uniform(k: int, rng: np.random.Generator | None) -> int:
    return secrets.randbelow(k) if rng is None else int(rng.integers(k))


def sample_stopping_time(gamma: float, rng: np.random.Generator | None = None) -> int:
    """Draw K by the procedure the selection uses: run, then stop with probability γ."""
    stopping_mean(gamma, 1.0)
    g = Fraction(float(gamma))
    k = 1
    while not _coin(g, rng):
        k += 1
    return k


#: One run of a base mechanism Q for candidate ``i``: ``(DP score, upper end of its valid range)``.
Scorer = Callable[[int], tuple[float, float]]


def random_stopping(
    n_candidates: int, run: Scorer, gamma: float, rng: np.random.Generator | None
) -> tuple[int, float, list[tuple[int, float]]]:
    """Liu & Talwar (2019) Alg. 2 / Honkela (2024) Alg. 2 around any base mechanism ``run``.

    Repeat: draw ``i`` uniformly, ``score, hi = run(i)``, keep the best valid candidate
    (``score <= hi``, Alg. 2's test; "best" is a fixed total order on the published outputs,
    score then the smaller index, as the theorem of Papernot & Steinke 2022 requires), stop
    with probability γ.  Returns ``(best index or −1, its score, every run)``; only the first
    two may be published.  The caller charges ``RepeatAndSelectEvent(base event of run, γ, 1)``
    before calling.  The loop is silent: a warning per run (public settings, or numerical
    ones from private data) would reveal K, the secret number of runs (audit).
    """
    g = Fraction(float(gamma))
    best_index, best_score = -1, -math.inf
    runs: list[tuple[int, float]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while True:
            i = _uniform(n_candidates, rng)
            score, hi = run(i)
            runs.append((i, score))
            if score <= hi and (score, -i) > (best_score, -best_index):
                best_index, best_score = i, score
            if _coin(g, rng):
                break
    return best_index, best_score, runs


def loglik_bounds(noise_var: float, y_bound: float) -> tuple[float, float]:
    """``(L_min, L_max)`` of Honkela eqs. (30)–(31): ``L_max = −½ln(2π) − ln σ``,
    ``L_min = L_max − 4R_y²/(2σ²)`` (centre ``C`` and radius ``R = R_y²/σ²``, eqs. 32–33)."""
    s2 = check_positive(noise_var, "noise_var")
    R_y = check_positive(y_bound, "y_bound")
    l_max = -0.5 * math.log(2.0 * math.pi) - 0.5 * math.log(s2)
    return l_max - 2.0 * R_y * R_y / s2, l_max


def checked_loglik_bounds(noise_var: float, y_bound: float) -> tuple[float, float]:
    """``loglik_bounds``, refused (public values only) unless ``L_min < L_max`` are finite."""
    lo, hi = loglik_bounds(noise_var, y_bound)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(
            f"the COINPRESS log-likelihood interval [L_min, L_max] = [{lo:.17g}, {hi:.17g}] "
            f"(Honkela eqs. 30-31, R_y = {y_bound:.3g}, noise variance {noise_var:.3g}) is empty "
            "or not finite in float64; widen or rescale y_bounds. Nothing was spent or drawn."
        )
    return lo, hi


def validation_loglik(
    mean: NDArray[np.float64],
    var: NDArray[np.float64],
    y: NDArray[np.float64],
    prior_mean: float,
    y_bound: float,
) -> NDArray[np.float64]:
    """Per-record ``log N(r_j; μ̂_j − μ, Σ̂_jj + σ²)`` (eq. 18), ``r = clip(y − μ, ±R_y)``.

    Each entry depends on one validation record only (and on public or DP quantities).
    """
    r = np.clip(np.nan_to_num(y - prior_mean, nan=0.0), -y_bound, y_bound)
    e = r - (mean - prior_mean)
    return -0.5 * (np.log(2.0 * np.pi * var) + e * e / var)


def _release_event(
    public: PublicSparseGP,
    epsilon: float,
    delta: float,
    y_bound: float,
    ratio: float | Literal["auto"],
    kernel_norm: KernelNorm | float,
    calibration: Literal["analytic", "classic"],
    secure: bool,
    n_records: int,
) -> PrivacyEvent:
    """The event one noise-aware release at θ would charge (public calibration only).

    The run's release charges ``Δ + 2η`` (the summation margin of its ``n_records`` training
    rows at the default chunk size, whatever their chunking; ``docs/noise_aware.md`` §1), so
    the event is calibrated to that, not to ``Δ``: at ``Δ`` alone the simulated run's
    ``μ²/2`` exceeded the planned base ρ by an ulp for about one ε in five, and the run
    raised after the selection's charge.
    """
    bound = kernel_norm_bound(public, kernel_norm)
    # as the run's release resolves it: a number (Decimal gave a TypeError here after the
    # release accepted it; stop-40 fuzz) or "auto"
    ratio = resolve_ratio(ratio, y_bound, bound.R_k)
    M = public.n_inducing
    depth = public_summation_depth(n_records, default_chunk_size(M))
    Delta = l2_sensitivity(y_bound, bound.R_k, ratio)
    Delta = Delta + regression_margin(n_records, depth, y_bound, bound.R_k, ratio, M)
    sigma_a, plan = calibrate_statistics_noise(
        epsilon, delta, Delta, calibration, n_outputs=1, n_inducing=M, secure=secure
    )
    # the run's release would refuse it after the selection's spend (stop-32 audit)
    check_posterior_arithmetic(1.0 / public.noise_var, sigma_a, sigma_a / ratio)
    # and so would a K_ZZ that does not factorise (a kernel that is no covariance at this
    # candidate, with the caller's kernel_norm): its run raised "Nothing was spent" after
    # the selection's charge (stop-46 review)
    check_inducing_covariance(public)
    return plan.event(1) if plan is not None else GaussianEvent(sigma_a / Delta)


def _rho(event: PrivacyEvent) -> float:
    if isinstance(event, GaussianEvent):
        return event.mu_squared / 2.0
    if isinstance(event, ZCDPEvent):
        return event.total_rho
    raise TypeError(f"expected a Gaussian or zCDP event, got {type(event).__name__}.")


def random_stopping_event(base_rho: float, gamma: float, label: str = "") -> RepeatAndSelectEvent:
    """The event of the whole selection: ρ-zCDP base run, geometric stopping with γ."""
    return RepeatAndSelectEvent(ZCDPEvent(base_rho), gamma, 1.0, label)


def _usable_rows(
    public: PublicSparseGP, X: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    return usable_rows(X, public.Z, public.kernel_private, public.kernel_diag)


def _owner_score(
    public: PublicSparseGP,
    X1: NDArray[np.float64],
    r1: NDArray[np.float64],
    X2: NDArray[np.float64],
    y2: NDArray[np.float64],
    y_bound: float,
) -> float:
    """Non-private mean clipped validation log-likelihood of Titsias' q(u) (owner only)."""
    X1, ok1 = _usable_rows(public, X1)
    X1, r1 = X1[ok1], r1[ok1]  # dropped as the DP statistics drop them
    X2, finite2 = _usable_rows(public, X2)
    # every training record may have been dropped (that depends on the private data): then
    # the statistics are zero, as in the DP path, and nothing may raise
    M = public.Z.shape[0]
    Kzx = public.kernel(public.Z, X1) if len(X1) else np.zeros((M, 0))
    m, S = titsias_qu(public.kzz(), Kzx @ r1, Kzx @ Kzx.T, 1.0 / public.noise_var)
    mu, var = predict_from_qu(
        public.kzz(), m[None], S[None], public.kernel(public.Z, X2), public.kernel_diag(X2)
    )
    v = validation_loglik(mu[0] + public.mean, var[0] + public.noise_var, y2, public.mean, y_bound)
    lo, hi = loglik_bounds(public.noise_var, y_bound)
    v = np.where(finite2, v, lo)
    return float(np.mean(np.clip(v, lo, hi)))


def select_by_random_stopping(
    model: SparseGPRegression,
    grid: Sequence[dict[str, float]] | None = None,
    data: tuple[ArrayLike, ArrayLike] | None = None,
    *,
    epsilon: float,
    delta: float,
    y_bounds: tuple[float, float] | None = None,
    ledger: Ledger | None,
    gamma: float = 0.1,
    validation: ArrayLike | None = None,
    n_steps: int = 12,
    spread: float = 4.0,
    ratio: float | Literal["auto"] = 1.0,
    kernel_norm: KernelNorm | float = "auto",
    calibration: Literal["analytic", "classic"] = "analytic",
    owner_scores: bool = True,
    owner_check: bool = False,
    rng: np.random.Generator | None = None,
    **deprecated: Any,
) -> SelectionResult:
    """Fully private choice of hyperparameters by Liu–Talwar random stopping (Honkela Alg. 2).

    Parameters
    ----------
    model
        ``pm_dpgp.models.sparse_gp_regression`` model with PUBLIC inducing inputs.
    grid
        candidate configurations;
        ``None``: the prior 0.1/0.5/0.9 quantiles
        (``pm_dpgp.selection.grids.prior_quantile_grid``, no data touched).
    data
        private ``(X, y)``; ``None``: the model's own.
    epsilon, delta
        budget of each candidate's noise-aware release; the COINPRESS score gets
        ``max(zcdp_rho(ε, δ), max_i ρ_M,i)`` (``pm_dpgp.mechanisms.gaussian.zcdp_rho``, the
        conversion of Honkela eq. 19 the ledger uses; the releases' ρ_M is larger in
        simulation mode), the base ρ the run is charged anyway.
    y_bounds
        public ``(lower, upper)`` for the responses; each candidate clips ``y − μ`` to
        ``±R_y`` with ``R_y = max(|lower − μ|, |upper − μ|)`` about its public prior mean ``μ``
        (Honkela's centred bound; the deprecated centred ``y_bound=R_y`` still works).
    ledger
        charged with ``random_stopping_event`` before any data are read or any candidate
        is drawn (a ``renyi`` or ``fixed`` ledger: the event is an RDP curve).
    gamma
        stopping probability after each run; E[K] = 1/γ runs.
    validation
        public indices of the validation rows D₂; default every 5th row.
    n_steps, spread
        COINPRESS steps and public half-width of the log-likelihoods' bulk (nats).
    ratio, kernel_norm, calibration
        of each candidate's noise-aware release, as in
        ``pm_dpgp.mechanisms.noise_aware_release`` (default ``ratio=1.0``, the paper's).
    owner_scores
        also compute the non-private validation scores of every candidate for the owner.
    owner_check
        the data owner's own heuristic check that ``Z`` was not taken from the private
        inputs (``pm_dpgp.audit.check_public_choices``, raises
        ``pm_dpgp.models.InducingFromDataError`` before anything is spent).  Its answer
        depends on the private inputs: only the data owner may switch it on.
    rng
        ``None``: secure noise and OS-entropy coins; a Generator: simulation mode.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    func = "select_by_random_stopping"
    if "y_bound" in deprecated:  # the old centred form, about the model's own prior mean
        y_bounds = bounds_from_centred("y_bound", deprecated, y_bounds, model.mean, func=func)
    reject_unexpected(deprecated, func=func)
    y_bounds = require(y_bounds, "y_bounds", func=func)
    stopping_mean(gamma, 1.0)
    if not isinstance(model, SparseGPRegression):
        raise TypeError("model must be a sparse_gp_regression model (public inducing inputs).")
    refuse_dirichlet_model(model, func)  # stop-31 review: it scored the raw class indices
    if ledger is not None and not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a pm_dpgp Ledger or None, got {type(ledger).__name__}.")
    if rng is not None:
        rng = check_rng(rng)
    names = tuple(model.hyperparameter_names)
    configs = check_grid(prior_quantile_grid(model) if grid is None else grid, names)
    # public settings of the score (audit D1): refused here, not after the spend in a run
    check_coinpress_settings(zcdp_rho(epsilon, delta), n_steps, spread)
    # the schema of the private data only (conversion, shapes; audit D3): n is public under
    # replace-one neighbours, and no value is inspected before the spend
    X, y, n = check_data_schema(*private_data(model, data), int(model.Z.shape[1]), model)
    train, val = public_split(n, validation)
    # --- public plan: events of every candidate, COINPRESS bounds -----------------------------
    publics = [model.public_sparse_gp(c) for c in configs]
    R = [centred_bound(y_bounds, p.mean)[2] for p in publics]  # public: bounds and prior means
    release_events = [
        _release_event(
            p, epsilon, delta, R_p, ratio, kernel_norm, calibration, rng is None, int(train.size)
        )
        for p, R_p in zip(publics, R, strict=True)
    ]
    # each candidate's COINPRESS interval [L_min, L_max] (eqs. 30-31), public; an empty one
    # (2R_y^2/sigma^2 below the spacing of doubles at L_max, e.g. y_bounds = +-1e-9 with noise
    # sd 0.3) was refused by COINPRESS in the first run, after the spend (stop-38 audit)
    loglik = [checked_loglik_bounds(p.noise_var, R_p) for p, R_p in zip(publics, R, strict=True)]
    # one run is max(rho_M, rho_CP)-zCDP (a record is in D1 or in D2, docs/selection.md §5),
    # so the score may use the whole base rho at no extra charge: in simulation mode the
    # analytic Gaussian release has rho_M = 1.11-1.22 x rho_CP (stop-38 audit)
    base_rho = max(zcdp_rho(epsilon, delta), *(_rho(e) for e in release_events))
    if rng is None:
        # each candidate's secure COINPRESS noise at the runs' rho, public: an interval too
        # narrow to discretise its noise was refused in the first run, after the spend (stop 47)
        rhos, _ = check_coinpress_settings(base_rho, n_steps, spread)
        for lo_i, hi_i in loglik:
            check_secure_coinpress_noise(lo_i, hi_i, int(val.size), rhos, spread)
    event = random_stopping_event(
        base_rho, gamma, label="hyperparameter selection (Liu-Talwar random stopping)"
    )
    # a public switch, read before the spend (stop-45 audit: "no" was refused after the charge
    # and every run, so the whole selection was paid for and lost)
    owner_scores = check_flag(owner_scores, "owner_scores")
    if check_flag(owner_check, "owner_check"):  # "False" switched it on (stop 40)
        from pm_dpgp.audit import check_public_choices

        check_public_choices(X, Z=model.Z)
    # public-setting warnings once, here: inside the loop every run would repeat them, and their
    # number would reveal K (the secret number of runs; audit)
    warn_public_settings(
        epsilon=epsilon,
        delta=delta,
        n_records=int(train.size),
        bounds=(float(y_bounds[0]), float(y_bounds[1])),
        centre=[p.mean for p in publics],
    )
    # --- charge before any data are read or anything is drawn ---------------------------------
    if ledger is not None:
        ledger.spend(
            event,
            label="DP hyperparameter selection (Honkela 2024, Alg. 2)",
            privacy_model=PRIVACY_MODEL,
            neighbouring_relation=NEIGHBOURING_RELATION,
            rng=rng,
        )
    Xa, ya = as_private_arrays(X, y)
    X1, y1, X2, y2 = Xa[train], ya[train], Xa[val], ya[val]

    def run(i: int) -> tuple[float, float]:
        release: SparseQuRelease = noise_aware_release(
            publics[i],  # the public model planned above (its kernel compiled once)
            (X1, y1),
            epsilon=epsilon,
            delta=delta,
            y_bounds=y_bounds,
            ratio=ratio,
            kernel_norm=kernel_norm,
            calibration=calibration,
            ledger=None,
            rng=rng,
        )
        if _rho(event_from_metadata(release.metadata["privacy_event"])) > base_rho:
            raise RuntimeError("a candidate release exceeded its planned cost; please report.")
        # a validation record with a non-finite input or kernel column scores L_min
        X2_i, usable = _usable_rows(publics[i], X2)
        mu, var = release.predict(X2_i, pred_noise=True)
        lo, hi = loglik[i]
        v = np.where(usable, validation_loglik(mu, var, y2, publics[i].mean, R[i]), lo)
        score = coinpress_mean(
            v, lower=lo, upper=hi, rho=base_rho, n_steps=n_steps, spread=spread, rng=rng
        ).mean
        return score, hi

    best_index, best_score, runs = random_stopping(len(configs), run, gamma, rng)
    owner: dict[str, Any] = {"runs": runs, "n_runs": len(runs)}
    if owner_scores:
        owner["validation_scores"] = np.array(
            [
                _owner_score(
                    p, X1, np.clip(np.nan_to_num(y1 - p.mean, nan=0.0), -R_p, R_p), X2, y2, R_p
                )
                for p, R_p in zip(publics, R, strict=True)
            ]
        )
    details = {
        "epsilon_per_candidate": epsilon,
        "delta_per_candidate": delta,
        "coinpress_rho": base_rho,
        "base_rho": base_rho,
        "gamma": float(gamma),
        "expected_runs": stopping_mean(gamma, 1.0),
        "y_bounds": [float(b) for b in y_bounds],
        "R_y": max(R),
        "validation_rows": val.tolist(),
        "coinpress_steps": int(n_steps),
        "coinpress_spread": float(spread),
        # the winner's DP score is part of the published run (Liu & Talwar output (i, q));
        # the other runs and their number K are never published
        "dp_mean_validation_loglik": best_score if best_index >= 0 else None,
        "outcome": "selected" if best_index >= 0 else "no valid candidate (bottom)",
        "noise_source": "opendp_discrete_gaussian+os_entropy" if rng is None else SIMULATION,
    }
    return SelectionResult(
        method="liu_talwar_random_stopping",
        hyperparameters=dict(configs[best_index]) if best_index >= 0 else {},
        index=best_index,
        grid=configs,
        event=event,
        privacy_model=PRIVACY_MODEL,
        neighbouring_relation=NEIGHBOURING_RELATION,
        public_details=details,
        owner=owner,
    )
