"""Issue 9 benchmark: DP selection over the 80-configuration grid of Smith et al. (2021, Table 2).

!Kung women (287 rows), 14 public interleaved folds, exponential mechanism over the clipped
cross-validated SSE of cloaked predictions (``docs/selection.md``), against one cloaked release at
the chosen hyperparameters in the same run.  Target: selection ≤ 100× one release.  Simulation
noise (``rng``) so the run is reproducible; the secure sampler costs the same order.

Run: ``python benchmarks/bench_selection.py``.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.datasets import load_kung_women
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression
from pm_dpgp.selection import product_grid, select_by_cross_validated_sse

BOUNDS = (50.0, 170.0)


def main() -> None:
    age, height = load_kung_women()
    model = gp_regression(
        age,
        height,
        lambda: pm.HalfNormal("eta", 10.0) ** 2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.1)),
        noise_sd=lambda: pm.HalfNormal("noise", 10.0),
        mean=110.0,
    )
    grid = product_grid(
        {
            "ell": [1.0, 5.0, 25.0, 125.0, 625.0],
            "noise": [float(np.sqrt(v)) for v in (0.2, 1.0, 5.0, 25.0)],
            "eta": [float(np.sqrt(v)) for v in (1.0, 5.0, 25.0, 125.0)],
        }
    )
    X_star = np.linspace(0.0, 110.0, 200)[:, None]
    rng = np.random.default_rng(0)
    # warm the compiled kernel once (both timings then exclude compilation)
    cloaked_release(
        model, X_star, epsilon=1.0, delta=0.01, y_bounds=BOUNDS, hyperparameters=grid[0], rng=rng
    )
    ledger = Ledger(epsilon=2.5, delta=0.01)
    t0 = time.perf_counter()
    choice = select_by_cross_validated_sse(
        model,
        grid,
        epsilon=1.0,
        y_bounds=BOUNDS,
        ledger=ledger,
        n_folds=14,
        release_epsilon=1.0,
        release_delta=0.01,
        rng=rng,
    )
    t_sel = time.perf_counter() - t0
    t0 = time.perf_counter()
    cloaked_release(
        model,
        X_star,
        epsilon=1.0,
        delta=0.01,
        y_bounds=BOUNDS,
        hyperparameters=choice.hyperparameters,
        ledger=ledger,
        rng=rng,
    )
    t_rel = time.perf_counter() - t0
    print(f"selection over {len(grid)} configurations × 14 folds: {t_sel:.2f} s")
    print(f"one cloaked release (200 test points):          {t_rel:.3f} s")
    print(f"ratio: {t_sel / t_rel:.0f}× (target ≤ 100×)")
    print(ledger.summary())


if __name__ == "__main__":
    main()
