"""Stop-48 mutation campaign: tests that kill mutants no earlier test killed.

Each test names the mutant it kills (a small wrong change to the privacy-critical code,
applied one at a time in a scratch copy; see the stop-48 audit report).
"""

from __future__ import annotations

import math

import numpy as np

from pm_dpgp.accounting.events import LaplaceEvent, _rdp_to_epsilon_reference, rdp_to_epsilon


def test_rdp_to_epsilon_skips_orders_up_to_1_01_like_dp_accounting():
    # mutant: ``usable = a > 1.0`` (orders in (1, 1.01] used).  The docstring promises what
    # dp_accounting's compute_epsilon computes, which gives no bound at such orders; with only
    # α = 1.005 finite the mutant returned a finite ε where the reference gives +inf.
    orders = [1.005, 1.5, 3.0]
    rdp = [1e-3, math.inf, math.inf]
    assert _rdp_to_epsilon_reference(orders, rdp, 1e-5) == math.inf
    assert rdp_to_epsilon(orders, rdp, 1e-5) == math.inf


def test_laplace_curve_is_capped_at_epsilon_at_huge_orders():
    # mutant: ``np.clip(rho, 0.0, 2 * e)``.  The docstring caps the curve at ε (D_α ≤ D_∞ = ε);
    # at α ≥ 1e15 the rounding margin (1 + 64u) lifts ln(...)/(α − 1) above ε by ~1.4e-14
    # relative, so only the cap keeps it at ε.
    for z in (0.01, 1.0, 10.0):
        event = LaplaceEvent(z)
        rdp = event.rdp([1e3, 1e15, 1e200])
        assert np.all(rdp <= event.eps)
        assert rdp[-1] == event.eps


def test_full_privacy_prefix_run_clips_the_residuals_it_sums(monkeypatch):
    # mutant: ``r = leaf[1] - prior_mean`` (the clip to ±R_y dropped) in the full-privacy
    # ``posterior="prefix"`` loop of dp_thompson_sampling_tree.  The objective's values are not
    # clipped anywhere else, so this clip is what bounds the charged sensitivity
    # l2_sensitivity(R_y, R_φ, c); no earlier test ran that loop on values outside y_bounds.
    import pymc as pm

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.workflow import thompson_tree

    seen = []
    original = thompson_tree.record_statistics

    def spy(Phi, r, ratio):
        seen.append(np.asarray(r, dtype=np.float64).copy())
        return original(Phi, r, ratio)

    monkeypatch.setattr(thompson_tree, "record_statistics", spy)
    res = thompson_tree.dp_thompson_sampling_tree(
        lambda X: np.full(len(X), 1e6),  # far outside y_bounds
        pm.gp.cov.ExpQuad(1, ls=0.2),
        domain=(0.0, 1.0),
        X_init=np.array([[0.1], [0.5], [0.9]]),
        n_rounds=3,
        noise_sd=0.05,
        inducing=4,
        y_bounds=(-1.0, 2.0),
        prior_mean=0.5,
        ledger=Ledger(epsilon=3.0, delta=1e-5),
        posterior="prefix",
        privacy_model="full",
        candidates=16,
        progressbar=False,
        rng=np.random.default_rng(0),
    )
    assert res.stop_reason == "completed"
    assert seen  # the loop went through the residual statistics
    R_y = 1.5  # max(|−1 − 0.5|, |2 − 0.5|)
    assert max(float(np.max(np.abs(r))) for r in seen) <= R_y


def test_binning_summation_rounding_covers_fsum_bins():
    # mutant: ``r_fsum = 0.0``.  Bins above _FSUM_FROM records are summed by math.fsum, which
    # is correctly rounded but still rounded: |ŝ − s| ≤ 2u n (docs/binning.md).  With only
    # large bins the mutant returned r = 0, and the charged unit sensitivity 1 + 4u + 2r no
    # longer covered the computed sums of two neighbours.
    from pm_dpgp.mechanisms.label.binning import _FSUM_FROM, _U, summation_rounding

    for counts in ([_FSUM_FROM + 1], [_FSUM_FROM + 1, 5000], [3, 10**6]):
        n_max = max(counts)
        assert summation_rounding(np.array(counts, dtype=np.int64)) >= 2.0 * _U * n_max


def test_nystrom_features_are_clipped_to_a_given_feature_norm():
    # mutant: ``NystromFeatures.__call__`` returning the unclipped Φ.  With a public
    # feature_norm below √max k(x, x) (allowed: any public bound is accepted and enforced by
    # clipping), unclipped rows reach norm ≈ 1 while the tree charges R_φ = 0.3.
    import pymc as pm

    from pm_dpgp.workflow.thompson_tree import NystromFeatures

    Z = np.linspace(0.0, 1.0, 6)[:, None]
    feats = NystromFeatures(pm.gp.cov.ExpQuad(1, ls=0.2), Z, 0.05, 0.0, feature_norm=0.3)
    Phi = feats(np.linspace(0.0, 1.0, 41)[:, None])
    assert Phi.shape == (41, 6)
    assert float(np.max(np.linalg.norm(Phi, axis=1))) <= 0.3


def test_perturb_charges_twice_the_whitened_rounding():
    # mutant: ``l2 = d·s + r``.  Both neighbours' computed whitened means err by up to r, so
    # the documented charge is d·s + 2r (pm_dpgp.mechanisms.whitening); the existing tests
    # passed whitened_rounding=0 or went through the releases, where r is ~1e-16.
    from pm_dpgp.mechanisms.gaussian import gaussian_sigma
    from pm_dpgp.mechanisms.label.output_perturbation import perturb

    out = perturb(
        np.zeros(2),
        np.eye(2),
        unit_sensitivity=1.0,
        data_sensitivity=2.0,
        epsilon=1.0,
        delta=1e-5,
        rng=np.random.default_rng(0),
        whitened_rounding=0.25,
    )
    assert out.l2_sensitivity == 2.5
    assert out.sigma >= gaussian_sigma(1.0, 1e-5, 2.5)


def test_coinpress_result_event_charges_the_sum_of_the_step_rhos():
    # mutant: ``ZCDPEvent(max(self.rhos))``.  CoinpressResult.event is public ("ρ-zCDP with
    # ρ = Σ ρ_t, adaptive composition"); a caller charging it after coinpress_mean would have
    # been charged for one step only.
    from pm_dpgp.selection.coinpress import coinpress_mean

    res = coinpress_mean(
        np.linspace(-1.0, 1.0, 50),
        lower=-4.0,
        upper=4.0,
        rho=0.5,
        n_steps=4,
        rng=np.random.default_rng(1),
    )
    assert len(res.rhos) == 4
    assert math.isclose(res.event.total_rho, math.fsum(res.rhos), rel_tol=1e-15)
    assert math.isclose(res.event.total_rho, 0.5, rel_tol=1e-12)


def test_whitening_column_sensitivity_is_never_below_the_exact_column_norm():
    # mutant: the allowance ``column *= 1 + γ_{k+2}`` dropped.  The charged Δ_W must bound
    # d·max_j ‖W e_j‖₂ exactly (docs: "the exact change of W(y − c)"); the float norm alone is
    # below the exact one for about half of random matrices.  Checked in rational arithmetic
    # with d = 1 (y_bounds (0, 1)): Δ_W² ≥ Σ_i W_ij² for every column j.
    from fractions import Fraction

    from pm_dpgp.mechanisms.whitening import centred_whitening

    rng = np.random.default_rng(48)
    for _ in range(60):
        k, n = (int(v) for v in rng.integers(1, 7, size=2))
        W = rng.normal(size=(k, n)) * 10.0 ** rng.uniform(-3, 3)
        out = centred_whitening(W, np.full(n, 0.5), (0.0, 1.0), 0.5)
        exact = max(sum(Fraction(float(w)) ** 2 for w in W[:, j]) for j in range(n))
        assert Fraction(out.column_sensitivity) ** 2 >= exact
