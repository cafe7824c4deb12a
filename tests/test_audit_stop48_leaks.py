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
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pm_dpgp.selection import exponential_mechanism_probabilities, sample_exponential_mechanism

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
