"""Accuracy of DP GP classification on the packaged HMEQ subset, against the non-DP Laplace GP.

Run ``python benchmarks/hmeq_classification.py [--folds 5 --draws 25 --epsilon 1 --delta 0.01]``.
Smith, Álvarez & Lawrence (2021), §6.4: inputs public, the default flag BAD private, EQ kernel with
a lengthscale of 4 credit lines, (1, 0.01)-DP, one Newton step.  K-fold cross-validation on the
800-row balanced subset (:func:`pm_dpgp.datasets.load_hmeq`); for each fold: the non-DP Laplace
classifier (Newton to convergence), the one-step DP release at the test inputs (exact and SoR
with 10 k-means inducing inputs; ``--draws`` independent releases, simulation noise), the
one-step classifier without noise (what the DP release is centred on), and the Laplace
bin-means baseline (Smith et al. 2018, §4) on DELINQ.  Prints mean accuracy ± s.e. over folds
and the ratio DP / non-DP.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.datasets import load_hmeq
from pm_dpgp.mechanisms import binned_predict, binned_release, classification_release, make_bins
from pm_dpgp.mechanisms.label.classification import one_step_cloaking
from pm_dpgp.models import gp_classification


def _accuracy(latent: np.ndarray, t: np.ndarray) -> float:
    """Mean over draws of the fraction of test labels with sign(latent) = label."""
    return float(np.mean((np.atleast_2d(latent) > 0) == t[None, :]))


def run(features: tuple[str, ...], ls: float, args: argparse.Namespace) -> dict[str, list[float]]:
    X, t = load_hmeq(features)
    folds = np.array_split(np.random.default_rng(0).permutation(len(t)), args.folds)
    out: dict[str, list[float]] = {k: [] for k in ("non-DP", "one-step", "DP", "DP SoR-10", "bins")}
    for k, test in enumerate(folds):
        train = np.setdiff1d(np.arange(len(t)), test)
        model = gp_classification(X[train], t[train], 1.0 * pm.gp.cov.ExpQuad(X.shape[1], ls=ls))
        public = model.public_gp()
        mu, _ = public.predict(t[train], X[test])
        out["non-DP"].append(_accuracy(mu, t[test]))
        C, offset, _, _ = one_step_cloaking(public, X[test])
        out["one-step"].append(_accuracy(offset + C @ t[train], t[test]))
        kw = dict(epsilon=args.epsilon, delta=args.delta, n_draws=args.draws)
        r = classification_release(model, X[test], rng=np.random.default_rng(100 + k), **kw)
        out["DP"].append(_accuracy(r.draws, t[test]))
        r = classification_release(
            model, X[test], inducing_points=10, rng=np.random.default_rng(200 + k), **kw
        )
        out["DP SoR-10"].append(_accuracy(r.draws, t[test]))
        delinq = X[:, [features.index("DELINQ")]]
        bins = make_bins(np.arange(-0.5, 16.0))
        b = binned_release(
            delinq[train],
            t[train],
            bins,
            epsilon=args.epsilon,
            y_bounds=(0.0, 1.0),
            bounds_are_public=True,
            n_draws=args.draws,
            rng=np.random.default_rng(300 + k),
        )
        out["bins"].append(_accuracy(binned_predict(b, delinq[test]) - 0.5, t[test]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--draws", type=int, default=25)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=0.01)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # δ > 1/n at the paper's δ = 0.01 warns by design
    print(
        f"HMEQ balanced subset (800 rows), {args.folds}-fold CV, ε={args.epsilon}, δ={args.delta}"
    )
    for features, ls in ((("DELINQ",), 4.0), (("DELINQ", "DEROG", "NINQ"), 4.0)):
        res = run(features, ls, args)
        ref = np.mean(res["non-DP"])
        print(f"\ninputs {', '.join(features)} (EQ, lengthscale {ls}):")
        for name, accs in res.items():
            a = np.asarray(accs)
            se = a.std(ddof=1) / np.sqrt(a.size)
            ratio = a.mean() / ref
            print(f"  {name:<10} accuracy {a.mean():.3f} ± {se:.3f}   ratio to non-DP {ratio:.3f}")


if __name__ == "__main__":
    main()
