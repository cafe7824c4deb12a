"""Stop-43 audit of the binning baselines and ``class_probabilities`` (docs/binning.md).

F1: a subnormal ``y_bounds`` width gave the Laplace scale 0 (no noise, ε charged); F2: the
per-bin metadata lists were built after the spend (MemoryError on a 4000 × 4000 grid,
charged); F3: the secure round-off bound grew like ``n_max² u`` (one bin of 10⁸ records
tripled every bin's noise) and the grid followed ``1/ε`` (128× the closed form at ε = 10⁻⁸);
F4: ``binned_predict`` used a DataFrame by position; F5: ``average="False"`` was read as True.
Each test fails on the code before the fix.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.label import binning
from pm_dpgp.mechanisms.label.binning import (
    binned_gp,
    binned_predict,
    binned_release,
    binning_noise,
    make_bins,
    simulation_unit_sensitivity,
)
from pm_dpgp.mechanisms.label.classification import class_probabilities, classification_release
from pm_dpgp.models.classification import gp_classification
from pm_dpgp.release import Release
from tests.test_classification import _data

TINY_WIDTHS = [5e-324, 58 * 5e-324, 2.0**-1030]  # subnormal widths d of y_bounds = (0, d)


def _untouched(ledger: Ledger) -> bool:
    return ledger.spent_epsilon == 0.0 and not ledger.history


# ------------------------------------------------------------------ F1: subnormal widths
@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("d", TINY_WIDTHS)
def test_a_subnormal_width_is_refused_before_the_spend_for_both_neighbours(d, secure) -> None:
    """The exact neighbour pair of the audit: one label moved from ``lo`` to ``hi``.  Before,
    d = 5e-324 gave laplace_scale 0 and disjoint outputs (privacy loss ∞, ε = 1 charged);
    d = 58·5e-324 with 39 records drew the noise at 1/1.487 of the charged scale."""
    n = 39
    X = np.full(n, 0.5)
    bins = make_bins([0.0, 1.0])
    for y in (np.r_[0.0, np.full(n - 1, d)], np.full(n, d)):
        ledger = Ledger(epsilon=100.0)
        rng = None if secure else np.random.default_rng(0)
        with pytest.raises(ValueError, match="smallest normal float64"):
            binned_release(X, y, bins, epsilon=1.0, y_bounds=(0.0, d), ledger=ledger, rng=rng)
        assert _untouched(ledger)
    with pytest.raises(ValueError, match="smallest normal float64"):
        plan.binned(X, bins, epsilon=1.0, y_bounds=(0.0, d), secure=secure)


@pytest.mark.parametrize(
    ("d", "n", "eps"),
    [(1e-300, 100, 1e10), (1.0, 10, 1e307)],  # b = d/(nε) = 1e-312; 1/(nε) = 1e-308
)
def test_a_scale_below_the_normal_range_is_refused(d, n, eps) -> None:
    """A normal width whose scale d/(n ε) or normalised scale 1/(n ε) underflows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="smallest normal float64"):
            binning_noise(np.array([n]), eps, (0.0, d), 1, secure=False)


def test_the_reported_secure_scale_is_positive_and_the_closed_form() -> None:
    """Secure mode reported laplace_scale 0 at d = 5e-324 (binned_gp then took the means as
    noise-free); at a small normal width the scale is d/(n ε) within the grid's 2^-19."""
    ledger = Ledger(epsilon=10.0)
    n, d = 7, 2.0**-1000
    rel = binned_release(np.full(n, 0.5), np.zeros(n), make_bins([0.0, 1.0]), epsilon=1.0,
                         y_bounds=(0.0, d), ledger=ledger)  # fmt: skip
    b = rel.metadata["occupied_laplace_scale"][0]
    assert 0 < b and abs(b / (d / n) - 1.0) <= 2.0**-18


# --------------------------------------------------------- F2: metadata before the spend
def test_the_metadata_is_built_before_the_spend(monkeypatch) -> None:
    """A failure while building the metadata (MemoryError on a fine grid) spent nothing."""

    def fail(*args, **kwargs):
        raise MemoryError("metadata")

    monkeypatch.setattr(binning, "input_columns_record", fail)
    ledger = Ledger(epsilon=10.0)
    with pytest.raises(MemoryError):
        binned_release(
            np.full(10, 0.5), np.zeros(10), make_bins([0.0, 1.0]), epsilon=1.0,
            y_bounds=(0.0, 1.0), ledger=ledger, rng=np.random.default_rng(0),
        )  # fmt: skip
    assert _untouched(ledger)


def test_the_metadata_holds_the_occupied_bins_only() -> None:
    """1000 × 1000 bins, 100 records in 3 bins: the lists had 10⁶ entries each (3·10⁶ Python
    objects); now 3, and binned_predict / binned_gp / the InferenceData attrs use them.  A
    release in the old dense format gives the same GP."""
    k = 1000
    bins = make_bins([np.linspace(0, 1, k + 1)] * 2)
    X = np.repeat([[0.5e-3, 0.5e-3], [0.5, 0.5], [0.9995, 0.2]], [50, 30, 20], axis=0)
    y = np.random.default_rng(0).uniform(size=100)
    rel = binned_release(X, y, bins, epsilon=1.0, y_bounds=(0, 1), rng=np.random.default_rng(1))
    md = rel.metadata
    occ = [0, 500 * k + 500, 999 * k + 200]
    assert md["occupied_bins"] == occ and md["occupied_counts"] == [50, 30, 20]
    assert "bin_counts" not in md and "laplace_scale" not in md
    # × S = 1 + 4u + 2r, the computed sums' sensitivity (stop 47)
    unit = simulation_unit_sensitivity(md["summation_rounding"])
    np.testing.assert_allclose(
        md["occupied_laplace_scale"], np.array([1 / 50, 1 / 30, 1 / 20]) * unit, rtol=1e-15
    )
    assert len(json.dumps({k_: v for k_, v in md.items() if k_ != "bin_edges"})) < 5000
    assert json.loads(rel.to_inference_data().posterior.attrs["occupied_bins"]) == occ
    pred = binned_predict(rel, X[[0, 50, 80]])
    np.testing.assert_array_equal(pred, rel.draws[:, occ])
    Xs = np.array([[0.3, 0.3], [0.6, 0.5]])
    g = binned_gp(rel, Xs, lengthscale=0.3, kernel_scale=1.0, noise_sd=0.1)
    dense = dict(md)
    for key in ("occupied_bins", "occupied_counts", "occupied_laplace_scale"):
        del dense[key]
    counts, scale = np.zeros(k * k, dtype=int), np.zeros(k * k)
    counts[occ], scale[occ] = md["occupied_counts"], md["occupied_laplace_scale"]
    dense["bin_counts"], dense["laplace_scale"] = counts.tolist(), scale.tolist()
    old = Release(rel.mechanism, rel.draws, rel.X_star, rel.noise_factor, dense, rel.variable_name)
    g_old = binned_gp(old, Xs, lengthscale=0.3, kernel_scale=1.0, noise_sd=0.1)
    np.testing.assert_array_equal(g.draws, g_old.draws)
    np.testing.assert_array_equal(g.noise_factor, g_old.noise_factor)


# ------------------------------------------------------- F3: the secure round-off and grid
@pytest.mark.parametrize("n_max", [10**7, 3 * 10**7, 10**8])
def test_one_large_bin_does_not_inflate_the_noise_of_the_others(n_max) -> None:
    """The 10-record bin's secure scale over d/(10 ε): 2.2 %, 20 %, 222 % before (the bound
    2γ_{n+3}(n/2+1) ~ n² u); now the grid's 2^-19 at every n_max."""
    bn = binning_noise(np.array([n_max, 10]), 1.0, (0.0, 1.0), 1, secure=True)
    assert bn.scale[1] / 0.1 - 1.0 <= 2.0**-18


def test_the_bin_sums_are_correctly_rounded_above_the_fsum_threshold() -> None:
    """A bin of 2^20 labels near the upper bound: the recursive sum (np.bincount) drifts by
    ~5e-15 in the mean, the release's mean is now the correctly rounded sum (math.fsum) up
    to the final ``c + d·(…)`` rounding; simulation mode at ε = 10¹⁴ (noise ~ 10⁻²⁰)."""
    n = 2**20
    y = np.random.default_rng(3).uniform(0.9, 1.0, n)
    terms = (y - 0.5) / 1.0
    exact = math.fsum(terms.tolist()) / n
    recursive = np.bincount(np.zeros(n, dtype=np.intp), weights=terms)[0] / n
    assert abs(recursive - exact) > 2e-15  # the old summation's error on these data
    ledger = Ledger(epsilon=1e15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = binned_release(
            np.full(n, 0.5), y, make_bins([0.0, 1.0]), epsilon=1e14, y_bounds=(0.0, 1.0),
            ledger=ledger, rng=np.random.default_rng(0),
        )  # fmt: skip
    assert abs((rel.draws[0, 0] - 0.5) - exact) < 2e-16


@pytest.mark.parametrize("eps", [1e-6, 1e-8, 1e-9])
def test_the_grid_is_capped_for_a_small_epsilon(eps) -> None:
    """γ = 2^-20 for ε ≤ 1 (while the integer scale stays below ~2^51): the scale exceeded
    the closed form by a factor 2 at ε = 10⁻⁶ and 128 at 10⁻⁸; now by 2^-19."""
    bn = binning_noise(np.array([10]), eps, (0.0, 1.0), 1, secure=True)
    assert bn.scale[0] / (0.1 / eps) - 1.0 <= 2.0**-18
    assert bn.grid == 2.0**-20


def test_an_epsilon_whose_integer_noise_saturates_is_refused() -> None:
    """ε = 1e-20: OpenDP's i64 noise saturated, the release was the clamp value (6.5e32)."""
    ledger = Ledger(epsilon=1.0)
    with pytest.raises(ValueError, match="64-bit integers"):
        binned_release([0.5], [0.3], make_bins([0.0, 1.0]), epsilon=1e-20, y_bounds=(0, 1),
                       ledger=ledger)  # fmt: skip
    assert _untouched(ledger)


# ------------------------------------------------------------- F4, F5 and the GP message
def test_binned_predict_refuses_another_column_order() -> None:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.uniform(0, 1, 400), "b": rng.uniform(0, 10, 400)})
    bins = make_bins([np.linspace(0, 1, 3), np.linspace(0, 10, 3)])
    rel = binned_release(df, (df["a"] > 0.5).astype(float), bins, epsilon=100.0,
                         y_bounds=(0, 1), rng=np.random.default_rng(1))  # fmt: skip
    test = pd.DataFrame({"a": [0.9, 0.1], "b": [1.0, 1.0]})
    assert binned_predict(rel, test).shape == (1, 2)
    with pytest.raises(ValueError, match=r"select them in that order"):
        binned_predict(rel, test[["b", "a"]])


@pytest.fixture(scope="module")
def classification() -> Release:
    X, t = _data(0, 20)
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=1.0))
    return classification_release(
        model, X[:3], epsilon=1.0, delta=1e-3, rng=np.random.default_rng(0)
    )


@pytest.mark.parametrize("flag", ["False", "no", None, 1, np.array([])])
def test_class_probabilities_average_accepts_only_a_boolean(classification, flag) -> None:
    assert class_probabilities(classification, average=False).shape == (1, 3)
    with pytest.raises(ValueError, match="average must be True or False"):
        class_probabilities(classification, average=flag)


def test_a_non_finite_integral_kernel_says_what_to_change() -> None:
    """Edges at ±1e308: the error named an internal matrix "A" and asked to "impute"."""
    X = np.random.default_rng(0).uniform(0, 1, 50)
    rel = binned_release(X, np.sin(X), make_bins([-1e308, 0.5, 1e308]), epsilon=1.0,
                         y_bounds=(-1, 1), rng=np.random.default_rng(1))  # fmt: skip
    with pytest.raises(ValueError, match="Rescale the inputs") as err:
        binned_gp(rel, [[0.0]], lengthscale=1.0, kernel_scale=1.0, noise_sd=0.1)
    assert "impute" not in str(err.value)
    g = binned_gp(rel, [[0.0]], lengthscale=1.0, kernel_scale=1.0, noise_sd=0.1, method="point")
    assert np.isfinite(g.draws).all()
