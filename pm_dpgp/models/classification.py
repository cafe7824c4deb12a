r"""PyMC builder for binary GP classification, and its public (fixed-hyperparameter) view.

``gp_classification`` builds the ordinary PyMC model

.. math::

    f \sim \mathcal{GP}(\mu, k_\theta), \qquad t_i \mid f \sim \mathrm{Bernoulli}(\sigma(f(x_i))),

with ``pymc.gp.Latent`` and a Bernoulli likelihood on the logit scale (Rasmussen &
Williams 2006, §3.3; Smith, Álvarez & Lawrence 2021, §4), so the data owner can sample it
non-privately with NUTS.  Privacy model: label privacy, the inputs ``X`` are public and the
labels ``t`` private; hyperparameters must be public exactly as for
``pm_dpgp.models.gp_regression`` (``pm_dpgp.models.PrivateHyperparameterError``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from numpy.typing import ArrayLike, NDArray

from pm_dpgp.gp.laplace import LaplaceState, laplace_mode
from pm_dpgp.models._common import (
    CovarianceSpec,
    HyperValue,
    PublicInputsView,
    PublicKernel,
    _builder_inputs,
    _check_kernel,
    _check_name_and_mean,
    _describe_cov,
    _format_value,
    _model_fields,
    _readonly,
    _resolve_cov,
    remember_arguments,
    resolve_model,
    view_inputs,
)
from pm_dpgp.models.exact import GPRegression
from pm_dpgp.models.hyperparameters import CALLER_DECLARED, hyperparameter_source

__all__ = ["GPClassification", "PublicLatentGP", "binary_labels", "gp_classification"]


def binary_labels(t: ArrayLike) -> NDArray[np.float64]:
    """The 0/1 labels every view of a classification model uses: ``rint(clip(t, 0, 1))``.

    The PyMC model's Bernoulli, the owner's ``laplace``/``predict`` and the release all see the
    same labels (stop-32 audit: {−1, +1} labels gave the PyMC model {0, 1} but ``laplace`` the
    raw −1, latent means of −12.7 against −1.96).  Record-wise and silent: a refusal that
    depended on the values would leak them.  NaN maps to 0, +inf to 1 and −inf to 0 (clipped).
    """
    arr = np.asarray(t, dtype=np.float64)
    return np.rint(np.clip(np.nan_to_num(arr, nan=0.0), 0.0, 1.0))


@dataclass(frozen=True, eq=False)
class PublicLatentGP(PublicInputsView):
    """A latent GP prior whose every ingredient is public (inputs, kernel, constant mean).

    Produced by ``GPClassification.public_gp``; it never stores the labels.
    """

    X: NDArray[np.float64] = field(repr=False)
    mean: float
    hyperparameters: dict[str, HyperValue]
    description: str
    _kernel: Callable[..., NDArray[np.float64]] = field(repr=False)
    _kernel_diag: Callable[..., NDArray[np.float64]] = field(repr=False)
    #: where the hyperparameter values came from (``models.hyperparameter_source``)
    hyperparameter_source: str = CALLER_DECLARED
    #: the model's input column names (a ``DataFrame``'s; public: the schema), or None
    _input_columns: tuple[str, ...] | None = field(default=None, repr=False)

    def __getattr__(self, name: str) -> Any:
        # Only reached for missing attributes: a regression mechanism given a classification
        # model (e.g. cloaked_release asking for ``posterior`` or ``noise_var``) gets a clear
        # message instead of a bare AttributeError.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"a PublicLatentGP (binary GP classification) has no {name!r}; regression "
            "mechanisms do not apply to it: use pm_dpgp.mechanisms.classification_release."
        )

    @functools.cached_property
    def K(self) -> NDArray[np.float64]:
        """``k(X, X)`` (cached, read-only)."""
        return _readonly(self.kernel(self.X))

    def laplace(self, t: ArrayLike, *, max_iter: int = 100, tol: float = 1e-10) -> LaplaceState:
        """NON-private Laplace approximation (R&W Alg. 3.1) for the labels ``t`` (mapped by
        ``binary_labels`` as the model and the release map them): the data owner's own view, a
        function of the private labels; never release it as is."""
        return laplace_mode(self.K, binary_labels(t), mean=self.mean, max_iter=max_iter, tol=tol)

    def predict(
        self, t: ArrayLike, X_star: ArrayLike, *, max_iter: int = 100
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """NON-private latent mean and variance at ``X_star`` at the Laplace mode (R&W Alg. 3.2).

        Warns (``RuntimeWarning``) when the Newton iteration did not converge within
        ``max_iter`` steps: the returned values are then at the last iterate, not the mode.
        """
        Xs = view_inputs(self, X_star)
        state = self.laplace(t, max_iter=max_iter)
        if not state.converged:
            warnings.warn(
                f"the Laplace Newton iteration did not converge in max_iter={max_iter} steps; "
                "the predictions are at the last iterate, not the posterior mode (raise "
                "max_iter, or check laplace(t).converged).",
                RuntimeWarning,
                stacklevel=2,
            )
        return state.predict(self.kernel(Xs, self.X), self.kernel_diag(Xs), mean=self.mean)


@dataclass(eq=False)
class GPClassification(GPRegression):
    """A binary GP classification model in PyMC (``pm.gp.Latent`` + Bernoulli likelihood).

    Returned by ``gp_classification``.  ``y`` holds the private labels (0/1), ``gp`` the
    ``pymc.gp.Latent``, ``sigma`` is ``None`` (no observation noise).  Use ``model`` for
    non-private inference and ``public_gp`` for releases.
    """

    def public_cloaking(self, hyperparameters: Mapping[str, ArrayLike] | None = None) -> Any:
        """Refused: the regression cloaking does not apply to binary labels (the
        ``AttributeError`` of the latent view was the only message; stop-42 audit)."""
        raise TypeError(
            "a binary GP classification model has no regression cloaking: use "
            "pm_dpgp.mechanisms.classification_release (Smith et al. 2021, §4). Nothing was "
            "spent or drawn."
        )

    def public_gp(self, hyperparameters: Mapping[str, ArrayLike] | None = None) -> PublicLatentGP:  # type: ignore[override]
        """The latent prior at fixed public hyperparameters (see
        ``GPRegression.public_gp`` for the rules on ``hyperparameters``)."""
        self.input_dim  # noqa: B018 - refuses inputs whose width is no longer the kernel's
        values = self._check_hyperparameters(hyperparameters)
        args = tuple(values[nm] for nm in self.hyperparameter_names)
        if self._cov_description is None:
            mapping = dict(zip(self._hyper_rvs, self._hyper_inputs, strict=True))
            self._cov_description = _describe_cov(self.cov_func, mapping)
        hyper = ", ".join(f"{nm}={_format_value(v)}" for nm, v in values.items())
        description = (
            f"kernel: {self._cov_description}"
            + (f"; public hyperparameters: {hyper}" if hyper else "")
            + f"; likelihood: Bernoulli(logit); prior mean: {self.mean:.6g}"
        )
        public = PublicLatentGP(
            X=_readonly(self.X),
            mean=self.mean,
            hyperparameters=values,
            description=description,
            _kernel=PublicKernel(self._function("kernel"), args),
            _kernel_diag=PublicKernel(self._function("diag"), args, diag=True),
            hyperparameter_source=hyperparameter_source(hyperparameters, self.hyperparameter_names),
            _input_columns=getattr(self, "_input_columns", None),
        )
        public.kernel_diag(self.X[:1])  # fail early on broken hyperparameters
        return public


def gp_classification(
    X: ArrayLike,
    y: ArrayLike,
    cov_func: CovarianceSpec,
    *,
    mean: float = 0.0,
    name: str = "f",
    model: pm.Model | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
) -> GPClassification:
    r"""Build a binary GP classifier in PyMC: ``pm.gp.Latent`` and ``pm.Bernoulli(logit_p=f)``.

    Parameters
    ----------
    X
        Public inputs, ``(n,)`` or ``(n, d)``.
    y
        Private labels, ``(n,)``, values 0 or 1 (booleans are accepted).  They are not
        inspected beyond shape and finiteness here; the model, ``laplace`` and the release all
        map them by ``binary_labels`` (clip to ``[0, 1]``, round) silently (a refusal that
        depended on the values would leak them): {−1, 1} works, 1-based {1, 2} does not.
    cov_func
        A PyMC covariance, or a zero-argument callable returning one (may declare priors).
    mean
        Public constant prior mean of the latent function (e.g. the logit of a public base
        rate); never computed from ``y``.
    name
        Prefix: the latent variable is ``name`` and the likelihood ``f"{name}_obs"``.
    model
        Existing model to add to; default the model of the enclosing ``with pm.Model():``
        block, else a new ``pm.Model()`` (never a silently nested child model).
    coords
        Coordinates added to the model (``model.add_coords``), PyMC-style.
    """
    # pm.Data containers enter the graph and the model object as containers, so pm.set_data
    # reaches the PyMC model and later releases alike (as for gp_regression); the Bernoulli
    # needs 0/1 values: the clipped, rounded labels (a graph expression for a container)
    data = _builder_inputs(X, y, per_row="label")
    mean_f = _check_name_and_mean(name, mean)
    ctx = resolve_model(model, coords)
    with ctx:
        cov = _resolve_cov(cov_func)
        _check_kernel(cov, data.X.shape[1], "X")
        gp = pm.gp.Latent(mean_func=pm.gp.mean.Constant(mean_f), cov_func=cov)
        f = gp.prior(name, X=data.X_graph)
        if data.y_graph is data.y:
            observed = binary_labels(data.y)
        else:
            observed = pt.round(pt.clip(data.y_graph, 0, 1))
        pm.Bernoulli(f"{name}_obs", logit_p=f, observed=observed)
    return remember_arguments(
        GPClassification(
            **_model_fields(
                ctx,
                gp,
                data.X_stored,
                data.y_stored,
                name=name,
                mean=mean_f,
                cov=cov,
                noise_sd=None,
            )
        ),
        X,
        y,
    )
