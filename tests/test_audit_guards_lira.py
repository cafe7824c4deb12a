"""Kill tests for LiRA mutants
(stop-34 mutation testing of the audit tools: 64 mutants, 35 survived the whole suite)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from pm_dpgp.audit.lira import LiraPoint, LiraResult, LiraSetting, _mixture_logpdf


def test_dp_slack_checks_the_complementary_inequality():  # A01
    """TPR 0.99 at FPR 0.9 obeys TPR ≤ e^ε FPR + δ at ε = 0.5 but not
    1 − FPR ≤ e^ε (1 − TPR) + δ (0.1 > 1.65·0.01): not (0.5, 1e-5)-DP."""
    p = LiraPoint(0.9, 0.0, 99_000, 100_000, 90_000, 100_000)
    assert p.dp_slack(0.5, 1e-5) < 0.0
    assert p.epsilon_lower_bound(1e-5) > 0.5


def test_dp_consistent_reports_a_violation():  # A05 (and A01)
    s = LiraSetting()
    bad = LiraPoint(0.01, 0.0, 50_000, 100_000, 1_000, 100_000)  # TPR 0.5 at FPR 0.01
    res = LiraResult(s, "mixture", np.zeros(2), np.zeros(2), {}, (bad,))
    assert not res.dp_consistent(1.0, 1e-5)
    ok = LiraPoint(0.01, 0.0, 1_000, 100_000, 1_000, 100_000)
    assert LiraResult(s, "mixture", np.zeros(2), np.zeros(2), {}, (ok,)).dp_consistent(1.0, 1e-5)


def test_mixture_density_of_one_shadow_is_the_exact_law():  # A04
    """One shadow dataset (m, v): t̄ ~ N(m, v/L), s² ~ v χ²_{L−1}/(L−1) (density of log s²)."""
    L, m, v = 7, 0.3, 0.5
    t = np.array([[0.1, math.log(0.4)], [0.6, math.log(0.9)]])
    got = _mixture_logpdf(t, np.array([m]), np.array([v]), L)
    k = L - 1
    s2 = np.exp(t[:, 1])
    want = (
        stats.norm.logpdf(t[:, 0], m, math.sqrt(v / L))
        + stats.chi2.logpdf(s2 * k / v, k)
        + math.log(k / v)
        + t[:, 1]
    )
    np.testing.assert_allclose(got, want, rtol=1e-10)
