r"""Rényi-DP bounds for releasing GP posterior sample paths (Maciazek; ``docs/sample_paths.md``).

Setting (full privacy, replace-one neighbours).  Prior ``f ~ GP(0, σ² k)`` with
``k(x, x) ≤ 1`` and ``k(x, x') ≥ κ ≥ 0`` on the public input domain, observation-noise
variance ``σ² r²`` (``r²`` is the *effective ridge*), responses ``|y| ≤ M_Y`` (``M_Y``, derived
from the public range ``y_bounds`` and the prior mean by the releases),
``n`` training points.  The mechanism releases ``L`` independent posterior sample paths,
optionally plus ``η g`` with ``g ~ GP(0, k)`` independent.  Every quantity below is derived
in ``docs/sample_paths.md``; the equation numbers refer to that page.

* (SP1) posterior variance scale  ``V = 1 − κ² (n−1)/(n−1+r²)``
* (SP2) ``Φ = max_{0≤v≤V} v/(v+r²)² = 1/(4r²)`` if ``V ≥ r²`` else ``V/(V+r²)²``
* (SP3) residual bound ``B ≥ |y − m_core(x)|``: generic ``M_Y(1 + √(n−1)/r)``;
  1-D exponential kernel ``min(2 M_Y, generic)``; constant kernel ``M_Y`` (the core mean
  cancels, see the docs)
* (SP4) mean sensitivity (RKHS norm of the core posterior kernel)
  ``Δ = 2 B √Φ`` (proved, triangle inequality) or ``√2 B √Φ`` (the author's code; offered
  only as ``constant="author"``: it is *violated* by adversarial neighbours, see the docs)
* (SP5) ``τ = σ²V/(σ²r² + η²(V+r²))`` (``= V/r²`` when ``η = 0``), ``β = (α−1)τ``
* (SP6) ``ψ_α(τ) = max{ ½ln(1+τ) − ln((1+ατ)/(1+τ))/(2(α−1)),
  −½ln(1+τ) − ln(1−β)/(2(α−1)) }``
* (SP7) one path, ``1 < α < α_max = 1 + 1/τ``:
  ``ε(α) = 2ψ_α(τ) + (α/2)(V+r²)/(A(1−β)) Δ²``, ``A = σ²r² + η²(V+r²)``
* (SP8) ``L`` (possibly adaptively chosen) paths: ``L ε(α)`` (Mironov 2017, Prop. 1)
* (SP9) (ε, δ): minimise the conversion of ``pm_dpgp.accounting.rdp_to_epsilon``
  (Canonne–Kamath–Steinke 2020, Prop. 12) over α ∈ (1, α_max).
* (SP10) tighter covariance term ``g(1+τ) + g(1/(1+τ)) = −ln(1 − α(α−1)τ²/(1+τ))/(2(α−1))
  ≤ 2ψ_α(τ)`` (``cov_bound="inertia"``, the default; Sylvester's law of inertia, see the docs).
* (SP11) sharper mean sensitivity (``sensitivity="coupled"``, docs §3.11): with
  ``s = √(n−1)/r``, ``Λ = (n−1)/(n−1+r²)`` and ``h(u) = s√(u·min(1−u, Λ))``,
  ``Δ = min(Δ_cpl, Δ_op)``, ``Δ_cpl = 2 M_Y max_{0≤u≤V} √u (1 + h(u))/(u + r²)`` (the core
  mean at ``x`` is at most ``M_Y h(v)``: coupled to the core variance ``v``) and
  ``Δ_op = 2 M_Y √Φ + M_Y s √Λ V/(V + r²)`` (the core-mean part of the one-step update is a
  difference of two rank-one operators of norm ≤ V/(V+r²) applied to ``m_core``).  For the 1-D
  exponential kernel ``h`` is capped at 1 (``|m_core| ≤ M_Y``).

Monotonicity (tested): ε decreases with r² and with η, increases with L (sub-linearly after
conversion), and decreases with σ *when η = 0*; with extra noise a larger σ can raise ε (the
data-dependent covariance share grows), see the docs.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize_scalar

from pm_dpgp._validation import (
    PrivacyWarning,
    bounds_from_centred,
    centred_bound,
    check_delta,
    check_epsilon,
    check_flag,
    check_positive,
    check_public_bounds,
    check_scale,
    real_or_nan,
    reject_unexpected,
    renamed,
    renamed_fields,
    require,
)
from pm_dpgp.accounting import DEFAULT_ORDERS, RdpCurveEvent, rdp_to_epsilon
from pm_dpgp.domain import parse_domain

__all__ = [
    "KernelClass",
    "ConstantChoice",
    "KernelFn",
    "SamplePathBound",
    "FeasibleConfiguration",
    "check_kappa",
    "kernel_lower_bound",
    "parse_domain",
    "psi",
    "psi_parts",
    "CovBound",
    "Sensitivity",
    "coupled_sensitivity",
    "operator_sensitivity",
    "feasible_configurations",
    "paths_affordable",
    "path_costs",
]

KernelClass = Literal["generic", "exponential_1d", "constant"]
ConstantChoice = Literal["proved", "author"]
CovBound = Literal["paper", "inertia"]
Sensitivity = Literal["paper", "coupled"]
KernelFn = Callable[[NDArray[np.float64], NDArray[np.float64]], ArrayLike]

_KERNEL_CLASSES = ("generic", "exponential_1d", "constant")
_CONSTANTS = ("proved", "author")
_COV_BOUNDS = ("paper", "inertia")
_SENSITIVITIES = ("paper", "coupled")
#: intervals of the certified maximisation in ``coupled_sensitivity``
_COUPLED_GRID = 4096
#: The cell edges of ``coupled_sensitivity`` divided by ``V``: ``(i/G)²``, computed once.
_COUPLED_UNIT_EDGES = np.linspace(0.0, 1.0, _COUPLED_GRID + 1) ** 2
_COUPLED_UNIT_EDGES.flags.writeable = False
#: dp_accounting's conversion returns +inf at orders ≤ 1.01 (numerical stability).
_MIN_USEFUL_ORDER = 1.01
#: Relative positions ``s ∈ (0, 1)`` of ``SamplePathBound.orders`` inside ``(1, α_max)``:
#: geometric towards both ends (computed once; the grid is ``1 + (α_max − 1) s``).
_ORDER_PATTERN = np.concatenate(
    [np.geomspace(1e-6, 0.5, 90), 1.0 - np.geomspace(1e-6, 0.5, 90)[1:]]
)
_ORDER_PATTERN.flags.writeable = False
#: ``_ORDER_PATTERN`` sorted, without its repeated 0.5 (an increasing affine image stays sorted).
_ORDER_PATTERN_SORTED = np.unique(_ORDER_PATTERN)
_ORDER_PATTERN_SORTED.flags.writeable = False


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------
def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n (the dataset size) must be a whole number >= 1, got {n!r}.")
    return int(n)


def check_kappa(kappa: float) -> float:
    """Return the kernel lower bound κ as a float in [0, 1], else ``ValueError``.

    κ must be a *public* lower bound on ``k(x, x')`` over the public input domain (the
    kernel being normalised so that ``k(x, x) ≤ 1``).  κ = 0 is always valid.
    """
    k = real_or_nan(kappa, "kappa")  # True was κ = 1 and "0.03" was 0.03 (stop-40 fuzz)
    if not (0.0 <= k <= 1.0) or math.isnan(k):
        raise ValueError(
            f"kappa must lie in [0, 1] (a lower bound on k(x, x') for a kernel with "
            f"k(x, x) <= 1; kappa = 0 is always valid), got {kappa!r}."
        )
    return k


def _check_L(L: Any) -> int:
    if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 1:
        raise ValueError(
            f"L (the number of released paths) must be a whole number >= 1, got {L!r}."
        )
    return int(L)


# --------------------------------------------------------------------------------------------
# κ from a stationary kernel on a box
# --------------------------------------------------------------------------------------------
def _k0(kernel_fn: KernelFn, H: NDArray[np.float64], lows: NDArray, highs: NDArray) -> NDArray:
    """``k0(h) = k(x, x + h)`` for difference vectors ``h`` (rows of ``H``), ``x, x + h`` in box.

    ``x_j = low_j`` where ``h_j ≥ 0`` and ``high_j`` otherwise, so both points are in the domain.
    """
    X = np.where(H >= 0.0, lows, highs)
    K = np.asarray(kernel_fn(X, X + H), dtype=np.float64)
    if K.shape != (H.shape[0], H.shape[0]):
        raise ValueError(
            "kernel_fn(X1, X2) must return the (len(X1), len(X2)) matrix of kernel values, got "
            f"shape {K.shape} for inputs of shape {X.shape}."
        )
    return np.diag(K).copy()


def kernel_lower_bound(
    kernel_fn: KernelFn,
    domain: ArrayLike,
    *,
    assume_monotone: bool = False,
    n_grid: int = 33,
    atol: float = 1e-9,
) -> float:
    r"""Lower bound κ on a stationary kernel over a box domain (``docs/sample_paths.md``, §1).

    For a stationary kernel ``k(x, x') = k0(x − x')`` the difference ``h = x − x'`` ranges
    over the box ``[−w, w]`` (``w = high − low``), so ``κ = max(0, min_{|h_j| ≤ w_j} k0(h))``.

    * If ``assume_monotone`` (the caller states that ``k0`` is non-increasing in every
      ``|h_j|``: isotropic or ARD EQ, Matérn, exponential, rational quadratic), the minimum is
      at the corner ``h = w``: for an isotropic kernel this is ``k(diameter)``, for ARD
      lengthscales the value at the box's corner difference.
    * Otherwise the minimum over the ``2^d`` corners is taken and *verified numerically*: k0 is
      evaluated on an ``n_grid^d`` grid of ``[−w, w]`` (at most ~2·10⁵ points) and every value
      must be ≥ the corner minimum − ``atol``; if not, ``ValueError`` asks for an explicit κ.
      A grid check is evidence, not a proof: pass ``assume_monotone=True`` when monotonicity is
      known, or give κ yourself (``κ = 0`` is always valid).

    Also checks ``k(x, x) ≤ 1`` (put the scale into ``kernel_scale``) and stationarity at a few
    pairs.

    Parameters
    ----------
    kernel_fn
        ``kernel_fn(X1, X2)`` → ``(len(X1), len(X2))`` kernel matrix for inputs of shape
        ``(·, d)``.  E.g. ``lambda A, B: pm.gp.cov.ExpQuad(1, ls=0.3)(A, B).eval()``.
    domain
        Public box domain, see ``parse_domain``.
    """
    lows, highs = parse_domain(domain)
    d = lows.size
    w = highs - lows
    if isinstance(n_grid, bool) or not isinstance(n_grid, numbers.Integral) or n_grid < 2:
        raise ValueError(f"n_grid must be an integer >= 2, got {n_grid!r}.")
    # k(x, x) ≤ 1 at the corners and the centre.
    pts = np.vstack([lows, highs, 0.5 * (lows + highs)])
    diag = np.diag(np.asarray(kernel_fn(pts, pts), dtype=np.float64))
    if np.any(~np.isfinite(diag)) or np.any(diag > 1.0 + 1e-12):
        raise ValueError(
            f"the kernel must satisfy k(x, x) <= 1 (got up to {np.nanmax(diag):.6g}); write the "
            "prior as kernel_scale^2 * k with a normalised k and pass the scale as kernel_scale."
        )
    # Stationarity spot check: k(a, a + h) must not depend on a (a, a + h in the box).
    h = 0.37 * w
    A = lows + np.outer([0.0, 0.3, 0.7, 1.0], w - h)
    k_ah = np.diag(np.asarray(kernel_fn(A, A + h), dtype=np.float64))
    if np.ptp(k_ah) > 1e-8 * max(1.0, float(np.max(np.abs(k_ah)))):
        raise ValueError(
            "kernel_fn does not look stationary (k(x, x + h) changes with x); "
            "kernel_lower_bound only handles stationary kernels: give kappa explicitly."
        )
    if check_flag(assume_monotone, "assume_monotone"):  # "no" skipped the grid check (stop 40)
        kappa = float(_k0(kernel_fn, w[None, :], lows, highs)[0])
        return max(0.0, min(1.0, kappa))
    if d > 12:
        raise ValueError(
            f"d = {d} input dimensions: too many corners to check; pass assume_monotone=True "
            "if k is non-increasing in each |x_j − x'_j|, or give kappa explicitly."
        )
    corners = np.array(list(itertools.product(*[(-wj, wj) for wj in w])))
    k_corners = _k0(kernel_fn, corners, lows, highs)
    kappa = float(np.min(k_corners))
    per_dim = max(2, min(int(n_grid), int(math.floor(2e5 ** (1.0 / d)))))
    axes = [np.linspace(-wj, wj, per_dim) for wj in w]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
    chunk = 256  # kernel_fn returns full matrices; only their diagonals are used
    k_grid = np.concatenate(
        [_k0(kernel_fn, grid[i : i + chunk], lows, highs) for i in range(0, len(grid), chunk)]
    )
    if np.min(k_grid) < kappa - atol:
        raise ValueError(
            f"the kernel is not minimised at a corner of the difference box (grid minimum "
            f"{np.min(k_grid):.6g} < corner minimum {kappa:.6g}); give kappa explicitly "
            "(a proven lower bound; kappa = 0 is always valid)."
        )
    return max(0.0, min(1.0, kappa))


# --------------------------------------------------------------------------------------------
# the covariance term ψ
# --------------------------------------------------------------------------------------------
def psi_parts(
    alpha: float | NDArray[np.float64], tau: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""``(g(1+τ), g(1/(1+τ)))``: the covariance contribution of one eigenvalue at each end.

    ``g(λ) = [α ln λ − ln(1 + α(λ−1))] / (2(α−1))`` is the contribution of one eigenvalue λ of
    the whitened covariance ratio to the Gaussian Rényi divergence (eq. SP6).  Needs
    ``β = (α−1)τ < 1``.  Computed with ``log1p`` for accuracy near α = 1; clipped at 0
    (``g ≥ 0``, round-off aside).
    """
    a = np.asarray(alpha, dtype=np.float64)
    am1 = a - 1.0
    hi = 0.5 * math.log1p(tau) - np.log1p(am1 * tau / (1.0 + tau)) / (2.0 * am1)
    lo = -0.5 * math.log1p(tau) - np.log1p(-am1 * tau) / (2.0 * am1)
    return np.maximum(hi, 0.0), np.maximum(lo, 0.0)


def psi(alpha: float | NDArray[np.float64], tau: float) -> float | NDArray[np.float64]:
    r"""ψ_α(τ) of eq. (SP6): the largest per-eigenvalue covariance term.

    ``g`` decreases on ``(·, 1]`` and increases on ``[1, ·)`` (``g'(λ) = α(λ−1)/(2λ(1+α(λ−1)))``),
    so its maximum over the eigenvalue range ``[1/(1+τ), 1+τ]`` is at an endpoint:
    ``ψ = max(g(1+τ), g(1/(1+τ)))`` (``psi_parts``).
    """
    hi, lo = psi_parts(alpha, tau)
    out = np.maximum(hi, lo)
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------------------------
# sharper mean sensitivities (docs/sample_paths.md §3.11)
# --------------------------------------------------------------------------------------------
def _lambda_max(n: int, r2: float) -> float:
    """``Λ = (n−1)/(n−1+r²)``: the largest eigenvalue of ``K(K + r²I)⁻¹`` (``tr K ≤ n−1``)."""
    return (n - 1) / (n - 1 + r2)


def coupled_sensitivity(
    n: int, r2: float, V: float, y_bound: float, *, mean_bounded: bool = False
) -> float:
    r"""Certified upper bound on ``Δ_cpl = 2 M_Y max_{0≤u≤V} √u (1 + h(u))/(u + r²)`` (SP11).

    ``h(u) = s √(u · min(1−u, Λ))`` with ``s = √(n−1)/r``, ``Λ = (n−1)/(n−1+r²)``: the core
    posterior mean at a point with core variance ``u`` is at most ``M_Y h(u)`` in absolute
    value (docs §3.11, Lemma C1).  ``mean_bounded=True`` caps ``h`` at 1 (kernels whose
    posterior mean is bounded by ``max |y|``: the 1-D exponential kernel, §3.7).

    The maximum over ``u`` is enclosed, not sampled: on each cell ``[u_i, u_{i+1}]`` of a grid
    (denser near 0), ``√u/(u + r²)`` is at most its value at ``clip(r², u_i, u_{i+1})`` (it
    increases up to ``r²`` and decreases after) and ``h(u) ≤ s √(u_{i+1} min(1 − u_i, Λ))``;
    the largest cell bound is returned, with a few ulps of margin for round-off.
    """
    n = _check_n(n)
    r2 = check_positive(r2, "r2")
    M = check_positive(y_bound, "y_bound")
    if not 0.0 <= V <= 1.0:
        raise ValueError(f"V must lie in [0, 1], got {V!r}.")
    if V == 0.0:
        return 0.0
    s = math.sqrt((n - 1) / r2)
    lam = _lambda_max(n, r2)
    edges = V * _COUPLED_UNIT_EDGES
    lo, hi = edges[:-1], edges[1:]
    c = np.clip(r2, lo, hi)
    f1 = np.sqrt(c) / (c + r2)
    h = s * np.sqrt(hi * np.minimum(1.0 - lo, lam))
    if check_flag(mean_bounded, "mean_bounded"):
        h = np.minimum(h, 1.0)
    return float(2.0 * M * np.max(f1 * (1.0 + h)) * (1.0 + 16.0 * np.finfo(float).eps))


def operator_sensitivity(n: int, r2: float, V: float, y_bound: float) -> float:
    r"""``Δ_op = 2 M_Y √Φ + M_Y s √Λ · V/(V + r²)`` (SP11; docs §3.11, Lemma C2).

    The one-step update splits ``Δm`` into the response part (``≤ 2 M_Y √Φ``, the triangle
    inequality) and ``−(T_x − T_x') m_core`` with ``T_x = k_c(·,x) ⊗ k_c(·,x)/(v + r²)``: a
    difference of two positive rank-one operators, each of norm ``v/(v+r²) ≤ V/(V+r²)``, so of
    norm ``≤ V/(V+r²)``; and ``‖m_core‖_{H_c} ≤ M_Y s √Λ``.
    """
    n = _check_n(n)
    r2 = check_positive(r2, "r2")
    M = check_positive(y_bound, "y_bound")
    if not 0.0 <= V <= 1.0:
        raise ValueError(f"V must lie in [0, 1], got {V!r}.")
    phi = 1.0 / (4.0 * r2) if V >= r2 else V / (V + r2) ** 2
    s = math.sqrt((n - 1) / r2)
    return 2.0 * M * math.sqrt(phi) + M * s * math.sqrt(_lambda_max(n, r2)) * V / (V + r2)


# --------------------------------------------------------------------------------------------
# the bound
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplePathBound:
    r"""RDP bound for releasing GP posterior sample paths (eqs. SP1–SP9).

    Parameters
    ----------
    n
        Dataset size (public).
    kernel_scale
        Kernel scale (amplitude sd) σ > 0 (prior ``GP(0, σ² k)``; formerly ``sigma``).
    r2
        Effective ridge r² > 0 (noise variance ``σ² r²``, i.e. ``noise_sd = σ r``).
    M_Y
        Public bound on the centred responses, ``|y − μ₀| ≤ M_Y`` (formerly ``y_bound``); for a
        public range ``y_bounds = (lower, upper)`` it is ``max(|lower − μ₀|, |upper − μ₀|)``.
    kappa
        Public lower bound κ ∈ [0, 1] on the normalised kernel over the domain
        (``kernel_lower_bound``).
    eta
        Scale η ≥ 0 of the extra prior-GP noise ``η g``, ``g ~ GP(0, k)``.
    kernel_class
        Which residual bound B to use (eq. SP3): ``"generic"`` (any kernel with
        ``k(x, x) ≤ 1``), ``"exponential_1d"`` (``exp(−|x − x'|/ℓ)`` on an interval) or
        ``"constant"`` (``k ≡ 1``).
    constant
        ``"proved"`` (default): ``Δ = 2 B √Φ``.  ``"author"``: ``Δ = √2 B √Φ`` as in the author's
        code; *not* a valid bound in general (see ``docs/sample_paths.md``); emits a
        ``PrivacyWarning``.
    cov_bound
        ``"inertia"`` (default): covariance term ``g(1+τ) + g(1/(1+τ))`` (eq. SP10; ``Σ₂ − Σ₁``
        is a rank-one update minus a rank-one update, so at most one eigenvalue of the whitened
        ratio exceeds 1 and at most one is below 1); adversarial neighbours attain it.
        ``"paper"``: the paper's ``2ψ_α(τ)`` (eq. SP7), never smaller.
    sensitivity
        ``"coupled"`` (the default, ``None``, unless ``constant="author"``):
        ``Δ = min(Δ_cpl, Δ_op, 2B√Φ)`` (eq. SP11, docs §3.11), proved and never larger than
        ``"paper"``: ``Δ = 2B√Φ`` (eq. SP4, the triangle inequality on the one-step update;
        the default with ``constant="author"``, which rescales it); for
        ``kernel_class="constant"`` both are ``2M_Y√Φ``.
    """

    n: int
    kernel_scale: float
    r2: float
    M_Y: float
    kappa: float
    eta: float = 0.0
    kernel_class: KernelClass = "generic"
    constant: ConstantChoice = "proved"
    cov_bound: CovBound = "inertia"
    sensitivity: Sensitivity | None = None

    def __post_init__(self) -> None:
        if self.sensitivity is None:
            # the tightest proved bound; the author's constant rescales the paper's Δ only
            object.__setattr__(
                self, "sensitivity", "paper" if self.constant == "author" else "coupled"
            )
        object.__setattr__(self, "n", _check_n(self.n))
        object.__setattr__(self, "kernel_scale", check_scale(self.kernel_scale, "kernel_scale"))
        object.__setattr__(self, "r2", check_positive(self.r2, "r2"))
        object.__setattr__(self, "M_Y", check_positive(self.M_Y, "M_Y"))
        object.__setattr__(self, "kappa", check_kappa(self.kappa))
        object.__setattr__(self, "eta", check_positive(self.eta, "eta", allow_zero=True))
        if self.kernel_class not in _KERNEL_CLASSES:
            raise ValueError(
                f"kernel_class must be one of {_KERNEL_CLASSES}, got {self.kernel_class!r}."
            )
        if self.constant not in _CONSTANTS:
            raise ValueError(f"constant must be one of {_CONSTANTS}, got {self.constant!r}.")
        if self.cov_bound not in _COV_BOUNDS:
            raise ValueError(f"cov_bound must be one of {_COV_BOUNDS}, got {self.cov_bound!r}.")
        if self.sensitivity not in _SENSITIVITIES:
            raise ValueError(
                f"sensitivity must be one of {_SENSITIVITIES}, got {self.sensitivity!r}."
            )
        if self.constant == "author" and self.sensitivity != "paper":
            raise ValueError(
                "constant='author' modifies the paper's Delta = 2*B*sqrt(Phi); it cannot be "
                "combined with sensitivity='coupled'."
            )
        if self.constant == "author":
            warnings.warn(
                "constant='author' uses Delta = sqrt(2)*B*sqrt(Phi) from the author's code; it is "
                "not proved and adversarial neighbours violate it (docs/sample_paths.md). Use "
                "it only for comparison, never for a release.",
                PrivacyWarning,
                stacklevel=3,
            )

    # -- derived quantities ---------------------------------------------------------------------
    @property
    def V(self) -> float:
        """Posterior variance scale ``1 − κ²(n−1)/(n−1+r²)`` (eq. SP1).

        Evaluated as ``((1 − κ)(1 + κ)(n−1) + r²)/(n−1+r²)``, the same number without the
        cancellation of ``1 − κ²m/(m + r²)``: every term is non-negative, so the relative
        error is a few ulps.  The literal form lost all accuracy when ``V ≪ 1`` (κ near 1,
        ``r² ≪ n``): at κ = 1, n = 101, r² = 2.124e-14 it returned 0.52 V, and 0 (then a
        ``ZeroDivisionError`` in ``alpha_max``) at n = 1001, r² = 1e-14, so the bound fell
        below the exact divergence of the constant-kernel posterior (stop-47 audit).
        """
        m = self.n - 1
        k = self.kappa
        return min(1.0, ((1.0 - k) * (1.0 + k) * m + self.r2) / (m + self.r2))

    @property
    def Phi(self) -> float:
        """``max_{0≤v≤V} v/(v+r²)²`` (eq. SP2)."""
        V, r2 = self.V, self.r2
        return 1.0 / (4.0 * r2) if V >= r2 else V / (V + r2) ** 2

    @property
    def B(self) -> float:
        """Bound on the core residual ``|y − m_core(x)|`` (eq. SP3)."""
        generic = self.M_Y * (1.0 + math.sqrt(self.n - 1) / math.sqrt(self.r2))
        if self.kernel_class == "generic":
            return generic
        if self.kernel_class == "exponential_1d":
            return min(2.0 * self.M_Y, generic)
        return self.M_Y  # constant kernel: Δm ∝ (y − y'), the core mean cancels

    @property
    def Delta_paper(self) -> float:
        """``c · B · √Φ`` (eq. SP4): ``c = 2`` (proved) or ``√2`` (the author's constant)."""
        c = 2.0 if self.constant == "proved" else math.sqrt(2.0)
        return c * self.B * math.sqrt(self.Phi)

    @property
    def Delta_coupled(self) -> float:
        """``min(Δ_cpl, Δ_op)`` of eq. (SP11) (docs §3.11); ``2M_Y√Φ`` for the constant kernel."""
        return _coupled_delta(self)

    @property
    def Delta(self) -> float:
        """Mean sensitivity in the core posterior RKHS: ``Δ ≥ sup ‖m_D − m_D'‖_{H_c}``.

        ``c · B · √Φ`` (eq. SP4) for ``sensitivity="paper"``; the smaller of that and
        ``Delta_coupled`` (eq. SP11) for ``sensitivity="coupled"``.
        """
        if self.sensitivity == "paper":
            return self.Delta_paper
        return min(self.Delta_paper, self.Delta_coupled)

    @property
    def A(self) -> float:
        """``σ²r² + η²(V + r²)`` (eq. SP7)."""
        return self.kernel_scale**2 * self.r2 + self.eta**2 * (self.V + self.r2)

    @property
    def tau(self) -> float:
        """``σ²V/(σ²r² + η²(V+r²))``; ``V/r²`` without extra noise (eq. SP5)."""
        return self.kernel_scale**2 * self.V / self.A

    @property
    def alpha_max(self) -> float:
        """Upper end of the valid order range: ``1 + 1/τ`` (``= 1 + r²/V`` when η = 0)."""
        return 1.0 + 1.0 / self.tau

    # -- the RDP curve --------------------------------------------------------------------------
    def _alpha(self, alpha: float | ArrayLike) -> NDArray[np.float64]:
        try:
            a = np.asarray(alpha, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"alpha must be a number or array of numbers, got {alpha!r}.") from err
        bad = ~np.isfinite(a) | (a <= 1.0) | (a >= self.alpha_max) | ((a - 1.0) * self.tau >= 1.0)
        if np.any(bad):
            example = a[bad].flat[0] if a.ndim else float(a)
            raise ValueError(
                f"Renyi order alpha={example!r} is outside the valid range "
                f"(1, {self.alpha_max:.6g}) of the sample-path bound (alpha_max = 1 + 1/tau; "
                "more ridge r2 or extra noise eta widen it)."
            )
        return a

    @staticmethod
    def _out(x: NDArray[np.float64]) -> float | NDArray[np.float64]:
        return float(x) if x.ndim == 0 else x

    def cov_term(self, alpha: float | ArrayLike) -> float | NDArray[np.float64]:
        """Covariance (determinant) part: ``2ψ_α(τ)`` (SP7) or ``g(1+τ) + g(1/(1+τ))`` (SP10)."""
        return self._out(self._cov_term(self._alpha(alpha)))

    def mean_term(self, alpha: float | ArrayLike) -> float | NDArray[np.float64]:
        """Mean part ``(α/2)(V+r²)/(A(1−β)) Δ²`` of eq. (SP7)."""
        return self._out(self._mean_term(self._alpha(alpha)))

    def rdp(self, alpha: float | ArrayLike) -> float | NDArray[np.float64]:
        """One-path RDP bound ε(α) = cov_term + mean_term (eq. SP7); ``ValueError`` outside
        (1, α_max)."""
        a = self._alpha(alpha)  # validated once for both terms
        return self._out(self._cov_term(a) + self._mean_term(a))

    def _cov_term(self, a: NDArray[np.float64]) -> NDArray[np.float64]:
        """``cov_term`` at validated orders ``a``."""
        hi, lo = psi_parts(a, self.tau)
        return 2.0 * np.maximum(hi, lo) if self.cov_bound == "paper" else hi + lo

    def _mean_term(self, a: NDArray[np.float64]) -> NDArray[np.float64]:
        """``mean_term`` at validated orders ``a``."""
        beta = (a - 1.0) * self.tau
        # a float product, not ``**``: an absurd public bound gives inf (refused), never
        # Python's OverflowError (stop-26 audit)
        return 0.5 * a * (self.V + self.r2) / (self.A * (1.0 - beta)) * (self.Delta * self.Delta)

    # -- accounting -----------------------------------------------------------------------------
    def orders(self) -> NDArray[np.float64]:
        """An order grid adapted to (1, α_max): dense near both ends, plus the default grid."""
        # the sorted union of two sorted grids (what np.unique of the concatenation returns)
        grid = np.concatenate(
            [1.0 + (self.alpha_max - 1.0) * _ORDER_PATTERN_SORTED, DEFAULT_ORDERS]
        )
        grid.sort(kind="stable")
        keep = (grid > 1.0) & (grid < self.alpha_max) & ((grid - 1.0) * self.tau < 1.0)
        keep[1:] &= grid[1:] != grid[:-1]
        return grid[keep]

    def event(self, L: int = 1, label: str = "", orders: ArrayLike | None = None) -> RdpCurveEvent:
        """Ledger event for ``L`` released paths (``count = L``: L-fold, possibly adaptive).

        Carries the valid range ``alpha_max``; orders outside it are refused (``ValueError``),
        and the event's curve is ``+inf`` there.
        """
        L = _check_L(L)
        if orders is None:
            grid, values = _default_curve(self)
        else:
            grid_arr = np.unique(np.asarray(orders, float))
            grid = tuple(grid_arr.tolist())
            values = tuple(np.asarray(self.rdp(grid_arr), dtype=np.float64).tolist())
        return RdpCurveEvent(
            grid,
            values,
            alpha_min=1.0,
            alpha_max=self.alpha_max,
            label=label,
            count=L,
        )

    def epsilon_and_order(self, delta: float, L: int = 1) -> tuple[float, float]:
        """``(ε, α*)``: the (ε, δ) guarantee of ``L`` paths and the order attaining it (SP9).

        Grid search over ``orders``, then a bounded scalar refinement of the same
        conversion (``rdp_to_epsilon``) around the best grid order.
        Every candidate is a valid bound; the smallest is returned.  ``+inf`` if α_max ≤ 1.01.
        """
        delta = check_delta(delta)
        L = _check_L(L)
        grid = self.orders()
        grid = grid[grid > _MIN_USEFUL_ORDER]
        if grid.size == 0:
            return math.inf, math.nan
        rdp = L * np.asarray(self.rdp(grid))

        def conv(a: float) -> float:
            return rdp_to_epsilon([a], [L * float(self.rdp(a))], delta)

        best = rdp_to_epsilon(grid, rdp, delta)  # exactly what the ledger would compute
        # the same conversion (CKS 2020, Prop. 12), vectorised, to locate the best order
        eps_grid = rdp + np.log1p(-1.0 / grid) - np.log(delta * grid) / (grid - 1.0)
        i = int(np.argmin(eps_grid))
        best_a = float(grid[i])
        lo = float(grid[max(i - 1, 0)])
        hi = float(grid[min(i + 1, grid.size - 1)])
        if hi > lo:
            res = minimize_scalar(conv, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
            if res.success and float(res.fun) < best:
                best, best_a = float(res.fun), float(res.x)
        return best, best_a

    def epsilon(self, delta: float, L: int = 1) -> float:
        """ε of ``L`` released paths at ``delta``, optimal over α ∈ (1, α_max) (eq. SP9)."""
        return self.epsilon_and_order(delta, L)[0]

    def to_metadata(self) -> dict[str, Any]:
        """JSON-serialisable parameters and derived quantities."""
        return {
            "mechanism": "posterior_sample_paths",
            "privacy_model": "full (inputs and outputs private), replace-one neighbours",
            "n": self.n,
            "kernel_scale": self.kernel_scale,
            "r2": self.r2,
            "M_Y": self.M_Y,
            "kappa": self.kappa,
            "eta": self.eta,
            "kernel_class": self.kernel_class,
            "constant": self.constant,
            "cov_bound": self.cov_bound,
            "sensitivity": self.sensitivity,
            "V": self.V,
            "Phi": self.Phi,
            "B": self.B,
            "Delta": self.Delta,
            "tau": self.tau,
            "alpha_max": self.alpha_max,
        }


renamed_fields(SamplePathBound, {"sigma": "kernel_scale", "y_bound": "M_Y"})


# --------------------------------------------------------------------------------------------
# planning helpers: no data touched
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FeasibleConfiguration:
    """A grid point (σ, r², η) whose ``L``-path ε at δ meets the target."""

    bound: SamplePathBound
    epsilon: float
    alpha: float

    @property
    def kernel_scale(self) -> float:
        return self.bound.kernel_scale

    @property
    def noise_sd(self) -> float:
        """The observation noise sd ``σ r`` of this configuration."""
        return self.bound.kernel_scale * math.sqrt(self.bound.r2)

    @property
    def r2(self) -> float:
        return self.bound.r2

    @property
    def eta(self) -> float:
        return self.bound.eta


def _grid(values: float | Sequence[float], name: str, *, allow_zero: bool) -> list[float]:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a number or a non-empty 1-D sequence of numbers.")
    return [check_positive(v, name, allow_zero=allow_zero) for v in arr.tolist()]


def feasible_configurations(
    *,
    n: int,
    y_bounds: tuple[float, float] | None = None,
    kappa: float,
    epsilon: float,
    delta: float,
    kernel_scales: float | Sequence[float] | None = None,
    r2s: float | Sequence[float],
    etas: float | Sequence[float] = 0.0,
    L: int = 1,
    kernel_class: KernelClass = "generic",
    constant: ConstantChoice = "proved",
    cov_bound: CovBound = "inertia",
    sensitivity: Sensitivity = "coupled",
    prior_mean: float | None = None,
    **deprecated: Any,
) -> list[FeasibleConfiguration]:
    """Answer "which (σ, r², η) meet my budget?": the grid points with ``ε(δ, L) ≤ epsilon``.

    Uses only public quantities (n, ``y_bounds``, κ, the grids), never the data, so it can
    drive a constrained hyperparameter search (Maciazek §5; ``docs/sample_paths.md``).  Grid
    order is kept (σ outermost, then r², then η).  ``M_Y`` is derived from the public range
    ``y_bounds`` and the model's public ``prior_mean`` (default: the midpoint of ``y_bounds``,
    where ``M_Y`` is the half-width) as ``sample_path_release`` does.  Formerly
    ``y_bound=M`` (``y_bounds=(μ₀ − M, μ₀ + M)``) and ``sigmas=``.
    """
    func = "feasible_configurations"
    kernel_scales = require(
        renamed("sigmas", "kernel_scales", deprecated, kernel_scales, func=func),
        "kernel_scales",
        func=func,
    )
    y_bounds = bounds_from_centred(
        "y_bound", deprecated, y_bounds, 0.0 if prior_mean is None else prior_mean, func=func
    )
    reject_unexpected(deprecated, func=func)
    lower, upper = require(y_bounds, "y_bounds", func=func)
    lower, upper = check_public_bounds((lower, upper))
    centre = 0.5 * (lower + upper) if prior_mean is None else prior_mean
    M_Y = centred_bound(y_bounds, centre)[2]
    target = check_epsilon(epsilon)
    delta = check_delta(delta)
    L = _check_L(L)
    out: list[FeasibleConfiguration] = []
    with warnings.catch_warnings():
        if constant == "author":  # warn once for the whole grid, not per point
            warnings.warn(
                "constant='author' is not a proved bound (docs/sample_paths.md).",
                PrivacyWarning,
                stacklevel=2,
            )
            warnings.simplefilter("ignore", PrivacyWarning)
        for s in _grid(kernel_scales, "kernel_scales", allow_zero=False):
            for r2 in _grid(r2s, "r2s", allow_zero=False):
                for eta in _grid(etas, "etas", allow_zero=True):
                    b = SamplePathBound(
                        n, s, r2, M_Y, kappa, eta, kernel_class, constant, cov_bound,
                        sensitivity,
                    )  # fmt: skip
                    eps, a = b.epsilon_and_order(delta, L)
                    if eps <= target:
                        out.append(FeasibleConfiguration(b, eps, a))
    return out


def path_costs(bound: SamplePathBound, delta: float, Ls: Sequence[int]) -> NDArray[np.float64]:
    """Answer "what ε would L paths cost?": ``ε(δ, L)`` for each ``L`` in ``Ls``."""
    return np.array([bound.epsilon(delta, _check_L(L)) for L in Ls], dtype=np.float64)


def paths_affordable(
    bound: SamplePathBound, epsilon: float, delta: float, *, L_max: int = 1_000_000
) -> int:
    """Largest ``L ≤ L_max`` with ``ε(δ, L) ≤ epsilon`` (0 if not even one path fits).

    ε(δ, L) is non-decreasing in L (the RDP curve scales with L), so exponential then binary
    search finds it with O(log L) conversions.
    """
    target = check_epsilon(epsilon)
    delta = check_delta(delta)
    L_max = _check_L(L_max)

    def ok(L: int) -> bool:
        return bound.epsilon(delta, L) <= target

    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= L_max and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, L_max + 1)  # ok(lo) holds; ok(hi) fails or hi > L_max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


@functools.lru_cache(maxsize=32)
def _coupled_delta(bound: SamplePathBound) -> float:
    """``SamplePathBound.Delta_coupled``, memoised per bound (equal public numbers, equal
    bound: a DP Thompson round builds the same bound twice, as for ``_default_curve``)."""
    if bound.kernel_class == "constant":
        return 2.0 * bound.M_Y * math.sqrt(bound.Phi)
    cpl = coupled_sensitivity(
        bound.n,
        bound.r2,
        bound.V,
        bound.M_Y,
        mean_bounded=bound.kernel_class == "exponential_1d",
    )
    return min(cpl, operator_sensitivity(bound.n, bound.r2, bound.V, bound.M_Y))


@functools.lru_cache(maxsize=32)
def _default_curve(bound: SamplePathBound) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(orders, rdp(orders))`` on ``SamplePathBound.orders``, memoised per bound.

    The bound is an immutable dataclass of public numbers, so equal bounds have equal curves: a
    DP Thompson round builds the same event twice (once to ask the ledger whether it can
    afford it, once inside ``pm_dpgp.mechanisms.full.sample_path.sample_path_release``).
    """
    grid = bound.orders()
    return tuple(grid.tolist()), tuple(np.asarray(bound.rdp(grid), dtype=np.float64).tolist())
