"""Stop-48 leak audit (second round): private values in errors, warnings and exports.

Each test fails on the code before its fix.

* L1: ``sample_exponential_mechanism`` and ``exponential_mechanism_probabilities`` (public,
  and documented as functions of the *private* utilities) converted them with
  ``np.asarray(u, dtype=float64)``: a text entry raised NumPy's ``could not convert string to
  float: 'x98765.4321'``, quoting the private entry; text that parses was used as its number;
  a complex utility lost its imaginary part with only a ``ComplexWarning``; ``10**400`` raised
  ``OverflowError``.  They now read the utilities as every release reads private data
  (``private_array``: refused by type, quoting nothing; a Python int beyond float64 is +inf,
  then refused as non-finite).
* L2: a missing value in private data given as a list or object array was refused or
  announced depending on whether it was there: ``pandas.NA`` (what a nullable column's
  ``.tolist()`` holds) and ``Decimal('sNaN')`` raised "some entry is not a number"
  (``TypeError``) in ``noise_aware_release``, ``binned_release``, ``coinpress_mean`` and the
  selections, and in a DP Thompson round *after its charge* (``ObjectiveError`` naming the
  round), while ``None`` and ``Decimal('NaN')`` at the same place were mapped silently; a
  ``numpy.ma.masked`` entry made NumPy warn "converting a masked element to nan" (once or
  twice per release).  Both told whether a private record is missing.  Missing values are now
  NaN, mapped record by record as any non-finite value, silently.
"""

from __future__ import annotations

import decimal
import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import binned_release, make_bins, noise_aware_release
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
from pm_dpgp.selection import (
    coinpress_mean,
    exponential_mechanism_probabilities,
    sample_exponential_mechanism,
)
from pm_dpgp.workflow import dp_thompson_sampling, dp_thompson_sampling_tree

SENTINEL = "98765.4321"


def _em_calls():
    return {
        "sample": lambda u: sample_exponential_mechanism(u, 1.0, 1.0, rng=np.random.default_rng(0)),
        "probabilities": lambda u: exponential_mechanism_probabilities(u, 1.0, 1.0),
    }


def _chain_text(err: BaseException) -> str:
    """The message of ``err`` and of every exception chained to it."""
    out, seen = [], set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return "\n".join(out)


@pytest.mark.parametrize("call", sorted(_em_calls()))
@pytest.mark.parametrize(
    "utilities",
    [
        [1.0, "x" + SENTINEL],  # text that does not parse: NumPy quoted it
        [1.0, SENTINEL],  # text that parses: used as 98765.4321
        [1.0, SENTINEL.encode()],  # bytes that parse
        np.array([1.0, 98765.4321 + 1j]),  # complex: imaginary part dropped with a warning
    ],
    ids=["text", "parsable-text", "bytes", "complex"],
)
def test_exponential_mechanism_refuses_non_real_utilities_quoting_nothing(call, utilities):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ComplexWarning is a failure too
        with pytest.raises(TypeError) as info:
            _em_calls()[call](utilities)
    text = _chain_text(info.value)
    assert SENTINEL not in text and "98765" not in text
    assert "convert" in str(info.value)


@pytest.mark.parametrize("call", sorted(_em_calls()))
def test_exponential_mechanism_huge_int_utility_is_a_plain_refusal(call):
    """``10**400`` is +inf (as for private data everywhere), refused as non-finite without
    quoting it; it raised ``OverflowError``."""
    with pytest.raises(ValueError, match="finite") as info:
        _em_calls()[call]([1.0, 10**400])
    assert "1000000" not in _chain_text(info.value)


@pytest.mark.parametrize("call", sorted(_em_calls()))
def test_exponential_mechanism_still_accepts_real_utilities(call):
    out = _em_calls()[call]([0.0, 1.0, -2.5])
    if call == "probabilities":
        assert out.shape == (3,) and abs(float(out.sum()) - 1.0) < 1e-12
    else:
        assert out in (0, 1, 2)


# --------------------------------------------------------------------------- L2: missing values
N = 12
X_PRIV = np.linspace(0.1, 5.9, N)
Y_PRIV = np.sin(X_PRIV)
MISSING = {
    "pandas.NA": pd.NA,
    "Decimal sNaN": decimal.Decimal("sNaN"),
    "numpy.ma.masked": np.ma.masked,
}


def _with(value, at: int = 3) -> list:
    y = list(Y_PRIV)
    y[at] = value
    return y


def _nan_reference() -> np.ndarray:
    y = Y_PRIV.copy()
    y[3] = np.nan
    return y


@pytest.fixture(scope="module")
def sparse_model():
    return sparse_gp_regression(
        X_PRIV,
        Y_PRIV,
        pm.gp.cov.ExpQuad(1, ls=1.5),
        Z=grid_inducing_points(0.0, 6.0, 5),
        noise_sd=0.3,
    )


def _releases(sparse_model):
    bins = make_bins([np.linspace(0.0, 6.0, 4)])
    return {
        "noise_aware_release": lambda y: (
            noise_aware_release(
                sparse_model,
                (X_PRIV, y),
                epsilon=1.0,
                delta=1e-3,
                y_bounds=(-2.0, 2.0),
                ledger=Ledger(epsilon=10.0, delta=0.5),
                rng=np.random.default_rng(0),
            ).u_mean
        ),
        "binned_release": lambda y: (
            binned_release(
                X_PRIV[:, None],
                y,
                bins,
                epsilon=1.0,
                y_bounds=(-2.0, 2.0),
                ledger=Ledger(epsilon=10.0, delta=0.5),
                rng=np.random.default_rng(0),
            ).draws
        ),
        "coinpress_mean": lambda y: np.array(
            coinpress_mean(y, lower=-2.0, upper=2.0, rho=1.0, rng=np.random.default_rng(0)).mean
        ),
    }


@pytest.mark.parametrize("missing", sorted(MISSING))
@pytest.mark.parametrize("release", ["noise_aware_release", "binned_release", "coinpress_mean"])
def test_a_missing_private_value_is_nan_silently(release, missing, sparse_model):
    """The release of a list with one missing value equals the release with NaN there (same
    seed), and no warning is raised; ``pandas.NA`` and ``Decimal('sNaN')`` were refused with a
    ``TypeError``, ``numpy.ma.masked`` warned."""
    call = _releases(sparse_model)[release]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = call(_nan_reference())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = call(_with(MISSING[missing]))
    np.testing.assert_array_equal(got, expected)


def _objective(missing):
    calls = {"n": 0}

    def f(X):
        calls["n"] += 1
        values = list(np.sin(3.0 * X[:, 0]))
        if calls["n"] > 1:  # a later round: after that round's charge
            values[0] = missing
        return values

    return f


@pytest.mark.parametrize("loop", ["dp_thompson_sampling", "dp_thompson_sampling_tree"])
@pytest.mark.parametrize("missing", sorted(MISSING))
def test_a_missing_observation_in_a_private_thompson_round_is_the_prior_mean(loop, missing):
    """As ``None`` (docs/errors.md): the round completes, silently.  ``pandas.NA`` and
    ``Decimal('sNaN')`` raised ``ObjectiveError`` naming the round, after its charge."""

    def run(missing_value):
        common = dict(
            domain=(0.0, 1.0),
            X_init=np.array([[0.2], [0.7]]),
            n_rounds=3,
            y_bounds=(-2.0, 2.0),
            candidates=16,
            progressbar=False,
            rng=np.random.default_rng(0),
            ledger=Ledger(epsilon=1e6, delta=1e-3),
        )
        if loop == "dp_thompson_sampling":
            return dp_thompson_sampling(
                _objective(missing_value),
                pm.gp.cov.ExpQuad(1, ls=0.3),
                noise_sd=2.0,
                delta=1e-5,
                **common,
            )
        return dp_thompson_sampling_tree(
            _objective(missing_value),
            pm.gp.cov.ExpQuad(1, ls=0.3),
            noise_sd=0.1,
            inducing=6,
            epsilon=3.0,
            **common,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = run(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run(MISSING[missing])
    assert result.stop_reason == "completed" and result.n_rounds == 3
    np.testing.assert_array_equal(result.x_chosen, reference.x_chosen)
