"""Stop-44 audit of ``kernel_norm_bound``: eqs. 4, 7, 8 proved from the kernel's structure at
the public hyperparameter values, not from probes over ``r ≤ (M + 1) d_z``."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.mechanisms.full.noise_aware import kernel_norm_bound
from pm_dpgp.models import sparse_gp_regression
from pm_dpgp.models.sparse import is_positive_combination

Z = np.linspace(0.0, 0.3, 4)[:, None]  # d_z = 0.1: the probes reach 0.5 only


def _public(cov, hyperparameters=None, Zs=Z):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pm.Model():
            model = sparse_gp_regression(None, None, cov, Z=Zs, noise_sd=1.0, z_is_public=True)
    return model.public_sparse_gp(hyperparameters)


def _max_norm(public, Zs=Z):
    xs = np.linspace(-60.0, 60.0, 24001)[:, None]
    return float(np.sqrt(np.sum(public.kernel(Zs, xs) ** 2, axis=0)).max())


def test_ratquad_with_negative_alpha_is_no_covariance():
    """``RatQuad(α = −1) = 1 − r²/2`` is decreasing and ≥ 0 out to √2 > 0.5 and unbounded
    beyond: it passed every check and got eq. 7, R_k = 1.995, while ‖k(Z, x)‖ reached 2513."""
    cov = pm.gp.cov.RatQuad(1, alpha=-1.0, ls=1.0)
    assert not is_positive_combination(cov)
    public = _public(cov)
    assert _max_norm(public) > 2000.0
    with pytest.raises(ValueError, match="not recognised as stationary"):
        kernel_norm_bound(public, "auto")


def test_symbolic_ratquad_alpha_negative_at_its_public_value_is_refused():
    def cov():
        return pm.gp.cov.RatQuad(1, alpha=pm.Normal("a", 0.0, 1.0), ls=1.0)

    with pytest.raises(ValueError, match="not a covariance with a non-negative"):
        kernel_norm_bound(_public(cov, {"a": -1.0}), "auto")
    assert kernel_norm_bound(_public(cov, {"a": 2.0}), "auto").equation == "eq7"


def test_negative_public_scalar_in_a_sum_gets_no_bound():
    """``ExpQuad(1) + h·ExpQuad(10)`` with the public value ``h = −0.7`` is no covariance
    (min eigenvalue −7.7 on [0, 3]) but passed the probes: eq. 7 charged R_k = 0.595 while
    ‖k(Z, x)‖ reached 1.317 (even eq. 4's 0.6 is exceeded)."""

    def cov():
        h = pm.Normal("h", 0.0, 1.0)
        return pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=10.0)

    public = _public(cov, {"h": -0.7})
    assert _max_norm(public) > 1.3 > np.sqrt(4) * public.kernel_diag(Z[:1])[0]
    for method in ("auto", "eq4", "eq7", "eq8"):
        with pytest.raises(ValueError, match="not a covariance with a non-negative"):
            kernel_norm_bound(public, method)
    assert kernel_norm_bound(public, 1.5).R_k == 1.5  # a caller's public bound still works
    # the same kernel with h = +0.7 is a covariance with a decreasing profile
    ok = kernel_norm_bound(_public(cov, {"h": 0.7}), "auto")
    assert ok.equation == "eq7" and ok.nonnegative


def test_positive_symbolic_scale_and_constant_keep_eq7_eq8_and_nonnegativity():
    """``η²·ExpQuad(ℓ) + c²`` at positive public values: eqs. 7/8 and ⟨k, k'⟩ ≥ 0 (the old
    structural rule gave the Dirichlet sensitivity t_min = −R_k² for a scalar in a sum)."""

    def cov(d=1):
        eta, c = pm.HalfNormal("eta", 1.0), pm.HalfNormal("c", 1.0)
        return eta**2 * pm.gp.cov.ExpQuad(d, ls=pm.Gamma("l", 2, 1)) + pm.gp.cov.Constant(c**2)

    public = _public(cov, {"eta": 1.3, "l": 0.5, "c": 0.4})
    b = kernel_norm_bound(public, "auto")
    assert b.equation in ("eq7", "eq8") and b.nonnegative and public.nonnegative
    assert _max_norm(public) <= b.R_k * (1 + 1e-12)
    Z2 = np.random.default_rng(0).uniform(size=(5, 2))
    public = _public(lambda: cov(2), {"eta": 1.3, "l": 0.5, "c": 0.4}, Z2)
    assert kernel_norm_bound(public, "auto").equation == "eq8"


def test_isotropy_from_the_structure():
    """eqs. 7–8 need one lengthscale over every input column; a negative product of two
    negative scalars is positive."""
    Z2 = np.random.default_rng(0).uniform(size=(5, 2))
    assert kernel_norm_bound(_public(pm.gp.cov.ExpQuad(2, ls=[1.0, 2.0]), None, Z2)).equation == (
        "eq4"
    )
    one = pm.gp.cov.ExpQuad(2, ls=0.3, active_dims=[0])
    assert kernel_norm_bound(_public(one, None, Z2)).equation == "eq4"

    def cov():
        ls = pm.Gamma("l", 2, 1, shape=2)
        u, v = pm.Normal("u", 0.0, 1.0), pm.Normal("v", 0.0, 1.0)
        return u * v * pm.gp.cov.ExpQuad(2, ls=ls)

    b = kernel_norm_bound(_public(cov, {"l": [0.4, 0.4], "u": -1.0, "v": -2.0}, Z2))
    assert b.equation == "eq8" and b.nonnegative
    b = kernel_norm_bound(_public(cov, {"l": [0.4, 0.5], "u": -1.0, "v": -2.0}, Z2))
    assert b.equation == "eq4"
