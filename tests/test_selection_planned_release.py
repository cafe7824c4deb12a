"""A cloaked release warns when its setting is not the one its hyperparameters were selected for.

Smith et al. (2021, Alg. 1) score each configuration by the cross-validated error of the
release *with its noise* at ``(release_epsilon, release_delta)``; a release at another ε, δ,
clipping range or calibration uses a choice made for other noise.  Until stop 40 nothing said
so.  The release stays private (the warning comes before the spend and names public values).
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression
from pm_dpgp.models.hyperparameters import PublicHyperparameters, warn_if_not_planned
from pm_dpgp.selection import product_grid, select_by_cross_validated_sse

BOUNDS = (-1.5, 1.5)


@pytest.fixture(scope="module")
def selected():
    X = np.linspace(0, 10, 40)[:, None]
    gpr = gp_regression(
        X, np.sin(X[:, 0]), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)), noise_sd=0.3
    )
    res = select_by_cross_validated_sse(
        gpr, product_grid({"ell": [0.5, 2.0, 8.0]}), epsilon=0.5, y_bounds=BOUNDS, ledger=None,
        release_epsilon=1.0, release_delta=1e-5, calibration="classic",
        rng=np.random.default_rng(0),
    )  # fmt: skip
    return gpr, X, res


def test_the_selection_records_the_release_it_planned_for(selected):
    _, _, res = selected
    hp = res.public_hyperparameters()
    assert hp.planned_release == {
        "epsilon": 1.0,
        "delta": 1e-5,
        "y_bounds": BOUNDS,
        "calibration": "classic",
    }
    assert res.public_details["release_calibration_in_utility"] == "classic"
    assert "planned_release" in repr(hp)


def test_the_planned_release_gives_no_warning(selected):
    gpr, X, res = selected
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor's, not ours
        cloaked_release(gpr, X[:3], epsilon=1.0, delta=1e-5, y_bounds=[-1.5, 1.5],
                        calibration="classic", hyperparameters=res.public_hyperparameters(),
                        rng=np.random.default_rng(1))  # fmt: skip


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"epsilon": 0.25}, "epsilon 1.0 (selection) vs 0.25"),
        ({"delta": 1e-6}, "delta 1e-05 (selection) vs 1e-06"),
        ({"y_bounds": (-1.5, 2.0)}, "y_bounds (-1.5, 1.5) (selection) vs (-1.5, 2.0)"),
        ({"calibration": "analytic"}, "calibration 'classic' (selection) vs 'analytic'"),
    ],
)
def test_another_setting_warns_before_the_spend(selected, change, named):
    gpr, X, res = selected
    kw = {"epsilon": 1.0, "delta": 1e-5, "y_bounds": BOUNDS, "calibration": "classic"} | change
    ledger = Ledger(10.0, 1e-3)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    with warnings.catch_warnings():  # raised as an error: nothing may be spent or drawn yet
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*BLAS.*")
        with pytest.raises(UserWarning, match="another setting"):
            cloaked_release(gpr, X[:3], **kw, hyperparameters=res.public_hyperparameters(),
                            ledger=ledger, rng=rng)  # fmt: skip
    assert ledger.history == [] and rng.bit_generator.state == state
    with pytest.warns(UserWarning, match=r"selected for a release with another setting") as rec:
        cloaked_release(gpr, X[:3], **kw, hyperparameters=res.public_hyperparameters(),
                        ledger=ledger, rng=np.random.default_rng(1))  # fmt: skip
    text = " ".join(str(w.message) for w in rec)
    assert named in text
    assert len(ledger.history) == 1  # the release itself goes ahead, charged once


def test_no_planned_setting_means_no_comparison():
    """A plain mapping, a declared-public fit or a noise-free-utility selection plans nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_not_planned({"ell": 1.0}, epsilon=0.1)
        warn_if_not_planned(PublicHyperparameters({"ell": 1.0}, "dict"), epsilon=0.1)
        planned = PublicHyperparameters({"ell": 1.0}, "sel", {"epsilon": 1.0, "delta": None})
        warn_if_not_planned(planned, epsilon=1.0 + 1e-15, delta=1e-3)  # round-off only
