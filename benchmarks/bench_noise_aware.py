"""Benchmark: noise-aware DP sparse GP (Honkela 2024) on streamed data, and the S₂ closed form.

Run ``python benchmarks/bench_noise_aware.py`` from the repository root (``--n`` to change the
number of points).  It reports

1. **Streaming release**: ``n`` = 1,000,000 points (2-D inputs uniform on [-5, 5]², responses
   ``sin(x₁) cos(x₂) + 0.3 ε``) generated chunk by chunk (the data never exist in memory at
   once), ``|Z|`` = 100 (a 10 × 10 public grid), EQ kernel, ε = 1, δ = 1e-6: wall time of
   :func:`pm_dpgp.mechanisms.full.noise_aware.noise_aware_release` and its peak memory
   (``tracemalloc`` peak of Python/NumPy allocations during the call, in a separate run so the
   tracing does not slow the timed one; and the process peak RSS from ``resource``), against
   the time and ``tracemalloc`` peak of computing ``K_ZX`` for ONE chunk.  Targets: < 60 s and
   < 1 GB on a 2-core machine.
2. The same with the data as Dask arrays (reduced by Dask's threaded scheduler), and on a
   ``dask.distributed`` ``LocalCluster`` with 2 worker processes (1 thread each, data generated
   on the workers; skip with ``--no-distributed``).
3. **S₂ for |Z| = 300**: time of :func:`~pm_dpgp.mechanisms.full.noise_aware.noise_correction`
   (the O(|Z|³) closed form) and of the whole post-processing :func:`dp_qu`.  Target < 1 s.
   On a shared 2-core machine multi-threaded OpenBLAS can be slowed down a lot by other load
   (thread contention); if ``threadpoolctl`` is installed the timings are repeated with one
   BLAS thread.

Timings depend on the machine load.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import numpy as np
import pymc as pm

from pm_dpgp.gp.sparse import default_chunk_size
from pm_dpgp.mechanisms.full.noise_aware import dp_qu, noise_aware_release, noise_correction
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

MB = 2**20


def chunks(n: int, chunk: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The private data, generated chunk by chunk (never all in memory)."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, chunk):
        c = min(chunk, n - start)
        X = rng.uniform(-5.0, 5.0, (c, 2))
        y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.3 * rng.standard_normal(c)
        yield X, y


def rss_mb() -> float:
    """Peak resident set size of this process so far (MB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def release(public: Any, data: Any, seed: int = 0) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return noise_aware_release(
            public,
            data,
            epsilon=1.0,
            delta=1e-6,
            y_bounds=(-2.0, 2.0),
            rng=np.random.default_rng(seed),
        )


def blas_settings() -> list[tuple[str, Any]]:
    """Default BLAS threading, and one BLAS thread when ``threadpoolctl`` is available."""
    out: list[tuple[str, Any]] = [("default BLAS threads", nullcontext)]
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return out
    out.append(("1 BLAS thread", lambda: threadpool_limits(limits=1)))
    return out


def bench_stream(n: int, distributed: bool = True) -> None:
    settings = blas_settings()
    for i, (name, ctx) in enumerate(settings):
        with ctx():
            # the cluster run once, with the last (1 BLAS thread) setting
            _bench_stream(n, name, distributed and i == len(settings) - 1)


def _bench_stream(n: int, setting: str, distributed_run: bool = False) -> None:
    Z = grid_inducing_points([-5.0, -5.0], [5.0, 5.0], [10, 10])
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(2, ls=1.5), Z=Z, noise_sd=0.3
    ).public_sparse_gp()
    M = public.n_inducing
    chunk = default_chunk_size(M)
    release(public, next(chunks(1000, 1000, 1)))  # warm-up (compiled kernel copies, imports)

    # one chunk of K_ZX
    X0, _ = next(chunks(chunk, chunk, 2))
    t0 = time.perf_counter()
    public.kernel(Z, X0)
    t_k = time.perf_counter() - t0
    tracemalloc.start()
    Kc = public.kernel(Z, X0)
    _, peak_k = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del Kc

    rss0 = rss_mb()
    t0 = time.perf_counter()
    rel = release(public, chunks(n, chunk, 0))
    t_rel = time.perf_counter() - t0
    rss1 = rss_mb()
    tracemalloc.start()
    release(public, chunks(n, chunk, 0))
    _, peak_rel = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(
        f"== [{setting}] streamed release: n = {n:,}, |Z| = {M}, d = 2, chunk = {chunk:,} rows =="
    )
    print(
        f"K_ZX for one chunk ({M} x {chunk:,}, {M * chunk * 8 / MB:.1f} MB): "
        f"{t_k:.3f} s, tracemalloc peak {peak_k / MB:.1f} MB"
    )
    print(
        f"noise_aware_release (iterator of chunks): {t_rel:.2f} s wall "
        f"(= {t_rel / t_k:.0f} x one K_ZX chunk; {n // chunk + (n % chunk > 0)} chunks)"
    )
    print(
        f"  tracemalloc peak during the release: {peak_rel / MB:.1f} MB "
        f"(= {peak_rel / peak_k:.2f} x one K_ZX chunk)"
    )
    print(
        f"  process peak RSS: {rss1:.0f} MB (before the release: {rss0:.0f} MB; includes "
        "numpy/pymc/pytensor)"
    )
    print(
        f"  targets: time < 60 s {'OK' if t_rel < 60 else 'MISSED'}, "
        f"peak < 1 GB {'OK' if max(rss1, peak_rel / MB) < 1024 else 'MISSED'}"
    )
    md = rel.metadata
    print(
        f"  R_k rule {md['R_k_equation']}, Delta = {md['l2_sensitivity']:.3f}, "
        f"sigma_a = {md['sigma_a']:.3f}, lambda = {md['lambda']:.3g}"
    )

    try:
        import dask
        import dask.array as da
    except ImportError:  # pragma: no cover
        print("dask not installed: Dask run skipped")
        return
    Xd = da.random.default_rng(0).uniform(-5.0, 5.0, (n, 2), chunks=(chunk, 2))
    yd = da.sin(Xd[:, 0]) * da.cos(Xd[:, 1])
    with dask.config.set(scheduler="threads"):
        t0 = time.perf_counter()
        release(public, (Xd, yd))
        t_dask = time.perf_counter() - t0
    print(
        f"noise_aware_release (Dask arrays, threaded scheduler, {Xd.numblocks[0]} blocks): "
        f"{t_dask:.2f} s wall (= {t_dask / t_k:.0f} x one K_ZX chunk); "
        f"process peak RSS {rss_mb():.0f} MB"
    )
    if distributed_run:
        bench_distributed(public, Xd, yd, t_k, t_rel)


def bench_distributed(public: Any, Xd: Any, yd: Any, t_k: float, t_stream: float) -> None:
    """The same release on a ``dask.distributed`` LocalCluster: 2 worker processes, 1 thread."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover
        print("distributed not installed: cluster run skipped")
        return
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    with (
        LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, env=env
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: __import__("pm_dpgp.models"))  # import PyMC in the workers first
        release(public, (Xd[:2000], yd[:2000]))  # warm-up: kernel loaded once per worker
        t0 = time.perf_counter()
        release(public, (Xd, yd))
        t_dist = time.perf_counter() - t0
    print(
        f"noise_aware_release (Dask arrays, distributed LocalCluster, 2 worker processes x 1 "
        f"thread, data generated on the workers): {t_dist:.2f} s wall "
        f"(= {t_dist / t_k:.0f} x one K_ZX chunk, {t_dist / t_stream:.2f} x the iterator run)"
    )


def bench_s2(M: int = 300, repeats: int = 3) -> None:
    rng = np.random.default_rng(0)
    Z = np.linspace(-10, 10, M)
    K = np.exp(-0.5 * (Z[:, None] - Z[None, :]) ** 2 / 0.5**2) + 1e-6 * np.eye(M)
    X = rng.uniform(-10, 10, 5000)
    Kx = np.exp(-0.5 * (Z[:, None] - X[None, :]) ** 2 / 0.5**2)
    A, B = Kx @ np.sin(X), Kx @ Kx.T
    E = rng.standard_normal((M, M))
    Bn = B + 3.0 * (E + E.T) / 2
    a = A + 3.0 * rng.standard_normal(M)
    P = K + 10.0 * Bn + 500.0 * np.eye(M)
    H, w = np.linalg.solve(P, K), np.linalg.solve(P, a)

    print(f"== S2 closed form, |Z| = {M} ==")
    for name, ctx in blas_settings():
        with ctx():
            best_nc, best_all = np.inf, np.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                noise_correction(H, w, scale=10.0, sigma_a=3.0, sigma_b=3.0)
                best_nc = min(best_nc, time.perf_counter() - t0)
                t0 = time.perf_counter()
                q = dp_qu(K, a, Bn, scale=10.0, sigma_a=3.0, sigma_b=3.0, lam=500.0)
                best_all = min(best_all, time.perf_counter() - t0)
        ok = "OK" if best_nc < 1.0 else "MISSED"
        print(
            f"[{name}] noise_correction (S2,1 + S2,2): {best_nc * 1e3:.1f} ms ({ok} < 1 s); "
            f"whole dp_qu (eigvalsh, 2 Cholesky, solves, S2): {best_all * 1e3:.1f} ms; "
            f"min eig S = {np.linalg.eigvalsh(q.S)[0]:.3g}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument(
        "--no-distributed", action="store_true", help="skip the dask.distributed LocalCluster run"
    )
    args = parser.parse_args()
    bench_stream(args.n, distributed=not args.no_distributed)
    bench_s2()


if __name__ == "__main__":
    main()
