"""Calibration of ``release_posterior`` against the flat prior of ``dp_ppc`` (docs/workflow.md).

Data sets are drawn from the model's own GP prior, released (cloaking or prior noise, simulation
mode), and the posterior of ``f`` given the release is compared with the truth:

1. coverage and mean width of the pointwise 90 % interval of ``f`` at the test inputs, for
   ``release_posterior`` and for the flat prior on the released mean plus the public GP
   posterior sd (``N(d̄, FFᵀ/S)`` widened by ``posterior_var``);
2. the hold-out elpd of ``dp_ppc(posterior=...)`` against ``dp_ppc`` with the flat prior and
   ``extra_sd`` = the posterior sd, on a !Kung-like model (kernel sd 7.7, lengthscale 25, noise
   sd 14, prior mean 110) with data drawn from that model.

Run ``OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/release_posterior_calibration.py``
(about two minutes; ``--reps`` sets the number of data sets of part 1).  Output stored in
``benchmarks/results/release_posterior_calibration.txt``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.mechanisms import cloaked_release, prior_noise_release
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import dp_ppc, holdout_elpd, release_posterior

Z90 = 1.6448536269514722  # standard normal 0.95 quantile


def coverage(mechanism: str, epsilon: float, reps: int, seed: int = 5) -> str:
    """Part 1: 30 training inputs on [0, 10], EQ kernel (ls 1.5), noise sd 0.3, 12 test inputs,
    bounds ±5 (clipping has probability ≈ 10⁻⁶ per output), δ = 10⁻⁵, one draw."""
    rng = np.random.default_rng(seed)
    n, X = 30, np.sort(rng.uniform(0, 10, 30))
    X_star = np.linspace(0, 10, 12)
    cov = pm.gp.cov.ExpQuad(1, ls=1.5)
    pub = gp_regression(X, np.zeros(n), cov, noise_sd=0.3, mean=0.0).public_gp()
    X_all = np.concatenate([X, X_star])[:, None]
    root = np.linalg.cholesky(pub.kernel(X_all) + 1e-10 * np.eye(len(X_all)))
    post_sd = np.sqrt(pub.posterior_var(X_star))
    release_fn = cloaked_release if mechanism == "cloaking" else prior_noise_release
    hits, width, flat_hits, flat_width = [], [], [], []
    for rep in range(reps):
        f = root @ rng.standard_normal(len(X_all))
        model = gp_regression(X, f[:n] + 0.3 * rng.standard_normal(n), cov, noise_sd=0.3)
        rel = release_fn(
            model, X_star, epsilon=epsilon, delta=1e-5, y_bounds=(-5.0, 5.0),
            rng=np.random.default_rng(rep),
        )  # fmt: skip
        lo, hi = release_posterior(rel, model).interval(0.9)
        truth = f[n:]
        hits.append(np.mean((truth >= lo) & (truth <= hi)))
        width.append(np.mean(hi - lo))
        sd = np.hypot(rel.noise_sd / np.sqrt(rel.n_draws), post_sd)
        flat_hits.append(np.mean(np.abs(truth - rel.draws.mean(axis=0)) <= Z90 * sd))
        flat_width.append(np.mean(2 * Z90 * sd))
    return (
        f"{mechanism:11s} eps={epsilon:<4g} | posterior given the release: coverage "
        f"{np.mean(hits):.3f} width {np.mean(width):.2f} | flat prior + posterior sd: coverage "
        f"{np.mean(flat_hits):.3f} width {np.mean(flat_width):.2f}  ({reps} data sets)"
    )


def holdout(reps: int = 100, seed: int = 5) -> str:
    """Part 2: 60 ages on [0, 90], 20 hold-out ages, ε = 1, two draws, bounds [0, 220]."""
    rng = np.random.default_rng(seed)
    n, X, X_h = 60, np.sort(rng.uniform(0, 90, 60)), np.sort(rng.uniform(0, 90, 20))
    cov = 7.72**2 * pm.gp.cov.ExpQuad(1, ls=25.0)
    pub = gp_regression(X, np.zeros(n), cov, noise_sd=14.0, mean=110.0).public_gp()
    X_all = np.concatenate([X, X_h])[:, None]
    root = np.linalg.cholesky(pub.kernel(X_all) + 1e-8 * np.eye(len(X_all)))
    post_sd = np.sqrt(pub.posterior_var(X_h))
    hits, e_post, e_flat = [], [], []
    for rep in range(reps):
        f = 110.0 + root @ rng.standard_normal(len(X_all))
        y, y_h = f[:n] + 14 * rng.standard_normal(n), f[n:] + 14 * rng.standard_normal(20)
        model = gp_regression(X, y, cov, noise_sd=14.0, mean=110.0)
        rel = cloaked_release(
            model, X_h, epsilon=1.0, delta=1e-3, y_bounds=(0.0, 220.0), n_draws=2,
            rng=np.random.default_rng(rep),
        )  # fmt: skip
        post = release_posterior(rel, model, X_h)
        lo, hi = post.interval(0.9)
        hits.append(np.mean((f[n:] >= lo) & (f[n:] <= hi)))
        kw = dict(noise_sd=14.0, training=model, rng=rng)
        e_post.append(holdout_elpd(dp_ppc(rel, X_h, y_h, posterior=post, **kw))[0])
        e_flat.append(holdout_elpd(dp_ppc(rel, X_h, y_h, extra_sd=post_sd, **kw))[0])
    diff = np.asarray(e_post) - np.asarray(e_flat)
    return (
        f"!Kung-like model, data from the model: coverage of f {np.mean(hits):.3f}; hold-out "
        f"elpd per 20 points: posterior {np.mean(e_post):.1f}, flat prior {np.mean(e_flat):.1f}, "
        f"difference {diff.mean():.1f} ± {diff.std(ddof=1) / np.sqrt(reps):.1f} (s.e.)  "
        f"({reps} data sets)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300, help="data sets per row of part 1")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    for mechanism, epsilon in (("cloaking", 10.0), ("cloaking", 1.0), ("prior_noise", 10.0)):
        print(coverage(mechanism, epsilon, args.reps), flush=True)
    print(holdout(), flush=True)


if __name__ == "__main__":
    main()
