"""Guards of the lazy sample-path extension found by the stop-35 audit (each test fails on the
code before it): nugget floor and a nugget fixed at release, read-only released inputs, no
copy through ``dataclasses.asdict``, an atomic state update, no replayed Generator state."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.mechanisms.full import sample_path as sp
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.models import gp_regression


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, 15)
    y = np.where(X > 0.5, 1.5, -1.0) + 0.3 * rng.standard_normal(15)
    return gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.5)


def _release(model, X_star, n_draws=1, rng=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return sample_path_release(
            model, np.asarray(X_star, float).reshape(-1, 1), n_draws=n_draws,
            rng=np.random.default_rng(0) if rng is None else rng, kernel_scale=1.0,
            y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=1e12, domain=(0.0, 1.0), **kw,
        )  # fmt: skip


@pytest.mark.parametrize("nugget", [0.0, 1e-20, 1e-13])
def test_a_nugget_below_the_floor_is_refused_before_the_spend(model, nugget):
    """With ``nugget = 0`` three lazy grid rounds released values of 571, 3·10⁴² and then
    failed on NaN after the spend; ``10⁻²⁰`` gave 4.5·10¹¹ (stop-35 audit)."""
    with pytest.raises(ValueError, match="nugget"):
        _release(model, np.linspace(0, 1, 20), nugget=nugget)


def test_the_nugget_is_fixed_at_release_not_read_from_metadata(model):
    """Setting the public metadata's nugget to 0 after the release made the next rounds draw
    values of order 10⁷ and 10⁷⁷; the conditional draws now use the nugget of the release.
    Since stop 49 the metadata is read-only; changed behind its back, it is still not read."""
    rel = _release(model, np.linspace(0, 1, 20), n_draws=50)
    with pytest.raises(TypeError, match="read-only"):
        rel.metadata["nugget_variance"] = 0.0
    dict.__setitem__(rel.metadata, "nugget_variance", 0.0)
    for k in range(3):
        values = rel.evaluate(np.linspace(0.0125 + 0.003 * k, 0.9875, 40)[:, None])
        assert np.all(np.abs(values) < 10.0)


def test_released_inputs_cannot_rewrite_the_stored_inputs(model):
    rel = _release(model, [0.1, 0.5, 0.9])
    X = rel.released_inputs
    with pytest.raises(ValueError, match="read-only"):
        X += 0.05
    np.testing.assert_array_equal(rel.released_inputs[:, 0], [0.1, 0.5, 0.9])


def test_asdict_and_astuple_cannot_copy_the_path_state(model):
    """``dataclasses.asdict`` deep-copied the Generator and the path state field by field: a
    second, independent continuation of the charged path (and a dict holding the private
    inputs and posterior means)."""
    rel = _release(model, [0.1, 0.5, 0.9])
    for fn in (dataclasses.asdict, dataclasses.astuple):
        with pytest.raises(TypeError, match="cannot be copied"):
            fn(rel)


def test_a_failed_state_update_leaves_the_release_usable(model, monkeypatch):
    """A ``MemoryError`` inside the update grew the block list but not the arrays, and every
    later ``evaluate`` failed; now the state is untouched and the next round works."""
    rel = _release(model, [0.1, 0.5, 0.9], n_draws=3)
    before = rel.released_values.copy()
    real_vstack = np.vstack
    calls = {"n": 0}

    def failing_vstack(arrays, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("simulated")
        return real_vstack(arrays, *args, **kwargs)

    monkeypatch.setattr(sp.np, "vstack", failing_vstack)
    with pytest.raises(MemoryError):
        rel.evaluate([[0.3]])
    monkeypatch.setattr(sp.np, "vstack", real_vstack)
    np.testing.assert_array_equal(rel.released_values, before)
    assert len(rel._state.blocks) == 1
    assert rel.evaluate([[0.3], [0.7]]).shape == (3, 2)


def test_a_restored_generator_state_is_refused(model):
    """Restoring ``rng.bit_generator.state`` between rounds replayed the same normals: the
    value at 0.7 was an exact affine function of earlier values (residual sd 1.9·10⁻¹⁶
    against 0.135), revealing a function of the private means without noise."""
    rng = np.random.default_rng(0)
    rel = _release(model, [0.1, 0.5, 0.9], n_draws=4, rng=rng)
    saved = rng.bit_generator.state
    rel.evaluate([[0.3]])
    rng.bit_generator.state = saved
    with pytest.raises(ValueError, match="state it was in before"):
        rel.evaluate([[0.7]])
    assert rel.released_inputs.shape == (4, 1)  # nothing drawn, nothing stored
    rng.standard_normal()  # a fresh state is fine
    assert rel.evaluate([[0.7]]).shape == (4, 1)
