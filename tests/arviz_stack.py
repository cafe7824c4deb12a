"""ArviZ calls whose *names* differ between ArviZ 0.x and ArviZ 1 (tests only).

The package itself never checks versions outside :mod:`pm_dpgp.compat`; the tests use these
three wrappers so that the same assertions run on both stacks:

* ``summary``: ``az.summary`` on both (ArviZ 1 takes the ``DataTree``; ``kind="stats"`` on both).
* ``plot_ppc``: ``az.plot_ppc`` (0.x) / ``az.plot_ppc_dist`` (1.x).
* ``plot_hdi``: ``az.plot_hdi`` (0.x) / ``az.hdi`` + ``az.plot_ppc_interval`` (1.x).
"""

from __future__ import annotations

from typing import Any

import arviz as az

from pm_dpgp.compat import USES_DATATREE, get_group


def summary(idata: Any, **kw: Any) -> Any:
    return az.summary(idata, **kw)


def loo_elpd(idata: Any) -> float | None:
    """``az.loo``'s elpd on ArviZ 0.x; ``None`` on ArviZ 1.

    A DP release has few *distinct* draws (``dp_ppc`` repeats each with fresh observation
    noise, but ``log p(y | f)`` is then repeated too).  ArviZ 0.x's PSIS smooths over the
    ties with a warning; ArviZ 1's refuses ("All tail values are the same").  LOO is the
    wrong tool here anyway — the hold-out points were never used to fit the release — and
    :func:`pm_dpgp.workflow.holdout_elpd` gives the exact hold-out elpd on both stacks.
    """
    if USES_DATATREE:
        return None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(az.loo(idata).elpd_loo)


def plot_ppc(idata: Any, num_samples: int = 20) -> Any:
    if USES_DATATREE:
        return az.plot_ppc_dist(idata, num_samples=num_samples)
    return az.plot_ppc(idata, num_pp_samples=num_samples)


def plot_hdi(idata: Any, var_name: str = "y") -> Any:
    """HDI band of the posterior predictive over the hold-out inputs; returns the HDI."""
    if USES_DATATREE:
        hdi = az.hdi(idata, group="posterior_predictive", var_names=[var_name])
        az.plot_ppc_interval(idata, var_names=[var_name])
        return hdi
    const = get_group(idata, "constant_data")
    pp = get_group(idata, "posterior_predictive")
    az.plot_hdi(const["x"], pp[var_name])
    return az.hdi(idata, group="posterior_predictive", var_names=[var_name])


def plot_posterior(idata: Any, var_names: list[str], coords: Any = None) -> Any:
    """``az.plot_posterior`` (0.x) / ``az.plot_dist`` (1.x)."""
    if USES_DATATREE:
        return az.plot_dist(idata, var_names=var_names, coords=coords)
    return az.plot_posterior(idata, var_names=var_names, coords=coords)


def plot_trace(idata: Any, var_names: list[str], coords: Any = None) -> Any:
    """``az.plot_trace`` (0.x) / ``az.plot_trace_dist`` (1.x)."""
    if USES_DATATREE:
        return az.plot_trace_dist(idata, var_names=var_names, coords=coords)
    return az.plot_trace(idata, var_names=var_names, coords=coords)
