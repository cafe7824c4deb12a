"""Stop 50: the library's PyTensor functions are compiled with IEEE-754 arithmetic.

PyTensor 3 (PyMC 6) compiles through Numba with fast-math flags on by default; ``reassoc``
cancelled the Gibbs kernel's rescaling by ``max(r, r')`` and gave NaN at inputs near 1e-170
(CI of stop 49: ``test_audit_stop48_models``' scale test failed on PyMC 6 depending on the
Numba cache).  The compiled kernel, its per-thread copy and its unpickled copy (a Dask
worker's) must all give the scale-1 values.  On PyTensor 2 (C backend) these pass trivially.
"""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from pm_dpgp._ieee import ieee_arithmetic, ieee_function
from pm_dpgp.models.nonstationary import GibbsKernel, KDELengthscale, nonstationary_gp_regression

_FASTMATH = hasattr(pytensor.config, "numba__fastmath")


def _kde(scale: float) -> tuple[np.ndarray, KDELengthscale]:
    X = np.sort(np.random.default_rng(5).uniform(0.0, 10.0, 30))
    kde = KDELengthscale(
        X[:, None] * scale,
        n_target=3,
        max_lengthscale=5.0 * scale,
        bandwidth=0.7 * scale,
        neighbourhood=0.5 * scale,
    )
    return X, kde


def _reference() -> np.ndarray:
    X, kde = _kde(1.0)
    return GibbsKernel(1, kde)(X[:6, None]).eval()


@pytest.fixture(autouse=True)
def _fast_math_on():
    """The PyTensor 3 default, whatever the environment set."""
    flags = {"numba__fastmath": True} if _FASTMATH else {}
    with pytensor.config.change_flags(**flags):
        yield


@pytest.mark.parametrize("scale", [1e-170, 1e160])
def test_ieee_function_keeps_the_gibbs_rescaling(scale: float) -> None:
    X, kde = _kde(scale)
    Xt = pt.dmatrix("X")
    fn = ieee_function([Xt], GibbsKernel(1, kde).full(Xt))
    K = fn(X[:6, None] * scale)
    np.testing.assert_allclose(K, _reference(), rtol=1e-12, atol=1e-14)
    # a copy re-links the graph; inside ieee_arithmetic it keeps IEEE arithmetic
    with ieee_arithmetic():
        np.testing.assert_allclose(fn.copy()(X[:6, None] * scale), K, rtol=0, atol=0)


def test_ieee_arithmetic_restores_the_flag_and_is_reentrant() -> None:
    if not _FASTMATH:
        pytest.skip("this PyTensor has no numba__fastmath flag")
    with ieee_arithmetic():
        assert pytensor.config.numba__fastmath is False
        with ieee_arithmetic():
            assert pytensor.config.numba__fastmath is False
        assert pytensor.config.numba__fastmath is False
    assert pytensor.config.numba__fastmath is True
    with pytest.raises(RuntimeError, match="inside"), ieee_arithmetic():
        raise RuntimeError("inside")
    assert pytensor.config.numba__fastmath is True


@pytest.mark.parametrize("scale", [1e-170, 1e160])
def test_public_kernel_copies_keep_ieee_arithmetic(scale: float) -> None:
    """The model's kernel from another thread (its own copy) and after a pickle round trip
    (a Dask worker's copy) gives the scale-1 kernel, not fast-math NaN."""
    X, kde = _kde(scale)
    gp = nonstationary_gp_regression(
        X * scale, np.sin(X), kde, kernel_scale=1.0, noise_sd=0.3
    ).public_gp()
    pts = X[:6, None] * scale
    expected = _reference()
    np.testing.assert_allclose(gp.kernel(pts), expected, rtol=1e-12, atol=1e-14)

    got: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: got.append(gp.kernel(pts)))
    worker.start()
    worker.join()
    np.testing.assert_allclose(got[0], expected, rtol=1e-12, atol=1e-14)

    restored = pickle.loads(pickle.dumps(gp))
    np.testing.assert_allclose(restored.kernel(pts), expected, rtol=1e-12, atol=1e-14)


def test_kde_lengthscale_evaluate_is_scale_equivariant_under_fast_math_default() -> None:
    X, kde1 = _kde(1.0)
    _, kde_s = _kde(1e-170)
    np.testing.assert_allclose(
        kde_s.evaluate(X[:, None] * 1e-170) / 1e-170, kde1.evaluate(X[:, None]), rtol=1e-13
    )


_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_stop50_ieee import _kde, _reference
from pm_dpgp.models.nonstationary import nonstationary_gp_regression
X, kde = _kde(1e-170)
gp = nonstationary_gp_regression(X * 1e-170, np.sin(X), kde, kernel_scale=1.0, noise_sd=0.3)
K = gp.public_gp().kernel(X[:6, None] * 1e-170)
print(float(np.max(np.abs(K - _reference()))))
"""


def test_kernel_from_a_warm_numba_cache_keeps_ieee_arithmetic(tmp_path) -> None:
    """Two processes sharing one fresh PyTensor/Numba cache: the second loads the compiled
    kernel from the cache.  Before stop 50 the first gave the right kernel and the second NaN
    (PyTensor 3.3.8, Numba fast math); with ``ieee_function`` both are exact."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ)
    runs: tuple[str, ...] = ("one process, the caches in use",)
    if "numba" in type(pytensor.compile.mode.get_default_mode().linker).__name__.lower():
        # PyTensor 3: fresh caches, so that the first process compiles and the second loads
        env["PYTENSOR_FLAGS"] = f"base_compiledir={tmp_path / 'pt'}"
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
        runs = ("cold cache", "warm cache")
    # PyTensor 2 (C backend, never fast math): one run; a fresh C cache would cost ≈ 1 min
    script = _SCRIPT.format(tests=str(Path(__file__).parent))
    for run in runs:
        out = (
            subprocess.run(
                [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        assert float(out) <= 1e-12, (run, out)
