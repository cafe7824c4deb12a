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
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.models import fitc_gp_regression, kmeans_inducing_points, kmeans_public_inducing


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
