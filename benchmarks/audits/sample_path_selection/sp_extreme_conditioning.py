"""Audit (sample-path selection, Q1): no data-dependent exception after the spend in the most
ill-conditioned affordable regime (κ → 1: lengthscale 10⁴ on [0, 10]; r² = 1e-7, so that
α_max > 1.01 only because V ≈ 1e-6), on benign and adversarial private datasets (all inputs
equal, duplicated pairs, non-finite values).  Also reports whether the exact posterior needed a
data-dependent jitter (``ExactPosterior.jitter``), which would change the released law."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import warnings

import numpy as np
import pymc as pm

import pm_dpgp.selection.sample_paths as sp_module
from benchmarks.audits.sample_path_selection.sp_public_event import adversarial_datasets
from pm_dpgp.models import gp_regression

warnings.simplefilter("ignore")


def main():
    r = np.random.default_rng(0)
    X = r.uniform(0, 10, (288, 1))
    model = gp_regression(
        X, np.sin(X[:, 0]), lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )  # fmt: skip
    grid = [{"ell": 1e4, "noise": 5.0 * np.sqrt(1e-7)}]
    real = sp_module.sample_path_release
    jitters = []

    def spy(data, X_star, **kw):
        rel = real(data, X_star, **kw)
        jitters.append(rel.public_gp.posterior().jitter)
        return rel

    sp_module.sample_path_release = spy
    try:
        for name, (Xd, yd) in adversarial_datasets().items():
            res = sp_module.select_by_sample_paths(
                model, grid, (Xd, yd), X_star=np.linspace(0, 10, 21)[:, None], domain=(0, 10),
                y_bounds=(-2.0, 2.0), epsilon=1.0, delta=1e-4, gamma=0.5, ledger=None,
                rng=np.random.default_rng(1),
            )  # fmt: skip
            print(
                f"{name}: outcome={res.public_details['outcome']}, alpha_max="
                f"{res.public_details['alpha_max_per_candidate'][0]:.4g}, selection ε="
                f"{res.public_details['selection_epsilon']:.4g}, jitters={jitters}"
            )
            jitters.clear()
    finally:
        sp_module.sample_path_release = real


if __name__ == "__main__":
    main()
