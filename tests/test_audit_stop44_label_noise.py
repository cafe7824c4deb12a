"""Stop-44 audit: label-private Gaussian releases, calibration and secure noise.

* A prior mean so far from ``y_bounds`` that the public offset ``μ + F (c − μ) W 1`` overflows
  gave a release of NaN/inf draws, charged to the ledger; now refused before anything is spent.
* The secure plan at an absurd ε (1e30) failed with OpenDP's "… is not representable by i64"
  (a 22-digit integer); now a clear refusal, nothing spent.
* ``gaussian_epsilon`` with ``Δ/σ`` beyond 1e154 raised SciPy's "function value at x=inf is
  NaN"; now a clear refusal.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release, prior_noise_release
from pm_dpgp.mechanisms.gaussian import gaussian_epsilon
from pm_dpgp.mechanisms.noise import secure_plan
from pm_dpgp.models import gp_regression


def _far_model():
    X = np.linspace(0.0, 5.0, 6)
    return gp_regression(
        X, np.full(6, 1.7e308), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.5, mean=-1.7e308
    )


@pytest.mark.parametrize("secure", [True, False])
@pytest.mark.parametrize("mechanism", ["prior_noise", "cloaking"])
def test_a_non_finite_public_offset_is_refused_before_spending(secure, mechanism):
    lower = 1.7e308
    bounds = (lower, float(np.nextafter(np.nextafter(lower, np.inf), np.inf)))
    ledger = Ledger(epsilon=10.0, delta=1e-3)
    rng = None if secure else np.random.default_rng(0)
    state = None if rng is None else rng.bit_generator.state
    release = prior_noise_release if mechanism == "prior_noise" else cloaked_release
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="offset") as info:
            release(
                _far_model(),
                np.linspace(0.0, 5.0, 3),
                epsilon=1.0,
                delta=1e-5,
                y_bounds=bounds,
                ledger=ledger,
                rng=rng,
            )
    assert "Nothing was spent" in str(info.value)
    assert ledger.spent_epsilon == 0.0
    if rng is not None:
        assert rng.bit_generator.state == state


def test_secure_plan_at_an_absurd_epsilon_is_refused_clearly():
    with pytest.raises(ValueError, match="epsilon far too large") as info:
        secure_plan(1e30, 1e-5, 1.0, 3)
    assert "i64" not in str(info.value)
    secure_plan(1e20, 1e-5, 1.0, 3)  # still calibrated where int64 suffices


def test_gaussian_epsilon_beyond_float64_is_refused_clearly():
    with pytest.raises(ValueError, match="larger sigma"):
        gaussian_epsilon(1.0, 1e-5, 1e300)
    with pytest.raises(ValueError, match="larger sigma"):
        gaussian_epsilon(1e-310, 1e-5, 1.0)
    assert gaussian_epsilon(1.0, 1e-5, 1e154) > 1e307


def test_gdp_epsilon_beyond_float64_is_refused_clearly():
    from pm_dpgp.accounting import gdp_epsilon

    with pytest.raises(ValueError, match="exceeds float64"):
        gdp_epsilon(1e160, 1e-5)
    assert gdp_epsilon(1e154, 1e-5) > 1e307
