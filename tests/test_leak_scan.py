"""Precision of the leak scan: float32 leaks are found wherever they are stored, chance
float32-sized byte patterns inside float data are not (``docs/privacy_model.md``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import USES_DATATREE, add_groups, get_group, make_inference_data, to_netcdf

N_PRIVATE = 800


@pytest.fixture(scope="module")
def private() -> np.ndarray:
    return np.random.default_rng(11).uniform(-4.0, 4.0, N_PRIVATE)


def _release(seed: int = 0, n_draws: int = 400):
    """A release-shaped object: 1 × n_draws × 25 float64 draws, JSON metadata, coords."""
    rng = np.random.default_rng(seed)
    pp = xr.Dataset(
        {"f_dp": (("chain", "draw", "x_star"), rng.standard_normal((1, n_draws, 25)))},
        coords={"x_star": np.linspace(-4.05, 4.05, 25)},
        attrs={"mechanism": "gaussian", "epsilon": 1.0, "meta": json.dumps({"bounds": [-2, 2]})},
    )
    return make_inference_data({"posterior_predictive": pp})


def _with(idata, group: str, **kw):
    ds = get_group(idata, group)
    for key, value in kw.items():
        if key.startswith("attr_"):
            ds.attrs[key[5:]] = value
        elif key.startswith("coord_"):
            ds = ds.assign_coords({key[6:]: value})
        else:
            ds = ds.assign({key: value})
    return add_groups(idata, {group: ds})


def _write_uncompressed(idata, path) -> bytes:
    """The netCDF file with every variable stored uncompressed (ArviZ 0.x compresses by
    default), so that byte patterns of the draws are in the file as they are in memory."""
    if USES_DATATREE:
        to_netcdf(idata, path)
    else:
        idata.to_netcdf(str(path), compress=False, engine="h5netcdf")
    return path.read_bytes()


PLANTS = {
    "float32 data variable": lambda v: {"leak": ("i", v.astype(np.float32))},
    "float32 coordinate": lambda v: {"coord_i": v.astype(np.float32)},
    "float32-rounded values in a float64 variable": lambda v: {
        "leak": ("i", v.astype(np.float32).astype(np.float64))
    },
    "float32 attribute": lambda v: {"attr_debug": v.astype(np.float32)},
    "float32 scalar attribute": lambda v: {"attr_debug": np.float32(v[0])},
    "JSON string of float32 values": lambda v: {
        "attr_debug": json.dumps(v.astype(np.float32).tolist())
    },
    "JSON string of shortest float32 decimals": lambda v: {
        "attr_debug": json.dumps({"x": [str(x) for x in v.astype(np.float32)]})
    },
    "float32 decimal in free text": lambda v: {"attr_debug": f"x[0] was {np.float32(v[0])}."},
}


@pytest.mark.parametrize("where", sorted(PLANTS))
def test_planted_float32_leak_is_caught(where, private, tmp_path):
    """Positive control for each location, in memory and from the file."""
    planted = private[:3] if "scalar" not in where and "text" not in where else private[:1]
    assert not np.any(planted.astype(np.float32).astype(np.float64) == planted)
    idata = _with(_release(), "posterior_predictive", **PLANTS[where](planted))
    found = scan_for_values(idata, private)
    assert {f.value for f in found} == set(planted.tolist()), where
    # the file alone (read back by h5py, independently of xarray's decoding) also has it
    path = tmp_path / "r.nc"
    to_netcdf(idata, path)
    from_file = scan_for_values(str(path), private)
    assert {f.value for f in from_file if f.where.startswith("netCDF ")} == set(planted.tolist())
    # without the plant, nothing
    assert scan_for_values(_release(), private) == []


def test_float32_leak_in_a_nested_or_custom_group(private):
    """A custom group (ArviZ 0.x) / child node (ArviZ 1 DataTree) is scanned like the others."""
    extra = xr.Dataset({"x": ("i", private[:2].astype(np.float32))})
    idata = add_groups(_release(), {"debug_group": extra})
    assert {f.value for f in scan_for_values(idata, private)} == set(private[:2].tolist())


def test_float64_leak_and_its_bytes_are_caught(private, tmp_path):
    idata = _with(_release(), "posterior_predictive", leak=("i", private[:2]))
    found = scan_for_values(idata, private)
    assert {f.value for f in found} == set(private[:2].tolist())
    raw = _write_uncompressed(idata, tmp_path / "r.nc")
    assert private[0].astype("<f8").tobytes() in raw
    assert any(
        f.where == "netCDF bytes (<f8)" for f in scan_for_values(str(tmp_path / "r.nc"), private)
    )


def _plant_unaligned(draws: np.ndarray, pattern: bytes, offset: int) -> np.ndarray:
    buf = bytearray(draws.tobytes())
    buf[offset : offset + len(pattern)] = pattern
    return np.frombuffer(bytes(buf), dtype=draws.dtype).reshape(draws.shape).copy()


def test_unaligned_float32_pattern_in_random_draws_does_not_fire(private, tmp_path):
    """Many float32 and float64 draws that hold the float32 bytes of private values at
    offsets not aligned with their elements: a chance pattern, not a leak (the byte scan
    before this change reported it)."""
    rng = np.random.default_rng(3)
    d32 = rng.standard_normal((1, 800, 25)).astype(np.float32)  # 20,000 float32 draws
    d64 = rng.standard_normal((1, 800, 25))  # 20,000 float64 draws
    pats = [private[k].astype("<f4").tobytes() for k in range(4)]
    d32 = _plant_unaligned(d32, pats[0], 4 * 123 + 2)  # straddles elements 123 and 124
    d32 = _plant_unaligned(d32, pats[1], 4 * 9000 + 1)
    d64 = _plant_unaligned(d64, pats[2], 8 * 77 + 2)  # middle bytes of one float64
    d64 = _plant_unaligned(d64, pats[3], 8 * 5000 + 6)  # straddles two float64
    for d in (d32, d64):
        assert np.all(np.isfinite(d))
        assert not np.any(np.isin(private.astype(d.dtype), d))  # no element is a private value
    idata = _with(
        _release(n_draws=800), "posterior_predictive", g32=(("chain", "draw", "x_star"), d32),
        g64=(("chain", "draw", "x_star"), d64),
    )  # fmt: skip
    path = tmp_path / "r.nc"
    raw = _write_uncompressed(idata, path)
    assert all(p in raw for p in pats)  # the old any-offset float32 byte scan fires here
    assert scan_for_values(str(path), private) == []
    assert scan_for_values(idata, private) == []
    # the same elements at float32 alignment are found
    d32[0, 0, :2] = private[:2].astype(np.float32)
    idata = _with(idata, "posterior_predictive", g32=(("chain", "draw", "x_star"), d32))
    assert {f.value for f in scan_for_values(idata, private)} == set(private[:2].tolist())


def test_text_is_matched_as_whole_numbers(private):
    """A public number sharing leading digits with a private value's float32 decimal is not
    a match (the decimal must be a whole token)."""
    v = float(private[0])
    short = str(np.float32(v))
    near = float(short + "37")  # same first digits, a different number
    assert not np.isclose(near, v, rtol=1e-9, atol=0.0)
    idata = _with(_release(), "posterior_predictive", attr_note=json.dumps([near]))
    assert scan_for_values(idata, [v]) == []


def test_scanning_a_file_leaves_it_closed(private, tmp_path):
    """The scanned file can be rewritten (ArviZ 1's reader kept it open before)."""
    path = tmp_path / "r.nc"
    for seed in range(2):
        to_netcdf(_release(seed), path)
        assert scan_for_values(str(path), private) == []
