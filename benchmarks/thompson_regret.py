"""Regret of DP Thompson sampling against non-private TS and random search (1-D and 2-D).

Run ``python benchmarks/thompson_regret.py [--seeds 5 --rounds 25 --budget 100 --out DIR]``.
For each synthetic objective and seed: DP TS with sample-path releases (Maciazek) under a
(budget, 1e-5) ledger, non-private TS on the exact posterior for the same number of rounds,
and uniform random search.  Prints mean simple regret (gap of the best true value queried
so far) and mean instantaneous regret, and writes ``thompson_regret.png`` (regret curves,
mean ± 1 s.e. over seeds).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.workflow import dp_thompson_sampling, random_search


def f1(X: np.ndarray) -> np.ndarray:
    """1-D: one bump, max 0.8 at x = 0.7, range [-0.8, 0.8]."""
    return 1.6 * np.exp(-0.5 * ((X[:, 0] - 0.7) / 0.2) ** 2) - 0.8


def f2(X: np.ndarray) -> np.ndarray:
    """2-D: a bump at (0.65, 0.35) and a lower one at (0.2, 0.8); max 0.8."""
    a = np.exp(-0.5 * np.sum(((X - [0.65, 0.35]) / 0.2) ** 2, axis=1))
    b = 0.5 * np.exp(-0.5 * np.sum(((X - [0.2, 0.8]) / 0.15) ** 2, axis=1))
    return 1.6 * np.maximum(a, b) - 0.8


PROBLEMS: dict[str, tuple[Callable, object, np.ndarray, float]] = {
    "1-D": (f1, pm.gp.cov.ExpQuad(1, ls=0.2), np.array([[0.1], [0.5], [0.9]]), 0.8),
    "2-D": (f2, pm.gp.cov.ExpQuad(2, ls=0.25), np.array([[0.2, 0.2], [0.8, 0.8], [0.5, 0.5]]), 0.8),
}


def _noisy(f: Callable, rng: np.random.Generator) -> Callable:
    return lambda X: f(X) + 0.05 * rng.standard_normal(len(X))


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--budget", type=float, default=100.0)
    parser.add_argument("--noise-sd", type=float, default=2.0, help="public model noise sd (DP)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    try:  # small matrices: one BLAS thread avoids contention
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PROBLEMS), figsize=(11, 4))
    table: dict[str, dict[str, float]] = {}
    print(f"budget (eps, delta) = ({args.budget}, 1e-05), model noise sd (DP) = {args.noise_sd}")
    print(
        f"{'problem':8s} {'method':16s} {'rounds':>6s} {'simple regret':>14s} "
        f"{'mean inst. regret':>18s} {'eps spent':>10s} {'time s':>7s}"
    )
    for ax, (name, (f, cov, X0, fmax)) in zip(axes, PROBLEMS.items(), strict=True):
        d = X0.shape[1]
        box = (np.zeros(d), np.ones(d))
        curves: dict[str, list[np.ndarray]] = {"DP TS": [], "non-private TS": [], "random": []}
        inst: dict[str, list[float]] = {k: [] for k in curves}
        spent, times = [], {k: 0.0 for k in curves}
        for seed in range(args.seeds):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                dp = dp_thompson_sampling(
                    _noisy(f, np.random.default_rng(10_000 + seed)),
                    cov,
                    domain=box,
                    X_init=X0,
                    n_rounds=args.rounds,
                    noise_sd=args.noise_sd,
                    y_bounds=(-1.0, 1.0),
                    ledger=Ledger(epsilon=args.budget, delta=1e-5),
                    candidates=128,
                    refine_steps=2,
                    progressbar=False,
                    rng=np.random.default_rng(seed),
                )
                t1 = time.perf_counter()
                R = dp.n_rounds
                npts = dp_thompson_sampling(
                    _noisy(f, np.random.default_rng(20_000 + seed)),
                    cov,
                    domain=box,
                    X_init=X0,
                    n_rounds=R,
                    noise_sd=0.05,
                    private=False,
                    candidates=128,
                    refine_steps=2,
                    progressbar=False,
                    rng=np.random.default_rng(seed),
                )
                t2 = time.perf_counter()
                rs = random_search(
                    _noisy(f, np.random.default_rng(30_000 + seed)),
                    domain=box,
                    X_init=X0,
                    n_rounds=R,
                    rng=np.random.default_rng(seed),
                )
                t3 = time.perf_counter()
            spent.append(dp.ledger.epsilon())
            for key, rec, dt in (
                ("DP TS", dp.owner, t1 - t0),
                ("non-private TS", npts.owner, t2 - t1),
                ("random", rs, t3 - t2),
            ):
                true = f(rec.X[rec.n_init :])
                curves[key].append(fmax - np.maximum.accumulate(true))
                inst[key].append(float(np.mean(fmax - true)))
                times[key] += dt
        table[name] = {}
        for key, cs in curves.items():
            L = min(len(c) for c in cs)
            C = np.stack([c[:L] for c in cs])
            mean = C.mean(0)
            se = C.std(0, ddof=1) / np.sqrt(len(C)) if len(C) > 1 else np.zeros(L)
            ax.plot(np.arange(1, L + 1), mean, label=key)
            ax.fill_between(np.arange(1, L + 1), mean - se, mean + se, alpha=0.2)
            table[name][key] = float(C[:, -1].mean())
            eps = f"{np.mean(spent):10.2f}" if key == "DP TS" else f"{'-':>10s}"
            print(
                f"{name:8s} {key:16s} {L:6d} {C[:, -1].mean():14.3f} "
                f"{np.mean(inst[key]):18.3f} {eps} {times[key]:7.1f}"
            )
        ax.set(title=f"{name} objective", xlabel="round", ylabel="simple regret", yscale="log")
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Thompson sampling under (ε, δ) = ({args.budget:g}, 1e-5), "
        f"{args.seeds} seeds (mean ± s.e.)"
    )
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "thompson_regret.png", dpi=110)
    print(f"figure: {out / 'thompson_regret.png'}")
    return table


if __name__ == "__main__":
    main()
