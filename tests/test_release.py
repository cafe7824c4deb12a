"""InferenceData round trip and the leak scan of serialised releases."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import add_groups, from_netcdf, get_group, to_netcdf
from pm_dpgp.mechanisms import cloaked_release, prior_noise_release
from tests import arviz_stack
from tests.tolerances import cond_rtol

from .conftest import KUNG_BOUNDS


@pytest.fixture(scope="module", params=["cloaking", "prior_noise"])
def release(request, kung_model, kung_ages):
    mechanism = {"cloaking": cloaked_release, "prior_noise": prior_noise_release}[request.param]
    return mechanism(
        kung_model,
        kung_ages,
        epsilon=1.0,
        delta=0.01,
        y_bounds=KUNG_BOUNDS,
        n_draws=3,
        rng=np.random.default_rng(42),
    )


def test_inference_data_layout(release, kung_ages):
    idata = release.to_inference_data()
    da = get_group(idata, "posterior_predictive")["f_dp"]
    assert da.dims == ("chain", "draw", "x_star")
    assert da.shape == (1, 3, 200)
    np.testing.assert_allclose(da["x_star"].values, kung_ages)
    np.testing.assert_allclose(get_group(idata, "constant_data")["X_star"].values[:, 0], kung_ages)
    attrs = get_group(idata, "posterior_predictive").attrs
    for key in (
        "mechanism",
        "privacy_model",
        "neighbouring_relation",
        "epsilon_per_draw",
        "delta_per_draw",
        "l2_sensitivity",
        "clipping_bounds",
        "hyperparameters",
        "seed_policy",
        "pm_dpgp_version",
        "privacy_event",
    ):
        assert key in attrs, key
    assert attrs["privacy_model"] == "label"
    assert json.loads(attrs["clipping_bounds"]) == list(KUNG_BOUNDS)
    summary = arviz_stack.summary(idata, group="posterior_predictive", kind="stats")
    assert len(summary) == 200


def test_netcdf_round_trip(release, tmp_path):
    path = tmp_path / "release.nc"
    to_netcdf(release.to_inference_data(), path)
    pp = get_group(from_netcdf(path), "posterior_predictive")
    np.testing.assert_array_equal(pp["f_dp"].values[0], release.draws)
    assert pp.attrs["mechanism"] == release.mechanism
    assert pp.attrs["epsilon_per_draw"] == 1.0


def test_release_contains_no_private_values(release, kung_model, kung_ages, tmp_path):
    """Scan the serialised release for the private heights and the non-DP posterior mean."""
    public_gp = kung_model.public_gp()
    y = kung_model.y
    clipped = np.clip(y, *KUNG_BOUNDS)
    non_dp_mean, _ = public_gp.predict(clipped, kung_ages[:, None], full_cov=False)
    path = tmp_path / "release.nc"
    to_netcdf(release.to_inference_data(), path)
    assert scan_for_values(str(path), np.concatenate([y, clipped])) == []
    # A leak of the non-DP mean computed by any other backward-stable route (dense solve,
    # C (y − μ), another BLAS) is within cond_rtol(K)·‖m − μ‖ of it (normwise, hence
    # elementwise), i.e. within this rtol (~8e-11 here; 1e-12 could miss it).  ~800 numbers in
    # the release vs 200 means in a window of ±rtol·|m|: a chance match has probability ~1e-5.
    K = public_gp.kernel(public_gp.X, public_gp.X) + public_gp.noise_var * np.eye(len(y))
    centred = np.linalg.norm(non_dp_mean - public_gp.mean)
    rtol = cond_rtol(K) * centred / np.min(np.abs(non_dp_mean))
    assert scan_for_values(str(path), non_dp_mean, rtol=rtol) == []
    # Positive control at this rtol: the mean from a dense LU solve, planted in the release, is
    # found; planted 1e-4 (relative) away it is not.
    K_sf = public_gp.kernel(kung_ages[:, None], public_gp.X)
    dense = public_gp.mean + K_sf @ np.linalg.solve(K, clipped - public_gp.mean)
    for planted, expected in ((dense, set(non_dp_mean.tolist())), (dense * (1 + 1e-4), set())):
        idata = release.to_inference_data()
        pp = get_group(idata, "posterior_predictive")
        pp.attrs["debug"] = json.dumps(planted.tolist())
        add_groups(idata, {"posterior_predictive": pp})
        found = scan_for_values(idata, non_dp_mean, rtol=rtol)
        assert {f.value for f in found if "debug" in f.where} == expected


def test_leak_scan_detects_a_planted_leak(release, kung_model):
    """Positive control: the scan is not vacuous."""
    idata = release.to_inference_data()
    pp = get_group(idata, "posterior_predictive")
    pp.attrs["debug"] = json.dumps({"y": kung_model.y[:3].tolist()})
    add_groups(idata, {"posterior_predictive": pp})
    found = scan_for_values(idata, kung_model.y)
    assert {f.value for f in found} >= set(kung_model.y[:3].tolist())
    idata2 = release.to_inference_data()
    const = get_group(idata2, "constant_data").assign(y_train=("obs", kung_model.y))
    add_groups(idata2, {"constant_data": const})
    assert len(scan_for_values(idata2, kung_model.y)) >= np.unique(kung_model.y).size


def test_release_reprs_are_one_line_of_public_facts(small_gp):
    """Stop-39 walkthrough: ``print(release)`` printed every draw, test input and entry of the
    noise factor (9 kB for two draws at 25 points; a sample-path release 8.6 kB).  The repr is
    one line of shapes and public settings, and holds no draw, input or training value."""
    from tests.releases import label_release, sample_path

    rel = label_release("cloaking", small_gp)
    text = repr(rel)
    assert text == (
        "Release(mechanism='cloaking', variable_name='f_dp', draws (2, 25) at X_star (25, 1), "
        f"noise_factor {rel.noise_factor.shape}, epsilon per draw 1.0, "
        f"metadata: {len(rel.metadata)} keys)"
    )
    paths = sample_path(small_gp)
    text_paths = repr(paths)
    assert text_paths.startswith("SamplePathRelease(n_draws=3, epsilon=") and len(text_paths) < 400
    private = np.concatenate([rel.draws.ravel(), small_gp.y, small_gp.X.ravel()])
    for t in (text, text_paths):
        numbers = np.array([float(x) for x in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", t)])
        assert numbers.size and not np.any(np.isclose(numbers[:, None], private, rtol=1e-6, atol=0))
