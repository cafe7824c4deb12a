"""Hyperparameter values from PyMC results, used only once the user declares them public.

A release needs PUBLIC hyperparameters (``pm_dpgp.models.GPRegression.public_gp``).
PyMC users hold them as a ``pm.find_MAP()`` dict (with transformed keys such as
``ls_log__``), an ``idata.posterior`` of draws, or a plain dict.  Values fitted to the private
data are functions of it: using them in a release leaks it (Smith et al. 2018, §4; the
project's ``docs/privacy_model.md``).  They are public only when fitted on public or
set-aside data, taken from a published study, or chosen by a private selection mechanism
whose cost is charged.  ``public_hyperparameters`` converts the PyMC result and records
the user's explicit declaration (``hyperparameters_are_public=True``); nothing in the package
takes hyperparameters from a result without it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import numpy as np

__all__ = [
    "CALLER_DECLARED",
    "PublicHyperparameters",
    "hyperparameter_source",
    "public_hyperparameters",
    "warn_if_not_planned",
]

#: ``hyperparameter_source`` of values passed as a plain mapping: the caller's declaration.
CALLER_DECLARED = "given as public values by the caller"

Summary = Literal["median", "mean"]


class PublicHyperparameters(Mapping[str, Any]):
    """Hyperparameter values the user declared public, with where they came from.

    A read-only mapping ``{name: value}`` (constrained scale).  ``public_gp`` /
    ``public_sparse_gp`` and every mechanism's ``hyperparameters=`` take it like a dict;
    names that are not hyperparameters of the model (other free variables of a MAP dict or
    of a posterior) are ignored for it, while a plain dict must name exactly the model's.
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        provenance: str,
        planned_release: Mapping[str, Any] | None = None,
    ) -> None:
        self._values = {str(k): v for k, v in values.items()}
        self.provenance = provenance
        #: the public release setting the values were chosen for (a selection whose utility
        #: includes the release noise, e.g. Smith et al. 2021 Alg. 1): keys among
        #: ``epsilon``, ``delta``, ``y_bounds``, ``calibration``; ``None``: no such setting
        self.planned_release = None if planned_release is None else dict(planned_release)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        planned = self.planned_release
        planned = "" if planned is None else f", planned_release={planned!r}"
        return f"PublicHyperparameters({self._values!r}, provenance={self.provenance!r}{planned})"

    def restricted_to(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The values of ``names`` (missing names are left for the caller to report)."""
        return {k: self._values[k] for k in names if k in self._values}


def _is_transformed(name: str) -> bool:
    """PyMC's unconstrained copies: ``ls_log__``, ``p_logodds__``, ``x_interval__`` …"""
    return name.endswith("__")


def hyperparameter_source(hyperparameters: Any, names: tuple[str, ...]) -> str:
    """Where a release's public hyperparameters came from, for its metadata (public text).

    ``PublicHyperparameters`` carry their provenance (``public_hyperparameters``, or a private
    selection's ``SelectionResult.public_hyperparameters()``); any other mapping is the caller's
    declaration, ``CALLER_DECLARED``; a model without free hyperparameters has none.
    """
    if not names:
        return "none: the model has no free hyperparameters"
    if isinstance(hyperparameters, PublicHyperparameters):
        return hyperparameters.provenance
    return CALLER_DECLARED


def warn_if_not_planned(hyperparameters: Any, **release: Any) -> None:
    """A ``UserWarning`` when a release's public setting differs from the one its
    hyperparameters were selected for (``PublicHyperparameters.planned_release``).

    Smith et al. (2021, Alg. 1) score each configuration by the error of the release *with its
    noise*: values chosen for ``(ε, δ) = (1, 10⁻⁶)`` are not the choice for ε = 0.25, where the
    noise is four times larger.  The release stays DP either way (the selection was charged);
    the warning says that the choice may not suit it.  Public values only, before any spend.
    ``release``: the validated ``epsilon``, ``delta``, ``y_bounds`` and ``calibration``.
    """
    planned = getattr(hyperparameters, "planned_release", None)
    if not planned:
        return
    differ = []
    for key, value in release.items():
        if key not in planned or planned[key] is None:
            continue
        want = planned[key]
        same = (
            want == value
            if isinstance(want, str)
            else np.allclose(np.asarray(want, float), np.asarray(value, float), rtol=1e-12, atol=0)
        )
        if not same:
            differ.append(f"{key} {want!r} (selection) vs {value!r} (this release)")
    if differ:
        warnings.warn(
            "these hyperparameters were selected for a release with another setting: "
            + "; ".join(differ)
            + ". The release is private either way; the selection's utility scored the "
            "release noise of its own setting, so its choice may not suit this one.",
            UserWarning,
            stacklevel=3,
        )


def public_hyperparameters(
    source: Any,
    *,
    hyperparameters_are_public: bool = False,
    summary: Summary | None = None,
) -> PublicHyperparameters:
    """Hyperparameters from a MAP dict, an ``idata``/``idata.posterior`` or a dict, declared public.

    Parameters
    ----------
    source
        ``pm.find_MAP()``'s dict (transformed ``*__`` entries are dropped; the constrained
        values are used), a plain ``{name: value}`` dict, an ``InferenceData`` / ``DataTree``
        (its ``posterior`` group) or an ``xarray.Dataset`` of draws with ``chain``/``draw``.
    hyperparameters_are_public
        Must be ``True``: the caller states that these values are public (fitted on public
        or set-aside data, published, or chosen by a charged private selection).  Fitted to
        the private data they are not, and a release using them is not DP.
    summary
        For draws: ``"median"`` or ``"mean"`` over ``chain`` and ``draw`` (required: a
        posterior has no single value until one is chosen).

    Examples
    --------
    >>> hp = public_hyperparameters(
    ...     pm.find_MAP(model=public_fit.model), hyperparameters_are_public=True
    ... )  # doctest: +SKIP
    >>> release = cloaked_release(model, X_star, hyperparameters=hp, ...)  # doctest: +SKIP
    """
    if hyperparameters_are_public is not True:
        from pm_dpgp.models.exact import PrivateHyperparameterError

        raise PrivateHyperparameterError(
            "hyperparameters from a fit are public only if the fit used no private data (public "
            "or set-aside data, a published study) or a charged private selection; say so with "
            "hyperparameters_are_public=True. Values fitted to the private data leak it."
        )
    draws = _posterior_dataset(source)
    if draws is None:
        if not isinstance(source, Mapping):
            raise TypeError(
                "source must be a find_MAP dict, a {name: value} dict, an InferenceData/DataTree "
                f"or a posterior Dataset, got {type(source).__name__}."
            )
        if summary is not None:
            raise ValueError("summary applies to posterior draws; a dict holds single values.")
        from pm_dpgp._validation import public_real_array

        values = {
            k: public_real_array(v, f"hyperparameter {k!r}")  # True / "1.5" refused (stop 40)
            for k, v in source.items()
            if not _is_transformed(k)
        }
        kept = {k: (float(v) if v.ndim == 0 else v) for k, v in values.items()}
        return PublicHyperparameters(kept, "dict (declared public)")
    if summary not in ("median", "mean"):
        raise ValueError(
            f"summary must be 'median' or 'mean' for posterior draws, got {summary!r}; state "
            "which point of the posterior to use."
        )
    sample_dims = [d for d in ("chain", "draw") if d in draws.dims]
    if not sample_dims:
        raise ValueError("posterior draws need a 'chain' and/or 'draw' dim.")
    out: dict[str, Any] = {}
    for name, da in draws.data_vars.items():
        if _is_transformed(str(name)):
            continue
        red = da.median(sample_dims) if summary == "median" else da.mean(sample_dims)
        arr = np.asarray(red.values, dtype=np.float64)
        out[str(name)] = float(arr) if arr.ndim == 0 else arr
    return PublicHyperparameters(out, f"posterior {summary} (declared public)")


def _posterior_dataset(source: Any) -> Any:
    """The posterior ``Dataset`` of an InferenceData / DataTree / Dataset, else ``None``."""
    import xarray as xr

    from pm_dpgp.compat import get_group, group_names

    if isinstance(source, xr.Dataset):
        return source
    if hasattr(source, "to_dataset") and {"chain", "draw"} & set(getattr(source, "dims", ())):
        return source.to_dataset()  # a DataTree node such as ``idata.posterior``
    if (
        isinstance(source, Mapping)
        and not hasattr(source, "groups")
        and not hasattr(source, "children")
    ):
        return None
    try:
        names = group_names(source)
    except (AttributeError, TypeError):
        return None
    if "posterior" not in names:
        raise ValueError(f"no posterior group in this object; groups: {names}.")
    return get_group(source, "posterior")
