"""Benchmark: sparse (FITC) cloaked release at n = 100,000, m = 1,000, |Z| = 100.

Run ``OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_sparse_cloaking.py`` from
the repository root (``--n``, ``--m``, ``--inducing``, ``--dim`` to change the problem).  In
ONE process it reports:

* the reference: one ``|Z| × n`` kernel evaluation ``k(Z, X)`` through the model's compiled
  PyMC kernel (best of ``--repeats``);
* k-means placement of ``Z`` on the public inputs (SciPy ``kmeans2``, seeded; part of building
  the model, reported separately);
* :func:`pm_dpgp.mechanisms.cloaked_release` on the FITC model (fresh public view, so the
  FITC factorisation is included; simulation noise and, separately, the default secure
  OpenDP noise), as a ratio to that kernel evaluation;
* the ``tracemalloc`` peak of the release (NumPy buffers are traced) in MB, measured in a
  separate call, and the process's maximum resident set size.

Targets (issue 10): under 30 s and under 2 GB.  No ``n × n`` (80 GB here) or ``m × n``
(800 MB) matrix is formed: the cloaking matrix is the product of an ``m × M`` and an
``M × n`` factor (:mod:`pm_dpgp.gp.fitc`).
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import fitc_gp_regression

MB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=1_000)
    parser.add_argument("--inducing", type=int, default=100)
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    n, m, M, d = args.n, args.m, args.inducing, args.dim
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (n, d))
    y = np.clip(np.sin(X).sum(axis=1) + 0.3 * rng.standard_normal(n), -2.0, 2.0)
    X_star = rng.uniform(0.0, 10.0, (m, d))
    cov = pm.gp.cov.ExpQuad(d, ls=1.5)

    t0 = time.perf_counter()
    model = fitc_gp_regression(X, y, cov, noise_sd=0.3, n_inducing=M, seed=0)
    t_build = time.perf_counter() - t0
    view = model.public_cloaking()
    view.kernel(model.Z[:2], X[:2])  # compile the kernel before any clock
    t_kernel = np.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        view.kernel(model.Z, X)
        t_kernel = min(t_kernel, time.perf_counter() - t0)

    kw = dict(epsilon=1.0, delta=1e-6, y_bounds=(-2.0, 2.0), bounds_are_public=True)
    t0, c0 = time.perf_counter(), time.process_time()
    release = cloaked_release(model, X_star, rng=np.random.default_rng(1), **kw)
    t_release, c_release = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    cloaked_release(model, X_star, **kw)  # secure OpenDP noise (the default)
    t_secure = time.perf_counter() - t0
    tracemalloc.start()
    cloaked_release(model, X_star, rng=np.random.default_rng(2), **kw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    md = release.metadata
    print(f"sparse cloaking: n = {n:,}, m = {m:,}, |Z| = {M}, d = {d}")
    print(f"  k(Z, X) kernel evaluation ({M} x {n:,}): {t_kernel:8.3f} s   (reference)")
    print(f"  model build incl. k-means placement:    {t_build:8.3f} s")
    print(
        f"  cloaked release (simulation noise):     {t_release:8.3f} s   "
        f"= {t_release / t_kernel:6.1f} x kernel"
    )
    print(
        f"  cloaked release (secure OpenDP noise):  {t_secure:8.3f} s   "
        f"= {t_secure / t_kernel:6.1f} x kernel"
    )
    print(f"  CPU time of that release:               {c_release:8.3f} s   (wall/CPU > 1: load)")
    print(f"  tracemalloc peak of one release:        {peak / MB:8.1f} MB")
    print(f"  process max RSS:                        {rss:8.1f} MB")
    print(
        f"  noise rank {md['noise_rank']}, solver converged {md['solver_converged']}, "
        f"gap bound {md['solver_gap_bound']:.2e}, max Mahalanobis {md['max_mahalanobis']:.9f}"
    )


if __name__ == "__main__":
    main()
