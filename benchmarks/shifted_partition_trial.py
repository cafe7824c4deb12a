"""Experiment (not a library feature): the default tree loop on two modified partition bases.

``docs/thompson_tree.md`` §13.7.  A posterior sample of the partition basis is constant on a
finest cell, so the query inside the chosen cell is uniform.  To test whether that cell width
limits simple regret, this script replaces, **in this process only**, the features of
``DyadicPartitionFeatures`` by ``P`` copies of every level's grid, copy ``p`` shifted by
``p/P`` of a cell along the diagonal (its cells are ``g + 1`` per dimension for ``p > 0``,
``g = 2ʲ``), each with weight ``w_j/√P``.  Every ``x`` lies in exactly one cell of every copy,
so ``‖φ(x)‖² = Σ_p Σ_j w_j²/P = R_φ²`` and the loop's sensitivity is unchanged; a sample is
constant on cells ``P`` times narrower.  ``--shifts 1`` is the unpatched default.

``--root`` instead adds a level 0, one cell covering the whole box (an unknown constant level of
``f`` shared by all cells, the root of the Pólya-tree-like prior), with the ``J + 1`` levels at
equal weight ``R_φ/√(J + 1)``: unexplored cells are then predicted at the learned overall
level rather than at the prior mean.  ``‖φ(x)‖ = R_φ`` again.

    python benchmarks/shifted_partition_trial.py --shifts 1 --first-seed 10 --seeds 50
    python benchmarks/shifted_partition_trial.py --shifts 2 --first-seed 10 --seeds 50
    python benchmarks/shifted_partition_trial.py --root --first-seed 10 --seeds 50
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks.thompson_regret as bench  # noqa: E402
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures  # noqa: E402

METHOD = "suff.-stat. DP-TS (partition, sqrt counter, all releases)"


def patch_shifted(P: int) -> None:
    """Give ``DyadicPartitionFeatures`` the features of ``P`` diagonally shifted grids."""

    def cells_per_dim(j: int, p: int) -> int:
        return 2 ** (j + 1) + (1 if p > 0 else 0)

    def n_features(self: DyadicPartitionFeatures) -> int:
        return sum(cells_per_dim(j, p) ** self.d for p in range(P) for j in range(self.levels))

    def features(self: DyadicPartitionFeatures, X: ArrayLike) -> NDArray[np.float64]:
        X = np.asarray(X, dtype=np.float64)
        unit = (X - self.lower) / (self.upper - self.lower)
        rows = np.arange(len(X))
        blocks = []
        for p in range(P):
            for j in range(self.levels):
                nc = cells_per_dim(j, p)
                idx = np.clip(np.floor(unit * 2 ** (j + 1) + p / P), 0, nc - 1).astype(np.intp)
                block = np.zeros((len(X), nc**self.d))
                block[rows, np.ravel_multi_index(tuple(idx.T), (nc,) * self.d)] = self.weights[
                    j
                ] / np.sqrt(P)
                blocks.append(block)
        return np.hstack(blocks)

    DyadicPartitionFeatures.M = property(n_features)  # type: ignore[assignment,method-assign]
    DyadicPartitionFeatures.__call__ = features  # type: ignore[method-assign]


def patch_root() -> None:
    """Prepend the level-0 feature (constant on the box); all ``J + 1`` levels equally weighted."""
    features_of = DyadicPartitionFeatures.__call__
    n_levels = DyadicPartitionFeatures.M.fget  # type: ignore[attr-defined]

    def n_features(self: DyadicPartitionFeatures) -> int:
        return int(n_levels(self)) + 1

    def features(self: DyadicPartitionFeatures, X: ArrayLike) -> NDArray[np.float64]:
        Phi = features_of(self, X)[:, :-1]  # sized by the patched M: drop its spare column
        J = self.levels
        root = np.full((len(Phi), 1), self.R / np.sqrt(J + 1))
        return np.hstack([root, Phi * np.sqrt(J / (J + 1))])

    DyadicPartitionFeatures.M = property(n_features)  # type: ignore[assignment,method-assign]
    DyadicPartitionFeatures.__call__ = features  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shifts", type=int, default=2)
    parser.add_argument("--root", action="store_true", help="add a level-0 cell instead")
    parser.add_argument("--first-seed", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args(argv)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass
    warnings.simplefilter("ignore")
    if args.root:
        patch_root()
    elif args.shifts > 1:
        patch_shifted(args.shifts)
    feats = DyadicPartitionFeatures.from_lengthscale([0.0, 0.0], [1.0, 1.0], 0.25)
    X = np.random.default_rng(0).uniform(size=(1000, 2))
    norms = np.linalg.norm(feats(X), axis=1)
    label = "root level" if args.root else f"shifts {args.shifts}"
    print(
        f"{label}: 2-D features M = {feats.M}, max |‖φ‖ − R| = "
        f"{np.max(np.abs(norms - feats.R)):.1e}; seeds {args.first_seed}.."
        f"{args.first_seed + args.seeds - 1}, eps 3, T 100"
    )
    for pname, problem in bench.PROBLEMS.items():
        kappa = bench.kappa_of(problem)
        res = np.array(
            [
                [float(c[0][-1]), float(c[1].mean())]
                for s in range(args.first_seed, args.first_seed + args.seeds)
                for c in [bench.run_cell(problem, 100, 3.0, s, {}, kappa, {METHOD})[METHOD]]
            ]
        )
        m = res.mean(axis=0)
        se = res.std(axis=0, ddof=1) / np.sqrt(len(res))
        print(
            f"{pname:11s} simple regret {m[0]:.4f} ± {se[0]:.4f}   "
            f"cum. regret / T {m[1]:.3f} ± {se[1]:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
