"""Audit: black-box privacy loss of classification_release on adversarial neighbours.

Simulation mode, the SAME Generator seed for D and D' => draws differ by exactly the mean
difference.  Exact Gaussian-mechanism privacy: Mahalanobis distance Δ of the mean difference
under the released noise covariance Σ = noise_factor noise_factorᵀ (pseudo-inverse; the
difference must lie in range(Σ), else the loss is infinite).  δ_actual(ε) =
Φ(−ε/Δ + Δ/2) − e^ε Φ(−ε/Δ − Δ/2) (Balle & Wang 2018, Thm. 8).
"""

import itertools
import math
import warnings

import numpy as np
import pymc as pm
from scipy.stats import norm

from pm_dpgp.mechanisms.label.classification import classification_release
from pm_dpgp.models.classification import gp_classification

warnings.simplefilter("ignore")


def delta_of(eps, D):
    if D == 0:
        return 0.0
    return norm.cdf(-eps / D + D / 2) - math.exp(eps) * norm.cdf(-eps / D - D / 2)


def mahalanobis(diff, F):
    # diff in range(F)? least squares in the column space of F
    coef, *_ = np.linalg.lstsq(F, diff, rcond=None)
    resid = np.linalg.norm(F @ coef - diff)
    return float(np.linalg.norm(coef)), resid


_MODELS = {}


def run(X, t, Xs, eps, delta, seed=7, **kw):
    key = (kw.get("ls", 1.0), kw.get("scale", 1.0))
    if key not in _MODELS:  # build the PyMC model once per kernel; swap the private labels
        cov = pm.gp.cov.ExpQuad(1, ls=key[0]) * key[1] ** 2
        _MODELS[key] = gp_classification(X, np.zeros(len(X)), cov)
    kw.pop("ls", None), kw.pop("scale", None)
    g = _MODELS[key]
    g.y = np.asarray(t, dtype=float)  # the builder refuses non-finite labels (docs/errors.md)
    return classification_release(
        g, Xs, epsilon=eps, delta=delta, rng=np.random.default_rng(seed), **kw
    )


rng = np.random.default_rng(0)
worst = []
n = 25
X = np.sort(rng.uniform(0, 10, n))[:, None]
t = (rng.uniform(size=n) < 0.5).astype(float)
cases = {
    "X*=X": dict(Xs=X),
    "X* grid": dict(Xs=np.linspace(-2, 12, 30)[:, None]),
    "f0=+8 (W0~0)": dict(Xs=X, f0=8.0),
    "f0=-30 (W0 tiny)": dict(Xs=X, f0=-30.0),
    "f0 random": dict(Xs=X, f0=rng.normal(0, 3, n)),
    "SoR M=5": dict(Xs=X, inducing_points=5),
    "SoR given Z dup": dict(Xs=X, inducing_points=np.array([[1.0], [1.0], [5.0]])),
    "short ls": dict(Xs=X, ls=0.01),
    "long ls big scale": dict(Xs=X, ls=100.0, scale=30.0),
}
alt_values = [1.0, 0.0, 2.0, -5.0, 0.5, np.nan, np.inf, -np.inf, 1e300]
eps, delta = 1.0, 1e-5
for name, kw in cases.items():
    kw = dict(kw)
    Xs = kw.pop("Xs")
    base = run(X, t, Xs, eps, delta, **dict(kw))
    F = base.noise_factor
    worst_D, worst_res = 0.0, 0.0
    for j in [0, n // 2, n - 1]:
        for a, b in itertools.combinations(alt_values, 2):
            t1, t2 = t.copy(), t.copy()
            t1[j], t2[j] = a, b
            try:
                r1 = run(X, t1, Xs, eps, delta, **dict(kw))
                r2 = run(X, t2, Xs, eps, delta, **dict(kw))
            except Exception as e:  # noqa: BLE001
                print(f"  {name}: labels {a},{b} -> {type(e).__name__}: {e}")
                continue
            assert np.allclose(r1.noise_factor, F) and np.allclose(r2.noise_factor, F)
            D, res = mahalanobis(r1.draws[0] - r2.draws[0], F)
            worst_D, worst_res = max(worst_D, D), max(worst_res, res)
    charged = base.metadata["epsilon_per_draw"], base.metadata["delta_per_draw"]
    act = delta_of(eps, worst_D)
    worst.append((name, worst_D, act))
    print(
        f"{name:20s} worst Mahalanobis Δ={worst_D:.6f} resid_out_of_range={worst_res:.2e} "
        f"δ_actual(ε=1)={act:.3e} charged δ={charged[1]:.1e} ok={act <= charged[1] * (1 + 1e-9)}"
    )
