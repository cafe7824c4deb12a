"""Re-check of the selection's fast fold linear algebra (docs/selection.md §9, issue 9).

Run from the repository root:
``PYTHONPATH=. python benchmarks/audits/selection_fast/check_kernel_cache.py``.
Results of the run of 2026-11-24 are in README.md next to this file.

``plan_cv_sse`` evaluates one kernel matrix per tuple of the hyperparameters
the covariance depends on (``GPRegression.kernel_hyperparameter_names``, read from the graph).
A hyperparameter missed there would make two configurations share a wrong ``K``: Δ(θ) and the
utilities would then differ from a plan that evaluates ``K`` for every configuration (the
cache switched off) by far more than round-off; the two must agree bit for bit.  (The
``"reference"`` linear algebra uses the same cache, so comparing with it alone would not test
the cache: an earlier version of this script did only that.)  Models where that could go
wrong: a lengthscale through a Deterministic, an amplitude from another variable, a sum of
kernels, a vector (ARD) lengthscale, and a noise sd that is itself a kernel hyperparameter.
Last, bad ``fold_linalg`` / ``noise_solver`` values must be refused before the ledger is
charged.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression
from pm_dpgp.models.exact import GPRegression
from pm_dpgp.selection import (
    kfold_splits,
    product_grid,
    select_by_cross_validated_sse,
    select_hyperparameters,
)
from pm_dpgp.selection.cv_sse import cv_sse_utilities, plan_cv_sse

RNG = np.random.default_rng(3)
N = 40
X1 = np.sort(RNG.uniform(0, 10, N))
Y1 = 3 * np.sin(X1) + RNG.normal(0, 0.5, N)
X2 = RNG.uniform(0, 10, (N, 2))
Y2 = np.sin(X2[:, 0]) + np.cos(X2[:, 1]) + RNG.normal(0, 0.3, N)
KW: dict[str, Any] = dict(
    y_bounds=(-8.0, 8.0), release_epsilon=1.0, release_delta=1e-3, share_plans=False
)


def compare(name: str, model: Any, grid: list[dict[str, Any]]) -> None:
    """Cached kernels vs every configuration evaluated; fast vs reference linear algebra."""
    folds = kfold_splits(N, 5)
    cached = plan_cv_sse(model, grid, folds, **KW)
    names = GPRegression.kernel_hyperparameter_names
    GPRegression.kernel_hyperparameter_names = None  # type: ignore[assignment, method-assign]
    try:
        every = plan_cv_sse(model, grid, folds, **KW)
    finally:
        GPRegression.kernel_hyperparameter_names = names  # type: ignore[method-assign]
    ref = plan_cv_sse(model, grid, folds, fold_linalg="reference", **KW)
    u_cached, u_every = cv_sse_utilities(cached, model.y), cv_sse_utilities(every, model.y)
    u_ref = cv_sse_utilities(ref, model.y)
    same = np.array_equal(cached.sensitivities, every.sensitivities) and np.array_equal(
        u_cached, u_every
    )
    ds = np.max(np.abs(cached.sensitivities - ref.sensitivities) / np.abs(ref.sensitivities))
    du = np.max(np.abs(u_cached - u_ref) / np.abs(u_ref))
    print(
        f"{name}: kernel hyperparameters {model.kernel_hyperparameter_names()}; cached plan "
        f"bitwise the uncached one: {same}; fast vs reference, max rel. difference "
        f"Δ(θ) {ds:.1e}, utilities {du:.1e}"
    )


def noise() -> Any:
    return pm.HalfNormal("sd", 1.0)


def cov_deterministic() -> Any:
    a = pm.HalfNormal("a", 5.0)
    return pm.gp.cov.ExpQuad(1, ls=pm.Deterministic("ls_det", 2.0 * a))


def cov_amplitude() -> Any:
    s = pm.HalfNormal("s", 1.0)
    return (3 * s) ** 2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1))


def cov_sum() -> Any:
    k1 = pm.HalfNormal("e1", 2.0) ** 2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("l1", 2, 1))
    k2 = pm.HalfNormal("e2", 2.0) ** 2 * pm.gp.cov.Matern32(1, ls=pm.Gamma("l2", 2, 1))
    return k1 + k2


def cov_ard() -> Any:
    return pm.gp.cov.ExpQuad(2, ls=pm.Gamma("ls", 2, 1, shape=2))


def cov_shared() -> Any:
    s = pm.HalfNormal("s", 1.0)
    return s**2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1))


def check_models() -> None:
    compare(
        "a) ls = Deterministic(2a)",
        gp_regression(X1, Y1, cov_deterministic, noise_sd=noise),
        product_grid({"a": [0.5, 1.0, 2.0], "sd": [0.3, 1.0]}),
    )
    compare(
        "b) amplitude (3s)²",
        gp_regression(X1, Y1, cov_amplitude, noise_sd=noise),
        product_grid({"s": [0.5, 1.0], "ell": [0.5, 2.0], "sd": [0.3, 1.0]}),
    )
    compare(
        "c) sum of two kernels",
        gp_regression(X1, Y1, cov_sum, noise_sd=noise),
        product_grid(
            {"e1": [1.0], "l1": [0.5, 2.0], "e2": [0.5, 1.5], "l2": [1.0, 4.0], "sd": [0.5, 1.0]}
        ),
    )
    ard = [
        {"ls": np.array(a), "sd": s}
        for a, s in itertools.product([(1.0, 2.0), (2.0, 1.0), (2.0, 2.0)], [0.3, 1.0])
    ]
    compare("d) ARD lengthscales", gp_regression(X2, Y2, cov_ard, noise_sd=noise), ard)
    compare(
        "e) noise sd = s/2, kernel amplitude s",
        gp_regression(X1, Y1, cov_shared, noise_sd=lambda: 0.5 * pm.modelcontext(None)["s"]),
        product_grid({"s": [0.5, 1.0, 2.0], "ell": [0.5, 2.0]}),
    )


def check_refusals() -> None:
    model = gp_regression(
        X1[:30], Y1[:30], lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)), noise_sd=noise
    )
    grid = product_grid({"ell": [0.5, 2.0], "sd": [0.3, 1.0]})
    calls: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
        ("select_by_cross_validated_sse", select_by_cross_validated_sse, {}),
        ("select_hyperparameters", select_hyperparameters, {"method": "smith"}),
    ]
    for name, fn, extra in calls:
        for bad in ({"fold_linalg": "bogus"}, {"noise_solver": "bogus"}):
            ledger = Ledger(epsilon=5.0, delta=1e-3)
            try:
                fn(
                    model,
                    grid,
                    epsilon=1.0,
                    y_bounds=(-3.0, 3.0),
                    ledger=ledger,
                    n_folds=5,
                    release_epsilon=1.0,
                    release_delta=1e-3,
                    rng=np.random.default_rng(1),
                    **extra,
                    **bad,
                )
                outcome = "NOT REFUSED"
            except ValueError as err:
                outcome = f"ValueError: {err}"
            print(f"{name}({bad}): {outcome} | ledger spent ε = {ledger.spent_epsilon}")


if __name__ == "__main__":
    check_models()
    check_refusals()
