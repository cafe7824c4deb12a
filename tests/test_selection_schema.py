"""Fixes of the sample-path audit (D1–D4), beyond the audit's own failing tests.

``tests/test_selection_sample_path_audit.py`` holds the audit's reproducers; here: the shared
helpers (``check_data_schema``, ``check_coinpress_settings``, ``GPRegression.input_dim`` /
``unchecked_data``, the plan's kernel checks) on their own, the same defects in
``select_by_random_stopping``, and the D4 path end to end (a selection on the model's own
``pm.Data`` with non-finite values set after the build: no refusal, the values are mapped
record-wise after the spend).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression
from pm_dpgp.selection import (
    coinpress_rho_schedule,
    plan_sample_path_selection,
    product_grid,
    select_by_random_stopping,
    select_by_sample_paths,
)
from pm_dpgp.selection.coinpress import check_coinpress_settings
from pm_dpgp.selection.private_data import as_private_arrays, check_data_schema
from tests.test_selection_sample_path_audit import (
    OPTS,
    _refused_before_the_spend,
    sparse_model_and_data,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SECRET = "7.123456789"


def _declared(*shape: int) -> np.ndarray:
    """An in-memory float array: its shape and dtype are its declared schema."""
    return np.zeros(shape)


def _read(*a, **k):
    raise AssertionError("private data read")


# --------------------------------------------------------------------------- check_data_schema
def test_schema_of_declared_arrays_is_read_from_the_declaration_only(monkeypatch):
    """Only the declaration of a NumPy / pandas / xarray array is read: every conversion
    route is patched to raise.  (Before stop 41 any object with a NumPy ``dtype`` and a
    ``shape`` was trusted; a SciPy sparse matrix has both and failed to convert after the
    spend: see the last lines.)"""
    import pandas as pd
    import xarray as xr

    import pm_dpgp.selection.private_data as private_data_module

    with monkeypatch.context() as patched:
        patched.setattr(private_data_module, "float_array", _read)
        X, y = _declared(5, 2), _declared(5, 1)
        Xc, yc, n = check_data_schema(X, y, 2)
        assert (Xc is X, yc is y, n) == (True, True, 5)
        assert check_data_schema(_declared(4), _declared(4), 1)[2] == 4  # 1-D X is one column
        s, da = pd.Series(np.zeros(4)), xr.DataArray(np.zeros((4, 1)))
        assert check_data_schema(da, s, 1)[2] == 4
        for X, y, cols in [
            (_declared(5, 2), _declared(5), 1),  # wrong column count
            (_declared(5, 1), _declared(5, 2), 1),  # y of pairs
            (_declared(5, 1, 1), _declared(5), 1),  # 3-D inputs
            (_declared(5, 1), _declared(4), 1),  # rows differ
            (_declared(), _declared(5), 1),  # a scalar
        ]:
            with pytest.raises(ValueError, match="data must be X of shape"):
                check_data_schema(X, y, cols)
    import scipy.sparse as sp

    with pytest.raises(TypeError, match="csr_matrix"):  # converted (and refused) here
        check_data_schema(sp.csr_matrix(np.zeros((5, 1))), np.zeros(5), 1)


def test_schema_of_lists_converts_and_keeps_records_whole():
    X = [[0.5], [1.5], [float("nan")]]
    y = [[1.0], [2.0], [float("inf")]]  # (n, 1) is accepted: one value per record
    Xc, yc, n = check_data_schema(X, y, 1)
    Xa, ya = as_private_arrays(Xc, yc)
    assert n == 3 and Xa.shape == (3, 1) and ya.shape == (3,)
    np.testing.assert_array_equal(ya[:2], [1.0, 2.0])  # non-finite values are not refused
    with pytest.raises(ValueError, match="y of shape"):
        check_data_schema(X, [[v, v] for v in (1.0, 2.0, 3.0)], 1)  # n pairs: not 2n values


@pytest.mark.parametrize(
    "bad",
    [
        [f"{SECRET}x", 1.0, 2.0],  # text that does not parse
        [SECRET, "1.0", "2.0"],  # text that would parse: refused by its type
        np.array([f"{SECRET}x", 1.0, 2.0], dtype=object),
        [7.123456789 + 1j, 1.0, 2.0],
        [[7.123456789], [1.0, 2.0], [3.0]],  # ragged
    ],
)
def test_non_numeric_private_entries_are_type_errors_quoting_no_value(bad):
    with pytest.raises(TypeError) as info:
        check_data_schema([[0.0], [1.0], [2.0]], bad, 1)
    assert SECRET not in str(info.value) and "7.12" not in str(info.value)


# --------------------------------------------------------------------------- COINPRESS settings
def test_coinpress_settings_are_one_shared_check():
    rhos, spread = check_coinpress_settings(0.4, np.int64(3), 2)
    assert len(rhos) == 3 and sum(rhos) <= 0.4 and spread == 2.0
    assert coinpress_rho_schedule(0.4, np.int64(3)) == rhos  # NumPy integers are integers
    for n_steps, spread in [(0, 4.0), (2.5, 4.0), (True, 4.0), (12, 0.0), (12, -1.0)]:
        with pytest.raises(ValueError, match="n_steps|spread"):
            check_coinpress_settings(0.4, n_steps, spread)
    with pytest.raises(ValueError, match="spread"):
        check_coinpress_settings(0.4, 12, float("nan"))


# --------------------------------------------------------------------------- Liu–Talwar (D1, D3)
@pytest.fixture(scope="module")
def sparse():
    return sparse_model_and_data()


@pytest.mark.parametrize(
    "case", ["y pairs", "y text", "X columns", "spread", "n_steps", "data not a pair"]
)
def test_liu_talwar_refuses_bad_schema_and_settings_before_the_spend(sparse, case):
    model, X, y = sparse
    data, kw = (X, y), {}
    if case == "y pairs":
        data = (X, [[v, v] for v in y])
    elif case == "y text":
        data = (X, [f"{SECRET}x", *y[1:].tolist()])
    elif case == "X columns":
        data = (np.hstack([X, X]), y)
    elif case == "data not a pair":
        data = (X, y, y)
    else:
        kw = {case: 0}
    msg = _refused_before_the_spend(
        lambda ledger, rng: select_by_random_stopping(
            model,
            [{"ell": 1.0, "sigma": 0.3}],
            data,
            epsilon=1.0,
            delta=1e-5,
            y_bounds=(-2.0, 2.0),
            ledger=ledger,
            rng=rng,
            **kw,
        )  # fmt: skip
    )
    assert SECRET not in msg


# --------------------------------------------------------------------------- plan (D2)
@pytest.fixture(scope="module")
def exact():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (60, 1))
    y = np.clip(np.sin(X[:, 0]), -2.0, 2.0)
    return gp_regression(
        X, y, lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"kernel_scale": 1.0, "kappa": 0.0}, "k\\(x, x\\)"),
        ({"kernel_scale": 4.9}, "k\\(x, x\\)"),  # amplitude sd 5
        ({"kernel_class": "exponential_1d"}, "sensitivity bound would not hold"),
        ({"kernel_class": "constant", "kappa": 0.0}, "sensitivity bound would not hold"),
        ({"kernel_class": "linear"}, "kernel_class must be"),
    ],
)
def test_plan_runs_the_releases_public_kernel_checks(exact, change, match):
    grid = product_grid({"ell": [3.0], "noise": [20.0]})
    with pytest.raises(ValueError, match=match):
        plan_sample_path_selection(exact, grid, n=60, **(OPTS | change))


def test_plan_accepts_what_the_release_accepts():
    """Not over-refused: an exponential kernel in 1-D with ``kernel_class="exponential_1d"``
    and the exact amplitude as ``kernel_scale`` are planned (never dearer than generic)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(0.0, 10.0, (60, 1))
    model = gp_regression(
        X, np.sin(X[:, 0]), lambda: 4.0 * pm.gp.cov.Exponential(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )  # fmt: skip
    grid = product_grid({"ell": [3.0], "noise": [20.0]})
    expo = plan_sample_path_selection(
        model, grid, n=60, **OPTS, kernel_scale=2.0, kernel_class="exponential_1d"
    )
    generic = plan_sample_path_selection(model, grid, n=60, **OPTS, kernel_scale=2.0)
    assert np.all(expo.path_curves <= generic.path_curves)
    assert expo.bounds[0].kernel_class == "exponential_1d"


# --------------------------------------------------------------------------- model's own data (D4)
def test_selection_on_the_models_own_data_reads_nothing_before_the_spend():
    """``data=None`` with ``pm.Data`` containers holding non-finite values set after the build:
    neither the plan nor the selection refuses (a data-dependent refusal); the selection
    charges, then maps the records record-wise."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (60, 1))
    with pm.Model():
        Xd = pm.Data("Xd", X)
        yd = pm.Data("yd", np.clip(np.sin(X[:, 0]), -2.0, 2.0))
        model = gp_regression(
            Xd, yd, lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
            noise_sd=lambda: pm.HalfNormal("noise", 20.0),
        )  # fmt: skip
        X_bad, y_bad = X.copy(), np.sin(X[:, 0])
        X_bad[[7, 10]] = np.nan  # a training and a validation row
        y_bad[[3, 5]] = np.inf
        pm.set_data({"Xd": X_bad, "yd": y_bad})
    assert model.input_dim == 1
    X_raw, y_raw = model.unchecked_data()  # PyMC stores NaN data as a masked array
    assert np.isnan(np.asarray(X_raw)[7, 0]) and np.isinf(np.asarray(y_raw)[3])
    with pytest.raises(ValueError, match="NaN"):  # the builder's own (owner-side) check stays
        model.X  # noqa: B018
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    grid = product_grid({"ell": [3.0], "noise": [20.0, 30.0]})
    res = select_by_sample_paths(
        model, grid, **OPTS, gamma=0.5, ledger=ledger, rng=np.random.default_rng(2)
    )
    assert len(ledger.history) == 1 and ledger.history[0].event == res.event
    assert res.index in (0, 1, -1)
    assert np.all(np.isfinite(res.owner_report()["validation_scores"]))
