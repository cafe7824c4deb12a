"""Stop-48 audit of the model builders and the GP numerics under them.

1. The k-means of public inputs (``kmeans_public_inducing``: FITC ``n_inducing``/``seed`` and
   the classification release's ``inducing_points=M``; ``kmeans_inducing_points``: VFE ``Z``)
   worked on the inputs' own squared distances.  Inputs near 1e160 (lengthscale of the same
   magnitude: the GP itself is fine there) overflowed them: SciPy's ``kmeans2`` crashed the
   interpreter (segmentation fault, or ``IndexError``), the sparse k-means raised NumPy's
   "Probabilities contain NaN".  Near 1e-200 they underflowed to 0: the FITC builder refused
   30 distinct inputs as "k-means gave coinciding centres", and the sparse k-means returned
   centres that are no k-means solution (two of four at 5.34 and 5.44 on [0, 10]), silently.
   Both now run on the inputs scaled by a power of two (exact; the same centres, bit for bit,
   for inputs of ordinary magnitude).
2. The owner's non-private views named no argument for labels/outputs of the wrong shape:
   ``PublicLatentGP.laplace``/``predict`` with a one-column ``DataFrame`` of labels raised
   NumPy's "only 0-dimensional arrays can be converted to Python scalars" (``max_iter=1``) or
   "A must be a square matrix, got shape (12, 12, 12)"; ``laplace_mode`` with a NaN label "B
   contains NaN", with {-1, +1} labels returned another mode silently, with too few labels
   "K must be (11, 11)"; ``PublicFITC.predict`` with a short ``y`` NumPy's matmul message.
3. ``grid_inducing_points`` over a box wider than the largest float (``[-1e308, 1e308]``)
   returned ``[nan, inf, 1e308]`` (NumPy's ``linspace`` of an overflowing width), silently.
4. The non-stationary model at scaled inputs (inputs, bandwidth, neighbourhood and maximum
   lengthscale all × s): ``KDELengthscale`` formed ``(2π h²)^{d/2}`` and squared distances in
   the inputs' units, and ``GibbsKernel`` the squares of the lengthscales.  Near 1e155 the
   builder raised "lengthscale_func failed ... (OverflowError ...)", near 1e-155 "must return
   finite lengthscales > 0"; fixed in the KDE alone, the Gibbs kernel's squares then lost
   digits near 1e-160 (1.7e-4 off a cloaked mean).  Both depend on ratios only.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.gp.laplace import laplace_mode
from pm_dpgp.models import (
    KDELengthscale,
    fitc_gp_regression,
    gp_classification,
    grid_inducing_points,
    kmeans_inducing_points,
    kmeans_public_inducing,
    nonstationary_gp_regression,
)


def _inputs() -> np.ndarray:
    return np.random.default_rng(0).uniform(0.0, 10.0, (30, 1))


@pytest.mark.parametrize("scale", [2.0**-700, 1e-200, 2.0**-20, 2.0**20, 1e200, 2.0**700])
def test_public_kmeans_is_scale_equivariant(scale: float) -> None:
    """The centres of ``s X`` are ``s`` × the centres of ``X`` (exactly for a power of two)."""
    X = _inputs()
    ref = kmeans_public_inducing(X, 4, seed=1)
    got = kmeans_public_inducing(X * scale, 4, seed=1) / scale
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0)
    if np.log2(scale).is_integer():
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("scale", [2.0**-700, 1e-200, 2.0**-20, 2.0**20, 1e200, 2.0**700])
def test_sparse_kmeans_is_scale_equivariant(scale: float) -> None:
    X = _inputs()
    ref = kmeans_inducing_points(X, 4, rng=np.random.default_rng(0))
    got = kmeans_inducing_points(X * scale, 4, rng=np.random.default_rng(0)) / scale
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0)


def test_fitc_builder_places_inducing_inputs_at_tiny_scale() -> None:
    """30 distinct inputs near 1e-200 were refused as 'coinciding centres'; the model at that
    scale (lengthscale scaled alike) is the model at scale 1."""
    X, s = _inputs()[:, 0], 1e-200
    y = np.sin(X)
    cov = pm.gp.cov.ExpQuad(1, ls=2.0)
    ref = fitc_gp_regression(X, y, cov, noise_sd=0.3, n_inducing=4, seed=1)
    tiny = fitc_gp_regression(
        X * s, y, pm.gp.cov.ExpQuad(1, ls=2.0 * s), noise_sd=0.3, n_inducing=4, seed=1
    )
    np.testing.assert_allclose(tiny.Z / s, ref.Z, rtol=1e-14, atol=0)
    X_star = np.array([0.5, 3.0, 9.0])
    np.testing.assert_allclose(
        tiny.public_cloaking().predict(y, X_star * s)[0],
        ref.public_cloaking().predict(y, X_star)[0],
        rtol=1e-9,
        atol=1e-12,
    )


def test_public_kmeans_at_huge_scale_does_not_crash_the_interpreter() -> None:
    """At 1e160 SciPy's kmeans2 read out of bounds (a segmentation fault): run in a child."""
    code = textwrap.dedent(
        """
        import numpy as np
        from pm_dpgp.models.fitc import kmeans_public_inducing
        X = np.random.default_rng(0).uniform(0.0, 10.0, (30, 1))
        Z = kmeans_public_inducing(X * 1e160, 4, seed=1) / 1e160
        print(float(np.max(np.abs(Z - kmeans_public_inducing(X, 4, seed=1)))))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) <= 1e-14 * 10.0


@pytest.mark.parametrize("max_iter", [1, 100])
def test_latent_view_refuses_two_dimensional_labels_by_name(max_iter: int) -> None:
    pd = pytest.importorskip("pandas")
    X = np.linspace(0.0, 10.0, 12)
    t = (np.sin(X) > 0).astype(float)
    pub = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=1.0)).public_gp()
    labels = pd.DataFrame({"label": t})[["label"]]
    with pytest.raises(ValueError, match=r"t \(labels\) must be 1-dimensional"):
        pub.laplace(labels, max_iter=max_iter)
    with pytest.raises(ValueError, match=r"t \(labels\) must be 1-dimensional"):
        pub.predict(labels, X[:3], max_iter=max_iter)
    # the 1-D column is the model's answer
    np.testing.assert_array_equal(pub.laplace(labels["label"]).f, pub.laplace(t).f)


def test_laplace_mode_refuses_labels_it_would_misread() -> None:
    X = np.linspace(0.0, 10.0, 12)
    K = np.exp(-0.5 * np.subtract.outer(X, X) ** 2)
    t = (np.sin(X) > 0).astype(float)
    with pytest.raises(ValueError, match=r"t \(labels\) contains NaN"):
        laplace_mode(K, np.r_[np.nan, t[1:]])
    with pytest.raises(ValueError, match=r"t \(labels\) must hold 0 or 1"):
        laplace_mode(K, 2.0 * t - 1.0)
    with pytest.raises(ValueError, match=r"K must be \(11, 11\) for 11 labels t"):
        laplace_mode(K, t[:-1])
    with pytest.raises(ValueError, match="K contains NaN"):
        laplace_mode(np.full_like(K, np.nan), t)
    assert laplace_mode(K, t.astype(bool)).converged


def test_fitc_predict_names_a_short_y() -> None:
    X = np.linspace(0.0, 10.0, 12)
    y = np.sin(X)
    fitc = fitc_gp_regression(
        X, y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3, n_inducing=4, seed=0
    ).public_cloaking()
    with pytest.raises(ValueError, match="y must have length 12, got 11"):
        fitc.predict(y[:-1], X[:3])


@pytest.mark.parametrize(("lower", "upper", "num"), [(-1e308, 1e308, 3), (-1.7e308, 1.7e308, 5)])
def test_grid_over_a_box_wider_than_the_largest_float(lower: float, upper: float, num: int) -> None:
    G = grid_inducing_points(lower, upper, num)[:, 0]
    assert np.all(np.isfinite(G)) and G[0] == lower and G[-1] == upper
    np.testing.assert_allclose(G / upper, np.linspace(-1.0, 1.0, num), rtol=0, atol=1e-15)
    # an ordinary box: numpy.linspace itself, bit for bit
    np.testing.assert_array_equal(
        grid_inducing_points(-3.5, 3.5, 15)[:, 0], np.linspace(-3.5, 3.5, 15)
    )


def _gibbs_model(scale: float):
    X = np.sort(np.random.default_rng(5).uniform(0.0, 10.0, 30))
    kde = KDELengthscale(
        X[:, None] * scale,
        n_target=3,
        max_lengthscale=5.0 * scale,
        bandwidth=0.7 * scale,
        neighbourhood=0.5 * scale,
    )
    model = nonstationary_gp_regression(X * scale, np.sin(X), kde, kernel_scale=1.0, noise_sd=0.3)
    return X, kde, model


@pytest.mark.parametrize("scale", [1e-170, 1e-160, 1e-155, 1e155, 1e160, 1e200])
def test_nonstationary_model_is_scale_equivariant(scale: float) -> None:
    X, kde, model = _gibbs_model(1.0)
    Xs, kde_s, model_s = _gibbs_model(scale)
    np.testing.assert_allclose(
        kde_s.evaluate(X[:, None] * scale) / scale, kde.evaluate(X[:, None]), rtol=1e-13
    )
    X_star = np.linspace(0.5, 9.5, 5)
    y = np.sin(X)
    np.testing.assert_allclose(
        model_s.public_gp().predict(y, X_star * scale)[0],
        model.public_gp().predict(y, X_star)[0],
        rtol=1e-12,
        atol=1e-13,
    )
