"""A differentially private release and its conversion to ArviZ ``InferenceData``.

A ``Release`` holds only public and DP content: the DP draws, the public test
inputs, the public shape of the DP noise (it depends only on public inputs,
public hyperparameters and the privacy parameters) and the privacy metadata the
design requires (mechanism, privacy model, neighbouring relation, ε, δ,
sensitivity, clipping bounds, hyperparameters, seed policy, version).  It never
holds the private training outputs or the non-DP posterior mean (only weak references to
the training data, for identity checks: ``RemembersTraining``; never read or pickled).
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp import __version__
from pm_dpgp._validation import (
    check_finite_array,
    check_flag,
    check_rng,
    public_real_array,
    refuse_other_rows,
    row_labels,
)

__all__ = [
    "Release",
    "RemembersTraining",
    "draws_to_inference_data",
    "plain_metadata",
    "release_to_inference_data",
]


def _jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays (recursively) into JSON-serialisable objects."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


_READ_ONLY = (
    "a release's metadata is read-only: it is the record of what was charged, and the "
    "exports, dp_ppc and the ledger must agree with it (stop-49 audit). Build an editable copy "
    "with pm_dpgp.release.plain_metadata(release.metadata) (its nested lists and dicts too; "
    "dict(release.metadata) copies the top level only, and copy.deepcopy gives another "
    "read-only copy) if you need one."
)


def _refuse(*_: Any, **__: Any) -> Any:
    raise TypeError(_READ_ONLY)


class MetadataDict(dict):  # type: ignore[type-arg]
    """A release's metadata: a ``dict`` (``json.dumps``, ``isinstance(md, dict)`` and ``==``
    work as before) whose in-place changes raise ``TypeError``.  ``dict(md)`` and
    ``md.copy()`` are ordinary dicts, editable at the top level (their nested lists and dicts
    are the read-only ones); ``plain_metadata(md)`` is editable throughout.  Pickles and
    copies (``copy.deepcopy`` too) as itself, read-only."""

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (dict(self),)


class MetadataList(list):  # type: ignore[type-arg]
    """A list inside a release's metadata (``MetadataDict``): read-only in the same way."""

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (list(self),)


#: Entry types that are immutable and need no copy (a flat list of them is copied once)
_IMMUTABLE = frozenset({int, float, str, bool, type(None), np.float64, np.int64, np.bool_})


def frozen_metadata(value: Any) -> Any:
    """A read-only deep copy of metadata: dicts and lists as ``MetadataDict`` /
    ``MetadataList``, tuples with frozen entries, arrays as read-only copies (the metadata of a
    release, ``RemembersTraining._freeze``; a user's ``release.metadata["epsilon"] = 0.1``
    made its export disagree with the ledger: stop-49 audit).  Metadata holds public values
    only, so the copy is of its (small) size."""
    if isinstance(value, Mapping):
        return MetadataDict((k, frozen_metadata(v)) for k, v in value.items())
    if isinstance(value, list | tuple) and all(type(v) in _IMMUTABLE for v in value):
        # a flat list of numbers or strings (an RDP curve's orders and values: 444 of a
        # sample-path release's 480 metadata entries) needs no per-entry copy; per entry it
        # cost ≈ 1.1 ms of each DP Thompson round (stop-50 benchmark)
        return MetadataList(value) if isinstance(value, list) else value
    if isinstance(value, list):
        return MetadataList(frozen_metadata(v) for v in value)
    if type(value) is tuple:
        return tuple(frozen_metadata(v) for v in value)
    if isinstance(value, np.ndarray):
        value = np.array(value)
        value.flags.writeable = False
    return value


def plain_metadata(value: Any) -> Any:
    """``frozen_metadata`` undone: plain dicts and lists (what a release pickles, so that a
    pickle reads the same as before stop 49)."""
    if isinstance(value, Mapping):
        return {k: plain_metadata(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_metadata(v) for v in value]
    if type(value) is tuple:
        return tuple(plain_metadata(v) for v in value)
    return value


def noise_sd_of(noise_factor: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row norms of a noise factor ``G`` (``noise = G z``): the marginal noise sd, by ``hypot``,
    which cannot overflow.  The plans (``pm_dpgp.plan``) call it on the factor the release will
    use, so a plan's ``noise_sd`` is the release's to the bit."""
    return np.hypot.reduce(noise_factor, axis=1, initial=0.0)


class RemembersTraining:
    """Weak references to the training data a release was computed from (identity only).

    ``remember_training`` keeps them; ``to_inference_data`` refuses ``observed_data`` that
    *is* the training output array or shares its memory while they are alive, as ``dp_ppc``
    does: ``observed_is_public=True`` is needed to attach any ``observed_data``, so it cannot
    also be what skips the check (stop-45 audit: the training ``y`` passed as
    ``observed_data`` was published beside the DP draws).  No value is read; nothing is kept
    alive, copied, pickled or exported (``__getstate__`` drops them; ``copy.copy`` and
    ``copy.deepcopy`` of a release share them, so a copy refuses the same arrays; a pickled
    and restored release, or ``dataclasses.replace``, has none).  Objects that take no
    weak reference (a list ``y`` given to ``binned_release``) are not remembered; a model
    keeps its own arguments, lists too.  A NumPy view given as data (``x[:, None]``, which
    dies at once) is remembered by its layout in the array owning its memory (``_ViewRef``).
    """

    def remember_training(self, training: Any) -> Any:
        """Keep weak references to ``training`` (a model, or the ``(X, y, ...)`` tuple of the
        data arguments); return ``self``."""
        refs = (
            tuple(_weak_array(t) for t in training[:2])
            if isinstance(training, tuple)
            else _weak(training)
        )
        object.__setattr__(self, "_training_refs", refs)
        return self

    def training_source(self) -> Any:
        """The remembered training model or ``(X, y)`` pair while alive, else ``None``.

        A pair is returned while either array is alive (the other as ``None``): the inputs
        of a fully private release were not refused once the outputs had died, e.g. after
        ``data=(X, y - y.mean())``, whose temporary is freed at once (stop-46 review).
        """
        refs = self.__dict__.get("_training_refs")
        if isinstance(refs, tuple):
            X, y = (None if r is None else r() for r in refs)
            return None if X is None and y is None else (X, y)
        return None if refs is None else refs()

    #: the released arrays, kept as read-only views (``_freeze``)
    _read_only: ClassVar[tuple[str, ...]] = ()

    def _freeze(self) -> None:
        """Read-only views of the released arrays (``_read_only``): ``f = release.draws[0];
        f += 1`` (an offset re-added for a plot) silently changed the recorded draws of every
        later export, ``dp_ppc`` and ``noise_band``, and ``release.u_mean *= 2`` a q(u)'s
        predictions (stop-48 audit).  Views: nothing is copied; the mechanism's own arrays keep
        their flags.  Also after unpickling and ``copy.deepcopy``, which build the object
        without ``__post_init__``."""
        for name in self._read_only:
            view = np.asarray(getattr(self, name)).view()
            view.flags.writeable = False
            object.__setattr__(self, name, view)
        # the metadata too, as a read-only copy (the mechanism's own dict is not aliased):
        # an edit after the release was recorded made its exports disagree with the ledger
        # (stop-49 audit)
        if "metadata" in self.__dict__:
            object.__setattr__(self, "metadata", frozen_metadata(self.__dict__["metadata"]))

    def __getstate__(self) -> dict[str, Any]:
        """The fields only: the weak references to the training data are not pickled."""
        state = dict(self.__dict__)
        state.pop("_training_refs", None)
        if "metadata" in state:  # plain dicts and lists, as pickled before stop 49
            state["metadata"] = plain_metadata(state["metadata"])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The fields, with the released arrays read-only again."""
        self.__dict__.update(state)
        self._freeze()

    def __copy__(self) -> Any:
        """A shallow copy that keeps the weak references (``copy.copy`` would go through
        ``__getstate__`` and drop them, so a copy exported the training outputs that the
        original refuses; stop-45 review)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """A deep copy of the fields that shares the weak references (they point at the same
        training data, which is neither copied nor kept alive)."""
        import copy

        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = value if key == "_training_refs" else copy.deepcopy(value, memo)
        new._freeze()
        return new


@dataclass(frozen=True, repr=False)
class Release(RemembersTraining):
    """Differentially private draws at public test inputs, with their metadata.

    Attributes
    ----------
    mechanism:
        Name of the mechanism (``"cloaking"``, ``"prior_noise"``, ...).
    draws:
        ``(n_draws, m)`` array of DP values; every draw is one release and was
        charged to the ledger as such.
    X_star:
        ``(m, d)`` public test inputs.
    noise_factor:
        ``(m, k)`` public factor ``F`` with DP-noise covariance ``F Fᵀ``.
    metadata:
        Privacy metadata (JSON-serialisable values only), read-only: a ``dict`` whose
        in-place changes raise ``TypeError`` (``MetadataDict``; ``dict(release.metadata)`` is
        an editable copy), so that the exports keep agreeing with the ledger.
    x_star_rows:
        the row index of ``X_star`` when it was a pandas object (public labels of public
        rows; not in the metadata or the exported InferenceData, though a pickled
        ``Release`` keeps it, as it keeps ``X_star``), else ``None``: ``to_inference_data``
        refuses an ``observed_data`` Series with other row labels (paired by position, stop
        42).
    """

    mechanism: str
    draws: NDArray[np.float64]
    X_star: NDArray[np.float64]
    noise_factor: NDArray[np.float64]
    metadata: dict[str, Any] = field(default_factory=dict)
    variable_name: str = "f_dp"
    x_star_rows: Any = field(default=None, repr=False, compare=False)

    _read_only: ClassVar[tuple[str, ...]] = ("draws", "X_star", "noise_factor")

    def __post_init__(self) -> None:
        # the release's own copy of the public test inputs: a view of the caller's X_star
        # moved with it (`X_star += 1` after the release shifted the inputs dp_ppc and the
        # export pair the draws with; stop-45 audit).  m × d values only.
        object.__setattr__(self, "X_star", np.array(self.X_star, dtype=np.float64))
        self._freeze()

    @property
    def n_draws(self) -> int:
        return int(self.draws.shape[0])

    def __repr__(self) -> str:
        """What the release is, in one line: the arrays are ``draws``, ``X_star``,
        ``noise_factor`` and ``metadata`` (the dataclass repr printed all of them, 9 kB for
        two draws at 25 points; stop-39 walkthrough).  Shapes and public settings only."""
        eps = self.metadata.get("epsilon_per_draw", self.metadata.get("epsilon"))
        return (
            f"Release(mechanism={self.mechanism!r}, variable_name={self.variable_name!r}, "
            f"draws {np.shape(self.draws)} at X_star {np.shape(self.X_star)}, "
            f"noise_factor {np.shape(self.noise_factor)}"
            + (f", epsilon per draw {eps!r}" if eps is not None else "")
            + f", metadata: {len(self.metadata)} keys)"
        )

    @property
    def noise_sd(self) -> NDArray[np.float64]:
        """``(m,)`` marginal standard deviation of the DP noise (public): the row norms of the
        noise factor by ``hypot``, which cannot overflow (stop-32 audit: ``y_bounds = ±1e300``
        gave finite draws but an infinite published sd)."""
        return noise_sd_of(self.noise_factor)

    @property
    def noise_cov(self) -> NDArray[np.float64]:
        """Public covariance of the DP noise added to each draw."""
        return self.noise_factor @ self.noise_factor.T

    @property
    def draws_are_outcomes(self) -> bool:
        """Whether the draws are values of the modelled outcome (regression), not latent
        values of binary outcomes (a classification release): only then do a Gaussian
        predictive ``y = f + e`` and a ``posterior_predictive`` group apply."""
        return not self.mechanism.startswith("laplace_classification")

    def check_gaussian_predictive(self) -> None:
        """Refuse a Gaussian predictive ``y = f + e`` for a classification release, whose draws
        are latent values of binary outcomes (``dp_ppc``, ``to_inference_data``)."""
        if not self.draws_are_outcomes:
            raise ValueError(
                "a Gaussian predictive y = f + e does not apply: a classification release's "
                "draws are latent values of binary outcomes. Check it on a hold-out set with "
                "its released class probabilities (docs/classification.md)."
            )

    def noise_band(self, width: float = 1.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return first draw ∓ ``width`` × noise sd (public; post-processing of the release)."""
        centre = self.draws[0]
        return centre - width * self.noise_sd, centre + width * self.noise_sd

    def to_inference_data(
        self,
        *,
        dims: Mapping[str, Sequence[str]] | None = None,
        coords: Mapping[str, ArrayLike] | None = None,
        observed_data: Mapping[str, ArrayLike] | None = None,
        observed_is_public: bool = False,
        predictive_sd: float | ArrayLike | None = None,
        rng: np.random.Generator | None = None,
        dp_noise: Literal["marginalise", "ignore"] = "marginalise",
        var_name: str | None = None,
    ) -> Any:
        """Store the release as ``arviz.InferenceData`` (ArviZ 0.x) or ``DataTree`` (ArviZ 1).

        * ``posterior[variable_name]`` (or ``var_name``, the keyword of the other exports and
          of ``dp_ppc``): dims ``(chain, draw, x_star)``, one chain, one entry
          of ``draw`` per DP draw; the test-input dim is ``x_star`` (coordinate: the inputs
          when 1-D and distinct, else an index) unless renamed with
          ``dims={variable_name: ["age"]}`` and given values with ``coords={"age": ...}``.
        * ``posterior_predictive``: when ``predictive_sd`` is given, ``y = f + e``,
          ``e ~ N(0, predictive_sd²)`` (public noise sd, post-processing), under the name of
          the observed variable (``"y"`` by default).  With ``dp_noise="marginalise"`` (the
          default) ``f`` is a draw of the released mean given the DP draws, ``N(d̄, F Fᵀ/S)``
          (flat prior; ``pm_dpgp.workflow.dp_ppc``), so the predictive carries the DP noise;
          ``"ignore"`` adds ``e`` to the DP draws themselves, a plug-in predictive that
          under-covers (stop-34 audit).  A copy of ``variable_name`` is also kept there, as
          in earlier versions (deprecated: read it from ``posterior``), except for a
          classification release (latent values, not outcomes: no ``posterior_predictive``).
        * ``observed_data``: a PUBLIC hold-out set at the release's test inputs, e.g.
          ``{"y": y_holdout}`` (needs ``observed_is_public=True``; never the training outputs).
        * ``constant_data``: the public test inputs ``X_star`` and the public DP-noise sd.
        * attrs of every group: the privacy metadata, flat; nested values (and integers
          beyond 64 bits) are stored as JSON strings so that the object round-trips through
          netCDF.

        The spread of the draws of a cloaking / prior-noise release is the DP noise around
        the posterior mean, not posterior uncertainty; see
        ``pm_dpgp.workflow.dp_summary`` and ``docs/workflow.md``.
        """
        import xarray as xr

        if dp_noise not in ("marginalise", "ignore"):
            raise ValueError(f"dp_noise must be 'marginalise' or 'ignore', got {dp_noise!r}.")
        name = self.variable_name if var_name is None else var_name
        if not isinstance(name, str) or not name:
            raise ValueError(f"var_name must be a non-empty str, got {var_name!r}.")
        if predictive_sd is not None:
            self.check_gaussian_predictive()
        # copies: the exported object shared the release's arrays, so an edit of it in place
        # (`idata.posterior["f_dp"] *= 100`, a change of units) rescaled release.draws for every
        # later export and dp_ppc (stop-45 audit, both stacks)
        X = np.array(self.X_star, dtype=np.float64)
        const = xr.Dataset(
            {
                "X_star": (("x_star", "input_dim"), X),
                "dp_noise_sd": (("x_star",), np.asarray(self.noise_sd, dtype=np.float64)),
            },
        )
        return draws_to_inference_data(
            {name: (("x_star",), np.array(self.draws))},
            X_star=X,
            attrs=_flat_attrs(self),
            constant_data=const,
            dims=dims,
            coords=coords,
            observed_data=observed_data,
            observed_is_public=observed_is_public,
            training=self.training_source(),
            x_star_rows=self.x_star_rows,
            predictive_sd=predictive_sd,
            rng=rng,
            # no deprecated copy of latent logits, which az.plot_ppc would read as outcomes
            # (stop-38 usability audit)
            legacy_predictive=(name,) if self.draws_are_outcomes else (),
            predictive_centre=self._released_mean_draws if dp_noise == "marginalise" else None,
        )

    def _released_mean_draws(self, rng: np.random.Generator) -> NDArray[np.float64]:
        return released_mean_draws(self.draws, self.noise_factor, self.n_draws, rng)


def released_mean_draws(
    draws: NDArray[np.float64], G: NDArray[np.float64], n: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """``n`` draws of the released posterior mean ``μ`` given ``S`` DP draws ``draws``.

    Each DP draw of a cloaking / prior-noise / binning release is ``dᵢ = μ + G zᵢ`` with
    independent ``zᵢ ~ N(0, I)`` and public ``G`` (``Release.noise_factor``, or its rows at
    other public inputs).  Under a flat prior on ``μ`` (within the span of ``G``; outside it
    the draws agree and ``μ`` is known) its posterior is ``N(d̄, G Gᵀ / S)``, ``d̄`` the mean
    of the draws: the DP noise's share of the predictive uncertainty, shrinking as ``1/S``
    with more (separately charged) draws (``docs/workflow.md``).  Exact for Gaussian noise;
    for the Laplace noise of binning, the Gaussian with the same covariance.
    Post-processing of the release only.
    """
    S = draws.shape[0]
    z = rng.standard_normal((n, G.shape[1]))
    return draws.mean(axis=0) + (z @ G.T) / math.sqrt(S)


def release_to_inference_data(release: Release, **options: Any) -> Any:
    """``release.to_inference_data(**options)`` (``Release.to_inference_data``)."""
    return release.to_inference_data(**options)


def draws_to_inference_data(
    draws: Mapping[str, tuple[tuple[str, ...], NDArray[np.float64]]],
    *,
    X_star: NDArray[np.float64] | None,
    attrs: Mapping[str, Any],
    constant_data: Any = None,
    extra_groups: Mapping[str, Any] | None = None,
    default_coords: Mapping[str, Any] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, ArrayLike] | None = None,
    observed_data: Mapping[str, ArrayLike] | None = None,
    observed_is_public: bool = False,
    training: Any = None,
    x_star_rows: Any = None,
    predictive_sd: float | ArrayLike | None = None,
    predictive_of: str | None = None,
    rng: np.random.Generator | None = None,
    legacy_predictive: Sequence[str] = (),
    predictive_centre: Callable[[np.random.Generator], NDArray[np.float64]] | None = None,
) -> Any:
    """The native ArviZ object of DP draws (shared by every release type).

    ``draws`` maps a variable name to its dims (without ``chain``/``draw``) and an array of
    shape ``(n_draws, *dims)``; they go to ``posterior`` with one chain.  The test-input
    dim is ``x_star`` (coordinate: ``X_star[:, 0]`` when 1-D with distinct values, in the order
    given, else the position; the inputs are in ``constant_data.X_star`` either way).
    ``dims`` renames a variable's dims PyMC-style (``{"f": ["age"]}``; the new name applies to every
    group sharing the dim) and ``coords`` gives coordinate values for the new names.  With
    ``predictive_sd`` (public noise sd), ``posterior_predictive`` holds ``y = f + e`` for the
    variable ``predictive_of`` (default: the first), named as the observed variable.
    ``observed_data`` (a PUBLIC hold-out set at ``X_star``) needs ``observed_is_public=True``;
    a pandas one must have the row labels ``x_star_rows`` of ``X_star`` when those are known,
    and is refused (``PrivateDataError``) when it *is* the output array of ``training`` (a
    model or an ``(X, y)`` pair; by identity or shared memory only, as ``dp_ppc``).
    ``legacy_predictive`` variables are copied to ``posterior_predictive`` as well.
    ``predictive_centre(rng)``, when given, returns the ``(n_draws, *dims)`` values the
    predictive noise is added to instead of the draws themselves (``Release``: draws of the
    released mean given the DP draws, so that the predictive carries the DP noise).
    """
    import xarray as xr

    from pm_dpgp.compat import make_inference_data

    if not draws:
        raise ValueError("nothing to store: the release holds no draws yet.")
    _check_names(draws, observed_data, dims, X_star, constant_data, extra_groups)
    n_draws = {int(arr.shape[0]) for _, arr in draws.values()}
    if len(n_draws) != 1:  # pragma: no cover - internal misuse
        raise ValueError(f"draws of different counts {sorted(n_draws)} in one posterior.")
    (S,) = n_draws
    base_coords: dict[str, Any] = {"chain": [0], "draw": np.arange(S)}
    if X_star is not None:
        m, d = X_star.shape
        # the 1-D inputs label the dim only when they are distinct: repeated test inputs (57
        # !Kung hold-out ages, 48 distinct) made az.summary and dp_summary fail (stop-32 audit)
        # the input values label the dim, in the order given, when they are distinct (an
        # index needs distinct labels). In another order than increasing, slice after
        # .sortby("x_star"): a slice of a non-monotonic index is positional (stop-40
        # walkthrough). Repeated inputs: positions (an index of values would be refused).
        unique_1d = d == 1 and _distinct(X_star[:, 0])
        base_coords["x_star"] = X_star[:, 0] if unique_1d else np.arange(m)
        base_coords["input_dim"] = np.arange(d)
    base_coords.update(default_coords or {})
    post = xr.Dataset(
        {k: (("chain", "draw", *dd), np.asarray(arr)[None]) for k, (dd, arr) in draws.items()}
    )
    groups: dict[str, Any] = {"posterior": post}
    first = predictive_of or next(iter(draws))
    obs_name = "y"
    if observed_data is not None:
        if not check_flag(observed_is_public, "observed_is_public"):  # "no" was yes (stop 40)
            raise ValueError(
                "observed_data is published with the release: pass only a PUBLIC hold-out set "
                "(never the private training outputs) and confirm with observed_is_public=True."
            )
        if not isinstance(observed_data, Mapping) or len(observed_data) != 1:
            raise TypeError(
                "observed_data must be a mapping {name: values}, e.g. {'y': y_holdout}."
            )
        ((obs_name, obs_values),) = observed_data.items()
        # identity only, before any value is read (as dp_ppc: a value check of the private
        # array could turn the refusal into another error, an oracle; stop 26)
        refuse_training_outputs(obs_values, training, f"observed_data[{obs_name!r}]")
        if predictive_sd is None:
            raise ValueError(
                "observed_data needs predictive_sd (the public observation-noise sd): the "
                "posterior predictive y = f + e is what az.plot_ppc compares with it."
            )
        if obs_name in draws:
            raise ValueError(f"observed variable {obs_name!r} clashes with a posterior variable.")
        fdims = draws[first][0]
        # rows are paired by position: a hold-out Series in another order than a DataFrame
        # X_star put each height beside another person's age (stop-42 audit)
        refuse_other_rows(x_star_rows, "X_star", row_labels(obs_values), "observed_data")
        # a copy: the caller's array was stored, and its later in-place edits moved the
        # exported hold-out values (stop-48 audit)
        obs = np.array(check_finite_array(obs_values, f"observed_data[{obs_name!r}]"))
        if obs.shape != tuple(post[first].shape[2:]):
            raise ValueError(
                f"observed_data[{obs_name!r}] has shape {obs.shape} but {first!r} has "
                f"{tuple(post[first].shape[2:])}: release at the hold-out inputs (they are public)."
            )
        groups["observed_data"] = xr.Dataset({obs_name: (fdims, obs)})
    # The whole object is built with the predictive noise as a placeholder (zeros) and the
    # noise is drawn last, so every failure on a public argument (dims, coords, the shape of
    # predictive_sd, in NumPy or xarray) leaves the caller's Generator untouched (stop-30 audit)
    # copies: the deprecated predictive copy shared the posterior's array, so an in-place edit
    # of one group (`posterior_predictive["f_dp"] *= 100`) rescaled the other (stop-48 audit)
    pp_vars: dict[str, Any] = {k: post[k].copy(deep=True) for k in legacy_predictive}
    sd = None
    if predictive_sd is not None:
        sd = public_real_array(predictive_sd, "predictive_sd")  # True / "0.3" refused (stop 40)
        if np.any(~np.isfinite(sd)) or np.any(sd < 0):
            raise ValueError("predictive_sd must be finite and non-negative (a public noise sd).")
        f = post[first]
        try:  # a scalar or one sd per point: broadcast to the point dims, no more
            per_point = np.broadcast_shapes(sd.shape, f.shape[2:]) == f.shape[2:]
        except ValueError:
            per_point = False
        if not per_point:
            raise ValueError(
                f"predictive_sd has shape {sd.shape}; pass a scalar or one sd per point of "
                f"{first!r} (shape {tuple(f.shape[2:])})."
            )
        rng = check_rng(rng)
        pp_vars[obs_name] = f + sd * np.zeros(f.shape)
        pp_vars[obs_name].attrs["predictive_sd"] = json.dumps(_jsonable(sd))
    if pp_vars:
        groups["posterior_predictive"] = xr.Dataset(pp_vars)
    if constant_data is not None:
        groups["constant_data"] = constant_data
    groups.update(extra_groups or {})
    # the observed / predictive variable shares the first variable's dims: dims= given for it
    # (PyMC's idiom, dims={"y": ["age"]}) renames them too (stop-49 audit: it was ignored)
    shared = {obs_name: draws[first][0]} if "posterior_predictive" in groups else {}
    if "observed_data" in groups:
        shared[obs_name] = draws[first][0]
    rename = _dims_rename(draws, dims, shared)
    present = set().union(*(set(ds.dims) for ds in groups.values()))
    _refuse_unknown_names(groups, dims, coords, present, rename)
    for a, b in rename.items():  # xarray's "Cannot rename … swap_dims" meant nothing to a user
        if b in present and b not in rename:
            raise ValueError(
                f"dims renames {a!r} to {b!r}, which is already a dim of this object "
                f"({', '.join(sorted(map(str, present)))}); choose another name."
            )
    user_coords = {k: np.asarray(v) for k, v in (coords or {}).items()}
    out: dict[str, Any] = {}
    for gname, ds in groups.items():
        ds = ds.rename_dims({a: b for a, b in rename.items() if a in ds.dims})
        ds = ds.drop_vars([c for c in ds.coords if c in rename])
        cds: dict[str, Any] = {}
        for dim, size in ds.sizes.items():
            old = next((a for a, b in rename.items() if b == dim), dim)
            value = user_coords.get(dim, base_coords.get(old))
            if value is None:
                continue
            value = np.asarray(value)
            _check_coord(dim, value, size)
            cds[dim] = value
        ds = ds.assign_coords(cds)
        ds.attrs.update(attrs)
        out[gname] = ds
    if sd is not None:  # every check passed: now the noise (same shape and order as f)
        f_values = np.asarray(post[first].values)
        if predictive_centre is not None:
            f_values = np.asarray(predictive_centre(rng)).reshape(f_values.shape)
        out["posterior_predictive"][obs_name].values = f_values + sd * rng.standard_normal(
            f_values.shape
        )
    return make_inference_data(out)


def _weak(obj: Any) -> Any:
    """``weakref.ref(obj)``, or ``None`` for an object that takes no weak reference."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _memory_owner(a: np.ndarray) -> np.ndarray:
    """The last ``ndarray`` along ``a.base`` (the array whose memory ``a`` views)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class _ViewRef:
    """A weak reference to a NumPy view that outlives the view object: while the array that
    owns its memory is alive, calling it rebuilds the same view (same memory, shape, strides
    and dtype) from that owner, weakly referenced too.

    ``data=(x[:, None], y)`` passes a temporary view that dies at once, so the identity and
    memory checks no longer recognised ``x[:, None]`` as the training inputs (stop-46
    review: a fully private release then exported them as ``X_star``).  No value is read,
    copied or kept alive: only the view's layout (public: its shape and where it lies in the
    owner's memory) is stored.
    """

    __slots__ = ("_ref", "_owner", "_layout")

    def __init__(self, view: np.ndarray, owner: np.ndarray) -> None:
        self._ref = weakref.ref(view)
        self._owner = weakref.ref(owner)
        offset = view.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        self._layout = (view.shape, view.dtype, offset, view.strides)

    def __call__(self) -> Any:
        view = self._ref()
        if view is not None:
            return view
        owner = self._owner()
        if owner is None:
            return None
        shape, dtype, offset, strides = self._layout
        try:
            return np.ndarray(shape, dtype, buffer=owner, offset=offset, strides=strides)
        except (TypeError, ValueError, BufferError):  # an owner without a plain buffer
            return None


def _weak_array(obj: Any) -> Any:
    """``_weak(obj)``, or a ``_ViewRef`` for a NumPy view of another array's memory."""
    if isinstance(obj, np.ndarray) and isinstance(obj.base, np.ndarray):
        return _ViewRef(obj, _memory_owner(obj))
    return _weak(obj)


def _is_training_array(values: Any, training: Any, column: int) -> bool:
    """Whether ``values`` is column ``column`` (0: inputs, 1: outputs) of ``training`` (a
    model, or an ``(X, y, ...)`` tuple) or shares its memory: identity and memory only, as
    ``dp_ppc``'s check (``pm_dpgp.workflow.ppc``); no value is read or compared (a refusal
    that compared values would be a membership oracle, ``docs/errors.md``); a copy is not
    recognised."""
    if training is None or values is None:
        return False
    from pm_dpgp.workflow.ppc import _same_object

    if isinstance(training, tuple):
        arrays = [training[column]]
    elif callable(getattr(training, "unchecked_data", None)):  # a model or PrivateRows
        argument = ("_X_argument", "_y_argument")[column]
        arrays = [training.unchecked_data()[column], getattr(training, argument, None)]
    else:  # e.g. an iterable of chunks: nothing to compare by identity
        return False

    def same(a: Any) -> bool:
        if type(a).__module__.split(".")[0] == "dask":  # identity only: never computed
            return values is a
        return _same_object(values, a)

    return any(a is not None and same(a) for a in arrays)


def refuse_training_outputs(values: Any, training: Any, what: str) -> None:
    """Raise ``PrivateDataError`` when ``values`` is the training output array of
    ``training`` (a model, or an ``(X, y)`` pair) or shares its memory (identity only)."""
    from pm_dpgp.workflow.ppc import PrivateDataError

    if _is_training_array(values, training, 1):
        raise PrivateDataError(
            f"{what} is the private training output array of this release. The DP guarantee "
            "covers the released draws, not the data: as observed_data it would be published "
            "unprotected. Pass a public hold-out set that was not used to fit the model."
        )


def refuse_training_inputs(values: Any, training: Any, what: str) -> None:
    """Raise ``PrivateDataError`` when ``values`` is the training input array of a fully
    private release's ``training`` or shares its memory (identity only, as ``dp_ppc``)."""
    from pm_dpgp.workflow.ppc import PrivateDataError

    if _is_training_array(values, training, 0):
        raise PrivateDataError(
            f"{what} is the private training input array of this fully private release: "
            "exported inputs are published (constant_data and the coordinate), and under full "
            "privacy the training inputs are private. Pass public query inputs. Nothing was "
            "drawn."
        )


def _check_names(
    draws: Mapping[str, tuple[tuple[str, ...], Any]],
    observed_data: Any,
    dims: Mapping[str, Sequence[str]] | None,
    X_star: NDArray[np.float64] | None,
    constant_data: Any,
    extra_groups: Mapping[str, Any] | None,
) -> None:
    """Refuse variable and dim names that ArviZ / xarray would reject or silently drop.

    A variable named like a dim (``"chain"``, ``"draw"``, ``"x_star"`` …) became a coordinate:
    the DP draws were silently lost (ArviZ 0.x) or refused by xarray after the predictive noise
    was drawn; ArviZ 1's ``DataTree`` refuses names containing ``"/"`` (stop-30 review).
    Public arguments only, checked before anything is drawn.
    """
    dim_names = {"chain", "draw"} | {d for dd, _ in draws.values() for d in dd}
    if X_star is not None:
        dim_names |= {"x_star", "input_dim"}
    for ds in (constant_data, *(extra_groups or {}).values()):
        dim_names |= set(getattr(ds, "dims", ()))
    user_dims = [str(b) for spec in (dims or {}).values() for b in spec]
    variables = list(draws)
    if isinstance(observed_data, Mapping):
        variables += [str(k) for k in observed_data]
    for name in variables + user_dims:
        if "/" in name:
            raise ValueError(
                f"the name {name!r} contains '/', which ArviZ 1 (DataTree) reserves for group "
                "paths; choose another name."
            )
    for name in variables:
        if name in dim_names or name in user_dims:
            raise ValueError(
                f"the variable name {name!r} is also a dimension name; choose another name "
                "(e.g. variable_name='f_dp')."
            )


def _distinct(values: NDArray[Any]) -> bool:
    """Whether the 1-D coordinate ``values`` are distinct (numbers or labels), as an index
    needs them to be."""
    import pandas as pd  # an xarray dependency

    return bool(pd.Index(values).is_unique)


def _check_coord(dim: str, value: NDArray[Any], size: int) -> None:
    if value.ndim != 1:
        raise ValueError(f"coords[{dim!r}] must be one-dimensional, got shape {value.shape}.")
    if len(value) != size:
        raise ValueError(f"coords[{dim!r}] has {len(value)} value(s) but the dim has {size}.")
    if not _distinct(value):
        # as PyMC refuses duplicate coordinate values: ArviZ's summary then failed with a
        # broadcast error, and .sel returned several points for one label (stop-33 docs audit)
        raise ValueError(
            f"coords[{dim!r}] repeats a value; a dimension's coordinate values must be distinct "
            f"(as in PyMC). Keep the default index for {dim!r} and read the inputs from "
            "constant_data['X_star'], or pass distinct values (e.g. de-duplicate the test inputs)."
        )


def _dims_rename(
    draws: Mapping[str, tuple[tuple[str, ...], Any]],
    dims: Mapping[str, Sequence[str]] | None,
    shared: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, str]:
    """Map default dim names to the user's (``dims={"f": ["age"]}``), checked for conflicts.

    ``shared`` gives the dims of variables outside ``draws`` (the observed and predictive
    ``y``, which share the first variable's dims): their ``dims=`` rename those dims too, and
    a name that differs from the one given for the draws is a conflict.  Until stop 49 they
    were skipped, so ``dims={"y": ["age"]}`` left the dim ``x_star``, silently."""
    rename: dict[str, str] = {}
    for var, user in (dims or {}).items():
        if var in draws:
            default = draws[var][0]
        elif shared and var in shared:
            default = shared[var]
        else:
            continue  # no such variable: refused by _refuse_unknown_names
        if isinstance(user, str) or len(user) != len(default):
            raise ValueError(
                f"dims[{var!r}] must list {len(default)} dim name(s) (for {default}), got {user!r}."
            )
        for a, b in zip(default, user, strict=True):
            if b in ("chain", "draw"):
                raise ValueError(
                    f"dims[{var!r}] names a dim {b!r}, which ArviZ reserves for the draws; "
                    "choose another name."
                )
            if rename.get(a, b) != b:
                raise ValueError(f"dim {a!r} is renamed both {rename[a]!r} and {b!r}.")
            rename[a] = str(b)
    return {a: b for a, b in rename.items() if a != b}


def _refuse_unknown_names(
    groups: Mapping[str, Any],
    dims: Mapping[str, Sequence[str]] | None,
    coords: Mapping[str, ArrayLike] | None,
    present: set[Any],
    rename: Mapping[str, str],
) -> None:
    """Refuse ``dims`` keys that name no variable and ``coords`` keys that name no dim: ArviZ
    ignores them, so ``dims={"f": ["age"]}`` on a cloaked release (whose variable is
    ``f_dp``) left the dim ``x_star``, silently (stop-47 user audit).  Public names only,
    checked before any predictive noise is drawn."""
    variables = sorted({str(v) for ds in groups.values() for v in ds.data_vars})
    unknown = [str(k) for k in (dims or {}) if str(k) not in variables]
    if unknown:
        raise ValueError(
            f"dims names {unknown}, which {'is' if len(unknown) == 1 else 'are'} not a variable "
            f"of this object; its variables are {variables}. Nothing was drawn."
        )
    final = sorted({str(rename.get(d, d)) for d in present})
    unknown = [str(k) for k in (coords or {}) if str(k) not in final]
    if unknown:
        raise ValueError(
            f"coords names {unknown}, which {'is' if len(unknown) == 1 else 'are'} not a dim of "
            f"this object; its dims are {final} (rename one with dims= first). Nothing was "
            "drawn."
        )


def _flat_attrs(release: Release) -> dict[str, Any]:
    return flat_attrs(release.mechanism, release.metadata, n_draws=release.n_draws)


def flat_attrs(mechanism: str, metadata: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """Flatten metadata for netCDF: scalars and strings stay, the rest becomes JSON."""
    attrs: dict[str, Any] = {"mechanism": mechanism, "pm_dpgp_version": __version__, **extra}
    for key, value in metadata.items():
        value = _jsonable(value)
        if value is None:
            attrs[key] = "none"
        elif isinstance(value, bool):
            attrs[key] = int(value)
        elif isinstance(value, int) and not -(2**63) <= value < 2**64:
            # netCDF-4 stores 64-bit integers only: kmeans_seed=2**64 (a valid NumPy seed)
            # made the export of a charged release fail with h5py's "Object dtype" TypeError
            # (stop-45 audit); its decimal text, as for other JSON values
            attrs[key] = json.dumps(value)
        elif isinstance(value, str | int | float):
            attrs[key] = value
        else:
            attrs[key] = json.dumps(value)
    return attrs
