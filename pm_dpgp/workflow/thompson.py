r"""Thompson sampling with differentially private GP sample paths, under a privacy budget.

Each round ``t`` (Thompson 1933; Russo & Van Roy 2014 for GP posterior sampling):

1. the curator's private dataset is ``D_t`` = every input queried so far and the
   objective values observed there (full privacy: inputs *and* outputs private,
   neighbours replace one ``(x, y)``);
2. the privacy event of releasing **one** posterior sample path of ``D_t`` is computed
   (``SamplePathBound`` with ``n = |D_t|``;
   the bound grows with ``n``) and the ledger is asked ``can_afford`` **before** any
   sampling; the loop stops cleanly when it cannot;
3. the path is released with ``sample_path_release``
   (``n_draws=1``, same ledger: adaptive RDP composition, Mironov 2017 Prop. 1); should
   the ledger still refuse it there (a persistent ledger that another process spent from
   in between), nothing is recorded or drawn and the loop stops the same way;
4. the next query is the maximiser of the released path over candidates: a public
   candidate set, or random candidates in the public box followed by local refinement,
   evaluating the lazy path at new points (post-processing: free);
5. the objective is observed there (private) and appended to ``D_{t+1}``.

What is published and what is not.  The chosen inputs, the released path values at
them, the per-round events and the cumulative ε are DP outputs (post-processing of
the released paths) and go in ``ThompsonResult.idata``.  The observed objective
values are the private data: they live only in ``ThompsonResult.owner``
(``OwnerRecord``), which is never part of the InferenceData.  The observation
noise sd used by the model and the response range ``y_bounds`` are public; responses
are clipped by the mechanism.

Non-private Thompson sampling (``private=False``) draws from the exact posterior with
no ledger and no clipping; ``random_search`` is the other baseline.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import cholesky

from pm_dpgp._progress import progress_bar
from pm_dpgp._validation import (
    _is_missing,
    bounds_from_centred,
    centred_bound,
    check_count,
    check_delta,
    check_doubles_fit,
    check_finite_array,
    check_finite_number,
    check_flag,
    check_positive,
    check_rng,
    check_scale,
    missing_as_nan,
    refuse_text,
    reject_unexpected,
    renamed,
)
from pm_dpgp.accounting import BudgetExceededError, Ledger, PrivacyEvent
from pm_dpgp.compat import get_group
from pm_dpgp.domain import Box, parse_domain
from pm_dpgp.gp.linalg import psd_eigen_root
from pm_dpgp.mechanisms.full.sample_path import (
    NEIGHBOURING_RELATION,
    PRIVACY_MODEL,
    SAMPLE_PATH_OS_ENTROPY,
    SEED_POLICY_OS_ENTROPY,
    PrivateRows,
    _check_public_kernel,
    _public_probes,
    check_mean_resolvable,
    resolve_kappa,
    sample_path_event,
    sample_path_release,
)
from pm_dpgp.mechanisms.full.sample_path_bounds import (
    SamplePathBound,
    Sensitivity,
)
from pm_dpgp.mechanisms.noise import SEED_POLICY_SIMULATION, SIMULATION
from pm_dpgp.models import GPRegression, PublicGP, gp_regression
from pm_dpgp.models._common import check_input_columns, dataframe_columns
from pm_dpgp.models.sparse import kernel_structure_at

__all__ = [
    "LoopError",
    "ObjectiveError",
    "OwnerRecord",
    "ReleaseError",
    "ThompsonResult",
    "dp_thompson_sampling",
    "random_search",
]

Objective = Callable[[NDArray[np.float64]], ArrayLike]
StopReason = Literal["completed", "budget", "interrupted", "objective_error", "release_error"]


@dataclass
class OwnerRecord:
    """The curator's private record: **never publish** (holds the observed values).

    Its ``repr`` shows the shapes only, so printing a result in a notebook does not put the
    observed values on screen (the package's convention for private arrays).
    """

    X: NDArray[np.float64] = field(repr=False)  # (n, d) all queried inputs, design first
    y: NDArray[np.float64] = field(repr=False)  # (n,) observed objective values (private)
    n_init: int

    def __repr__(self) -> str:
        return (
            f"OwnerRecord(X=<private {self.X.shape} array>, y=<private {self.y.shape} array>, "
            f"n_init={self.n_init})"
        )

    @property
    def best_observed(self) -> NDArray[np.float64]:
        """Running maximum of the observed values after each round (private)."""
        return np.maximum.accumulate(self.y)[self.n_init - 1 :]


@dataclass
class ThompsonResult:
    """Outcome of a Thompson-sampling run.

    Attributes
    ----------
    idata:
        the publishable ``arviz.InferenceData`` (group ``thompson`` with dim ``round``;
        ``constant_data`` with the public design); DP content only.
    owner:
        the private ``OwnerRecord`` (observed values): not for publication.
    ledger:
        the ledger charged by the run (``None`` for non-private runs).
    events:
        the privacy event of each charged round (empty for non-private runs), including a
        round charged whose release or objective then failed or was interrupted (replaying
        them on a fresh ledger gives the run's total).
    stop_reason:
        ``"completed"``, ``"budget"`` (the next round would overspend), ``"interrupted"``,
        ``"objective_error"`` (only on ``ObjectiveError.result``) or ``"release_error"``
        (only on ``ReleaseError.result``).
    """

    idata: Any
    owner: OwnerRecord
    ledger: Ledger | None
    events: list[PrivacyEvent] = field(default_factory=list)
    stop_reason: StopReason = "completed"

    @property
    def n_rounds(self) -> int:
        """Number of completed rounds."""
        return int(get_group(self.idata, "thompson").sizes.get("round", 0))

    def __repr__(self) -> str:
        """Rounds, stop reason and the spend in one line (the dataclass repr printed the whole
        InferenceData, the ledger and every event: 4.7 kB; walkthrough 40).  Public only."""
        attrs = get_group(self.idata, "thompson").attrs
        spent = attrs.get("epsilon_spent_total")
        delta = attrs.get("ledger_delta", attrs.get("delta"))
        spend = "" if spent is None else f", epsilon spent {spent:.4g} at delta {delta!r}"
        return (
            f"ThompsonResult(mechanism={attrs.get('mechanism')!r}, rounds {self.n_rounds}, "
            f"stop_reason={self.stop_reason!r}{spend}, {len(self.events)} events; "
            "idata, owner (private), ledger, events)"
        )

    @property
    def x_chosen(self) -> NDArray[np.float64]:
        """``(rounds, d)`` chosen inputs (public)."""
        return np.asarray(get_group(self.idata, "thompson")["x_chosen"].values)

    def to_inference_data(
        self,
        *,
        dims: Mapping[str, Sequence[str]] | None = None,
        coords: Mapping[str, ArrayLike] | None = None,
    ) -> Any:
        """``idata`` with user-named dims/coords (see ``_thompson_idata``).

        E.g. ``dims={"x_chosen": ["feature"]}, coords={"feature": ["temperature"]}``.
        """
        return _thompson_idata(
            get_group(self.idata, "thompson"),
            get_group(self.idata, "constant_data"),
            dims=dims,
            coords=coords,
        )


class LoopError(RuntimeError):
    """A Thompson loop failed after privacy charges: ``result`` is the run up to the last
    completed round (a ``ThompsonResult``), whose charges stand (``ObjectiveError``,
    ``ReleaseError``)."""

    def __init__(self, message: str, result: ThompsonResult) -> None:
        super().__init__(message)
        self.result = result


class ReleaseError(LoopError):
    """A round's sample-path release (or an evaluation of its released path) failed after the
    ledger charged it (e.g. ``MemoryError`` in its O(n³) factorisation at large n):
    ``result`` holds the completed rounds and, in ``events``, the failed round's charge, with
    ``stop_reason="release_error"`` (stop-43 audit: the completed rounds were lost), or
    refused before its charge in a later round (a release too large to hold at that round's
    ``n``: stop-44 audit).  In ``dp_thompson_sampling_tree``, charged once before round 1:
    any failure after that charge other than the objective's (building the counter, a
    round's release, posterior, sample or maximisation; stop-49 audit), ``events`` holding
    the run's one charge.  The release's own exception is ``__cause__``.
    """


class ObjectiveError(LoopError):
    """The objective failed during a round, after that round's privacy charge.

    The charges already made stand (their noise was drawn: a path released, or the whole
    run's tree charged before its first round), so the loop does not discard what they
    paid for: ``result`` is the run up to the last completed round, as a ``ThompsonResult``
    with ``stop_reason="objective_error"``.  The message holds counts only; the objective's
    own exception is chained as ``__cause__`` (the curator's code: what it says is its own).
    """


def warn_no_round(loop: str, advice: str) -> None:
    """A run that the budget stopped before its first round says so (stop-31 walkthrough: an
    empty result with ``stop_reason="budget"`` came back silently).  Public: the refusal
    depends on the ledger and the public settings only."""
    warnings.warn(
        f"{loop}: the ledger cannot afford the first round, so no round ran (nothing was "
        f"spent or drawn; stop_reason='budget'). {advice}",
        UserWarning,
        stacklevel=3,
    )


def loop_failure(
    result: ThompsonResult,
    stage: Literal["objective", "release"] = "objective",
    *,
    what: str = "the round's sample-path release",
) -> LoopError:
    """The ``ObjectiveError`` of a loop whose objective failed after ``result``'s rounds, or
    with ``stage="release"`` the ``ReleaseError`` of a release that failed after its charge
    (``what`` names the step that failed, in public words)."""
    done = result.n_rounds
    charged = (
        "(a non-private run: nothing was charged)"
        if result.ledger is None
        else f"after the run's privacy charges so far (ledger total epsilon "
        f"{float(result.ledger.epsilon()):.6g}), which stay charged"
    )
    if stage == "objective":
        what = "objective(X)"
    error = ObjectiveError if stage == "objective" else ReleaseError
    return error(
        f"{what} failed in round {done + 1} {charged}; the {done} completed round(s) "
        f"are in err.result (stop_reason='{stage}_error'). The {stage}'s own error is "
        "chained below.",
        result,
    )


def _thompson_idata(
    trace: Any,
    const: Any,
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
) -> Any:
    """The publishable result: DP draws in ``posterior``, the per-round trace, the design.

    ``posterior`` (one chain, ``draw`` = round): ``x_chosen`` (``draw, input_dim``), the
    maximiser of each round's DP sample path, and ``f_path_at_chosen``, that path's value
    there: one DP posterior sample per round (Russo & Van Roy 2014), so ``az.plot_trace``
    shows the search and ``az.plot_posterior`` where it concentrated.  ``thompson`` keeps
    the per-round record (dim ``round``) with ε spent; ``constant_data`` the public design.
    """
    from pm_dpgp.release import draws_to_inference_data

    return draws_to_inference_data(
        {
            "x_chosen": (("input_dim",), np.asarray(trace["x_chosen"].values, float)),
            "f_path_at_chosen": ((), np.asarray(trace["f_path_at_chosen"].values, float)),
        },
        X_star=None,
        attrs=dict(trace.attrs),
        constant_data=const,
        extra_groups={"thompson": trace},
        default_coords={"input_dim": np.asarray(trace["input_dim"].values)},
        dims=dims,
        coords=coords,
    )


def _box(domain: Any, d: int) -> tuple[NDArray, NDArray]:
    """``(lower, upper)`` of the public box in ``d`` dimensions (``pm_dpgp.domain``: the
    corners ``(lower, upper)``, ``(low, high)`` pairs or a ``Box``; a 2 × 2 array that is a
    box both ways is read as corners, with a warning)."""
    # a search needs low < high; a 2 × 2 array is read as the loop's (lower, upper) corners
    lower, upper = parse_domain(domain, d, strict=True, layout="corners")
    return lower, upper


def _observe(
    objective: Objective, X: NDArray[np.float64], fill: float | None = None
) -> NDArray[np.float64]:
    """Objective values at ``X``; the count is checked (public), never the values.

    With ``fill`` (private runs) non-finite values become ``fill`` (the public prior mean)
    instead of raising: whether the private objective returned one is never reported
    (``docs/errors.md``).  Without it (non-private runs) they are refused.
    """
    # the objective gets a read-only copy: what it does to its argument cannot change the
    # published query (which must be a function of the transcript alone)
    query = np.array(X, dtype=np.float64, copy=True)
    query.flags.writeable = False
    try:
        raw = objective(query)
    except ValueError as err:
        if "read-only" in str(err):  # the curator's own code; says why, quotes no value
            raise ValueError(
                "objective(X) tried to modify X: the loop passes a read-only copy of the "
                "queried inputs (they are published); copy it first (X = X.copy())."
            ) from err
        raise
    # the observed values are private: text is refused by its type, and a failed conversion
    # does not keep NumPy's message (which quotes the entry) even as the error's context
    refuse_text(raw, "objective(X)", note="")
    y = _as_observed_floats(raw)
    if y is None:
        raise TypeError(
            "objective(X) must return real numbers, one per row of X (a float array); "
            "some value is not a number."
        )
    if y.shape != (len(X),):
        raise ValueError(
            f"objective(X) must return {len(X)} values for X of shape {X.shape}; return one "
            "value per row."
        )
    if fill is not None:
        return np.where(np.isfinite(y), y, fill)
    if not np.all(np.isfinite(y)):
        raise ValueError(
            f"objective(X) must return {len(X)} finite values for X of shape {X.shape}; "
            "return finite values."
        )
    return y


def _as_observed_floats(raw: Any) -> NDArray[np.float64] | None:
    """The observed values as float64, or ``None`` if some value is not a number.

    A real number float64 cannot hold (the Python int ``10**400``, a ``Fraction`` of it, a
    long double ``1e400``) becomes NaN, i.e. non-finite: the private loops replace it by the
    prior mean like any non-finite value, the non-private ones refuse it.  It used to raise
    ``OverflowError`` (an ``ObjectiveError`` naming its round, for one private value) or to
    warn of the overflow only for such values (stop-42 audit of the tree loop).  Silent: no
    warning depends on a value.
    """
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.asarray(raw, dtype=np.float64).reshape(-1)
        except OverflowError:
            pass
        except (TypeError, ValueError):
            # pandas.NA (a missing observation) is NaN, like None: refusing it told whether
            # one private observation was missing, and in which round (stop-48 leak audit)
            missing = missing_as_nan(raw)
            return None if missing is None else missing.reshape(-1)
        try:  # value by value: only in this rare case, so a Python loop is fine here
            values = np.asarray(raw, dtype=object).reshape(-1)
            return np.array([_float_or_nan(v) for v in values], dtype=np.float64)
        except (TypeError, ValueError):
            return None


def _float_or_nan(value: Any) -> float:
    """NumPy's float64 conversion of one value (``None`` is NaN, as in an array), NaN where
    it overflows (stop-42 review: ``float(None)`` raised for ``[None, 10**400]`` only), and
    NaN for any missing value (``pandas.NA``, a signalling-NaN ``Decimal``): ``[10**400,
    pandas.NA]`` was "not a number" while ``[pandas.NA, 10**400]`` was read (stop-48 review)."""
    if _is_missing(value):
        return math.nan
    try:
        return float(np.float64(value))
    except OverflowError:
        return math.nan


def check_loop_inputs(
    X_init: ArrayLike,
    domain: tuple[ArrayLike, ArrayLike],
    n_rounds: int,
    candidates: ArrayLike | int,
) -> tuple[NDArray[np.float64], NDArray, NDArray, NDArray[np.float64] | None, int]:
    """Public inputs of a Thompson loop: ``(X0, lower, upper, fixed candidates or None, k)``.

    ``X0`` and the fixed candidates are read-only copies: the loop publishes them, so nothing
    the objective (or the caller) later does to the given arrays may change them.
    """
    X0 = _frozen_copy(check_finite_array(X_init, "X_init", ndim=2))
    d = X0.shape[1]
    lower, upper = _box(domain, d)
    if len(X0) < 1:
        raise ValueError("X_init needs at least one public initial input.")
    if np.any(X0 < lower) or np.any(X0 > upper):
        raise ValueError("X_init must lie inside the public domain.")
    check_count(n_rounds, "n_rounds", minimum=0)  # np.array(True) is not one round (stop 40)
    if isinstance(candidates, bool | np.bool_):  # True was one candidate (stop-40 fuzz)
        raise ValueError(
            f"candidates must be a positive integer or a (k, d) array, got {candidates!r}."
        )
    if isinstance(candidates, int | np.integer):
        if candidates < 1:
            raise ValueError("candidates must be a positive number or a (k, d) array.")
        return X0, lower, upper, None, int(candidates)
    # a labelled candidate set is read by position, as X_init: columns in another order than
    # a labelled X_init's queried the objective at swapped coordinates, silently (stop-49
    # audit: candidates[["b", "a"]] with X_init[["a", "b"]])
    check_input_columns(candidates, dataframe_columns(X_init), "candidates")
    fixed = _frozen_copy(check_finite_array(candidates, "candidates", ndim=2))
    if fixed.shape[1] != d:
        raise ValueError(f"candidates must have {d} column(s).")
    if np.any(fixed < lower) or np.any(fixed > upper):
        # a query outside the box was made, then clipped back into it by the round's release,
        # which then conditioned on an input other than the queried one (stop-41 fuzz)
        raise ValueError("candidates must lie inside the public domain, like X_init.")
    return X0, lower, upper, fixed, len(fixed)


def check_refine(refine_steps: int, refine_points: int) -> None:
    """The local search's public settings, checked before any spend."""
    for name, value, least in (
        ("refine_steps", refine_steps, 0),
        ("refine_points", refine_points, 1),
    ):
        check_count(value, name, minimum=least)


def _frozen_copy(a: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.array(a, dtype=np.float64, copy=True)
    out.flags.writeable = False
    return out


def _exact_path(
    public_gp: PublicGP, y: NDArray[np.float64], rng: np.random.Generator
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """Non-private posterior path, evaluated jointly at each call's candidates.

    For the non-private baseline every call's points are drawn jointly with the
    previous ones (conditioning on the values drawn so far), like the lazy DP path.
    """
    X_done: list[NDArray[np.float64]] = []
    f_done: list[NDArray[np.float64]] = []

    def evaluate(Xn: NDArray[np.float64]) -> NDArray[np.float64]:
        Xo = np.vstack(X_done) if X_done else np.empty((0, Xn.shape[1]))
        Xa = np.vstack([Xo, Xn])
        mu, cov = public_gp.predict(y, Xa)
        q = len(Xo)
        jit = 1e-8 * max(float(np.max(np.diag(cov))), 1e-12)
        if q:
            Loo = cholesky(cov[:q, :q] + jit * np.eye(q), lower=True)
            A = np.linalg.solve(Loo.T, np.linalg.solve(Loo, cov[:q, q:])).T
            fo = np.concatenate(f_done)
            m = mu[q:] + A @ (fo - mu[:q])
            S = cov[q:, q:] - A @ cov[:q, q:]
        else:
            m, S = mu, cov
        # canonical eigenvector signs: the same seed gives the same path on every LAPACK
        f = m + psd_eigen_root(S) @ rng.standard_normal(len(m))
        X_done.append(Xn)
        f_done.append(f)
        return f

    return evaluate


def _maximise(
    evaluate: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    first: tuple[NDArray[np.float64], NDArray[np.float64]],
    lower: NDArray[np.float64],
    upper: NDArray[np.float64],
    refine_steps: int,
    refine_points: int,
    rng: np.random.Generator,
) -> tuple[NDArray[np.float64], float]:
    """Best candidate, then ``refine_steps`` rounds of Gaussian local search on the path."""
    X_c, f_c = first
    i = int(np.argmax(f_c))
    x_best, f_best = X_c[i], float(f_c[i])
    scale = 0.1 * (upper - lower)
    for _ in range(refine_steps):
        Xn = np.clip(
            x_best + scale * rng.standard_normal((refine_points, len(lower))), lower, upper
        )
        fn = evaluate(Xn)
        j = int(np.argmax(fn))
        if fn[j] > f_best:
            x_best, f_best = Xn[j], float(fn[j])
        scale = 0.5 * scale
    return x_best.copy(), f_best  # a copy: never a view into the candidates


def trace_inference_data(
    rows: dict[str, list[Any]],
    dtypes: dict[str, Any],
    X0: NDArray[np.float64],
    lower: NDArray[np.float64],
    upper: NDArray[np.float64],
    attrs: dict[str, Any],
    X_init: Any = None,
) -> Any:
    """InferenceData of a Thompson run (``_thompson_idata``): ``posterior`` (draw = round),
    group ``thompson`` (dim ``round``) and ``constant_data``.  The ``input_dim`` coordinate
    is the column names of a labelled ``X_init`` (a ``DataFrame``; ``dataframe_columns``),
    else ``0 … d−1`` (stop-42 audit: a DataFrame's names were dropped).

    ``rows["x_chosen"]`` holds the ``(d,)`` chosen inputs; every other key of ``dtypes`` is a
    per-round scalar column of that dtype.  Only DP outputs and public values may be passed.
    """
    import xarray as xr

    from pm_dpgp import __version__

    attrs = {"pm_dpgp_version": __version__, **attrs}  # as every release's (walkthrough 40)
    d = len(lower)
    R = len(rows["x_chosen"])
    x_ch = np.asarray(rows["x_chosen"], float).reshape(R, d)
    names = dataframe_columns(X_init)
    labels: Any = np.arange(d) if names is None or len(names) != d else list(names)
    coords = {"round": np.arange(R), "input_dim": labels}
    data: dict[str, Any] = {"x_chosen": (("round", "input_dim"), x_ch)}
    for key, dtype in dtypes.items():
        data[key] = (("round",), np.asarray(rows[key], dtype=dtype))
    trace = xr.Dataset(data, coords=coords, attrs=attrs)
    const = xr.Dataset(
        {
            "X_init": (("init", "input_dim"), X0),
            "domain_lower": (("input_dim",), lower),
            "domain_upper": (("input_dim",), upper),
        },
        coords={"init": np.arange(len(X0)), "input_dim": labels},
        attrs=attrs,
    )
    return _thompson_idata(trace, const)


def _check_refinement_fits(n: int, n_cand: int, refine_steps: int, refine_points: int) -> None:
    """Refuse a round whose lazy refinement the machine cannot hold (public sizes only).

    The round's path is extended after its charge by ``refine_steps`` batches of
    ``refine_points`` rows: its state at every row the round may evaluate (the release's
    ``n(n + 1)/2 + n m + m(m + 1)/2`` doubles at ``m = n_cand + refine_steps·refine_points``
    rows, ``sample_path_release``) and one extension's two ``q × refine_points`` blocks
    (``S_on`` and ``L_no``, ``q = m − refine_points``).
    """
    m_all = n_cand + refine_steps * refine_points
    check_doubles_fit(
        n * (n + 1) // 2
        + n * m_all
        + m_all * (m_all + 1) // 2
        + 2 * (m_all - refine_points) * refine_points,
        f"the refinement of a sample path of n = {n} records at up to {m_all} rows "
        f"({n_cand} candidates and {refine_steps} steps of {refine_points} refine_points; use "
        "fewer)",
    )


def dp_thompson_sampling(
    objective: Objective,
    cov_func: Any,
    *,
    domain: tuple[ArrayLike, ArrayLike],
    X_init: ArrayLike,
    n_rounds: int,
    noise_sd: float,
    kernel_scale: float | None = None,
    y_bounds: tuple[float, float] | None = None,
    prior_mean: float = 0.0,
    private: bool = True,
    ledger: Ledger | None = None,
    delta: float | None = None,
    eta: float = 0.0,
    kernel_class: Literal["generic", "exponential_1d", "constant"] = "generic",
    sensitivity: Sensitivity = "coupled",
    kappa: float | None = None,
    candidates: ArrayLike | int = 256,
    refine_steps: int = 0,
    refine_points: int = 32,
    progressbar: bool = True,
    rng: np.random.Generator | None = None,
    **deprecated: Any,
) -> ThompsonResult:
    """Run (DP) Thompson sampling for at most ``n_rounds`` rounds (see the module doc).

    Parameters
    ----------
    objective:
        ``objective(X) -> y`` for ``X`` of shape ``(k, d)``: the curator's (noisy)
        observations, the private data.  ``X`` is a read-only copy of the queried inputs, a
        float64 NumPy array in the column order of ``cov_func`` (also when ``X_init`` was a
        ``DataFrame``: wrap it, e.g. ``pd.DataFrame(X, columns=...)``, if the objective reads
        names); what the objective does cannot change the published queries (copy it to
        modify it).
    cov_func:
        PyMC covariance with public, fixed hyperparameters; ``cov_func / kernel_scale²`` must
        satisfy ``k(x, x) ≤ 1``.
    domain:
        public box ``(lower, upper)``; candidates and queries stay inside it.
    X_init:
        ``(n0, d)`` public initial design (chosen without looking at data), n0 ≥ 1.
    n_rounds:
        maximum number of rounds (fewer if the budget runs out or on interrupt).
    noise_sd:
        public observation-noise sd of the GP model (``σ √r²``; a larger value
        lowers the per-round ε).
    prior_mean:
        public constant prior mean ``μ₀`` of the GP (default 0); the observations are clipped
        to ``y_bounds`` around it, ``M_Y = max(|lower − μ₀|, |upper − μ₀|)``.
    kernel_scale, y_bounds, eta, kernel_class, kappa:
        public parameters of the sample-path mechanism, as in
        ``sample_path_release`` (``kernel_scale``
        defaults to 1, ``y_bounds`` to ``(prior_mean − 1, prior_mean + 1)``; ``kappa`` to the
        kernel's proved lower bound on ``domain``, ``certified_kappa``: 0 for a kernel not
        recognised as stationary).  Formerly ``sigma`` and the centred ``y_bound=M``
        (``y_bounds=(prior_mean − M, prior_mean + M)``).
    sensitivity:
        the sample-path mean sensitivity, ``"coupled"`` (default; eq. SP11,
        ``docs/sample_paths.md`` §3.11) or ``"paper"`` (eq. SP4); used both for the
        round's affordability check and for the release, so the two always agree.
    private:
        ``False`` runs non-private TS (exact posterior, no ledger, no clipping).
    ledger:
        the budget (required when ``private``); ``delta`` defaults to ``ledger.delta``.
    candidates:
        a public ``(k, d)`` candidate set used every round, or a number of uniform
        random candidates drawn in the box each round.
    refine_steps, refine_points:
        local refinement of the maximiser on the lazy path (free evaluations).
    progressbar:
        show a ``rich`` progress bar; ``KeyboardInterrupt`` stops the loop and returns
        the completed rounds (``stop_reason="interrupted"``).
    rng:
        the only source of randomness.
    """

    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    func = "dp_thompson_sampling"
    prior_mean = check_finite_number(prior_mean, "prior_mean")  # True / "0.5" refused
    if not isinstance(private, bool | np.bool_):  # None or 0 ran the non-private loop
        raise ValueError(f"private must be True or False, got {private!r}.")
    kernel_scale = renamed("sigma", "kernel_scale", deprecated, kernel_scale, func=func)
    kernel_scale = 1.0 if kernel_scale is None else kernel_scale
    y_bounds = bounds_from_centred("y_bound", deprecated, y_bounds, prior_mean, func=func)
    reject_unexpected(deprecated, func=func)
    y_bounds = (prior_mean - 1.0, prior_mean + 1.0) if y_bounds is None else y_bounds
    y_lower, y_upper, M_Y = centred_bound(y_bounds, prior_mean)
    # how the paths' noise is drawn, for the record: without a caller's Generator the loop's
    # own is seeded from OS entropy (stop-43 audit: the record said 'numpy_simulation', a
    # seed the caller holds)
    noise_record = (
        {"noise_source": SAMPLE_PATH_OS_ENTROPY, "seed_policy": SEED_POLICY_OS_ENTROPY}
        if rng is None
        else {"noise_source": SIMULATION, "seed_policy": SEED_POLICY_SIMULATION}
    )
    rng = check_rng(rng)
    X0, lower, upper, fixed_cand, n_cand = check_loop_inputs(X_init, domain, n_rounds, candidates)
    check_refine(refine_steps, refine_points)
    d = X0.shape[1]
    kernel_dim = getattr(cov_func, "input_dim", None)
    if isinstance(kernel_dim, int) and kernel_dim != d:
        # refused before the objective is first called (it ran once, then the model's
        # kernel refused the inputs; stop-41 fuzz)
        raise ValueError(
            f"X_init has {d} column(s) but cov_func takes {kernel_dim} input dimension(s); "
            "nothing was observed, spent or drawn."
        )
    noise_sd = check_positive(noise_sd, "noise_sd")
    kernel_scale = check_scale(kernel_scale, "kernel_scale")
    if private:
        if ledger is None:
            raise ValueError("private=True needs a Ledger with the privacy budget.")
        delta = check_delta(ledger.delta if delta is None else delta)
        if refine_steps and int(n_rounds) > 0:
            # round 1's refinement, before the objective is called and before the first
            # random number is drawn: inside round 1 its refusal came after the candidates
            # were drawn from the caller's Generator ("nothing was drawn"; stop-46 review)
            _check_refinement_fits(len(X0), n_cand, refine_steps, refine_points)

    fill = float(prior_mean) if private else None
    y0 = _observe(objective, X0, fill)
    model = gp_regression(X0, y0, cov_func, noise_sd=noise_sd, mean=prior_mean, mean_is_public=True)
    base = model.public_gp()
    r2 = base.noise_var / kernel_scale**2
    box = Box(lower, upper)  # passed on as a Box: a 2 × 2 array could be read two ways
    if private:  # proved default or the caller's κ checked: once here, not every round
        kappa = resolve_kappa(kappa, base, kernel_scale, box, model.cov_func)
        # the rounds' public settings, checked before the first random number is drawn (a
        # refusal inside round 1 came after its candidates were drawn: stop-30 audit); the
        # kernel at the design, the fixed candidates and the domain grid
        round_bound = functools.partial(
            SamplePathBound,
            kernel_scale=kernel_scale,
            r2=r2,
            M_Y=M_Y,
            kappa=float(kappa),
            eta=eta,
            kernel_class=kernel_class,
            sensitivity=sensitivity,
        )
        # validates eta, kernel_class, sensitivity; a filter that cannot hold the rounds' curve
        # events is refused here, not reported as a budget stop
        ledger.check_accounts_for(
            sample_path_event(round_bound(n=len(X0)), 1), "the rounds' Renyi-DP curve events"
        )
        ledger.check_privacy_model(PRIVACY_MODEL, "DP Thompson sampling")
        # every round's release refuses a training system float64 cannot resolve; the last
        # round's n is the largest (the level grows with n), so checked once here
        check_mean_resolvable(len(X0) + int(n_rounds), r2)
        shown = X0 if fixed_cand is None else np.vstack([X0, fixed_cand])
        # the kernel's structure at the fixed public hyperparameters, derived once for the
        # run: every round's release checks its kernel with it (not re-derived per round)
        structure = kernel_structure_at(model.cov_func, base.hyperparameters)
        _check_public_kernel(
            base,
            kernel_scale,
            kernel_class,
            _public_probes(shown, box),
            unboxed=False,
            cov=model.cov_func,
            structure=structure,
        )
    X_all, y_all = X0.copy(), y0.copy()
    failure: Exception | None = None

    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "x_chosen",
            "f_path_at_chosen",
            "epsilon_round",
            "epsilon_cumulative",
            "n_data",
            "alpha_max",
            "event",
        )
    }
    events: list[PrivacyEvent] = []
    stop: StopReason = "completed"
    desc = "DP Thompson sampling" if private else "Thompson sampling"
    with progress_bar(int(n_rounds), desc, enabled=progressbar) as bar:
        try:
            for _ in range(int(n_rounds)):
                n = len(y_all)
                if private:
                    assert ledger is not None and delta is not None and kappa is not None
                    bound = round_bound(n=n)
                    # the budget first: a round the ledger cannot afford stops the loop before
                    # its candidates are drawn (stop-44 audit: a run stopped by the budget
                    # before round 1 had advanced the caller's Generator by 256 draws while
                    # saying nothing was drawn) and before the release's own checks and
                    # warnings.  ``sample_path_event`` is memoised per bound, so the release
                    # spends this same object: one composition and one ε conversion for both
                    # the check and the spend.
                    charged = sample_path_event(bound, 1)
                    if not ledger.can_afford(charged):
                        stop = "budget"
                        break
                X_c = (
                    fixed_cand
                    if fixed_cand is not None
                    else rng.uniform(lower, upper, size=(n_cand, d))
                )
                if private:
                    assert ledger is not None and delta is not None and kappa is not None
                    # the rows so far with the first model's public GP (kernel compiled once)
                    data = cast(
                        GPRegression,
                        PrivateRows(
                            base,
                            X_all,
                            y_all,
                            model.cov_func,
                            proved_kappa=kappa,
                            structure=structure,
                        ),
                    )
                    n_entries = len(ledger.history)
                    try:
                        if refine_steps:
                            # the refinement extends the round's path lazily by refine_steps
                            # batches of refine_points rows, after the charge: refused here,
                            # before the charge (stop-46 audit: 2·10⁴ refinement points
                            # charged round 2, then raised MemoryError and lost round 1)
                            _check_refinement_fits(n, n_cand, refine_steps, refine_points)
                        release = sample_path_release(
                            data,
                            X_c,
                            n_draws=1,
                            kernel_scale=kernel_scale,
                            y_bounds=(y_lower, y_upper),
                            delta=delta,
                            kappa=float(kappa),
                            domain=box,
                            eta=eta,
                            kernel_class=kernel_class,
                            sensitivity=sensitivity,
                            ledger=ledger,
                            rng=rng,
                            clip="warn",
                        )
                    except BudgetExceededError:
                        # only a budget spent from elsewhere since can_afford (a persistent
                        # ledger) is a clean stop; a refusal of anything else is a bug
                        if ledger.can_afford(charged):
                            raise
                        stop = "budget"
                        break
                    except BaseException as err:
                        # charged, then failed (MemoryError, Ctrl-C in the factorisation): the
                        # charge is in events too, so that replaying them gives the ledger's
                        # total (stop-43 audit: 6.66 replayed against 7.90 charged)
                        try:
                            charged_now = len(ledger.history) > n_entries
                        except Exception:  # noqa: BLE001 - cannot tell: count it (conservative)
                            charged_now = True
                        if charged_now:
                            events.append(
                                charged.with_label(f"Thompson round path (n={n}), then failed")
                            )
                        if not isinstance(err, Exception) or not (charged_now or events):
                            # KeyboardInterrupt: stop below; a refusal before the first charge
                            # (a ValueError, ReusedGeneratorError) is raised as it is.  After
                            # charged rounds it is a ReleaseError holding them (stop-44 audit:
                            # the memory refusal of a late round, at large n, lost the run)
                            raise
                        failure, stop = err, "release_error"
                        break
                    # the charge is recorded at once, before anything reads the path: a
                    # Ctrl-C (or an error) in the path's first evaluation left the ledger one
                    # round ahead of the events (stop-48 audit: 25.19 replayed, 34.99 charged)
                    event = charged.with_label(f"Thompson round path (n={n})")
                    events.append(event)
                    path = release.evaluate

                    def evaluate(Xn: NDArray[np.float64], _p: Any = path) -> NDArray[np.float64]:
                        return _p(Xn)[0]

                    # both at the ledger's δ (walkthrough 40: the round's ε was at delta=,
                    # the cumulative at the ledger's δ, so a round could exceed the total)
                    eps_round = event.epsilon(ledger.delta)
                    eps_cum = ledger.epsilon()
                    meta = json.dumps(
                        {
                            "label": event.label,
                            "n": n,
                            "r2": r2,
                            "V": bound.V,
                            "Phi": bound.Phi,
                            "Delta": bound.Delta,
                            "tau": bound.tau,
                            "epsilon_at_delta": release.epsilon,  # at delta=
                        }
                    )
                    alpha_max = bound.alpha_max
                else:
                    evaluate = _exact_path(dataclasses.replace(base, X=X_all), y_all, rng)
                    f_c = evaluate(X_c)
                    eps_round = eps_cum = math.inf
                    meta = json.dumps({"mechanism": "none (non-private)"})
                    alpha_max = math.nan
                try:
                    if private:
                        f_c = evaluate(X_c)
                    x_new, f_new = _maximise(
                        evaluate, (X_c, f_c), lower, upper, refine_steps, refine_points, rng
                    )
                except Exception as err:
                    if not private:
                        raise
                    # the released path failed to evaluate after its charge: a ReleaseError
                    # holding the completed rounds, as for a failed release (stop-48 audit:
                    # it was raised as it was, and the completed rounds were lost)
                    failure, stop = err, "release_error"
                    break
                try:
                    y_new = _observe(objective, x_new[None, :], fill)
                except Exception as err:  # re-raised below, with the completed rounds
                    failure, stop = err, "objective_error"
                    break
                X_all = np.vstack([X_all, x_new[None, :]])
                y_all = np.concatenate([y_all, y_new])
                rows["x_chosen"].append(x_new)
                rows["f_path_at_chosen"].append(f_new)
                rows["epsilon_round"].append(eps_round)
                rows["epsilon_cumulative"].append(eps_cum)
                rows["n_data"].append(n)
                rows["alpha_max"].append(alpha_max)
                rows["event"].append(meta)
                if private:
                    # the round's path (its state holds every evaluated row) is freed before the
                    # next round's release is built, not kept alive beside it (stop-46 audit:
                    # the two together doubled the peak memory of a refined round)
                    del release, path, evaluate
                bar.advance(f"ε = {eps_cum:.3g}" if private else "")
        except KeyboardInterrupt:
            stop = "interrupted"

    attrs: dict[str, Any] = {
        "mechanism": "sample_path Thompson sampling" if private else "non-private Thompson",
        "privacy_model": "full" if private else "none",
        "privacy_model_description": (
            "full (neighbouring runs replace one observation (x, y); the initial design and "
            "the queried inputs are published)"
            if private
            else "none"
        ),
        "stop_reason": stop,
        "n_rounds_requested": int(n_rounds),
        "n_rounds_completed": len(rows["x_chosen"]),
        "noise_sd": noise_sd,
        "kernel_scale": kernel_scale,
        "eta": eta,
        "kernel_class": kernel_class,
        "kernel": base.description,
        "published": "chosen inputs and released path values only; observed values are private"
        if private
        else "NOT private: f_path_at_chosen are exact posterior samples given the observed "
        "values; keep this record with the data",
    }
    if private:
        assert ledger is not None
        attrs.update(
            {
                "y_bounds": [y_lower, y_upper],
                "delta": float(delta),  # type: ignore[arg-type]
                # every ε of the trace (epsilon_round, epsilon_cumulative, epsilon_spent_total)
                # is stated at the ledger's δ; an event's epsilon_at_delta at delta
                "ledger_delta": float(ledger.delta),
                "neighbouring_relation": NEIGHBOURING_RELATION,
                "kappa": float(kappa),  # type: ignore[arg-type]
                "epsilon_budget": "none"
                if ledger.epsilon_budget is None
                else float(ledger.epsilon_budget),
                "epsilon_spent_total": float(ledger.epsilon()),
            }
        )
    if private and events:  # how the paths' noise was drawn
        attrs.update(noise_record)
    idata = trace_inference_data(
        rows,
        {
            "f_path_at_chosen": float,
            "epsilon_round": float,
            "epsilon_cumulative": float,
            "n_data": np.int64,
            "alpha_max": float,
            "event": str,
        },
        X0,
        lower,
        upper,
        attrs,
        X_init,
    )
    owner = OwnerRecord(X=X_all, y=y_all, n_init=len(X0))
    result = ThompsonResult(
        idata=idata,
        owner=owner,
        ledger=ledger if private else None,
        events=events,
        stop_reason=stop,
    )
    if stop == "budget" and not events:
        warn_no_round(
            "dp_thompson_sampling",
            "A round is one sample-path release on the data so far: raise noise_sd (plan it "
            "with pm_dpgp.plan.thompson) or eta, or give the ledger a larger budget.",
        )
    if failure is not None:
        stage: Literal["objective", "release"] = (
            "release" if stop == "release_error" else "objective"
        )
        raise loop_failure(result, stage) from failure
    return result


def random_search(
    objective: Objective,
    *,
    domain: tuple[ArrayLike, ArrayLike],
    X_init: ArrayLike,
    n_rounds: int,
    rng: np.random.Generator | None = None,
) -> OwnerRecord:
    """Baseline: ``n_rounds`` uniform random queries in the box after the initial design.

    The public inputs are checked as the DP loops check them (``check_loop_inputs``: a
    whole, non-negative ``n_rounds``, ``X_init`` inside the box; stop-34 audit: 2.7 rounds
    ran 2, and −1 failed inside NumPy)."""
    rng = check_rng(rng)
    X0, lower, upper, _, _ = check_loop_inputs(X_init, domain, n_rounds, 1)
    X = np.vstack([X0, rng.uniform(lower, upper, size=(int(n_rounds), X0.shape[1]))])
    return OwnerRecord(X=X, y=_observe(objective, X), n_init=len(X0))
