"""Kill tests for leak-scan mutants
(stop-34 mutation testing of the audit tools: 64 mutants, 35 survived the whole suite).
Each plants a private value in a form the module docstring promises to find, and that only
one layer / one comparison sees."""

from __future__ import annotations

import json

import h5py
import numpy as np
import xarray as xr

from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import add_groups, get_group, make_inference_data, to_netcdf

A, B = 123457.0, 98765431.0  # integers not present anywhere else in the release


def _base():
    rng = np.random.default_rng(0)
    pp = xr.Dataset(
        {"f_dp": (("chain", "draw", "x_star"), rng.standard_normal((1, 50, 5)))},
        coords={"x_star": np.linspace(-4.05, 4.05, 5)},
    )
    return make_inference_data({"posterior_predictive": pp})


def _with(attrs=None, **variables):
    idata = _base()
    ds = get_group(idata, "posterior_predictive").copy()
    ds = ds.assign(**variables) if variables else ds
    ds.attrs.update(attrs or {})
    return add_groups(idata, {"posterior_predictive": ds})


def _values(found, prefix=None):
    return {f.value for f in found if prefix is None or f.where.startswith(prefix)}


def test_json_integers_in_dicts_and_lists_are_found():  # L09 L11 L12 L14
    idata = _with({"meta": json.dumps({"n": int(A), "m": [int(B)]})})
    assert _values(scan_for_values(idata, [A, B])) == {A, B}


def test_exact_match_at_rtol_zero():  # L07 (rtol=0 means exact float64 equality)
    big = 123456789  # an integer float32 cannot hold (float32 gives 123456792)
    v = np.random.default_rng(2).uniform(-4, 4, 2)  # float64 draws stored compressed
    idata = _with({"meta": json.dumps({"n": big})}, leak=("i", v))
    assert _values(scan_for_values(idata, [float(big), *v], rtol=0.0)) == {float(big), *v}


def test_decimal_rounded_to_12_digits_in_free_text_is_found():  # L10
    v = 1.234567890123456
    idata = _with({"note": "value was 1.23456789012 today"})
    assert _values(scan_for_values(idata, [v])) == {v}


def test_integer_data_variable_is_found():  # L13
    idata = _with(ints=("i", np.array([int(A), int(B)], dtype=np.int64)))
    assert _values(scan_for_values(idata, [A, B])) == {A, B}


def test_unicode_string_variable_with_json_is_found():  # L16
    idata = _with(notes=("j", np.array([json.dumps({"n": int(A)})])))
    assert _values(scan_for_values(idata, [A])) == {A}


def test_bytes_attribute_with_json_is_found():  # L17
    idata = _with({"note": np.bytes_(json.dumps({"n": int(A)}).encode())})
    assert _values(scan_for_values(idata, [A])) == {A}


def test_shortest_float32_decimal_stored_as_float64_is_found():  # L05 L30
    v = np.random.default_rng(4).uniform(-4, 4, 3)
    short = np.array([float(str(x)) for x in v.astype(np.float32)])
    assert not np.any(np.isin(short, v.astype(np.float32).astype(np.float64)))
    idata = _with(leak=("i", short))
    assert _values(scan_for_values(idata, v)) == set(v.tolist())


def test_hidden_hdf5_attributes_are_found(tmp_path):  # L18 L19 (and L15 compound)
    path = tmp_path / "r.nc"
    to_netcdf(_base(), path)
    with h5py.File(path, "a") as f:  # names h5netcdf hides from xarray
        f.attrs["_nc3_strict"] = np.int64(A)
        f["posterior_predictive/f_dp"].attrs["_nc3_strict"] = np.int64(B)
        f["posterior_predictive"].attrs["_nc3_strict"] = np.array(
            [(777001, 0.5)], dtype=[("a", "<i8"), ("b", "<f8")]
        )
    found = scan_for_values(str(path), [A, B, 777001.0])
    assert _values(found) == {A, B, 777001.0}


def test_packed_variables_are_found_decoded(tmp_path):  # L28 L03
    vals = 0.5 + 0.25 * np.array([13, 39])  # exact after CF decoding of int16 packing
    ds = xr.Dataset(
        {"packed": ("i", vals)}, coords={"pc": ("k", 0.5 + 0.25 * np.array([57.0, 91.0]))}
    )
    path = tmp_path / "r.nc"
    enc = {"dtype": "int16", "scale_factor": 0.25, "add_offset": 0.5, "_FillValue": -999}
    ds.to_netcdf(
        path, group="posterior_predictive", engine="h5netcdf", encoding={"packed": enc, "pc": enc}
    )
    private = np.concatenate([vals, 0.5 + 0.25 * np.array([57.0, 91.0])])
    assert _values(scan_for_values(str(path), private)) == set(private.tolist())


def test_in_memory_level_reports_group_and_variable_attrs_and_coords():  # L01 L02 L03 L28
    idata = _base()
    ds = get_group(idata, "posterior_predictive").copy()
    ds.attrs["dbg"] = float(A) + 0.5
    ds["f_dp"].attrs["dbg"] = float(B) + 0.5
    ds = ds.assign_coords(cc=("c", np.array([A + 0.25])))
    idata = add_groups(idata, {"posterior_predictive": ds})
    # the in-memory level's labels (ArviZ 1 prefixes the group path with "/")
    wheres = {
        f.where.lstrip("/")
        for f in scan_for_values(idata, [A + 0.5, B + 0.5, A + 0.25])
        if not f.where.startswith("netCDF")
    }
    assert "posterior_predictive.attrs[dbg]" in wheres
    assert "posterior_predictive.attrs[<f_dp>.dbg]" in wheres
    assert "posterior_predictive/cc" in wheres


def _uint8_blob():
    """Raw bytes of private values inside an opaque uint8 variable (no float storage)."""
    vals = 0.1 + np.arange(12) / 7.0
    blob = bytearray(b"\x00" * 256)
    blob[0:4] = np.array([vals[0]], dtype="<f4").tobytes()  # float32, little-endian
    blob[8:16] = np.array([vals[1]], dtype=">f8").tobytes()  # float64, big-endian
    for s in range(8):  # float64 little-endian at every alignment
        o = 24 + 17 * s + s
        blob[o : o + 8] = np.array([vals[2 + s]], dtype="<f8").tobytes()
    return vals[:10], np.frombuffer(bytes(blob), dtype=np.uint8)


def test_raw_bytes_in_opaque_storage_are_found(tmp_path):  # L21 L22 L23 L24
    vals, blob = _uint8_blob()
    ds = xr.Dataset({"blob": ("b", blob)})
    path = tmp_path / "r.nc"
    ds.to_netcdf(path, group="posterior_predictive", engine="h5netcdf")
    found = scan_for_values(str(path), vals)
    assert _values(found, "netCDF bytes") == set(vals.tolist())
