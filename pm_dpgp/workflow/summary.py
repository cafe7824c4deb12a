"""A summary of DP draws that shows what they can support, and nothing else.

``az.summary`` computes, besides the mean, sd and credible interval, MCMC diagnostics:
R-hat, effective sample sizes and Monte Carlo standard errors (Vehtari et al. 2021,
"Rank-normalization, folding, and localization: an improved R-hat", *Bayesian Analysis*).
They answer "did the Markov chains mix?".  DP draws come from no Markov chain: a cloaking or
prior-noise release is a handful of independent DP draws (each one charged to the budget),
a sample-path release a few independent paths, a noise-aware release any number of exact
draws of its DP ``q(f)``.  With one chain and a few draws, R-hat, ESS and MCSE all come back
NaN (ArviZ 0.x also logs a shape-validation warning; stop-41 check on both stacks): columns
that look like a failed fit when nothing failed.  ``dp_summary`` therefore asks for the
statistics only (``kind="stats"``) and says in ``attrs["spread"]`` what the ``sd`` column
measures for this mechanism.  What to look at instead is in ``docs/workflow.md`` ("What the
spread means").

For a release with additive DP noise of public sd (cloaking, prior noise, output
perturbation, classification, binning), the spread of a few draws says little: one draw gives
``sd = NaN`` and an interval of width 0 (stop-34 audit).  ``dp_summary`` then adds what the
public noise sd supports: ``dp_noise_sd`` (one draw's noise), ``mean_sd = dp_noise_sd / √S``
and the equal-tailed interval ``mean_lb, mean_ub = d̄ ∓ z · mean_sd`` for the released
(private) posterior mean given the ``S`` draws (flat prior, ``docs/workflow.md``).

Both stacks give the same numbers for these columns: their probability defaults to
``MEAN_INTERVAL_PROB`` (0.9), not to ArviZ's default (0.94 on ArviZ 0.x, 0.89 on ArviZ 1),
and the table is not rounded (``compat.summary_stats``).  ArviZ's own interval columns keep
ArviZ's default and kind (``hdi_3%``/``hdi_97%`` vs ``eti89_lb``/``eti89_ub``,
``docs/compatibility.md``) unless ``prob`` is given.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy.stats import norm

from pm_dpgp._validation import real_or_nan
from pm_dpgp.compat import get_group, group_names, summary_stats

__all__ = ["MEAN_INTERVAL_PROB", "dp_summary", "spread_meaning"]

#: Probability of ``mean_lb, mean_ub`` when ``dp_summary(prob=None)``: one value on both
#: stacks, so that a release's summary does not depend on the installed ArviZ's default.
MEAN_INTERVAL_PROB = 0.9

_LABEL = ("cloaking", "prior_noise", "output_perturbation")
#: mechanisms whose draws are a private mean plus DP noise of public sd ``dp_noise_sd``
_ADDITIVE = (*_LABEL, "laplace_classification", "laplace_binning")


def spread_meaning(mechanism: str) -> str:
    """What the spread of a release's draws measures, by mechanism name (``attrs["mechanism"]``).

    Matched by name, Thompson runs first: their mechanism names contain ``sample_path`` too,
    but their ``draw`` axis is the round (stop-31 audit: they were described as posterior
    draws, and classification and binning releases fell through to the generic text).
    """
    noise_sd = "the public noise sd is constant_data['dp_noise_sd']"
    if "thompson" in mechanism.lower():
        return (
            "the draw axis is the round of the search: the spread is that of the chosen "
            "points and the released path values at them over the run, NOT posterior "
            "uncertainty (az.plot_trace shows the search, not mixing)"
        )
    if mechanism.startswith(_LABEL):
        return (
            f"DP noise around the (private) posterior mean: NOT posterior uncertainty; {noise_sd}"
            ", the posterior sd is public under label privacy (PublicGP.posterior_var)"
        )
    if mechanism.startswith("laplace_classification"):
        return (
            "DP noise around the (private) latent mean of one cloaked Laplace/Newton step: NOT "
            f"posterior uncertainty; {noise_sd}, the latent posterior variance is public "
            "(metadata 'latent_var')"
        )
    if mechanism.startswith("laplace_binning"):
        return (
            "Laplace noise on the (private) bin means, or on the GP fitted to them: NOT "
            f"posterior uncertainty; {noise_sd} (sqrt(2) x the Laplace scale)"
        )
    if mechanism.startswith("sample_path"):
        return "posterior uncertainty of the clipped-data GP, widened by the privacy term eta"
    if mechanism.startswith("noise_aware"):
        return (
            "the DP posterior q(f) (Honkela 2024, eq. 17): posterior uncertainty plus the DP "
            "noise it is aware of, NOT calibrated for the latent f: the regularisation lambda "
            "(eq. 10) biases the mean and S2 does not account for it, so 90 % intervals "
            "covered f in 0.29-0.42 of cases (docs/noise_aware.md §11; intervals for y = f + e "
            "0.62-0.85); draws are exact draws of q(f) and free"
        )
    if mechanism.startswith("naive"):
        return (
            "the naive DP q(f): it ignores the DP noise, so its intervals under-cover "
            "(docs/noise_aware.md); prefer variant='noise_aware'"
        )
    return "see the release's mechanism documentation"


def dp_summary(
    data: Any,
    *,
    var_names: list[str] | None = None,
    group: str = "posterior",
    prob: float | None = None,
) -> Any:
    """Mean, sd and credible interval of DP draws, without MCMC diagnostics.

    Parameters
    ----------
    data
        The ArviZ object of a release (``InferenceData`` / ``DataTree``) or any release
        with ``to_inference_data()``.
    var_names, group
        As in ``az.summary``.
    prob
        Credible-interval probability.  ``None``: ArviZ's default for its own interval
        columns (HDI 0.94 on ArviZ 0.x, ETI 0.89 on ArviZ 1) and ``MEAN_INTERVAL_PROB``
        (0.9) for ``mean_lb``, ``mean_ub`` on both stacks.

    Returns
    -------
    pandas.DataFrame
        ``az.summary(..., kind="stats")``, unrounded, one row per element labelled by the
        variable's own dim order; ``attrs["spread"]`` says what ``sd`` measures and
        ``attrs["n_draws"]`` how many DP draws it is computed from (for a ``dp_ppc`` object
        the DP draws, not their replicates).  For a release with additive DP noise of public
        sd, also ``dp_noise_sd``, ``mean_sd`` and the interval ``mean_lb``, ``mean_ub`` of the
        released posterior mean at ``prob`` (module doc; ``attrs["mean_interval"]``).

    Examples
    --------
    >>> idata = release.to_inference_data(dims={"f_dp": ["age"]}, coords={"age": ages})
    >>> dp_summary(idata).attrs["spread"]  # doctest: +SKIP
    """
    idata = data.to_inference_data() if hasattr(data, "to_inference_data") else data
    if group not in group_names(idata):
        raise ValueError(f"no group {group!r} in this object; groups: {group_names(idata)}.")
    ds = get_group(idata, group)
    if prob is not None:  # "0.9" and Fraction gave NumPy's TypeError (stop-40 fuzz)
        given = prob
        prob = real_or_nan(prob, "prob")
        if not 0.0 < prob < 1.0:  # quotes what was passed: np.array([0.9]) read "got nan"
            raise ValueError(f"prob must be a number in (0, 1), got {given!r}; pass e.g. 0.9.")
    if var_names is not None:  # a set or one name gave ArviZ's KeyError (stop-41 fuzz)
        if isinstance(var_names, str):
            var_names = [var_names]
        if not isinstance(var_names, list | tuple) or not all(
            isinstance(v, str) for v in var_names
        ):
            raise ValueError(
                f"var_names must be a list of variable names, got {var_names!r}; pass e.g. "
                f"{sorted(map(str, ds.data_vars))}."
            )
        missing = [v for v in var_names if v.removeprefix("~") not in ds.data_vars]
        if missing:  # ("~name" excludes a variable, as in ArviZ)
            have = sorted(map(str, ds.data_vars))
            raise ValueError(f"no variable {missing} in group {group!r}; it has {have}.")
        var_names = list(var_names)
        # ArviZ's rule on both stacks: with any "~name", every variable but the excluded ones
        excluded = {v[1:] for v in var_names if v.startswith("~")}
        if excluded and not [v for v in map(str, ds.data_vars) if v not in excluded]:
            # xarray's "'chain', 'draw' do not exist" (ArviZ 0.x) or pandas' "No objects to
            # concatenate" (ArviZ 1; stop 44)
            raise ValueError(f"var_names={var_names!r} leaves no variable of group {group!r}.")
    with warnings.catch_warnings():
        # kind="stats" computes no R-hat/ESS; ArviZ may still warn about a single chain
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        table = summary_stats(idata, var_names=var_names, group=group, prob=prob)
    mechanism = str(ds.attrs.get("mechanism", ""))
    table.attrs["spread"] = spread_meaning(mechanism)
    table.attrs["n_draws"] = int(ds.sizes.get("draw", 0))
    if "ppc_n_dp_draws" in ds.attrs:  # a dp_ppc object: its draws repeat or marginalise
        table.attrs["n_draws"] = int(ds.attrs["ppc_n_dp_draws"])
        ppc_f = str(ds.attrs.get("ppc_f", ""))
        if "release_posterior" in ppc_f:
            # stop-38 usability audit: the cloaking text ("NOT posterior uncertainty") was
            # appended here, contradicting this f, which IS the posterior given the release
            table.attrs["spread"] = (
                f"{ppc_f}: posterior uncertainty about f given the release (the GP's and the "
                "DP noise's together), exact under the model's prior; its prior predictive "
                "check: attrs ppc_prior_check_p"
            )
        elif "marginalise" in ppc_f:
            table.attrs["spread"] = (
                f"{ppc_f}: the DP noise's share of the uncertainty about the private posterior "
                "mean, NOT posterior uncertainty about f (dp_ppc's extra_sd widens only the "
                "predictive y, not f; release_posterior gives f's posterior); one DP draw's "
                "noise sd is constant_data['dp_noise_sd']"
            )
        elif "ppc_f" in ds.attrs:
            table.attrs["spread"] = f"{ds.attrs['ppc_f']}; {table.attrs['spread']}"
    elif group == "posterior" and mechanism.startswith(_ADDITIVE):
        _released_mean_columns(table, idata, ds, prob)
    return table


def _released_mean_columns(table: Any, idata: Any, ds: Any, prob: float | None) -> None:
    """Add ``dp_noise_sd``, ``mean_sd``, ``mean_lb``, ``mean_ub`` to the rows of each variable
    that shares its point dims with ``constant_data["dp_noise_sd"]`` (in place)."""
    if "constant_data" not in group_names(idata):
        return
    const = get_group(idata, "constant_data")
    if "dp_noise_sd" not in const:
        return
    noise_sd = const["dp_noise_sd"]
    # a fixed default, not ArviZ's (0.94 on 0.x, 0.89 on 1): the same numbers on both stacks
    p = float(MEAN_INTERVAL_PROB if prob is None else prob)
    z = float(norm.ppf(0.5 + 0.5 * p))
    labels = [str(label) for label in table.index]
    for name, var in ds.data_vars.items():
        point_dims = tuple(d for d in var.dims if d not in ("chain", "draw"))
        if point_dims != noise_sd.dims:
            continue
        rows = [i for i, lab in enumerate(labels) if lab == name or lab.startswith(f"{name}[")]
        if len(rows) != noise_sd.size:  # the table does not list this variable element-wise
            continue
        S = int(var.sizes["chain"] * var.sizes["draw"])
        centre = np.asarray(var.mean(("chain", "draw")).values, float).ravel()
        sd = np.asarray(noise_sd.values, float).ravel()
        for column, values in (
            ("dp_noise_sd", sd),
            ("mean_sd", sd / math.sqrt(S)),
            ("mean_lb", centre - z * sd / math.sqrt(S)),
            ("mean_ub", centre + z * sd / math.sqrt(S)),
        ):
            if column not in table.columns:
                table[column] = np.nan
            table.iloc[rows, table.columns.get_loc(column)] = values
        if S == 1:
            # ArviZ's interval of one draw is that draw (zero width, beside a NaN sd): a
            # reader took it for a credible interval (stop-38 usability audit); the interval
            # of a one-draw release is mean_lb, mean_ub
            for column in table.columns:
                if str(column).startswith(("hdi", "eti")):
                    table.iloc[rows, table.columns.get_loc(column)] = np.nan
    table.attrs["mean_interval"] = (
        f"mean_lb, mean_ub: equal-tailed {p:g} interval of the released posterior mean given "
        "the S DP draws, mean of the draws -/+ z * dp_noise_sd / sqrt(S) (flat prior; exact "
        "for Gaussian noise, a normal approximation for binning's Laplace noise, which covers "
        "0.97 at 0.99 with one draw); dp_noise_sd: public sd of one draw's DP noise; with one "
        "DP draw ArviZ's own interval columns are NaN (an interval of one draw has no width)"
    )
