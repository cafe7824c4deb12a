r"""LiRA-style membership inference against released GP posterior sample paths.

The experiment of Maciazek §4 and App. C (after Carlini et al. 2022, "Membership inference
attacks from first principles"): covariates uniform on a public interval, responses from a step
function ``s(x) = +M_Y`` for ``x ≥ jump`` and ``−M_Y`` otherwise (optionally plus bounded label
noise, clipped to ``[−M_Y, M_Y]``), GP regression with the 1-D exponential kernel
``exp(−|x − x'|/ℓ)`` in the σ²k / σ²r² parametrisation, ``L`` released posterior sample paths.
The target record ``z* = (x*, y*)`` sits at the jump, where it moves the posterior most.

* **in** world: ``n − 1`` random records plus ``z*``; **out** world: ``n`` random records.
  Both differ by replacing one record, so any test ``S`` obeys
  ``P_in(S) ≤ e^ε P_out(S) + δ`` for an (ε, δ)-DP release (the random core and the random
  replacement are mixtures, and the hockey-stick divergence is jointly convex).
* **statistics**: the adversary evaluates the ``L`` released paths at ``x*`` and computes their
  sample mean ``t̄`` and log sample variance ``log s²`` (``L ≥ 2``; only ``t̄`` for ``L = 1``).

**Only the 1-D marginal at x\* is needed.** Given the dataset D, the values of ``L``
independent posterior paths at ``x*`` are i.i.d. ``N(m_D(x*), v_D)`` with
``v_D = σ² k_D(x*, x*) + η² k(x*, x*)`` (the marginal of a Gaussian process at one point; the
extra noise adds ``η² k(x*,x*)``).  The statistics are functions of these ``L`` numbers only,
so sampling the marginal is exact, not an approximation.  Moreover for normal samples
``t̄ ~ N(m, v/L)`` and ``(L−1)s²/v ~ χ²_{L−1}`` independently (Cochran's theorem), so the
statistics are drawn directly: the cost per shadow dataset is one ``n × n`` Cholesky
(batched over datasets), independent of ``L``.

**Densities** (``density=``):

* ``"mixture"`` (default, the stronger attacker): the in/out density of the statistics is the
  average over shadow datasets of the *exact* conditional density given the dataset,
  ``N(t̄; m_D, v_D/L) · p(log s²; v_D)`` with ``s² ~ v_D χ²_{L−1}/(L−1)``.  This is the
  Rao–Blackwellised version of the paper's latent Gaussian-mixture model (App. C): the
  adversary knows the release mechanism, so only the distribution of ``(m_D, v_D)`` over
  datasets has to be learned from shadows, and the empirical distribution is used as is.
* ``"gaussian"``: a bivariate Gaussian fitted to one sampled release per shadow dataset
  (parametric LiRA).

The score is ``log p_in − log p_out`` (Neyman–Pearson).  TPR at a target FPR is read from the
empirical ROC of fresh evaluation releases; for the DP check the threshold is instead calibrated
on separate attacker-simulated out-releases, so that the counts on the evaluation sets are
binomial and Clopper–Pearson bounds apply.  Randomness only from the passed Generator.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy.special import gammaln, logsumexp
from scipy.stats import beta as beta_dist

from pm_dpgp._validation import (
    check_count,
    check_delta,
    check_positive,
    check_rng,
    check_scale,
    real_or_nan,
    renamed_fields,
)
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound

__all__ = [
    "LiraSetting",
    "LiraPoint",
    "LiraResult",
    "shadow_posteriors",
    "release_statistics",
    "lira_attack",
    "clopper_pearson",
]

Density = Literal["mixture", "gaussian"]
_CHUNK = 2048


@dataclass(frozen=True)
class LiraSetting:
    """The attacked release and data model (Maciazek §4, App. C).

    ``target_y`` defaults to ``s(target_x)``.  ``label_noise`` is the half-width of uniform
    noise added to the step before clipping to ``[−M_Y, M_Y]``.  ``kernel_scale`` and
    ``M_Y`` were ``sigma`` and ``y_bound`` (deprecated).
    """

    n: int = 20
    kernel_scale: float = 1.0
    r2: float = 0.1
    eta: float = 0.0
    L: int = 10
    lengthscale: float = 0.2
    M_Y: float = 1.0
    domain: tuple[float, float] = (0.0, 1.0)
    jump: float = 0.5
    target_x: float = 0.5
    target_y: float | None = None
    label_noise: float = 0.0

    def __post_init__(self) -> None:
        for name in ("n", "L"):
            v = getattr(self, name)
            check_count(v, name)  # np.int64 is an integer
        check_scale(self.kernel_scale, "kernel_scale")
        check_positive(self.r2, "r2")
        check_positive(self.eta, "eta", allow_zero=True)
        check_positive(self.lengthscale, "lengthscale")
        check_positive(self.M_Y, "M_Y")
        check_positive(self.label_noise, "label_noise", allow_zero=True)
        # every coordinate through the real-number rule: jump=nan put every point on one side
        # of the step, and domain=("0", "1") was parsed (stop-40 fuzz)
        try:
            lo, hi = (real_or_nan(v, "domain") for v in self.domain)
        except (TypeError, ValueError):
            lo = hi = math.nan
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"domain must be a finite interval (low, high), got {self.domain!r}.")
        for name in ("target_x", "jump"):
            v = real_or_nan(getattr(self, name), name)
            if not lo <= v <= hi:  # NaN fails too
                raise ValueError(
                    f"{name}={getattr(self, name)!r} must lie in the domain {self.domain}."
                )
        if self.target_y is not None:
            ty = real_or_nan(self.target_y, "target_y")
            if not abs(ty) <= self.M_Y:
                raise ValueError(f"target_y must be a number with |target_y| <= M_Y={self.M_Y}.")

    @property
    def y_target(self) -> float:
        """The target response ``y*``."""
        if self.target_y is not None:
            return float(self.target_y)
        return float(self.step(np.array([self.target_x]))[0])

    def step(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """The step function ``±M_Y`` with the jump at ``jump``."""
        return np.where(x >= self.jump, self.M_Y, -self.M_Y)

    def bound(self, *, constant: Literal["proved", "author"] = "proved") -> SamplePathBound:
        """The sample-path bound of this release: exponential kernel on the interval,
        ``κ = exp(−(high − low)/ℓ)``, ``B = min(2 M_Y, generic)``."""
        lo, hi = self.domain
        kappa = math.exp(-(hi - lo) / self.lengthscale)
        return SamplePathBound(
            self.n,
            self.kernel_scale,
            self.r2,
            self.M_Y,
            kappa,
            self.eta,
            kernel_class="exponential_1d",
            constant=constant,
            # the author's constant rescales the paper's Δ = 2B√Φ only (docs §4b)
            sensitivity="paper" if constant == "author" else "coupled",
        )


renamed_fields(LiraSetting, {"sigma": "kernel_scale", "y_bound": "M_Y"})


def _datasets(
    setting: LiraSetting, member: bool, size: int, rng: np.random.Generator
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    lo, hi = setting.domain
    X = rng.uniform(lo, hi, (size, setting.n))
    y = setting.step(X)
    if setting.label_noise > 0.0:
        y = y + rng.uniform(-setting.label_noise, setting.label_noise, y.shape)
    y = np.clip(y, -setting.M_Y, setting.M_Y)
    if member:
        X[:, -1] = setting.target_x
        y[:, -1] = setting.y_target
    return X, y


def shadow_posteriors(
    setting: LiraSetting, member: bool, size: int, rng: np.random.Generator
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Posterior mean and released-path variance at ``x*`` for ``size`` random datasets.

    ``m = k*ᵀ(K + r²I)⁻¹y`` and ``v = σ²(1 − k*ᵀ(K + r²I)⁻¹k*) + η²`` (``docs/sample_paths.md``,
    with
    ``k(x*, x*) = 1``), by a batched Cholesky ``LLᵀ = K + r²I`` and ``w = L⁻¹k*``, ``z = L⁻¹y``:
    ``m = wᵀz``, ``v = σ²(1 − wᵀw) + η²`` (Rasmussen & Williams 2006, Alg. 2.1).
    """
    rng = check_rng(rng)
    means, variances = [], []
    eye = setting.r2 * np.eye(setting.n)
    for start in range(0, size, _CHUNK):
        X, y = _datasets(setting, member, min(_CHUNK, size - start), rng)
        K = np.exp(-np.abs(X[:, :, None] - X[:, None, :]) / setting.lengthscale) + eye
        kx = np.exp(-np.abs(X - setting.target_x) / setting.lengthscale)
        Lc = np.linalg.cholesky(K)
        w = np.linalg.solve(Lc, kx[..., None])[..., 0]
        z = np.linalg.solve(Lc, y[..., None])[..., 0]
        means.append(np.sum(w * z, axis=1))
        variances.append(
            setting.kernel_scale**2 * np.maximum(1.0 - np.sum(w * w, axis=1), 0.0) + setting.eta**2
        )
    return np.concatenate(means), np.concatenate(variances)


def release_statistics(
    setting: LiraSetting,
    means: NDArray[np.float64],
    variances: NDArray[np.float64],
    rng: np.random.Generator,
    *,
    explicit_draws: bool = False,
) -> NDArray[np.float64]:
    """One release per dataset: ``(t̄, log s²)`` of ``L`` path values at ``x*``, shape (S, 2).

    Drawn from their exact joint law (module docstring); ``explicit_draws=True`` draws the ``L``
    values themselves instead (for checking).  For ``L = 1`` the second column is NaN.
    """
    rng = check_rng(rng)
    L = setting.L
    sd = np.sqrt(variances)
    if explicit_draws:
        vals = means[:, None] + sd[:, None] * rng.standard_normal((means.size, L))
        tbar = vals.mean(axis=1)
        s2 = vals.var(axis=1, ddof=1) if L > 1 else np.full(means.size, np.nan)
    else:
        tbar = means + sd * rng.standard_normal(means.size) / math.sqrt(L)
        s2 = variances * rng.chisquare(L - 1, means.size) / (L - 1) if L > 1 else None
        if s2 is None:
            s2 = np.full(means.size, np.nan)
    with np.errstate(divide="ignore"):
        return np.column_stack([tbar, np.log(s2)])


# --------------------------------------------------------------------------------------------
# densities and scores
# --------------------------------------------------------------------------------------------
def _mixture_logpdf(
    stats: NDArray[np.float64], means: NDArray[np.float64], variances: NDArray[np.float64], L: int
) -> NDArray[np.float64]:
    """log of the average over shadow datasets of the exact conditional density of the stats."""
    out = np.empty(stats.shape[0])
    k = 0.5 * (L - 1)
    log_theta = np.log(2.0 * variances / max(L - 1, 1))  # gamma scale of s² given v
    for i in range(0, stats.shape[0], _CHUNK):
        t = stats[i : i + _CHUNK]
        var_mean = variances / L
        lp = -0.5 * (t[:, :1] - means) ** 2 / var_mean - 0.5 * np.log(2 * math.pi * var_mean)
        if L > 1:
            w = t[:, 1:2]  # log s²;  density of log s² = gamma density of s² times s²
            lp = lp + k * w - np.exp(w - log_theta) - k * log_theta - gammaln(k)
        out[i : i + _CHUNK] = logsumexp(lp, axis=1) - math.log(means.size)
    return out


def _gaussian_logpdf(stats: NDArray[np.float64], shadow_stats: NDArray[np.float64]) -> NDArray:
    cols = 1 if np.all(np.isnan(shadow_stats[:, 1])) else 2
    S = shadow_stats[:, :cols]
    mu = S.mean(axis=0)
    C = np.atleast_2d(np.cov(S, rowvar=False))
    Lc = np.linalg.cholesky(C + 1e-12 * np.trace(C) * np.eye(cols))
    z = np.linalg.solve(Lc, (stats[:, :cols] - mu).T)
    return (
        -0.5 * np.sum(z * z, axis=0)
        - np.sum(np.log(np.diag(Lc)))
        - 0.5 * cols * math.log(2 * math.pi)
    )


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds ``(lower, upper)`` for a binomial proportion ``k/n``,
    each holding with probability ``confidence``."""
    n = check_count(n, "n")
    if isinstance(k, bool | np.bool_) or not isinstance(k, numbers.Integral) or not 0 <= k <= n:
        raise ValueError(f"k must be an integer in [0, n={n}], got {k!r}.")
    conf = real_or_nan(confidence, "confidence")
    if not 0.0 < conf < 1.0:  # (11, 10) and confidence=1.5 gave (nan, nan) (stop-40 fuzz)
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    g = 1.0 - conf
    lower = 0.0 if k == 0 else float(beta_dist.ppf(g, k, n - k + 1))
    upper = 1.0 if k == n else float(beta_dist.ppf(1.0 - g, k + 1, n - k))
    return lower, upper


@dataclass(frozen=True)
class LiraPoint:
    """Counts at one threshold calibrated on independent attacker-simulated out-releases."""

    target_fpr: float
    threshold: float
    k_in: int  #: members flagged
    n_in: int
    k_out: int  #: non-members flagged
    n_out: int

    @property
    def tpr(self) -> float:
        return self.k_in / self.n_in

    @property
    def fpr(self) -> float:
        return self.k_out / self.n_out

    def dp_slack(self, epsilon: float, delta: float, confidence: float = 0.99) -> float:
        """``e^ε·FPR_upper + δ − TPR_lower`` (≥ 0: consistent with (ε, δ)-DP), Clopper–Pearson.

        Also the complementary inequality ``1 − FPR ≤ e^ε(1 − TPR) + δ`` is checked; the
        smaller slack is returned.
        """
        tpr_lo, _ = clopper_pearson(self.k_in, self.n_in, confidence)
        _, fpr_hi = clopper_pearson(self.k_out, self.n_out, confidence)
        e = math.exp(min(float(epsilon), 700.0))  # e^700 ≈ 1e304 already makes the check void
        return min(e * fpr_hi + delta - tpr_lo, e * (1.0 - tpr_lo) + delta - (1.0 - fpr_hi))

    def epsilon_lower_bound(self, delta: float, confidence: float = 0.99) -> float:
        """Largest ε this point proves at the given confidence (0 if none)."""
        tpr_lo, _ = clopper_pearson(self.k_in, self.n_in, confidence)
        _, fpr_hi = clopper_pearson(self.k_out, self.n_out, confidence)
        cands = [0.0]
        if tpr_lo - delta > 0.0 and fpr_hi > 0.0:
            cands.append(math.log((tpr_lo - delta) / fpr_hi))
        if 1.0 - fpr_hi - delta > 0.0 and 1.0 - tpr_lo > 0.0:
            cands.append(math.log((1.0 - fpr_hi - delta) / (1.0 - tpr_lo)))
        return max(cands)


@dataclass(frozen=True, eq=False)
class LiraResult:
    """Scores of the evaluation releases and the attack's operating points."""

    setting: LiraSetting
    density: Density
    scores_in: NDArray[np.float64]
    scores_out: NDArray[np.float64]
    tpr_at_fpr: dict[float, float]  #: from the empirical ROC of the evaluation scores
    calibrated: tuple[LiraPoint, ...] = field(default=())

    @property
    def auc(self) -> float:
        """Area under the ROC (Mann–Whitney statistic; ties count ½)."""
        s = np.concatenate([self.scores_in, self.scores_out])
        order = np.argsort(s, kind="mergesort")
        ranks = np.empty(s.size)
        ranks[order] = np.arange(1, s.size + 1)
        # average ranks of ties
        _, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
        sums = np.bincount(inv, weights=ranks)
        ranks = (sums / counts)[inv]
        n1, n0 = self.scores_in.size, self.scores_out.size
        return float((ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))

    def roc(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Empirical ROC ``(fpr, tpr)`` over all thresholds (rule: flag if score > threshold)."""
        thr = np.unique(np.concatenate([self.scores_in, self.scores_out]))[::-1]
        si, so = np.sort(self.scores_in), np.sort(self.scores_out)
        tpr = 1.0 - np.searchsorted(si, thr, side="right") / si.size
        fpr = 1.0 - np.searchsorted(so, thr, side="right") / so.size
        return np.concatenate([[0.0], fpr, [1.0]]), np.concatenate([[0.0], tpr, [1.0]])

    def dp_consistent(self, epsilon: float, delta: float, confidence: float = 0.99) -> bool:
        """Whether every calibrated point satisfies ``TPR ≤ e^ε FPR + δ`` within CP bands."""
        return all(p.dp_slack(epsilon, delta, confidence) >= 0.0 for p in self.calibrated)

    def epsilon_lower_bound(self, delta: float, confidence: float = 0.99) -> float:
        """Empirical lower bound on ε proved by the calibrated points."""
        delta = check_delta(delta)
        return max([0.0] + [p.epsilon_lower_bound(delta, confidence) for p in self.calibrated])


def _tpr_at(scores_in: NDArray, scores_out: NDArray, fpr: float) -> float:
    """TPR at the threshold whose empirical FPR is the largest value ≤ ``fpr``."""
    so = np.sort(scores_out)[::-1]
    k = int(math.floor(fpr * so.size))
    thr = so[min(k, so.size - 1)] if k < so.size else -math.inf
    return float(np.mean(scores_in > thr))


def lira_attack(
    setting: LiraSetting,
    *,
    n_shadow: int = 2000,
    n_eval: int = 5000,
    n_calibration: int | None = None,
    fprs: tuple[float, ...] = (1e-3, 1e-2),
    density: Density = "mixture",
    rng: np.random.Generator | None = None,
) -> LiraResult:
    """Run the LiRA-style attack (module docstring) and report TPR at the target FPRs.

    Parameters
    ----------
    setting
        The release and data model.
    n_shadow
        Shadow datasets per world (in and out) for the densities.
    n_eval
        Evaluation datasets per world (each gives one release).
    n_calibration
        Attacker-simulated out-releases for calibrating thresholds (default ``n_eval``).
    fprs
        Target false-positive rates.
    density
        ``"mixture"`` or ``"gaussian"`` (module docstring).
    rng
        The only source of randomness.
    """
    rng = check_rng(rng)
    if density not in ("mixture", "gaussian"):
        raise ValueError(f"density must be 'mixture' or 'gaussian', got {density!r}.")
    for name, v in (("n_shadow", n_shadow), ("n_eval", n_eval)):
        check_count(v, name, minimum=2)
    # 2.9 was used as 2 (int()); no target FPR gave no calibrated point, and dp_consistent()
    # was then True for every epsilon (stop-45 audit)
    n_cal = (
        n_eval if n_calibration is None else check_count(n_calibration, "n_calibration", minimum=2)
    )
    fprs = tuple(fprs)
    if not fprs:
        raise ValueError("fprs must name at least one target false-positive rate, e.g. (1e-2,).")
    for f in fprs:
        if not 0.0 < f < 1.0:
            raise ValueError(f"target FPRs must lie in (0, 1), got {f!r}.")

    shadow = {w: shadow_posteriors(setting, w, n_shadow, rng) for w in (True, False)}
    if density == "mixture":

        def logpdf(stats: NDArray, member: bool) -> NDArray:
            m, v = shadow[member]
            return _mixture_logpdf(stats, m, v, setting.L)

    else:
        fitted = {w: release_statistics(setting, *shadow[w], rng) for w in (True, False)}

        def logpdf(stats: NDArray, member: bool) -> NDArray:
            return _gaussian_logpdf(stats, fitted[member])

    def scores(member: bool, size: int) -> NDArray:
        stats = release_statistics(setting, *shadow_posteriors(setting, member, size, rng), rng)
        return logpdf(stats, True) - logpdf(stats, False)

    s_in, s_out = scores(True, n_eval), scores(False, n_eval)
    s_cal = np.sort(scores(False, n_cal))[::-1]
    points = []
    for f in fprs:
        k = int(math.floor(f * n_cal))
        thr = float(s_cal[k]) if k < n_cal else -math.inf
        points.append(
            LiraPoint(
                f, thr, int(np.sum(s_in > thr)), s_in.size, int(np.sum(s_out > thr)), s_out.size
            )
        )
    tpr = {f: _tpr_at(s_in, s_out, f) for f in fprs}
    return LiraResult(setting, density, s_in, s_out, tpr, tuple(points))
