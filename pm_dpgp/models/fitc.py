r"""PyMC builder for FITC sparse GP regression under LABEL privacy (Smith et al. 2021, §3.2).

``fitc_gp_regression`` builds an ordinary PyMC model on
``pm.gp.MarginalApprox(approx="FITC")`` (Snelson & Ghahramani 2006), so the data owner can
fit or sample it as usual, and ``FITCRegression.public_cloaking`` gives the
``PublicFITC`` view that ``pm_dpgp.mechanisms.label.cloaking_release.cloaked_release``
consumes: the FITC cloaking matrix ``C = k_*M Q_MM⁻¹ K_MN (Λ + σ² I)⁻¹`` (eq. 9) as a
low-rank operator, never an ``n × n`` matrix (``pm_dpgp.gp.fitc``).

Privacy model: label privacy — the training inputs ``X`` are public, the outputs ``y``
private.  The inducing inputs ``Z`` must not depend on ``y``.  Smith et al. (2021, §3.2)
place them by k-means on the (public) inputs, which "only requires data from the inputs":
``kmeans_public_inducing`` runs SciPy's ``kmeans2`` (k-means++ initialisation, Arthur &
Vassilvitskii 2007) with a recorded seed; the seed and ``Z`` go into every release's
metadata.  Optimising ``Z`` by the marginal likelihood would use ``y`` and is not offered.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
from numpy.typing import ArrayLike, NDArray
from pymc.gp.util import JITTER_DEFAULT
from scipy.cluster.vq import kmeans2

from pm_dpgp._validation import check_finite_array, check_positive
from pm_dpgp.gp.fitc import FITCPosterior
from pm_dpgp.gp.linalg import unit_scaled
from pm_dpgp.gp.operators import LowRankOperator
from pm_dpgp.models._common import (
    CovarianceSpec,
    NoiseSpec,
    _as_2d_inputs,
    _builder_inputs,
    _check_name_and_mean,
    _model_fields,
    _noise_sd_argument,
    _readonly,
    _resolve_cov_and_sigma,
    check_input_columns,
    remember_arguments,
    resolve_model,
    view_inputs,
)
from pm_dpgp.models.exact import GPRegression, PublicGP

__all__ = ["FITCRegression", "PublicFITC", "fitc_gp_regression", "kmeans_public_inducing"]


def kmeans_public_inducing(
    X_public: ArrayLike, n_inducing: int, *, seed: int, n_init: int = 10
) -> NDArray[np.float64]:
    """``n_inducing`` k-means centres of PUBLIC inputs (SciPy ``kmeans2``, k-means++, ``seed``).

    Smith et al. (2021, §3.2): under label privacy the training inputs are public, so their
    k-means centres may be released.  Lloyd's algorithm finds a local optimum only, so it is
    run from ``n_init`` k-means++ starts (seeds drawn from ``numpy.random.default_rng(seed)``)
    and the centres with the smallest within-cluster sum of squares are kept (as
    scikit-learn's ``KMeans(n_init=10)`` does).  Deterministic for a given ``seed`` (an int,
    recorded in the release).  Run on ``X`` scaled by a power of two (``unit_scaled``): the
    same centres, bit for bit, for inputs of ordinary magnitude, and the scaled centres for
    inputs whose squared distances over- or underflow.  Raises ``ValueError`` if the inputs
    have fewer distinct rows than ``n_inducing`` (before any k-means run) or the centres are
    not distinct.
    """
    X = check_finite_array(X_public, "X_public", ndim=2)
    if isinstance(n_inducing, bool) or not isinstance(n_inducing, numbers.Integral):
        raise ValueError(f"n_inducing must be a positive integer, got {n_inducing!r}.")
    if not 1 <= n_inducing <= X.shape[0]:
        raise ValueError(
            f"n_inducing must be in 1 … {X.shape[0]} (number of inputs), got {n_inducing}."
        )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be an integer (it is recorded in the release), got {seed!r}.")
    if isinstance(n_init, bool) or not isinstance(n_init, numbers.Integral) or n_init < 1:
        raise ValueError(f"n_init must be a positive integer, got {n_init!r}.")
    distinct = np.unique(X, axis=0).shape[0]
    if distinct < n_inducing:
        # k-means++ then divides by a zero total distance (SciPy's RuntimeWarning, NaN
        # probabilities) and every start ends with coinciding centres: refused before any run
        raise ValueError(
            f"the inputs have {distinct} distinct rows, fewer than n_inducing={n_inducing}: "
            "k-means would give coinciding centres; use fewer inducing inputs or give Z."
        )
    starts = np.random.default_rng(int(seed)).integers(0, 2**32, size=int(n_init))
    # on X · 2⁻ᵉ (max |entry| in [0.5, 1)): the same centres, scaled exactly, without the
    # overflow (a segfault in kmeans2 at 1e160) or underflow (coinciding centres at 1e-200)
    # of X's own squared distances (stop-48 audit; ``unit_scaled``)
    Xs, e = unit_scaled(X)
    best, best_ss = None, np.inf
    for start in starts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "one of the clusters is empty"
            centres, label = kmeans2(Xs, int(n_inducing), minit="++", seed=int(start))
        ss = float(np.sum((Xs - centres[label]) ** 2))
        if ss < best_ss:
            best, best_ss = centres, ss
    Z = np.ldexp(best, e)
    if np.unique(Z, axis=0).shape[0] != Z.shape[0]:
        raise ValueError(
            f"k-means gave coinciding centres for n_inducing={n_inducing}; use fewer inducing "
            "inputs or give Z."
        )
    return np.ascontiguousarray(Z, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class PublicFITC:
    """The FITC model at public hyperparameters: what the cloaked release needs, no ``y``.

    Delegates kernel, noise, prior mean and inputs to the exact public view ``exact`` (whose
    ``n × n`` posterior is never computed) and adds the public inducing inputs ``Z``.
    """

    exact: PublicGP = field(repr=False)
    Z: NDArray[np.float64] = field(repr=False)
    jitter: float
    inducing: dict[str, Any]

    @property
    def X(self) -> NDArray[np.float64]:
        return self.exact.X

    @property
    def _input_columns(self) -> tuple[str, ...] | None:
        return self.exact._input_columns

    @property
    def n(self) -> int:
        return self.exact.n

    @property
    def input_dim(self) -> int:
        return self.exact.input_dim

    @property
    def mean(self) -> float:
        return self.exact.mean

    @property
    def noise_var(self) -> float:
        return self.exact.noise_var

    @property
    def hyperparameters(self) -> dict[str, Any]:
        return self.exact.hyperparameters

    @property
    def hyperparameter_source(self) -> str:
        return self.exact.hyperparameter_source

    @property
    def description(self) -> str:
        return (
            f"{self.exact.description}; FITC sparse approximation with {self.Z.shape[0]} "
            f"public inducing inputs ({self.inducing['method']}); K_MM jitter: {self.jitter:g}"
        )

    def kernel(self, Xa: ArrayLike, Xb: ArrayLike | None = None) -> NDArray[np.float64]:
        return self.exact.kernel(Xa, Xb)

    def kernel_diag(self, Xa: ArrayLike) -> NDArray[np.float64]:
        return self.exact.kernel_diag(Xa)

    @functools.cached_property
    def _fitc(self) -> FITCPosterior:
        X = self.exact.X
        return FITCPosterior(
            self.kernel(self.Z),
            self.kernel(self.Z, X),
            self.kernel_diag(X),
            self.noise_var,
            jitter=self.jitter,
        )

    def posterior(self) -> FITCPosterior:
        """Cached FITC factorisation (``pm_dpgp.gp.fitc.FITCPosterior``)."""
        return self._fitc

    def cloaking_operator(self, X_star: ArrayLike) -> LowRankOperator:
        """FITC cloaking matrix ``C = k_*M Q_MM⁻¹ K_MN (Λ + σ²I)⁻¹`` (Smith et al. 2021, §3.2)."""
        Xs = view_inputs(self, X_star)
        return self._fitc.cloaking_operator(self.kernel(self.Z, Xs))

    def cloaking_metadata(self) -> dict[str, Any]:
        """Public facts of the approximation recorded in the release (``Z``, its seed, jitter)."""
        return {
            "approximation": "FITC",
            "inducing_inputs": self.Z.tolist(),
            "n_inducing": int(self.Z.shape[0]),
            "inducing_method": self.inducing["method"],
            "inducing_seed": self.inducing.get("seed"),
            "kmm_jitter": self._fitc.jitter,
        }

    def predict(
        self, y: ArrayLike, X_star: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """NON-private FITC posterior mean and latent variance at ``X_star`` (eq. 9)."""
        Xs = view_inputs(self, X_star)
        K_Ms = self.kernel(self.Z, Xs)
        post = self._fitc
        return post.mean(K_Ms, y, prior_mean=self.mean), post.var(K_Ms, self.kernel_diag(Xs))


@dataclass(eq=False)
class FITCRegression(GPRegression):
    """A FITC GP regression model in PyMC (``gp`` is ``pm.gp.MarginalApprox(approx="FITC")``).

    Returned by ``fitc_gp_regression``.  ``public_cloaking`` gives the
    ``PublicFITC`` view used by the cloaked release; ``public_gp`` still gives the
    exact view (for mechanisms that need the exact GP).
    """

    Z: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 1)), repr=False)
    jitter: float = JITTER_DEFAULT
    inducing: dict[str, Any] = field(default_factory=dict)

    def public_cloaking(self, hyperparameters: Mapping[str, ArrayLike] | None = None) -> PublicFITC:
        """The FITC model at public hyperparameters (see ``GPRegression.public_gp``)."""
        return PublicFITC(
            exact=self.public_gp(hyperparameters),
            Z=_readonly(self.Z),
            jitter=float(self.jitter),
            inducing=dict(self.inducing),
        )


def fitc_gp_regression(
    X: ArrayLike,
    y: ArrayLike,
    cov_func: CovarianceSpec,
    *,
    noise_sd: NoiseSpec = None,
    Z: ArrayLike | None = None,
    n_inducing: int | None = None,
    seed: int | None = None,
    mean: float = 0.0,
    name: str = "f",
    model: pm.Model | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
    jitter: float = JITTER_DEFAULT,
    **deprecated: Any,
) -> FITCRegression:
    r"""Build a FITC sparse GP regression model in PyMC (label privacy: ``X`` public).

    ``pm.gp.MarginalApprox(approx="FITC", mean_func=Constant(mean), cov_func=…)`` with
    ``gp.marginal_likelihood(f"{name}_obs", X, Xu=Z, y, sigma, jitter)`` (Snelson &
    Ghahramani 2006; Smith et al. 2021, §3.2, eq. 9).

    Parameters
    ----------
    X, y
        Public inputs ``(n,)``/``(n, d)`` and private outputs ``(n,)``.
    cov_func, noise_sd, mean, name, model, coords
        As in ``pm_dpgp.models.gp_regression``.
    Z
        Public inducing inputs ``(M,)``/``(M, d)`` (a ``DataFrame`` with ``X``'s columns in
        ``X``'s order); or give ``n_inducing`` and ``seed`` to
        place them by k-means on the public ``X`` (``kmeans_public_inducing``).
    jitter
        Added to ``K_MM`` (PyMC's default 1e-6); the release factorises the same matrix.
    """
    noise_sd = _noise_sd_argument(noise_sd, deprecated, "fitc_gp_regression")
    data = _builder_inputs(X, y)
    X_arr = data.X
    if Z is None:
        if n_inducing is None or seed is None:
            raise ValueError(
                "give the public inducing inputs Z, or n_inducing and seed for k-means on the "
                "public inputs X (Smith et al. 2021, §3.2)."
            )
        Z_arr = kmeans_public_inducing(X_arr, n_inducing, seed=seed)
        # placed once, on the inputs given at build time: a later pm.set_data(X=...) keeps Z
        # (the model's inducing inputs), and the metadata says so
        inducing: dict[str, Any] = {
            "method": "kmeans2 on the public inputs at build time",
            "seed": int(seed),
        }
    else:
        if n_inducing is not None or seed is not None:
            raise ValueError("give either Z or (n_inducing, seed), not both.")
        # a DataFrame Z is read by position, like X_star: columns in another order than X's
        # were inducing inputs elsewhere, silently (stop-47 audit)
        check_input_columns(Z, (X, y), "Z")
        Z_arr = _as_2d_inputs(Z, "Z", X_arr.shape[1])
        inducing = {"method": "given", "seed": None}
    mean_f = _check_name_and_mean(name, mean)
    jitter = check_positive(jitter, "jitter", allow_zero=True)
    ctx = resolve_model(model, coords)
    with ctx:
        cov, sig = _resolve_cov_and_sigma(cov_func, noise_sd, X_arr.shape[1], "X")
        gp = pm.gp.MarginalApprox(
            approx="FITC", mean_func=pm.gp.mean.Constant(mean_f), cov_func=cov
        )
        gp.marginal_likelihood(
            f"{name}_obs", X=data.X_graph, Xu=Z_arr, y=data.y_graph, sigma=sig, jitter=jitter
        )
    return remember_arguments(
        FITCRegression(
            **_model_fields(
                ctx, gp, data.X_stored, data.y_stored, name=name, mean=mean_f, cov=cov, noise_sd=sig
            ),
            Z=Z_arr,
            jitter=jitter,
            inducing=inducing,
        ),
        X,
        y,
    )
