"""Re-check of the square-root counter (docs/thompson_tree.md §11), written apart from its tests.

Run from the repository root:
``PYTHONPATH=. python benchmarks/audits/thompson_sqrt/check_sqrt_counter.py``.
Results of the run of 2026-11-24 are in README.md next to this file.

1. ``R R = A`` (lower-triangular all-ones) exactly in rational arithmetic (T = 30; ``R`` is
   Toeplitz, so the first column suffices) and in float64 (T = 200); column norms of ``R``
   non-increasing, so the first column's norm is the L2 sensitivity factor.
2. The simulation plan's σ against the exact hockey-stick divergence of a Gaussian shift
   (Balle & Wang 2018, Thm. 8) at the stacked sensitivity, and against dp_accounting's PLD
   accountant; the secure plan's integer sensitivity against ``Δ/γ + √(T·dim)`` (rounding
   of every stacked coordinate).
3. Monte Carlo: the prefix estimates' noise covariance equals ``σ² R Rᵀ`` and the estimates
   are unbiased.
"""

from __future__ import annotations

import math
from fractions import Fraction

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_privacy_accountant
from scipy.stats import norm

from pm_dpgp.mechanisms.full.sqrt_counter import (
    SqrtCounter,
    plan_sqrt_counter,
    sqrt_factor_coefficients,
)


def toeplitz_lower(c: np.ndarray) -> np.ndarray:
    """``R_{st} = c_{s−t}`` for ``s ≥ t``."""
    T = len(c)
    s, t = np.indices((T, T))
    return np.where(s >= t, c[np.clip(s - t, 0, T - 1)], 0.0)


def check_identity() -> None:
    c = [Fraction(math.comb(2 * k, k), 4**k) for k in range(30)]
    exact = all(sum(c[i] * c[s - i] for i in range(s + 1)) == 1 for s in range(30))
    print(f"1a rational: (R R)[s, 0] = 1 for every s < 30: {exact}")
    cf = sqrt_factor_coefficients(200)
    same = np.array_equal(cf[:30], np.array([float(x) for x in c]))
    R = toeplitz_lower(cf)
    err = np.abs(R @ R - np.tril(np.ones((200, 200)))).max()
    norms = np.linalg.norm(R, axis=0)
    print(f"1b float64 coefficients equal the rationals rounded: {same}; max|RR − A| = {err:.2e}")
    print(f"1c column norms non-increasing: {bool(np.all(np.diff(norms) <= 0))}")


def check_calibration() -> None:
    eps, delta = 3.0, 1e-5
    for T, Delta, dim in [(7, 2.0, 5), (25, 1.3, 3), (100, 2.0, 84), (100, 0.7, 30)]:
        p = plan_sqrt_counter(eps, delta, Delta, T, dim, secure=False)
        sens = math.sqrt(float(np.sum(sqrt_factor_coefficients(T) ** 2))) * Delta
        mu = sens / p.sigma
        exact = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_accounting.GaussianDpEvent(p.sigma / sens))
        ps = plan_sqrt_counter(eps, delta, Delta, T, dim, secure=True)
        assert ps.plan is not None
        need = sens / ps.plan.gamma + math.sqrt(T * dim)
        print(
            f"2 T={T:3d} Δ={Delta}: stacked sensitivity {sens:.4f} (plan {p.sensitivity:.4f}), "
            f"exact δ(ε=3)/charged δ − 1 = {exact / delta - 1:.1e}, "
            f"PLD ε(δ) = {acc.get_epsilon(delta):.4f}; secure integer sensitivity "
            f"{ps.plan.sensitivity_int} ≥ Δ/γ + √(T·dim) = {need:.1f}: "
            f"{ps.plan.sensitivity_int >= need}"
        )


def check_noise(n: int = 40_000) -> None:
    T = 12
    p = plan_sqrt_counter(3.0, 1e-5, 1.0, T, 1, secure=False)
    rng = np.random.default_rng(7)
    E = np.empty((n, T))
    for r in range(n):
        ctr = SqrtCounter(p, rng)
        E[r] = [ctr.add(np.zeros(1))[0][0] for _ in range(T)]
    R = toeplitz_lower(sqrt_factor_coefficients(T))
    theory = p.sigma**2 * R @ R.T
    dev = np.abs(np.cov(E.T) - theory) / np.sqrt((theory**2 + np.outer(*[np.diag(theory)] * 2)) / n)
    print(f"3a noise covariance vs σ² R Rᵀ: max deviation {dev.max():.2f} MC sd (78 entries)")
    v = rng.standard_normal(T)
    est = np.empty((4000, T))
    for r in range(4000):
        ctr = SqrtCounter(p, rng)
        est[r] = [ctr.add(v[t : t + 1])[0][0] for t in range(T)]
    z = np.abs(est.mean(0) - np.cumsum(v)) / np.sqrt(np.diag(theory) / 4000)
    print(f"3b prefix estimates unbiased: max |mean − S_t| = {z.max():.2f} Monte-Carlo sd (12)")


if __name__ == "__main__":
    check_identity()
    check_calibration()
    check_noise()
