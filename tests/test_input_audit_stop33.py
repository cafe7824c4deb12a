"""Stop-33 bad-input checks: a kernel amplitude whose square is not a normal float64.

``kernel_scale = 1e300`` raised Python's ``OverflowError`` from ``kernel_scale**2`` inside
``sample_path_release`` (and the planners); ``1e-200`` squared to zero.  Every entry point now
refuses both with a ``ValueError`` naming the argument, before any spend or draw.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp._validation import check_scale
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.sample_path import sample_path_release
from pm_dpgp.workflow import dp_thompson_sampling
from tests.test_sample_path_release import KW, _model

BAD = [1e300, 1e160, 1e-160, 1e-300]


@pytest.mark.parametrize("scale", BAD)
def test_sample_path_release_refuses_an_unsquarable_kernel_scale(scale):
    ledger = Ledger(epsilon=1e9, delta=1e-5)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    kw = dict(KW, kernel_scale=scale)
    with pytest.raises(ValueError, match="kernel_scale must be a number between"):
        sample_path_release(_model(), [[0.1]], rng=rng, ledger=ledger, **kw)
    assert ledger.history == [] and rng.bit_generator.state == state


@pytest.mark.parametrize("scale", BAD)
def test_planners_and_the_loop_refuse_an_unsquarable_kernel_scale(scale):
    with pytest.raises(ValueError, match="kernel_scale must be a number between"):
        plan.sample_path(
            20, kernel_scale=scale, y_bounds=(-1, 1), delta=1e-5, epsilon=1.0, kappa=0.0
        )
    with pytest.raises(ValueError, match="kernel_scale must be a number between"):
        plan.thompson(3, 5, epsilon=3.0, delta=1e-5, kernel_scale=scale, kappa=0.0)
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="kernel_scale must be"):
        warnings.simplefilter("ignore")
        dp_thompson_sampling(
            lambda X: np.sin(X[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0.0, 1.0),
            X_init=[[0.2], [0.8]], n_rounds=2, noise_sd=0.5, kernel_scale=scale,
            ledger=ledger, rng=np.random.default_rng(0), progressbar=False,
        )  # fmt: skip
    assert ledger.history == []


def test_check_scale_accepts_the_representable_range():
    assert check_scale(1e150, "s") == 1e150 and check_scale(1e-150, "s") == 1e-150
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        check_scale(-1.0, "s")
