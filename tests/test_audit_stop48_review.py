"""Stop-48 review of the stop's changes (adversarial): defects found in them or next to them.

Each test fails on the code at a049610 and passes after the fix it names.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.sparse import sufficient_statistics


def _kernel(Zc, Xc):
    return np.exp(-0.5 * ((Zc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1))


# ------------------------------------------- chunks whose arrays differ in length (_full_pieces)
@pytest.mark.parametrize("chunk_size", [2, 4, 10])
@pytest.mark.parametrize(
    "cuts",
    [
        [(4, 6)],  # one chunk: y longer than X (its 2 extra rows were dropped, silently)
        [(3, 3), (2, 3)],  # the second chunk's extra y row (old: n = 5, silently)
        [(3, 3), (4, 3)],
        [(4, 4), (3, 2)],  # y shorter than X
    ],
)
def test_a_chunk_whose_arrays_differ_in_length_is_refused(cuts, chunk_size) -> None:
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(20, 1)), rng.normal(size=20)
    secret = 98765.4321
    y[:] = secret
    chunks, i, j = [], 0, 0
    for nx, ny in cuts:
        chunks.append((X[i : i + nx], y[j : j + ny]))
        i, j = i + nx, j + ny
    Z = np.linspace(-1, 1, 3)[:, None]
    with pytest.raises(ValueError, match="each chunk must have the same number of rows") as err:
        sufficient_statistics(_kernel, Z, iter(chunks), chunk_size=chunk_size)
    assert "98765" not in str(err.value)


def test_aligned_chunks_are_still_summed_as_a_tuple() -> None:
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(23, 1)), rng.normal(size=23)
    Z = np.linspace(-1, 1, 3)[:, None]
    ref = sufficient_statistics(_kernel, Z, (X, y), chunk_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sufficient_statistics(
            _kernel, Z, iter([(X[:5], y[:5]), (X[5:5], y[5:5]), (X[5:], y[5:])]), chunk_size=4
        )
    np.testing.assert_array_equal(got.A, ref.A)
    np.testing.assert_array_equal(got.B, ref.B)
    assert got.n == ref.n == 23


# ----------------------------------- floating-point error state of the label releases (873081d)
X20 = np.linspace(0.0, 1.0, 20)[:, None]


def _label_release(kind: str, y, bound: float, secure: bool, ledger):
    import pymc as pm

    from pm_dpgp.mechanisms import cloaked_release, prior_noise_release
    from pm_dpgp.models import gp_regression

    model = gp_regression(X20, y, pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    release = cloaked_release if kind == "cloaked" else prior_noise_release
    return release(
        model, X20[:5], epsilon=1.0, delta=1e-6, y_bounds=(-bound, bound),
        bounds_are_public=True, ledger=ledger, rng=None if secure else np.random.default_rng(0),
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["cloaked", "prior_noise"])
@pytest.mark.parametrize(
    ("bound", "tiny", "secure"),
    [
        # W (y − c) subnormal: μ + F W (y − c) underflowed before the spend (both modes)
        (1.0, 1e-310, False),
        (1.0, 5e-324, True),
        # the secure noise's w/γ (γ = 2³¹⁵ ≈ 6.7e94) underflowed after the spend
        (1e100, 1e-300, True),
        (1e200, 1e-200, True),
    ],
)
def test_a_label_near_the_centre_raises_no_floating_point_error(kind, bound, tiny, secure):
    """The stop-48 fix covered labels beside ordinary ones; one tiny label among labels at the
    centre still made the release fail (before or after its spend) where its neighbour with
    that label at the centre was released."""
    outcomes = []
    for first in (0.0, tiny):
        y = np.zeros(len(X20))
        y[0] = first
        ledger = Ledger(epsilon=10.0, delta=1e-5)
        old = np.seterr(all="raise")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                release = _label_release(kind, y, bound, secure, ledger)
        finally:
            np.seterr(**old)
        assert np.all(np.isfinite(release.draws))
        outcomes.append(ledger.spent_epsilon)
    assert outcomes[0] == outcomes[1] > 0.0


# ------------------------------------ a Thompson objective's missing value beside an overflow
@pytest.mark.parametrize("missing", ["pandas.NA", "sNaN"])
@pytest.mark.parametrize("first", [True, False])
def test_a_missing_observation_beside_an_overflowing_one_is_not_a_number(missing, first):
    """00f84bc mapped pandas.NA / Decimal('sNaN') to NaN, but not in the value-by-value path
    taken after an OverflowError: an initial design's observations [10**400, pandas.NA] were
    refused as 'not a number' (before the spend) where [pandas.NA, 10**400] were read."""
    import decimal

    import pandas as pd

    from pm_dpgp.workflow.thompson import _observe

    gap = pd.NA if missing == "pandas.NA" else decimal.Decimal("sNaN")
    values = [10**400, gap] if first else [gap, 10**400]
    X0 = np.array([[0.1], [0.9]])
    y = _observe(lambda X: list(values), X0, fill=0.5)  # a private run: non-finite -> prior mean
    np.testing.assert_array_equal(y, [0.5, 0.5])


# ------------------------ a non-number beside an int beyond float64 (saturating_float_array)
@pytest.mark.parametrize(
    "values",
    [
        [10**400, {}],
        [10**400, [1.0, 2.0]],  # ragged
        [10**400, object()],
        [float("nan"), 10**400, {}],
        [None, 10**400, {}],  # through missing_as_nan
    ],
    ids=["dict", "ragged", "object", "nan-first", "missing-first"],
)
def test_a_non_number_is_refused_whether_or_not_another_entry_overflows(values):
    """float_array refused [1.0, {}] ('some entry is not a number') but read [10**400, {}] as
    [inf, nan]: whether a malformed private list was refused depended on whether another
    private entry overflows float64."""
    from pm_dpgp._validation import private_array

    for entries in (values, [1.0 if v == 10**400 else v for v in values]):
        with pytest.raises(TypeError, match="some entry is not") as err:
            private_array(entries, "y", ndim=1)
        assert "1000000" not in str(err.value)


def test_numbers_and_missing_values_beside_an_overflow_are_still_read():
    import decimal

    import pandas as pd

    from pm_dpgp._validation import private_array

    values = [10**400, None, float("nan"), np.float32("nan"), pd.NA, decimal.Decimal("sNaN")]
    got = private_array([*values, -(10**400), 2.0], "y", ndim=1)
    np.testing.assert_array_equal(got, [np.inf, *[np.nan] * 5, -np.inf, 2.0])


# ------------------------------------------------ a generator that refills its buffers (5854e05)
@pytest.mark.parametrize("chunk_size", [1, 3, 5, 8, 64])
@pytest.mark.parametrize("buffer", [7, 4, 1])
@pytest.mark.parametrize("masked", [False, True])
def test_a_generator_that_reuses_its_buffers_is_summed_row_by_row(chunk_size, buffer, masked):
    """Streaming into preallocated buffers (fill, yield, refill) is the usual way to read a
    file in chunks.  The regrouping held the rows left over from a chunk as views of the
    caller's buffer, which the next refill overwrote: rows summed twice, others never (A off
    by 1.99 at n = 30, B = 7, L = 5), n unchanged, so one record could count twice."""
    rng = np.random.default_rng(5)
    n = 30
    X, y = rng.normal(size=(n, 1)), rng.normal(size=n)
    Z = np.linspace(-1, 1, 3)[:, None]

    def stream():
        xb, yb = np.empty((buffer, 1)), np.empty(buffer)
        if masked:
            yb = np.ma.masked_array(yb, mask=np.zeros(buffer, bool))
        for s in range(0, n, buffer):
            m = min(buffer, n - s)
            xb[:m], yb[:m] = X[s : s + m], y[s : s + m]
            yield xb[:m], yb[:m]

    ref = sufficient_statistics(_kernel, Z, (X, y), chunk_size=chunk_size)
    got = sufficient_statistics(_kernel, Z, stream(), chunk_size=chunk_size)
    assert got.n == ref.n == n
    np.testing.assert_allclose(got.A, ref.A, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.B, ref.B, rtol=1e-12, atol=1e-12)


# ------------------------------------------ grid_inducing_points over a too-wide box (90df53c)
def test_a_box_wider_than_the_largest_float_gives_its_grid_without_a_floating_point_error():
    """The width b − a that detects such a box overflowed with NumPy's 'overflow encountered
    in scalar subtract' RuntimeWarning, a FloatingPointError under np.seterr(all='raise')."""
    from pm_dpgp.models.sparse import grid_inducing_points

    old = np.seterr(all="raise")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Z = grid_inducing_points([-1e308], [1e308], 3)
    finally:
        np.seterr(**old)
    np.testing.assert_array_equal(Z[:, 0], [-1e308, 0.0, 1e308])
