"""Benchmark: every figure of issue 13 in ONE run, each as a ratio to one Cholesky in-process.

Run ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_scale.py``
from the repository root (``--quick`` for a smoke test at small sizes).  It reuses the
existing benchmarks rather than duplicating them:

1. cloaked release, ``n = 10,000``, ``m = 1,000``, 1-D, and its ``tracemalloc`` peak in
   ``n²`` doubles (``bench_cloaked_release.run``; target ≤ 2.5×, ≤ 2 n²);
2. cloaked release, ``n = 3,000``, ``m = 5,041`` (71² grid), 2-D (target ≤ 10×), and its
   split: building the operator (kernel matrices and the ``n × n`` Cholesky), the range
   finder (``_reduce``: sketch, ``QᵀC``, SVD), the D-optimal design solve
   (``_solve_design``) and the assembly of ``M_k`` (wall and CPU time of each, same process);
3. sample-path release, ``L = 100`` paths, ``n = m = 5,000``, then 10 lazy rounds of 100
   new inputs (``bench_sample_path.run``): wall and CPU time ratios, the ``tracemalloc`` peak
   and the memory the release object holds after the release and after the rounds, in
   ``n²`` doubles, next to the two packed (RFP) triangles it must hold;
4. the ledger recording 1,000 Gaussian events (``bench_ledger.main``; target < 0.5 s);
5. a DP Thompson round against a non-private one (``bench_thompson_round.main``; ≤ 1.5×);
6. the scaling table ``n ∈ {1k, 3k, 10k}`` × ``m ∈ {200, 1k, 5k}`` × ``d ∈ {1, 2}``
   (``bench_cloaked_release.run``; m rounded to a square grid in 2-D), with peak memory.

Each section prints the machine's load average (the machine may be shared: ratios within a
section are what to compare; CPU times are printed where the split matters).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg as sla

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cloaked_release as bcr  # noqa: E402
import bench_ledger  # noqa: E402
import bench_sample_path  # noqa: E402
import bench_thompson_round  # noqa: E402

from pm_dpgp.mechanisms.label import cloaking  # noqa: E402


def section(title: str) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n== {title} (load average {load}; {time.strftime('%H:%M:%S')}) ==", flush=True)


def timed(fn):
    """``(result, wall seconds, CPU seconds)`` of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def release_split(n: int, m: int, d: int, t_chol: float) -> None:
    """Time the stages of ``public_cloaking`` separately (what the release spends where)."""
    X, y, X_star = bcr.problem(n, m, d)
    A = bcr.model_for(X, np.zeros(n)).public_gp().kernel(X) + 0.09 * np.eye(n)
    _, w_chol, c_chol = timed(functools.partial(sla.cholesky, A, lower=True, check_finite=False))
    del A
    model = bcr.model_for(X, y)
    rel, w_rel, c_rel = timed(lambda: bcr.release(X, y, X_star, model=model))
    print(
        f"  release wall {w_rel:.2f} s / Cholesky wall {w_chol:.2f} s = {w_rel / w_chol:.2f}x | "
        f"release CPU {c_rel:.2f} s / Cholesky CPU {c_chol:.2f} s = {c_rel / c_chol:.2f}x"
    )
    public_gp = bcr.model_for(X, y).public_cloaking()
    op, w_op, c_op = timed(lambda: public_gp.cloaking_operator(X_star))
    rank_tol = rel.metadata["rank_tol"]  # the release's own cut (the default "auto" rule)
    red, w_red, c_red = timed(lambda: cloaking._reduce(op, rank_tol))
    Bt = np.ascontiguousarray(red.white[:, red.reps].T)
    (u, iters, conv), w_des, c_des = timed(lambda: cloaking._solve_design(Bt, 1e-9, 100_000))
    weights = np.zeros(op.shape[1])
    weights[red.reps] = u

    def assemble():
        return cloaking._assemble(red, weights, iters, conv, tol=1e-9)

    res, w_asm, c_asm = timed(assemble)
    print(
        f"  split of the release, n={n:,} m={X_star.shape[0]:,} d={d} (rank {res.rank}, "
        f"rank_tol {rank_tol:.3g}, {rel.metadata['rank_rule']}):"
    )
    for name, w, c in (
        ("operator: kernels + n x n Cholesky", w_op, c_op),
        ("range finder (_reduce)", w_red, c_red),
        ("design solve (_solve_design)", w_des, c_des),
        ("assembly of M_k, certificate", w_asm, c_asm),
    ):
        print(f"    {name:<36} wall {w:7.2f} s = {w / t_chol:6.2f}x | CPU {c:7.2f} s")
    support = int(np.count_nonzero(u))
    print(
        f"    design: {iters} iterations, support {support}, gap_bound {res.gap_bound:.1e}, "
        f"converged {res.converged}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--repeats", type=int, default=2, help="Cholesky repeats (headline)")
    parser.add_argument(
        "--only",
        type=int,
        nargs="+",
        choices=range(1, 7),
        metavar="N",
        help="run only these sections (1-6), e.g. --only 2",
    )
    args = parser.parse_args()
    run_all = args.only is None
    quick = args.quick
    start = time.perf_counter()
    print(f"numpy {np.__version__}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")

    if run_all or 1 in args.only:
        section("1. cloaked release, 1-D, large n (target <= 2.5x one Cholesky, <= 2 n^2 doubles)")
        bcr.release(*bcr.problem(50, 20, 1))  # compile the 1-D kernel once, as in a session
        n1, m1 = (1_000, 200) if quick else (10_000, 1_000)
        bcr.run(n1, m1, 1, args.repeats, target=(2.5, 2.0))

    if run_all or 2 in args.only:
        section("2. cloaked release, 2-D, m > n (target <= 10x one Cholesky)")
        n2, m2 = (500, 400) if quick else (3_000, 5_000)
        row = bcr.run(n2, m2, 2, args.repeats, target=(10.0, np.inf))
        release_split(n2, m2, 2, row["cholesky"])

    if run_all or 3 in args.only:
        section("3. sample-path release L = 100, n = m = 5,000, 10 lazy rounds of 100")
        size = 500 if quick else 5_000
        bench_sample_path.run(
            argparse.Namespace(n=size, m=size, paths=100, rounds=10, k=100, repeats=1)
        )

    if run_all or 4 in args.only:
        section("4. ledger: 1,000 Gaussian events (target < 0.5 s)")
        bench_ledger.main()

    if run_all or 5 in args.only:
        section("5. DP Thompson round vs non-private round (target <= 1.5x)")
        bench_thompson_round.main()

    if run_all or 6 in args.only:
        section("6. scaling table (ratio to one n x n Cholesky, peak in n^2 doubles)")
        sizes_n = (300, 1_000) if quick else (1_000, 3_000, 10_000)
        sizes_m = (200, 1_000) if quick else (200, 1_000, 5_000)
        table = []
        for n in sizes_n:
            for m in sizes_m:
                for d in (1, 2):
                    table.append(bcr.run(n, m, d, 1))
        print("\n| n | m | d | one Cholesky | release | ratio | peak (n^2 doubles) | rank k |")
        print("|---|---|---|---|---|---|---|---|")
        for r in table:
            print(
                f"| {r['n']:,} | {r['m']:,} | {r['d']} | {r['cholesky']:.2f} s | "
                f"{r['release']:.2f} s | {r['ratio']:.1f}x | {r['peak_n2']:.2f} | "
                f"{int(r['rank'])} |"
            )
    section(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
