"""Stop-44 audit of the full-privacy (Honkela) releases: noise-aware and Dirichlet."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

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
    # no bound on ||k(Z, x)|| is proved from the structure with a negative public scalar: the
    # caller supplies one (eq. 4's sqrt(M) k(0), valid as the kernel is a covariance)
    assert not public.nonnegative and not public.covariance
    with pytest.raises(ValueError, match="not a covariance with a non-negative"):
        kernel_norm_bound(public, "auto")
    R_k = float(np.sqrt(Z.shape[0]) * public.kernel_diag(Z[:1])[0])
    cal = dirichlet_calibration(
        public, C, alpha_epsilon=0.01, prior_mean=5.0, kernel_norm=R_k, ratio=1.0, rho=0.01,
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
    # a sum is non-negative when its scalars are at their public values (stop-44 audit,
    # kernel_structure): 0.3 is, -0.3 is not (and then no bound on ||k(Z, x)|| is proved)
    public, _ = _public(
        lambda h: pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=2.0), 0.3
    )
    assert public.nonnegative and kernel_norm_bound(public, "auto").nonnegative
    public, _ = _public(
        lambda h: pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=2.0), -0.3
    )
    assert not public.nonnegative


# ------------------------------------------------------------------ input validation
def _dirichlet_model():
    from pm_dpgp.models import dirichlet_gp_classification, grid_inducing_points

    X = np.linspace(-4, 4, 40)
    labels = (X > 0).astype(int) + (X > 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dirichlet_gp_classification(
            X, labels, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3.5, 3.5, 6),
            n_classes=3,
        )  # fmt: skip
    return model, X, labels


def test_dirichlet_refuses_a_third_data_column_clearly_and_spends_nothing():
    """``(X, labels, w)`` raised ``TypeError: preprocess() takes 2 positional arguments``."""
    import pytest

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release

    model, X, labels = _dirichlet_model()
    ledger = Ledger(epsilon=10.0, delta=1e-3)
    g = np.random.default_rng(5)
    state = g.bit_generator.state
    with pytest.raises(ValueError, match=r"data must be \(X, labels\)"):
        dirichlet_release(
            model, (X, labels, np.ones(40)), epsilon=1.0, delta=1e-5, ledger=ledger, rng=g
        )
    assert not ledger.history and g.bit_generator.state == state


def test_predict_proba_refuses_a_count_that_is_not_one():
    """``n_samples=0`` gave NaN probabilities; 2.5 and ``"10"`` were taken as 2 and 10."""
    import pytest

    from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release

    model, _, _ = _dirichlet_model()
    rel = dirichlet_release(model, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(1))
    Xs = np.linspace(-3, 3, 4)
    for bad in (0, 2.5, "10", True, -1):
        g = np.random.default_rng(0)
        state = g.bit_generator.state
        with pytest.raises(ValueError, match="n_samples"):
            rel.predict_proba(Xs, method="mc", n_samples=bad, rng=g)
        assert g.bit_generator.state == state
    p = rel.predict_proba(Xs, method="mc", n_samples=50, rng=np.random.default_rng(0))
    assert np.allclose(p.sum(axis=1), 1.0)


def test_dirichlet_targets_of_a_large_alpha_are_positive_variances():
    """``log(1/α + 1)`` was 0 for α > 2^53: ``ZeroDivisionError`` in the release."""
    import math

    import pytest

    from pm_dpgp.models.sparse import DirichletTargets

    t = DirichletTargets.from_alpha(0.01)
    assert t.var_out == math.log(101.0) and t.var_in == math.log(1 / 1.01 + 1)
    t = DirichletTargets.from_alpha(1e12)
    assert t.var_in > 0.0 and t.var_out > 0.0 and t.y_in > t.y_out
    # beyond ~1e15 the two targets coincide in float64 (R_y = 0, a ZeroDivisionError later):
    # refused by name since stop 47 instead of accepted here
    for a in (1e16, 1e300):
        with pytest.raises(ValueError, match="outside float64's range"):
            DirichletTargets.from_alpha(a)


def test_a_huge_noise_sd_is_refused_by_name():
    """``noise_sd=1e200``: ``OverflowError: (34, 'Numerical result out of range')``."""
    import pytest

    from pm_dpgp.models import grid_inducing_points

    X = np.linspace(-3, 3, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sparse_gp_regression(
            X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3, 3, 4),
            noise_sd=1e200,
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"noise variance \(noise_sd\*\*2\)"):
        model.public_sparse_gp()
