"""Stop-47 audit of the cloaking family (second round).

The Gibbs kernel's positive semi-definiteness is cited as Paciorek & Schervish (2004, Thm 1)
with a kernel matrix ``Σ(x)``; the docstring and ``docs/sparse_cloaking.md`` named
``Σ(x) = diag(r_l(x)²/2)``, for which the construction's exponent is ``−4Δ²/(r² + r'²)``, not
the kernel's ``−Δ²/(r² + r'²)`` (0.47 off on a 2-D example).  ``Σ(x) = diag(2 r_l(x)²)`` with
``R(τ) = exp(−τ²)`` reproduces the kernel exactly.

``cloaking_noise`` converted ``X_star`` to an array before the public view's column check, so a
``DataFrame`` whose columns were in another order than the model's gave the cloaking matrix of
other inputs, silently (max |ΔC| 0.77 exact, 0.38 FITC below); ``cloaked_release``, ``plan`` and
the views' own ``cloaking_operator`` refuse it.  The same held for the FITC builder's given
inducing inputs ``Z`` and for a ``KDELengthscale`` built on a ``DataFrame``: in another column
order than the model's ``X`` they were read by position (inducing inputs at (weight, age),
density centres in the wrong coordinates), silently.

``docs/cloaking.md`` §7 printed the recipe ``projector() @ (C @ y) + scale · basis @ chol_k @ ξ``
for direct callers of ``solve_noise_covariance``: its rounding differs between neighbours,
also outside ``span U_k`` where no noise is added; with labels in ``[1e12, 1e12 + 1]`` the
neighbours' means differed by up to 3·10⁵ times the sensitivity in the Mahalanobis metric.
The recipe now adds the noise to the whitened mean (as ``cloaked_release`` does).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest

from pm_dpgp.gp.exact import cloaking_matrix
from pm_dpgp.mechanisms import cloaking_noise
from pm_dpgp.mechanisms.label.cloaking import solve_noise_covariance
from pm_dpgp.models import gp_regression, nonstationary
from pm_dpgp.models.fitc import fitc_gp_regression
from pm_dpgp.models.nonstationary import KDELengthscale, nonstationary_gp_regression
from tests.tolerances import scalar_rtol


def _paciorek_schervish(Xa, ra, Xb, rb, a):
    """P&S (2004, Thm 1) with ``Σ(x) = a·diag(r(x)²)`` (same r in every dimension) and
    ``R(τ) = exp(−τ²)``: ``|Σ_i|^¼ |Σ_j|^¼ |(Σ_i + Σ_j)/2|^-½ exp(−Q_ij)``."""
    d = Xa.shape[1]
    si = a * ra[:, None] ** 2
    sj = a * rb[None, :] ** 2
    avg = 0.5 * (si + sj)
    pref = (si**0.25 * sj**0.25 / np.sqrt(avg)) ** d
    q = np.sum((Xa[:, None, :] - Xb[None, :, :]) ** 2, axis=2) / avg
    return pref * np.exp(-q)


def test_gibbs_kernel_is_paciorek_schervish_with_the_documented_sigma():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 6, (15, 2))
    Xs = rng.uniform(0, 6, (8, 2))

    def lengthscale(Xt):
        return 0.5 + 0.2 * pt.abs(Xt[:, 0])

    model = nonstationary_gp_regression(
        X, np.zeros(15), lengthscale, kernel_scale=1.0, noise_sd=0.3
    )
    K = model.public_cloaking().kernel(Xs, X)
    ra, rb = 0.5 + 0.2 * np.abs(Xs[:, 0]), 0.5 + 0.2 * np.abs(X[:, 0])
    ref = _paciorek_schervish(Xs, ra, X, rb, 2.0)
    # entrywise: exp(−Q) carries Q's rounding (a dozen flops, relative) as an absolute error
    # of the exponent, so each entry's relative error is ≤ scalar_rtol(12)·(1 + Q) (Q ≤ 26
    # here: 2.8e-13; rtol=1e-13 sat below that bound, measured 1.1e-14 with PyMC 5 and 7e-15
    # with PyMC 6 / Numba); a relative error of 1e-9 in K is rejected
    q = np.sum((Xs[:, None, :] - X[None, :, :]) ** 2, axis=2) / (ra[:, None] ** 2 + rb**2)
    tol = scalar_rtol(12) * (1.0 + q) * np.abs(ref)
    assert np.all(np.abs(K - ref) <= tol)
    assert not np.all(np.abs(K * (1 + 1e-9) - ref) <= tol)
    # the former Σ = diag(r²/2) is not this kernel
    assert np.max(np.abs(_paciorek_schervish(Xs, ra, X, rb, 0.5) - K)) > 0.1
    doc = inspect.getdoc(nonstationary)
    assert "diag(2 r_l(x)²)" in doc
    assert "Σ(x) = diag(r_l(x)²/2)``)" not in doc


@pytest.mark.parametrize("family", ["exact", "fitc"])
def test_cloaking_noise_refuses_dataframe_columns_in_another_order(family):
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"age": rng.uniform(0, 6, 20), "weight": rng.uniform(0, 6, 20)})
    y = np.sin(X["age"].to_numpy())
    cov = pm.gp.cov.ExpQuad(2, ls=[1.0, 3.0])
    if family == "exact":
        model = gp_regression(X, y, cov, noise_sd=0.3)
    else:
        model = fitc_gp_regression(X, y, cov, noise_sd=0.3, n_inducing=5, seed=0)
    public = model.public_cloaking()
    X_star = pd.DataFrame({"age": [1.0, 2.0, 3.0], "weight": [5.0, 0.5, 4.0]})
    C, _ = cloaking_noise(public, X_star)
    np.testing.assert_array_equal(C, public.cloaking_operator(X_star).dense())
    with pytest.raises(ValueError, match="columns"):
        cloaking_noise(public, X_star[["weight", "age"]])


def _frame():
    rng = np.random.default_rng(1)
    X = pd.DataFrame({"age": rng.uniform(0, 6, 20), "weight": rng.uniform(50, 90, 20)})
    return X, np.sin(X["age"].to_numpy())


def test_fitc_refuses_inducing_inputs_in_another_column_order():
    X, y = _frame()
    Z = pd.DataFrame({"age": [1.0, 3.0, 5.0], "weight": [60.0, 70.0, 80.0]})
    cov = pm.gp.cov.ExpQuad(2, ls=[1.0, 10.0])
    model = fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=Z)
    np.testing.assert_array_equal(model.Z, Z.to_numpy())
    with pytest.raises(ValueError, match="columns"):
        fitc_gp_regression(X, y, cov, noise_sd=0.3, Z=Z[["weight", "age"]])


def test_kde_lengthscale_built_on_another_column_order_is_refused():
    X, y = _frame()
    kw = {"n_target": 3.0, "max_lengthscale": 2.0, "bandwidth": 0.5, "scales": [1.0, 10.0]}
    nonstationary_gp_regression(X, y, KDELengthscale(X, **kw), kernel_scale=1.0, noise_sd=0.3)
    swapped = KDELengthscale(X[["weight", "age"]], **kw)
    with pytest.raises(ValueError, match="columns"):
        nonstationary_gp_regression(X, y, swapped, kernel_scale=1.0, noise_sd=0.3)


def _recipe() -> str:
    text = (Path(__file__).parents[1] / "docs" / "cloaking.md").read_text(encoding="utf-8")
    section = text.split("## 7. Using the result", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


class _FixedNormal:
    def __init__(self, z):
        self.z = z

    def standard_normal(self, size):
        return self.z[:size].copy()


def test_documented_direct_recipe_adds_the_noise_in_whitened_coordinates():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    Xs = np.linspace(0, 6, 40)

    def k(a, b):
        return np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2)

    C = cloaking_matrix(k(X, X), k(Xs, X), 0.09)
    lower, upper = 1e12, 1e12 + 1.0
    z = rng.standard_normal(40)
    code = _recipe()
    worst = 0.0
    for _ in range(40):
        y = rng.uniform(lower, upper, 30)
        j = rng.integers(30)
        spaces = []
        for value in (lower, upper):
            y_j = y.copy()
            y_j[j] = value
            ns = {
                "np": np,
                "solve_noise_covariance": solve_noise_covariance,
                "C": C,
                "y": y_j,
                "d": upper - lower,
                "lower": lower,
                "upper": upper,
                "prior_mean": 0.0,
                "sigma_for_unit_sensitivity": 3.73,
                "rng": _FixedNormal(z),
            }
            exec(code, ns)  # noqa: S102 - the documented recipe itself
            spaces.append(ns)
        a, b = spaces
        assert "noisy" in a, "the recipe must add the noise to a whitened vector"
        worst = max(worst, float(np.linalg.norm(a["noisy"] - b["noisy"])) / a["sens"])
        F = a["res"].basis @ a["res"].chol_k
        np.testing.assert_array_equal(a["release"], F @ a["wh"].public + F @ a["noisy"])
    assert worst <= 1.0
