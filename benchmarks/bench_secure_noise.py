"""Benchmark: a cloaked release with secure (OpenDP discrete Gaussian) vs simulation noise.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_secure_noise.py`` from the repository
root.  Setting: the !Kung women (287 rows, ages public, heights private), EQ kernel
7.72² exp(−(x − x')²/(2 ℓ²)) with a short lengthscale ℓ = 2 years (so the cloaking matrix has
a large numerical rank k and the secure path draws many coordinates), noise 14 cm, released at
m = 200 and m = 5,000 test ages in [0, 110].  For each m it prints the best-of-``--repeats``
wall-clock time of :func:`pm_dpgp.mechanisms.cloaked_release` with ``rng=None`` (secure) and
with a NumPy Generator (simulation), their ratio (target ≤ 1.5× at m = 5,000, issue 12), the
rank k, and, as a machine reference in the same process, one Cholesky factorisation of an
m × m SPD matrix.  Both modes solve the same noise covariance; only the draw differs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pymc as pm
from scipy.linalg import cholesky

from pm_dpgp.datasets import load_kung_women
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression

BOUNDS = (50.0, 170.0)


def _best_of(fn: Callable[[], object], repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengthscale", type=float, default=2.0)
    args = parser.parse_args(argv)
    age, height = load_kung_women()
    model = gp_regression(
        age, height, 7.72**2 * pm.gp.cov.ExpQuad(1, ls=args.lengthscale), noise_sd=14.0, mean=110.0
    )
    kw = dict(epsilon=1.0, delta=0.01, y_bounds=BOUNDS)
    print(f"cloaked release, !Kung (n = {age.size}), EQ lengthscale {args.lengthscale}")
    for m in (200, 5000):
        ages = np.linspace(0.0, 110.0, m)
        rel = cloaked_release(model, ages, **kw)  # warm-up (and the rank k)
        t_sec = _best_of(lambda a=ages: cloaked_release(model, a, **kw), args.repeats)
        t_sim = _best_of(
            lambda a=ages: cloaked_release(model, a, rng=np.random.default_rng(0), **kw),
            args.repeats,
        )
        A = np.random.default_rng(1).standard_normal((m, m))
        spd = A @ A.T + m * np.eye(m)
        t_chol = _best_of(lambda s=spd: cholesky(s, lower=True), args.repeats)
        print(
            f"  m = {m:5d}  k = {rel.metadata['noise_rank']:4d}  secure {t_sec:8.3f} s  "
            f"simulation {t_sim:8.3f} s  ratio {t_sec / t_sim:5.2f}x  "
            f"(one m x m Cholesky {t_chol * 1e3:8.1f} ms)"
        )


if __name__ == "__main__":
    main()
