"""Benchmark: the cloaking range finder's sketches (``C``; ``K_sf`` Gaussian; ``K_sf`` CountSketch).

Run ``OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_range_sketch.py`` from the
repository root (``--quick`` for small problems).  For each problem (``bench_cloaked_release``:
training inputs uniform on a public box, test inputs a public grid, EQ kernel) it builds the
exact GP's ``CloakingOperator`` once and, in ONE process, alternates

* the range finder whose sketch applies ``C = K_sf A⁻¹`` (``C G = K_sf (A⁻¹ G)``: the solver
  before issue 13's last pass), and
* the range finder whose sketch applies ``K_sf`` to a Gaussian test matrix
  (``range(K_sf) = range(C)``; no triangular solves per sketch column), ``docs/cloaking.md``
  §4, and
* the range finder whose sketch applies ``K_sf`` to a CountSketch (one ``±1`` per row and
  block; the current default, ``m n`` additions per block instead of ``2 m n ℓ`` flops),

both through ``cloaking._column_space`` at ``rank_tol = 1e-8`` (``cloaked_release``'s
default).  It prints the CPU time of each (best of ``--repeats``) and how far the second's
rank, singular values, ``U_kᵀC``, trailing basis vectors and mean map ``U_kU_kᵀC`` are from
the first's, and the third's from the second's.  The timings depend on the load of the
machine; compare within a line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cloaked_release as bcr  # noqa: E402

from pm_dpgp.gp.operators import CloakingOperator  # noqa: E402
from pm_dpgp.mechanisms.label import cloaking  # noqa: E402


class SketchThroughC(CloakingOperator):
    """``CloakingOperator`` whose range finder sketches ``C`` (``R = C``, ``F = I``)."""

    sparse_sketch = False

    def range_matmat(self, G: np.ndarray) -> np.ndarray:
        return self.matmat(G)

    def range_factor(self, G: np.ndarray) -> np.ndarray:
        return G


class GaussianSketchOfKsf(CloakingOperator):
    """``CloakingOperator`` whose range finder sketches ``K_sf`` with Gaussian blocks."""

    sparse_sketch = False


def compare(new, old) -> str:
    (b1, s1, p1), (b0, s0, p0) = new, old
    if s1.size != s0.size:
        return f"rank {s1.size} against {s0.size} (DIFFERENT)"
    return (
        f"rank {s1.size} | singular values {np.max(np.abs(s1 - s0) / s0):.1e} rel | "
        f"U_k^T C {np.max(np.abs(p1 - p0)) / s0[0]:.1e} sigma_1 | "
        f"basis {np.max(np.abs(b1 - b0)):.1e} | "
        f"mean map {np.linalg.norm(b1 @ p1 - b0 @ p0) / np.linalg.norm(b0 @ p0):.1e}"
    )


def run(n: int, m: int, d: int, repeats: int) -> None:
    X, y, X_star = bcr.problem(n, m, d)
    op = bcr.model_for(X, y).public_cloaking().cloaking_operator(X_star)
    operators = {
        "C": SketchThroughC(op.K_sf, op.L),
        "K_sf": GaussianSketchOfKsf(op.K_sf, op.L),
        "count": op,
    }
    times: dict[str, list[float]] = {name: [] for name in operators}
    results = {}
    for _ in range(repeats):
        for name, which in operators.items():
            t0 = time.process_time()
            results[name] = cloaking._column_space(which, 1e-8)
            times[name].append(time.process_time() - t0)
    t_c, t_k, t_s = (min(times[name]) for name in operators)
    print(
        f"n={n:>6,} m={X_star.shape[0]:>5,} d={d}: sketch of C {t_c:6.2f} s CPU | "
        f"K_sf Gaussian {t_k:6.2f} s ({t_k / t_c:4.2f}x) | "
        f"K_sf CountSketch {t_s:6.2f} s ({t_s / t_c:4.2f}x, {t_s / t_k:4.2f}x Gaussian)\n"
        f"    Gaussian K_sf vs C:         {compare(results['K_sf'], results['C'])}\n"
        f"    CountSketch vs Gaussian:    {compare(results['count'], results['K_sf'])}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="small problems only")
    args = parser.parse_args()
    bcr.release(*bcr.problem(50, 20, 2))  # compile the kernels once, as in a session
    bcr.release(*bcr.problem(50, 20, 1))
    sizes = [(1_000, 200, 1), (1_000, 1_000, 2)]
    if not args.quick:
        sizes += [(3_000, 1_000, 1), (3_000, 5_000, 1), (3_000, 1_000, 2), (3_000, 5_000, 2)]
        sizes += [(10_000, 1_000, 1), (10_000, 1_000, 2)]
    for n, m, d in sizes:
        run(n, m, d, args.repeats)


if __name__ == "__main__":
    main()
