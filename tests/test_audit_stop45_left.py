"""Stop 45: items noticed at earlier stops and left, fixed now.

* ``plan.cloaked`` / ``plan.prior_noise`` planned a release whose public offset
  ``μ + F (c − μ) W 1`` is not finite in float64 (prior mean far from ``y_bounds``), which the
  release itself refuses since stop 44 (``tests/test_audit_stop44_label_noise.py``); the plan
  now refuses it with the same message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.models import gp_regression


def _far_model():
    X = np.linspace(0.0, 5.0, 6)
    return gp_regression(
        X, np.full(6, 1.7e308), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.5, mean=-1.7e308
    )


@pytest.mark.parametrize("which", ["cloaked", "prior_noise"])
def test_a_plan_refuses_a_non_finite_public_offset_like_the_release(which):
    lower = 1.7e308
    bounds = (lower, float(np.nextafter(np.nextafter(lower, np.inf), np.inf)))
    planner = getattr(plan, which)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"public offset mu \+ F"):
            planner(
                _far_model(), np.linspace(0.0, 5.0, 3), epsilon=1.0, delta=1e-5, y_bounds=bounds
            )
        # an ordinary prior mean inside the bounds still plans
        ok = gp_regression(
            np.linspace(0.0, 5.0, 6), np.zeros(6), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.5
        )
        got = planner(ok, np.linspace(0.0, 5.0, 3), epsilon=1.0, delta=1e-5, y_bounds=(-1, 1))
    assert np.all(np.isfinite(got.noise_sd)) and np.all(got.noise_sd > 0)
