r"""PyMC model builder for exact GP regression, and its public (fixed-hyperparameter) view.

``gp_regression`` builds an ordinary PyMC model

.. math::

    f \sim \mathcal{GP}(m, k_\theta), \qquad y_i = f(x_i) + \varepsilon_i,\quad
    \varepsilon_i \sim \mathcal N(0, \sigma_n^2),

with ``pymc.gp.Marginal`` (Rasmussen & Williams 2006, *Gaussian Processes for
Machine Learning*, §2.2 and eq. 2.30), so the data owner can sample or fit it
non-privately as usual.

Privacy model (label privacy, Smith, Álvarez, Zwiessele & Lawrence 2018, AISTATS):
the inputs ``X`` are public, the outputs ``y`` are private.  Everything a
mechanism uses besides ``y`` (kernel hyperparameters θ, noise variance σ_n², the
prior mean ``m``) must be *public*: fixed a priori or chosen by a private
selection mechanism.  Hyperparameters fitted to the private ``y`` (MAP,
posterior draws, type-II maximum likelihood) are functions of ``y`` and using
them as if public leaks privacy.  ``GPRegression.public_gp`` therefore
refuses to produce a ``PublicGP`` unless every free hyperparameter is given
an explicit public value.

The kernel is evaluated at those public values *through PyTensor*: the
hyperparameter random variables in the PyMC covariance graph are replaced by
scalar inputs (``pytensor.graph.replace.clone_replace``) and one
``pytensor.function([Xa, Xb, *hyperparameters], K)`` is compiled per model and
reused, so the numbers are exactly those PyMC's own ``gp.predict`` would use.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from numpy.typing import ArrayLike, NDArray
from pymc.distributions.distribution import SymbolicRandomVariable
from pymc.gp.cov import BaseCovariance
from pytensor.graph.basic import Variable, equal_computations
from pytensor.graph.replace import clone_replace
from pytensor.tensor.random.op import RandomVariable

try:  # pytensor >= 2.31
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover - older pytensor
    from pytensor.graph.basic import ancestors

from pm_dpgp._ieee import ieee_function
from pm_dpgp._validation import check_positive, public_real_array
from pm_dpgp.gp.exact import ExactPosterior
from pm_dpgp.gp.operators import CloakingOperator
from pm_dpgp.models._common import (
    BoundFunction,
    CovarianceSpec,
    HyperValue,
    NoiseSpec,
    PublicInputsView,
    PublicKernel,
    ThreadSafeFunction,
    _builder_inputs,
    _check_name_and_mean,
    _describe_cov,
    _format_value,
    _model_fields,
    _noise_sd_argument,
    _readonly,
    _resolve_cov_and_sigma,
    current_data,
    hoist_float_constants,
    remember_arguments,
    resolve_model,
    stored_input_dim,
    stored_value,
    view_inputs,
)
from pm_dpgp.models.hyperparameters import (
    CALLER_DECLARED,
    PublicHyperparameters,
    hyperparameter_source,
)

__all__ = ["PrivateHyperparameterError", "GPRegression", "PublicGP", "gp_regression"]


class PrivateHyperparameterError(ValueError):
    """A hyperparameter needed for a private release has no public value.

    Raised when a model has hyperparameters with priors (free random variables)
    and no public value was given for one of them.  Values fitted to the private
    data are not public.
    """


# --------------------------------------------------------------------------- helpers
def _is_random(var: Variable) -> bool:
    return var.owner is not None and isinstance(
        var.owner.op, (RandomVariable, SymbolicRandomVariable)
    )


def _support_bounds(model: pm.Model, rv: Variable) -> tuple[float, float]:
    """Closed support ``[lower, upper]`` of a free RV where its transform tells it.

    Log-type transforms mean ``[0, ∞)``, log-odds ``[0, 1]``, interval transforms
    give their (constant) bounds; anything else is unchecked (``(-∞, ∞)``).
    """
    from pymc.logprob import transforms as tr

    transform = model.rvs_to_transforms.get(rv)
    lower, upper = -math.inf, math.inf
    if transform is None:
        return lower, upper
    if isinstance(transform, (tr.LogTransform, pm.distributions.transforms.LogExpM1)):
        return 0.0, math.inf
    if isinstance(transform, tr.LogOddsTransform):
        return 0.0, 1.0
    if isinstance(transform, tr.IntervalTransform):
        try:
            bounds = transform.args_fn(*rv.owner.inputs)
        except Exception:  # noqa: BLE001 - unknown transform signature: leave unchecked
            return lower, upper
        out = [lower, upper]
        for i, b in enumerate(bounds):
            if b is None:
                continue
            try:
                val = np.asarray(pt.get_underlying_scalar_constant_value(b), dtype=float)
            except Exception:  # noqa: BLE001 - bound depends on other RVs: unchecked
                continue
            out[i] = float(val)
        return out[0], out[1]
    return lower, upper


# --------------------------------------------------------------------------- PublicGP
@dataclass(frozen=True, eq=False)
class PublicGP(PublicInputsView):
    r"""A GP whose every ingredient except the outputs ``y`` is public.

    Produced by ``GPRegression.public_gp``.  Holds the public training inputs,
    the kernel evaluated at public hyperparameters, the noise variance and the
    public prior mean; it never stores ``y``.  Mechanisms take a ``PublicGP`` plus
    the private ``y``.

    Attributes
    ----------
    X : numpy.ndarray
        Training inputs, shape ``(n, d)`` (public under label privacy), read-only.
    noise_var : float
        Observation noise variance ``σ_n²``.
    mean : float
        Public constant prior mean ``m``.
    hyperparameters : dict
        Public hyperparameter values by free-RV name (floats; arrays for
        non-scalar hyperparameters such as ARD lengthscales).
    description : str
        Human-readable kernel, hyperparameters, noise variance and mean, for metadata.
    hyperparameter_source : str
        Where the hyperparameter values came from (``models.hyperparameter_source``): a
        charged private selection, a declared-public fit, or the caller's declaration.
    """

    X: NDArray[np.float64] = field(repr=False)
    noise_var: float
    mean: float
    hyperparameters: dict[str, HyperValue]
    description: str
    _kernel: Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]] = field(
        repr=False
    )
    _kernel_diag: Callable[[NDArray[np.float64]], NDArray[np.float64]] = field(repr=False)
    hyperparameter_source: str = CALLER_DECLARED
    #: the model's input column names (a ``DataFrame``'s; public: the schema), or None
    _input_columns: tuple[str, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # The same check as the builder's ``sigma`` (issue 15, point 3): a noise variance of 0
        # reaches a mechanism by no path (builder, hyperparameter dict, direct construction).
        object.__setattr__(
            self, "noise_var", check_positive(self.noise_var, "noise variance (sigma**2)")
        )

    @functools.cached_property
    def _posterior(self) -> ExactPosterior:
        # The kernel matrix is evaluated, symmetrised in place and checked finite (one pass
        # each, ``kernel``), then factorised in its own memory: one n×n matrix at a time.
        return ExactPosterior(self.kernel(self.X), self.noise_var, overwrite_K=True, validated=True)

    def posterior(self) -> ExactPosterior:
        """Cached factorisation of ``k(X, X) + σ_n² I`` (``ExactPosterior``).

        Its ``jitter`` attribute is the jitter actually added (0.0 if none).
        """
        return self._posterior

    def cloaking_matrix(self, X_star: ArrayLike) -> NDArray[np.float64]:
        """Cloaking matrix ``C = k(X*, X)(k(X, X) + σ_n² I)⁻¹`` (Smith et al. 2018, §3)."""
        Xs = view_inputs(self, X_star)
        return self.posterior().cloaking_matrix(self.kernel(Xs, self.X))

    def cloaking_operator(self, X_star: ArrayLike) -> CloakingOperator:
        """``C = k(X*, X)(k(X, X) + σ_n² I)⁻¹`` as an operator (one ``n × n`` Cholesky factor)."""
        Xs = view_inputs(self, X_star)
        # K_sf in Fortran order (the transpose of k(X, X*)): the range finder's sparse sketch
        # reads K_fs row by row
        return CloakingOperator(self.kernel(self.X, Xs).T, self.posterior().L)

    def cloaking_metadata(self) -> dict[str, Any]:
        """Extra public facts for a label release of the exact GP (cloaking, prior noise):
        the jitter added to ``k(X, X) + σ_n² I`` by its factorisation (0.0 unless it failed;
        public under label privacy, where ``X`` is public) and ``inputs_fingerprint``."""
        return {"jitter": float(self.posterior().jitter), **self.inputs_fingerprint()}

    def inputs_fingerprint(self) -> dict[str, Any]:
        """What ties a label release to these training inputs and this kernel *function*:
        the SHA-256 of the inputs (public under label privacy) and the kernel matrix at the
        first (up to) eight of them.  The kernel description alone does not identify the
        function (a ``ScaledCov`` or Gibbs lengthscale function is described by its class),
        and ``pm.set_data`` can move the inputs after a release; ``release_posterior``
        compares both (stop-35 review: either gave a wrong posterior without an error)."""
        X = np.ascontiguousarray(self.X, dtype=np.float64)
        digest = hashlib.sha256(str(X.shape).encode() + X.tobytes()).hexdigest()
        return {"training_inputs_sha256": digest, "kernel_probe": self.kernel(X[:8]).tolist()}

    def predict(
        self, y: ArrayLike, X_star: ArrayLike, *, full_cov: bool = True
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        r"""NON-private exact posterior of ``f(X*)`` given ``y`` (R&W 2006, eqs. 2.23–2.24).

        Mean ``m + C (y − m)`` and covariance ``k(X*, X*) − k(X*, X)(K + σ_n² I)⁻¹ k(X, X*)``
        (latent function, no observation noise).  This is the data owner's own
        view: it is a function of the private ``y`` and must not be released as is.

        Returns ``(mean, cov)`` with ``cov`` of shape ``(m, m)``, or ``(mean, var)``
        with ``var`` of shape ``(m,)`` when ``full_cov=False``.
        """
        Xs = view_inputs(self, X_star)
        post = self.posterior()
        K_sf = self.kernel(Xs, self.X)
        mu = post.mean(K_sf, y, mean_f=self.mean, mean_s=self.mean)
        if full_cov:
            return mu, post.cov(K_sf, self.kernel(Xs))
        return mu, post.var(K_sf, self.kernel_diag(Xs))

    def posterior_var(self, X_star: ArrayLike) -> NDArray[np.float64]:
        r"""``(m,)`` posterior variance of the latent ``f(X*)`` (R&W 2006, eq. 2.24, diagonal):
        ``k(x, x) − k(x, X)(K + σ_n² I)⁻¹ k(X, x)``.  It depends on the inputs and the
        hyperparameters only, not on ``y``, so under label privacy it is public: pass its
        square root as ``dp_ppc(extra_sd=…)`` (``docs/workflow.md``)."""
        Xs = view_inputs(self, X_star)
        return self.posterior().var(self.kernel(Xs, self.X), self.kernel_diag(Xs))


# --------------------------------------------------------------------------- compile cache
#: Compiled kernel functions of this process, with the graphs they were compiled from.  With
#: the float constants hoisted to inputs (``hoist_float_constants``), kernels of the same
#: structure — a new model with other data or other fixed hyperparameters — are the same
#: graph, and reuse one compiled function instead of compiling again (≈ 1–3 s each).
_COMPILED: list[tuple[list[Variable], Variable, Any]] = []
_COMPILED_MAX = 64


def _compiled_like(inputs: list[Variable], out: Variable) -> Any | None:
    """A compiled function of a graph equal to ``out`` over ``inputs`` (same types), if any."""
    for cached_inputs, cached_out, compiled in reversed(_COMPILED):
        if len(cached_inputs) == len(inputs) and all(
            a.type == b.type for a, b in zip(cached_inputs, inputs, strict=True)
        ):
            if equal_computations([out], [cached_out], in_xs=inputs, in_ys=cached_inputs):
                return compiled
    return None


# --------------------------------------------------------------------------- GPRegression
@dataclass(eq=False)
class GPRegression:
    """An exact GP regression model in PyMC plus the machinery to evaluate it publicly.

    Returned by ``gp_regression``.  Use ``model`` for ordinary (non-private)
    PyMC inference, and ``public_gp`` with public hyperparameter values to
    get the object that privacy mechanisms consume.

    Attributes
    ----------
    model : pymc.Model
    gp : pymc.gp.Marginal
    X : numpy.ndarray
        Public training inputs, shape ``(n, d)``.
    y : numpy.ndarray
        Private training outputs, shape ``(n,)`` (not shown in ``repr``).
    name : str
        Prefix of the model variables; the likelihood is ``f"{name}_obs"``.
    mean : float
        Public constant prior mean.
    cov_func : pymc.gp.cov.BaseCovariance
        The covariance (possibly depending on hyperparameter RVs).
    noise_sd : float or TensorVariable
        Observation-noise standard deviation (formerly ``sigma``).
    hyperparameter_names : tuple of str
        Names of the free RVs the kernel or the noise depend on (directly, i.e.
        not through another hyperparameter).
    """

    model: pm.Model
    gp: pm.gp.Marginal
    _X: Any = field(repr=False)  # array, or the pm.Data container of the inputs
    _y: Any = field(repr=False)  # array, or the pm.Data container of the outputs (private)
    name: str
    mean: float
    cov_func: BaseCovariance = field(repr=False)
    noise_sd: float | Variable
    hyperparameter_names: tuple[str, ...]
    _hyper_rvs: tuple[Variable, ...] = field(repr=False)
    _hyper_inputs: tuple[Variable, ...] = field(init=False, repr=False)
    _support: dict[str, tuple[float, float]] = field(init=False, repr=False)
    _compiled: dict[str, Any] = field(init=False, repr=False, default_factory=dict)
    # the kernel part of the description does not depend on the values: built once
    _cov_description: str | None = field(init=False, repr=False, default=None)

    @property
    def X(self) -> NDArray[np.float64]:
        """Training inputs ``(n, d)``: the current value of their ``pm.Data`` container, if any
        (so ``pm.set_data`` changes what a release uses as well as the PyMC model)."""
        return current_data(self._X, "X", 2)

    @property
    def y(self) -> NDArray[np.float64]:
        """Training outputs ``(n,)`` (private); the current value of their ``pm.Data`` container."""
        return current_data(self._y, "y", 1)

    @property
    def input_dim(self) -> int:
        """Number of input columns ``d``, from the shape of the inputs (or their ``pm.Data``
        container) only: no value is read or checked, so data-free planning
        (``public_gp_without_data``) never depends on the private inputs.

        Refuses inputs whose number of columns is no longer the kernel's: ``pm.set_data`` can
        give a ``pm.Data`` container more columns after the build, and the kernel (built for
        the old number) then ignored the new ones silently in every release (stop-46 audit).
        """
        d = stored_input_dim(self._X)
        k = getattr(self.cov_func, "input_dim", None)
        if k is not None and d != k:
            raise ValueError(
                f"the training inputs now have {d} column(s) but the kernel was built for {k} "
                "(pm.set_data changed the shape of their pm.Data container); build the model "
                "again for the new inputs. Nothing was spent or drawn."
            )
        return d

    def unchecked_data(self) -> tuple[Any, Any]:
        """``(X, y)`` as stored (the current values of their ``pm.Data`` containers), without
        the finiteness check of ``X``/``y``: for fully private mechanisms that read nothing
        but the schema before their spend and map non-finite records record-wise after it."""
        return stored_value(self._X), stored_value(self._y)

    @property
    def sigma(self) -> float | Variable:
        """Deprecated alias of ``noise_sd`` (removed in the next release)."""
        import warnings

        warnings.warn("GPRegression.sigma is renamed noise_sd.", DeprecationWarning, stacklevel=2)
        return self.noise_sd

    def __post_init__(self) -> None:
        self._hyper_inputs = tuple(rv.type(name=rv.name) for rv in self._hyper_rvs)
        self._support = {rv.name: _support_bounds(self.model, rv) for rv in self._hyper_rvs}

    def kernel_hyperparameter_names(self) -> tuple[str, ...]:
        """The hyperparameters the kernel ``k(·, ·)`` depends on, in ``hyperparameter_names`` order.

        Read from the symbolic graph of the covariance (the hyperparameters among its
        ancestors); the others (e.g. a free noise sd) do not enter ``k``, so two
        configurations that agree on these give the same kernel matrix, bit for bit (the same
        compiled function on the same inputs).  Public: depends on the model only.
        """
        Xa = pt.matrix("Xa", dtype="float64")
        [out] = self._replace([pt.as_tensor_variable(self.cov_func(Xa, Xa))])
        used = set(ancestors([out]))
        return tuple(
            nm
            for nm, var in zip(self.hyperparameter_names, self._hyper_inputs, strict=True)
            if var in used
        )

    # ------------------------------------------------------------ compilation
    def _replace(self, outputs: Sequence[Variable]) -> list[Variable]:
        mapping = dict(zip(self._hyper_rvs, self._hyper_inputs, strict=True))
        new = clone_replace(list(outputs), replace=mapping) if mapping else list(outputs)
        for var in ancestors(new):
            if _is_random(var):
                raise ValueError(
                    f"The covariance or noise depends on the random variable {var.name or var!r}, "
                    "which is not a free variable of this model; evaluating it would draw "
                    "random numbers. Declare hyperparameters inside the model (e.g. via the "
                    "zero-argument callable) or use fixed numbers."
                )
        return new

    def _function(self, key: str) -> Callable[..., Any]:
        """The compiled PyTensor function ``key`` ('kernel', 'diag' or 'noise'), compiled once."""
        fn = self._compiled.get(key)
        if fn is not None:
            return fn
        Xa = pt.matrix("Xa", dtype="float64")
        Xb = pt.matrix("Xb", dtype="float64")
        if key == "kernel":
            inputs, out = [Xa, Xb], self.cov_func(Xa, Xb)
        elif key == "diag":
            inputs, out = [Xa], self.cov_func(Xa, diag=True)
        elif key == "noise":
            inputs, out = [], pt.as_tensor_variable(self.noise_sd)
        else:  # pragma: no cover - internal misuse
            raise KeyError(key)
        [out] = self._replace([pt.as_tensor_variable(out)])
        out, const_inputs, const_values = hoist_float_constants(out)
        all_inputs = [*inputs, *self._hyper_inputs, *const_inputs]
        compiled = _compiled_like(all_inputs, out)
        if compiled is None:
            # shared by every model of this structure, so calls from several threads must
            # not share the function's storage: ThreadSafeFunction gives each thread its own
            compiled = ThreadSafeFunction(
                ieee_function(all_inputs, out, on_unused_input="ignore", allow_input_downcast=True)
            )
            _COMPILED.append((all_inputs, out, compiled))
            del _COMPILED[:-_COMPILED_MAX]
        fn = BoundFunction(compiled, const_values)
        self._compiled[key] = fn
        return fn

    # ------------------------------------------------------------ hyperparameters
    def _check_hyperparameters(
        self, hyperparameters: Mapping[str, ArrayLike] | None
    ) -> dict[str, HyperValue]:
        given: Mapping[str, ArrayLike] = {} if hyperparameters is None else hyperparameters
        names = self.hyperparameter_names
        if isinstance(given, PublicHyperparameters):
            given = given.restricted_to(names)  # declared public by the user: extras ignored
        if not isinstance(given, Mapping) or any(
            hasattr(given, a) for a in ("children", "data_vars", "groups")
        ):
            raise TypeError(
                "hyperparameters must be a mapping {name: value}, got "
                f"{type(hyperparameters).__name__}; for a PyMC result (find_MAP dict, "
                "idata.posterior) use pm_dpgp.models.public_hyperparameters(..., "
                "hyperparameters_are_public=True) once you know the values are public."
            )
        unknown = sorted(set(given) - set(names))
        if unknown and any(str(k).endswith("__") for k in unknown):
            raise ValueError(
                f"{unknown} look like a pm.find_MAP result (transformed variables). A MAP fit "
                "to the private data is not public. If it was fitted on public data, pass "
                "pm_dpgp.models.public_hyperparameters(map_estimate, "
                "hyperparameters_are_public=True)."
            )
        if unknown:
            expected = ", ".join(names) if names else "none (this model has fixed hyperparameters)"
            raise ValueError(
                f"Unknown hyperparameter name(s) {unknown}; this model's free hyperparameters "
                f"are: {expected}. Give values on the constrained scale under the RV's name."
            )
        missing = [nm for nm in names if nm not in given]
        if missing:
            raise PrivateHyperparameterError(
                f"No public value given for hyperparameter(s) {missing} (model hyperparameters: "
                f"{list(names)}). Hyperparameters fitted to the private data (MAP, posterior "
                "draws, maximum marginal likelihood) are functions of y and are NOT public: "
                "using them in a private release leaks information about y. Pass public "
                "values as hyperparameters={"
                + ", ".join(f"{nm!r}: ..." for nm in names)
                + "} (the argument of every release, plan and release_posterior; or a "
                "selection's result.hyperparameters), chosen a priori (domain knowledge, "
                "public or set-aside data) or by a differentially private selection mechanism "
                "whose cost is accounted for."
            )
        values: dict[str, HyperValue] = {}
        runtime_shapes: dict[str, Any] | None = None
        for rv in self._hyper_rvs:
            nm = rv.name
            # public values: booleans, text and complex numbers refused (stop-40 fuzz)
            arr = public_real_array(given[nm], f"Hyperparameter {nm!r}")
            if arr.ndim != rv.type.ndim:
                raise ValueError(
                    f"Hyperparameter {nm!r} must have {rv.type.ndim} dimension(s), got shape "
                    f"{arr.shape}."
                )
            static = rv.type.shape
            if None in static:
                # a shape given by dims= (or by another variable) is not static: read the
                # model's current one (public: the model's structure).  A wrong length failed
                # deep in PyTensor, quoting its input values, or was summed silently by a
                # kernel that reduces the vector (stop-46 audit)
                if runtime_shapes is None:
                    try:
                        runtime_shapes = self.model.eval_rv_shapes()
                    except Exception:  # noqa: BLE001 - a shape PyMC cannot evaluate: unchecked
                        runtime_shapes = {}
                got = runtime_shapes.get(nm)
                static = static if got is None else tuple(int(k) for k in got)
            if any(s is not None and s != a for s, a in zip(static, arr.shape, strict=True)):
                raise ValueError(
                    f"Hyperparameter {nm!r} must have shape {static}, got {arr.shape}."
                )
            if not np.all(np.isfinite(arr)):
                raise ValueError(
                    f"Hyperparameter {nm!r} must be finite, got {given[nm]!r}; pass a finite value."
                )
            if rv.type.dtype.startswith(("int", "uint")) and not np.all(arr == np.round(arr)):
                # the compiled kernel casts 2.5 to 2 silently (allow_input_downcast) and the
                # structure check of stop 44 raised PyTensor's TypeError (stop-44 review)
                raise ValueError(
                    f"Hyperparameter {nm!r} is integer-valued ({rv.type.dtype}), got "
                    f"{given[nm]!r}; pass a whole number."
                )
            lo, hi = self._support[nm]
            if np.any(arr < lo) or np.any(arr > hi):
                raise ValueError(
                    f"Hyperparameter {nm!r}={given[nm]!r} lies outside the support "
                    f"[{lo}, {hi}] of its prior."
                )
            values[nm] = float(arr) if arr.ndim == 0 else _readonly(arr)
        return values

    # ------------------------------------------------------------ public view
    def _public_parts(
        self,
        values: dict[str, HyperValue],
        *,
        allow_zero_noise: bool,
        wrap: Callable[[Any], Callable[..., Any]] = lambda fn: fn,
    ) -> tuple[
        float,
        Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]],
        Callable[[NDArray[np.float64]], NDArray[np.float64]],
        str,
    ]:
        """Noise variance, kernel and diagonal closures, and description at public ``values``.

        ``wrap`` is applied to each compiled PyTensor function (e.g. for thread safety).
        """
        args = tuple(values[nm] for nm in self.hyperparameter_names)
        if isinstance(self.noise_sd, Variable):
            sigma_val = np.float64(np.asarray(self._function("noise")(*args)))
        else:
            sigma_val = np.float64(self.noise_sd)
        # float64 squares: a noise sd of 1e200 raised Python's bare OverflowError (stop-44
        # audit); its inf is refused here with the parameter's name
        with np.errstate(over="ignore", under="ignore"):
            noise_var = check_positive(
                float(sigma_val**2), "noise variance (noise_sd**2)", allow_zero=allow_zero_noise
            )

        kernel = PublicKernel(wrap(self._function("kernel")), args)
        kernel_diag = PublicKernel(wrap(self._function("diag")), args, diag=True)

        if self._cov_description is None:
            mapping = dict(zip(self._hyper_rvs, self._hyper_inputs, strict=True))
            self._cov_description = _describe_cov(self.cov_func, mapping)
        hyper_str = ", ".join(f"{nm}={_format_value(v)}" for nm, v in values.items())
        description = (
            f"kernel: {self._cov_description}"
            + (f"; public hyperparameters: {hyper_str}" if hyper_str else "")
            + f"; noise variance: {noise_var:.6g}; prior mean: {self.mean:.6g}"
        )
        return noise_var, kernel, kernel_diag, description

    def public_cloaking(self, hyperparameters: Mapping[str, ArrayLike] | None = None) -> PublicGP:
        """The public view whose cloaking matrix a cloaked release uses: here ``public_gp``.

        Approximate models (``pm_dpgp.models.fitc.FITCRegression``) override it.
        """
        return self.public_gp(hyperparameters)

    def public_gp_without_data(
        self, hyperparameters: Mapping[str, ArrayLike] | None = None
    ) -> PublicGP:
        """``public_gp`` holding no inputs (``X`` of shape ``(0, d)``): no value of the data is
        read, so a mechanism can plan from it before its spend and attach its own (private)
        rows afterwards with ``dataclasses.replace(public, X=...)``.  Same checks of the
        hyperparameters as ``public_gp``; the kernel is not evaluated at any input."""
        values = self._check_hyperparameters(hyperparameters)
        noise_var, kernel, kernel_diag, description = self._public_parts(
            values, allow_zero_noise=False
        )
        return PublicGP(
            X=_readonly(np.empty((0, self.input_dim))),
            noise_var=noise_var,
            mean=self.mean,
            hyperparameters=values,
            description=description,
            _kernel=kernel,
            _kernel_diag=kernel_diag,
            hyperparameter_source=hyperparameter_source(hyperparameters, self.hyperparameter_names),
            _input_columns=getattr(self, "_input_columns", None),
        )

    def public_gp(self, hyperparameters: Mapping[str, ArrayLike] | None = None) -> PublicGP:
        """The model at fixed public hyperparameters, as consumed by privacy mechanisms.

        Parameters
        ----------
        hyperparameters
            ``{name: value}`` for every name in ``hyperparameter_names``
            (values on the constrained scale, e.g. a lengthscale, not its log).
            May be omitted only when the model has no free hyperparameters.

        Raises
        ------
        PrivateHyperparameterError
            A free hyperparameter has no value given.  Values fitted to the
            private ``y`` are not public; choose them a priori or privately.
        ValueError
            Unknown names, non-finite values, values outside the prior's support,
            or a kernel/noise that evaluates to NaN/inf.
        """
        public = dataclasses.replace(
            self.public_gp_without_data(hyperparameters), X=_readonly(self.X)
        )
        # Fail early (with a clear message) if these hyperparameters break the kernel.
        public.kernel_diag(self.X[:1])
        public.kernel(self.X[:1], self.X[:1])
        return public


# --------------------------------------------------------------------------- builder
def gp_regression(
    X: ArrayLike,
    y: ArrayLike,
    cov_func: CovarianceSpec,
    *,
    noise_sd: NoiseSpec = None,
    mean: float = 0.0,
    name: str = "f",
    model: pm.Model | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
    dims: str | None = None,
    mean_is_public: bool = False,
    **deprecated: Any,
) -> GPRegression:
    r"""Build an exact GP regression model in PyMC (``pm.gp.Marginal``).

    The model is ``y ~ N(m·1, K_θ(X, X) + σ_n² I)`` (Rasmussen & Williams 2006,
    eq. 2.30), built with ``pm.gp.Marginal(mean_func=Constant(mean), cov_func=…)``
    and ``gp.marginal_likelihood(f"{name}_obs", X, y, sigma=…)`` (PyMC's default
    1e-6 likelihood jitter), so it can be sampled or fitted as usual.

    Parameters
    ----------
    X
        Public inputs, shape ``(n,)`` or ``(n, d)``, or a ``pm.Data`` container of them
        (then ``pm.set_data`` changes them for the PyMC model and for releases alike).
    y
        Private outputs, shape ``(n,)``, or a ``pm.Data`` container.
    cov_func
        A PyMC covariance with fixed numeric hyperparameters, or a zero-argument
        callable returning one; the callable runs inside the model context, so it
        may declare priors, e.g.
        ``lambda: pm.HalfNormal("eta", 1)**2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1))``.
    noise_sd
        Observation-noise standard deviation: a positive float (public), a scalar
        PyMC variable of ``model``, or a zero-argument callable returning one
        (run inside the model context).  Formerly ``sigma`` (deprecated).
    mean
        Public constant prior mean.  It must not be computed from ``y`` (e.g.
        ``y.mean()``): that is a statistic of the private data and leaks it.  It is never
        compared with ``y`` (a refusal that did would leak ``y``, ``docs/errors.md``); the
        data owner can check with ``pm_dpgp.audit.check_public_choices``.
    name
        Prefix for model variables (likelihood ``f"{name}_obs"``).
    model
        Existing model to add to; default the model of the enclosing ``with pm.Model():``
        block, else a new ``pm.Model()`` (never a silently nested child model).
    coords
        Coordinates added to the model (``model.add_coords``), PyMC-style.
    dims
        Dim name of the observations (e.g. ``"obs_id"``) for the likelihood ``f"{name}_obs"``.
    mean_is_public
        Kept for compatibility; not used.

    Returns
    -------
    GPRegression
        Use ``.model`` for non-private inference and ``.public_gp(values)`` for releases.

    Raises
    ------
    ValueError
        NaN/inf in ``X``/``y``, mismatched shapes, bad ``noise_sd``/``mean``, or a
        covariance whose ``input_dim`` differs from the number of columns of ``X``.
    """
    noise_sd = _noise_sd_argument(noise_sd, deprecated, "gp_regression")
    data = _builder_inputs(X, y)
    mean_f = _check_name_and_mean(name, mean)
    del mean_is_public  # compatibility only: the mean is never compared with y
    ctx = resolve_model(model, coords)
    with ctx:
        cov, sig = _resolve_cov_and_sigma(cov_func, noise_sd, data.X.shape[1], "X")
        gp = pm.gp.Marginal(mean_func=pm.gp.mean.Constant(mean_f), cov_func=cov)
        kw = {} if dims is None else {"dims": dims}
        gp.marginal_likelihood(f"{name}_obs", X=data.X_graph, y=data.y_graph, sigma=sig, **kw)
    return remember_arguments(
        GPRegression(
            **_model_fields(
                ctx, gp, data.X_stored, data.y_stored, name=name, mean=mean_f, cov=cov, noise_sd=sig
            )
        ),
        X,
        y,
    )
