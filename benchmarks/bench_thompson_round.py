"""Benchmark: cost of a DP Thompson-sampling round against a non-private round.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_thompson_round.py [--rounds 100]``.  In
ONE process, for 64 and 512 candidate points per round, it runs
:func:`pm_dpgp.workflow.thompson.dp_thompson_sampling` for 30 rounds (or ``--rounds``)
privately (one sample-path release per round, charged to a ledger) and non-privately
(``private=False``: an exact posterior draw at the candidates), after a full-length warm-up
run of each, three interleaved times, and prints the time per round and the ratio private /
non-private (issue 13's target: at most 1.5×), in wall-clock and in process CPU time (with one
BLAS thread they agree on an idle machine; on a shared, overloaded one the CPU-time ratio is
the fair comparison).

The memo caches of the sample-path event curves are cleared before each private run (a
repeated run would otherwise find the previous run's curves there, which flattered the
per-round figure before stop 25).

Two measures are printed.  *Run average*: the whole call divided by the rounds, which
includes the one-time model build (``gp_regression``, ≈ 0.1 s, the same in both runs) and so
flatters the ratio at 30 rounds.  *Per round*: the median CPU time between consecutive calls
of the objective (one round each, the objective itself excluded), which is the cost of a
round and what the target is read against.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.accounting.events import _conversion_terms
from pm_dpgp.mechanisms.full.sample_path import sample_path_event
from pm_dpgp.mechanisms.full.sample_path_bounds import _coupled_delta, _default_curve
from pm_dpgp.workflow.thompson import dp_thompson_sampling

COV = pm.gp.cov.Matern52(1, ls=0.2)
X0 = np.linspace(0.1, 0.9, 3)[:, None]


def objective(seed: int):
    """A smooth public test function on [0, 1] with small observation noise."""
    rng = np.random.default_rng(seed)
    return lambda X: 0.8 * np.sin(6 * X[:, 0]) + 0.05 * rng.standard_normal(len(X))


def seconds_per_round(
    private: bool, n_rounds: int, candidates: int, stamps: list[float] | None = None
) -> tuple[float, float]:
    """(wall-clock, CPU) seconds per round, averaged over the whole call; with ``stamps``, the
    CPU time at each call of the objective is appended to it (the initial design, then one
    per round)."""
    observe = objective(1)

    def timed_objective(X: np.ndarray) -> np.ndarray:
        if stamps is not None:
            stamps.append(time.process_time())
        return observe(X)

    if private:
        # Each round's event depends on n, and the memo caches of the event curves hold 32
        # bounds: a 30-round run repeated with the same settings would find every curve of
        # the previous run there.  Clear them, so each run pays for its curves as a first
        # run in a fresh process does.
        for memo in (_default_curve, _coupled_delta, _conversion_terms, sample_path_event):
            memo.cache_clear()
        kw = dict(ledger=Ledger(epsilon=1e6, delta=1e-5), y_bounds=(-1.0, 1.0), noise_sd=2.0)
    else:
        kw = dict(private=False, noise_sd=0.05)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling(
            timed_objective,
            COV,
            domain=(0.0, 1.0),
            X_init=X0,
            n_rounds=n_rounds,
            candidates=candidates,
            progressbar=False,
            rng=np.random.default_rng(0),
            **kw,
        )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall / res.n_rounds, cpu / res.n_rounds


def main(rounds: int = 30) -> None:
    for candidates in (64, 512):
        seconds_per_round(True, 30, candidates)  # warm-up (kernel compilation, caches)
        seconds_per_round(False, 30, candidates)
        ratios = []
        per_round: dict[bool, list[float]] = {True: [], False: []}
        for rep in range(3):  # interleaved repetitions: the machine's load drifts
            stamps: dict[bool, list[float]] = {True: [], False: []}
            private = seconds_per_round(True, rounds, candidates, stamps[True])
            public = seconds_per_round(False, rounds, candidates, stamps[False])
            for key in (True, False):
                per_round[key].extend(np.diff(stamps[key]))
            ratios.append((private[0] / public[0], private[1] / public[1]))
            print(
                f"{candidates:4d} candidates, run {rep + 1}: DP round {1e3 * private[0]:6.1f} ms, "
                f"non-private {1e3 * public[0]:6.1f} ms, ratio {ratios[-1][0]:5.2f}x | CPU time: "
                f"DP {1e3 * private[1]:6.1f} ms, non-private {1e3 * public[1]:6.1f} ms, ratio "
                f"{ratios[-1][1]:5.2f}x",
                flush=True,
            )
        wall, cpu = (float(np.median([r[i] for r in ratios])) for i in (0, 1))
        print(
            f"{candidates:4d} candidates: run average (incl. the model build), median ratio "
            f"DP / non-private {wall:5.2f}x wall, {cpu:5.2f}x CPU"
        )
        dp, plain = float(np.median(per_round[True])), float(np.median(per_round[False]))
        print(
            f"{candidates:4d} candidates: per round (median CPU of {len(per_round[True])} rounds, "
            f"setup excluded): DP {1e3 * dp:6.2f} ms, non-private {1e3 * plain:6.2f} ms, "
            f"ratio {dp / plain:5.2f}x (target <= 1.5x)",
            flush=True,
        )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds per run (30)")
    main(parser.parse_args().rounds)
