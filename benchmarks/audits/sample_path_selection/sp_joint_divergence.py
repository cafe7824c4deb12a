"""Audit (sample-path selection, Q2, case (a) of Lemma SP-Q): the path is evaluated at the public
probes X_star AND at the private validation inputs X2; the lemma needs the one-path bound to
cover the joint law of (f(X_star), f(X2)) for neighbouring training sets D1, D1'.

Exact Rényi divergence of the two joint Gaussian laws (written here from the closed form for
multivariate normals, not the package's audit code), maximised by random search over
replace-one neighbours (x, y) -> (x', y') in the domain with |y| <= M_Y and over validation
inputs X2 in the domain, compared with SamplePathBound(n1, σ, r², M_Y, κ, η).rdp(α).
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound


def k_eq(A, B, ell):
    d = A[:, None, 0] - B[None, :, 0]
    return np.exp(-0.5 * d * d / ell**2)


def posterior(X, y, T, ell, r2, sigma2, eta):
    K = k_eq(X, X, ell) + r2 * np.eye(len(X))
    KT = k_eq(T, X, ell)
    mean = KT @ np.linalg.solve(K, y)
    cov = sigma2 * (k_eq(T, T, ell) - KT @ np.linalg.solve(K, KT.T)) + eta**2 * k_eq(T, T, ell)
    return mean, cov


def renyi_gauss(m1, S1, m2, S2, a):
    Sa = a * S2 + (1 - a) * S1
    w = np.linalg.eigvalsh(Sa)
    if w.min() <= 0:
        return math.inf
    d = m1 - m2
    quad = a / 2 * d @ np.linalg.solve(Sa, d)
    ld = lambda S: np.linalg.slogdet(S)[1]  # noqa: E731
    return quad - (ld(Sa) - (1 - a) * ld(S1) - a * ld(S2)) / (2 * (a - 1))


def search(n1=8, ell=3.0, sigma=5.0, noise_sd=8.0, M_Y=2.0, eta=0.0, trials=3000, seed=0):
    r2 = noise_sd**2 / sigma**2
    kappa = math.exp(-(10.0**2) / (2 * ell**2))
    bound = SamplePathBound(n=n1, kernel_scale=sigma, r2=r2, M_Y=M_Y, kappa=kappa, eta=eta)
    alphas = 1 + (bound.alpha_max - 1) * np.array([0.1, 0.3, 0.5, 0.8, 0.95])
    rng = np.random.default_rng(seed)
    X_star = np.linspace(0, 10, 6)[:, None]
    worst = np.zeros_like(alphas)
    for _ in range(trials):
        C = rng.uniform(0, 10, (n1 - 1, 1))
        yC = rng.choice([-M_Y, M_Y], n1 - 1) * rng.uniform(0.5, 1, n1 - 1)
        x, xp = rng.uniform(0, 10, (2, 1, 1))
        yv, yp = rng.choice([-M_Y, M_Y], 2)
        X2 = np.vstack([rng.uniform(0, 10, (rng.integers(1, 6), 1)), x, xp])  # near the record too
        T = np.vstack([X_star, X2])
        m1, S1 = posterior(np.vstack([C, x]), np.append(yC, yv), T, ell, r2, sigma**2, eta)
        m2, S2 = posterior(np.vstack([C, xp]), np.append(yC, yp), T, ell, r2, sigma**2, eta)
        # nugget 1e-10 σ² as the release adds (post-processing, keeps Σ_α numerically PD)
        S1 = S1 + 1e-10 * sigma**2 * np.eye(len(T))
        S2 = S2 + 1e-10 * sigma**2 * np.eye(len(T))
        for j, a in enumerate(alphas):
            worst[j] = max(worst[j], renyi_gauss(m1, S1, m2, S2, a), renyi_gauss(m2, S2, m1, S1, a))
    b = np.asarray(bound.rdp(alphas))
    print(
        f"n1={n1} ℓ={ell} σ={sigma} noise sd={noise_sd} (r²={r2:.3g}) η={eta} "
        f"α_max={bound.alpha_max:.4g}"
    )
    for a, w, bb in zip(alphas, worst, b, strict=True):
        print(
            f"  α={a:7.4g}: max exact D_α over {trials} pairs/test sets = {w:.5g}; "
            f"bound {bb:.5g}; ratio {w / bb:.3f}"
        )
    assert np.all(worst <= b), "joint divergence exceeds the one-path bound"


if __name__ == "__main__":
    search()
    search(noise_sd=6.0, ell=1.0, eta=1.0, seed=1)
