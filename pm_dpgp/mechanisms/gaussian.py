"""Calibration of the Gaussian mechanism (Balle & Wang 2018; ``docs/gaussian_calibration.md``).

Releasing ``f(D) + N(0, σ² I)`` for a function with L2 sensitivity Δ = sup ‖f(D) − f(D′)‖₂ over
neighbouring datasets is (ε, δ)-DP when σ is large enough.  Two calibrations are offered:

``"analytic"`` (default)
    The smallest σ, from the exact privacy curve of the Gaussian mechanism (Balle & Wang 2018,
    "Improving the Gaussian mechanism for differential privacy", ICML, Thm. 8 and Alg. 1):
    the mechanism is (ε, δ)-DP iff
    Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ.
    Solved numerically by ``dp_accounting.get_sigma_gaussian``; valid for every ε > 0.

``"classic"``
    σ = c(δ) Δ / ε with c(δ) = √(2 ln(2/δ)) (Hall, Rinaldo & Wasserman 2013, "Differential privacy
    for functions and functional data", JMLR, Prop. 3; used by Smith et al. 2018, AISTATS).
    Only proved for ε ≤ 1, and always noisier than the analytic σ.

At (ε, δ) = (1, 0.01) and Δ = 1: analytic σ = 1.8779, classic σ = 3.2552 (73% more noise).
See ``docs/gaussian_calibration.md``.

Secure (discrete) noise is accounted in zCDP, not GDP; ``zcdp_rho`` gives the largest ρ whose
(ε, δ) conversion (the one ``ZCDPEvent`` and the ledger's ``"zcdp"``
filter use) is within a budget.  See ``docs/secure_noise.md``.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from dp_accounting import get_sigma_gaussian

from pm_dpgp._validation import check_delta, check_epsilon, check_positive
from pm_dpgp.accounting.events import (
    DEFAULT_ORDERS,
    GaussianEvent,
    ZCDPEvent,
    _gdp_delta_certified,
    _gdp_unit_sigma,
    _nudge_up,
    gdp_epsilon,
)

__all__ = ["classic_c", "gaussian_sigma", "gaussian_epsilon", "zcdp_rho"]


def classic_c(delta: float) -> float:
    """The classic Gaussian-mechanism constant c(δ) = √(2 ln(2/δ)).

    Hall, Rinaldo & Wasserman (2013), Prop. 3, as used by Smith et al. (2018): noise
    σ = c(δ) Δ / ε gives (ε, δ)-DP for ε ≤ 1.
    """
    delta = check_delta(delta)
    return math.sqrt(2.0 * math.log(2.0 / delta))


def gaussian_sigma(
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    *,
    method: Literal["analytic", "classic"] = "analytic",
) -> float:
    """Standard deviation of Gaussian noise giving (ε, δ)-DP for L2 sensitivity ``sensitivity``.

    Parameters
    ----------
    epsilon, delta
        Target privacy, ε > 0 and 0 < δ < 1.
    sensitivity
        L2 sensitivity Δ of the released quantity (finite, > 0).
    method
        ``"analytic"`` (Balle & Wang 2018; any ε > 0):
        ``dp_accounting.get_sigma_gaussian(ε, δ) · Δ``, then rounded up if needed so that the
        exact δ(ε) of Balle & Wang's Thm. 8 at the returned σ is ≤ ``delta`` (the root finder's
        1e-12 tolerance can otherwise land a hair on the wrong side).
        ``"classic"``: ``classic_c(δ) · Δ / ε`` (Hall et al. 2013, Prop. 3); ε ≤ 1 only.

    Raises
    ------
    ValueError
        For ε ≤ 0, δ ∉ (0, 1), Δ ≤ 0 or non-finite, an unknown ``method``, or ``method="classic"``
        with ε > 1.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    sensitivity = check_positive(sensitivity, "sensitivity")
    if method == "classic":
        if epsilon > 1.0:
            raise ValueError(
                f"the classic constant sqrt(2 ln(2/delta)) is only proved for epsilon <= 1, got "
                f"epsilon={epsilon}. Use method='analytic' (Balle & Wang 2018), which is valid "
                "for every epsilon > 0 and needs less noise."
            )
        sigma = classic_c(delta) * sensitivity / epsilon
        _check_representable(sigma, sensitivity)
        return sigma
    if method != "analytic":
        raise ValueError(
            f"method must be 'analytic' or 'classic', got {method!r}; use one of them."
        )

    sigma = _delta_certified_sigma(epsilon, delta, sensitivity)
    # then until the charged event's own ε at δ (``GaussianEvent(σ/Δ).epsilon``, the ledger's
    # inversion) is ≤ ε as well: that inversion rounds up, by an amount that is absolute in ε
    # (~1e-15), so at tiny ε it exceeded the target that σ certifies (ε = 1e-9: +3.2e-6
    # relative) and a Ledger(epsilon=ε) refused the release.  Only σ grows, by ~1e-10
    # relative there; nothing changes where the event's ε is already ≤ ε
    # (docs/gaussian_calibration.md, "The event's own ε")
    return _nudge_up(
        sigma,
        lambda sig: GaussianEvent(noise_multiplier=sig / sensitivity).epsilon(delta) <= epsilon,
    )


def _delta_certified_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic σ certified δ(ε) ≤ δ (before the event's-own-ε nudge of ``gaussian_sigma``).

    ``dp_accounting.get_sigma_gaussian``'s root, replaced by ``_gdp_unit_sigma``'s (the
    cancellation-free curve) when it is more than 1e-9 relative off the root on either side,
    then nudged up until ``_gdp_delta_certified``.  Checked arguments.
    """
    try:
        # its δ(ε) takes log1p(-1) = -inf where the two terms cancel to 0 (tiny ε, tiny δ):
        # a RuntimeWarning, and under np.seterr(all="raise") a FloatingPointError that was
        # reported as "epsilon too large" (stop-49 audit: ε = 1e-12, δ = 1e-50).  Its root is
        # only a first guess, certified or replaced below, so its floating-point flags are moot
        with np.errstate(all="ignore"):
            sigma = float(get_sigma_gaussian(epsilon, delta)) * sensitivity
    except (ValueError, ArithmeticError) as err:
        # dp_accounting's root finder evaluates δ(ε) at a trial σ where exp(ε) overflows
        # (ε ≳ 1e200 at δ = 1e-5): scipy's "function value at x=0.1 is NaN" (stop-38 audit)
        raise ValueError(
            f"epsilon={epsilon:.3g} is too large for the analytic Gaussian calibration "
            "(dp_accounting's root finder overflows); a release at such an epsilon protects "
            "nothing. Choose epsilon <= 10 (e.g. 1). Nothing was spent or drawn."
        ) from err
    _check_representable(sigma, sensitivity)
    if not _gdp_delta_certified(sensitivity / (sigma * (1.0 + 1e-9)), epsilon, delta) or (
        _gdp_delta_certified(sensitivity / (sigma * (1.0 - 1e-9)), epsilon, delta)
    ):
        # dp_accounting's root is more than 1e-9 off (its δ(ε) cancels for tiny μ; stop-43
        # audit: ε = 1e-12, δ = 1e-50 gave 8.94e12 where 1.257e13 is needed, and ε = 1e-12,
        # δ = 1e-20 5.2e-4 too much): solve on the cancellation-free curve instead
        sigma = _gdp_unit_sigma(epsilon, delta, sigma / sensitivity) * sensitivity
        _check_representable(sigma, sensitivity)
    return _nudge_up(sigma, lambda sig: _gdp_delta_certified(sensitivity / sig, epsilon, delta))


def _check_representable(sigma: float, sensitivity: float) -> None:
    """A noise sd that overflows float64 (or hits its edge) is a public setting error."""
    if not sigma < 1e300:  # ±inf, NaN, or so close to the edge that its multiples overflow
        raise ValueError(
            f"the noise sd for L2 sensitivity {sensitivity:.3g} is {sigma:.3g}, beyond float64 "
            "arithmetic; choose narrower bounds or rescale the outputs. Nothing was spent."
        )
    if not sigma > 0.0:  # underflow: ε = 1e120 with Δ = 1e-300 (stop-38 review)
        raise ValueError(
            f"the noise sd for L2 sensitivity {sensitivity:.3g} underflows to 0 in float64 "
            "(epsilon far too large or the outputs' scale far too small); rescale the outputs "
            "or choose epsilon <= 10. Nothing was spent."
        )


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Tight ε at ``delta`` of one Gaussian mechanism with noise std ``sigma``.

    The exact inverse of the analytic calibration (Balle & Wang 2018, Thm. 8) at
    ``μ = Δ/σ``: ``pm_dpgp.accounting.gdp_epsilon``, a root-solve of the log-domain δ(ε) rounded
    up so the result is never below the true ε (it agrees with
    ``dp_accounting.get_epsilon_gaussian`` to ~1e-12, tested).
    """
    sigma = check_positive(sigma, "sigma")
    delta = check_delta(delta)
    sensitivity = check_positive(sensitivity, "sensitivity")
    mu = sensitivity / sigma
    if not mu <= 1e154:  # ε ≈ μ²/2 leaves float64 (stop-44 audit: SciPy's "value at x=inf is NaN")
        raise ValueError(
            f"sensitivity / sigma = {mu:.3g} is so large that epsilon (about its square / 2) "
            "exceeds float64: such a release protects nothing. Use a larger sigma."
        )
    return gdp_epsilon(mu, delta)


def zcdp_rho(epsilon: float, delta: float) -> float:
    """Largest ρ such that ``ZCDPEvent(ρ).epsilon(delta) ≤ epsilon`` (up to a relative 1e-12).

    The conversion is the one of ``pm_dpgp.accounting.rdp_to_epsilon`` on
    ``DEFAULT_ORDERS`` (Canonne, Kamath & Steinke 2020, Prop. 12, with the
    total-variation case; see ``docs/accounting.md``).  At each order α it is
    ``αρ + c_α ≤ ε`` with ``c_α = ln(1 − 1/α) − (ln δ + ln α)/(α − 1)`` (α > 1.01), or ε = 0 when
    ``αρ < −ln(1 − δ²)``, so the largest ρ is the maximum over α of the closed forms
    ``max((ε − c_α)/α, −ln(1 − δ²)/α)``.  The result is then checked with
    ``ZCDPEvent.epsilon`` and lowered in relative steps of 1e-12 until the check passes with
    a relative margin of 1e-14, so a mechanism calibrated with it never exceeds ``epsilon``
    by round-off: the float conversion is a few ulps from the exact one (stop-46 audit: with
    no margin the exact ε exceeded the target by up to 1.5e-16 relative, e.g. 100 +
    1.5e-14 at δ = 0.9).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    alpha = DEFAULT_ORDERS[DEFAULT_ORDERS > 1.01]
    c = np.log1p(-1.0 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1.0)
    tv = -math.log1p(-(delta**2)) / alpha
    rho = float(np.max(np.maximum((epsilon - c) / alpha, tv)))
    if not rho > 0.0:
        # the TV term −ln(1 − δ²)/α underflows to 0 for δ below ~1e-162, and then no order
        # reaches a tiny ε (stop-36 audit: ε = 1e-3, δ = 1e-300): a public setting, refused
        raise ValueError(
            f"(epsilon={epsilon:.3g}, delta={delta:.3g}) cannot be reached by a zCDP "
            "(secure discrete Gaussian) release with the Renyi orders pm_dpgp uses: epsilon is "
            "too small for so small a delta. Use a larger delta (e.g. 1e-10) or epsilon; nothing "
            "was spent or drawn."
        )
    step = 1e-12
    for _ in range(80):
        if ZCDPEvent(rho).epsilon(delta) <= epsilon * (1.0 - 1e-14):
            return rho
        rho *= 1.0 - step
        step *= 2.0
    raise RuntimeError("could not certify rho; please report this bug.")
