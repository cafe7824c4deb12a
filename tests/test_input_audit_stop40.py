"""Stop-40 input audit: 0-d NumPy arrays as scalar arguments.

``np.array(True)`` and ``np.array("1.0")`` are not ``bool`` or ``str`` instances, so the
stop-39 refusal of booleans and text let them through ``float(...)``: ``epsilon=np.array(True)``
was charged as ε = 1 and ``epsilon=np.array("1.0")`` as 1.0.  A 0-d array is now judged by its
element everywhere a scalar is checked, and a 0-d array holding a number is accepted where it
was refused (``rank_tol=np.array(1e-4)``).  Public counts (tree horizon, partition levels,
solver iterations) refuse ``np.True_`` and ``None`` with a ``ValueError`` instead of counting
them as 1 or raising ``TypeError``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.mechanisms.full.noise_aware import check_rho
from pm_dpgp.mechanisms.full.sqrt_counter import sqrt_factor_coefficients
from pm_dpgp.mechanisms.label.truncation import check_rank_tol
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures


def _model():
    X = np.linspace(0, 1, 20)
    return gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array(True), "boolean"),
        (np.array("1.0"), "got text"),
        (np.array(b"1.0"), "got text"),
        (np.array("1.0", dtype=object), "got text"),
    ],
)
def test_a_zero_d_boolean_or_text_array_is_not_a_privacy_parameter(value, match):
    """Was: charged as ε = 1.0 (``float(np.array(True))``, ``float(np.array("1.0"))``)."""
    ledger = Ledger(10.0, 1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    for kw in ({"epsilon": value, "delta": 1e-3}, {"epsilon": 1.0, "delta": value}):
        with pytest.raises(ValueError, match=match):
            cloaked_release(_model(), [[0.5]], **kw, y_bounds=(-2, 2), ledger=ledger, rng=rng)
        with pytest.raises(ValueError, match=match):
            Ledger(**kw)
    assert ledger.history == [] and rng.bit_generator.state == state


def test_a_zero_d_number_array_is_a_number_everywhere():
    """``check_epsilon`` accepted ``np.array(1.0)`` but ``check_rank_tol`` refused
    ``np.array(1e-4)`` ("must be a finite number"): one rule for every scalar now."""
    assert check_rank_tol(np.array(1e-4)) == 1e-4
    assert check_rho(np.array(0.01)) == 0.01
    release = cloaked_release(
        _model(), [[0.5]], epsilon=np.array(1.0), delta=np.array(1e-3), y_bounds=(-2, 2),
        rank_tol=np.array(1e-4), rng=np.random.default_rng(0),
    )  # fmt: skip
    assert release.metadata["epsilon_per_draw"] == 1.0 and release.metadata["rank_tol"] == 1e-4


@pytest.mark.parametrize("value", [np.array(True), np.array("0.01"), "0.01", True])
def test_rho_refuses_booleans_and_text(value):
    """The Dirichlet release and its plan parsed ``rho`` with ``float(rho)``: ``"0.01"`` passed."""
    with pytest.raises(ValueError, match="boolean|got text"):
        check_rho(value)


@pytest.mark.parametrize("value", [np.float64(np.inf), np.array([0.01]), None, 1.5, 0.0])
def test_rho_outside_the_open_unit_interval_says_what_to_pass(value):
    with pytest.raises(ValueError, match=r"rho must lie in \(0, 1\).*pass e.g. rho=0.01"):
        check_rho(value)


@pytest.mark.parametrize("value", [np.True_, np.array(True), None, "3", 2.5, 0])
def test_public_counts_refuse_booleans_none_and_text(value):
    """``np.True_`` (not a ``bool`` instance) was a horizon / level count of 1; ``None`` raised
    ``TypeError`` from ``int(None)``."""
    with pytest.raises(ValueError, match="positive integer"):
        sqrt_factor_coefficients(value)
    with pytest.raises(ValueError, match="positive integer"):
        DyadicPartitionFeatures(0.0, 1.0, levels=value)
