"""The one place that knows which ArviZ is installed.

pm_dpgp supports two stacks from one code base:

* ArviZ 0.x (with PyMC 5): results are ``arviz.InferenceData``;
* ArviZ ≥ 1 (with PyMC 6): results are ``xarray.DataTree`` (``InferenceData`` is gone;
  groups are child nodes, ``az.from_netcdf`` returns a ``DataTree``).

Everything that builds, reads, extends or serialises a result goes through the functions
below, so that every release type, ``pm_dpgp.workflow.dp_ppc`` and the Thompson loop
return the *native* object of the installed ArviZ.  Nothing else in the package checks
versions.  Group contents are always ``xarray.Dataset`` objects here, whatever the stack.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import xarray as xr

__all__ = [
    "ARVIZ_MAJOR",
    "USES_DATATREE",
    "add_groups",
    "from_netcdf",
    "get_group",
    "group_names",
    "iter_all_groups",
    "make_inference_data",
    "stack_description",
    "summary_stats",
    "to_netcdf",
]


def _arviz_major() -> int:
    from importlib.metadata import version

    return int(version("arviz").split(".")[0])


ARVIZ_MAJOR: int = _arviz_major()
#: True on ArviZ ≥ 1, where results are ``xarray.DataTree``.
USES_DATATREE: bool = ARVIZ_MAJOR >= 1


def make_inference_data(groups: Mapping[str, xr.Dataset]) -> Any:
    """Build the native result object (``InferenceData`` or ``DataTree``) from datasets.

    ``groups`` maps group names (``posterior``, ``posterior_predictive``, ``constant_data``,
    or a custom name such as ``thompson``) to ``xarray.Dataset`` objects; their attrs are kept.
    """
    _check_groups(groups)
    if USES_DATATREE:
        return xr.DataTree.from_dict(dict(groups))
    import arviz as az

    standard = {k: v for k, v in groups.items() if k in _SUPPORTED_GROUPS_0X}
    custom = {k: v for k, v in groups.items() if k not in _SUPPORTED_GROUPS_0X}
    idata = az.InferenceData(**standard)
    if custom:
        idata.add_groups(custom, warn_on_custom_groups=False)
    return idata


def _is_datatree(idata: Any) -> bool:
    """Whether ``idata`` is an ``xarray.DataTree`` (whichever ArviZ is installed: a tree read
    with ``xr.open_datatree`` on the ArviZ 0.x stack failed in ``group_names`` with
    "'tuple' object is not callable"; stop-49 new-user audit)."""
    tree = getattr(xr, "DataTree", None)
    return tree is not None and isinstance(idata, tree)


def group_names(idata: Any) -> list[str]:
    """Names of the groups of ``idata`` (without DataTree's leading ``/``)."""
    if _is_datatree(idata):
        return list(idata.children)
    return list(idata.groups())


def get_group(idata: Any, name: str) -> xr.Dataset:
    """Group ``name`` of ``idata`` as an ``xarray.Dataset`` (``KeyError`` if absent)."""
    if name not in group_names(idata):
        raise KeyError(f"no group {name!r}; groups are {group_names(idata)}")
    node = idata[name]
    return node.to_dataset() if _is_datatree(idata) else node


def iter_all_groups(idata: Any) -> list[tuple[str, xr.Dataset]]:
    """Every node's data as ``(name, Dataset)``, including a DataTree's root and nested nodes.

    Used by the leak scan, which must see everything that would be serialised.
    """
    if _is_datatree(idata):
        return [(node.path, node.to_dataset()) for node in idata.subtree]
    return [(name, idata[name]) for name in idata.groups()]


def add_groups(idata: Any, groups: Mapping[str, xr.Dataset]) -> Any:
    """Add (or replace) groups in place and return ``idata``."""
    _check_groups(groups)
    if _is_datatree(idata):
        for name, ds in groups.items():
            idata[name] = xr.DataTree(ds)
        return idata
    for name, ds in groups.items():
        if name in idata.groups():
            setattr(idata, name, ds)
        else:
            idata.add_groups({name: ds}, warn_on_custom_groups=False)
    return idata


def to_netcdf(idata: Any, path: str | os.PathLike[str]) -> str:
    """Write ``idata`` (all groups and their attrs) to one netCDF-4 file; return the path."""
    path = os.fspath(path)
    idata.to_netcdf(path, engine="h5netcdf")  # same call on InferenceData and DataTree
    return path


def from_netcdf(path: str | os.PathLike[str]) -> Any:
    """Read a file written by ``to_netcdf`` into the native object, fully loaded, the file
    closed (it stayed open on both stacks, so writing to the same path again raised
    ``OSError``; stop-41 check)."""
    import arviz as az

    if USES_DATATREE:
        tree = az.from_netcdf(os.fspath(path), engine="h5netcdf")
        loaded = tree.load()
        tree.close()
        return loaded
    with az.rc_context({"data.load": "eager"}):  # eager: read into memory and closed
        return az.from_netcdf(os.fspath(path), engine="h5netcdf")


def stack_description() -> str:
    """One line naming the installed stack (printed by the test runs)."""
    import sys
    from importlib.metadata import version

    kind = "DataTree" if USES_DATATREE else "InferenceData"
    return (
        f"Python {sys.version.split()[0]}, PyMC {version('pymc')}, PyTensor {version('pytensor')}, "
        f"ArviZ {version('arviz')} ({kind}), xarray {version('xarray')}"
    )


_SUPPORTED_GROUPS_0X = (
    "posterior",
    "posterior_predictive",
    "predictions",
    "log_likelihood",
    "sample_stats",
    "observed_data",
    "constant_data",
    "predictions_constant_data",
    "prior",
    "prior_predictive",
    "sample_stats_prior",
    "warmup_posterior",
    "warmup_posterior_predictive",
    "warmup_predictions",
    "warmup_log_likelihood",
    "warmup_sample_stats",
)


def _check_groups(groups: Mapping[str, xr.Dataset]) -> None:
    for name, ds in groups.items():
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"group {name!r} must be an xarray.Dataset, got {type(ds).__name__}")


def summary_stats(
    idata: Any,
    *,
    var_names: list[str] | None = None,
    group: str = "posterior",
    prob: float | None = None,
) -> Any:
    """``az.summary(..., kind="stats")``: mean, sd and a credible interval, no diagnostics.

    The interval probability is ``hdi_prob`` on ArviZ 0.x and ``ci_prob`` on ArviZ 1 (their
    defaults and interval kinds differ: ``docs/compatibility.md``).  Values are returned
    unrounded on both stacks (``round_to="none"``): by default ArviZ 0.x rounds the values in
    the table (e.g. to three decimals) and ArviZ 1 only their display, so the same release
    gave different numbers on the two stacks.

    ArviZ 1's wide table stacks dims into a dim called ``label``: a user dim of that name
    is passed as ``label_`` (ArviZ 1.3 raises otherwise).  ArviZ 1.3 also stacks the values
    of all variables of a group in one dim order (the order in which dims first appear) but
    labels each row by the variable's own dim order, so a variable whose dims come in
    another order than an earlier one's got other elements' values in its rows (audit of the
    two stacks: ``p (obs_id, class)`` after ``f (class, obs_id)``).  Transposing the variables
    to one order does not cure it for every selection of variables (the stacking order
    depends on which variables are selected, and in which order), so on ArviZ 1 each variable
    is summarised on its own, where its rows and values always agree, and the tables are
    concatenated.
    """
    import arviz as az

    if not USES_DATATREE:
        if _is_datatree(idata):  # a tree read with xr.open_datatree on this stack
            idata = make_inference_data({g: get_group(idata, g) for g in group_names(idata)})
        return az.summary(
            idata, var_names=var_names, group=group, kind="stats", hdi_prob=prob, round_to="none"
        )
    import pandas as pd

    ds = get_group(idata, group)
    if "label" in ds.dims:
        ds = ds.rename({"label": "label_"})
    tree = xr.DataTree.from_dict({group: ds})
    names = list(ds.data_vars)
    if var_names is not None:
        # as ArviZ (0.x and 1: arviz.utils / arviz_base.utils._subset_list) reads them: with
        # any "~name", every variable but the excluded ones (the other names add nothing);
        # else the names given.  A mixed list (["f", "~p"]) summarised "~p" on its own, so
        # f's rows came twice (stop-44 audit); stop-44 review: not "f only" either, since
        # az.summary on ArviZ 0.x (the other stack) gives f and every other variable but p
        excluded = {str(v)[1:] for v in var_names if str(v).startswith("~")}
        # each name once, as ArviZ 0.x reads ["f", "f"] (stop-46 audit: f's rows came twice)
        names = (
            [n for n in names if n not in excluded] if excluded else list(dict.fromkeys(var_names))
        )
    tables = [
        az.summary(tree, var_names=[n], group=group, kind="stats", ci_prob=prob, round_to="none")
        for n in names
    ]
    return pd.concat(tables) if len(tables) != 1 else tables[0]
