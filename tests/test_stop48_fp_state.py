"""Stop 48: no floating-point error state depends on the private labels.

Under ``np.seterr(all="raise")`` a label within ``1e-308`` of the centre of ``y_bounds`` made a
product (cloaking's whitened mean, ``W (y − c)``) or a quotient (the binned release's
``(y − c)/d``) underflow, and the release raised ``FloatingPointError`` before its spend for that
dataset and not for its neighbour: the failure itself said that some label sat at the centre.
The stop-42 audit fixed the same for the noise-aware statistics (``_chunk_pack``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import binned_release, cloaked_release, make_bins, prior_noise_release
from pm_dpgp.models import gp_regression

X = np.linspace(0.0, 1.0, 20)[:, None]


def _labels(tiny: float) -> np.ndarray:
    y = 0.5 * np.sin(3.0 * X[:, 0])
    y[0], y[1] = tiny, -tiny  # the centre of y_bounds (-1, 1) is 0
    return y


def _label_gaussian(mechanism):
    """A cloaked or prior-noise release of an exact GP of the labels at five public inputs."""

    def release(y, rng, ledger):
        model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
        return mechanism(
            model, X[:5], epsilon=1.0, delta=1e-6, y_bounds=(-1, 1), bounds_are_public=True,
            ledger=ledger, rng=rng,
        )  # fmt: skip

    return release


_cloaked = _label_gaussian(cloaked_release)
_prior_noise = _label_gaussian(prior_noise_release)


def _binned(y, rng, ledger):
    return binned_release(
        X, y, make_bins(np.linspace(0.0, 1.0, 5)), epsilon=1.0, y_bounds=(-1, 1),
        bounds_are_public=True, ledger=ledger, rng=rng,
    )  # fmt: skip


@pytest.mark.parametrize("release", [_cloaked, _prior_noise, _binned])
@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("tiny", [1e-310, 5e-324])
def test_a_label_at_the_centre_raises_no_floating_point_error(release, secure, tiny) -> None:
    outcomes = []
    for y in (_labels(0.0), _labels(tiny)):
        ledger = Ledger(epsilon=10.0, delta=1e-5)
        old = np.seterr(all="raise")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                release(y, None if secure else np.random.default_rng(0), ledger)
        finally:
            np.seterr(**old)
        outcomes.append(ledger.spent_epsilon)
    assert outcomes[0] == outcomes[1] > 0.0
