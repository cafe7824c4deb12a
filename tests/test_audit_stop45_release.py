"""Stop-45 audit of ``Release`` and its ArviZ export.

1. ``Release.to_inference_data(observed_data=..., observed_is_public=True)`` had no identity
   check: the flag is required to attach any ``observed_data``, so it could not also be the
   way to skip a check, and the training outputs themselves (``{"y": y}`` or
   ``{"y": model.y}`` at a release made at the training inputs) were published beside the
   DP draws (the leak scan found all 30 training outputs, 90 places).  ``dp_ppc`` refuses
   the same object by identity; now the release keeps weak references to its training data
   (identity only, never pickled) and refuses it the same way, before anything is drawn.
2. The exported object shared the release's arrays on both stacks: an in-place edit of it
   (``idata.posterior["f_dp"] *= 100``, a change of units) multiplied ``release.draws`` by
   100 for every later export and ``dp_ppc`` (max change 330.5).  And ``release.X_star``
   was a view of the caller's ``X_star``: ``X_star += 1`` after the release moved the
   inputs the draws are paired with by 1.0.  The release now owns its inputs and the export
   holds copies.
3. ``SamplePathRelease`` and ``SparseQuRelease`` share the export builder and had the same
   hole as 1.
4. An integer metadata value outside 64 bits (``classification_release(...,
   kmeans_seed=2**64)``, a valid NumPy seed; the release was charged) made
   ``to_netcdf`` of the export fail with h5py's "Object dtype ... has no native HDF5
   equivalent" on both stacks.  Such values are stored as decimal text.
5. Under full privacy the training inputs are private, yet ``SparseQuRelease`` and
   ``SamplePathRelease.to_inference_data(X_star=X)`` with the training input array itself
   published it (leak scan: 2,000 and 1,600 hits for 200 records) while ``dp_ppc`` refuses
   the same object; now refused by identity, before anything is drawn.
"""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.compat import get_group
from pm_dpgp.mechanisms import cloaked_release, prior_noise_release
from pm_dpgp.mechanisms.label.binning import binned_gp, binned_release, make_bins
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import PrivateDataError


def _data(n: int = 30):
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, n))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(n), -1.9, 1.9)
    return X, y


def _release(fn, model, X_star):
    return fn(
        model,
        X_star,
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(-2.0, 2.0),
        n_draws=2,
        rng=np.random.default_rng(1),
    )


def _export(release, y_obs, rng):
    return release.to_inference_data(
        observed_data={"y": y_obs}, observed_is_public=True, predictive_sd=0.3, rng=rng
    )


@pytest.mark.parametrize("fn", [cloaked_release, prior_noise_release])
@pytest.mark.parametrize("kind", ["array", "series", "model_y", "view"])
def test_training_outputs_refused_as_observed_data(fn, kind) -> None:
    X, y = _data()
    y_arg = pd.Series(y, name="height") if kind == "series" else y
    model = gp_regression(X, y_arg, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    release = _release(fn, model, X)  # released at the training inputs: shapes agree
    obs = {"array": y, "series": y_arg, "model_y": model.y, "view": y[:]}[kind]
    rng = np.random.default_rng(7)
    state = rng.bit_generator.state
    with pytest.raises(PrivateDataError, match="private training output"):
        _export(release, obs, rng)
    assert rng.bit_generator.state == state  # nothing drawn
    # a public hold-out set (another object, even with equal values) is accepted
    idata = _export(release, y.copy() + 0.0, rng)
    assert idata is not None


def test_binned_release_remembers_its_outputs() -> None:
    X, y = _data(40)
    bins = make_bins([np.linspace(0, 6, 41)])  # 40 bins: the shape of y
    release = binned_release(
        X, y, bins, epsilon=1.0, y_bounds=(-2.0, 2.0), rng=np.random.default_rng(2)
    )
    with pytest.raises(PrivateDataError):
        _export(release, y, np.random.default_rng(3))
    smoothed = binned_gp(release, X[:, None], lengthscale=1.0, kernel_scale=1.0, noise_sd=0.3)
    with pytest.raises(PrivateDataError):
        _export(smoothed, y, np.random.default_rng(3))


def test_references_are_weak_and_not_serialised() -> None:
    X, y = _data()
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    release = _release(cloaked_release, model, np.linspace(0, 6, 25))
    assert release.training_source() is model
    raw = pickle.dumps(release)
    back = pickle.loads(raw)
    assert back.training_source() is None  # nothing of the model in the pickle
    assert not any(np.float64(v).tobytes() in raw for v in y)
    np.testing.assert_array_equal(back.draws, release.draws)
    assert back.metadata == release.metadata
    # copies share the weak references (stop-45 review: they dropped them, so a copy exported
    # the training outputs its original refuses); they still keep nothing alive
    assert copy.deepcopy(release).training_source() is model
    assert copy.copy(release).training_source() is model
    del model
    gc.collect()
    assert release.training_source() is None  # the release keeps nothing alive


def test_export_and_caller_arrays_do_not_alias_the_release() -> None:
    X, y = _data()
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    X_star = np.linspace(0, 6, 25)
    release = _release(cloaked_release, model, X_star)
    draws, inputs = release.draws.copy(), release.X_star.copy()
    idata = release.to_inference_data(predictive_sd=0.3, rng=np.random.default_rng(0))
    posterior = get_group(idata, "posterior")
    assert not np.shares_memory(posterior["f_dp"].values, release.draws)
    assert not np.shares_memory(get_group(idata, "constant_data")["X_star"].values, X_star)
    edited = idata.posterior if hasattr(idata, "posterior") else idata["posterior"]
    edited["f_dp"] *= 100.0  # a change of units of the exported object, in place
    np.testing.assert_array_equal(release.draws, draws)
    X_star += 1.0  # the caller reuses its array
    np.testing.assert_array_equal(release.X_star, inputs)
    again = get_group(release.to_inference_data(), "posterior")["f_dp"].values[0]
    np.testing.assert_array_equal(again, draws)


def test_other_release_types_refuse_their_training_outputs() -> None:
    """The same hole in ``SamplePathRelease`` and ``SparseQuRelease.to_inference_data`` (one
    shared builder): at (copies of) the training inputs, ``{"y": y}`` was published."""
    import warnings

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import noise_aware_release, sample_path_release
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

    X, y = _data()
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths = sample_path_release(
            model,
            np.linspace(0, 6, 20),
            n_draws=2,
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            ledger=Ledger(),
            domain=(0.0, 6.0),
            rng=np.random.default_rng(2),
        )
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    with pytest.raises(PrivateDataError):
        paths.to_inference_data(
            X_star=X.copy(),
            observed_data={"y": y},
            observed_is_public=True,
            predictive_sd=0.3,
            rng=rng,
        )
    assert rng.bit_generator.state == state

    Z = grid_inducing_points(0.0, 6.0, 6)
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=Z, noise_sd=0.3
    ).public_sparse_gp()
    X_n, y_n = np.linspace(0, 6, 200), np.sin(np.linspace(0, 6, 200))
    qu = noise_aware_release(
        public,
        (X_n, y_n),
        epsilon=1.0,
        delta=1e-4,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(4),
    )
    with pytest.raises(PrivateDataError):
        qu.to_inference_data(X_n.copy(), observed_data={"y": y_n}, observed_is_public=True, rng=rng)
    assert rng.bit_generator.state == state
    qu.to_inference_data(
        X_n.copy(), observed_data={"y": y_n.copy()}, observed_is_public=True, rng=rng
    )
    assert pickle.loads(pickle.dumps(qu)).training_source() is None


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30, 2**63, -(2**63)])
def test_integer_metadata_beyond_64_bits_round_trips_through_netcdf(value, tmp_path) -> None:
    from pm_dpgp.compat import from_netcdf, to_netcdf
    from pm_dpgp.release import Release

    release = Release(
        "cloaking",
        np.zeros((1, 3)),
        np.arange(3.0)[:, None],
        np.eye(3),
        metadata={"kmeans_seed": value, "epsilon": 1.0},
    )
    path = to_netcdf(release.to_inference_data(), tmp_path / "release.nc")
    stored = get_group(from_netcdf(path), "posterior").attrs["kmeans_seed"]
    assert int(stored) == value


def test_full_privacy_exports_refuse_the_training_inputs() -> None:
    import warnings

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import noise_aware_release, sample_path_release
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

    rng = np.random.default_rng(9)
    X = rng.uniform(0, 6, 200)
    y = np.sin(X) + 0.1 * rng.standard_normal(200)
    Z = grid_inducing_points(0.0, 6.0, 6)
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=Z, noise_sd=0.3
    ).public_sparse_gp()
    qu = noise_aware_release(
        public, (X, y), epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(4),
    )  # fmt: skip
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    for X_star in (X, X[:50], X[:, None]):
        with pytest.raises(PrivateDataError, match="training input"):
            qu.to_inference_data(X_star, rng=gen)
    assert gen.bit_generator.state == state
    qu.to_inference_data(X.copy(), n_draws=5, rng=gen)  # a copy is not recognised (identity)

    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths = sample_path_release(
            model, np.linspace(0, 6, 10), n_draws=2, kernel_scale=1.0, y_bounds=(-2.0, 2.0),
            delta=1e-5, ledger=Ledger(), domain=(0.0, 6.0), rng=np.random.default_rng(2),
        )  # fmt: skip
    n_before = len(paths.released_inputs)
    with pytest.raises(PrivateDataError, match="training input"):
        paths.to_inference_data(X_star=X)
    assert len(paths.released_inputs) == n_before  # the path was not extended
