"""Public ingredients of a private selection: candidate grids and validation splits.

Everything here is a function of public information only — the model's *priors*, the number
of rows, a public seed — never of the private outputs (or, under full privacy, the private
inputs).  A grid built from prior quantiles is the paper-free analogue of the hand-made grids of
Smith, Álvarez & Lawrence (2021, §6.7: lengthscale 1…625, noise and kernel variance 0.2…125) and
Honkela (2024, §4.3, the candidate set Θ of Algorithm 2).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pm_dpgp._ieee import ieee_arithmetic
from pm_dpgp._validation import real_or_nan, real_or_none

__all__ = [
    "Configuration",
    "check_grid",
    "kfold_splits",
    "prior_quantile_grid",
    "product_grid",
]

#: One candidate: ``{hyperparameter name: value on the constrained scale}``.
Configuration = dict[str, float]


def product_grid(values: Mapping[str, Iterable[float]]) -> list[Configuration]:
    """Cartesian product of per-hyperparameter values, in the order given (last name fastest).

    ``product_grid({"ell": [1, 5], "eta": [1, 2]})`` gives the four configurations
    ``ell=1,eta=1``, ``ell=1,eta=2``, ``ell=5,eta=1``, ``ell=5,eta=2`` — the layout of Table 2 of
    Smith et al. (2021).
    """
    if not isinstance(values, Mapping) or not values:
        raise ValueError("values must be a non-empty mapping {name: sequence of values}.")
    names = list(values)
    axes: list[list[float]] = []
    for nm in names:
        given = values[nm]
        # a list of numbers, each one checked: "25" was the grid [2, 5], True the value 1, a
        # dict its keys, [[1, 2], [3, 4]] four values (stop-40 fuzz)
        if isinstance(given, str | bytes | Mapping) or not isinstance(given, Iterable):
            raise ValueError(
                f"grid values for {nm!r} must be a list of numbers, got {given!r}; e.g. [1, 5]."
            )
        entries = [real_or_none(v, f"grid value for {nm!r}") for v in given]
        if not entries or any(v is None or not math.isfinite(v) for v in entries):
            raise ValueError(f"grid values for {nm!r} must be a non-empty list of finite numbers.")
        arr = np.asarray(entries, dtype=np.float64)
        distinct, counts = np.unique(arr, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(
                f"grid values for {nm!r} repeat {float(distinct[counts > 1][0])!r}: every "
                "configuration with it would be a candidate twice, with twice the weight (list "
                "each value once)."
            )
        axes.append([float(v) for v in arr])
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]


def check_grid(grid: Sequence[Mapping[str, float]], names: Sequence[str]) -> list[Configuration]:
    """Validate a candidate grid against the model's hyperparameter ``names`` (public check).

    Every configuration must give a finite float for exactly the names of the model, and no
    configuration may appear twice (it would count twice in the selection).  The check reads
    only the grid and the names, so a refusal leaks nothing.
    """
    if isinstance(grid, Mapping) or not isinstance(grid, Sequence) or len(grid) == 0:
        raise ValueError(
            "grid must be a non-empty list of configurations {name: value}; build one with "
            "product_grid(...) or prior_quantile_grid(model)."
        )
    out: list[Configuration] = []
    seen: dict[tuple[float, ...], int] = {}
    expected = set(names)
    for i, cfg in enumerate(grid):
        if not isinstance(cfg, Mapping):
            raise TypeError(
                f"grid[{i}] must be a mapping {{name: value}}, got {type(cfg).__name__}."
            )
        if set(cfg) != expected:
            raise ValueError(
                f"grid[{i}] has names {sorted(cfg)}; the model's hyperparameters are "
                f"{sorted(expected)}."
            )
        row: Configuration = {}
        for nm in names:
            v = real_or_none(cfg[nm], f"grid[{i}][{nm!r}]")  # Fraction(1, 2) is a number
            if v is None or not math.isfinite(v):
                raise ValueError(f"grid[{i}][{nm!r}] must be a finite number, got {cfg[nm]!r}.")
            row[nm] = v
        key = tuple(row[nm] for nm in names)
        if key in seen:
            raise ValueError(
                f"grid[{i}] repeats grid[{seen[key]}] ({row}): a repeated candidate counts twice "
                "in the selection (twice its weight in the exponential mechanism, twice its chance "
                "in each random-stopping run); list each configuration once."
            )
        seen[key] = i
        out.append(row)
    return out


def _prior_quantiles(model: Any, rv: Any, q: NDArray[np.float64], n_draws: int, seed: int) -> Any:
    """Quantiles ``q`` of the prior of ``rv``: exact ``icdf`` when PyMC has it, else from draws."""
    import pymc as pm

    del model
    # the probabilities in the variable's float type, never in an integer one: q.astype(int64)
    # turned 0.1/0.5/0.9 into 0, 0, 0, so a DiscreteUniform(1, 10) prior gave the one-candidate
    # grid [1] instead of [1, 5, 9] (stop-45 audit)
    value = q.astype(rv.dtype) if str(rv.dtype).startswith("float") else q
    try:
        with ieee_arithmetic():
            vals = np.asarray(pm.icdf(rv, value).eval(), dtype=np.float64)
        if vals.shape == q.shape and np.all(np.isfinite(vals)):
            return vals
    except Exception:  # noqa: BLE001 - no icdf for this distribution: use prior draws
        pass
    draws = np.asarray(pm.draw(rv, draws=n_draws, random_seed=seed), dtype=np.float64)
    return np.quantile(draws.reshape(n_draws, -1)[:, 0], q)


def prior_quantile_grid(
    gpr: Any,
    quantiles: Sequence[float] | Mapping[str, Sequence[float]] = (0.1, 0.5, 0.9),
    *,
    n_draws: int = 20_000,
    seed: int = 0,
) -> list[Configuration]:
    """Candidate grid at quantiles of the model's hyperparameter *priors* (no data touched).

    Parameters
    ----------
    gpr
        a model from ``pm_dpgp.models.gp_regression`` (or the sparse builders): its free
        hyperparameters and their PyMC priors are read, never ``gpr.y``.
    quantiles
        probabilities in (0, 1), the same for every hyperparameter or ``{name: probs}``.
    n_draws, seed
        prior draws used only for a distribution without an inverse CDF in PyMC; the seed is
        public (the draws are from the prior, not the data).

    Returns
    -------
    list of dict
        the Cartesian product of the per-hyperparameter quantiles (``product_grid``); quantiles
        that coincide (a discrete or very concentrated prior) give one value.

    Only scalar hyperparameters are supported (ARD vectors: build the grid by hand).
    """
    names = tuple(gpr.hyperparameter_names)
    if not names:
        raise ValueError("this model has no free hyperparameters: there is nothing to select.")
    values: dict[str, list[float]] = {}
    for rv in gpr._hyper_rvs:
        nm = rv.name
        if isinstance(quantiles, Mapping) and nm not in quantiles:
            raise ValueError(f"quantiles has no entry for the hyperparameter {nm!r}.")
        probs = quantiles[nm] if isinstance(quantiles, Mapping) else quantiles
        if isinstance(probs, str | bytes | Mapping) or not isinstance(probs, Iterable):
            raise ValueError(
                f"quantiles for {nm!r} must be a list of probabilities, got {probs!r}."
            )
        q = np.asarray([real_or_nan(p, "quantile") for p in probs], dtype=np.float64)
        if q.ndim != 1 or q.size == 0 or np.any(~(q > 0) | ~(q < 1)):
            raise ValueError(
                f"quantiles for {nm!r} must be probabilities in (0, 1), got {probs!r}."
            )
        if rv.type.ndim != 0:
            raise ValueError(f"hyperparameter {nm!r} is not scalar; build its grid by hand.")
        # quantiles of a discrete or very concentrated prior can coincide (DiscreteUniform(1, 2)
        # at 0.1 and 0.5; Normal(1e6, 1e-12) in float64): one candidate each, in order, since
        # product_grid refuses a repeated value (the caller listed none; stop-39 review)
        qv = _prior_quantiles(gpr.model, rv, q, n_draws, seed)
        values[nm] = list(dict.fromkeys(float(v) for v in qv))
    return product_grid(values)


def kfold_splits(
    n: int,
    n_folds: int,
    *,
    order: Literal["contiguous", "interleaved", "permuted"] = "interleaved",
    seed: int | None = None,
) -> list[NDArray[np.intp]]:
    """Public κ-fold validation split of ``n`` row indices: a list of the test indices per fold.

    The split depends only on ``n`` (and a public ``seed`` for ``"permuted"``), never on the
    data, as Smith et al. (2021, §5) require ("the choice of splits … is arbitrary, as long as
    there is no dependence on the private data").  ``"contiguous"`` cuts the rows in order,
    ``"interleaved"`` deals row i to fold ``i mod κ``, ``"permuted"`` shuffles with the public seed.
    Every row is a test point in exactly one fold.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}.")
    if isinstance(n_folds, bool) or not isinstance(n_folds, numbers.Integral):
        raise ValueError(f"n_folds must be an integer, got {n_folds!r}.")
    if not 2 <= n_folds <= n:
        raise ValueError(f"n_folds must be in [2, n={n}], got {n_folds}.")
    idx = np.arange(int(n))
    if order == "contiguous":
        return [np.asarray(a, dtype=np.intp) for a in np.array_split(idx, int(n_folds))]
    if order == "interleaved":
        return [idx[k :: int(n_folds)].astype(np.intp) for k in range(int(n_folds))]
    if order == "permuted":
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            # None, 1.5 or -1 reached NumPy's own message (stop-40 fuzz)
            raise ValueError(f"order='permuted' needs a public integer seed >= 0, got {seed!r}.")
        perm = np.random.default_rng(seed).permutation(idx)
        return [np.sort(a).astype(np.intp) for a in np.array_split(perm, int(n_folds))]
    raise ValueError(f"order must be 'contiguous', 'interleaved' or 'permuted', got {order!r}.")


def check_folds(folds: Sequence[ArrayLike], n: int) -> list[NDArray[np.intp]]:
    """Validate a public split: test index arrays that partition ``range(n)``, at least two."""
    if isinstance(folds, np.ndarray) or not isinstance(folds, Sequence) or len(folds) < 2:
        raise ValueError("folds must be a list of at least two arrays of test indices.")
    given = [np.asarray(f) for f in folds]
    if any(g.dtype.kind not in "iu" and g.size for g in given):
        # floats would be truncated to integers (0.7 → 0) and booleans read as 0/1: refuse
        raise ValueError("folds must hold integer row indices (not floats, masks or text).")
    out = [g.astype(np.intp).ravel() for g in given]
    allidx = np.concatenate(out)
    if allidx.size != n or not np.array_equal(np.sort(allidx), np.arange(n)):
        raise ValueError(f"folds must partition the row indices 0..{n - 1} (each row in one fold).")
    if any(f.size == 0 or f.size == n for f in out):
        raise ValueError("every fold needs at least one test and one training row.")
    return out
