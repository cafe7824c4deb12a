"""Binning releases refuse, before any spend or draw, what they cannot release (stop-36 audit)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.label import binning
from pm_dpgp.mechanisms.label.binning import Bins, binned_release, make_bins

X = np.linspace(0.0, 10.0, 40)[:, None]
Y = np.sin(X[:, 0])
EDGES = np.linspace(0.0, 10.0, 6)


def _refused(match: str, *, secure: bool = False, **kw) -> None:
    ledger = Ledger(epsilon=1e9, delta=1e-5)
    rng = None if secure else np.random.default_rng(0)
    state = None if rng is None else rng.bit_generator.state
    args = {"epsilon": 1.0, "y_bounds": (-1.0, 1.0), "bounds_are_public": True, **kw}
    bins = args.pop("bins", make_bins(EDGES))
    with pytest.raises((ValueError, MemoryError), match=match):
        binned_release(X, args.pop("y", Y), bins, ledger=ledger, rng=rng, **args)
    assert ledger.spent_epsilon == 0.0 and not ledger.history
    if rng is not None:
        assert rng.bit_generator.state == state


@pytest.mark.parametrize("secure", [False, True])
def test_scales_beyond_float64_are_refused(secure) -> None:
    """Bounds ±8e307 at ε = 0.01 were charged and released only ``inf``."""
    _refused("beyond float64", secure=secure, y_bounds=(-8e307, 8e307), epsilon=0.01)


def test_tiny_epsilon_whose_scale_overflows_is_refused() -> None:
    _refused("beyond float64", epsilon=1e-308)


@pytest.mark.parametrize(
    "edges", [([0.0, 5.0, 10.0],), (np.array([0.0, 5.0, 5.0, 10.0]),), (np.array([0.0, np.nan]),)]
)
def test_bins_built_directly_are_checked(edges) -> None:
    """A list, duplicate or NaN edges were accepted by ``Bins(...)`` and failed after the spend."""
    if isinstance(edges[0], list):
        bins = Bins(edges)  # a list is converted to a checked, read-only float64 array
        assert bins.edges[0].dtype == np.float64 and not bins.edges[0].flags.writeable
        rel = binned_release(
            X, Y, bins, epsilon=1.0, y_bounds=(-1.0, 1.0), rng=np.random.default_rng(0)
        )
        assert rel.X_star.shape == (2, 1)
        return
    with pytest.raises(ValueError, match="edge"):
        Bins(edges)


def test_memory_error_for_the_public_parts_spends_nothing(monkeypatch) -> None:
    """The n_bins × n_bins noise factor was allocated after the spend (MemoryError at 60³ bins)."""

    def no_memory(self):
        raise MemoryError("simulated")

    monkeypatch.setattr(binning.Bins, "centres", no_memory)
    _refused("simulated")


@pytest.mark.parametrize("bad", [10, 2.5], ids=["a number of bins", "a float"])
def test_make_bins_refuses_a_number_of_bins(bad) -> None:
    with pytest.raises(ValueError, match="not a number of bins"):
        make_bins(bad)


@pytest.mark.parametrize("bad", [True, np.bool_(False), "abc", [1.0]])
def test_empty_value_must_be_a_number(bad) -> None:
    _refused("empty_value", empty_value=bad)


def test_long_double_label_beyond_float64_warns_nothing() -> None:
    """``1e400`` as a long double made the float64 cast warn for that dataset only."""
    if np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 on this platform")
    y = Y.astype(np.longdouble)
    y[3] = np.longdouble("1e400")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rel = binned_release(
            X, y, make_bins(EDGES), epsilon=1.0, y_bounds=(-1.0, 1.0), bounds_are_public=True,
            rng=np.random.default_rng(0),
        )  # fmt: skip
    assert np.all(np.isfinite(rel.draws))


def test_epsilon_per_draw_is_the_charged_event_s() -> None:
    """Secure mode charges OpenDP's map (9.99999999999e-07 at ε = 1e-6); the metadata said 1e-6."""
    from pm_dpgp.accounting import event_from_metadata

    rel = binned_release(X, Y, make_bins(EDGES), epsilon=1e-6, y_bounds=(-1.0, 1.0))
    event = event_from_metadata(rel.metadata["privacy_event"])
    assert rel.metadata["epsilon_per_draw"] == event.eps < 1e-6


def test_the_plan_refuses_what_the_release_refuses() -> None:
    """Review of stop 36: the plan checked the scale without the public offset ``|c| + d/2``
    and accepted bounds (0, 2.45e298) that the release then refused."""
    from pm_dpgp import plan

    one, X1 = make_bins(np.array([0.0, 1.0])), np.array([[0.5]])
    bounds = (0.0, 2.45e298)  # 40 d < 1e300 <= 41 d
    with pytest.raises(ValueError, match="beyond float64"):
        plan.binned(X1, one, epsilon=1.0, y_bounds=bounds, secure=False)
    with pytest.raises(ValueError, match="beyond float64"):
        binned_release(X1, [1.0], one, epsilon=1.0, y_bounds=bounds, rng=np.random.default_rng(0))
