"""How often does a 10-seed run of the target cell meet issue 11's target?

Issue 11 judges DP Thompson sampling at ε = 3, T = 100 (δ = 1e-5) on ten seeds: cumulative
regret below random search's by more than two standard errors on every objective, and simple
regret no worse.  Ten seeds give one realisation of a noisy comparison.  This script

1. runs one DP column of ``benchmarks/thompson_regret.py`` and random search in that cell on
   many seeds, keeping every seed's simple regret and mean instantaneous regret
   (``--collect``, one JSON file per seed range; the calls are those of the benchmark);
2. draws many sets of ten seeds from the pooled per-seed results (independently for the DP
   column and for random search: the benchmark does not pair them) and reports how often each
   part of the target holds (``--analyse``).

Usage::

    python benchmarks/target_cell_resampling.py --collect 0 100 --out DIR
    python benchmarks/target_cell_resampling.py --collect 100 200 --out DIR
    python benchmarks/target_cell_resampling.py --analyse DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks.thompson_regret as bench  # noqa: E402

DEFAULT_METHOD = "suff.-stat. DP-TS (partition, sqrt counter, all releases)"


def collect(first: int, stop: int, method: str, out: Path) -> None:
    """Per-seed (DP simple, DP mean inst., random simple, random mean inst.) regrets."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass
    warnings.simplefilter("ignore")
    result: dict[str, list[list[float]]] = {}
    for pname, problem in bench.PROBLEMS.items():
        kappa = bench.kappa_of(problem)
        per_seed = []
        for seed in range(first, stop):
            dp = bench.run_cell(problem, 100, 3.0, seed, {}, kappa, {method})[method]
            rs = bench.run_baselines(problem, 100, seed, False)["random search"]
            per_seed.append(
                [float(dp[0][-1]), float(dp[1].mean()), float(rs[0][-1]), float(rs[1].mean())]
            )
        result[pname] = per_seed
        print(pname, np.round(np.mean(per_seed, axis=0), 4), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"method": method, "seeds": [first, stop], "columns": COLUMNS, "regrets": result}
    (out / f"per_seed_{first}_{stop}.json").write_text(json.dumps(payload))


COLUMNS = ["dp_simple", "dp_mean_inst", "random_simple", "random_mean_inst"]


def _mean_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the last axis (ddof = 1, as the benchmark)."""
    return x.mean(axis=-1), x.std(axis=-1, ddof=1) / np.sqrt(x.shape[-1])


def analyse(folder: Path, draws: int = 20_000, k: int = 10, seed: int = 0) -> None:
    """Fraction of ``k``-seed samples meeting each part of the target, per objective and jointly."""
    pooled: dict[str, np.ndarray] = {}
    method = None
    for path in sorted(folder.glob("per_seed_*.json")):
        payload = json.loads(path.read_text())
        method = payload["method"]
        for pname, rows in payload["regrets"].items():
            arr = np.asarray(rows)
            pooled[pname] = np.vstack([pooled[pname], arr]) if pname in pooled else arr
    rng = np.random.default_rng(seed)
    print(f"method: {method}; {draws} draws of {k} seeds (without replacement), DP and random")
    print("search drawn independently; 'cum' = z > 2, 'simple' = DP mean <= random mean")
    cum_all = np.ones(draws, dtype=bool)
    simple_all = np.ones(draws, dtype=bool)
    for pname, arr in pooled.items():
        n = len(arr)
        idx_dp = np.argsort(rng.random((draws, n)), axis=1)[:, :k]
        idx_rs = np.argsort(rng.random((draws, n)), axis=1)[:, :k]
        m_dp, se_dp = _mean_se(arr[idx_dp, 1])
        m_rs, se_rs = _mean_se(arr[idx_rs, 3])
        z = (m_rs - m_dp) / np.hypot(se_dp, se_rs)
        cum = z > 2.0
        simple = arr[idx_dp, 0].mean(axis=1) <= arr[idx_rs, 2].mean(axis=1)
        cum_all &= cum
        simple_all &= simple
        full = _mean_se(arr.T)
        print(
            f"{pname:11s} n = {n}: DP simple {full[0][0]:.4f} ± {full[1][0]:.4f}, random "
            f"{full[0][2]:.4f} ± {full[1][2]:.4f}; DP cum {full[0][1]:.3f} ± {full[1][1]:.3f}, "
            f"random {full[0][3]:.3f} ± {full[1][3]:.3f} | P(cum) {cum.mean():.3f}, "
            f"P(simple) {simple.mean():.3f}, P(both) {(cum & simple).mean():.3f}"
        )
    print(
        f"all three objectives: P(cum) {cum_all.mean():.3f}, P(simple) {simple_all.mean():.3f}, "
        f"P(target) {(cum_all & simple_all).mean():.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collect", nargs=2, type=int, metavar=("FIRST", "STOP"))
    parser.add_argument("--method", default=DEFAULT_METHOD)
    parser.add_argument("--out", default=".")
    parser.add_argument("--analyse", metavar="DIR")
    args = parser.parse_args(argv)
    if args.collect:
        collect(args.collect[0], args.collect[1], args.method, Path(args.out))
    if args.analyse:
        analyse(Path(args.analyse))


if __name__ == "__main__":
    main()
