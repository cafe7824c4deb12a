"""Calibration of the noise-aware DP sparse GP: Honkela (2024) §6.2 / Fig. 2, full version.

Run ``python benchmarks/noise_aware_calibration.py`` from the repository root
(``--repeats`` default 40 as in the paper; ``--seed``).

Setting (paper §6.2): in every repeat a function ``f`` is drawn from a GP with EQ kernel
(``ℓ = 1``, unit variance) at ``N = 1024`` inputs uniform on ``[-4, 4]``; observations
``y = f + σ ε``; half the points train, half test.  The DP sparse GP uses ``|Z| = 15`` inducing
inputs regularly spaced on ``[-3.5, 3.5]``, the true kernel and σ, ``δ = 1e-4``, ``c = 1``,
``ρ = 0.01``, ``R_k`` from eq. (7) and the public response bound ``R_y = 3`` (three prior
standard deviations; the few larger values are clipped).  For each test point the predictive
``N(μ̂, Σ̂_ii + σ²)`` (eq. 17) gives the central interval of probability ``α``; the table
reports the fraction of test observations inside it (mean over repeats ± 2 standard errors)
for

* ``aware``: the noise-aware model (``S = KΣ̃K + S₂``, ``S₂,₂`` linearised — the default),
* ``eq14``: the same with ``S₂,₂`` of eq. (14) as printed,
* ``naive``: ``S = KΣ̃K`` (no S₂), the paper's comparison,

all three from the same DP noise draw in each repeat.  Scenarios: σ ∈ {0.03, 0.1, 0.3},
ε ∈ {0.3, 1, 3, 10}, α ∈ {0.5, 0.8, 0.9, 0.95} (48 cases, as in the paper's runtime note).
``closer`` says whether the noise-aware coverage is closer to α than the naive one.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm
from scipy.stats import norm

from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

SIGMAS = (0.03, 0.1, 0.3)
EPSILONS = (0.3, 1.0, 3.0, 10.0)
ALPHAS = (0.5, 0.8, 0.9, 0.95)
VARIANTS = {
    "aware": {"variant": "noise_aware", "s22_form": "linearised"},
    "eq14": {"variant": "noise_aware", "s22_form": "eq14"},
    "naive": {"variant": "naive"},
}


def coverage(sigma: float, eps: float, repeats: int, seed: int) -> dict[str, np.ndarray]:
    """(repeats, len(ALPHAS)) coverage per variant."""
    Z = grid_inducing_points(-3.5, 3.5, 15)
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z, noise_sd=sigma
    ).public_sparse_gp()
    rng = np.random.default_rng(seed)
    q = norm.ppf(0.5 + np.asarray(ALPHAS) / 2.0)
    out: dict[str, list[np.ndarray]] = {v: [] for v in VARIANTS}
    for _ in range(repeats):
        x = rng.uniform(-4.0, 4.0, 1024)
        K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + 1e-8 * np.eye(1024)
        y = np.linalg.cholesky(K) @ rng.standard_normal(1024) + sigma * rng.standard_normal(1024)
        train, test = np.split(rng.permutation(1024), 2)
        noise_seed = int(rng.integers(2**62))
        for name, kw in VARIANTS.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rel = noise_aware_release(
                    public,
                    (x[train], y[train]),
                    epsilon=eps,
                    delta=1e-4,
                    y_bounds=(-3.0, 3.0),
                    rng=np.random.default_rng(noise_seed),
                    bounds_are_public=True,
                    **kw,
                )
            mu, var = rel.predict(x[test], pred_noise=True)
            z = np.abs(y[test] - mu) / np.sqrt(var)
            out[name].append(np.mean(z[:, None] <= q[None, :], axis=0))
    return {k: np.array(v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    t0 = time.perf_counter()
    header = (
        f"{'sigma':>6} {'eps':>5} {'alpha':>5} | {'aware':>13} {'eq14':>13} {'naive':>13} | closer"
    )
    print(f"Coverage of central alpha-intervals, {args.repeats} repeats (mean +- 2 s.e.)")
    print(header)
    print("-" * len(header))
    n_closer = n_total = 0
    for i, sigma in enumerate(SIGMAS):
        for j, eps in enumerate(EPSILONS):
            cov = coverage(sigma, eps, args.repeats, args.seed + 100 * i + j)
            for k, alpha in enumerate(ALPHAS):
                cells = []
                for name in VARIANTS:
                    c = cov[name][:, k]
                    se = 2.0 * c.std(ddof=1) / np.sqrt(len(c)) if len(c) > 1 else 0.0
                    cells.append(f"{c.mean():.3f}+-{se:.3f}")
                closer = abs(cov["aware"][:, k].mean() - alpha) < abs(
                    cov["naive"][:, k].mean() - alpha
                )
                n_closer += closer
                n_total += 1
                print(
                    f"{sigma:>6} {eps:>5} {alpha:>5} | {cells[0]:>13} {cells[1]:>13} "
                    f"{cells[2]:>13} | {'yes' if closer else 'no'}"
                )
    print("-" * len(header))
    print(
        f"noise-aware closer to nominal than naive in {n_closer}/{n_total} cases; "
        f"{time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
