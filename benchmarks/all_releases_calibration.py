"""Calibration of the Thompson loop's label posteriors (docs/thompson_tree.md §13.2).

Draws ``v ~ N(0, I)``, ``M = 5`` features per record, 30 records (3 in the initial leaf, then
one per leaf), observed values ``ξ = Φv + N(0, 0.3²)`` (no clipping), streams them through the
square-root or tree counter (simulation noise, (ε, 10⁻⁵), Δ = 2) and reports, over 1,000
streams, how often the 90 % credible ellipsoid of each posterior holds the true ``v``, and the
mean trace of its covariance:

* ``all releases``: ``all_releases_posterior`` (every released value, §13.1);
* ``prefix``: ``public_inputs_posterior`` of the prefix estimate (§9.4).

Run: ``python benchmarks/all_releases_calibration.py`` (about 20 s).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from pm_dpgp.mechanisms.full.sqrt_counter import SqrtCounter, plan_sqrt_counter
from pm_dpgp.mechanisms.full.tree_aggregation import TreeAggregator, plan_tree
from pm_dpgp.workflow.thompson_tree import all_releases_posterior, public_inputs_posterior

COUNTERS = {"sqrt": (plan_sqrt_counter, SqrtCounter), "tree": (plan_tree, TreeAggregator)}
M, N0, LEAVES, NOISE_VAR, STREAMS = 5, 3, 28, 0.3**2, 1000


def main() -> None:
    q90 = stats.chi2.ppf(0.9, M)
    leaf = np.r_[np.zeros(N0, dtype=np.intp), np.arange(1, LEAVES)]
    print("counter  eps  sigma  | all releases: coverage, mean tr S | prefix: coverage, mean tr S")
    for kind, (planner, cls) in COUNTERS.items():
        for eps in (1.0, 10.0):
            rng = np.random.default_rng(7)
            plan = planner(eps, 1e-5, 2.0, LEAVES, M, secure=False)
            hits = {"all": 0, "prefix": 0}
            traces: dict[str, list[float]] = {"all": [], "prefix": []}
            for _ in range(STREAMS):
                v = rng.normal(size=M)
                Phi = rng.normal(size=(len(leaf), M)) / 2
                xi = Phi @ v + np.sqrt(NOISE_VAR) * rng.normal(size=len(leaf))
                counter = cls(plan, rng)
                for j in range(LEAVES):
                    est, k = counter.add((Phi[leaf == j] * xi[leaf == j, None]).sum(axis=0))
                W, Y = counter.release_weights()
                posts = {
                    "all": all_releases_posterior(W, Y, Phi, leaf, plan.sigma, NOISE_VAR, 0.0),
                    "prefix": public_inputs_posterior(
                        Phi.T @ Phi, est, NOISE_VAR, plan.sigma * np.sqrt(k)
                    ),
                }
                for name, (m, S) in posts.items():
                    r = v - m
                    hits[name] += float(r @ np.linalg.solve(S, r)) <= q90
                    traces[name].append(float(np.trace(S)))
            print(
                f"{kind:7s} {eps:4g} {plan.sigma:6.2f} | "
                f"{hits['all'] / STREAMS:.3f}, {np.mean(traces['all']):.3f} | "
                f"{hits['prefix'] / STREAMS:.3f}, {np.mean(traces['prefix']):.3f}"
            )


if __name__ == "__main__":
    main()
