"""Fidelity benchmark: Table 1 and Figure 4 of Smith et al. (2021, JMLR), !Kung women.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/smith2021_table1.py`` from the repository root
(``--quick`` for a smoke run).  Setting (paper §6.1–6.2): the 287 women of the Howell (1967)
!Kung census; height (cm, private) from age (1-d) or age and weight (2-d, public);
14-fold cross-validation; EQ kernel, lengthscale 15 (years; 15 kg for weight — §6.2 does not
state the 2-d lengthscales, we keep 15 in both dimensions), kernel variance 10 cm², noise
variance 25 cm²; (ε, δ) = (1, 0.01), Δ = 100 cm.

Our choices where the paper leaves freedom (all public, fixed before looking at heights):

* clipping range ``y_bounds = (58, 158)`` cm (width Δ = 100 cm; the paper's code clips to the
  data's mid-range ± Δ/2 ≈ 108.3 ± 50, computed from the heights — we fix it as a public
  constant) and prior mean 108 cm, its midpoint (the paper's code centres at the sample mean
  of the clipped heights, a private statistic);
* sparse: 5 inducing inputs by SciPy k-means (k-means++, seed = fold index) on the public
  training inputs, FITC (``pm.gp.MarginalApprox(approx="FITC")``, jitter 1e-6);
* non-stationary: Gibbs kernel (eq. 8) with the public KDE lengthscale of §3.1/§6.1
  (:class:`pm_dpgp.models.KDELengthscale`): inputs scaled by 15, bandwidth 1/3, n_target 60,
  maximum 2.5 (37.5 years), neighbourhood minimum over ±2/3 (10 years);
* each fold's DP RMSE is the root mean square over ``--draws`` independent DP draws at the
  held-out inputs (the paper's single draw per fold makes its ± partly Monte-Carlo noise);
  the ± is the standard deviation over the 14 folds, as in the paper.

Both calibrations are run: ``classic`` (the paper's ``c(δ) = sqrt(2 ln(2/δ))``) and
``analytic`` (Balle & Wang 2018).  Figure 4 (1-d RMSE against the number of inducing inputs,
DP and non-DP) follows.  Simulation-mode noise (seeded NumPy) so the run is reproducible.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.datasets import load_howell1
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import (
    KDELengthscale,
    fitc_gp_regression,
    gp_regression,
    nonstationary_gp_regression,
)

EPSILON, DELTA = 1.0, 0.01
Y_BOUNDS = (58.0, 158.0)
PRIOR_MEAN = 108.0
LENGTHSCALE, KERNEL_VAR, NOISE_VAR = 15.0, 10.0, 25.0
N_FOLDS = 14
METHODS = ("standard", "sparse", "nonstationary")
#: Smith et al. (2021), Table 1: (mean, sd) RMSE in cm.
PAPER = {
    ("1d", "dp"): {"standard": (13.3, 3.2), "sparse": (9.9, 1.7), "nonstationary": (12.8, 2.0)},
    ("2d", "dp"): {"standard": (17.2, 3.1), "sparse": (10.2, 1.6), "nonstationary": (16.3, 2.5)},
    ("1d", "nodp"): {"standard": (7.1, 1.8), "sparse": (7.7, 1.9), "nonstationary": (8.6, 2.2)},
    ("2d", "nodp"): {"standard": (5.2, 1.5), "sparse": (7.7, 2.0), "nonstationary": (5.9, 1.7)},
}


def kung_women(dim: int) -> tuple[np.ndarray, np.ndarray]:
    data = load_howell1()
    women = data["male"] == 0
    cols = ["age"] if dim == 1 else ["age", "weight"]
    return np.stack([data[c][women] for c in cols], axis=1), data["height"][women]


def folds(n: int, seed: int = 0) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(n), N_FOLDS)


def build(method: str, X: np.ndarray, y: np.ndarray, fold: int, n_inducing: int, mean: float):
    d = X.shape[1]
    cov = KERNEL_VAR * pm.gp.cov.ExpQuad(d, ls=LENGTHSCALE)
    sd = NOISE_VAR**0.5
    if method == "standard":
        return gp_regression(X, y, cov, noise_sd=sd, mean=mean)
    if method == "sparse":
        return fitc_gp_regression(
            X, y, cov, noise_sd=sd, n_inducing=n_inducing, seed=fold, mean=mean
        )
    lf = KDELengthscale(
        X,
        n_target=60.0,
        max_lengthscale=2.5,
        bandwidth=1.0 / 3.0,
        neighbourhood=2.0 / 3.0,
        scales=np.full(d, LENGTHSCALE),
    )
    return nonstationary_gp_regression(
        X, y, lf, kernel_scale=KERNEL_VAR**0.5, noise_sd=sd, mean=mean
    )


def non_dp_mean(model, X_star: np.ndarray) -> np.ndarray:
    view = model.public_cloaking()
    mean, _ = (
        view.predict(model.y, X_star)
        if hasattr(view, "Z")
        else view.predict(model.y, X_star, full_cov=False)
    )
    return mean


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


#: "public": prior mean 108 cm, fixed a priori; "paper": the paper's code centres the heights
#: at the sample mean of the clipped training heights (a private statistic, used without
#: noise): reproduced only to explain the differences, NOT a private release.
CENTRE = {"mode": "public"}


def evaluate_fold(method, X, y, test, fold, draws, n_inducing=5):
    """Non-DP RMSE and DP RMSE (per calibration) on one held-out fold."""
    train = np.setdiff1d(np.arange(len(y)), test)
    mean = PRIOR_MEAN
    if CENTRE["mode"] == "paper":
        mean = float(np.mean(np.clip(y[train], *Y_BOUNDS)))
    model = build(method, X[train], y[train], fold, n_inducing, mean)
    X_star = X[test]
    out = {"nodp": rmse(non_dp_mean(model, X_star), y[test])}
    for k, calibration in enumerate(("classic", "analytic")):
        release = cloaked_release(
            model,
            X_star,
            epsilon=EPSILON,
            delta=DELTA,
            y_bounds=Y_BOUNDS,
            calibration=calibration,
            n_draws=draws,
            bounds_are_public=True,
            rng=np.random.default_rng(1000 * fold + 10 * k + 1),
        )
        err = release.draws - y[test][None, :]
        out[calibration] = float(np.sqrt(np.mean(err**2)))
        # the paper's estimator: the RMSE of ONE draw (its expectation over the draw here);
        # smaller than the pooled RMSE by Jensen's inequality, E sqrt(MSE) ≤ sqrt(E MSE)
        out[calibration + "_1"] = float(np.mean(np.sqrt(np.mean(err**2, axis=1))))
    return out


def cell(values: list[float]) -> str:
    return f"{np.mean(values):5.1f} ± {np.std(values, ddof=1):4.1f}"


def table1(draws: int, n_folds: int) -> dict:
    results = {}
    for dim in (1, 2):
        X, y = kung_women(dim)
        split = folds(len(y))[:n_folds]
        for method in METHODS:
            t0 = time.perf_counter()
            per = [evaluate_fold(method, X, y, test, f, draws) for f, test in enumerate(split)]
            results[(f"{dim}d", method)] = {
                key: [p[key] for p in per]
                for key in ("nodp", "classic", "analytic", "classic_1", "analytic_1")
            }
            print(f"  [{dim}d {method}: {time.perf_counter() - t0:.1f} s]", flush=True)
    return results


def print_table1(results: dict) -> None:
    head = f"{'':16s}" + "".join(f"{m:>34s}" for m in METHODS)
    sub = f"{'':16s}" + "".join(f"{'ours':>17s}{'paper':>17s}" for _ in METHODS)
    print(head)
    print(sub)
    for dim in ("1d", "2d"):
        for key, label in (
            ("classic", "DP classic"),
            ("analytic", "DP analytic"),
            ("classic_1", "DP classic 1dr"),
            ("analytic_1", "DP analyt. 1dr"),
            ("nodp", "no DP"),
        ):
            paper = PAPER[(dim, "nodp" if key == "nodp" else "dp")]
            row = f"{dim + ' ' + label:16s}"
            for m in METHODS:
                mu, sd = paper[m]
                row += f"{cell(results[(dim, m)][key]):>17s}{f'{mu:5.1f} ± {sd:4.1f}':>17s}"
            print(row)


def figure4(draws: int, n_folds: int, sizes: list[int]) -> None:
    X, y = kung_women(1)
    split = folds(len(y))[:n_folds]
    print(f"{'M':>3s} {'no DP':>15s} {'DP classic':>15s} {'DP analytic':>15s}")
    for M in sizes:
        per = [
            evaluate_fold("sparse", X, y, t, f, draws, n_inducing=M) for f, t in enumerate(split)
        ]
        print(
            f"{M:3d} "
            + " ".join(
                f"{cell([p[k] for p in per]):>15s}" for k in ("nodp", "classic", "analytic")
            ),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=100, help="DP draws per fold")
    parser.add_argument("--quick", action="store_true", help="3 folds, 10 draws")
    parser.add_argument("--no-figure4", action="store_true")
    parser.add_argument(
        "--centre",
        choices=("public", "paper"),
        default="public",
        help="prior mean: public 108 cm, or the paper's (non-private) clipped sample mean",
    )
    args = parser.parse_args()
    CENTRE["mode"] = args.centre
    draws, n_folds = (10, 3) if args.quick else (args.draws, N_FOLDS)
    warnings.simplefilter("ignore")  # δ = 0.01 > 1/n: the paper's setting, warned by design
    t0 = time.perf_counter()
    print(
        f"Table 1 (RMSE, cm; {n_folds}-fold CV, {draws} DP draws per fold, "
        f"prior mean: {args.centre})"
    )
    results = table1(draws, n_folds)
    print_table1(results)
    print("(1dr: mean RMSE of a single DP draw, the paper's estimator; other DP rows pool the")
    print(" draws of a fold: sqrt of the mean squared error)")
    if not args.no_figure4:
        print("\nFigure 4 (1-d, RMSE against the number of inducing inputs M)")
        sizes = [1, 2, 3, 5, 8] if args.quick else [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20]
        figure4(draws, n_folds, sizes)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
