"""Benchmark: L posterior sample paths at m inputs from n training points (Maciazek release),
then lazy rounds of new inputs, against one n × n Cholesky in the same process.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_sample_path.py
[--n 5000 --m 5000 --paths 100 --rounds 10 --k 100]``.  Prints, in ONE process:

* the reference: one Cholesky factorisation of the n × n kernel matrix (best of ``--repeats``);
* :func:`pm_dpgp.mechanisms.full.sample_path.sample_path_release` (kernel evaluation,
  factorisation, L paths at m inputs, the bound, the ledger) as a ratio to it
  (the issue's earlier target: under 20× for L = 100, m = n = 2000);
* each of ``--rounds`` lazy rounds of ``--k`` new inputs (``SamplePathRelease.evaluate``),
  as a ratio to the Cholesky: the round solves only for its new inputs
  (``O(n² k + n q k + q² k)``), so it is a small fraction of a Cholesky, not a fresh solve;
* the ``tracemalloc`` peak of the release and of the lazy rounds, and the memory the release
  object holds after the release and after the rounds, in units of ``n²`` doubles (measured
  in a separate run so tracing does not slow the timed ones), next to the two packed
  triangles it must hold (``n(n+1)/2 + q(q+1)/2``: the training factor and the joint factor
  of the ``q`` released values, in LAPACK RFP format).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
import warnings

import numpy as np
import pymc as pm
from scipy.linalg import cholesky

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.models import gp_regression


def _best_of(fn, repeats: int) -> tuple[float, float]:
    """Smallest wall time and smallest CPU time of ``repeats`` calls (one BLAS thread: the
    CPU time is the less load-sensitive of the two on a shared machine)."""
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus)


def _cholesky_time(public_gp, repeats: int) -> tuple[float, float]:
    """Best-of time of one Cholesky of ``k(X, X) + σ_n² I`` (the reference)."""
    K = public_gp.kernel(public_gp.X)
    K[np.diag_indices(len(K))] += public_gp.noise_var
    return _best_of(lambda: cholesky(K, lower=True), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--m", type=int, default=5000)
    parser.add_argument("--paths", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    print(f"numpy {np.__version__}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    print("load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    run(parser.parse_args())
    print("load average (1, 5, 15 min) after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


def run(args: argparse.Namespace) -> dict[str, float]:
    """Time and trace the release and the lazy rounds; print and return the ratios."""
    n, m = args.n, args.m
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (n, 1))
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=2.0)
    public_gp = model.public_gp()
    X_star = np.linspace(0, 10, m)[:, None]
    lazy = [rng.uniform(0, 10, (args.k, 1)) for _ in range(args.rounds)]
    t_chol, c_chol = _cholesky_time(public_gp, args.repeats)

    def release():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sample_path_release(
                gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=2.0),
                X_star,
                n_draws=args.paths,
                kernel_scale=1.0,
                y_bounds=(-3.0, 3.0),
                delta=1e-5,
                domain=(0.0, 10.0),
                ledger=Ledger(),
                rng=np.random.default_rng(1),
            )

    release()  # warm-up: the kernel's PyTensor compilation happens once per process
    t_rel, c_rel = _best_of(release, args.repeats)
    rel = release()
    t_rounds, c_rounds = [], []
    for X_new in lazy:
        t0, c0 = time.perf_counter(), time.process_time()
        rel.evaluate(X_new)
        t_rounds.append(time.perf_counter() - t0)
        c_rounds.append(time.process_time() - c0)

    del rel
    gc.collect()
    tracemalloc.start()
    rel = release()
    held_release, peak_release = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    for X_new in lazy:
        rel.evaluate(X_new)
    gc.collect()
    held, peak_rounds = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    n2 = 8.0 * n * n
    q = rel.released_inputs.shape[0]
    packed = (n * (n + 1) // 2 + q * (q + 1) // 2) * 8.0 / n2

    print(f"n = {n}, m = {m}, L = {args.paths} paths, {args.rounds} lazy rounds of {args.k}")
    print("                                            wall time (ratio)  |  CPU time (ratio)")
    print(
        f"  one Cholesky of the n x n kernel matrix : {t_chol:8.3f} s          |  {c_chol:8.3f} s"
    )
    print(
        f"  sample_path_release (L paths at m)      : {t_rel:8.3f} s = {t_rel / t_chol:6.2f}x"
        f" |  {c_rel:8.3f} s = {c_rel / c_chol:6.2f}x"
    )
    for i, (t, c) in enumerate(zip(t_rounds, c_rounds, strict=True)):
        print(
            f"  lazy round {i + 1:2d} ({args.k} new inputs)       : {t:8.3f} s = {t / t_chol:6.3f}x"
            f" |  {c:8.3f} s = {c / c_chol:6.3f}x"
        )
    print(
        f"  all lazy rounds                         : {sum(t_rounds) / t_chol:6.2f}x one Cholesky"
        f" (CPU {sum(c_rounds) / c_chol:6.2f}x)"
    )
    print(f"  peak memory, release                    : {peak_release / n2:6.2f} n^2 doubles")
    print(f"  peak memory, lazy rounds                : {peak_rounds / n2:6.2f} n^2 doubles")
    print(f"  held after the release (release object) : {held_release / n2:6.2f} n^2 doubles")
    print(f"  held after the rounds (release object)  : {held / n2:6.2f} n^2 doubles")
    print(
        f"  of which the two packed triangles       : {packed:6.2f} n^2 doubles "
        f"(n(n+1)/2 + q(q+1)/2, q = {q} released inputs)"
    )
    return {
        "cholesky": t_chol,
        "release_ratio": t_rel / t_chol,
        "release_ratio_cpu": c_rel / c_chol,
        "rounds_ratio_total_cpu": sum(c_rounds) / c_chol,
        "round_ratio_max": max(t_rounds) / t_chol,
        "rounds_ratio_total": sum(t_rounds) / t_chol,
        "peak_release_n2": peak_release / n2,
        "peak_rounds_n2": peak_rounds / n2,
        "held_release_n2": held_release / n2,
        "held_n2": held / n2,
    }


if __name__ == "__main__":
    main()
