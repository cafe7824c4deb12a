"""Every result type is the installed ArviZ's native object and round-trips through netCDF.

Runs on whichever stack is installed (CI runs it on both: Python 3.11 + PyMC 5 + ArviZ 0.x
``InferenceData``, and Python 3.12 + PyMC 6 + ArviZ 1 ``DataTree``).
"""

from __future__ import annotations

import json
import os

import arviz as az
import matplotlib
import numpy as np
import pymc as pm
import pytest
import xarray as xr

from pm_dpgp import compat
from pm_dpgp.workflow import dp_ppc, dp_thompson_sampling
from tests import arviz_stack
from tests.releases import (
    dirichlet,
    label_release,
    noise_aware,
    objective,
    sample_path,
    thompson_kwargs,
)

matplotlib.use("Agg")

NATIVE = xr.DataTree if compat.USES_DATATREE else az.InferenceData


def test_stack_is_reported_and_consistent() -> None:
    line = compat.stack_description()
    print(line)  # shows in -rA / CI logs which stack ran
    assert ("DataTree" in line) == compat.USES_DATATREE
    assert compat.USES_DATATREE == (int(az.__version__.split(".")[0]) >= 1)


def _results(kind, model):
    """(result object, group holding the privacy attrs, a DP variable in it)."""
    if kind in ("cloaking", "prior_noise"):
        return label_release(kind, model).to_inference_data(), "posterior_predictive", "f_dp"
    if kind == "sample_path":
        return sample_path(model).to_inference_data(), "posterior_predictive", "f_path"
    if kind == "noise_aware":
        rel = noise_aware()
        return rel.to_inference_data(np.linspace(-3, 3, 11), n_draws=50), "posterior", "f"
    if kind == "dirichlet":
        rel = dirichlet()
        return rel.to_inference_data(np.linspace(-3, 3, 11), n_draws=50), "posterior", "p"
    if kind == "dp_ppc":
        rel = label_release("cloaking", model)
        X_hold = np.linspace(0.1, 5.9, 12)
        y_hold = np.sin(X_hold)
        idata = dp_ppc(
            rel,
            X_hold,
            y_hold,
            noise_sd=0.3,
            training=model,
            interpolate=True,
            rng=np.random.default_rng(7),
        )
        return idata, "posterior", "f"
    if kind == "thompson":
        res = dp_thompson_sampling(
            objective,
            pm.gp.cov.ExpQuad(1, ls=0.2),
            **thompson_kwargs(n_rounds=2, epsilon=100.0, noise_sd=2.0),
        )
        return res.idata, "thompson", "x_chosen"
    raise AssertionError(kind)


KINDS = ["cloaking", "prior_noise", "sample_path", "noise_aware", "dirichlet", "dp_ppc", "thompson"]


@pytest.mark.parametrize("kind", KINDS)
def test_native_object_and_netcdf_round_trip(kind, small_gp, tmp_path) -> None:
    idata, group, var = _results(kind, small_gp)
    assert isinstance(idata, NATIVE), type(idata)
    assert group in compat.group_names(idata)
    ds = compat.get_group(idata, group)
    assert isinstance(ds, xr.Dataset) and var in ds
    attrs = dict(ds.attrs)
    assert "privacy_model" in attrs or "mechanism" in attrs or kind == "thompson"
    path = compat.to_netcdf(idata, tmp_path / f"{kind}.nc")
    back = compat.from_netcdf(path)
    # fully loaded and the file closed: writing the same path again raised OSError (stop 41)
    compat.to_netcdf(idata, path)
    os.remove(path)
    assert isinstance(back, NATIVE)
    assert set(compat.group_names(back)) == set(compat.group_names(idata))
    for name in compat.group_names(idata):
        a, b = compat.get_group(idata, name), compat.get_group(back, name)
        for v in a.data_vars:
            # netCDF stores float64 verbatim: the round trip is bit-exact.
            np.testing.assert_array_equal(b[v].values, a[v].values)
        assert set(b.attrs) == set(a.attrs)
        for key, value in a.attrs.items():
            got = b.attrs[key]
            if isinstance(value, str):
                assert got == value, key
                if value.startswith(("{", "[")):
                    json.loads(got)  # nested metadata survives as valid JSON
            else:
                np.testing.assert_array_equal(np.asarray(got), np.asarray(value), err_msg=key)


@pytest.mark.parametrize("kind", ["cloaking", "prior_noise", "sample_path", "dp_ppc"])
def test_arviz_summary_and_plots_work(kind, small_gp) -> None:
    idata, group, var = _results(kind, small_gp)
    if kind == "dp_ppc":
        assert arviz_stack.summary(idata, var_names=["f"], kind="stats").shape[0] == 12
        arviz_stack.plot_ppc(idata, num_samples=20)
        hdi = arviz_stack.plot_hdi(idata, "y")
        lo_hi = np.asarray(hdi["y"])  # (obs, 2) on both stacks
        assert lo_hi.shape == (12, 2) and np.all(lo_hi[:, 0] <= lo_hi[:, 1])
    else:
        s = arviz_stack.summary(idata, group=group, var_names=[var], kind="stats")
        assert s.shape[0] == compat.get_group(idata, group)[var].shape[-1]
    matplotlib.pyplot.close("all")


def test_summary_stats_rows_match_values_whatever_the_dim_order() -> None:
    """Audit of the two stacks: ArviZ 1.3's ``az.summary`` stacks the values of a group's
    variables in one dim order but labels each variable's rows in its own order, so ``p``
    with dims ``(B, A)`` after ``f (A, B)`` showed ``p[b, a]`` values in other rows.
    ``compat.summary_stats`` must label every row with its own element's value on both stacks,
    for every selection of variables, and not round (ArviZ 0.x rounded the table)."""
    A, B, n = 2, 3, 4
    base = np.arange(A * B, dtype=float).reshape(A, B) + 1.0 / 7.0
    f = np.broadcast_to(base, (1, n, A, B)).copy()
    p = np.broadcast_to(10.0 * base.T, (1, n, B, A)).copy()  # p[b, a] = 10 f[a, b]
    ds = xr.Dataset({"f": (("chain", "draw", "A", "B"), f), "p": (("chain", "draw", "B", "A"), p)})
    idata = compat.make_inference_data({"posterior": ds})
    expected = {f"f[{a}, {b}]": base[a, b] for a in range(A) for b in range(B)}
    expected |= {f"p[{b}, {a}]": 10.0 * base[a, b] for a in range(A) for b in range(B)}
    for var_names, kept in ((None, "fp"), (["p", "f"], "fp"), (["p"], "p"), (["~f"], "p")):
        table = compat.summary_stats(idata, var_names=var_names)
        got = {str(k): float(v) for k, v in table["mean"].items()}
        want = {k: v for k, v in expected.items() if k[0] in kept}
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-12), (var_names, k)


def test_add_groups_and_errors(small_gp) -> None:
    idata, _, _ = _results("cloaking", small_gp)
    extra = xr.Dataset({"a": ("k", np.arange(3.0))}, attrs={"note": "public"})
    compat.add_groups(idata, {"my_group": extra})
    assert compat.get_group(idata, "my_group").attrs["note"] == "public"
    replaced = compat.get_group(idata, "constant_data").drop_vars("dp_noise_sd")
    compat.add_groups(idata, {"constant_data": replaced})
    assert "dp_noise_sd" not in compat.get_group(idata, "constant_data")
    with pytest.raises(KeyError, match="no group"):
        compat.get_group(idata, "nope")
    with pytest.raises(TypeError, match="xarray.Dataset"):
        compat.make_inference_data({"posterior": np.zeros(3)})
