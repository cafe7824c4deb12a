"""Tests for pm_dpgp.models (exact GP regression builder and its public view).

PyMC/PyTensor compilation dominates the run time, so every model is built once
per module and reused.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pymc as pm
import pytensor
import pytest

import pm_dpgp.models.exact as exact_models
from pm_dpgp.gp.exact import ExactPosterior
from pm_dpgp.models import GPRegression, PrivateHyperparameterError, PublicGP, gp_regression
from tests.tolerances import assert_normwise_close, cond_rtol, condition_number, scalar_rtol

pytestmark = pytest.mark.filterwarnings("ignore:.*BLAS:UserWarning")

RNG = np.random.default_rng(20240601)
X1 = np.linspace(0.0, 5.0, 14)
Y1 = np.sin(X1) + 0.1 * RNG.normal(size=14)
XS1 = np.linspace(-1.0, 6.0, 9)
X2 = RNG.uniform(-2.0, 2.0, size=(12, 2))
Y2 = np.cos(X2[:, 0]) * X2[:, 1] + 0.1 * RNG.normal(size=12)
XS2 = RNG.uniform(-2.5, 2.5, size=(7, 2))


@dataclass
class Case:
    reg: GPRegression
    point: dict[str, object]
    X_star: np.ndarray
    ls_min: float  # smallest lengthscale in the kernel (sets the kernel's rounding, see below)

    @property
    def public(self) -> PublicGP:
        return self.reg.public_gp(self.point or None)


def _fixed_1d() -> Case:
    reg = gp_regression(X1, Y1, 1.7 * pm.gp.cov.ExpQuad(1, ls=0.8), noise_sd=0.3, mean=0.25)
    return Case(reg, {}, XS1, 0.8)


def _fixed_2d() -> Case:
    cov = 0.5 * pm.gp.cov.Matern52(2, ls=[0.9, 1.4]) + pm.gp.cov.ExpQuad(
        2, ls=1.1, active_dims=[0]
    ) * pm.gp.cov.Matern32(2, ls=0.7, active_dims=[1])
    reg = gp_regression(X2, Y2, cov, noise_sd=0.2, mean=-0.4)
    return Case(reg, {}, XS2, 0.7)


def _prior_1d() -> Case:
    reg = gp_regression(
        X1,
        Y1,
        lambda: pm.HalfNormal("eta", 2.0) ** 2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)),
        noise_sd=lambda: pm.HalfNormal("sigma", 1.0),
        mean=0.1,
    )
    return Case(reg, {"eta": 1.3, "ell": 0.6, "sigma": 0.25}, XS1, 0.6)


def _prior_2d_ard() -> Case:
    def cov() -> pm.gp.cov.Covariance:
        ell = pm.InverseGamma("ell", 3, 2, shape=2)
        return pm.Exponential("eta2", 1.0) * pm.gp.cov.Matern52(2, ls=ell) + pm.gp.cov.ExpQuad(
            2, ls=pm.Uniform("ell_b", 0.1, 5.0)
        )

    reg = gp_regression(X2, Y2, cov, noise_sd=0.15, mean=0.0, name="g")
    return Case(reg, {"ell": np.array([0.8, 1.6]), "eta2": 0.7, "ell_b": 2.0}, XS2, 0.8)


BUILDERS = {
    "fixed-1d-expquad": _fixed_1d,
    "fixed-2d-matern-sum-prod": _fixed_2d,
    "prior-1d-expquad": _prior_1d,
    "prior-2d-ard-matern": _prior_2d_ard,
}


@pytest.fixture(scope="module", params=list(BUILDERS), ids=list(BUILDERS))
def case(request: pytest.FixtureRequest) -> Case:
    return BUILDERS[request.param]()


@pytest.fixture(scope="module")
def prior1d() -> Case:
    return _prior_1d()


def _max_norm(X: np.ndarray) -> float:
    return float(np.max(np.linalg.norm(np.reshape(X, (len(X), -1)), axis=1)))


def _kernel_entry_rtol(Xa: np.ndarray, Xb: np.ndarray, ls_min: float) -> float:
    """Relative tolerance per entry for two evaluations of the same stationary kernel formula.

    PyMC forms ``r² = |x|² + |x'|² − 2x·x'`` (absolute rounding ≤ 3·EPS·(|x| + |x'|)², Higham
    2002 §3.1, cancellation for near points); the kernels are ``σ² f(r/ℓ)`` with ``f`` an
    exponential times a polynomial, which turns an absolute error δu in ``u = r²/ℓ²`` (or
    ``r/ℓ``) into a relative error ≲ δu, and ``u``'s own relative rounding into ``u·EPS``.
    ``u ≤ (|x| + |x'|)²/ℓ_min²`` bounds both; sums/products of kernels and the rest of each
    formula are ≲ 32 flops (:func:`scalar_rtol`).
    """
    u = (_max_norm(Xa) + _max_norm(Xb)) ** 2 / ls_min**2
    return scalar_rtol(32) * (1.0 + u)


def _posterior_rtol(
    case: Case, pub: PublicGP, x: np.ndarray, result: np.ndarray, K_ss: np.ndarray | None = None
) -> float:
    """Normwise tolerance for PyMC's posterior mean/cov vs ours, ``result = [K_ss −] K_sf x``.

    Both factorise ``A = K_ff + σ²I`` (backward-stable: ``cond_rtol(A)`` on ``x = A⁻¹b``) with
    kernel matrices from separately compiled copies of the same graph (entries may differ by
    ``k_rtol`` = :func:`_kernel_entry_rtol`, a perturbation that the solve amplifies by κ(A) and
    each product with ``K_sf``/``K_ss`` passes on).  Absolute error ≤ that times
    ``‖K_sf‖₂‖x‖ (+ ‖K_ss‖)``, relative to ``‖result‖`` (cancellation in ``K_ss − K_sf x``).
    """
    X, Xs = case.reg.X, case.X_star
    A = pub.kernel(X) + pub.noise_var * np.eye(X.shape[0])
    X_all = np.vstack([np.reshape(Xs, (len(Xs), -1)), X])
    k_rtol = _kernel_entry_rtol(X_all, X_all, case.ls_min)
    K_sf = pub.kernel(Xs, X)
    size = np.linalg.norm(K_sf, 2) * np.linalg.norm(x)
    if K_ss is not None:
        size += np.linalg.norm(K_ss)
    rel = cond_rtol(A) + (condition_number(A) + 2.0) * k_rtol
    return rel * max(1.0, size / np.linalg.norm(result))


# ------------------------------------------------------------------ agreement with PyMC
def test_predict_matches_pymc(case: Case) -> None:
    """Mean and full covariance agree with PyMC's own gp.predict (jitter=0), see _posterior_rtol."""
    reg = case.reg
    mu_ref, cov_ref = reg.gp.predict(
        case.X_star.reshape(len(case.X_star), -1),
        point=case.point,
        diag=False,
        pred_noise=False,
        jitter=0.0,
        model=reg.model,
    )
    pub = case.public
    mu, cov = pub.predict(reg.y, case.X_star)
    assert pub.posterior().jitter == 0.0
    A = pub.kernel(reg.X) + pub.noise_var * np.eye(reg.X.shape[0])
    K_sf, K_ss = pub.kernel(case.X_star, reg.X), pub.kernel(case.X_star)
    alpha, X = np.linalg.solve(A, reg.y - pub.mean), np.linalg.solve(A, K_sf.T)
    tol_mu = _posterior_rtol(case, pub, alpha, mu_ref - pub.mean)
    assert_normwise_close(mu - pub.mean, mu_ref - pub.mean, tol_mu, "mean")
    tol_cov = _posterior_rtol(case, pub, X, cov_ref, K_ss)
    assert_normwise_close(cov, cov_ref, tol_cov, "cov")
    mu_d, var = pub.predict(reg.y, case.X_star, full_cov=False)
    # same code on the same numbers (the mean does not depend on full_cov): bitwise equal
    np.testing.assert_allclose(mu_d, mu, rtol=1e-12, atol=1e-14)
    # var uses k(x, x) from the kernel's diag(), PyMC the diagonal of the full kernel, whose
    # distance is √(r² + 1e-12) (PyMC's Stationary.euclidean_dist): the two differ by exactly
    # this public, data-free offset, which is added to the rounding budget.
    offset = np.linalg.norm(pub.kernel_diag(case.X_star) - np.diag(K_ss))
    tol_var = tol_cov * np.linalg.norm(cov_ref) / np.linalg.norm(np.diag(cov_ref))
    tol_var += offset / np.linalg.norm(np.diag(cov_ref))
    assert_normwise_close(var, np.diag(cov_ref), tol_var, "var")


def test_cloaking_matrix_reproduces_mean(case: Case) -> None:
    reg, pub = case.reg, case.public
    C = pub.cloaking_matrix(case.X_star)
    assert C.shape == (len(case.X_star), reg.X.shape[0])
    mu, _ = pub.predict(reg.y, case.X_star, full_cov=False)
    K_ff, K_sf = pub.kernel(reg.X), pub.kernel(case.X_star, reg.X)
    A = K_ff + pub.noise_var * np.eye(reg.X.shape[0])
    # C = (A⁻¹K_fs)ᵀ vs K_sf (A⁻¹(y − m)): two Cholesky solves with the same A, then products
    # with K_sf (‖K_sf‖‖A⁻¹(y − m)‖/‖mu − m‖ allows for cancellation in the product).
    alpha = np.linalg.solve(A, reg.y - pub.mean)
    amp = max(1.0, np.linalg.norm(K_sf, 2) * np.linalg.norm(alpha) / np.linalg.norm(mu - pub.mean))
    assert_normwise_close(C @ (reg.y - pub.mean), mu - pub.mean, cond_rtol(A) * amp, "C (y - m)")
    # Dense LU reference for C = K_sf (K_ff + s2 I)^-1: two backward-stable solves with A.
    C_ref = np.linalg.solve(A, K_sf.T).T
    assert_normwise_close(C, C_ref, cond_rtol(A), "C")
    # a noise variance off by 1e-4 (relative) gives a C the comparison rejects
    C_bad = np.linalg.solve(K_ff + pub.noise_var * (1 + 1e-4) * np.eye(reg.X.shape[0]), K_sf.T).T
    with pytest.raises(AssertionError):
        assert_normwise_close(C_bad, C_ref, cond_rtol(A))


def test_kernel_matches_pymc_graph(case: Case) -> None:
    """The compiled kernel equals PyMC's covariance graph evaluated at the same values."""
    reg, pub = case.reg, case.public
    K_ref = pm.gp.util.replace_with_values(
        [reg.cov_func(reg.X, case.X_star.reshape(len(case.X_star), -1))],
        replacements=case.point,
        model=reg.model,
    )[0]
    # entrywise closed forms (no solve): per-entry relative rounding bound
    rtol = _kernel_entry_rtol(reg.X, case.X_star, case.ls_min)
    np.testing.assert_allclose(pub.kernel(reg.X, case.X_star), K_ref, rtol=rtol, atol=0)
    # diag() uses r = 0, the full kernel √(r² + 1e-12) (PyMC): ≤ ~1e-12/ℓ² apart, far below 1e-7
    np.testing.assert_allclose(pub.kernel_diag(case.X_star), np.diag(pub.kernel(case.X_star)))
    K = pub.kernel(reg.X)
    assert np.array_equal(K, K.T)


def test_expquad_kernel_against_formula() -> None:
    pub = _fixed_1d().public
    d2 = (X1[:, None] - XS1[None, :]) ** 2
    # (x − x')² here vs |x|² + |x'|² − 2xx' in PyMC: per-entry bound of _kernel_entry_rtol
    rtol = _kernel_entry_rtol(X1, XS1, 0.8)
    K = pub.kernel(X1, XS1)
    np.testing.assert_allclose(K, 1.7 * np.exp(-0.5 * d2 / 0.8**2), rtol=rtol, atol=0)
    with pytest.raises(AssertionError):  # a lengthscale off by 1e-4 (relative) is rejected
        np.testing.assert_allclose(K, 1.7 * np.exp(-0.5 * d2 / (0.8 * (1 + 1e-4)) ** 2), rtol=rtol)


def test_public_gp_fields(prior1d: Case) -> None:
    reg = prior1d.reg
    assert reg.hyperparameter_names == ("eta", "ell", "sigma")
    pub = prior1d.public
    # σ through one compiled function (at most a transform and its inverse), then squared
    assert pub.noise_var == pytest.approx(0.25**2, rel=scalar_rtol(8))
    assert pub.mean == 0.1
    assert pub.hyperparameters == {"eta": 1.3, "ell": 0.6, "sigma": 0.25}
    assert all(isinstance(v, float) for v in pub.hyperparameters.values())
    assert "ExpQuad" in pub.description and "ell=0.6" in pub.description
    assert pub.X.shape == (14, 1) and not pub.X.flags.writeable
    # The public view never holds the private outputs.
    assert "y" not in {f.name for f in fields(PublicGP)}
    assert "Y1" not in repr(pub) and str(Y1[0]) not in repr(reg)
    assert isinstance(pub.posterior(), ExactPosterior)
    assert pub.posterior() is pub.posterior()
    with pytest.raises(AttributeError):
        pub.noise_var = 1.0  # type: ignore[misc]


def test_model_is_a_normal_pymc_model(prior1d: Case) -> None:
    reg = prior1d.reg
    assert [rv.name for rv in reg.model.observed_RVs] == ["f_obs"]
    assert {rv.name for rv in reg.model.free_RVs} == {"eta", "ell", "sigma"}
    assert isinstance(reg.gp, pm.gp.Marginal)
    np.testing.assert_array_equal(reg.model.rvs_to_values[reg.model["f_obs"]].data, Y1)


# ------------------------------------------------------------------ hyperparameters are public
def test_prior_model_without_values_refuses(prior1d: Case) -> None:
    with pytest.raises(PrivateHyperparameterError, match="not public|NOT public"):
        prior1d.reg.public_gp()
    with pytest.raises(PrivateHyperparameterError, match=r"\['sigma'\]"):
        prior1d.reg.public_gp({"eta": 1.0, "ell": 0.5})
    assert issubclass(PrivateHyperparameterError, ValueError)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"eta": 1.0, "ell": 0.5, "sigma": 0.1, "foo": 2.0}, "Unknown"),
        ({"eta": np.nan, "ell": 0.5, "sigma": 0.1}, "finite"),
        ({"eta": 1.0, "ell": -0.5, "sigma": 0.1}, "support"),
        ({"eta": 1.0, "ell": [0.5, 0.6], "sigma": 0.1}, "dimension"),
        ({"eta": 1.0, "ell": "abc", "sigma": 0.1}, "numeric|number"),
        ({"eta": 1.0, "ell": 0.0, "sigma": 0.1}, "NaN/inf"),  # in support, breaks the kernel
    ],
)
def test_bad_hyperparameter_values(prior1d: Case, values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        prior1d.reg.public_gp(values)
    assert not isinstance(info.value, PrivateHyperparameterError)


def test_ard_and_interval_support() -> None:
    c = _prior_2d_ard()
    assert set(c.reg.hyperparameter_names) == {"ell", "eta2", "ell_b"}
    with pytest.raises(ValueError, match="shape"):
        c.reg.public_gp({**c.point, "ell": np.array([1.0, 2.0, 3.0])})
    with pytest.raises(ValueError, match="support"):
        c.reg.public_gp({**c.point, "ell_b": 7.0})  # Uniform(0.1, 5)


def test_fixed_model_rejects_unknown_names() -> None:
    reg = _fixed_1d().reg
    assert reg.hyperparameter_names == ()
    with pytest.raises(ValueError, match="fixed hyperparameters"):
        reg.public_gp({"ell": 1.0})


def test_hyperprior_parents_are_not_hyperparameters() -> None:
    def cov() -> pm.gp.cov.Covariance:
        a = pm.HalfNormal("a", 1.0)
        return pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", alpha=a + 1.0, beta=1.0))

    reg = gp_regression(X1, Y1, cov, noise_sd=0.3)
    assert reg.hyperparameter_names == ("ell",)


def test_existing_model_and_variable_sigma() -> None:
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        pm.Normal("unrelated", 0.0, 1.0)
    reg = gp_regression(X1, Y1, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=s, model=model, name="h")
    assert reg.model is model and reg.hyperparameter_names == ("s",)
    assert "h_obs" in model.named_vars


def test_random_variable_outside_model_is_refused() -> None:
    ls = pm.HalfNormal.dist(1.0)  # not registered in any model: evaluating it draws noise
    # refused when the model is built (stop 32; it used to be refused by public_gp())
    with pytest.raises(ValueError, match="not a free variable of this model"):
        gp_regression(X1, Y1, pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=0.3)


# ------------------------------------------------------------------ compiled once
def test_kernel_compiled_once_per_model(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_function = pytensor.function

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real_function(*args, **kwargs)

    monkeypatch.setattr(pytensor, "function", counting)
    # start from an empty process-wide structural cache (earlier tests may have filled it)
    monkeypatch.setattr(exact_models, "_COMPILED", [])
    reg = _prior_1d().reg
    assert not calls  # building the model compiles nothing
    pubs = [
        reg.public_gp({"eta": e, "ell": ell, "sigma": 0.2})
        for e, ell in [(1.0, 0.5), (2.0, 1.5), (0.5, 3.0)]
    ]
    n_after_first = len(calls)
    assert n_after_first == 3  # kernel, kernel diagonal, noise std: once each
    for p in pubs:
        p.kernel(XS1, X1)
        p.kernel_diag(XS1)
        p.predict(reg.y, XS1)
    assert len(calls) == n_after_first
    kernel_fn = reg._compiled["kernel"]
    reg.public_gp({"eta": 3.0, "ell": 0.2, "sigma": 1.0}).kernel(X1)
    assert reg._compiled["kernel"] is kernel_fn and len(calls) == n_after_first
    # Different hyperparameters give different kernels through the same function.
    assert not np.allclose(pubs[0].kernel(X1), pubs[1].kernel(X1))


def test_models_sharing_a_compiled_kernel_are_safe_across_threads() -> None:
    """Two models of one kernel structure share one compiled function (the structural cache);
    used from two threads at once, each still gets its own kernel matrices.  Before the
    shared function was made thread-safe, 2,000 calls per thread returned 2–4 wrong matrices
    (some built from the other thread's inputs and lengthscale) and raised 1–10 times."""
    import threading

    rng = np.random.default_rng(0)
    XA, XB = rng.uniform(0, 1, (60, 1)), rng.uniform(5, 6, (60, 1))
    pubs = [
        gp_regression(
            X, rng.normal(size=60), pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=0.5, mean_is_public=True
        ).public_gp()
        for X, ls in ((XA, 0.3), (XB, 0.7))
    ]
    assert pubs[0]._kernel.fn.fn is pubs[1]._kernel.fn.fn  # one shared compiled function
    refs = [p._kernel(X, X).copy() for p, X in zip(pubs, (XA, XB), strict=True)]
    bad = [0, 0]

    def run(i: int, X: np.ndarray) -> None:
        for _ in range(1500):
            try:
                if not np.array_equal(pubs[i]._kernel(X, X), refs[i]):
                    bad[i] += 1
            except Exception:  # noqa: BLE001 - a race shows as an exception too
                bad[i] += 1

    threads = [threading.Thread(target=run, args=(i, X)) for i, X in enumerate((XA, XB))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [0, 0]


# ------------------------------------------------------------------ input validation
@pytest.mark.parametrize(
    ("X", "y", "match"),
    [
        (np.where(np.arange(14) == 3, np.nan, X1), Y1, "X contains"),
        (X1, np.where(np.arange(14) == 5, np.inf, Y1), "y contains"),
        (X1[:-1], Y1, "same number of rows"),
        (X1, Y1[:, None], "1-dimensional"),
        (np.ones((14, 2, 2)), Y1, "2-dimensional"),
    ],
)
def test_bad_data(X: np.ndarray, y: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)


def test_bad_arguments() -> None:
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with pytest.raises(ValueError, match="input_dim"):
        gp_regression(X2, Y2, cov, noise_sd=0.3)
    with pytest.raises(ValueError, match="noise_sd"):
        gp_regression(X1, Y1, cov, noise_sd=-1.0)
    with pytest.raises(ValueError, match="noise_sd"):
        gp_regression(X1, Y1, cov, noise_sd=float("nan"))
    with pytest.raises(ValueError, match="mean"):
        gp_regression(X1, Y1, cov, noise_sd=0.3, mean=float("nan"))
    with pytest.raises(TypeError, match="cov_func"):
        gp_regression(X1, Y1, "ExpQuad", noise_sd=0.3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cov_func"):
        gp_regression(X1, Y1, lambda: 3.0, noise_sd=0.3)  # type: ignore[arg-type, return-value]
    pub = _fixed_1d().public
    with pytest.raises(ValueError, match="column"):
        pub.kernel(XS2)
    with pytest.raises(ValueError, match="length 14"):
        pub.predict(Y1[:-1], XS1)


def test_prior_mean_from_private_data_is_caught_by_the_owners_check_only() -> None:
    """The builder never compares the mean with y (docs/errors.md); the owner's check does."""
    from pm_dpgp.audit import DataDerivedChoiceError, check_public_choices

    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    reg = gp_regression(X1, Y1, cov, noise_sd=0.3, mean=float(np.mean(Y1)))
    assert reg.mean == pytest.approx(np.mean(Y1))
    with pytest.raises(DataDerivedChoiceError, match="mean of the private y"):
        check_public_choices(X1, Y1, mean=float(np.mean(Y1)))
    with pytest.raises(DataDerivedChoiceError, match="median"):
        check_public_choices(X1, Y1, mean=float(np.median(Y1)))
    check_public_choices(X1, Y1, mean=float(np.mean(Y1)) + 1.0)
