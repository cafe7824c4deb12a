"""Stop-44 audit of the full-privacy (Honkela) releases: noise-aware and Dirichlet."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm

from pm_dpgp.mechanisms.full.dirichlet import dirichlet_calibration
from pm_dpgp.mechanisms.full.noise_aware import kernel_norm_bound, upper_vector
from pm_dpgp.models import sparse_gp_regression


def _public(build, value):
    Z = np.array([[0.0], [0.05], [0.1]])
    X = np.linspace(-3, 3, 30)[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pm.Model():
            h = pm.HalfNormal("h", 1.0) if value > 0 else pm.Normal("h", 0.0, 1.0)
            model = sparse_gp_regression(X, np.sin(X[:, 0]), build(h), Z=Z, noise_sd=0.1)
    return model.public_sparse_gp({"h": value}), Z


def test_dirichlet_sensitivity_holds_for_a_covariance_negative_beyond_the_probes():
    """``k = ExpQuad(1) − ExpQuad(1.2)/1.2`` is a covariance (spectral density ≥ 0), positive
    and decreasing out to r = 1.09 and negative beyond (down to −0.44 k(0)).  The profile probes
    reach (M + 1) d_z = 0.2 only, so the kernel was taken as non-negative and the Dirichlet
    sensitivity used ⟨k, k'⟩ ≥ 0: with a public prior mean above both targets, replacing
    x = 0.05 by x' = 1.94 (same label) moved the statistics by 1.0168 Δ."""
    L = 1.2
    public, Z = _public(
        lambda h: pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=L), -1 / L
    )
    G = np.linspace(-20, 20, 300)[:, None]
    assert np.linalg.eigvalsh(public.kernel(G)).min() > -1e-9  # a covariance
    assert public.kernel(Z[:1], np.array([[1.94]]))[0, 0] < 0.0
    C = 2
    cal = dirichlet_calibration(
        public, C, alpha_epsilon=0.01, prior_mean=5.0, kernel_norm="auto", ratio=1.0, rho=0.01,
        epsilon=1.0, delta=1e-5, calibration="analytic", secure=False,
    )  # fmt: skip
    tg, mu, c = cal.tg, cal.mu, cal.ratio_c

    def record(x, label):
        k = public.kernel(Z, np.array([[x]]))[:, 0]
        parts = []
        for cl in range(C):
            w = 1.0 if cl == label else tg.var_in / tg.var_out
            r = (tg.y_in if cl == label else tg.y_out) - mu
            parts.append(np.concatenate([w * r * k, c * w * upper_vector(np.outer(k, k))]))
        return np.concatenate(parts)

    change = np.linalg.norm(record(0.05, 0) - record(1.9435, 0))
    assert change <= cal.Delta, (change, cal.Delta, change / cal.Delta)


def test_nonnegative_by_construction_keeps_a_symbolic_overall_scale():
    """The common ``η² · ExpQuad`` keeps ⟨k, k'⟩ ≥ 0 (its sign is that of k(x, x) > 0)."""
    public, _ = _public(lambda h: h**2 * pm.gp.cov.ExpQuad(1, ls=1.0), 0.7)
    assert public.nonnegative and kernel_norm_bound(public, "auto").nonnegative
    public, _ = _public(
        lambda h: pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=2.0), 0.3
    )
    assert not public.nonnegative and not kernel_norm_bound(public, "auto").nonnegative
