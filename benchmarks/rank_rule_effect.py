"""Benchmark: the default rank cut (``rank_tol="auto"``) against the old fixed ``1e-8``.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/rank_rule_effect.py`` from the repository root.
For each problem, the same release (same seed, simulation mode) with both cuts, in ONE
process: the retained rank ``k``, the mean DP noise variance over the test inputs, the RMSE of
the draws against the noise-free function (synthetic problems) or the posterior mean, the
release time as a ratio to one ``n × n`` Cholesky timed in the same process (CPU time, one
BLAS thread), and, where ``C`` is small enough to form, the worst-case truncation bias over
every label vector in the public box, ``‖(I − U_kU_kᵀ)C‖₂ · R``, divided by one draw's RMS noise
norm ``‖σF‖_F`` (the rule proves it ≤ 0.01; ``docs/cloaking.md`` §4).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cloaked_release import model_for, one_cholesky, problem  # noqa: E402

from pm_dpgp.datasets import load_kung_women  # noqa: E402
from pm_dpgp.mechanisms import cloaked_release  # noqa: E402
from pm_dpgp.mechanisms.label.cloaking_release import public_cloaking  # noqa: E402
from pm_dpgp.models import gp_regression  # noqa: E402


def _release(model, X_star, rank_tol, bounds, epsilon, delta, design="logdet", draws=20):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.process_time()
        rel = cloaked_release(
            model,
            X_star,
            epsilon=epsilon,
            delta=delta,
            y_bounds=bounds,
            bounds_are_public=True,
            rng=np.random.default_rng(1),
            rank_tol=rank_tol,
            n_draws=draws,
            design=design,
        )
        return rel, time.process_time() - t0


def _worst_bias_ratio(model, X_star, rel, bounds, mean) -> float:
    public_gp = model.public_cloaking()
    C = public_gp.cloaking_operator(X_star).dense()
    U = public_cloaking(public_gp, X_star, bounds, rank_tol=rel.metadata["rank_tol"]).noise.basis
    residual = np.linalg.norm(C - U @ (U.T @ C), 2)
    R = math.sqrt(public_gp.n) * max(abs(bounds[0] - mean), abs(bounds[1] - mean))
    return residual * R / float(np.linalg.norm(rel.noise_factor))


def _line(name, rel, t, t_chol, target, extra=""):
    md = rel.metadata
    rmse = float(np.sqrt(np.mean((rel.draws - target) ** 2)))
    rule = f"{md['rank_tol']:.2e}" + (" (auto)" if md["rank_rule"] == "auto" else "")
    print(
        f"  {name:<10} rank_tol {rule:<18} k {md['noise_rank']:>4}  "
        f"noise var {np.mean(rel.noise_sd**2):10.4g}  RMSE {rmse:8.4g}  "
        f"time {t:6.2f} s = {t / t_chol:5.1f}x Cholesky{extra}",
        flush=True,
    )


def kung(design: str) -> None:
    age, height = load_kung_women()
    cov = 7.72**2 * pm.gp.cov.ExpQuad(1, ls=25.0)
    model = gp_regression(age, height, cov, noise_sd=14.0, mean=110.0)
    ages = np.linspace(0.0, 110.0, 200)[:, None]
    bounds = (50.0, 170.0)
    target = model.public_gp().predict(np.clip(model.y, *bounds), ages)[0]
    t_chol = one_cholesky(age[:, None], 5)
    print(f"!Kung, 287 women, 200 ages, eps = 1, delta = 1e-3, {design} design:")
    for rank_tol in (1e-8, "auto"):
        rel, t = _release(model, ages, rank_tol, bounds, 1.0, 1e-3, design)
        ratio = _worst_bias_ratio(model, ages, rel, bounds, 110.0)
        _line(str(rank_tol), rel, t, t_chol, target, f"  worst bias / noise {ratio:.2e}")


def synthetic(n: int, m: int, d: int, epsilon: float, draws: int) -> None:
    X, y, X_star = problem(n, m, d)
    truth = np.sin(X_star).sum(axis=1)
    _release(model_for(X[:50], y[:50]), X_star[:20], "auto", (-2.0, 2.0), epsilon, 1e-5)
    t_chol = one_cholesky(X, 2)
    print(
        f"synthetic n = {n:,}, m = {X_star.shape[0]:,}, {d}-D, eps = {epsilon:g}, delta = 1e-5 "
        f"(bench_cloaked_release.problem; RMSE against the noise-free function):"
    )
    for rank_tol in (1e-8, "auto"):
        rel, t = _release(
            model_for(X, y), X_star, rank_tol, (-2.0, 2.0), epsilon, 1e-5, draws=draws
        )
        extra = ""
        if n * X_star.shape[0] <= 2_000_000:
            ratio = _worst_bias_ratio(model_for(X, y), X_star, rel, (-2.0, 2.0), 0.0)
            extra = f"  worst bias / noise {ratio:.2e}"
        _line(str(rank_tol), rel, t, t_chol, truth, extra)


def main() -> None:
    kung("logdet")
    kung("trace")
    synthetic(1_000, 1_000, 1, 1.0, 20)
    synthetic(1_000, 1_024, 2, 1.0, 20)
    synthetic(1_000, 1_024, 2, 10.0, 20)
    synthetic(3_000, 5_000, 2, 1.0, 1)
    synthetic(10_000, 1_000, 1, 1.0, 1)


if __name__ == "__main__":
    main()
