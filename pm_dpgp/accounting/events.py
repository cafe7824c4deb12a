"""Privacy events: what one release costs, in a form the ``Ledger`` composes.

Every event is an immutable dataclass with

* ``rdp(orders)`` – an upper bound on its Rényi-DP curve ε(α) (Mironov 2017, Def. 4) on an order
  grid, ``+inf`` where no bound is known;
* ``epsilon(delta)`` – the best (ε, δ)-DP bound this package knows for the event on its own;
* ``to_metadata()`` – a JSON-serialisable description (type and parameters);
* ``count`` and ``repeat(k)`` / ``k * event`` – k-fold (possibly adaptive) self-composition.

All bounds refer to one neighbouring relation: the privacy model recorded with the release
(``docs/privacy_model.md``).  Composing events that were analysed under different relations is
meaningless.

References
----------
* I. Mironov, "Rényi differential privacy", CSF 2017 (RDP, Gaussian RDP, adaptive composition).
* B. Balle and Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy: analytical
  calibration and optimal denoising", ICML 2018 (exact δ(ε) of the Gaussian mechanism, Thm. 8).
* J. Dong, A. Roth and W. Su, "Gaussian differential privacy", JRSS-B 2022 / arXiv:1905.02383
  (μ-GDP, composition of Gaussians is Gaussian, Cor. 3.3).
* P. Kairouz, S. Oh and P. Viswanath, "The composition theorem for differential privacy",
  ICML 2015 (every ε-DP pair is a post-processing of randomized response).
* T. van Erven and P. Harremoës, "Rényi divergence and Kullback–Leibler divergence",
  IEEE Trans. IT 2014 (monotonicity in α, data processing).
* M. Bun and T. Steinke, "Concentrated differential privacy: simplifications, extensions, and
  lower bounds", TCC 2016 (ρ-zCDP, Def. 1.1; composition, Lemma 1.7).
* C. Canonne, G. Kamath and T. Steinke, "The discrete Gaussian for differential privacy",
  NeurIPS 2020 (the discrete Gaussian is Δ²/(2σ²)-zCDP, Thm. 14 for vectors).
* N. Papernot and T. Steinke, "Hyperparameter tuning with Renyi differential privacy", ICLR 2022
  / arXiv:2110.03620v2 (random stopping: Def. 1, Thm. 2) — ``RepeatAndSelectEvent``.
* C. Dwork, F. McSherry, K. Nissim and A. Smith, "Calibrating noise to sensitivity", TCC 2006;
  C. Dwork, G. Rothblum and S. Vadhan, "Boosting and differential privacy", FOCS 2010
  (basic composition, also under adaptivity).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from dp_accounting.rdp import compute_epsilon
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq
from scipy.special import log_ndtr

from pm_dpgp._validation import (
    check_delta,
    check_epsilon,
    check_positive,
    public_real_array,
    real_or_nan,
)

__all__ = [
    "DEFAULT_ORDERS",
    "PrivacyEvent",
    "GaussianEvent",
    "ZCDPEvent",
    "RdpCurveEvent",
    "PureDpEvent",
    "ApproxDpEvent",
    "RepeatAndSelectEvent",
    "stopping_mean",
    "LaplaceEvent",
    "gdp_delta",
    "gdp_epsilon",
    "rdp_to_epsilon",
    "event_from_metadata",
]


def _build_default_orders() -> NDArray[np.float64]:
    parts = [
        np.arange(101, 110) / 100.0,  # 1.01 … 1.09: curves that only exist just above α = 1
        np.arange(110, 200, 5) / 100.0,  # 1.10 … 1.95
        np.arange(8, 32) / 4.0,  # 2.00 … 7.75 in steps of 1/4
        np.arange(8.0, 33.0),  # 8 … 32
        np.arange(34.0, 65.0, 2.0),  # 34 … 64
        np.arange(72.0, 257.0, 8.0),  # 72 … 256
        np.array([320.0, 384, 448, 512, 640, 768, 896, 1024, 1536, 2048]),
        np.array([3072.0, 4096, 6144, 8192, 10_000]),
    ]
    orders = np.unique(np.concatenate(parts))
    orders.setflags(write=False)
    return orders


#: Default Rényi orders α: dense just above 1 (for curves valid only on (1, 1 + r²/V),
#: ``docs/sample_paths.md``), then up to 256, then a few large orders up to 10⁴ (for very small δ).
#:  Read-only.
DEFAULT_ORDERS: NDArray[np.float64] = _build_default_orders()


# --------------------------------------------------------------------------------------------
# Validation and small numerical helpers
# --------------------------------------------------------------------------------------------
def _check_count(count: Any, name: str = "count") -> int:
    """Return ``count`` as an ``int`` ≥ 1, refusing floats, bools, durations and non-numbers."""
    # np.timedelta64 is a numbers.Integral (a NumPy signed integer): a duration, not a count
    if isinstance(count, bool | np.timedelta64) or not isinstance(count, numbers.Integral):
        raise ValueError(
            f"{name} must be a whole number >= 1 (how many times the mechanism runs), "
            f"got {count!r}."
        )
    if count < 1:
        raise ValueError(f"{name} must be >= 1 (how many times the mechanism runs), got {count}.")
    if count > MAX_COUNT:  # 10**400 built an event whose every epsilon raised OverflowError
        raise ValueError(
            f"{name} must be at most 2**53 = {MAX_COUNT} (a float64 counts exactly up to "
            f"it), got a number of {int(count).bit_length()} bits."
        )
    return int(count)


#: The largest composition count: ``count × rdp`` is computed in float64, exact in the count
#: up to ``2**53``.
MAX_COUNT = 2**53


def _check_label(label: Any) -> str:
    if not isinstance(label, str):
        raise ValueError(f"label must be a string, got {type(label).__name__}.")
    return label


def _check_orders(orders: ArrayLike, name: str = "orders") -> NDArray[np.float64]:
    """Return ``orders`` as a 1-D float array of finite Rényi orders α > 1."""
    try:  # "248" was the order 248, True the order 1 (stop-40 fuzz)
        arr = public_real_array(orders, name)
    except ValueError as err:
        raise ValueError(f"{name} must be numbers (Rényi orders α > 1), got {orders!r}.") from err
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of Rényi orders α > 1.")
    bad = ~np.isfinite(arr) | (arr <= 1.0)
    if bad.any():
        raise ValueError(
            f"{name} must be finite Rényi orders α > 1 (α = 1 is the KL limit and gives no "
            f"(ε, δ) bound); got {int(bad.sum())} invalid value(s), e.g. {arr[bad][0]}."
        )
    return arr


def json_float(x: float) -> float | str:
    """Return ``x`` unchanged if finite, else ``"inf"``, ``"-inf"`` or ``"nan"`` (strict JSON)."""
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def rdp_to_epsilon(orders: ArrayLike, rdp: ArrayLike, delta: float) -> float:
    """Convert an RDP curve to ε at ``delta``, minimising over the orders given.

    Computes what ``dp_accounting.rdp.compute_epsilon`` computes, vectorised over the
    orders (its Python loop cost 1.5 ms per call, most of the ledger's time), i.e. for each
    order α the conversion
    ε = ρ(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) (Canonne, Kamath & Steinke 2020, Prop. 12;
    Asoodeh et al., arXiv:2001.05990v1, Eq. 20), which is never worse than Mironov's
    ρ(α) + ln(1/δ)/(α − 1) (Mironov 2017, Prop. 3).  Orders where ρ is +inf are skipped; if no
    order gives a finite value the result is +inf.
    """
    delta = check_delta(delta)
    orders = np.atleast_1d(public_real_array(orders, "orders"))
    rdp = np.atleast_1d(public_real_array(rdp, "rdp"))
    if orders.ndim != 1 or orders.shape != rdp.shape:
        raise ValueError(
            f"orders and rdp must be 1-D of equal length, got shapes {orders.shape} and "
            f"{rdp.shape}."
        )
    if not np.all(np.isfinite(orders)) or np.any(orders < 1.0):
        # a NaN order passed the old `orders < 1` test and made ε = max(0, nan) = 0 (stop 40)
        raise ValueError(f"Renyi orders must be finite numbers >= 1, got {orders.tolist()}.")
    if np.any(rdp < 0.0):
        # a Rényi divergence is >= 0 (van Erven & Harremoës 2014, Thm. 8); a negative value
        # was mapped to ε = 0 (any δ), where dp_accounting's compute_epsilon raises (stop-47
        # audit)
        raise ValueError(
            f"rdp values must be >= 0 (a Renyi divergence is never negative), got "
            f"{float(rdp[rdp < 0.0][0])!r}; use +inf where no bound is known."
        )
    finite = np.isfinite(rdp)  # +inf (and NaN: unknown) orders give no bound: skipped
    if not finite.all():
        if not finite.any():
            return math.inf
        orders, rdp = orders[finite], rdp[finite]
    # The loop of dp_accounting.rdp.compute_epsilon, vectorised over the orders (same
    # formula and cases, elementwise; tests/test_accounting.py compares the two):
    # ε(α) = r + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) for α > 1.01, else +inf.
    log1p_inv, log_a, inv_am1 = _conversion_terms(orders.tobytes())
    eps = rdp + log1p_inv - (math.log(delta) + log_a) * inv_am1
    eps[delta**2 + np.expm1(-rdp) > 0.0] = 0.0
    return float(max(0.0, float(np.min(eps))))


@functools.lru_cache(maxsize=64)
def _conversion_terms(orders_bytes: bytes) -> tuple[NDArray[np.float64], ...]:
    """``ln(1 − 1/α)``, ``ln α`` and ``1/(α − 1)`` (+inf where α ≤ 1.01), once per grid."""
    a = np.frombuffer(orders_bytes, dtype=np.float64)
    usable = a > 1.01
    with np.errstate(divide="ignore", invalid="ignore"):
        log1p_inv = np.where(usable, np.log1p(-1.0 / a), np.inf)
        inv_am1 = np.where(usable, 1.0 / (a - 1.0), 0.0)
    return log1p_inv, np.log(a), inv_am1


def _rdp_to_epsilon_reference(orders: ArrayLike, rdp: ArrayLike, delta: float) -> float:
    """``rdp_to_epsilon`` through ``dp_accounting.rdp.compute_epsilon`` (for tests)."""
    orders = np.asarray(orders, dtype=np.float64)
    rdp = np.asarray(rdp, dtype=np.float64)
    finite = np.isfinite(rdp)
    if not finite.any():
        return math.inf
    eps, _ = compute_epsilon(orders[finite].tolist(), rdp[finite].tolist(), delta)
    return float(eps)


# --------------------------------------------------------------------------------------------
# Gaussian differential privacy (Dong, Roth & Su 2019) and the Balle–Wang δ(ε) curve
# --------------------------------------------------------------------------------------------
def _log_phi(x: float) -> float:
    """``ln Φ(x)`` with the C library's ``erfc`` (accurate to a few ulp) for ``x > −5``:
    ``ln(1 − ½ erfc(x/√2))`` by ``log1p`` for ``x > 0``, ``ln(½ erfc(−x/√2))`` for
    ``−5 < x ≤ 0`` (``Φ(x) > 2.8·10⁻⁷``); else ``scipy.special.log_ndtr`` (asymptotic series
    for the far tail).  A scalar path without the ufunc call overhead."""
    if x > 0.0:  # Φ(x) = 1 − ½ erfc(x/√2): log1p keeps the small complement accurate
        return math.log1p(-0.5 * math.erfc(x / math.sqrt(2.0)))
    if x > -5.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    return float(log_ndtr(x))


def _gdp_log_delta(mu: float, epsilon: float, *, fast: bool = False) -> float:
    """ln δ(ε) of μ-GDP, i.e. of one Gaussian mechanism with sensitivity/σ = μ.

    Balle & Wang (2018), Thm. 8, with Δ/σ = μ:
    δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)   (Dong, Roth & Su 2019, Cor. 2.13).
    Evaluated in the log domain so that δ down to 1e-300 is accurate.  For μ > ``_MILLS_MU``
    as ``a + ln(1 − e^{b−a})`` (``_gdp_log_terms``); ``fast=True`` uses ``_log_phi``
    (relative error ≲ 2·10⁻¹³, for the root search only).  For μ ≤ ``_MILLS_MU`` the two
    terms cancel (stop-43 audit: at ε = 1e-12, δ = 1e-50 the computed ``b − a`` had no correct
    digit), so the Mills-ratio form ``_gdp_log_delta_mills`` is used; ``fast=True`` keeps the
    two-term form where its estimated error is below 1e-9 (the root search only).
    """
    if mu <= _MILLS_MU:
        if fast:
            a, b = _gdp_log_terms(mu, epsilon, fast=True)
            if b < a and 1e-12 * (1.0 + abs(a) + abs(b)) < -1e-9 * math.expm1(b - a):
                return a + math.log1p(-math.exp(b - a))
        return _gdp_log_delta_mills(mu, epsilon)[0]
    a, b = _gdp_log_terms(mu, epsilon, fast=fast)
    if b >= a:  # only where ln δ(ε) < −2·10⁵ for μ > 0.5 (measured): δ(ε) is 0 in float64
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


#: Below this μ, δ(ε) is evaluated in the Mills-ratio form (``_gdp_log_delta_mills``).
_MILLS_MU = 0.5

#: 8-point Gauss–Legendre nodes and weights on [−1, 1] (``_gdp_log_delta_mills``).
_GL_NODES = tuple(zip(*(v.tolist() for v in np.polynomial.legendre.leggauss(8)), strict=True))


def _mills_slope(s: float) -> float:
    """``g(s) = 1 − s·R(s)`` with Mills' ratio ``R(s) = Φ(−s)/φ(s)``; ``g = −R′ > 0``.

    For ``s < 6`` directly, ``R(s) = √(π/2)·erfc(s/√2)·e^{s²/2}`` (the cancellation in
    ``1 − sR`` grows like s²: relative error ≤ 2.2e-13 measured against 60-digit mpmath); for
    ``s ≥ 6`` from Laplace's continued fraction ``R(s) = 1/(s + K)``,
    ``K = 1/(s + 2/(s + 3/(s + …)))``, as ``g = K/(s + K)``: a ratio of positive terms, without
    that cancellation (``g ≈ 1/s²``); 20 levels give a relative error below 1e-15 there (same
    check).
    """
    if s < 6.0:
        return 1.0 - s * _SQRT_HALF_PI * math.erfc(s / _SQRT2) * math.exp(0.5 * s * s)
    acc = 0.0
    for k in range(20, 1, -1):
        acc = k / (s + acc)
    kk = 1.0 / (s + acc)
    return kk / (s + kk)


_SQRT2 = math.sqrt(2.0)
_SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _gdp_log_delta_mills(mu: float, epsilon: float) -> tuple[float, float]:
    """``(ln δ(ε), bound on its absolute error)`` of μ-GDP without cancellation (μ ≤ 0.5).

    With ``t = ε/μ``, ``h = μ/2`` and Mills' ratio ``R(s) = Φ(−s)/φ(s)``, the identity
    ``e^ε φ(t + h) = φ(t − h)`` (``2th = ε``) turns Balle & Wang's Thm. 8 into
    ``δ(ε) = φ(t − h)·[R(t − h) − R(t + h)] = φ(t − h)·∫_{t−h}^{t+h} g(s) ds`` with
    ``g = −R′ = 1 − sR > 0`` (``_mills_slope``).  The integral (width ``μ ≤ 0.5``, ``g``
    entire) is an 8-point Gauss–Legendre sum around the midpoint ``t`` (no ``t ± h`` that rounds
    to ``t``), and ``ln φ(t − h) = −t²/2 + ε/2 − h²/2 − ln √(2π)``.  Every term is positive:
    nothing cancels, for any ε ≥ 0 and μ > 0 (6 points already agree with 8 to 1e-14).

    The error bound: ``8u(1 + t²/2 + ε)`` for the exponent (its terms are exact to a few ulp,
    and ``t`` itself to one), plus 2e-12 for the sum (measured ≤ 1e-13 against 80-digit mpmath,
    ``tests/test_audit_stop43_accounting.py``).
    """
    t = epsilon / mu
    h = 0.5 * mu
    total = math.fsum(w * _mills_slope(t + h * x) for x, w in _GL_NODES)
    if not total > 0.0 or not math.isfinite(t):  # g underflows for t ≳ 1e154: δ(ε) is 0
        return -math.inf, 0.0
    # ln h from ln μ (a subnormal μ/2 would lose digits)
    exponent = -0.5 * t * t + 0.5 * epsilon - 0.5 * h * h - _HALF_LOG_2PI
    log_delta = exponent + math.log(mu) - math.log(2.0) + math.log(total)
    error = 8.0 * np.finfo(float).eps * (1.0 + 0.5 * t * t + epsilon) + 2e-12
    return log_delta, error


def _gdp_log_terms(mu: float, epsilon: float, *, fast: bool = False) -> tuple[float, float]:
    """``(a, b)`` with ``ln δ(ε) = a + ln(1 − e^{b−a})``: ``a = ln Φ(μ/2 − ε/μ)``,
    ``b = ε + ln Φ(−μ/2 − ε/μ)`` (``_gdp_log_delta``)."""
    log_phi = _log_phi if fast else (lambda x: float(log_ndtr(x)))
    return log_phi(mu / 2.0 - epsilon / mu), epsilon + log_phi(-mu / 2.0 - epsilon / mu)


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism (Balle & Wang 2018, Thm. 8; Dong, Roth & Su 2019, Cor. 2.13).

    A Gaussian mechanism with L2 sensitivity Δ and noise std σ is μ-GDP with μ = Δ/σ, and it is
    (ε, δ(ε))-DP exactly for this δ(ε) (tight for every ε ≥ 0).
    """
    mu = check_positive(mu, "mu")
    epsilon = check_positive(epsilon, "epsilon", allow_zero=True)
    return math.exp(_gdp_log_delta(mu, epsilon))


def _nudge_up(x0: float, ok: Callable[[float], bool]) -> float:
    """Smallest ``x0·(1 + 1e-12·2^k)``, k = 0, 1, …, with ``ok(x)``; ``x0`` itself if it is ok.

    Used to move the output of a 1e-12-tolerance root finder to the safe side of the root.
    """
    if ok(x0):
        return x0
    step = 1e-12
    for _ in range(80):
        x = x0 * (1.0 + step) if x0 > 0.0 else step
        if ok(x):
            return x
        step *= 2.0
    raise RuntimeError("could not certify a privacy parameter; please report this bug.")


def _log_delta_ok(log_delta: float, delta: float, margin: float = 1e-12) -> bool:
    """ln δ(ε) ≤ ln δ − ``margin``: so that rounding in ln δ(ε) cannot hide δ(ε) > δ."""
    return log_delta <= math.log(delta) + math.log1p(-margin)


def _gdp_delta_certified(mu: float, epsilon: float, delta: float) -> bool:
    """Whether δ(ε) ≤ ``delta`` for μ-GDP holds despite rounding (never True when it is false).

    For μ ≤ ``_MILLS_MU``: the cancellation-free Mills-ratio form with its error bound
    (``_gdp_log_delta_mills``) as the margin.  The two-term form ``a + ln(1 − e^{b−a})`` used
    there before returned True when rounding made ``b ≥ a`` and capped its margin at ½, while
    for small μ the computed ``b − a`` had no correct digit (stop-43 audit: at ε = 1e-12,
    δ = 1e-50 ``gaussian_sigma`` returned 8.94e12 where 1.257e13 is needed, true δ(ε) = 2.3e-33).

    For μ > ``_MILLS_MU``: ``ln δ = a + ln(1 − e^{b−a})`` with ``a, b`` the two ``log_ndtr``
    terms, each accurate to a few ulp of its magnitude.  An absolute error ``η`` in ``b − a``
    moves ``ln(1 − e^{b−a})`` by about ``η e^{b−a}/(1 − e^{b−a})``, so the margin is
    ``1e-12 + 16u(1 + |a| + |b|)/(1 − e^{b−a})`` (twice the estimate of ``η``; ``8·ε_mach`` in
    the code, ``u = ε_mach/2``; stop-26 audit).  Where that margin exceeds 1e-3 or ``b ≥ a``
    (for μ > 0.5 only where ln δ(ε) < −2·10⁵) the bound ``δ(ε) ≤ Φ(μ/2 − ε/μ) = e^a`` (the
    subtracted term is ≥ 0) decides instead: it cannot cancel.
    """
    if mu <= _MILLS_MU:
        log_delta, error = _gdp_log_delta_mills(mu, epsilon)
        return log_delta + (1e-12 + error) <= math.log(delta)  # error: absolute in ln δ(ε)
    a, b = _gdp_log_terms(mu, epsilon)
    ulps = 8.0 * np.finfo(float).eps
    if b < a:
        r = -math.expm1(b - a)
        margin = 1e-12 + ulps * (1.0 + abs(a) + abs(b)) / r
        if margin <= 1e-3:
            return _log_delta_ok(a + math.log1p(-math.exp(b - a)), delta, margin)
    return a + (1e-12 + ulps * (1.0 + abs(a))) <= math.log(delta)  # absolute error in a


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest ε with δ(ε) ≤ ``delta`` for a μ-GDP mechanism, rounded to the safe side.

    The root of the Balle–Wang curve is found by Brent's method on ``ln δ(ε)`` (see
    ``_gdp_epsilon``; formerly ``dp_accounting.get_epsilon_gaussian``, σ = 1/μ, which
    gives the same root).  The root finder may end on either side of the root, so the result is
    then nudged up (relative steps from 1e-12) until ``gdp_delta`` at
    it is ≤ ``delta``: the returned ε is always a valid bound, never an under-estimate by
    round-off.
    """
    mu = check_positive(mu, "mu")
    delta = check_delta(delta)
    if not mu <= 1e154:  # ε ≈ μ²/2 leaves float64 (stop-44 audit: SciPy's "value at x=inf is NaN")
        raise ValueError(
            f"mu = {mu:.3g} is so large that epsilon (about mu^2 / 2) exceeds float64: such a "
            "mechanism protects nothing (for a Gaussian release, use a larger sigma)."
        )
    return _gdp_epsilon(mu, delta)


#: Brent's absolute tolerance in ``_gdp_epsilon``: 1e-15 made the root's error absolute in ε,
#: 10% at ε = 1e-14 (stop-43 audit); the relative tolerance 4u now decides.
_XTOL = 1e-300


@functools.lru_cache(maxsize=4096)
def _gdp_epsilon(mu: float, delta: float) -> float:
    """``gdp_epsilon`` on checked arguments (cached: a ledger asks for the same μ often).

    Brent's method (``scipy.optimize.brentq``, ``xtol`` 1e-15, ``rtol`` 4u) on
    ``ln δ(ε) − ln δ`` with the log-domain ``_gdp_log_delta`` (two ``log_ndtr`` calls per
    evaluation), bracketed by doubling from ε = 1; then nudged up as before.  The same root as
    ``dp_accounting.get_epsilon_gaussian`` (which brackets ``Φ`` differences to 1e-12),
    about 40× faster; ``tests/test_accounting.py`` compares the two.
    """
    log_delta = math.log(delta)

    def excess(e: float) -> float:  # decreasing in ε; -inf (δ(ε) = 0) clamped for brentq
        return max(_gdp_log_delta(mu, e, fast=True) - log_delta, -1e3)

    if excess(0.0) <= 0.0:
        eps = 0.0
    else:
        lo, hi = 0.0, 1.0
        while excess(hi) > 0.0:
            lo, hi = hi, 2.0 * hi
        # a root far below 1 (tiny μ): shrink the bracket first, where excess is clamped flat
        # Brent's 100 iterations could not reach it at xtol 1e-300 (stop-43 review: μ 2e-154)
        while lo == 0.0 and hi > 1e-300 and excess(0.5 * hi) <= 0.0:
            hi *= 0.5
        eps = float(brentq(excess, lo, hi, xtol=_XTOL, rtol=4.0 * np.finfo(float).eps, maxiter=500))
    return _nudge_up(eps, lambda e: _gdp_delta_certified(mu, e, delta))


def _gdp_unit_sigma(epsilon: float, delta: float, start: float) -> float:
    """The σ of unit sensitivity with δ(ε; μ = 1/σ) = ``delta`` (the root, not yet certified).

    Brent's method in ln μ on ``ln δ(ε; μ) − ln δ`` (increasing in μ) with the log-domain
    ``_gdp_log_delta``, bracketed by doubling/halving μ from ``1/start``.  For settings where
    ``dp_accounting.get_sigma_gaussian`` misses the root (its δ(ε) cancels for tiny μ: ε = 1e-12,
    δ = 1e-50 gave 8.94e12 for 1.257e13; ``gaussian_sigma``).
    """
    log_delta = math.log(delta)

    def excess(log_mu: float) -> float:
        return max(_gdp_log_delta(math.exp(log_mu), epsilon, fast=True) - log_delta, -1e3)

    lo = hi = -math.log(start)
    while excess(lo) > 0.0:
        lo -= math.log(2.0)
    while excess(hi) <= 0.0:
        hi += math.log(2.0)
    return math.exp(-float(brentq(excess, lo, hi, xtol=1e-15, rtol=4.0 * np.finfo(float).eps)))


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------
_E = TypeVar("_E", bound="PrivacyEvent")


def memo_epsilon(event: PrivacyEvent, delta: float, compute: Callable[[], float]) -> float:
    """``compute()`` (the event's ε at ``delta``), cached per ``delta`` in ``event.__dict__``.

    Events are frozen dataclasses, so the value never changes; the cache is not a field, so it
    is neither compared, hashed nor part of the event's metadata.  At most 8 δ values are kept.
    """
    cache = event.__dict__.setdefault("_epsilon_at", {})
    value = cache.get(delta)
    if value is None:
        if len(cache) >= 8:
            cache.clear()
        value = cache[delta] = compute()
    return value


class PrivacyEvent(ABC):
    """Base class of privacy events.  Subclasses are frozen dataclasses with a ``count``."""

    label: str
    count: int

    @abstractmethod
    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        """Upper bound on the RDP ε(α) at each order (``+inf`` where no bound is known)."""

    @abstractmethod
    def epsilon(self, delta: float) -> float:
        """Best valid ε of this event alone (all ``count`` repetitions) at ``delta``."""

    @abstractmethod
    def _parameters(self) -> dict[str, Any]:
        """The event's parameters for metadata (JSON-safe)."""

    @abstractmethod
    def describe(self) -> str:
        """A short human-readable description, e.g. ``Gaussian(z=1.88)×3``."""

    @property
    def has_rdp(self) -> bool:
        """Whether this event has an RDP curve (False only for ``ApproxDpEvent``)."""
        return True

    def to_metadata(self) -> dict[str, Any]:
        """JSON-serialisable description: ``{"type": ..., <parameters>, "count", "label"}``.

        Non-finite numbers are written as the strings ``"inf"``/``"-inf"``/``"nan"``.
        """
        return {
            "type": type(self).__name__,
            **self._parameters(),
            "count": self.count,
            "label": self.label,
        }

    def repeat(self: _E, k: int) -> _E:
        """The k-fold (possibly adaptive) self-composition of this event."""
        k = _check_count(k, "k")
        new = copy.copy(self)
        # the memos in the instance __dict__ (ε per δ, the own curve) belong to the 1-fold
        # count: a copy that kept them would report the k-fold event's ε as the 1-fold one
        fields = {f.name for f in dataclasses.fields(self)}
        for key in [key for key in new.__dict__ if key not in fields]:
            del new.__dict__[key]
        # the product is checked like a constructor's count (at most 2**53), and the event's
        # own invariants are re-validated: copying bypassed both (stop-47 audit: count 3·2**53
        # built an event whose metadata no longer read back; GaussianEvent(1e-150).repeat(2**40)
        # had μ² = inf and a spend failed with "mu must be a finite number > 0, got inf")
        object.__setattr__(new, "count", _check_count(self.count * k, "count × k"))
        post_init = getattr(new, "__post_init__", None)
        if post_init is not None:
            post_init()
        return new

    def __mul__(self: _E, k: int) -> _E:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            return NotImplemented
        return self.repeat(k)

    __rmul__ = __mul__


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """``count`` runs of a Gaussian mechanism with noise multiplier z = σ / (L2 sensitivity).

    RDP: ε(α) = count · α / (2 z²) for every α > 1 (Mironov 2017, Table II; additivity Prop. 1).
    Exactly: the composition is μ-GDP with μ = √count / z (Dong, Roth & Su 2019, Cor. 3.3), whose
    tight (ε, δ) curve is the Balle–Wang formula (``gdp_delta``).
    """

    noise_multiplier: float
    count: int = 1
    label: str = ""

    def __post_init__(self) -> None:
        z = check_positive(self.noise_multiplier, "noise_multiplier")
        count = _check_count(self.count)
        if not (0.0 < z * z < math.inf and math.isfinite(count / (z * z))):
            # μ² = count/z² overflowed (z = 1e160: OverflowError on every use, stop-43 audit)
            # or divided by zero (z = 1e-170; a subnormal z², stop-43 review): such an event
            # could never be accounted
            raise ValueError(
                f"noise_multiplier must lie in about [1e-154, 1e154] (its square must be a "
                f"finite nonzero float64, and count / noise_multiplier**2 finite), got {z!r}."
            )
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "label", _check_label(self.label))

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter μ = √count / z of the whole event."""
        return math.sqrt(self.count) / self.noise_multiplier

    @property
    def mu_squared(self) -> float:
        """μ² = count / z² (what adds up under composition)."""
        return self.count / self.noise_multiplier**2

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        alpha = _check_orders(orders)
        with np.errstate(over="ignore"):  # +inf for z near 1e-154: no bound at that order
            return alpha * (self.mu_squared / 2.0)

    def epsilon(self, delta: float) -> float:
        return gdp_epsilon(self.mu, delta)

    def _parameters(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier, "mu": self.mu}

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"Gaussian(z={self.noise_multiplier:.4g}){rep}"


@dataclass(frozen=True)
class ZCDPEvent(PrivacyEvent):
    """``count`` runs of a ρ-zCDP mechanism, e.g. the discrete Gaussian mechanism.

    ρ-zCDP (Bun & Steinke 2016, Def. 1.1) is RDP at every order with ε(α) = αρ, so the curve is
    ``rdp(α) = count · α · rho`` (composition adds ρ: Bun & Steinke 2016, Lemma 1.7).  The
    discrete Gaussian with scale σ and integer L2 sensitivity Δ is Δ²/(2σ²)-zCDP (Canonne,
    Kamath & Steinke 2020, Thm. 14); it is *not* claimed to be μ-GDP, so this event has no
    Balle–Wang curve (see ``docs/secure_noise.md``, "Why not the continuous GDP bound").

    ``epsilon(delta)`` converts the curve on ``DEFAULT_ORDERS`` with
    ``rdp_to_epsilon``; it is exactly what a ledger with the default orders charges for this
    event alone under its ``"zcdp"`` filter, so a mechanism calibrated with it fits the budget.
    """

    rho: float
    count: int = 1
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", check_positive(self.rho, "rho"))
        object.__setattr__(self, "count", _check_count(self.count))
        object.__setattr__(self, "label", _check_label(self.label))

    @property
    def total_rho(self) -> float:
        """count · ρ: the zCDP parameter of the whole event."""
        return self.count * self.rho

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        alpha = _check_orders(orders)
        return alpha * self.total_rho

    def epsilon(self, delta: float) -> float:
        return rdp_to_epsilon(DEFAULT_ORDERS, self.rdp(DEFAULT_ORDERS), delta)

    def _parameters(self) -> dict[str, Any]:
        return {"rho": self.rho}

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"zCDP(ρ={self.rho:.4g}){rep}"


@dataclass(frozen=True, repr=False)
class RdpCurveEvent(PrivacyEvent):
    """A mechanism known only through an upper bound on its RDP curve, given on an order grid.

    ``values[i]`` must bound D_α(M(D) ‖ M(D′)) at α = ``orders[i]`` for every neighbouring pair,
    and every order must lie strictly inside (``alpha_min``, ``alpha_max``), the range where the
    bound is valid (e.g. α < 1 + r²/V for the posterior-sample-path bound,
    ``docs/sample_paths.md``);
    otherwise ``ValueError``.

    Evaluating at an arbitrary α uses that the Rényi divergence is non-decreasing in α (van
    Erven & Harremoës 2014, Thm. 3): D_α ≤ D_β ≤ values(β) for every grid order β ≥ α, so the
    bound at α is the minimum of the values at grid orders ≥ α.  There is no interpolation, so
    the result is always a valid bound.  Outside (``alpha_min``, ``alpha_max``) and above the
    largest grid order the result is ``+inf``.  ``count`` repetitions multiply the curve
    (Mironov 2017, Prop. 1).
    """

    orders: tuple[float, ...]
    values: tuple[float, ...]
    alpha_min: float = 1.0
    alpha_max: float = math.inf
    label: str = ""
    count: int = field(default=1, kw_only=True)

    def __post_init__(self) -> None:
        alpha_min = real_or_nan(self.alpha_min, "alpha_min")  # True / "100" refused (stop 40)
        alpha_max = real_or_nan(self.alpha_max, "alpha_max")
        if math.isnan(alpha_min) or alpha_min < 1.0 or not math.isfinite(alpha_min):
            raise ValueError(f"alpha_min must be a finite number >= 1, got {self.alpha_min!r}.")
        if math.isnan(alpha_max) or alpha_max <= alpha_min:
            raise ValueError(
                f"alpha_max must exceed alpha_min={alpha_min} (use math.inf for no upper "
                f"limit), got {self.alpha_max!r}."
            )
        orders = _check_orders(self.orders)
        try:  # booleans were the divergences 1 and 0 (stop-40 fuzz)
            values = public_real_array(self.values, "values").reshape(-1)
        except ValueError as err:
            raise ValueError(f"values must be numbers, got {self.values!r}.") from err
        if values.shape != orders.shape:
            raise ValueError(
                f"orders and values must have the same length, got {orders.size} orders "
                f"and {values.size} values."
            )
        if np.any(np.isnan(values)) or np.any(values < 0.0):
            raise ValueError(
                "RDP values must be >= 0 and not NaN (use +inf where no bound is known)."
            )
        outside = (orders <= alpha_min) | (orders >= alpha_max)
        if outside.any():
            raise ValueError(
                f"{int(outside.sum())} order(s) lie outside the declared valid range "
                f"({alpha_min}, {alpha_max}) of this RDP bound, e.g. α={orders[outside][0]}. "
                "Give values only at orders where the bound is proved to hold."
            )
        if not np.all(np.diff(orders) > 0.0):  # not already strictly increasing
            idx = np.argsort(orders, kind="stable")
            orders, values = orders[idx], values[idx]
            if np.any(np.diff(orders) == 0.0):
                raise ValueError("orders must not contain duplicates.")
        object.__setattr__(self, "orders", tuple(orders.tolist()))
        object.__setattr__(self, "values", tuple(values.tolist()))
        object.__setattr__(self, "alpha_min", alpha_min)
        object.__setattr__(self, "alpha_max", alpha_max)
        object.__setattr__(self, "label", _check_label(self.label))
        object.__setattr__(self, "count", _check_count(self.count))

    @classmethod
    def from_function(
        cls,
        fn: Callable[[float], float],
        alpha_max: float,
        *,
        alpha_min: float = 1.0,
        orders: ArrayLike = DEFAULT_ORDERS,
        label: str = "",
        count: int = 1,
    ) -> RdpCurveEvent:
        """Tabulate an RDP bound ``fn(α)`` at the ``orders`` inside (``alpha_min``, ``alpha_max``).

        ``fn`` is called once per order with a Python float (the grid is small, ~150 orders).
        Orders outside the valid range are dropped before calling ``fn``.
        """
        grid = _check_orders(orders)
        grid = grid[(grid > float(alpha_min)) & (grid < float(alpha_max))]
        if grid.size == 0:
            raise ValueError(
                f"no order of the grid lies inside ({alpha_min}, {alpha_max}); pass a finer "
                "`orders` grid for this curve."
            )
        values = [float(fn(float(a))) for a in grid]
        return cls(
            tuple(grid.tolist()),
            tuple(values),
            alpha_min=alpha_min,
            alpha_max=alpha_max,
            label=label,
            count=count,
        )

    def with_label(self, label: str) -> RdpCurveEvent:
        """The same curve under another ``label`` (a new event; the curve, validated when this
        one was made, is shared rather than validated again)."""
        new = object.__new__(type(self))
        for f in dataclasses.fields(self):
            object.__setattr__(new, f.name, getattr(self, f.name))
        object.__setattr__(new, "label", _check_label(label))
        return new

    def __repr__(self) -> str:
        """Label, count and the curve's range; the ~150 (order, value) pairs are in
        ``to_metadata()`` (the dataclass repr printed all of them)."""
        return (
            f"RdpCurveEvent(label={self.label!r}, count={self.count}, "
            f"{len(self.orders)} orders in [{self.orders[0]:g}, {self.orders[-1]:g}], "
            f"values {self.values[0]:.4g} .. {self.values[-1]:.4g}, "
            f"alpha_min={self.alpha_min!r}, alpha_max={self.alpha_max!r})"
        )

    def _envelope(self) -> NDArray[np.float64]:
        """min over grid orders β ≥ orders[i] of values(β): the best valid bound at orders[i]."""
        vals = np.asarray(self.values)
        return np.minimum.accumulate(vals[::-1])[::-1]

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        alpha = _check_orders(orders)
        grid = np.asarray(self.orders)
        env = np.append(self._envelope() * self.count, math.inf)
        idx = np.searchsorted(grid, alpha, side="left")  # first grid order >= α
        out = env[idx]
        out[(alpha <= self.alpha_min) | (alpha >= self.alpha_max)] = math.inf
        return out

    @functools.cached_property
    def _own_curve(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(orders, rdp(orders))`` as arrays, computed once: the event is immutable, and a
        ledger's basic bound converts every recorded event again whenever δ's share changes
        (stored in the instance ``__dict__``, so neither compared, hashed nor serialised)."""
        grid = np.asarray(self.orders, dtype=np.float64)
        # ``rdp(grid)`` at the event's own orders: each is its own first grid order >= α, and
        # all lie inside (alpha_min, alpha_max) (checked at construction)
        return grid, self._envelope() * self.count

    def epsilon(self, delta: float) -> float:
        # cached per δ in the instance __dict__ (like _own_curve): a Thompson round asks for
        # the same event's ε several times (cost check, metadata, the ledger's bounds)
        return memo_epsilon(self, delta, lambda: rdp_to_epsilon(*self._own_curve, delta))

    def _parameters(self) -> dict[str, Any]:
        return {
            "orders": list(self.orders),
            # values are validated >= 0 and not NaN, so only +inf needs the JSON spelling
            "values": list(self.values)
            if math.isfinite(max(self.values))
            else [json_float(v) for v in self.values],
            "alpha_min": self.alpha_min,
            "alpha_max": json_float(self.alpha_max),
        }

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"RdpCurve(α∈({self.alpha_min:g}, {self.alpha_max:g})){rep}"


# RDP curves of ε-DP mechanisms, evaluated without cancellation: the textbook forms take a
# difference of logs of terms of size αε, which at small ε loses everything (stop-32 audit:
# ε = 1e-8 gave ρ = 0 at the low orders, and 10¹⁴ such runs were reported as ε = 0).  The forms
# below are sums and products of positive terms (≲ 25 ulps on the default orders, measured
# against 60-digit arithmetic); the curves are raised by ``_rounding_margin`` (64 ulps, more
# for orders near 1) so that rounding can never put them below the true value.
RDP_ROUNDING = 64.0 * float(np.finfo(np.float64).eps)
_ULPS_4 = 4.0 * float(np.finfo(np.float64).eps)


def _rounding_margin(alpha: NDArray[np.float64], eps: float) -> NDArray[np.float64]:
    """``1 + 64 u · max(1, ε/(α − 1))``: the curves' rounding grows like ``ε/(α − 1)`` for
    orders near 1 (where ``textbook`` cancels; 124 ulps at α = 1 + 2⁻⁵², ε = 1400, stop-32
    review), and is below 25 ulps on the default orders (α ≥ 1.01)."""
    with np.errstate(divide="ignore", over="ignore"):
        return 1.0 + RDP_ROUNDING * np.maximum(1.0, eps / (alpha - 1.0))


def _expm1_minus_x(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """``eˣ − 1 − x`` (≥ 0) without cancellation: its Taylor series for ``|x| < 0.1``."""
    out = np.expm1(x) - x
    small = np.abs(x) < 0.1
    if np.any(small):
        xs, term, acc = x[small], x[small] * x[small] / 2.0, np.zeros(int(small.sum()))
        for k in range(3, 15):  # the remainder is below 0.1¹⁴/14! relative
            acc += term
            term = term * xs / k
        out[small] = acc
    return out


def randomized_response_rdp(alpha: NDArray[np.float64], eps: float) -> NDArray[np.float64]:
    """``D_α`` of ε-randomized response, ``[ln(e^{αε} + e^{(1−α)ε}) − ln(1 + e^ε)]/(α − 1)``.

    With ``t = ε/2`` the bracket is ``ln cosh((2α−1)t) − ln cosh t``, and
    ``cosh x = 1 + 2 sinh²(x/2)`` with ``sinh²a − sinh²b = sinh(a+b) sinh(a−b)`` give
    ``ln(1 + 2 sinh(αε/2) sinh((α−1)ε/2)/(1 + 2 sinh²(ε/4)))``: no cancellation.  Where the
    sinh overflow (αε ≳ 1400) the textbook form is used; its cancellation is then at most
    ``α/(α−1)`` relative.
    """
    # public arithmetic whose underflow is harmless (logaddexp of a tiny term): silent also
    # under np.seterr(all="raise") (stop 48)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        ratio = 2.0 * np.sinh(alpha * eps / 2.0) * np.sinh((alpha - 1.0) * eps / 2.0)
        stable = np.log1p(ratio / (1.0 + 2.0 * np.sinh(eps / 4.0) ** 2)) / (alpha - 1.0)
        textbook = (np.logaddexp(alpha * eps, (1.0 - alpha) * eps) - np.logaddexp(0.0, eps)) / (
            alpha - 1.0
        )
    return np.where(np.isfinite(stable), stable, textbook)


def laplace_rdp(alpha: NDArray[np.float64], eps: float) -> NDArray[np.float64]:
    """Mironov (2017) Prop. 6, ``ln(α/(2α−1)·e^{(α−1)ε} + (α−1)/(2α−1)·e^{−αε})/(α − 1)``.

    The weights sum to 1, so the argument is ``1 + [α r((α−1)ε) + (α−1) r(−αε)]/(2α−1)`` with
    ``r(x) = eˣ − 1 − x ≥ 0`` (the first-order terms cancel exactly): ``log1p`` of a sum of
    positive terms.  Where that overflows, the ``logaddexp`` form (then accurate).  α = 1:
    the limit ``ε + e^{−ε} − 1``.
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        excess = (
            alpha * _expm1_minus_x((alpha - 1.0) * eps)
            + (alpha - 1.0) * _expm1_minus_x(-alpha * eps)
        ) / (2.0 * alpha - 1.0)
        stable = np.log1p(excess) / (alpha - 1.0)
        log_mix = np.logaddexp(
            np.log(alpha / (2.0 * alpha - 1.0)) + (alpha - 1.0) * eps,
            np.log((alpha - 1.0) / (2.0 * alpha - 1.0)) - alpha * eps,
        )
        rho = np.where(np.isfinite(stable), stable, log_mix / (alpha - 1.0))
    return np.where(alpha > 1.0, rho, eps + math.expm1(-eps))


@dataclass(frozen=True, init=False, repr=False)
class PureDpEvent(PrivacyEvent):
    """``count`` runs of an ε-DP mechanism (e.g. the exponential or Laplace mechanism).

    RDP curve used: the Rényi divergence of binary randomized response with parameter ε,

        ρ(α) = [ln(e^{αε} + e^{(1−α)ε}) − ln(1 + e^ε)] / (α − 1),

    evaluated without cancellation (``randomized_response_rdp``), raised by a rounding margin
    (``_rounding_margin``) and capped by min(ε, αε²/2), so that rounding never puts it below the
    true value.  Why it is valid: every pair of output distributions of an ε-DP mechanism is a
    post-processing of the randomized-response pair (Kairouz, Oh & Viswanath 2015, §2, with
    Blackwell's theorem), and Rényi divergence cannot grow under post-processing (van Erven &
    Harremoës 2014, Thm. 9), so this curve bounds every ε-DP mechanism and is tight for
    randomized response. It is never above ε (D_α ≤ D_∞ = ε; Mironov 2017, §III) nor above αε²/2
    (Bun & Steinke 2016, Prop. 3.3: ε-DP ⇒ ε²/2-zCDP).

    ``epsilon(delta)`` is min(count·ε, RDP conversion at δ): count·ε by basic composition, and
    the RDP conversion is the better bound for many repetitions; at δ = 0 it is count·ε.
    """

    eps: float  #: ε of one run (the constructor argument ``epsilon``)
    label: str = ""
    count: int = 1

    def __init__(self, epsilon: float, label: str = "", *, count: int = 1) -> None:
        object.__setattr__(self, "eps", check_epsilon(epsilon))
        object.__setattr__(self, "label", _check_label(label))
        object.__setattr__(self, "count", _check_count(count))

    def __repr__(self) -> str:
        return f"PureDpEvent(epsilon={self.eps!r}, label={self.label!r}, count={self.count})"

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        alpha = _check_orders(orders)
        e = self.eps
        rr = randomized_response_rdp(alpha, e) * _rounding_margin(alpha, e)
        # αε²/2 rounds in two products: 4 ulps up keep it above the true divergence
        bound = np.minimum(np.minimum(rr, e), alpha * e * e / 2.0 * (1.0 + _ULPS_4))
        return self.count * np.maximum(bound, 0.0)

    def epsilon(self, delta: float) -> float:
        if isinstance(delta, numbers.Real) and not isinstance(delta, bool) and delta == 0:
            # (count·ε, 0)-DP by basic composition: the δ = 0 that pure-DP releases (binning)
            # record in their metadata; it raised "the Gaussian mechanism needs delta > 0"
            # (stop-47 audit)
            return self.count * self.eps
        delta = check_delta(delta)
        basic = self.count * self.eps
        return min(basic, rdp_to_epsilon(DEFAULT_ORDERS, self.rdp(DEFAULT_ORDERS), delta))

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.eps}

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"PureDP(ε={self.eps:.4g}){rep}"


@dataclass(frozen=True, init=False, repr=False)
class LaplaceEvent(PureDpEvent):
    """``count`` runs of the Laplace mechanism with noise multiplier λ = b / (L1 sensitivity).

    One run is ε-DP with ε = 1/λ (Dwork & Roth 2014, Thm. 3.6), so this is a
    ``PureDpEvent`` (the ledger's basic filter counts ``count·ε``) with a tighter RDP curve
    (Mironov 2017, Prop. 6, tight for the Laplace mechanism): for α > 1

        ρ(α) = ln( α/(2α−1) · e^{(α−1)ε} + (α−1)/(2α−1) · e^{−αε} ) / (α − 1),

    evaluated without cancellation (``laplace_rdp``), raised by ``_rounding_margin``, capped by
    ε (its α → ∞ limit), and additive under composition.  The same curve as ``dp_accounting``'s
    ``LaplaceDpEvent`` in its RDP accountant (tests/test_binning.py compares them).
    ``epsilon(delta)`` is min(count·ε, RDP conversion at δ), as for ``PureDpEvent``."""

    noise_multiplier: float = 1.0

    def __init__(self, noise_multiplier: float, label: str = "", *, count: int = 1) -> None:
        z = check_positive(noise_multiplier, "noise_multiplier")
        object.__setattr__(self, "noise_multiplier", z)
        super().__init__(1.0 / z, label, count=count)

    def __repr__(self) -> str:
        return (
            f"LaplaceEvent(noise_multiplier={self.noise_multiplier!r}, label={self.label!r}, "
            f"count={self.count})"
        )

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        alpha = _check_orders(orders)
        e = self.eps
        rho = laplace_rdp(alpha, e) * _rounding_margin(alpha, e)
        return self.count * np.clip(rho, 0.0, e)

    def _parameters(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier}

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"Laplace(λ={self.noise_multiplier:.4g}){rep}"


@dataclass(frozen=True, init=False, repr=False)
class ApproxDpEvent(PrivacyEvent):
    """``count`` runs of an (ε, δ)-DP mechanism known only through (ε, δ).

    It has no RDP curve (``rdp`` is +inf everywhere); the ledger composes it by basic composition
    (Dwork et al. 2006; adaptive: Dwork, Rothblum & Vadhan 2010): ``count`` runs are
    (count·ε, count·δ)-DP.  ``epsilon(delta)`` is count·ε when ``delta`` ≥ count·δ, else +inf
    (no bound is known at a smaller δ).
    """

    eps: float  #: ε of one run (the constructor argument ``epsilon``)
    delta: float
    label: str = ""
    count: int = 1

    def __init__(self, epsilon: float, delta: float, label: str = "", *, count: int = 1) -> None:
        object.__setattr__(self, "eps", check_epsilon(epsilon))
        if isinstance(delta, numbers.Real) and delta == 0:
            raise ValueError(
                "ApproxDpEvent needs delta > 0; for delta = 0 use PureDpEvent(epsilon)."
            )
        object.__setattr__(self, "delta", check_delta(delta))
        object.__setattr__(self, "label", _check_label(label))
        object.__setattr__(self, "count", _check_count(count))

    def __repr__(self) -> str:
        return (
            f"ApproxDpEvent(epsilon={self.eps!r}, delta={self.delta!r}, "
            f"label={self.label!r}, count={self.count})"
        )

    @property
    def total_epsilon(self) -> float:
        """count · ε (basic composition)."""
        return self.count * self.eps

    @property
    def total_delta(self) -> float:
        """count · δ (basic composition)."""
        return self.count * self.delta

    @property
    def has_rdp(self) -> bool:
        return False

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        return np.full(_check_orders(orders).shape, math.inf)

    def epsilon(self, delta: float) -> float:
        delta = check_delta(delta)
        return self.total_epsilon if delta >= self.total_delta else math.inf

    def _parameters(self) -> dict[str, Any]:
        return {"epsilon": self.eps, "delta": self.delta}

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"ApproxDP(ε={self.eps:.4g}, δ={self.delta:.3g}){rep}"


# --------------------------------------------------------------------------------------------
# Random stopping: repeat a mechanism a random number of times, publish only the best run
# --------------------------------------------------------------------------------------------
def _check_stopping(gamma: Any, shape: Any) -> tuple[float, float]:
    """Validate the truncated-negative-binomial parameters γ ∈ (0, 1), η ≥ 0 (finite), with a
    finite E[K]: a subnormal γ (1e-320) made E[K] = inf, the curve +inf and the refusal a
    misleading "budget exceeded"; without a ledger the loop would not end (stop-38 audit).
    Text ("0.1") is refused by ``check_positive``, as for every other number."""
    g = check_positive(gamma, "gamma")
    if not g < 1.0:
        raise ValueError(f"gamma (the stopping probability) must lie in (0, 1), got {gamma!r}.")
    eta = check_positive(shape, "shape", allow_zero=True)
    if not math.isfinite(eta):
        raise ValueError("shape must be finite (the Poisson case is not supported).")
    if not math.isfinite(_stopping_mean(g, eta)):
        raise ValueError(
            f"gamma = {gamma!r} is too small: the expected number of runs E[K] overflows "
            "float64. Use a larger gamma (E[K] is about 1/gamma)."
        )
    return g, eta


def stopping_mean(gamma: float, shape: float = 1.0) -> float:
    """E[K] of the truncated negative binomial D_{η,γ} (Papernot & Steinke 2022, Def. 1).

    η = 1 (geometric): 1/γ; η = 0 (logarithmic): (1/γ − 1)/ln(1/γ); otherwise
    η(1/γ − 1)/(1 − γ^η).  ``tests/test_liu_talwar.py`` checks it against the pmf and against
    dp_accounting's ``_truncated_negative_binomial_mean``.
    """
    return _stopping_mean(*_check_stopping(gamma, shape))


def _stopping_mean(g: float, eta: float) -> float:
    """``stopping_mean`` of already validated parameters (may overflow to inf)."""
    if eta == 1.0:
        return 1.0 / g
    if eta == 0.0:
        return (1.0 - g) / (g * -math.log(g))
    return eta * (1.0 - g) / (g * -math.expm1(eta * math.log(g)))


@dataclass(frozen=True)
class RepeatAndSelectEvent(PrivacyEvent):
    """Run ``base`` K ~ D_{η,γ} times (K secret), publish only the best run's output.

    D_{η,γ} is the truncated negative binomial of Papernot & Steinke (2022, Def. 1):
    P(K = k) ∝ (1 − γ)^k · C(k + η − 1, k) on k ≥ 1 (η = 1: geometric, P(K = k) = γ(1 − γ)^{k−1},
    the "stop with probability γ after every run" of Liu & Talwar 2019, Alg. 2; η = 0:
    logarithmic).  If ``base`` is (λ, ε(λ))-RDP at every order, the whole procedure is
    (λ, ε′(λ))-RDP with (Papernot & Steinke 2022, Thm. 2, for every λ > 1 and every λ̂ ≥ 1)

        ε′(λ) = ε(λ) + (1 + η)(1 − 1/λ̂) ε(λ̂) + (1 + η) ln(1/γ)/λ̂ + ln E[K]/(λ − 1).

    ``rdp(orders)`` takes the minimum over λ̂ in the union of ``orders`` and
    ``DEFAULT_ORDERS`` (each λ̂ gives a valid bound), evaluates ε′ at the grid orders and
    then uses monotonicity of Rényi divergences in λ (bound at λ = min over grid orders ≥ λ),
    as dp_accounting's ``RepeatAndSelectDpEvent`` does in its RDP accountant (tested equal on
    the same grid).  ``count`` independent runs of the whole procedure add up (Mironov 2017,
    Prop. 1).  ``docs/selection.md`` §5.
    """

    base: PrivacyEvent
    gamma: float
    shape: float = 1.0
    label: str = ""
    count: int = field(default=1, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.base, PrivacyEvent) or not self.base.has_rdp:
            raise ValueError("base must be a privacy event with an RDP curve.")
        g, eta = _check_stopping(self.gamma, self.shape)
        object.__setattr__(self, "gamma", g)
        object.__setattr__(self, "shape", eta)
        object.__setattr__(self, "label", _check_label(self.label))
        object.__setattr__(self, "count", _check_count(self.count))

    @property
    def mean(self) -> float:
        """E[K]: the expected number of runs of ``base``."""
        return stopping_mean(self.gamma, self.shape)

    def _grid_curve(self, grid: NDArray[np.float64]) -> NDArray[np.float64]:
        """ε′ on ``grid`` (sorted), before the monotone envelope (one procedure)."""
        eps = self.base.rdp(grid)
        with np.errstate(invalid="ignore"):
            hat = (1.0 - 1.0 / grid) * eps - math.log(self.gamma) / grid
        c = (1.0 + self.shape) * float(np.min(hat))
        return eps + c + math.log(self.mean) / (grid - 1.0)

    def rdp(self, orders: ArrayLike = DEFAULT_ORDERS) -> NDArray[np.float64]:
        alpha = _check_orders(orders)
        grid = np.unique(np.concatenate([alpha, DEFAULT_ORDERS]))
        curve = self._grid_curve(grid)
        env = np.minimum.accumulate(curve[::-1])[::-1]  # min over grid orders >= λ
        return self.count * env[np.searchsorted(grid, alpha)]

    def epsilon(self, delta: float) -> float:
        return rdp_to_epsilon(DEFAULT_ORDERS, self.rdp(DEFAULT_ORDERS), delta)

    def _parameters(self) -> dict[str, Any]:
        return {"base": self.base.to_metadata(), "gamma": self.gamma, "shape": self.shape}

    def describe(self) -> str:
        rep = f"×{self.count}" if self.count > 1 else ""
        return f"RepeatAndSelect({self.base.describe()}, E[K]={self.mean:.4g}){rep}"


# --------------------------------------------------------------------------------------------
# Restoring events from their metadata (used by the persistent ledger)
# --------------------------------------------------------------------------------------------
def _meta_float(value: Any, name: str) -> float:
    """Inverse of ``json_float``: a JSON number or one of "inf"/"-inf"/"nan"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"event metadata field {name!r} must be a number, got {value!r}.")
    if isinstance(value, str) and value not in ("inf", "-inf", "nan"):
        raise ValueError(f"event metadata field {name!r} must be a number, got {value!r}.")
    return float(value)


def event_from_metadata(meta: dict[str, Any]) -> PrivacyEvent:
    """Rebuild the event whose ``PrivacyEvent.to_metadata`` is ``meta`` (exact inverse).

    Floats survive a JSON round trip exactly (Python writes the shortest repr that reads back
    to the same double), so ``event_from_metadata(json.loads(json.dumps(e.to_metadata())))``
    equals ``e``.  Derived fields in the metadata (``mu`` of a Gaussian event) are ignored;
    the constructors re-validate every parameter, so a corrupted record raises ``ValueError``.
    """
    if isinstance(meta, str | bytes):  # the JSON text of an ArviZ attr (stop-41 walkthrough)
        try:
            meta = json.loads(meta)
        except ValueError:
            raise ValueError("event metadata text is not JSON.") from None
    if not isinstance(meta, dict) or "type" not in meta:
        raise ValueError("event metadata must be a dict with a 'type' field.")
    kind = meta["type"]
    label = meta.get("label", "")
    count = meta.get("count", 1)
    try:
        if kind == "GaussianEvent":
            z = _meta_float(meta["noise_multiplier"], "noise_multiplier")
            return GaussianEvent(z, count=count, label=label)
        if kind == "ZCDPEvent":
            return ZCDPEvent(_meta_float(meta["rho"], "rho"), count=count, label=label)
        if kind == "RdpCurveEvent":
            return RdpCurveEvent(
                tuple(_meta_float(a, "orders") for a in meta["orders"]),
                tuple(_meta_float(v, "values") for v in meta["values"]),
                alpha_min=_meta_float(meta["alpha_min"], "alpha_min"),
                alpha_max=_meta_float(meta["alpha_max"], "alpha_max"),
                label=label,
                count=count,
            )
        if kind == "PureDpEvent":
            return PureDpEvent(_meta_float(meta["epsilon"], "epsilon"), label, count=count)
        if kind == "RepeatAndSelectEvent":
            return RepeatAndSelectEvent(
                event_from_metadata(meta["base"]),
                _meta_float(meta["gamma"], "gamma"),
                _meta_float(meta["shape"], "shape"),
                label,
                count=count,
            )
        if kind == "LaplaceEvent":
            z = _meta_float(meta["noise_multiplier"], "noise_multiplier")
            return LaplaceEvent(z, label, count=count)
        if kind == "ApproxDpEvent":
            return ApproxDpEvent(
                _meta_float(meta["epsilon"], "epsilon"),
                _meta_float(meta["delta"], "delta"),
                label,
                count=count,
            )
    except KeyError as err:
        raise ValueError(f"event metadata of type {kind!r} lacks the field {err}.") from None
    raise ValueError(
        f"unknown event type {kind!r} in metadata (expected GaussianEvent, ZCDPEvent, "
        "RdpCurveEvent, PureDpEvent, LaplaceEvent, ApproxDpEvent or RepeatAndSelectEvent)."
    )
