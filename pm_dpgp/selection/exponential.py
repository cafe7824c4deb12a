"""The exponential mechanism (McSherry & Talwar 2007; Dwork & Roth 2014, Def. 3.4).

Selects index r of a finite candidate set with probability

    p_r ∝ exp(ε u_r / (2 Δu))                                     (Smith et al. 2021, eq. 12)

where ``u`` is a utility whose every entry changes by at most ``Δu`` between neighbouring
datasets (``docs/selection.md`` §1).  Privacy, three valid accountings of one draw:

* ε-DP (Dwork & Roth 2014, Thm. 3.10): ``PureDpEvent``;
* ε-bounded range, hence ε²/8-zCDP (Durfee & Rogers 2019, Def. 3 and Lemma 3.1 for the
  exponential mechanism; Cesar & Rogers 2021, Lemma 3.2 and Thm. 3): a
  ``ZCDPEvent`` — OpenDP's privacy map of its Gumbel noisy max gives the
  same ρ (tested);
* on a Rényi ledger, the pointwise minimum of both RDP curves (both are valid bounds).

Sampling: the Gumbel-max trick (argmax of ``u_r/β + G_r``, ``G`` iid standard Gumbel, is drawn
with exactly the probabilities above for β = 2Δu/ε).  By default OpenDP's
``make_noisy_max`` (Gumbel noise for a ``zero_concentrated_divergence`` measure, sampled exactly
from OS entropy, Mckenna & Sheldon 2020 / OpenDP proof) does it; a NumPy Generator gives the
simulation mode, for tests and notebooks only.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._validation import check_epsilon, check_positive, private_array
from pm_dpgp.accounting import (
    DEFAULT_ORDERS,
    Ledger,
    PrivacyEvent,
    PureDpEvent,
    RdpCurveEvent,
    ZCDPEvent,
)

__all__ = [
    "bounded_range_rho",
    "exponential_mechanism_event",
    "exponential_mechanism_probabilities",
    "sample_exponential_mechanism",
]

EventKind = Literal["auto", "zcdp", "pure", "renyi"]


def _check_utilities(utilities: ArrayLike) -> NDArray[np.float64]:
    # private values: text and complex numbers are refused by their type, quoting no entry
    # (``np.asarray(u, float)`` quoted NumPy's "could not convert string to float: '…'",
    # took text that parses as its number, dropped an imaginary part with a warning and
    # raised OverflowError on 10**400; stop-48 leak audit)
    u = private_array(utilities, "utilities", ndim=None)
    if u.ndim != 1 or u.size == 0:
        raise ValueError("utilities must be a non-empty 1-D array.")
    if not np.all(np.isfinite(u)):
        # never echo the values: they are private
        raise ValueError("utilities must be finite.")
    return u


def exponential_mechanism_probabilities(
    utilities: ArrayLike, sensitivity: float, epsilon: float
) -> NDArray[np.float64]:
    """Selection probabilities ``softmax(ε u / (2Δu))`` of eq. (12), computed stably.

    A function of the private utilities: the data owner's view, never to be released.
    """
    u = _check_utilities(utilities)
    sensitivity = check_positive(sensitivity, "sensitivity")
    epsilon = check_epsilon(epsilon)
    z = epsilon * u / (2.0 * sensitivity)
    z -= z.max()
    w = np.exp(z)
    return w / w.sum()


def bounded_range_rho(epsilon: float) -> float:
    """ρ = ε²/8: the exponential mechanism is ε-bounded-range, hence ε²/8-zCDP.

    Durfee & Rogers (2019): for every pair of outputs r, s and neighbours D, D′,
    ``ln(p_r(D)/p_r(D′)) − ln(p_s(D)/p_s(D′)) = ε[(u_r(D) − u_r(D′)) − (u_s(D) − u_s(D′))]/(2Δu)
    ≤ ε`` (the normalising constants cancel), i.e. ε-bounded range.  Cesar & Rogers (2021,
    Lemma 3.2 with Hoeffding's lemma) show ε-BR ⇒ ε²/8-zCDP.  ``docs/selection.md`` §1.
    """
    epsilon = check_epsilon(epsilon)
    return epsilon * epsilon / 8.0


def exponential_mechanism_event(
    epsilon: float,
    kind: EventKind = "auto",
    *,
    ledger: Ledger | None = None,
    label: str = "",
) -> PrivacyEvent:
    """The privacy event of one exponential-mechanism draw at ε, in the form the ledger needs.

    ``kind``: ``"pure"`` (ε-DP), ``"zcdp"`` (ε²/8-zCDP), ``"renyi"`` (an RDP curve, the minimum of
    the two), or ``"auto"``: from the ledger's filter — ``zcdp`` (and an empty ``auto`` ledger,
    so that a later secure release composes), ``renyi`` → curve, ``basic``/``fixed`` → pure.  A
    ``gdp`` ledger accepts only Gaussian events: the zCDP event is returned and the ledger refuses
    it (before anything is drawn).
    """
    # The sampler's scale is fl(1/ε) (OpenDP) or ε/(2Δu) is rounded (simulation): the ε it
    # realises may exceed ε by an ulp or two, so the charge carries 4 ulps of slack (OpenDP's
    # own map rounds up the same way, e.g. 1.1250000000000004 for ε = 3).
    epsilon = check_epsilon(epsilon) * (1.0 + 4.0 * np.finfo(np.float64).eps)
    if kind == "auto":
        family = None if ledger is None else ledger.filter_family
        kind = {"renyi": "renyi", "basic": "pure", "fixed": "pure"}.get(family or "", "zcdp")
    if kind == "zcdp":
        return ZCDPEvent(bounded_range_rho(epsilon), label=label)
    if kind == "pure":
        return PureDpEvent(epsilon, label=label)
    if kind == "renyi":
        pure = PureDpEvent(epsilon).rdp(DEFAULT_ORDERS)
        zcdp = DEFAULT_ORDERS * bounded_range_rho(epsilon)
        return RdpCurveEvent(DEFAULT_ORDERS, np.minimum(pure, zcdp), label=label)
    raise ValueError(f"kind must be 'auto', 'zcdp', 'pure' or 'renyi', got {kind!r}.")


def _opendp_gumbel_max(scores: NDArray[np.float64], scale: float) -> int:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    meas: Any = dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=scale)
    return int(meas([float(s) for s in scores]))


def sample_exponential_mechanism(
    utilities: ArrayLike,
    sensitivity: float,
    epsilon: float,
    *,
    rng: np.random.Generator | None = None,
) -> int:
    """Draw one index from the exponential mechanism (eq. 12).  No accounting: callers charge.

    ``rng=None``: OpenDP's exact Gumbel noisy max from OS entropy (utilities rescaled to
    ``u/(2Δu)`` so the scale is ``1/ε``); a Generator: ``argmax(εu/(2Δu) + Gumbel)`` in floats
    (simulation only).
    """
    u = _check_utilities(utilities)
    sensitivity = check_positive(sensitivity, "sensitivity")
    epsilon = check_epsilon(epsilon)
    scores = u / (2.0 * sensitivity)
    if rng is None:
        return _opendp_gumbel_max(scores, 1.0 / epsilon)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}.")
    g = rng.gumbel(size=u.size)
    return int(np.argmax(epsilon * scores + g))
