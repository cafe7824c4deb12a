"""Regret of DP Thompson sampling against non-private TS and random search (1-D and 2-D).

Run ``python benchmarks/thompson_regret.py [--quick] [--seeds 10 --rounds 25 100
--epsilons 1 3 10 --out DIR]``.  For each objective, horizon T, ε and seed:

* **non-private TS**: exact GP posterior paths (model noise = the true noise sd 0.05);
* **random search**: uniform queries in the box;
* **sample-path DP-TS** (Maciazek paths, :func:`~pm_dpgp.workflow.dp_thompson_sampling`): the
  model noise sd (the ridge) is *planned* from public quantities only — the smallest value on
  a log grid for which the composition of the T per-round sample-path events fits (ε, δ) —
  so the whole run fits the budget (variants: :data:`SAMPLE_PATH_VARIANTS`, the hook for
  tighter bounds);
* **suff.-stat. DP-TS** (:func:`~pm_dpgp.workflow.dp_thompson_sampling_tree`): Nyström
  features on a public grid of spacing ≈ the lengthscale, the whole run one tree-aggregation
  Gaussian event of (ε, δ); model noise sd 0.05 (public), Honkela's defaults c = 1, ρ = 0.01;
  full privacy (one observation's (x, y) private);
* **suff.-stat. DP-TS (label privacy)**: the same loop with ``privacy_model="label"``, the
  privacy model of DP bandits (one round's observed value private; the queried inputs are
  post-processing of the transcript, so ``B`` is exact and only the ``A``-stream is released,
  leaf sensitivity ``R_φ (b − a)``; ``docs/thompson_tree.md`` §9).  A weaker guarantee in
  general; for runs of this loop the two models protect the same environments (§13.1);
* **suff.-stat. DP-TS (partition[, label privacy])**: the same two loops on the dyadic
  partition basis (``DyadicPartitionFeatures.from_lengthscale``: finest cells at most half the
  lengthscale wide, equal level weights, prior sd 1 as the kernel's; ``docs/thompson_tree.md``
  §10) instead of the Nyström features;
* **… sqrt counter …**: the same loops with the prefix sums released by the square-root
  factorisation of the counting matrix instead of the binary tree (``counter="sqrt"``,
  ``docs/thompson_tree.md`` §11; same privacy model and charge);
* **… all releases …** (stop 27, the library default ``posterior="all_releases"``): each
  round conditions exactly on every value the counter released, with ``B`` from the loop's
  public inputs; under full privacy the loop then releases the ``A``-stream alone, leaf
  sensitivity ``2 R_y R_φ`` (``docs/thompson_tree.md`` §13).  Every other tree column passes
  ``posterior="prefix"`` (the behaviour they were measured with).

``--first-seed`` shifts the seeds (``--first-seed 100 --seeds 100``: the robustness run of
``docs/thompson_tree.md`` §13.4). δ = 1e-5 everywhere. All methods use the same initial design,
kernel (fixed, public hyperparameters) and candidate scheme (128 random candidates + 2
refinement steps). For a seed ``s`` every method draws its own randomness from
``default_rng(s)``; the observation noise comes from a stream per method family
(``10_000 + s`` sample-path, ``20_000 + s`` non-private, ``30_000 + s`` random search,
``40_000 + s`` tree loop), so the methods see the same noise level, not the same noise.
Reported per cell (mean ± standard error over seeds):
simple regret after T rounds (gap of the best true value queried) and mean instantaneous regret
(cumulative regret / T). Writes ``thompson_regret.csv`` (summary),
``thompson_regret_curves.csv`` (per-round means) and ``thompson_regret.png``. Stored runs of
the current code: ``benchmarks/results/cholesky/`` (every tree column since the loop draws
through a Cholesky root, ``docs/thompson_tree.md`` §13.7); the other folders of
``benchmarks/results/`` hold the earlier, eigenvector-root realisation.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pymc as pm

from pm_dpgp.accounting import DEFAULT_ORDERS, Ledger, rdp_to_epsilon
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound, kernel_lower_bound
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import DyadicPartitionFeatures, dp_thompson_sampling, random_search
from pm_dpgp.workflow.thompson_tree import dp_thompson_sampling_tree

DELTA = 1e-5
TRUE_NOISE_SD = 0.05

#: Sample-path DP-TS variants: name -> (SamplePathBound kwargs for the planner, loop kwargs).
#: "old bounds" = the paper's mean sensitivity Δ = 2B√Φ; "coupled Δ" = the proved sharper
#: bound of docs/sample_paths.md §3.11 (issue 11, part A; the library default). More with
#: ``--sample-path-variant``.
SAMPLE_PATH_VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "sample-path DP-TS": ({"sensitivity": "paper"}, {"sensitivity": "paper"}),
    "sample-path DP-TS (coupled Δ)": ({"sensitivity": "coupled"}, {"sensitivity": "coupled"}),
}


#: Sufficient-statistics DP-TS variants: name -> (``privacy_model`` of the loop, feature basis):
#: "nystrom" = Nyström features on the public grid of spacing ≈ the lengthscale; "partition" =
#: ``DyadicPartitionFeatures.from_lengthscale`` (finest cells ≤ half the lengthscale, equal
#: level weights; docs/thompson_tree.md §10).
#: The third entry is the continual counter: "tree" (binary mechanism) or "sqrt" (square-root
#: factorisation, docs/thompson_tree.md §11).
#: The fourth is the loop's ``posterior``: "prefix" (the prefix estimate alone: §6 under full
#: privacy, §9.4 under label privacy; every column measured before stop 27) or
#: "all_releases" (every release of the counter, §13; the library default since stop 27).
TREE_VARIANTS: dict[str, tuple[str, str, str, str]] = {
    "suff.-stat. DP-TS": ("full", "nystrom", "tree", "prefix"),
    "suff.-stat. DP-TS (label privacy)": ("label", "nystrom", "tree", "prefix"),
    "suff.-stat. DP-TS (partition)": ("full", "partition", "tree", "prefix"),
    "suff.-stat. DP-TS (partition, label privacy)": ("label", "partition", "tree", "prefix"),
    "suff.-stat. DP-TS (sqrt counter)": ("full", "nystrom", "sqrt", "prefix"),
    "suff.-stat. DP-TS (sqrt counter, label privacy)": ("label", "nystrom", "sqrt", "prefix"),
    "suff.-stat. DP-TS (partition, sqrt counter)": ("full", "partition", "sqrt", "prefix"),
    "suff.-stat. DP-TS (partition, sqrt counter, label privacy)": (
        "label",
        "partition",
        "sqrt",
        "prefix",
    ),
    "suff.-stat. DP-TS (partition, sqrt counter, label, all releases)": (
        "label",
        "partition",
        "sqrt",
        "all_releases",
    ),
    "suff.-stat. DP-TS (partition, tree, label, all releases)": (
        "label",
        "partition",
        "tree",
        "all_releases",
    ),
    "suff.-stat. DP-TS (sqrt counter, label, all releases)": (
        "label",
        "nystrom",
        "sqrt",
        "all_releases",
    ),
    "suff.-stat. DP-TS (partition, sqrt counter, all releases)": (
        "full",
        "partition",
        "sqrt",
        "all_releases",
    ),
}


def f1(X: np.ndarray) -> np.ndarray:
    """1-D: one bump, max 0.8 at x = 0.7, range [-0.8, 0.8]."""
    return 1.6 * np.exp(-0.5 * ((X[:, 0] - 0.7) / 0.2) ** 2) - 0.8


def f2(X: np.ndarray) -> np.ndarray:
    """2-D: a bump at (0.65, 0.35) and a lower one at (0.2, 0.8); max 0.8."""
    a = np.exp(-0.5 * np.sum(((X - [0.65, 0.35]) / 0.2) ** 2, axis=1))
    b = 0.5 * np.exp(-0.5 * np.sum(((X - [0.2, 0.8]) / 0.15) ** 2, axis=1))
    return 1.6 * np.maximum(a, b) - 0.8


def _branin_raw(U: np.ndarray) -> np.ndarray:
    """Branin (Dixon & Szegő 1978) on x₁ ∈ [−5, 10], x₂ ∈ [0, 15] from the unit square."""
    x1, x2 = 15.0 * U[:, 0] - 5.0, 15.0 * U[:, 1]
    b, c, t = 5.1 / (4 * np.pi**2), 5.0 / np.pi, 1.0 / (8 * np.pi)
    return (x2 - b * x1**2 + c * x1 - 6.0) ** 2 + 10.0 * (1 - t) * np.cos(x1) + 10.0


BRANIN_MIN = 0.397887357729739  # global minimum (three minimisers)
BRANIN_MAX = float(_branin_raw(np.array([[0.0, 0.0]]))[0])  # maximum on the box (corner)


def branin(X: np.ndarray) -> np.ndarray:
    """2-D Branin rescaled to the unit box, negated and log-compressed to [-0.8, 0.8], max 0.8."""
    g = np.log1p(_branin_raw(X) - BRANIN_MIN) / math.log1p(BRANIN_MAX - BRANIN_MIN)
    return 0.8 - 1.6 * g


@dataclass(frozen=True)
class Problem:
    f: Callable[[np.ndarray], np.ndarray]
    lengthscale: float
    X0: np.ndarray
    fmax: float = 0.8

    @property
    def d(self) -> int:
        return self.X0.shape[1]

    def cov(self) -> Any:
        return pm.gp.cov.ExpQuad(self.d, ls=self.lengthscale)

    def grid_size(self) -> int:
        """Inducing grid per dimension, spacing ≈ the lengthscale (public rule, fixed a priori)."""
        return int(round(1.0 / self.lengthscale)) + 1


X0_2D = np.array([[0.2, 0.2], [0.8, 0.8], [0.5, 0.5]])
PROBLEMS: dict[str, Problem] = {
    "1-D bump": Problem(f1, 0.2, np.array([[0.1], [0.5], [0.9]])),
    "2-D bumps": Problem(f2, 0.25, X0_2D),
    "2-D Branin": Problem(branin, 0.25, X0_2D),
}


def _noisy(f: Callable, seed: int) -> Callable:
    rng = np.random.default_rng(seed)
    return lambda X: f(X) + TRUE_NOISE_SD * rng.standard_normal(len(X))


def kappa_of(problem: Problem) -> float:
    """The public κ the sample-path loop would compute (kernel lower bound on the box)."""
    base = gp_regression(
        problem.X0, np.zeros(len(problem.X0)), problem.cov(), noise_sd=1.0, mean_is_public=True
    ).public_gp()
    box = np.column_stack([np.zeros(problem.d), np.ones(problem.d)])
    return kernel_lower_bound(base.kernel, box)


def plan_sample_path_noise_sd(
    n0: int, rounds: int, epsilon: float, kappa: float, bound_kwargs: dict[str, Any]
) -> float:
    """Smallest model noise sd on a log grid (ratio 1.05) whose T-round composition fits ε.

    Public only: the per-round events of n = n0, …, n0 + T − 1 points are composed in RDP
    (Mironov 2017, Prop. 1) and converted as the ledger's Rényi privacy filter does (δ split
    over the order grid), so the ledger accepts all T rounds.
    """

    def eps_of(noise_sd: float) -> float:
        total = np.zeros(len(DEFAULT_ORDERS))
        for n in range(n0, n0 + rounds):
            bound = SamplePathBound(
                n=n, kernel_scale=1.0, r2=noise_sd**2, M_Y=1.0, kappa=kappa, **bound_kwargs
            )
            total += bound.event(1).rdp(DEFAULT_ORDERS)
        return rdp_to_epsilon(DEFAULT_ORDERS, total, DELTA / len(DEFAULT_ORDERS))

    lo, hi = 0.05, 0.05
    while eps_of(hi) > epsilon:
        lo, hi = hi, hi * 2.0
    while hi / lo > 1.05:  # bisection in log space: eps_of decreases in noise_sd
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps_of(mid) > epsilon else (lo, mid)
    return hi


def _regrets(problem: Problem, X: np.ndarray, n0: int) -> tuple[np.ndarray, np.ndarray]:
    true = problem.f(X[n0:])
    return problem.fmax - np.maximum.accumulate(true), problem.fmax - true


def run_cell(
    problem: Problem,
    rounds: int,
    epsilon: float,
    seed: int,
    sp_noise: dict[str, float],
    kappa: float,
    methods: set[str],
) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """One seed of the DP methods at one ε: ``{method: (simple curve, inst curve, seconds)}``."""
    box = (np.zeros(problem.d), np.ones(problem.d))
    common = dict(
        domain=box,
        X_init=problem.X0,
        n_rounds=rounds,
        candidates=128,
        refine_steps=2,
        progressbar=False,
    )
    out = {}
    for name, (_, loop_kwargs) in SAMPLE_PATH_VARIANTS.items():
        if name not in methods:
            continue
        t0 = time.perf_counter()
        res = dp_thompson_sampling(
            _noisy(problem.f, 10_000 + seed),
            problem.cov(),
            noise_sd=sp_noise[name],
            y_bounds=(-1.0, 1.0),
            kappa=kappa,
            ledger=Ledger(epsilon=epsilon, delta=DELTA),
            rng=np.random.default_rng(seed),
            **common,
            **loop_kwargs,
        )
        if res.n_rounds != rounds:
            raise RuntimeError(f"{name}: planned noise did not fit the budget ({res.n_rounds}).")
        out[name] = (*_regrets(problem, res.owner.X, len(problem.X0)), time.perf_counter() - t0)
    for name, (privacy_model, basis, counter, posterior) in TREE_VARIANTS.items():
        if name not in methods:
            continue
        if basis == "partition":
            feats = DyadicPartitionFeatures.from_lengthscale(*box, problem.lengthscale)
            model = {"cov_func": None, "features": feats}
        else:
            model = {"cov_func": problem.cov(), "inducing": problem.grid_size()}
        t0 = time.perf_counter()
        res = dp_thompson_sampling_tree(
            _noisy(problem.f, 40_000 + seed),
            **model,
            noise_sd=TRUE_NOISE_SD,
            y_bounds=(-1.0, 1.0),
            ledger=Ledger(epsilon=epsilon, delta=DELTA),
            privacy_model=privacy_model,
            counter=counter,
            posterior=posterior,
            rng=np.random.default_rng(seed),
            **common,
        )
        out[name] = (*_regrets(problem, res.owner.X, len(problem.X0)), time.perf_counter() - t0)
    return out


def run_baselines(
    problem: Problem, rounds: int, seed: int, non_private: bool = True
) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """Non-private TS (unless ``non_private=False``) and random search for one seed (no ε)."""
    box = (np.zeros(problem.d), np.ones(problem.d))
    out = {}
    n0 = len(problem.X0)
    if non_private:
        out["non-private TS"] = _non_private_ts(problem, rounds, seed, box)
    t1 = time.perf_counter()
    rs = random_search(
        _noisy(problem.f, 30_000 + seed),
        domain=box,
        X_init=problem.X0,
        n_rounds=rounds,
        rng=np.random.default_rng(seed),
    )
    out["random search"] = (*_regrets(problem, rs.X, n0), time.perf_counter() - t1)
    return out


def _non_private_ts(
    problem: Problem, rounds: int, seed: int, box: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, float]:
    t0 = time.perf_counter()
    npts = dp_thompson_sampling(
        _noisy(problem.f, 20_000 + seed),
        problem.cov(),
        domain=box,
        X_init=problem.X0,
        n_rounds=rounds,
        noise_sd=TRUE_NOISE_SD,
        private=False,
        candidates=128,
        refine_steps=2,
        progressbar=False,
        rng=np.random.default_rng(seed),
    )
    return (*_regrets(problem, npts.owner.X, len(problem.X0)), time.perf_counter() - t0)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")
    return float(x.mean()), se


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds are first-seed, ..., first-seed + seeds - 1 (default 0: the stored runs)",
    )
    parser.add_argument("--rounds", type=int, nargs="+", default=[25, 100])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0, 10.0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    parser.add_argument(
        "--sample-path-variant",
        action="append",
        default=[],
        metavar="NAME=KEY:VALUE",
        help="extra sample-path variant: keyword given to SamplePathBound and the loop",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="DP methods to run (default: all); baselines always",
    )
    parser.add_argument(
        "--no-non-private",
        action="store_true",
        help="skip the non-private TS baseline (the slowest column; random search always runs)",
    )
    parser.add_argument("--quick", action="store_true", help="2 seeds, 10 rounds, eps 3 only")
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.rounds, args.epsilons = 2, [10], [3.0]
        args.problems = ["1-D bump", "2-D bumps"]
    for spec in args.sample_path_variant:
        name, kv = spec.split("=", 1)
        key, value = kv.split(":", 1)
        SAMPLE_PATH_VARIANTS[name] = ({key: value}, {key: value})
    methods = set(
        args.methods if args.methods is not None else [*SAMPLE_PATH_VARIANTS, *TREE_VARIANTS]
    )
    try:  # small matrices: one BLAS thread avoids contention
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass
    warnings.simplefilter("ignore")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"delta = {DELTA}, seeds {seeds.start}..{seeds.stop - 1}; regret = mean ± s.e.")
    header = (
        f"{'problem':11s} {'T':>4s} {'eps':>5s} {'method':34s} {'noise sd':>8s} "
        f"{'simple regret':>16s} {'mean inst. regret':>18s} {'time s':>7s}"
    )
    print(header)
    for pname in args.problems:
        problem = PROBLEMS[pname]
        kappa = kappa_of(problem)
        for T in args.rounds:
            base = [run_baselines(problem, T, s, not args.no_non_private) for s in seeds]
            for eps in args.epsilons:
                sp_noise = {
                    name: plan_sample_path_noise_sd(len(problem.X0), T, eps, kappa, bkw)
                    for name, (bkw, _) in SAMPLE_PATH_VARIANTS.items()
                    if name in methods
                }
                cells = [
                    {**base[i], **run_cell(problem, T, eps, s, sp_noise, kappa, methods)}
                    for i, s in enumerate(seeds)
                ]
                for method in cells[0]:
                    simple = np.stack([c[method][0] for c in cells])
                    inst = np.stack([c[method][1] for c in cells])
                    ms, ses = _mean_se(simple[:, -1])
                    mi, sei = _mean_se(inst.mean(axis=1))
                    secs = sum(c[method][2] for c in cells)
                    noise = sp_noise.get(method, TRUE_NOISE_SD)
                    row = dict(
                        problem=pname,
                        rounds=T,
                        epsilon=eps,
                        method=method,
                        model_noise_sd=noise,
                        simple_regret=ms,
                        simple_regret_se=ses,
                        mean_inst_regret=mi,
                        mean_inst_regret_se=sei,
                        seconds=secs,
                        seeds=args.seeds,
                    )
                    rows.append(row)
                    cum = np.cumsum(inst, axis=1) / np.arange(1, T + 1)
                    for t in range(T):
                        curves.append(
                            dict(
                                problem=pname,
                                rounds=T,
                                epsilon=eps,
                                method=method,
                                round=t + 1,
                                simple_regret=round(float(simple[:, t].mean()), 5),
                                mean_inst_regret=round(float(cum[:, t].mean()), 5),
                                mean_inst_regret_se=round(_mean_se(cum[:, t])[1], 5),
                            )
                        )
                    print(
                        f"{pname:11s} {T:4d} {eps:5g} {method:34s} {noise:8.3g} "
                        f"{ms:8.3f} ± {ses:5.3f} {mi:9.3f} ± {sei:6.3f} {secs:7.1f}",
                        flush=True,
                    )
                _write_csv(out, rows, curves)  # after every cell: partial runs keep results
    _plot(curves, out / "thompson_regret.png")
    print(f"written: {out / 'thompson_regret.csv'}, {out / 'thompson_regret_curves.csv'}")
    return rows


def _write_csv(out: Path, rows: list[dict[str, Any]], curves: list[dict[str, Any]]) -> None:
    for fname, data in (("thompson_regret.csv", rows), ("thompson_regret_curves.csv", curves)):
        with open(out / fname, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(data[0]))
            writer.writeheader()
            writer.writerows(data)


def _plot(curves: list[dict[str, Any]], path: Path) -> None:
    """Running mean instantaneous regret at the middle ε and the longest T, one panel a problem."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps_all = sorted({c["epsilon"] for c in curves})
    eps = eps_all[len(eps_all) // 2]
    T = max(c["rounds"] for c in curves)
    problems = list(dict.fromkeys(c["problem"] for c in curves))
    fig, axes = plt.subplots(1, len(problems), figsize=(4.2 * len(problems), 3.6), squeeze=False)
    for ax, pname in zip(axes[0], problems, strict=True):
        sel = [
            c for c in curves if c["problem"] == pname and c["epsilon"] == eps and c["rounds"] == T
        ]
        for method in dict.fromkeys(c["method"] for c in sel):
            cs = [c for c in sel if c["method"] == method]
            t = np.array([c["round"] for c in cs])
            m = np.array([c["mean_inst_regret"] for c in cs])
            se = np.array([c["mean_inst_regret_se"] for c in cs])
            ax.plot(t, m, label=method)
            ax.fill_between(t, m - se, m + se, alpha=0.2)
        ax.set(title=pname, xlabel="round", ylabel="cumulative regret / round")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Thompson sampling, (ε, δ) = ({eps:g}, {DELTA:g}), mean ± s.e.")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
