"""Helpers shared by the exact (``.exact``) and sparse (``.sparse``) model builders."""

from __future__ import annotations

import hashlib
import math
import numbers
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from numpy.typing import ArrayLike, NDArray
from pymc.gp.cov import BaseCovariance
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import clone_replace

try:  # pytensor >= 2.31
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover - older pytensor
    from pytensor.graph.basic import ancestors

from pm_dpgp._ieee import ieee_arithmetic
from pm_dpgp._validation import (
    check_finite_array,
    check_positive,
    library_instance,
    real_or_none,
    refuse_dask,
    refuse_misaligned_rows,
    reject_unexpected,
    renamed,
    require,
)
from pm_dpgp.gp.linalg import symmetrise_inplace

CovarianceSpec = BaseCovariance | Callable[[], BaseCovariance]
NoiseSpec = float | Variable | Callable[[], Any]
HyperValue = float | NDArray[np.float64]


# --------------------------------------------------------------------------- arrays
def _as_2d_inputs(X: ArrayLike, name: str, n_cols: int) -> NDArray[np.float64]:
    # Aligned memory: PyTensor's C code refuses unaligned arrays, which is how Dask's
    # distributed protocol hands over (zero-copy) blocks deserialised on a worker.
    arr = np.require(check_finite_array(X, name, ndim=2), requirements="A")
    if arr.shape[1] != n_cols:
        # a 1-D array is read as one input per point (a column): (d, 1) is most likely one
        # point of d inputs passed as a 1-D array (stop-39 walkthrough: X[0] of a 3-input model
        # was refused as "shape (3, 1)", a shape the caller never passed)
        hint = (
            f" (a 1-D array of {n_cols} values is read as {n_cols} points of one input; for "
            f"one point of {n_cols} inputs pass {name}[None, :])"
            if arr.shape == (n_cols, 1)
            else ""
        )
        raise ValueError(
            f"{name} must have {n_cols} column(s) like the training inputs, got shape {arr.shape}"
            f"{hint}; pass inputs with that many columns."
        )
    return arr


def _readonly(arr: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.array(arr, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


# --------------------------------------------------------------------------- compilation
def hoist_float_constants(out: Variable) -> tuple[Variable, list[Variable], list[NDArray[Any]]]:
    """Replace every floating-point constant in ``out``'s graph by a new input of the same type.

    ``pm.gp.cov.ExpQuad(1, ls=1.5)`` puts ``1.5`` into the graph as a constant, so two
    kernels that differ only in a hyperparameter value are different graphs, and each is
    compiled from scratch (≈ 3 s per kernel with PyTensor 3's Numba backend, ≈ 1 s with the
    C backend).  With the values as inputs, kernels of the same *structure* share one
    cached compilation.  Returns the new output, the new inputs and their values (to be
    passed at every call; see ``BoundFunction``).  Integer constants (indices, shapes)
    stay constants: they are structural.
    """
    consts = [
        v
        for v in ancestors([out])
        if isinstance(v, Constant) and str(getattr(v.type, "dtype", "")).startswith("float")
    ]
    if not consts:
        return out, [], []
    # float64 inputs, whatever the constant's dtype: PyTensor types a Python float such as the
    # 15.0 of ``ExpQuad(ls=15.0)`` as a float32 constant, and with a float32 *input* in its
    # place ``1.0 / ls`` is computed in float32 (kernel values then carry ~4e-8 relative
    # error; PyMC's own constant-folded graph does not).  The graph is rebuilt
    # (``rebuild_strict=False``) so that the types downstream become float64.
    inputs = [pt.tensor(dtype="float64", shape=c.type.shape) for c in consts]
    [new] = clone_replace(
        [out], replace=dict(zip(consts, inputs, strict=True)), rebuild_strict=False
    )
    return new, inputs, [np.asarray(c.data, dtype=np.float64) for c in consts]


class BoundFunction:
    """A compiled PyTensor function with trailing inputs bound to fixed values.

    ``BoundFunction(fn, values)(*args)`` is ``fn(*args, *values)``; ``copy`` copies the
    compiled function (its storage) without recompiling, as ``pytensor``'s ``Function.copy``.
    """

    def __init__(self, fn: Any, values: list[NDArray[Any]]) -> None:
        self.fn = fn
        self.values = tuple(values)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args, *self.values)

    def copy(self) -> BoundFunction:
        with ieee_arithmetic():  # ``copy`` re-links under the configuration in force
            return BoundFunction(self.fn.copy(), list(self.values))


#: Functions loaded from pickles in this process, by SHA-256 of the pickle (see
#: ``ThreadSafeFunction``); a Dask worker thus unpickles each kernel once, not per task.
_LOADED: OrderedDict[bytes, ThreadSafeFunction] = OrderedDict()
_LOADED_MAX = 32
_LOADED_LOCK = threading.Lock()


def _load_thread_safe(blob: bytes) -> ThreadSafeFunction:
    """Unpickle a ``ThreadSafeFunction`` (cached per process by the pickle's digest)."""
    key = hashlib.sha256(blob).digest()
    with _LOADED_LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            _LOADED.move_to_end(key)
            return hit
    # unpickling re-links the graph under the configuration in force (pm_dpgp._ieee)
    with ieee_arithmetic():
        loaded = ThreadSafeFunction(pickle.loads(blob))  # noqa: S301 - our own pickle
    loaded._blob = blob
    with _LOADED_LOCK:
        _LOADED[key] = loaded
        while len(_LOADED) > _LOADED_MAX:
            _LOADED.popitem(last=False)
    return loaded


class ThreadSafeFunction:
    """A compiled PyTensor function that threads and processes can share.

    * **Threads** (Dask's threaded scheduler, or two models used from two threads: models of
      one kernel structure share one compiled function, ``pm_dpgp.models.exact._COMPILED``):
      a compiled ``pytensor`` function keeps its input/output storage inside the function
      object, so two threads calling it at once would race (wrong kernel matrices, from the
      other thread's inputs).  The thread that made the object calls ``fn``; every other
      thread calls its own ``fn.copy()`` (no recompilation), held in a ``threading.local``.
    * **Processes** (``dask.distributed`` workers, the multiprocessing scheduler): the object
      pickles as the pickle of ``fn`` (a compiled PyTensor function pickles and gives the same
      values; the ``threading.local`` is not pickled).  The pickle is made once and reused,
      and a process that unpickles the same bytes again (one task after another on a Dask
      worker) gets the instance it loaded before, so the ≈ 0.3 s load happens once per
      process and kernel, not once per task.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._owner = threading.get_ident()  # the thread that made it calls ``fn`` itself
        self._local = threading.local()
        self._blob: bytes | None = None

    def __call__(self, *args: Any) -> Any:
        if threading.get_ident() == self._owner:
            return self.fn(*args)
        own = getattr(self._local, "fn", None)
        if own is None:  # ≈ 20 ms once per thread and function (storage, not a recompile)
            with ieee_arithmetic():  # ``copy`` re-links under the configuration in force
                own = self._local.fn = self.fn.copy()
        return own(*args)

    def copy(self) -> ThreadSafeFunction:
        """Itself: calls from any thread are already safe (``BoundFunction.copy``)."""
        return self

    def __reduce__(self) -> tuple[Callable[[bytes], ThreadSafeFunction], tuple[bytes]]:
        if self._blob is None:
            self._blob = pickle.dumps(self.fn, protocol=pickle.HIGHEST_PROTOCOL)
        return _load_thread_safe, (self._blob,)


class PublicKernel:
    """``k(Xa, Xb)`` (or ``k(Xa, Xa)`` diagonal) at fixed PUBLIC hyperparameter values.

    A small picklable callable (no closure): ``fn`` is the compiled kernel (a
    ``BoundFunction`` or ``ThreadSafeFunction``) and ``args`` the public
    hyperparameter values passed after the inputs.  ``diag=True`` makes it ``k_diag(Xa)``.
    """

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], *, diag: bool = False):
        self.fn = fn
        self.args = tuple(args)
        self.diag = bool(diag)

    def __call__(self, Xa: NDArray[np.float64], *Xb: NDArray[np.float64]) -> NDArray[np.float64]:
        if len(Xb) != (0 if self.diag else 1):
            raise TypeError(f"expected {1 if self.diag else 2} input array(s)")
        return np.asarray(self.fn(Xa, *Xb, *self.args), dtype=np.float64)


# --------------------------------------------------------------------------- public kernels
def _eval_kernel(
    view: Any,
    Xa: ArrayLike,
    Xb: ArrayLike | None,
    *,
    symmetrise_equal: bool,
    check_finite: bool = True,
) -> NDArray[np.float64]:
    """``view._kernel(Xa, Xb)`` on checked inputs, symmetrised and checked finite.

    ``view`` is a public GP view (``_kernel``, ``input_dim``, ``hyperparameters``).  The
    result is symmetrised (``½(K + Kᵀ)``) when ``Xb`` is omitted, and with
    ``symmetrise_equal`` also when ``Xb`` equals ``Xa``.  ``check_finite=False`` is for
    private inputs: the caller drops records with non-finite values instead of raising
    (a refusal would depend on the private data, ``docs/errors.md``).
    """
    A = _as_2d_inputs(Xa, "Xa", view.input_dim)
    B = A if Xb is None else _as_2d_inputs(Xb, "Xb", view.input_dim)
    K = view._kernel(A, B)
    if B is A or (symmetrise_equal and np.array_equal(A, B)):
        # ½(K + Kᵀ) in place, blocked: no n×n temporaries (the kernel output is ours)
        K = symmetrise_inplace(np.require(K, dtype=np.float64, requirements=["W", "A"]))
    if check_finite and not np.all(np.isfinite(K)):
        raise ValueError(
            "The kernel evaluated to NaN/inf at these inputs and hyperparameters "
            f"({view.hyperparameters}); check the hyperparameter values and the scale of the "
            "inputs (e.g. 1e200 overflows the squared distance), and that a Gibbs "
            "lengthscale_func is finite and > 0 at every input."
        )
    return K


def _eval_kernel_diag(view: Any, Xa: ArrayLike, *, check_finite: bool) -> NDArray[np.float64]:
    """``view._kernel_diag(Xa)`` as a fresh ``(m,)`` array (optionally checked finite)."""
    A = _as_2d_inputs(Xa, "Xa", view.input_dim)
    d = np.broadcast_to(np.asarray(view._kernel_diag(A), dtype=np.float64), (A.shape[0],))
    if check_finite and not np.all(np.isfinite(d)):
        raise ValueError(
            "The kernel diagonal evaluated to NaN/inf at these inputs and hyperparameters "
            f"({view.hyperparameters}); check the hyperparameter values and the scale of the "
            "inputs."
        )
    return np.array(d)


class PublicInputsView:
    """``n``, ``input_dim``, ``kernel`` and ``kernel_diag`` of a public GP view that holds its
    (public) training inputs ``X`` and its compiled ``_kernel``/``_kernel_diag``
    (``PublicGP``, ``PublicLatentGP``)."""

    X: NDArray[np.float64]

    @property
    def n(self) -> int:
        """Number of training points."""
        return int(self.X.shape[0])

    @property
    def input_dim(self) -> int:
        """Number of input columns ``d``."""
        return int(self.X.shape[1])

    def kernel(self, Xa: ArrayLike, Xb: ArrayLike | None = None) -> NDArray[np.float64]:
        """Kernel matrix ``k(Xa, Xb)`` at the public hyperparameters; ``Xb=None`` means ``Xa``.

        ``Xa``/``Xb`` are ``(m,)`` or ``(m, d)``.  When ``Xb`` is ``None`` or equal to
        ``Xa`` the result is symmetrised exactly (``½(K + Kᵀ)``; the BLAS product
        inside the kernel need not be bitwise symmetric).
        """
        return _eval_kernel(self, Xa, Xb, symmetrise_equal=True)

    def kernel_diag(self, Xa: ArrayLike) -> NDArray[np.float64]:
        """Diagonal ``k(x, x)`` for each row of ``Xa``, shape ``(m,)``."""
        return _eval_kernel_diag(self, Xa, check_finite=True)


# --------------------------------------------------------------------------- descriptions
def _format_value(v: HyperValue) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "[" + ", ".join(f"{x:.6g}" for x in np.ravel(v)) + "]"


def _describe_tensor(x: Any, mapping: Mapping[Variable, Variable]) -> str:
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return f"{float(x):.6g}"
    if isinstance(x, np.ndarray):
        return _format_value(x if x.ndim else float(x))
    if isinstance(x, Variable):
        if isinstance(x, Constant):
            data = np.asarray(x.data, dtype=float)
            return _format_value(float(data) if data.ndim == 0 else data)
        try:
            [x2] = clone_replace([x], replace=dict(mapping))
            return str(pytensor.printing.pprint(x2))
        except Exception:  # noqa: BLE001 - printing is best effort
            return x.name or "<expression>"
    return repr(x)


def _describe_cov(cov: Any, mapping: Mapping[Variable, Variable]) -> str:
    """Human-readable description of a PyMC covariance (best effort, for metadata)."""
    gpc = pm.gp.cov
    if isinstance(cov, (gpc.Add, gpc.Prod)):
        sep = " + " if isinstance(cov, gpc.Add) else " * "
        parts = [
            _describe_cov(f, mapping)
            if isinstance(f, BaseCovariance)
            else _describe_tensor(f, mapping)
            for f in cov._factor_list
        ]
        return "(" + sep.join(parts) + ")"
    if isinstance(cov, gpc.Exponentiated):
        return f"({_describe_cov(cov.kernel, mapping)})**{_describe_tensor(cov.power, mapping)}"
    if isinstance(cov, gpc.Constant):
        return f"Constant(c={_describe_tensor(cov.c, mapping)})"
    if isinstance(cov, gpc.WhiteNoise):
        return f"WhiteNoise(sigma={_describe_tensor(cov.sigma, mapping)})"
    describe = getattr(cov, "describe", None)
    if callable(describe):
        return str(describe())
    args: list[str] = []
    if isinstance(cov, gpc.Covariance):
        args.append(f"input_dim={cov.input_dim}")
        if not np.array_equal(cov.active_dims, np.arange(cov.input_dim)):
            args.append(f"active_dims={cov.active_dims.tolist()}")
    for attr in ("ls", "period", "alpha", "c", "d", "offset"):
        if hasattr(cov, attr):
            args.append(f"{attr}={_describe_tensor(getattr(cov, attr), mapping)}")
    return f"{type(cov).__name__}({', '.join(args)})"


# --------------------------------------------------------------------------- builders
def _resolve_cov(cov_func: CovarianceSpec) -> BaseCovariance:
    if isinstance(cov_func, BaseCovariance):
        return cov_func
    if callable(cov_func):
        cov = cov_func()
        if not isinstance(cov, BaseCovariance):
            raise TypeError(
                "cov_func() must return a PyMC covariance (pm.gp.cov.Covariance), got "
                f"{type(cov).__name__}."
            )
        return cov
    raise TypeError(
        "cov_func must be a PyMC covariance (e.g. pm.gp.cov.ExpQuad(1, ls=0.5)) or a "
        f"zero-argument callable returning one, got {type(cov_func).__name__}."
    )


def _noise_sd_argument(noise_sd: Any, deprecated: dict[str, Any], func: str) -> Any:
    """The builders' ``noise_sd=``, taking the deprecated ``sigma=`` (issue 14)."""
    noise_sd = renamed("sigma", "noise_sd", deprecated, noise_sd, func=func, stacklevel=4)
    reject_unexpected(deprecated, func=func)
    return require(noise_sd, "noise_sd", func=func)


def _resolve_sigma(sigma: NoiseSpec) -> float | Variable:
    value: Any = sigma
    if isinstance(value, BaseCovariance):
        raise TypeError(
            "noise_sd must be a noise standard deviation, not a covariance function; pass a float."
        )
    if callable(value) and not isinstance(value, Variable):
        value = value()
    if isinstance(value, bool | np.bool_) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "b"
    ):
        raise TypeError(
            "noise_sd must be a number or a PyMC random variable, got a bool; pass a float."
        )
    if isinstance(value, numbers.Real) or (isinstance(value, np.ndarray) and value.ndim == 0):
        # check_positive judges a 0-d array by its element: np.array("0.3") is text (stop 40)
        return check_positive(value, "noise_sd")
    if isinstance(value, Variable):
        if value.type.ndim != 0:
            raise ValueError(
                f"noise_sd must be a scalar (homoscedastic noise std), got ndim={value.type.ndim}; "
                "pass a scalar."
            )
        return value
    raise TypeError(
        "noise_sd must be a positive float, a scalar PyMC variable, or a zero-argument callable "
        f"returning one, got {type(value).__name__}; pass e.g. noise_sd=0.1."
    )


def _check_name_and_mean(name: str, mean: float) -> float:
    """Validate the variable-name prefix and return the public prior mean as a finite float."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}.")
    # PyMC's constant mean functions are the same public constant (stop-32 audit: a PyMC user
    # passes pm.gp.mean.Zero() or Constant(c)); other mean functions are not constants
    if isinstance(mean, pm.gp.mean.Zero):
        mean = 0.0
    elif isinstance(mean, pm.gp.mean.Constant) and isinstance(mean.c, Constant):
        mean = mean.c.data  # pt.constant(2.5): a public constant too (stop-32 review)
    elif isinstance(mean, pm.gp.mean.Constant) and not isinstance(mean.c, Variable):
        mean = mean.c
    mean_f = real_or_none(mean, "mean")  # True and "0.5" refused (stop-40 fuzz)
    if mean_f is None:
        raise ValueError(
            f"mean must be a public constant number (or pm.gp.mean.Zero() / Constant(c) with "
            f"a number c), got a {type(mean).__name__} (its value is not quoted: it may be "
            "data); pass a float. A non-constant mean (Linear, a random "
            "variable) is not supported: subtract a public trend from y first."
        )
    if not math.isfinite(mean_f):
        raise ValueError(f"mean must be finite, got {mean!r}; pass a finite public value.")
    return mean_f


def _resolve_cov_and_sigma(
    cov_func: CovarianceSpec, sigma: NoiseSpec, n_cols: int, inputs_name: str
) -> tuple[BaseCovariance, float | Variable]:
    """Resolve covariance then noise (inside the model context) and check ``input_dim``."""
    cov = _resolve_cov(cov_func)
    sig = _resolve_sigma(sigma)
    _check_kernel(cov, n_cols, inputs_name)
    if isinstance(sig, Variable):
        _check_graph_inputs([sig], "noise_sd", "the noise sd")
    return cov, sig


def _kernel_graphs(cov: BaseCovariance) -> list[Variable]:
    """``k(X_a, X_b)`` and ``k(X_a, X_a)`` diagonal on symbolic inputs: the graphs the public
    views compile, searched for hyperparameters (``_hyperparameter_rvs``) and for inputs they
    cannot hold (``_check_kernel``)."""
    Xa = pt.matrix("Xa", dtype="float64")
    Xb = pt.matrix("Xb", dtype="float64")
    return [pt.as_tensor_variable(cov(Xa, Xb)), pt.as_tensor_variable(cov(Xa, diag=True))]


def _covariance_terms(cov: BaseCovariance) -> list[BaseCovariance]:
    """``cov`` and every covariance it is built from (sums, products, ``ScaledCov``, ...)."""
    terms: list[BaseCovariance] = []
    stack, seen = [cov], set()
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        terms.append(c)
        for value in vars(c).values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            stack.extend(x for x in items if isinstance(x, BaseCovariance))
    return terms


def _check_kernel(cov: BaseCovariance, n_cols: int, inputs_name: str) -> None:
    """Refuse a covariance the public views cannot evaluate as PyMC does (inside the model).

    * ``input_dim`` must be the number of input columns;
    * no ``pm.gp.cov.WhiteNoise`` term: the views evaluate ``k(X_a, X_b)`` with two inputs, where
      PyMC's white noise is zero, while PyMC's ``cov(X)`` adds it (stop-32 audit: the training
      covariance lost the nugget, 0.49 off for a classification model; the noise belongs in
      ``noise_sd=``);
    * no random variable of another model (the kernel would draw it at every evaluation) and
      no ``pm.Data`` container: the views cache matrices, and ``pm.set_data`` on a lengthscale
      left a ``PublicGP`` mixing two lengthscales (stop-32 audit).
    """
    input_dim = getattr(cov, "input_dim", None)
    if input_dim is not None and input_dim != n_cols:
        raise ValueError(
            f"cov_func has input_dim={input_dim} but {inputs_name} has {n_cols} column(s)."
        )
    if any(isinstance(c, pm.gp.cov.WhiteNoise) for c in _covariance_terms(cov)):
        raise TypeError(
            "cov_func contains pm.gp.cov.WhiteNoise, which PyMC adds only to cov(X) and not to "
            "cross-covariances, so the releases would drop it; give the observation noise as "
            "noise_sd= (regression), or leave the nugget out (classification)."
        )
    _check_graph_inputs(_kernel_graphs(cov), "cov_func", "a kernel parameter")


def _check_graph_inputs(graphs: list[Variable], what: str, role: str) -> None:
    """Refuse a random variable that is not a free variable of the model, and a ``pm.Data`` /
    shared variable, among the inputs of ``graphs`` (the kernel, or the noise sd).

    A shared variable may hold the private outputs themselves: ``noise_sd=pt.std(y_data)`` on
    the model's own ``pm.Data`` of ``y`` was taken as a public noise variance, and the release
    charged nothing for it and published ``var(y)`` as ``noise_var`` (stop-46 audit).
    """
    own = list(pm.modelcontext(None).free_RVs)
    reached = [v for v in ancestors(graphs, blockers=own) if all(v is not r for r in own)]
    for var in reached:
        owner = getattr(var, "owner", None)
        op_classes = type(owner.op).__mro__ if owner is not None else ()
        if any("RandomVariable" in t.__name__ for t in op_classes):
            raise ValueError(
                f"{what} uses the random variable {var.name or var!s}, which is not a free "
                "variable of this model (a .dist() or another model's variable: evaluating "
                f"the {what} would draw it); create it inside the model's `with` block, or "
                "build there (model=)."
            )
    shared = [
        v
        for v in reached
        if isinstance(v, pytensor.compile.sharedvalue.SharedVariable)
        and not isinstance(v.type, pt.random.type.RandomType)
    ]
    if shared:
        names = ", ".join(repr(v.name) for v in shared)
        raise ValueError(
            f"{what} depends on pm.Data / shared variable(s) {names}: {role} must be a number, "
            "or a random variable whose public value is given in hyperparameters= at release "
            "time (a container may hold the private data, and the public views cache kernel "
            "matrices, which pm.set_data would change behind a release)."
        )


def _hyperparameter_rvs(
    model: pm.Model, cov: BaseCovariance, sigma: float | Variable | None = None
) -> tuple[Variable, ...]:
    """Free RVs reached from the kernel / noise graphs, not looking through them.

    A hyperprior's parameters are not needed once the child is fixed.
    """
    graphs = _kernel_graphs(cov)
    if isinstance(sigma, Variable):
        graphs.append(sigma)
    free = list(model.free_RVs)
    reached = set(ancestors(graphs, blockers=free))
    return tuple(rv for rv in free if rv in reached)


# --------------------------------------------------------------------------- PyMC idioms
def resolve_model(model: pm.Model | None, coords: Mapping[str, Any] | None = None) -> pm.Model:
    """The model to build into: ``model``, else the enclosing ``with pm.Model():``, else new.

    Building inside a ``with pm.Model() as m:`` block adds to ``m`` itself (PyMC's
    ``modelcontext``), never to a silently nested child model.  ``coords`` are added to it.
    """
    if model is not None and not isinstance(model, pm.Model):
        raise TypeError(f"model must be a pymc.Model or None, got {type(model).__name__}.")
    if model is None:
        try:
            model = pm.modelcontext(None)
        except TypeError:  # no model on the context stack
            model = pm.Model()
    if coords:
        model.add_coords(dict(coords))
    return model


def _is_data_container(x: Any) -> bool:
    from pytensor.compile.sharedvalue import SharedVariable

    return isinstance(x, SharedVariable)


def data_input(x: Any, name: str, ndim: int) -> tuple[NDArray[np.float64], Any]:
    """``(checked value, what goes into the PyMC graph)`` for an array or a ``pm.Data``.

    A ``pm.Data`` container (a PyTensor shared variable) enters the graph as itself, as a
    column when it is 1-D and inputs are expected (so ``pm.set_data`` works); its current
    value is checked like an array.  Other symbolic variables are refused: their value is
    not a fixed array a release can use.
    """
    if _is_data_container(x):
        arr = current_data(x, name, ndim)
        graph = x[:, None] if ndim == 2 and x.type.ndim == 1 else x
        return arr, graph
    if isinstance(x, Variable):
        raise TypeError(
            f"{name} must be an array or a pm.Data container, got a symbolic "
            f"{type(x).__name__}; wrap the values in pm.Data(...) or pass the array."
        )
    refuse_dask(x, name)
    arr = check_finite_array(x, name, ndim=ndim)
    return arr, arr


def stored_value(x: Any) -> Any:
    """The current value of an array or ``pm.Data`` container, unchecked (no value read).

    For code that must not inspect private values before its spend (``current_data`` checks
    them finite): the caller converts and checks the schema only, then maps non-finite
    records record-wise after the spend.
    """
    return x.get_value(borrow=True) if _is_data_container(x) else x


def stored_input_dim(x: Any) -> int:
    """Number of input columns of an array or ``pm.Data`` container, from its shape only
    (a 1-D container is one column, as the builders treat it); no value is read."""
    shape = np.shape(stored_value(x))
    return 1 if len(shape) == 1 else int(shape[1])


def current_data(x: Any, name: str, ndim: int) -> NDArray[np.float64]:
    """The current value of an array or ``pm.Data`` container, checked finite, rank ``ndim``."""
    if _is_data_container(x):
        return check_finite_array(x.get_value(borrow=True), name, ndim=ndim)
    return x


@dataclass(frozen=True)
class BuilderInputs:
    """Training inputs and outputs of a model builder, checked once (``_builder_inputs``).

    ``X``/``y`` are the checked current values (``(n, d)`` and ``(n,)`` float64 arrays);
    ``X_graph``/``y_graph`` what enters the PyMC graph (the arrays, or the ``pm.Data``
    containers, a 1-D input container as a column); ``X_stored``/``y_stored`` what the
    model object keeps (the arrays, or the containers so that ``pm.set_data`` reaches
    releases too, see ``GPRegression.X``).
    """

    X: NDArray[np.float64]
    y: NDArray[np.float64]
    X_graph: Any
    y_graph: Any
    X_stored: Any
    y_stored: Any


def _builder_inputs(X: Any, y: Any, *, per_row: str = "output") -> BuilderInputs:
    """Check a builder's ``X`` and ``y`` (arrays or ``pm.Data`` containers), in this order:
    ``X`` finite of rank 2 (a 1-D input is one column), ``y`` finite of rank 1, then equal
    numbers of rows (``per_row`` names what ``y`` holds in the message).

    Shared by ``gp_regression``, ``sparse_gp_regression``, ``fitc_gp_regression`` and
    ``gp_classification``.  The checks are the data owner's own input checks (the private
    values are never quoted, ``pm_dpgp._validation.check_finite_array``).
    """
    refuse_misaligned_rows((X, y), ("X", "y"))
    X_arr, X_graph = data_input(X, "X", 2)
    y_arr, y_graph = data_input(y, "y", 1)
    if X_arr.shape[0] != y_arr.shape[0]:
        raise ValueError(
            f"X and y must have the same number of rows (pass one {per_row} per input row), "
            f"got {X_arr.shape[0]} and {y_arr.shape[0]}."
        )
    return BuilderInputs(
        X=X_arr,
        y=y_arr,
        X_graph=X_graph,
        y_graph=y_graph,
        X_stored=X_arr if X_graph is X_arr else X,
        y_stored=y_arr if y_graph is y_arr else y,
    )


def remember_arguments(model: Any, X: Any, y: Any) -> Any:
    """Keep the ``X``/``y`` objects the caller passed (identity only, never read) on ``model``.

    ``dp_ppc`` refuses a 'hold-out' set that *is* one of them: the builders store converted
    copies (lists, float32, integer Series), and passing the same object again published the
    training outputs (stop-32 audit).  Values held in ``pm.Data`` are copied by PyMC itself
    and cannot be recognised this way (``docs/workflow.md``).
    """
    model._X_argument, model._y_argument = X, y
    model._input_columns = dataframe_columns(X)
    return model


def dataframe_columns(X: Any) -> tuple[str, ...] | None:
    """The input column names of labelled inputs (public: the schema, not a value), else None.

    A pandas ``DataFrame``'s columns; a named pandas ``Series`` (one input column, e.g.
    ``df["age"]``); an xarray ``DataArray``: its name when 1-D, the labels of its last
    dimension when 2-D and labelled with text (stop-42 audit: a model built on ``df["age"]``
    accepted ``df["weight"]`` as ages, and a ``DataArray`` with ``feature = ["weight",
    "age"]`` was used by position for an ``["age", "weight"]`` model).
    """
    # a Dask DataFrame / Series: its columns and name are metadata, read without computing
    # (stop-44 audit: the Dask path of the releases read no schema, so a Dask DataFrame in
    # another column order than the model's was used by position, and recorded no columns)
    if library_instance(X, "pandas", "DataFrame") or library_instance(
        X, "dask.dataframe", "DataFrame"
    ):
        return tuple(str(c) for c in X.columns)
    if library_instance(X, "pandas", "Series") or library_instance(X, "dask.dataframe", "Series"):
        return None if X.name is None else (str(X.name),)
    if library_instance(X, "xarray", "DataArray"):
        if X.ndim == 1:
            return None if X.name is None else (str(X.name),)
        last = X.dims[-1] if X.ndim == 2 else None
        if last is not None and last in X.coords:
            labels = X.coords[last].values
            if labels.dtype.kind in "OUS" and all(isinstance(v, str) for v in labels.tolist()):
                return tuple(labels.tolist())
    return None


def columns_of(source: Any) -> tuple[str, ...] | None:
    """The input column names ``source`` was built on, if any: a model (its builder kept
    them), a release (``metadata["input_columns"]``), a training pair ``(X, y)`` whose ``X``
    is a ``DataFrame``, or the names themselves."""
    if source is None:
        return None
    if isinstance(source, tuple | list) and source and all(isinstance(c, str) for c in source):
        return tuple(source)
    cols = getattr(source, "_input_columns", None)
    if cols is not None:
        return tuple(cols)
    metadata = getattr(source, "metadata", None)
    if isinstance(metadata, dict) and metadata.get("input_columns"):
        return tuple(str(c) for c in metadata["input_columns"])
    if isinstance(source, tuple | list) and len(source) >= 2:
        return dataframe_columns(source[0])
    return None


def input_columns_record(source: Any) -> list[str] | None:
    """``metadata["input_columns"]`` of a release made from ``source`` (public: the schema)."""
    cols = columns_of(source)
    return None if cols is None else list(cols)


def check_input_columns(X_new: Any, model: Any, name: str = "X_star") -> None:
    """Refuse a ``DataFrame`` of new inputs whose columns are not the model's, in its order.

    Inputs are used by position, so ``X_star[["weight", "age"]]`` for a model built on
    ``["age", "weight"]`` was a different release, silently (stop-41 fuzz).  ``model`` is
    anything ``columns_of`` reads: a model, a release, a training pair.  Only the column
    names are compared (the schema); arrays, and models built from arrays, are positional as
    documented.
    """
    fit = columns_of(model)
    given = dataframe_columns(X_new)
    if fit is None or given is None or given == fit:
        return
    how = (
        f"select them in that order ({name}[{list(fit)}])"
        if sorted(given) == sorted(fit)
        else "rename and order them as the model's"  # X_star[...] would be a KeyError
    )
    raise ValueError(
        f"{name} has the columns {list(given)}, but the model was built on {list(fit)}: inputs "
        f"are used by position, so {how}; nothing was spent or drawn."
    )


def view_inputs(view: Any, X_new: ArrayLike, name: str = "X_star") -> NDArray[np.float64]:
    """New inputs of a public view as ``(m, d)`` floats, after ``check_input_columns``: the
    views' own ``predict`` / ``posterior_var`` / cloaking matrices read inputs by position,
    and a hold-out ``DataFrame`` in another column order gave another answer, silently
    (stop-43 audit: ``posterior_var``, recommended for ``dp_ppc(extra_sd=)``, moved 0.13)."""
    check_input_columns(X_new, view, name)
    return _as_2d_inputs(X_new, name, view.input_dim)


def _model_fields(
    ctx: pm.Model,
    gp: Any,
    X: Any,
    y: Any,
    *,
    name: str,
    mean: float,
    cov: BaseCovariance,
    noise_sd: float | Variable | None,
) -> dict[str, Any]:
    """The ``GPRegression`` fields every builder sets, with the hyperparameter RVs reached
    from ``cov`` (and ``noise_sd`` when it is a PyMC variable) in ``ctx``."""
    hyper_rvs = _hyperparameter_rvs(ctx, cov, noise_sd)
    return {
        "model": ctx,
        "gp": gp,
        "_X": X,
        "_y": y,
        "name": name,
        "mean": mean,
        "cov_func": cov,
        "noise_sd": noise_sd,
        "hyperparameter_names": tuple(rv.name for rv in hyper_rvs),
        "_hyper_rvs": hyper_rvs,
    }
