"""Benchmark: L posterior sample paths at m inputs from n training points (Maciazek release).

Run ``python benchmarks/bench_sample_path.py [--n 2000 --m 2000 --paths 100]``.
Prints the wall time of :func:`pm_dpgp.mechanisms.sample_path.sample_path_release`
(kernel evaluation, factorisation, L paths, the bound and the ledger) against the
reference: one Cholesky factorisation of the n × n kernel matrix in the same process,
and the ratio. Target (issue): under 20× that Cholesky for L = 100, m = n = 2000.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from scipy.linalg import cholesky

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.sample_path import sample_path_release
from pm_dpgp.models import gp_regression


def _best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--m", type=int, default=2000)
    parser.add_argument("--paths", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (args.n, 1))
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(args.n)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), sigma=2.0)
    public_gp = model.public_gp()
    X_star = np.linspace(0, 10, args.m)[:, None]
    K = public_gp.kernel(X) + public_gp.noise_var * np.eye(args.n)

    t_chol = _best_of(lambda: cholesky(K, lower=True), args.repeats)

    def release() -> None:
        sample_path_release(
            model,
            X_star,
            n_paths=args.paths,
            sigma=1.0,
            y_bound=3.0,
            delta=1e-5,
            domain=(0.0, 10.0),
            ledger=Ledger(),
            rng=np.random.default_rng(1),
        )

    release()  # warm-up: PyTensor compilation of the kernel happens once per model
    t_rel = _best_of(release, args.repeats)
    print(f"n = {args.n}, m = {args.m}, L = {args.paths} paths")
    print(f"  one Cholesky of the n x n kernel matrix : {t_chol:8.3f} s")
    print(f"  sample_path_release (L paths at m)      : {t_rel:8.3f} s")
    print(f"  ratio release / Cholesky                : {t_rel / t_chol:8.1f}x  (target < 20x)")


if __name__ == "__main__":
    main()
