"""Stop-45 audit of the privacy-auditing tools (``pm_dpgp/audit``): each test fails on the code
before the fix.

* the adversarial searches (``adversarial_neighbours``, ``adversarial_gram``) treated an
  infinite divergence (``Σ_α`` not positive definite) as the *worst* objective value and were
  repelled from it, so beyond the order range of a bound they reported finite maxima where
  random pairs give ``+inf`` (a wrong ``alpha_max`` would have passed the audit);
* ``gaussian_renyi_terms`` gave 0 for two point masses less than 1e-8 apart (``np.allclose``);
* the leak scan did not read a decimal token touching a letter or ``_`` (``"obs_2.7182818"``,
  ``"2.7182818s"``), nor rounded decimal text in JSON stored as a 1-byte integer dataset.
"""

from __future__ import annotations

import json
import math

import numpy as np
import xarray as xr

from pm_dpgp.audit import scan_for_values
from pm_dpgp.audit.gram import adversarial_gram
from pm_dpgp.audit.neighbours import adversarial_neighbours, neighbour_divergence, random_neighbours
from pm_dpgp.audit.renyi import eq_kernel, gaussian_renyi_terms
from pm_dpgp.compat import make_inference_data
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound

K = eq_kernel(0.3)
KW = {"kernel_scale": 0.5, "r2": 0.5}


def test_neighbour_search_reports_an_infinite_divergence_it_can_reach():
    """α = 1.55 just above α_max = 1.5: some random pairs have Σ_α not PD (D_α = +inf,
    confirmed with 40-digit arithmetic); the search reported 6.1 (it mapped +inf to −inf)."""
    alpha = 1.55
    bound = SamplePathBound(3, 0.5, 0.5, 1.0, math.exp(-1 / (2 * 0.09)))
    assert bound.alpha_max < alpha
    rng = np.random.default_rng(0)
    pairs = [random_neighbours((0, 1), 3, 1.0, 2, rng) for _ in range(200)]
    assert any(math.isinf(neighbour_divergence(K, p, alpha=alpha, **KW).total) for p in pairs)
    res = adversarial_neighbours(
        K, (0, 1), n=3, alpha=alpha, M_Y=1.0, objective="cov", restarts=4, maxiter=100,
        rng=np.random.default_rng(1), **KW,
    )  # fmt: skip
    assert res.divergence == math.inf
    assert neighbour_divergence(K, res.pair, alpha=alpha, **KW).cov == math.inf


def test_neighbour_search_inside_the_range_is_unchanged():
    res = adversarial_neighbours(
        K, (0, 1), n=3, alpha=1.45, M_Y=1.0, objective="cov", restarts=4, maxiter=100,
        rng=np.random.default_rng(1), **KW,
    )  # fmt: skip
    assert math.isfinite(res.divergence) and res.divergence > 2.0


def test_gram_search_reports_an_infinite_divergence_it_can_reach():
    """κ = 0, r² = 0.5: α_max = 1.5; at α = 2 the search reported 44.5 (seed 0)."""
    res = adversarial_gram(
        n=2, r2=0.5, kappa=0.0, M_Y=1.0, objective="total", alpha=2.0, restarts=3,
        maxiter=100, rng=np.random.default_rng(0),
    )  # fmt: skip
    assert res.value == math.inf


def test_point_masses_a_little_apart_are_infinitely_divergent():
    Z = np.zeros((1, 1))
    assert gaussian_renyi_terms([0.0], Z, [5e-9], Z, 2.0).total == math.inf
    assert gaussian_renyi_terms([0.0, 0.0], np.zeros((2, 2)), [0.0, 1e-12], np.zeros((2, 2)), 2.0)\
        .total == math.inf  # fmt: skip
    assert gaussian_renyi_terms([0.3], Z, [0.3], Z, 2.0).total == 0.0


V = np.array([0.7342198512345678, -1.234567890123, 2.718281828459045])


def _release(**extra):
    pp = xr.Dataset(
        {"f_dp": (("chain", "draw", "x_star"), np.random.default_rng(0).normal(size=(1, 20, 5)))},
        coords={"x_star": np.linspace(0, 1, 5)},
        attrs={"mechanism": "gaussian"},
    )
    attrs = {k: v for k, v in extra.items() if isinstance(v, str)}
    pp.attrs.update(attrs)
    pp = pp.assign({k: v for k, v in extra.items() if k not in attrs})
    return make_inference_data({"posterior_predictive": pp})


def _found(idata) -> set[float]:
    return {f.value for f in scan_for_values(idata, V)}


def test_leak_scan_reads_numbers_touching_letters():
    """'%.8g' of e is 2.7182818, not str(float32(e)) = 2.7182817: only a decimal-token
    reading finds it; a label or a unit made the token invisible."""
    for text in (
        ";".join(f"obs_{x:.8g}" for x in V),
        ";".join(f"{x:.8g}s" for x in V),
        ";".join(f"x{x:.8g}" for x in V),
    ):
        assert _found(_release(labels=text)) == set(V), text


def test_leak_scan_reads_rounded_json_stored_as_bytes():
    text = json.dumps([f"{x:.8g}" for x in V]).replace('"', "")  # [0.73421985, ...]
    blob = np.frombuffer(text.encode(), dtype=np.uint8)
    assert _found(_release(meta=("nb", blob))) == set(V)


def test_leak_scan_no_new_false_positive_on_versions_and_short_numbers():
    other = "pymc5.16.2 arviz0.20.0 python3.11.9 x_0.5 run_2.25s"
    assert _found(_release(labels=other)) == set()


def test_public_choices_refuse_inputs_of_another_width():
    """Z = X[:3, :1] of a 2-column X was "found" (byte rows of different widths compared), a
    hold-out of another width was skipped: "nothing flagged"."""
    import pytest

    from pm_dpgp.audit import check_public_choices
    from pm_dpgp.gp.sparse import count_matching_rows

    X = np.random.default_rng(0).uniform(size=(10, 2))
    y = np.arange(10.0)
    with pytest.raises(ValueError, match="same number of columns"):
        count_matching_rows(X[:3, :1], X)
    with pytest.raises(ValueError, match="one column per input dimension"):
        check_public_choices(X, y, Z=X[:3, :1])
    with pytest.raises(ValueError, match="holdout"):
        check_public_choices(X, y, holdout=(X[:3, 0], y[:3]))
    assert check_public_choices(X, y, Z=X[:3] + 0.25) is None


def test_gram_search_validates_its_counts():
    import pytest

    kw = {"n": 2, "r2": 1.0, "kappa": 0.1, "M_Y": 1.0, "maxiter": 2}
    for bad in ({"n_extra_test": -1}, {"n_extra_test": 1.7}, {"restarts": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            adversarial_gram(**kw, **{"restarts": 1, **bad})


def test_lira_refuses_an_attack_without_operating_points():
    """fprs=() gave no calibrated point and dp_consistent(any ε) was True (vacuous)."""
    import pytest

    from pm_dpgp.audit import LiraSetting, lira_attack

    s = LiraSetting(n=5, L=2)
    with pytest.raises(ValueError, match="fprs"):
        lira_attack(s, n_shadow=10, n_eval=20, fprs=(), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="n_calibration"):
        lira_attack(s, n_shadow=10, n_eval=20, n_calibration=2.9, rng=np.random.default_rng(0))
