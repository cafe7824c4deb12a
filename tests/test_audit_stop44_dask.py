"""Stop-44 audit of the Dask path: the same schema checks as the in-memory path.

* a Dask DataFrame (or a Dask-backed, feature-labelled ``xarray.DataArray``) in another column
  order than the model's was used by position and the release spent its budget (in memory:
  refused before the spend); its columns were not recorded in the release's metadata, so a
  hold-out ``DataFrame`` in another order was then accepted by ``predict``;
* a Dask ``y`` whose index is not ``X``'s (rows in another order) was paired by position,
  silently (in memory: refused);
* a Dask DataFrame with a ``bool`` column beside numeric ones was refused as "dtype object"
  (in memory: converted to float64).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytest

import pm_dpgp.mechanisms.full.noise_aware as na
from pm_dpgp.accounting import Ledger
from pm_dpgp.models import sparse_gp_regression

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")

KW = dict(epsilon=1.0, delta=1e-5, y_bounds=(-4.0, 4.0))
Z2 = np.column_stack([np.repeat(np.linspace(-3, 3, 4), 4), np.tile(np.linspace(-30, 30, 4), 4)])


@pytest.fixture(autouse=True)
def _synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.uniform(-3, 3, 200), "b": rng.uniform(-30, 30, 200)})
    df["y"] = np.sin(df.a) + 0.05 * df.b
    return df


def _model(X=None, y=None):
    cov = pm.gp.cov.ExpQuad(2, ls=[1.0, 10.0])
    return sparse_gp_regression(X, y, cov, Z=Z2, noise_sd=0.3)


def _release(model, data, ledger=None):
    return na.noise_aware_release(model, data, rng=np.random.default_rng(1), ledger=ledger, **KW)


def test_dask_dataframe_in_another_column_order_is_refused_before_the_spend(frame) -> None:
    model = _model(frame[["a", "b"]], frame["y"])
    ddf = dd.from_pandas(frame, npartitions=3)
    ledger = Ledger()
    with pytest.raises(ValueError, match="columns"):
        _release(model, (ddf[["b", "a"]], ddf["y"]), ledger)
    assert len(ledger.history) == 0
    # the right order gives the in-memory release
    on_dask = _release(model, (ddf[["a", "b"]], ddf["y"]))
    in_memory = _release(model, (frame[["a", "b"]], frame["y"]))
    assert np.allclose(on_dask.m, in_memory.m, rtol=0, atol=1e-9)


def test_dask_backed_dataarray_with_features_in_another_order_is_refused(frame) -> None:
    xr = pytest.importorskip("xarray")
    model = _model(frame[["a", "b"]], frame["y"])
    X = xr.DataArray(
        frame[["b", "a"]].to_numpy(), dims=("obs", "feat"), coords={"feat": ["b", "a"]}
    ).chunk({"obs": 50})
    y = xr.DataArray(frame["y"].to_numpy(), dims=("obs",)).chunk({"obs": 50})
    ledger = Ledger()
    with pytest.raises(ValueError, match="columns"):
        _release(model, (X, y), ledger)
    assert len(ledger.history) == 0


def test_release_from_a_dask_dataframe_records_its_columns(frame) -> None:
    ddf = dd.from_pandas(frame, npartitions=3)
    release = _release(_model(), (ddf[["a", "b"]], ddf["y"]))
    assert release.metadata["input_columns"] == ["a", "b"]
    with pytest.raises(ValueError, match="columns"):
        release.predict(frame[["b", "a"]].iloc[:3])


def test_dask_y_in_another_row_order_is_refused_before_the_spend(frame) -> None:
    ddf = dd.from_pandas(frame, npartitions=3)
    shuffled = frame["y"].sample(frac=1.0, random_state=0).to_frame()
    y = dd.from_pandas(shuffled, npartitions=3, sort=False)["y"]
    ledger = Ledger()
    with pytest.raises(ValueError, match="different indexes"):
        _release(_model(), (ddf[["a", "b"]], y), ledger)
    assert len(ledger.history) == 0
    # the same labels in another partitioning are aligned; string labels compare too
    labelled = frame.set_axis([f"r{i:03d}" for i in range(len(frame))])
    X = dd.from_pandas(labelled[["a", "b"]], npartitions=4)
    y = dd.from_pandas(labelled[["y"]], npartitions=3)["y"]
    on_dask = _release(_model(), (X, y))
    in_memory = _release(_model(), (frame[["a", "b"]], frame["y"]))
    assert np.allclose(on_dask.m, in_memory.m, rtol=0, atol=1e-9)
    # a nullable index with a missing label equals itself, as pandas' Index.equals says
    nullable = frame.set_axis(pd.array([None, *range(1, len(frame))], dtype="Int64"))
    ddf = dd.from_pandas(nullable, npartitions=3, sort=False)
    assert np.allclose(_release(_model(), (ddf[["a", "b"]], ddf["y"])).m, in_memory.m, atol=1e-9)


def test_dask_dataframe_with_a_bool_column_gives_the_in_memory_release() -> None:
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.uniform(-3, 3, 150), "flag": rng.random(150) < 0.5})
    y = np.sin(df.a) + df.flag
    Z = np.column_stack([np.linspace(-3, 3, 6), np.tile([0.0, 1.0], 3)])
    model = sparse_gp_regression(None, None, pm.gp.cov.ExpQuad(2, ls=[1.0, 1.0]), Z=Z, noise_sd=0.3)
    ddf = dd.from_pandas(df.assign(y=y), npartitions=3)
    on_dask = _release(model, (ddf[["a", "flag"]], ddf["y"]))
    in_memory = _release(model, (df[["a", "flag"]], y))
    assert np.allclose(on_dask.m, in_memory.m, rtol=0, atol=1e-9)


def test_binned_release_refuses_a_dask_y_instead_of_gathering_it() -> None:
    da = pytest.importorskip("dask.array")
    from dask.callbacks import Callback

    from pm_dpgp.mechanisms.label.binning import binned_release, make_bins

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (100, 1)), rng.uniform(-1, 1, 100)
    computed = []
    ledger = Ledger()
    with Callback(start=lambda dsk: computed.append(1)), pytest.raises(TypeError, match="Dask"):
        binned_release(
            X,
            da.from_array(y, chunks=25),
            bins=make_bins([np.linspace(0, 1, 5)]),
            epsilon=1.0,
            y_bounds=(-1, 1),
            rng=np.random.default_rng(0),
            ledger=ledger,
        )
    assert computed == [] and len(ledger.history) == 0


def test_categorical_dask_column_never_quotes_its_categories(frame) -> None:
    ddf = dd.from_pandas(frame, npartitions=3)
    secret = frame["y"].map(lambda v: f"secret{v:.6f}").astype("category")
    y_text = dd.from_pandas(secret, npartitions=3)
    ledger = Ledger()
    with pytest.raises(TypeError) as info:
        _release(_model(), (ddf[["a", "b"]], y_text), ledger)
    assert "secret" not in str(info.value) and "category" in str(info.value)
    assert len(ledger.history) == 0
    # numeric categories are numbers, as np.asarray of the pandas column reads them
    y_num = dd.from_pandas(frame["y"].astype("category"), npartitions=3)
    on_dask = _release(_model(), (ddf[["a", "b"]], y_num))
    in_memory = _release(_model(), (frame[["a", "b"]], frame["y"].astype("category")))
    assert np.allclose(on_dask.m, in_memory.m, rtol=0, atol=1e-9)
