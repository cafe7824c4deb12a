"""Stop-47 audit (a fresh user's end-to-end workflows): defects found and fixed.

* ``dirichlet_release`` of a ``dirichlet_gp_classification`` built from ``pm.Data`` containers
  released the *old* records after ``pm.set_data`` (the builder reads the containers once),
  silently; it now refuses before anything is spent or drawn.
* A sample-path release had no ``noise_var`` metadata key, a binary classification release
  neither, although ``docs/workflow.md`` lists the key for every release.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.compat import get_group
from pm_dpgp.mechanisms import classification_release, dirichlet_release, sample_path_release
from pm_dpgp.models import (
    dirichlet_gp_classification,
    gp_classification,
    gp_regression,
    grid_inducing_points,
)


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n))
    return x, (np.sin(x) + 0.3 * rng.standard_normal(n) > 0).astype(float)


def _dirichlet(X, labels):
    return dirichlet_gp_classification(
        X,
        labels,
        pm.gp.cov.ExpQuad(1, ls=1.3),
        Z=grid_inducing_points(0.0, 10.0, 7),
        n_classes=2,
        z_is_public=True,
    )


@pytest.mark.parametrize("changed", ["X", "labels", "both"])
def test_dirichlet_release_refuses_a_model_whose_containers_were_set_again(changed):
    x, lab = _data(40, 1)
    x2, lab2 = _data(55, 2)
    with pm.Model(coords={"obs_id": np.arange(40)}) as m:
        model = _dirichlet(pm.Data("X", x), pm.Data("labels", lab))
    new = {"X": {"X": x + 0.5}, "labels": {"labels": 1.0 - lab}, "both": {"X": x2, "labels": lab2}}
    pm.set_data(
        new[changed], model=m, coords={"obs_id": np.arange(55 if changed == "both" else 40)}
    )
    ledger = Ledger(epsilon=5.0, delta=1e-5)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="pm.set_data"):
        dirichlet_release(model, epsilon=1.0, delta=1e-5, ledger=ledger, rng=rng)
    assert len(ledger.history) == 0
    assert rng.bit_generator.state == state


def test_dirichlet_release_of_unchanged_containers_equals_the_array_model():
    x, lab = _data(40, 1)
    with pm.Model():
        from_containers = _dirichlet(pm.Data("X", x), pm.Data("labels", lab))
    from_arrays = _dirichlet(x, lab)
    a = dirichlet_release(from_containers, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    b = dirichlet_release(from_arrays, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    xs = np.linspace(0.5, 9.5, 5)[:, None]
    np.testing.assert_array_equal(a.predict(xs)[0], b.predict(xs)[0])
    # data given to the release explicitly do not depend on the model's containers
    with pm.Model() as m:
        model = _dirichlet(pm.Data("X", x), pm.Data("labels", lab))
    pm.set_data({"labels": 1.0 - lab}, model=m)
    c = dirichlet_release(
        model, (x[:, None], lab), epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0)
    )
    np.testing.assert_array_equal(c.predict(xs)[0], b.predict(xs)[0])


def test_sample_path_and_classification_releases_record_noise_var():
    x, lab = _data(40, 1)
    y = np.sin(x)
    xs = np.linspace(0.5, 9.5, 5)[:, None]
    sp = sample_path_release(
        gp_regression(x, y, pm.gp.cov.ExpQuad(1, ls=1.3), noise_sd=8.0, mean=0.5),
        xs,
        kernel_scale=1.0,
        y_bounds=(-3.0, 3.0),
        delta=1e-5,
        kappa=0.0,
        epsilon=20.0,
        rng=np.random.default_rng(0),
    )
    assert sp.metadata["noise_var"] == 64.0
    assert sp.metadata["r2"] == 64.0
    assert get_group(sp.to_inference_data(), "posterior").attrs["noise_var"] == 64.0
    cls = classification_release(
        gp_classification(x, lab, pm.gp.cov.ExpQuad(1, ls=1.3)),
        xs,
        epsilon=1.0,
        delta=1e-5,
        rng=np.random.default_rng(0),
    )
    assert "noise_var" in cls.metadata and cls.metadata["noise_var"] is None
    assert get_group(cls.to_inference_data(), "posterior").attrs["noise_var"] == "none"


def test_dp_ppc_refuses_extra_sd_for_a_dirichlet_release_as_it_refuses_noise_sd():
    from pm_dpgp.workflow import dp_ppc

    x, lab = _data(40, 1)
    release = dirichlet_release(
        _dirichlet(x, lab), epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0)
    )
    xh = np.linspace(0.5, 9.5, 6)[:, None]
    yh = (np.sin(xh[:, 0]) > 0).astype(int)
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="omit noise_sd"):
        dp_ppc(release, xh, yh, noise_sd=0.3, training=None, holdout_is_public=True, rng=rng)
    with pytest.raises(ValueError, match="omit extra_sd"):
        dp_ppc(release, xh, yh, extra_sd=0.5, training=None, holdout_is_public=True, rng=rng)
    assert rng.bit_generator.state == state
    dp_ppc(release, xh, yh, extra_sd=0.0, training=None, holdout_is_public=True, rng=rng)


def test_a_pure_dp_release_event_converts_at_its_recorded_delta_of_zero():
    from pm_dpgp.accounting import GaussianEvent, LaplaceEvent, PureDpEvent, event_from_metadata
    from pm_dpgp.mechanisms import binned_release, make_bins

    x, _ = _data(60, 3)
    y = np.sin(x)
    bins = make_bins(np.linspace(0.0, 10.0, 4))
    for rng in (None, np.random.default_rng(0)):  # secure (PureDpEvent), simulation (Laplace)
        release = binned_release(x, y, bins, epsilon=0.5, y_bounds=(-2.0, 2.0), n_draws=3, rng=rng)
        md = release.metadata
        assert md["delta"] == 0.0
        event = event_from_metadata(md["privacy_event"])
        assert event.epsilon(md["delta"]) == md["epsilon"] == 1.5
    assert PureDpEvent(0.4, count=2).epsilon(0) == 0.8
    assert LaplaceEvent(2.0).epsilon(0.0) == 0.5
    with pytest.raises(ValueError):
        GaussianEvent(1.0).epsilon(0.0)
    with pytest.raises(ValueError):
        PureDpEvent(0.4).epsilon(-1e-9)


def test_dp_ppc_of_a_binning_release_off_its_bin_centres_names_binned_gp():
    from pm_dpgp.mechanisms import binned_gp, binned_release, make_bins
    from pm_dpgp.workflow import dp_ppc

    x, _ = _data(60, 3)
    y = np.sin(x)
    release = binned_release(
        x,
        y,
        make_bins(np.linspace(0.0, 10.0, 6)),
        epsilon=1.0,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(0),
    )
    xh = np.linspace(0.3, 9.7, 7)[:, None]
    yh = np.sin(xh[:, 0])
    kw = dict(noise_sd=0.3, training=None, holdout_is_public=True)
    # the generic advice ("release at the hold-out inputs") is impossible for bin means
    with pytest.raises(ValueError, match="binned_gp") as err:
        dp_ppc(release, xh, yh, rng=np.random.default_rng(1), **kw)
    assert "Release at the hold-out inputs" not in str(err.value)
    # what the message suggests works
    gp = binned_gp(release, xh, lengthscale=2.0, kernel_scale=1.0, noise_sd=0.3)
    dp_ppc(gp, xh, yh, rng=np.random.default_rng(1), **kw)
    inside = np.linspace(1.5, 8.5, 5)[:, None]  # between the first and last bin centre
    dp_ppc(
        release, inside, np.sin(inside[:, 0]), interpolate=True, rng=np.random.default_rng(1), **kw
    )
