"""Stop 47: the simulation-mode Laplace bin means charge the round-off of the bin sums.

The computed normalised sums ``ŝ_j`` of neighbours differ by up to ``1 + 4u + 2r``
(``docs/binning.md``); the simulation mode drew ``Laplace(1/(n_j ε))`` on ``fl(ŝ_j/n_j)``, so
its loss could exceed ε by a relative ``4u + 2r`` (and the division's rounding), found by the
stop-47 label audit.  It now draws ``Laplace(S/ε)`` on ``ŝ_j``, ``S ≥ 1 + 4u + 2r``, and divides
by the public ``n_j`` afterwards.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from pm_dpgp.mechanisms.label.binning import (
    binned_release,
    make_bins,
    simulation_unit_sensitivity,
    summation_rounding,
)

U = Fraction(1, 2**53)


def test_simulation_scale_covers_the_computed_sums_sensitivity() -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, (700, 1))
    y = rng.uniform(-1, 1, 700)
    bins = make_bins(np.linspace(0, 1, 4))
    eps = 0.8
    rel = binned_release(
        X, y, bins, epsilon=eps, y_bounds=(-1.0, 1.0), rng=np.random.default_rng(1)
    )
    md = rel.metadata
    counts = np.asarray(md["occupied_counts"], dtype=np.int64)
    r = summation_rounding(counts)
    assert md["summation_rounding"] == r > 0
    S = simulation_unit_sensitivity(r)
    assert Fraction(S) >= 1 + 4 * U + 2 * Fraction(r)
    d = 2.0
    for n_j, b_j in zip(counts, md["occupied_laplace_scale"], strict=True):
        # b_j (the scale of the released mean) is d S / (n_j ε), never below the charge
        assert Fraction(b_j) >= Fraction(d) * (1 + 4 * U + 2 * Fraction(r)) / (
            int(n_j) * Fraction(eps)
        ) * (1 - 4 * U)


def test_simulation_noise_is_drawn_on_the_sums_and_divided_by_the_public_count() -> None:
    rng = np.random.default_rng(4)
    X = rng.uniform(0, 1, (90, 1))
    y = rng.uniform(-1, 1, 90)
    bins = make_bins(np.linspace(0, 1, 3))
    eps = 1.3
    rel = binned_release(
        X, y, bins, epsilon=eps, y_bounds=(-1.0, 1.0), n_draws=2, rng=np.random.default_rng(9)
    )
    md = rel.metadata
    counts = np.asarray(md["occupied_counts"], dtype=np.float64)
    idx = np.minimum((X[:, 0] * 2).astype(int), 1)
    s = np.bincount(idx, weights=y / 2.0, minlength=2)  # centre 0, width 2
    S = simulation_unit_sensitivity(md["summation_rounding"])
    noise = np.random.default_rng(9).laplace(0.0, S / eps, (2, 2))
    np.testing.assert_allclose(rel.draws, 0.0 + 2.0 * ((s + noise) / counts), rtol=1e-13)


def test_laplace_weights_are_accurate_for_large_linearisation_points() -> None:
    """W₀ = π(1 − π) lost its accuracy for large f₀ (1 − π cancels): 6 % off at f₀ = 35 and
    0 from f₀ ≈ 37 (stop-47 label audit); σ(f)σ(−f) is accurate."""
    import mpmath

    from pm_dpgp.gp.laplace import laplace_linearisation

    f0 = np.array([-40.0, -5.0, 0.0, 5.0, 35.0, 40.0])
    sqrt_w, _ = laplace_linearisation(f0, 0.0)
    with mpmath.workdps(60):
        for f, sw in zip(f0, sqrt_w, strict=True):
            p = 1 / (1 + mpmath.exp(-mpmath.mpf(f)))
            exact = float(p * (1 - p))
            assert abs(sw**2 - exact) <= 1e-14 * exact


def test_regression_record_norm_does_not_underflow() -> None:
    """B_rec = √(R_y²R_k² + c²R_k⁴) of the summation margin: the squares underflowed below
    R_k ≈ 1e-154 (as the Dirichlet record norm did, stop-47 audit)."""
    from pm_dpgp.mechanisms.full.noise_aware import regression_record_norm

    for R_y, R_k, c in [
        (1.0, 2.65e-162, 1.0),
        (3.0, 1e-200, 0.5),
        (2.0, 1.3, 0.7),
        (1e150, 1e-3, 1.0),
    ]:
        exact_sq = Fraction(R_y) ** 2 * Fraction(R_k) ** 2 + Fraction(c) ** 2 * Fraction(R_k) ** 4
        got = Fraction(regression_record_norm(R_y, R_k, c))
        assert abs(got**2 - exact_sq) <= Fraction(1, 2**48) * exact_sq


def test_l2_sensitivity_is_finite_and_accurate_across_scales() -> None:
    """The stop-47 rewrite of eq. (6) for tiny R_k overflowed q² = (c R_k/R_y)² for tiny R_y
    (Δ = inf, so the secure selection refused with 'sensitivity must be finite' instead of its
    own check); both closed-form cases now stay within a few ulps of the exact value."""
    from pm_dpgp.mechanisms.full.noise_aware import l2_sensitivity

    cases = [(1e-160, 1.0, 1.0), (1.0, 2.65e-162, 1.0), (1.0, 1.0, 1.0), (3.0, 0.2, 20.0),
             (1e100, 1e-100, 1e-50), (1e-150, 1e60, 1e3)]  # fmt: skip
    for R_y, R_k, c in cases:
        Fy, Fk, Fc = Fraction(R_y), Fraction(R_k), Fraction(c)
        s = min(Fy**2 / (2 * Fc**2), Fk**2)
        exact_sq = 2 * Fy**2 * Fk**2 + 2 * Fc**2 * Fk**4 + 2 * Fy**2 * s - 2 * Fc**2 * s**2
        got = Fraction(l2_sensitivity(R_y, R_k, c))
        assert abs(got**2 - exact_sq) <= Fraction(16, 2**53) * exact_sq
