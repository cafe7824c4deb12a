"""Stop-48 audit: scale and Dask across the library (not the noise-aware statistics path).

``dp_ppc(..., training=(X, y))`` with the Dask arrays a release was computed from converted
them with ``np.asarray`` in its identity check (``_buffer``): two full computations, every
private row gathered on the client, where the README says nothing gathers them.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.compat import group_names
from pm_dpgp.mechanisms import noise_aware_release
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
from pm_dpgp.workflow import dp_ppc
from pm_dpgp.workflow.ppc import PrivateDataError

da = pytest.importorskip("dask.array")
callbacks = pytest.importorskip("dask.callbacks")


class _Computations(callbacks.Callback):
    """Counts the Dask graphs computed in this process while active."""

    def __init__(self) -> None:
        super().__init__()
        self.graphs: list[int] = []

    def _start(self, dsk) -> None:
        self.graphs.append(len(dsk))


@pytest.fixture(scope="module")
def dask_release():
    Z = grid_inducing_points(-3.5, 3.5, 9)
    pub = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=0.3
    ).public_sparse_gp()
    rng = np.random.default_rng(0)
    X = da.from_array(rng.uniform(-3, 3, 2000), chunks=500)
    y = da.from_array(np.clip(np.sin(rng.uniform(-3, 3, 2000)), -2, 2), chunks=500)
    release = noise_aware_release(
        pub, (X, y), epsilon=1.0, delta=1e-7, y_bounds=(-2.0, 2.0), rng=rng
    )
    return release, X, y


def test_dp_ppc_training_check_never_computes_the_private_dask_arrays(dask_release) -> None:
    release, X, y = dask_release
    Xh = np.linspace(-3, 3, 20)
    yh = np.sin(Xh)
    with _Computations() as seen:
        idata = dp_ppc(release, Xh, yh, training=(X, y), n_draws=5, rng=np.random.default_rng(1))
    assert seen.graphs == [], f"dp_ppc computed Dask graphs of {seen.graphs} tasks"
    assert "posterior_predictive" in group_names(idata)
    # the identity check itself still holds: the training array passed as hold-out is refused
    with _Computations() as seen, pytest.raises(PrivateDataError):
        dp_ppc(release, Xh, y, training=(X, y), n_draws=5, holdout_is_public=False)
    assert seen.graphs == []


@pytest.mark.parametrize("kind", ["array", "series", "list of blocks"])
def test_dirichlet_builder_refuses_dask_labels_without_computing_them(kind) -> None:
    """``dirichlet_gp_classification(X, labels_dask)`` computed the labels on the client
    (``np.asarray`` in ``sanitise_labels``) and built the model; every other builder
    refuses Dask data (README, "On a Dask cluster")."""
    from pm_dpgp.models import dirichlet_gp_classification

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, 400)
    lab = (np.sin(X) > 0).astype(int)
    labels = da.from_array(lab, chunks=100)
    if kind == "series":
        dd = pytest.importorskip("dask.dataframe")
        labels = dd.from_dask_array(labels)
    elif kind == "list of blocks":
        labels = list(labels.blocks)
    Z = np.linspace(0, 10, 8)[:, None]
    with _Computations() as seen, pytest.raises(TypeError, match="Dask"):
        dirichlet_gp_classification(X, labels, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, n_classes=2)
    assert seen.graphs == []


def test_dp_ppc_finds_the_holdout_rows_without_an_h_by_m_comparison() -> None:
    """``dp_ppc`` of a ``Release`` looked the hold-out rows up in ``X_star`` through an
    ``(h, m, d)`` boolean comparison: 155.6 MB traced for 400 hold-out bin centres of a
    200,000-bin release (6.4 GB for 200 of a 4000 × 4000 grid).  A sort finds the same first
    matches in ``O((m + h) d)``."""
    import tracemalloc

    from pm_dpgp.mechanisms.label import binned_release, make_bins

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, 20), rng.uniform(-1, 1, 20)
    bins = make_bins(np.linspace(0, 1, 200_001))
    kw = dict(epsilon=1.0, y_bounds=(-1, 1), bounds_are_public=True)
    release = binned_release(X, y, bins, rng=np.random.default_rng(1), **kw)
    Xh = release.X_star[::500]
    tracemalloc.start()
    try:
        dp_ppc(release, Xh, np.zeros(len(Xh)), training=None, noise_sd=0.1, rng=rng)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    h, m = len(Xh), len(release.X_star)
    assert peak < h * m / 2, f"peak {peak / 2**20:.1f} MB: an (h, m) array was formed"


def test_holdout_row_lookup_equals_the_pairwise_comparison() -> None:
    """The first matching ``X_star`` row, as the pairwise comparison found it, with
    ``-0.0 == 0.0`` and repeated rows."""
    from pm_dpgp.workflow.ppc import _first_equal_rows

    rng = np.random.default_rng(3)
    vals = np.array([0.0, -0.0, 1.0, 2.5, -3.0])
    for _ in range(300):
        d, m, h = rng.integers(1, 4), rng.integers(1, 25), rng.integers(1, 25)
        Xs, Xq = rng.choice(vals, (m, d)), rng.choice(vals, (h, d))
        eq = np.all(Xq[:, None, :] == Xs[None, :, :], axis=2)
        expected = np.where(eq.any(axis=1), eq.argmax(axis=1), -1)
        assert np.array_equal(_first_equal_rows(Xq, Xs), expected)


def test_inf_norm_prior_noise_bound_forms_no_n_by_n_kernel_matrix(monkeypatch) -> None:
    """``rkhs_sensitivity(bound="inf_norm")`` evaluated the whole ``n × n`` noise-free kernel
    matrix ``K'`` and read only its diagonal; ``kernel_diag`` gives it.  The bound itself is
    unchanged (the paper's ``‖K⁻¹‖_∞ √max k(x, x)``)."""
    from pm_dpgp.mechanisms import rkhs_sensitivity
    from pm_dpgp.models import gp_regression

    X = np.linspace(0.0, 5.0, 60)
    g = gp_regression(X, np.zeros(60), 0.7 * pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.2)
    public = g.public_gp()
    K_inv = np.linalg.inv(public.kernel(public.X) + 0.04 * np.eye(60))
    expected = np.sqrt(0.7) * np.abs(K_inv).sum(axis=0).max()
    public.posterior()  # the training factor (n × n, needed), cached before counting
    shapes = []
    kernel = type(public).kernel

    def counting(self, Xa, Xb=None):
        out = kernel(self, Xa, Xb)
        shapes.append(out.shape)
        return out

    monkeypatch.setattr(type(public), "kernel", counting)
    assert rkhs_sensitivity(public, "inf_norm") == pytest.approx(expected, rel=1e-8)
    assert (60, 60) not in shapes
    rkhs_sensitivity(public, "exact")  # the exact bound needs K' itself
    assert (60, 60) in shapes
