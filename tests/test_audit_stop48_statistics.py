"""Stop-48 audit of the full-privacy sufficient-statistics machinery.

* ``norm_rounded_up`` squared the values unscaled: for ``[1e-160] * 3`` the squares underflowed
  and the "rounded-up" norm was 5.6·10⁻⁶ relative *below* the exact one (0 for ``1e-200``).  It
  is ``R_φ`` of ``DyadicPartitionFeatures(weights=…)``, so the tree loop charged a leaf
  sensitivity below the change one record makes (by far more than the round-off margin).
* ``public_inputs_posterior`` (label privacy, ``posterior="prefix"``) divided ``0/0`` when
  ``σ_a²`` underflowed (``y_bounds = ±1e-200``): the run was charged, then raised.
* ``noise_sd`` of the tree loop whose square leaves float64 raised ``ZeroDivisionError`` /
  ``OverflowError`` (partition basis) instead of a clear error.
"""

from __future__ import annotations

import math
import warnings
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.gp.linalg import norm_rounded_up
from pm_dpgp.workflow import dp_thompson_sampling_tree
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures
from pm_dpgp.workflow.thompson_tree import public_inputs_posterior

getcontext().prec = 80


def _exact_norm_squared(v: np.ndarray) -> Decimal:
    s = sum((Fraction(float(x)) ** 2 for x in v), Fraction(0))
    return Decimal(s.numerator) / Decimal(s.denominator)


@pytest.mark.parametrize("w", [1e-160, 1e-200, 1e-300, 5e-324, 3e-162, 1e160, 1e-20, 1.0])
def test_norm_rounded_up_is_never_below_the_exact_norm(w: float) -> None:
    for v in (np.full(3, w), np.array([w, 0.75 * w, -w * 2.0**-30])):
        r = norm_rounded_up(v)
        assert math.isfinite(r)
        assert Decimal(r) ** 2 >= _exact_norm_squared(v)  # failed for w ≤ 1e-160 (underflow)
        # still tight (up to two floats up, for a subnormal norm)
        exact = _exact_norm_squared(v).sqrt()
        assert Decimal(r) <= exact * (1 + Decimal(2) ** -48) + Decimal(2.0**-1073)


def test_norm_rounded_up_random_scales() -> None:
    rng = np.random.default_rng(48)
    for _ in range(2000):
        n = int(rng.integers(1, 12))
        v = rng.standard_normal(n) * 10.0 ** rng.uniform(-320, 300)
        r = norm_rounded_up(v)
        if math.isfinite(r):
            assert Decimal(r) ** 2 >= _exact_norm_squared(v)
    assert norm_rounded_up(np.zeros(0)) == 0.0
    assert norm_rounded_up(np.array([1e308, 1e308])) == pytest.approx(math.sqrt(2) * 1e308)


def _run(features, y_bound, *, privacy_model="label", posterior="prefix", noise_sd=0.1):
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = dp_thompson_sampling_tree(
            lambda X: y_bound * np.sin(3 * X[:, 0]),
            None,
            features=features,
            domain=(0.0, 1.0),
            X_init=np.array([[0.1], [0.5], [0.9]]),
            n_rounds=4,
            noise_sd=noise_sd,
            y_bounds=(-y_bound, y_bound),
            ledger=ledger,
            rng=np.random.default_rng(0),
            progressbar=False,
            posterior=posterior,
            privacy_model=privacy_model,
        )
    return res, ledger


@pytest.mark.parametrize("posterior", ["prefix", "all_releases"])
def test_partition_loop_charges_at_least_one_records_change_for_tiny_weights(posterior) -> None:
    """Weights 1e-160: one record moves a leaf by ‖w‖(b − a) = 2√3·10⁻¹⁶⁰ (y_bounds ±1); the
    charged leaf sensitivity was 3.46408·10⁻¹⁶⁰ (5.6·10⁻⁶ relative too small)."""
    y_bound = 1.0 if posterior == "prefix" else 1e80  # all_releases: σ within its safe range
    f = DyadicPartitionFeatures(0.0, 1.0, 3, kernel_scale=None, weights=[1e-160] * 3)
    assert Decimal(f.R) ** 2 >= _exact_norm_squared(np.array(f.weights))
    phi = f(np.array([[0.3]]))[0]
    assert Decimal(f.R) ** 2 >= _exact_norm_squared(phi)
    res, ledger = _run(f, y_bound, posterior=posterior)
    attrs = res.idata.thompson.attrs
    worst = Decimal(math.sqrt(3) * 1e-160) * Decimal(2 * y_bound)  # ‖φ(x)‖ (b − a), exact-ish
    assert Decimal(attrs["charged_leaf_sensitivity"]) >= worst * (1 - Decimal(2) ** -50)
    assert res.stop_reason == "completed" and len(ledger.history) == 1


@pytest.mark.parametrize("privacy_model", ["label", "full"])
def test_tiny_response_range_prefix_run_completes_after_its_charge(privacy_model) -> None:
    """y_bounds ±1e-200: σ_a² underflows; the label prefix posterior was 0/0 = nan after the
    run was charged (``ValueError: array must not contain infs or NaNs``)."""
    res, ledger = _run(DyadicPartitionFeatures(0.0, 1.0, 3), 1e-200, privacy_model=privacy_model)
    assert res.stop_reason == "completed" and len(ledger.history) == 1
    assert np.all(np.isfinite(res.idata.thompson["f_path_at_chosen"].values))


def test_public_inputs_posterior_when_sigma_a_squared_underflows() -> None:
    B = np.diag([1.0, 1e-310, 0.0, 0.0])
    a = np.full(4, 1e-200)
    m, S = public_inputs_posterior(B, a, 1e-20, 1e-199)
    # b = 1: gain 1/σ², precision 1 + 1/σ²; b = 1e-310: gain b/(σ² b + σ_a²) ≈ 1e20, precision 1
    np.testing.assert_allclose(np.diag(S), [1 / (1 + 1e20), 1.0, 1.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(m, [1e-200 * 1e20 / (1 + 1e20), 1e-180, 0.0, 0.0], rtol=1e-12)
    # ordinary scales: the plain formula, unchanged
    B2 = np.array([[2.0, 0.5], [0.5, 1.0]])
    m2, S2 = public_inputs_posterior(B2, np.array([0.3, -0.2]), 0.04, 0.5)
    C = 0.04 * B2 + 0.25 * np.eye(2)
    Lam = np.eye(2) + B2 @ np.linalg.solve(C, B2)
    np.testing.assert_allclose(S2, np.linalg.inv(Lam), rtol=1e-12)
    np.testing.assert_allclose(
        m2, np.linalg.solve(Lam, B2 @ np.linalg.solve(C, [0.3, -0.2])), rtol=1e-12
    )


@pytest.mark.parametrize("noise_sd", [1e-170, 1e160])
def test_noise_sd_whose_square_leaves_float64_is_refused_by_name(noise_sd) -> None:
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="noise_sd"):
        dp_thompson_sampling_tree(
            lambda X: np.sin(3 * X[:, 0]),
            None,
            features=DyadicPartitionFeatures(0.0, 1.0, 3),
            domain=(0.0, 1.0),
            X_init=np.array([[0.1], [0.5], [0.9]]),
            n_rounds=2,
            noise_sd=noise_sd,
            ledger=ledger,
            rng=np.random.default_rng(0),
            progressbar=False,
        )
    assert len(ledger.history) == 0
