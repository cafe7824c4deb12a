r"""PyMC builder for sparse (variational) GP regression with PUBLIC inducing inputs ``Z``.

``sparse_gp_regression`` builds an ordinary PyMC model on
``pymc.gp.MarginalApprox`` with ``approx="VFE"`` (Titsias 2009, "Variational learning
of inducing variables in sparse Gaussian processes", AISTATS; the collapsed bound that PyMC
implements), so the data owner can fit or sample it non-privately as usual.  Its
``SparseGPRegression.public_sparse_gp`` gives the ``PublicSparseGP`` that the
noise-aware DP mechanism (``pm_dpgp.mechanisms.full.noise_aware``, Honkela 2024) consumes:
inducing inputs, kernel at public hyperparameters, noise variance and prior mean, and *no*
training data.

Privacy model (full privacy, ``docs/privacy_model.md``): both the inputs ``X`` and the outputs
``y`` are
private.  Everything else must be public:

* the inducing inputs ``Z`` — a regular grid over a public domain
  (``grid_inducing_points``), user-given from domain knowledge, or k-means centres of a
  *public* dataset (``kmeans_inducing_points``), never chosen from the private ``X``.
  ``Z`` is never compared with ``X`` (a refusal that did would reveal private inputs,
  ``docs/errors.md``); the data owner can check with ``pm_dpgp.audit.check_public_choices``;
* the kernel hyperparameters and the noise (as for the exact builder,
  ``pm_dpgp.models.exact``, whose machinery is reused: one PyTensor function per model,
  hyperparameter RVs replaced by public values);
* the prior mean.

The kernel evaluated here is exactly PyMC's: the same PyTensor graph, compiled once, and the
same ``jitter`` (PyMC's ``JITTER_DEFAULT`` = 1e-6) added to ``K_ZZ`` as ``MarginalApprox`` does.
"""

from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
from numpy.typing import ArrayLike, NDArray
from pymc.gp.cov import BaseCovariance
from pymc.gp.util import JITTER_DEFAULT

from pm_dpgp._validation import (
    check_finite_array,
    check_flag,
    check_positive,
    check_rng,
    masked_as_nan,
    public_real_array,
    quiet_masked_entries,
    real_or_nan,
    refuse_dask,
    refuse_misaligned_rows,
    refuse_text,
    saturating_float_array,
)
from pm_dpgp.gp.linalg import unit_scaled
from pm_dpgp.models._common import (
    BuilderInputs,
    CovarianceSpec,
    NoiseSpec,
    ThreadSafeFunction,
    _builder_inputs,
    _check_kernel,
    _check_name_and_mean,
    _eval_kernel,
    _eval_kernel_diag,
    _is_data_container,
    _model_fields,
    _noise_sd_argument,
    _readonly,
    _resolve_cov,
    _resolve_cov_and_sigma,
    check_input_columns,
    data_input,
    dataframe_columns,
    remember_arguments,
    resolve_model,
)
from pm_dpgp.models.exact import GPRegression
from pm_dpgp.models.hyperparameters import CALLER_DECLARED, hyperparameter_source

__all__ = [
    "DirichletGPClassification",
    "DirichletTargets",
    "InducingFromDataError",
    "PublicSparseGP",
    "SparseGPRegression",
    "dirichlet_gp_classification",
    "dirichlet_targets",
    "grid_inducing_points",
    "is_stationary_decreasing",
    "kernel_structure",
    "kernel_structure_at",
    "kmeans_inducing_points",
    "sparse_gp_regression",
]

#: PyMC covariance classes that are stationary with a non-increasing, non-negative profile
#: k(x, x') = k(0) k_r(‖x − x'‖) (Rasmussen & Williams 2006, §4.2).  Periodic and Cosine are
#: stationary but not decreasing, so they are not listed.
_DECREASING_STATIONARY = (
    pm.gp.cov.ExpQuad,
    pm.gp.cov.Exponential,
    pm.gp.cov.Matern12,
    pm.gp.cov.Matern32,
    pm.gp.cov.Matern52,
    pm.gp.cov.RatQuad,
)


class InducingFromDataError(ValueError):
    """Inducing inputs coincide with private training inputs (they look chosen from the data).

    Publishing ``Z`` (needed for predictions) would then reveal those private inputs.  Raised
    only by the data owner's own check ``pm_dpgp.audit.check_public_choices``: releases
    and builders never compare ``Z`` with the private inputs (``docs/errors.md``).
    """


# --------------------------------------------------------------------------- inducing inputs
def grid_inducing_points(
    lower: ArrayLike, upper: ArrayLike, num: int | ArrayLike
) -> NDArray[np.float64]:
    """Regular grid of inducing inputs over a PUBLIC box ``[lower, upper]``.

    ``lower``/``upper`` are scalars (1-D inputs) or length-``d`` vectors; ``num`` points per
    dimension (an int or one per dimension).  The grid is the Cartesian product, shape
    ``(Π num, d)``.  Choose the box from public knowledge of the input domain, never from the
    private data's range.  Honkela (2024, §6) uses e.g. 15 points on ``[-3.5, 3.5]``.
    """
    lo = np.atleast_1d(public_real_array(lower, "lower"))  # (False, True) was (0, 1)
    hi = np.atleast_1d(public_real_array(upper, "upper"))
    if lo.shape != hi.shape or lo.ndim != 1:
        raise ValueError(f"lower and upper must have the same length, got {lo.shape}, {hi.shape}.")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError("need finite lower < upper in every dimension.")
    nums = np.broadcast_to(public_real_array(num, "num"), lo.shape)  # True was 1, "5" an error
    if not np.all(nums == np.round(nums)) or np.any(nums < 1):
        raise ValueError(f"num must be positive integer(s), got {num!r}.")
    axes = [_grid_axis(a, b, int(k)) for a, b, k in zip(lo, hi, nums, strict=True)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.ravel() for g in mesh], axis=1)


def _grid_axis(a: float, b: float, k: int) -> NDArray[np.float64]:
    """``k`` evenly spaced points from ``a`` to ``b``: ``numpy.linspace``, or, where ``b − a``
    overflows (a box wider than ~1.8e308), the grid of ``[a/2, b/2]`` doubled (exact), since
    ``linspace`` returned NaN and inf there, silently (stop-48 audit: ``[-1e308, 1e308]`` with 3
    points gave ``[nan, inf, 1e308]``)."""
    with np.errstate(over="ignore"):  # the overflow is the case handled below: no warning
        wide = not np.isfinite(b - a)  # (stop-48 review: it warned, or raised under seterr)
    if not wide:
        return np.linspace(a, b, k)
    return 2.0 * np.linspace(a / 2.0, b / 2.0, k)


def kmeans_inducing_points(
    X_public: ArrayLike,
    num: int,
    *,
    rng: np.random.Generator | None = None,
    n_iter: int = 100,
) -> NDArray[np.float64]:
    """k-means centres of PUBLIC data (Lloyd 1982; k-means++ seeding, Arthur & Vassilvitskii 2007).

    ``X_public`` must be public (e.g. a public reference sample of the input domain, or a
    previous public release) — never the private training inputs: centres of the private
    inputs are statistics of them that no privacy guarantee covers.  ``rng`` is the only
    source of randomness (seeding).  Vectorised over points; loops only over iterations and
    the ``num`` seeding steps.  Computed on ``X`` scaled by a power of two (``unit_scaled``,
    exact), so inputs of any magnitude give their centres; Lloyd's iteration stops when no
    centre moves by more than 1e-12 × that scale (``2ᵉ``, with ``max |X|`` in ``[2ᵉ⁻¹, 2ᵉ)``).
    """
    X = check_finite_array(X_public, "X_public", ndim=2)
    if isinstance(num, bool) or not isinstance(num, numbers.Integral) or num < 1:
        raise ValueError(
            f"the number of inducing points (num, inducing_points=) must be a positive integer, "
            f"got {num!r}."
        )
    if num > X.shape[0]:
        raise ValueError(f"num={num} exceeds the number of public points {X.shape[0]}.")
    rng = check_rng(rng)
    # on X · 2⁻ᵉ (max |entry| in [0.5, 1)), scaled back at the end: the squared distances of
    # inputs near 1e160 overflowed ("Probabilities contain NaN") and near 1e-200 underflowed
    # to 0 (uniform seeding, every point nearest the first centre: centres that are no k-means
    # solution, silently); stop-48 audit.  The stopping tolerance is relative to that scale.
    X, e = unit_scaled(X)
    # k-means++ seeding
    centres = [X[rng.integers(X.shape[0])]]
    d2 = np.sum((X - centres[0]) ** 2, axis=1)
    for _ in range(1, num):
        total = d2.sum()
        idx = rng.choice(X.shape[0], p=d2 / total) if total > 0 else rng.integers(X.shape[0])
        centres.append(X[idx])
        d2 = np.minimum(d2, np.sum((X - X[idx]) ** 2, axis=1))
    C = np.array(centres)
    for _ in range(int(n_iter)):
        dist = np.sum(X**2, 1)[:, None] - 2.0 * X @ C.T + np.sum(C**2, 1)[None, :]
        lab = np.argmin(dist, axis=1)
        counts = np.bincount(lab, minlength=num).astype(float)
        sums = np.zeros_like(C)
        np.add.at(sums, lab, X)
        new = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1.0)[:, None], C)
        if np.allclose(new, C, rtol=0.0, atol=1e-12):
            C = new
            break
        C = new
    return np.ldexp(C, e)


def is_stationary_decreasing(cov: Any) -> bool:
    """Structural check: built from decreasing stationary kernels, sums, products, scalars.

    A numeric scalar must be positive in a product and non-negative in a sum, and a numeric
    ``Constant`` non-negative: ``-1 * ExpQuad`` is no covariance (stop-42 proof audit: a
    sample-path release of it added only the nugget, exact Rényi divergence 2·10⁹ against
    0.95 charged).  A symbolic scalar (a hyperparameter) has no sign here; the releases check
    ``k(x, x) ≥ 0`` at public points for it.
    """
    return _built_from(cov, _DECREASING_STATIONARY, numeric_only=False)


def is_positive_combination(cov: Any) -> bool:
    """Whether ``cov`` is a covariance by construction: decreasing stationary kernels and
    constants combined by sums and products with positive NUMERIC scalars only (sums and
    products of covariances are covariances; Rasmussen & Williams 2006, §4.2.4)."""
    return _built_from(cov, _DECREASING_STATIONARY, numeric_only=True)


@dataclass(frozen=True)
class KernelStructure:
    """What the structure of a covariance proves at the PUBLIC hyperparameter values.

    ``covariance``: built from ExpQuad/Matern/Exponential/RatQuad kernels (RatQuad with
    ``α > 0``) and constants ``c ≥ 0`` by sums whose scalars are ``≥ 0`` and products whose
    scalars multiply to ``> 0``, every scalar and constant at its public value.  Each such
    kernel is ``k(0) k_r(ρ)`` with ``k_r`` positive definite, ``> 0`` and non-increasing in its
    scaled distance ``ρ`` (Rasmussen & Williams 2006, §4.2); non-negative combinations and
    products of covariances are covariances (§4.2.4), and of non-negative non-increasing
    functions are non-negative and non-increasing.  So ``k ≥ 0`` everywhere, and
    ``|k(x, x')| ≤ k(x, x)``.
    ``isotropic``: moreover every kernel reads every input column with one lengthscale (at
    its public value), so ``k(x, x') = k(0) k_r(‖x − x'‖)`` with ``k_r`` non-negative and
    non-increasing on all of ``[0, ∞)`` — what Honkela's (2024) eqs. 7–8 need.
    A negative public scalar in a sum (e.g. ``ExpQuad(1) − ExpQuad(1.2)/1.2``, a covariance
    negative beyond 1.09, or ``ExpQuad(1) − 0.7 ExpQuad(10)``, no covariance) proves neither;
    probes over a bounded range of distances cannot stand in for this (stop-44 audit).
    """

    covariance: bool
    isotropic: bool


def symbolic_parts(cov: Any) -> list[Any]:
    """The symbolic scalars, constants, lengthscales and RatQuad ``α`` of ``cov`` whose public
    values ``kernel_structure`` needs (in the order it reads them)."""
    found: list[Any] = []

    def record(part: Any) -> NDArray[np.float64]:
        if _value(part) is None:
            found.append(part)
        return np.ones(())

    _structure(cov, record, None)
    return found


def kernel_structure(
    cov: Any, input_dim: int, values: Callable[[Any], NDArray[np.float64]] | None = None
) -> KernelStructure:
    """``KernelStructure`` of ``cov`` at public values; ``values(part)`` gives a symbolic
    part's public value (``None``: every symbolic part is treated as unknown, proving
    nothing about its sign)."""

    def value_of(part: Any) -> NDArray[np.float64] | None:
        v = _value(part)
        if v is None and values is not None:
            got = values(part)
            v = None if got is None else np.asarray(got, dtype=np.float64)
        return v

    return _structure(cov, value_of, input_dim)


def kernel_structure_at(
    cov: Any, hyperparameters: Mapping[str, Any], input_dim: int = -1
) -> KernelStructure:
    """``kernel_structure`` of a PyMC covariance whose symbolic parts depend on named
    hyperparameter variables, at their PUBLIC ``hyperparameters`` (``{name: value}``, as a
    ``PublicGP`` holds them): each named variable is replaced by its value and the parts are
    evaluated by one small PyTensor function (none for a numeric kernel).  A part that
    still depends on a random variable is unknown (proves nothing).  ``isotropic`` needs the
    ``input_dim`` (the default ``-1``: unknown, ``False``)."""
    parts = symbolic_parts(cov)
    if not parts:
        return kernel_structure(cov, input_dim)
    import pytensor.tensor as pt
    from pytensor.graph.replace import clone_replace

    from pm_dpgp._ieee import ieee_function
    from pm_dpgp.models._common import hoist_float_constants
    from pm_dpgp.models.exact import _is_random, ancestors  # PyTensor 2 and 3 locations

    try:
        outs = [pt.as_tensor_variable(p) for p in parts]
        mapping = {
            v: pt.as_tensor_variable(np.asarray(hyperparameters[v.name], dtype=np.float64))
            for v in ancestors(outs)
            if v.name is not None and v.name in hyperparameters and v.owner is not None
        }
        new = clone_replace(outs, replace=mapping) if mapping else outs
        if any(_is_random(v) for v in ancestors(new)):
            return KernelStructure(False, False)  # evaluating would draw random numbers
        # evaluated as the public kernel is (``GPRegression._function``): every float constant,
        # the public values included, is an input, so PyTensor's rewrites cannot cancel them.
        # With constants, ``(h + 1e16) - 1e16 - 0.2`` was rewritten to ``h - 0.2`` (0.5 at
        # h = 0.7, a "covariance by construction") while the kernel computed -0.2 in IEEE
        # arithmetic: ExpQuad(1) - 0.2 ExpQuad(0.5), no covariance, was released (stop-50 audit)
        hoisted = [hoist_float_constants(o) for o in new]
        inputs = [i for _, ins, _ in hoisted for i in ins]
        values = [v for _, _, vals in hoisted for v in vals]
        got = ieee_function(
            inputs, [o for o, _, _ in hoisted], mode="FAST_COMPILE", on_unused_input="ignore"
        )(*values)
    except Exception:  # a part PyTensor cannot evaluate without more inputs: unknown
        return KernelStructure(False, False)
    found = {id(p): np.asarray(v, dtype=np.float64) for p, v in zip(parts, got, strict=True)}
    return kernel_structure(cov, input_dim, lambda p: found.get(id(p)))


def depends_on_random_variables(cov: Any) -> bool:
    """Whether a symbolic part of ``cov`` (``symbolic_parts``) depends on a random variable,
    i.e. on a hyperparameter whose public value is given only at release time (so that
    ``kernel_structure_at(cov, {})`` cannot decide the structure)."""
    parts = symbolic_parts(cov)
    if not parts:
        return False
    import pytensor.tensor as pt

    from pm_dpgp.models.exact import _is_random, ancestors

    try:
        outs = [pt.as_tensor_variable(p) for p in parts]
    except Exception:  # noqa: BLE001 - not a PyTensor expression: nothing random in it
        return False
    return any(_is_random(v) for v in ancestors(outs))


def _value(part: Any) -> NDArray[np.float64] | None:
    """A numeric part's value (numbers, arrays, PyTensor constants), else ``None``."""
    if isinstance(part, bool | str):
        return None
    if isinstance(part, numbers.Real | np.ndarray | list | tuple):
        try:
            return np.asarray(part, dtype=np.float64)
        except (TypeError, ValueError):
            return None
    data = getattr(part, "data", None)
    if data is not None and type(part).__name__ == "TensorConstant":
        return np.asarray(data, dtype=np.float64)
    return None


def _structure(
    cov: Any, value_of: Callable[[Any], NDArray[np.float64] | None], input_dim: int | None
) -> KernelStructure:
    gpc = pm.gp.cov
    no = KernelStructure(False, False)
    if isinstance(cov, _DECREASING_STATIONARY):
        ls = value_of(getattr(cov, "ls", 1.0))
        if isinstance(cov, gpc.RatQuad):
            a = value_of(cov.alpha)
            if a is None or a.size != 1 or not (float(a) > 0.0):
                return no  # α ≤ 0: (1 − r²/(2|α|ℓ²))^|α| is no covariance (unbounded)
        if ls is None or not np.all(np.isfinite(ls)) or not np.all(ls != 0.0):
            return no
        active = np.atleast_1d(np.asarray(getattr(cov, "active_dims", []))).ravel()
        full = input_dim is not None and sorted(active.tolist()) == list(range(input_dim))
        one_scale = bool(np.all(np.abs(ls) == np.abs(ls.ravel()[0])))
        return KernelStructure(True, full and one_scale)
    if isinstance(cov, gpc.Constant):
        c = value_of(getattr(cov, "c", None))
        ok = c is not None and c.size == 1 and float(c) >= 0.0
        return KernelStructure(ok, ok)
    if isinstance(cov, gpc.Add | gpc.Prod):
        product = isinstance(cov, gpc.Prod)
        covariance, isotropic, sign = True, True, 1.0
        for part in cov._factor_list:
            if isinstance(part, BaseCovariance):
                sub = _structure(part, value_of, input_dim)
                covariance, isotropic = covariance and sub.covariance, isotropic and sub.isotropic
                continue
            v = value_of(part)
            if v is None or v.size != 1 or not np.isfinite(float(v)):
                return no
            if product:
                sign *= float(np.sign(v))
            elif not (float(v) >= 0.0):
                return no
        if product and not sign > 0.0:
            return no
        return KernelStructure(covariance, covariance and isotropic)
    return no


def _numeric_scalar(part: Any) -> float | None:
    """The value of a plain-number factor of a sum or product, else ``None`` (symbolic)."""
    if isinstance(part, numbers.Real) or (isinstance(part, np.ndarray) and part.ndim == 0):
        return float(part)
    return None


def _built_from(cov: Any, kinds: tuple[type, ...], *, numeric_only: bool) -> bool:
    gpc = pm.gp.cov
    if isinstance(cov, kinds):
        # (1 − r²/(2|α|ℓ²))^|α| for α < 0 is no covariance: unbounded as r grows (stop-44)
        alpha = _value(getattr(cov, "alpha", 1.0)) if isinstance(cov, gpc.RatQuad) else None
        return alpha is None or (alpha.size == 1 and float(alpha) > 0.0)
    if isinstance(cov, gpc.Constant):
        c = _numeric_scalar(getattr(cov, "c", None))
        return (c is not None and c >= 0.0) or (c is None and not numeric_only)
    if isinstance(cov, gpc.Add | gpc.Prod):
        product = isinstance(cov, gpc.Prod)
        for part in cov._factor_list:
            if isinstance(part, BaseCovariance):
                if not _built_from(part, kinds, numeric_only=numeric_only):
                    return False
                continue
            value = _numeric_scalar(part)
            if value is not None:
                if not (value > 0.0 if product else value >= 0.0):
                    return False
            elif numeric_only or not (hasattr(part, "type") and getattr(part.type, "ndim", 1) == 0):
                return False
        return True
    return False


def is_scaled_constant(cov: Any) -> bool:
    """``cov`` is structurally constant: ``Constant`` kernels and scalars in sums/products."""
    return _built_from(cov, (), numeric_only=False)


def is_scaled_exponential_1d(cov: Any) -> bool:
    """``cov`` is ``c · exp(−|x − x'|/ℓ)`` on one input: one ``Exponential`` (or ``Matern12``)
    of one active dimension in a product with scalars and constants, nothing else (the
    Markov property ``k(a, c) k(b, b) = k(a, b) k(b, c)`` the exponential class needs)."""
    gpc = pm.gp.cov
    exponential = (gpc.Exponential, gpc.Matern12)

    def one_dim(k: Any) -> bool:
        active = getattr(k, "active_dims", None)
        return active is not None and len(np.atleast_1d(active)) == 1

    if isinstance(cov, exponential):
        return one_dim(cov)
    if isinstance(cov, gpc.Prod):
        kernels = [p for p in cov._factor_list if isinstance(p, BaseCovariance)]
        markov = [k for k in kernels if is_scaled_exponential_1d(k)]
        constant = all(is_scaled_constant(k) for k in kernels if k not in markov)
        # the scalars' signs as every recognised kernel's (is_stationary_decreasing)
        return len(markov) == 1 and constant and is_stationary_decreasing(cov)
    return False


# --------------------------------------------------------------------------- PublicSparseGP
@dataclass(frozen=True, eq=False)
class PublicSparseGP:
    r"""Everything public about a sparse GP: inducing inputs, kernel, noise, prior mean.

    Produced by ``SparseGPRegression.public_sparse_gp``.  Holds no training data.

    Attributes
    ----------
    Z : numpy.ndarray
        Public inducing inputs, shape ``(M, d)``, read-only.
    noise_var : float
        Observation-noise variance ``σ²`` (public).
    mean : float
        Public constant prior mean.
    hyperparameters : dict
        Public hyperparameter values by name.
    description : str
        Kernel, hyperparameters, noise and mean, for metadata.
    jitter : float
        Added to the diagonal of ``K_ZZ`` (PyMC's ``MarginalApprox`` default 1e-6).
    stationary : bool
        Whether the covariance is structurally a sum/product of decreasing stationary kernels
        (ExpQuad, Matern, Exponential, RatQuad) and constants — what the kernel-dependent
        bounds on ``‖k(Z, x)‖`` (Honkela 2024, eqs. 7–8) need.
    z_is_public : bool
        The caller asserted ``Z`` was fixed without looking at the private inputs.
    hyperparameter_source : str
        Where the hyperparameter values came from (``models.hyperparameter_source``).

    The input column names of a model built on a ``DataFrame`` travel with it (public: the
    schema), so that private ``data=`` in another column order is refused by the releases.
    """

    Z: NDArray[np.float64] = field(repr=False)
    noise_var: float
    mean: float
    hyperparameters: dict[str, Any]
    description: str
    jitter: float
    stationary: bool
    z_is_public: bool
    _kernel: Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]] = field(
        repr=False
    )
    _kernel_diag: Callable[[NDArray[np.float64]], NDArray[np.float64]] = field(repr=False)
    hyperparameter_source: str = CALLER_DECLARED
    _input_columns: tuple[str, ...] | None = field(default=None, repr=False)
    #: ``k ≥ 0`` everywhere by construction at the public values (``kernel_structure``); the
    #: probes of ``kernel_norm_bound`` cover a bounded range only
    nonnegative: bool = False
    #: a covariance by construction at the public hyperparameter values, ``k ≥ 0`` and
    #: ``|k(x, x')| ≤ k(x, x)`` everywhere (``KernelStructure.covariance``)
    covariance: bool = False
    #: moreover isotropic with a non-negative, non-increasing profile on all of ``[0, ∞)``
    #: (``KernelStructure.isotropic``): what Honkela's eqs. 7–8 need
    isotropic: bool = False

    def __post_init__(self) -> None:
        # as PublicGP: a zero noise variance is refused on every path (issue 15, point 3)
        object.__setattr__(
            self, "noise_var", check_positive(self.noise_var, "noise variance (noise_sd**2)")
        )

    @property
    def n_inducing(self) -> int:
        """``M = |Z|``."""
        return int(self.Z.shape[0])

    @property
    def input_dim(self) -> int:
        """Number of input columns ``d``."""
        return int(self.Z.shape[1])

    def kernel(self, Xa: ArrayLike, Xb: ArrayLike | None = None) -> NDArray[np.float64]:
        """``k(Xa, Xb)`` at the public hyperparameters (thread-safe); ``Xb=None`` means ``Xa``."""
        return _eval_kernel(self, Xa, Xb, symmetrise_equal=False)

    def kernel_diag(self, Xa: ArrayLike) -> NDArray[np.float64]:
        """``k(x, x)`` for each row of ``Xa``, shape ``(m,)``."""
        return _eval_kernel_diag(self, Xa, check_finite=False)

    def kernel_private(self, Z: ArrayLike, X: ArrayLike) -> NDArray[np.float64]:
        """``k(Z, X)`` for PRIVATE inputs ``X``: never refuses because of their values.

        Inputs so large that the kernel overflows give non-finite entries, which the
        statistics drop record by record (``pm_dpgp.gp.sparse.sufficient_statistics``),
        as they drop non-finite records: whether that happened is never reported.
        """
        return _eval_kernel(self, Z, X, symmetrise_equal=False, check_finite=False)

    def kzz(self) -> NDArray[np.float64]:
        """``K_ZZ + jitter·I`` (the matrix PyMC's ``MarginalApprox`` factorises)."""
        return self.kernel(self.Z) + self.jitter * np.eye(self.n_inducing)


# --------------------------------------------------------------------------- builder
@dataclass(eq=False)
class SparseGPRegression(GPRegression):
    """A sparse (VFE) GP regression model in PyMC with public inducing inputs.

    Returned by ``sparse_gp_regression``.  ``model`` is an ordinary PyMC model
    (``gp`` is a ``pymc.gp.MarginalApprox``); ``public_sparse_gp`` gives the
    ``PublicSparseGP`` that the noise-aware mechanism consumes.  ``X`` and ``y``
    (private) may be empty when the data are streamed to the mechanism instead.
    """

    def public_cloaking(self, hyperparameters: Mapping[str, ArrayLike] | None = None) -> Any:
        """Refused: a VFE model has no cloaked release here.

        ``cloaked_release`` would otherwise inherit the exact GP's cloaking matrix and release
        exact-GP predictions for a model built as sparse, possibly for full privacy (stop-26
        audit).  Smith et al.'s (2021) sparse cloaking is FITC (``fitc_gp_regression``); a VFE
        model's release is ``noise_aware_release``.
        """
        raise TypeError(
            "a sparse (VFE) model has no cloaked release: build the model with "
            "pm_dpgp.models.fitc_gp_regression for sparse cloaking (Smith et al. 2021), or use "
            "pm_dpgp.mechanisms.noise_aware_release for this model. Nothing was spent."
        )

    Z: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 1)), repr=False)
    z_is_public: bool = False
    jitter: float = JITTER_DEFAULT

    def public_sparse_gp(
        self, hyperparameters: Mapping[str, ArrayLike] | None = None
    ) -> PublicSparseGP:
        """The model at fixed PUBLIC hyperparameters, without any training data.

        Raises ``PrivateHyperparameterError`` when a free hyperparameter
        has no public value (fitted values are functions of the private data, not public).
        """
        values = self._check_hyperparameters(hyperparameters)
        noise_var, kernel, kernel_diag, description = self._public_parts(
            values, allow_zero_noise=False, wrap=ThreadSafeFunction
        )
        description += (
            f"; inducing inputs: {self.Z.shape[0]} public points; jitter: {self.jitter:g}"
        )
        structure = self.kernel_structure(values)
        public = PublicSparseGP(
            Z=_readonly(self.Z),
            noise_var=noise_var,
            mean=self.mean,
            hyperparameters=values,
            description=description,
            jitter=float(self.jitter),
            stationary=is_stationary_decreasing(self.cov_func),
            z_is_public=check_flag(self.z_is_public, "z_is_public"),  # "no" was True
            _kernel=kernel,
            _kernel_diag=kernel_diag,
            hyperparameter_source=hyperparameter_source(hyperparameters, self.hyperparameter_names),
            _input_columns=getattr(self, "_input_columns", None),
            nonnegative=structure.covariance,
            covariance=structure.covariance,
            isotropic=structure.isotropic,
        )
        public.kzz()  # fail early on a broken kernel
        return public

    def kernel_structure(self, values: Mapping[str, Any]) -> KernelStructure:
        """``kernel_structure_at`` of the covariance at the public hyperparameter ``values``
        (checked ones, ``_check_hyperparameters``), with the inputs' dimension (isotropy)."""
        return kernel_structure_at(self.cov_func, values, int(self.Z.shape[1]))


def sparse_gp_regression(
    X: ArrayLike | None,
    y: ArrayLike | None,
    cov_func: CovarianceSpec,
    *,
    Z: ArrayLike,
    noise_sd: NoiseSpec = None,
    mean: float = 0.0,
    name: str = "f",
    model: pm.Model | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
    jitter: float = JITTER_DEFAULT,
    mean_is_public: bool = False,
    z_is_public: bool = False,
    **deprecated: Any,
) -> SparseGPRegression:
    r"""Build a sparse variational GP regression model in PyMC (``pm.gp.MarginalApprox``, VFE).

    The model is Titsias' (2009) collapsed variational bound for
    ``y = f(X) + ε``, ``f ~ GP(m, k_θ)``, ``ε ~ N(0, σ² I)``, with inducing variables
    ``u = f(Z)`` at the PUBLIC inducing inputs ``Z``; its optimal
    ``q(u) = N(m, S)`` is Honkela (2024) eq. (2).  Built as
    ``pm.gp.MarginalApprox(approx="VFE", mean_func=Constant(mean), cov_func=…)`` and
    ``gp.marginal_likelihood(f"{name}_obs", X, Xu=Z, y, sigma, jitter)``.

    Parameters
    ----------
    X, y
        Private training data, shapes ``(n,)``/``(n, d)`` and ``(n,)``, or ``pm.Data``
        containers of them (``pm.set_data`` then changes them for the model and releases);
        both ``None`` for a data-less model (data streamed to the mechanism in chunks or as
        Dask arrays).
    cov_func
        PyMC covariance, or a zero-argument callable returning one (may declare priors).
    Z
        PUBLIC inducing inputs ``(M,)`` or ``(M, d)``: a grid over a public domain, domain
        knowledge, or k-means of public data.  Never compared with ``X`` (``docs/errors.md``);
        ``z_is_public`` records the caller's declaration.  A ``DataFrame`` must have ``X``'s
        columns in ``X``'s order (read by position).
    noise_sd
        Noise standard deviation: float, scalar PyMC variable, or callable returning one
        (formerly ``sigma``, deprecated).
    mean
        Public constant prior mean; never compared with ``y`` (``mean_is_public`` is kept for
        compatibility and not used).
    jitter
        Added to ``K_ZZ`` (PyMC's default 1e-6); the mechanism uses the same matrix.
    model, coords
        As in ``pm_dpgp.models.gp_regression``: default the enclosing model context.
        (The VFE bound enters PyMC as a scalar ``pm.Potential``, so it has no ``dims``; put
        ``dims`` on your ``pm.Data`` containers.)
    """
    noise_sd = _noise_sd_argument(noise_sd, deprecated, "sparse_gp_regression")
    # a DataFrame Z is read by position: columns in another order than X's were inducing
    # inputs elsewhere, silently (stop-47 audit, as for the FITC builder)
    check_input_columns(Z, (X, y), "Z")
    Z_arr = check_finite_array(Z, "Z", ndim=2)
    if (X is None) != (y is None):
        raise ValueError("give both X and y (in-memory data) or neither (streamed data).")
    if X is None:
        X_arr, y_arr = np.zeros((0, Z_arr.shape[1])), np.zeros(0)
        data = BuilderInputs(X_arr, y_arr, X_arr, y_arr, X_arr, y_arr)
    else:
        data = _builder_inputs(X, y)
        if data.X.shape[1] != Z_arr.shape[1]:
            raise ValueError(
                f"Z must have {data.X.shape[1]} column(s) like X, got shape {Z_arr.shape}."
            )
    mean_f = _check_name_and_mean(name, mean)
    del mean_is_public  # compatibility only: the mean is never compared with y
    jitter = check_positive(jitter, "jitter", allow_zero=True)
    ctx = resolve_model(model, coords)
    with ctx:
        cov, sig = _resolve_cov_and_sigma(cov_func, noise_sd, Z_arr.shape[1], "Z")
        gp = pm.gp.MarginalApprox(approx="VFE", mean_func=pm.gp.mean.Constant(mean_f), cov_func=cov)
        if data.X.shape[0]:
            gp.marginal_likelihood(
                f"{name}_obs", X=data.X_graph, Xu=Z_arr, y=data.y_graph, sigma=sig, jitter=jitter
            )
    built = remember_arguments(
        SparseGPRegression(
            **_model_fields(
                ctx, gp, data.X_stored, data.y_stored, name=name, mean=mean_f, cov=cov, noise_sd=sig
            ),
            Z=Z_arr,
            z_is_public=check_flag(z_is_public, "z_is_public"),  # "no" was True (stop 40)
            jitter=jitter,
        ),
        X,
        y,
    )
    if X is None:
        # built for streamed / Dask data: the model's columns are those of a labelled Z, so
        # data= labelled otherwise is refused (stop-49 audit: Z labelled "age" and data
        # labelled "weight" released a q(u) of the weights at the age grid, silently, and the
        # release's predict then said the model was built on ["weight"])
        built._input_columns = dataframe_columns(Z)
    return built


# --------------------------------------------------------------------------- Dirichlet
@dataclass(frozen=True)
class DirichletTargets:
    """Public constants of the Milios et al. (2018) transformation for one ``α_ε``.

    ``y_in``/``y_out`` and ``var_in``/``var_out``: regression target and noise variance of a
    class that is / is not the label (Milios et al. 2018, §4; Honkela 2024 eq. 21).
    """

    alpha_epsilon: float
    y_in: float
    y_out: float
    var_in: float
    var_out: float

    @classmethod
    def from_alpha(cls, alpha_epsilon: float) -> DirichletTargets:
        """``α = 1{l = c} + α_ε``, ``σ̃² = log(1/α + 1)``, ``ỹ = log α − σ̃²/2``."""
        a = check_positive(alpha_epsilon, "alpha_epsilon")
        # log1p: log(1/a + 1) was 0 for a > 2^53 (stop-44 audit: ZeroDivisionError)
        var_in = math.log1p(1.0 / (1.0 + a))
        var_out = math.log1p(1.0 / a)
        if not (var_in > 0.0 and var_out > 0.0):
            raise ValueError(
                f"alpha_epsilon={alpha_epsilon!r} is too large (its noise variance "
                "log(1/alpha_epsilon + 1) is 0 in float64); Milios et al. take 0 < alpha_epsilon "
                "<< 1, e.g. 0.01."
            )
        y_in, y_out = math.log(1.0 + a) - var_in / 2.0, math.log(a) - var_out / 2.0
        # 1/a overflowed for a < 2^-1023 (var_out = inf, y_out = -inf: "prior_mean must be
        # finite, got None"), and y_in == y_out in float64 for a >~ 1e15 (R_y = 0, a
        # ZeroDivisionError); stop-47 audit
        if not (math.isfinite(var_out) and math.isfinite(y_out) and y_in > y_out):
            raise ValueError(
                f"alpha_epsilon={alpha_epsilon!r} is outside float64's range for the targets "
                "(log(1/alpha_epsilon + 1) overflows, or the in-class and out-of-class targets "
                "coincide); Milios et al. take 0 < alpha_epsilon << 1, e.g. 0.01."
            )
        return cls(a, y_in, y_out, var_in, var_out)

    def default_prior_mean(self, n_classes: int) -> float:
        """``(ỹ_in + (C−1) ỹ_out)/C``: the targets' mean under uniform class frequencies."""
        return (self.y_in + (n_classes - 1) * self.y_out) / n_classes


def check_labels(labels: Any, n_classes: int) -> NDArray[np.int64]:
    """Integer class labels in ``0 … n_classes−1`` (``ValueError`` otherwise)."""
    arr = np.asarray(labels).reshape(-1)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError("labels contain NaN or infinite values.")
        if not np.all(arr == np.round(arr)):
            raise ValueError("labels must be integers 0, …, n_classes − 1.")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"labels must be integers 0, …, n_classes − 1, got dtype {arr.dtype}.")
    lab = arr.astype(np.int64)
    if lab.size and (lab.min() < 0 or lab.max() >= n_classes):
        raise ValueError(f"labels must lie in 0, …, {n_classes - 1} (n_classes={n_classes}).")
    return lab


def sanitise_labels(labels: Any, n_classes: int) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Private labels as integers and the mask of valid ones, without raising on values.

    A label is valid when it is a finite integer in ``0 … n_classes−1``; invalid labels
    become 0 and are masked out (the release drops those records).  Only the shape and
    dtype kind (schema, public) can make it fail (``docs/errors.md``).
    """
    if isinstance(labels, np.ma.MaskedArray):  # masked labels are missing: dropped (stop 32)
        labels = masked_as_nan(labels)
    with quiet_masked_entries(labels):  # a numpy.ma.masked entry of a list (stop-48 audit)
        arr = np.asarray(labels).reshape(-1)
    if arr.dtype.kind == "O":
        # a list or object array holding None or an int beyond 2**64 (stop-32 audit: their
        # dtype inference made a refusal depend on one label); text stays a schema error
        refuse_text(arr, "labels")
        converted = saturating_float_array(arr)
        arr = arr if converted is None else converted
    if arr.dtype.kind not in "iubf":
        raise TypeError(
            f"labels must be numbers (integers 0 … n_classes − 1), got dtype {arr.dtype}; "
            "convert them to integers before the release."
        )
    val = arr.astype(np.float64)
    ok = np.isfinite(val) & (val == np.round(val)) & (val >= 0) & (val < n_classes)
    return np.where(ok, val, 0.0).astype(np.int64), ok


def check_n_classes(n_classes: Any) -> int:
    """``n_classes`` as an int ≥ 2."""
    if isinstance(n_classes, bool) or not isinstance(n_classes, int | np.integer) or n_classes < 2:
        raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}.")
    return int(n_classes)


def dirichlet_targets(
    labels: ArrayLike, n_classes: int, alpha_epsilon: float = 0.01
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per-class regression targets ``ỹ`` and noise variances ``σ̃²``, both ``(n, C)`` (eq. 21)."""
    C = check_n_classes(n_classes)
    lab = check_labels(labels, C)
    t = DirichletTargets.from_alpha(alpha_epsilon)
    onehot = lab[:, None] == np.arange(C)[None, :]
    return np.where(onehot, t.y_in, t.y_out), np.where(onehot, t.var_in, t.var_out)


@dataclass(eq=False)
class DirichletGPClassification(SparseGPRegression):
    """Dirichlet-based GP classification in PyMC (Milios et al. 2018), one sparse GP per class.

    ``class_gps[c]`` is a ``pymc.gp.MarginalApprox`` on the class-``c`` targets with
    per-point noise ``σ̃²`` (``approx="DTC"``: PyMC's VFE trace term assumes one scalar noise;
    at fixed hyperparameters DTC and VFE share the same optimal q(u), Titsias 2009 — the
    trace term only matters for hyperparameter learning).  ``y`` holds the integer labels of
    every record (an invalid one as −1, dropped by the release as by the PyMC model).
    The inherited ``sigma`` is ``√σ̃²_in`` (the smallest noise), used by no mechanism.
    """

    class_gps: tuple[Any, ...] = ()
    n_classes: int = 2
    alpha_epsilon: float = 0.01
    # (argument name, pm.Data container, weak reference to its value at build time): the
    # builder reads a container once, so a later pm.set_data must not pass unnoticed
    _data_containers: tuple[Any, ...] = field(default=(), repr=False)

    def check_data_containers(self) -> None:
        """Refuse a model whose ``pm.Data`` containers were changed after the build.

        The labels enter the PyMC model only through the transformed targets, computed once
        by ``dirichlet_gp_classification``: after ``pm.set_data`` neither the PyMC model nor
        this object sees the new values, and a release of the model's data released the old
        records without a word (stop-47 audit).  Compares object identity only (the value
        ``pm.set_data`` installs is a new array), never a value.
        """
        for arg, container, value in self._data_containers:
            if container.get_value(borrow=True) is not value():
                raise ValueError(
                    f"the pm.Data container passed as {arg} was changed (pm.set_data) after "
                    "dirichlet_gp_classification built this model, which keeps the values it "
                    "was built with (the labels enter only through the transformed targets); "
                    "build the classifier again for the new data. Nothing was spent or drawn."
                )


def dirichlet_gp_classification(
    X: ArrayLike,
    labels: ArrayLike,
    cov_func: CovarianceSpec,
    *,
    Z: ArrayLike,
    n_classes: int,
    alpha_epsilon: float = 0.01,
    prior_mean: float | None = None,
    name: str = "f",
    model: pm.Model | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
    jitter: float = JITTER_DEFAULT,
    z_is_public: bool = False,
) -> DirichletGPClassification:
    r"""Build a Dirichlet-based GP classifier in PyMC with public inducing inputs ``Z``.

    Labels become ``C`` heteroscedastic regressions (Milios et al. 2018, §4; Honkela 2024,
    eq. 21, see ``dirichlet_targets``), each a ``pm.gp.MarginalApprox`` sharing the
    covariance ``cov_func`` and the public constant prior mean (default
    ``DirichletTargets.default_prior_mean``, a function of ``C`` and ``α_ε`` only).
    The DP release is ``pm_dpgp.mechanisms.full.dirichlet.dirichlet_release``.

    ``X`` and ``labels`` may be ``pm.Data`` containers: their current values are used.  The
    labels enter the model only through the transformed targets (one heteroscedastic
    regression per class, rows with invalid labels dropped), so after ``pm.set_data`` build
    the classifier again rather than relying on the container: ``dirichlet_release`` of the
    model's data refuses a model whose containers were set again
    (``DirichletGPClassification.check_data_containers``).
    """
    C = check_n_classes(n_classes)
    # a shuffled label Series was paired by position, as the other builders refuse
    # (stop-41 walkthrough)
    refuse_misaligned_rows((X, labels), ("X", "labels"))
    check_input_columns(Z, (X, labels), "Z")  # read by position, as X (stop-47 audit)
    Z_arr = check_finite_array(Z, "Z", ndim=2)
    X_arr = data_input(X, "X", 2)[0]
    # Dask labels were computed here (np.asarray in sanitise_labels), every private label
    # gathered on the client; the other builders refuse them (stop-48 audit)
    refuse_dask(labels, "labels")
    labels_argument = labels  # the object passed (dp_ppc's identity check)
    containers = tuple(
        (arg, c, weakref.ref(c.get_value(borrow=True)))
        for arg, c in (("X", X), ("labels", labels))
        if _is_data_container(c)
    )
    if _is_data_container(labels):
        labels = labels.get_value(borrow=True)
    lab, valid = sanitise_labels(labels, C)
    if X_arr.shape[0] != lab.shape[0]:
        raise ValueError(f"X has {X_arr.shape[0]} rows but labels has {lab.shape[0]}.")
    # Records whose label is not an integer in 0 … C−1 are left out, silently: refusing them
    # would let a caller learn the largest private label by varying n_classes (an uncharged
    # oracle found by an audit; docs/errors.md).  The release drops the same records.  The
    # model keeps every record (an invalid label as -1, which the release drops again): with
    # only the valid ones stored, a release of the model's data saw their number as "the
    # number of records" and its delta > 1/n PrivacyWarning quoted it (stop-46 audit).
    X_all, stored_labels = X_arr, np.where(valid, lab, -1).astype(np.float64)
    X_arr, lab = X_arr[valid], lab[valid]
    if X_arr.shape[1] != Z_arr.shape[1]:
        raise ValueError(f"Z must have {X_arr.shape[1]} column(s) like X, got {Z_arr.shape}.")
    tg = DirichletTargets.from_alpha(alpha_epsilon)
    mu = tg.default_prior_mean(C) if prior_mean is None else real_or_nan(prior_mean, "prior_mean")
    if not math.isfinite(mu):
        raise ValueError(f"prior_mean must be finite, got {prior_mean!r}; pass a finite value.")
    jitter = check_positive(jitter, "jitter", allow_zero=True)
    y, v = dirichlet_targets(lab, C, alpha_epsilon)
    ctx = resolve_model(model, coords)
    with ctx:
        cov = _resolve_cov(cov_func)
        _check_kernel(cov, X_arr.shape[1], "X")  # stop-32 audit: ExpQuad(1) on 2-D X ran
        gps = []
        for c in range(C):
            gp = pm.gp.MarginalApprox(approx="DTC", mean_func=pm.gp.mean.Constant(mu), cov_func=cov)
            gp.marginal_likelihood(
                f"{name}_{c}_obs",
                X=X_arr,
                Xu=Z_arr,
                y=y[:, c],
                sigma=np.sqrt(v[:, c]),
                jitter=jitter,
            )
            gps.append(gp)
    fields = _model_fields(
        ctx, gps[0], X_all, stored_labels, name=name, mean=mu, cov=cov, noise_sd=None
    )
    return remember_arguments(
        DirichletGPClassification(
            **(fields | {"noise_sd": math.sqrt(tg.var_in)}),  # a float: reaches no hyperparameter
            Z=Z_arr,
            z_is_public=check_flag(z_is_public, "z_is_public"),
            jitter=jitter,
            class_gps=tuple(gps),
            n_classes=C,
            alpha_epsilon=tg.alpha_epsilon,
            _data_containers=containers,
        ),
        X,
        labels_argument,
    )
