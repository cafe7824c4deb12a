"""Kill tests for check_public_choices mutants
(stop-34 mutation testing of the audit tools: 64 mutants, 35 survived the whole suite)."""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.audit import DataDerivedChoiceError, check_public_choices
from pm_dpgp.models.sparse import InducingFromDataError

rng = np.random.default_rng(0)
X = rng.uniform(0, 10, (40, 1))
y = np.sin(X[:, 0])


def test_inducing_inputs_copied_with_round_off_are_caught():  # P03
    """docstring of DEFAULT_Z_RTOL: 1e-9 catches copies with round-off (X[:5] + 1e-12)."""
    with pytest.raises(InducingFromDataError):
        check_public_choices(X, y, Z=X[:5] + 1e-12)
    check_public_choices(X, y, Z=np.linspace(0.0, 10.0, 7)[:, None] + 1e-3 * np.pi)


def test_holdout_pair_equal_to_a_training_pair_is_caught():  # P04
    with pytest.raises(DataDerivedChoiceError):
        check_public_choices(X, y, holdout=(X[:3], y[:3]))
    check_public_choices(X, y, holdout=(X[:3] + 0.5, y[:3]))


def test_bounds_nudged_by_a_tiny_amount_are_caught():  # P05
    with pytest.raises(DataDerivedChoiceError):
        check_public_choices(X, y, y_bounds=(float(y.min()) - 1e-9, 5.0))
    with pytest.raises(DataDerivedChoiceError):
        check_public_choices(X, y, y_bounds=(-5.0, float(y.max()) + 1e-9))
