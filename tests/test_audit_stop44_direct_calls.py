"""Stop-44 audit: public selection helpers called directly with private values.

``coinpress_mean`` and ``cv_sse_utilities`` converted their private input with NumPy,
whose error message quotes the offending entry; ``cv_sse_utilities`` also read a longer
``y`` by its first entries.
"""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.models import gp_regression
from pm_dpgp.selection import coinpress_mean, cv_sse_utilities, plan_cv_sse

SECRET = "417.25secret"


def test_coinpress_mean_never_quotes_a_text_value():
    with pytest.raises(TypeError) as info:
        coinpress_mean([1.0, SECRET, 2.0], lower=0.0, upper=10.0, rho=0.5)
    assert "417" not in str(info.value)
    assert info.value.__context__ is None or "417" not in str(info.value.__context__)


@pytest.fixture(scope="module")
def plan():
    import pymc as pm

    X = np.linspace(0.0, 10.0, 12)[:, None]
    y = np.sin(X[:, 0])
    gpr = gp_regression(X, y, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)), noise_sd=0.3)
    folds = [np.arange(0, 6), np.arange(6, 12)]
    return plan_cv_sse(
        gpr,
        [{"ell": 1.0}, {"ell": 3.0}],
        folds,
        y_bounds=(-1.5, 1.5),
        release_epsilon=1.0,
        release_delta=1e-5,
    )


def test_cv_sse_utilities_never_quotes_a_text_label(plan):
    y = [0.1] * 11 + [SECRET]
    with pytest.raises(TypeError) as info:
        cv_sse_utilities(plan, y)
    assert "417" not in str(info.value)


@pytest.mark.parametrize("n", [11, 13])
def test_cv_sse_utilities_refuses_a_y_of_another_length(plan, n):
    with pytest.raises(ValueError, match="12"):
        cv_sse_utilities(plan, np.zeros(n))
    assert np.all(np.isfinite(cv_sse_utilities(plan, np.zeros(12))))
