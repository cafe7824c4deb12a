"""``pm_dpgp.ConvergenceWarning``: a noise design stopped before its tolerance says so.

The design is computed from the public cloaking matrix, so the warning (and its text) must
depend on public information only: the same for two label vectors, and never quoting one.
A converged design does not warn.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pm_dpgp
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.mechanisms.label import cloaking_trace
from pm_dpgp.mechanisms.label.cloaking import solve_noise_covariance
from pm_dpgp.models import gp_regression


def test_exported_from_the_package() -> None:
    assert issubclass(pm_dpgp.ConvergenceWarning, UserWarning)
    assert issubclass(pm_dpgp.PrivacyWarning, UserWarning)
    assert not issubclass(pm_dpgp.ConvergenceWarning, pm_dpgp.PrivacyWarning)


@pytest.mark.parametrize("design", ["logdet", "trace"])
def test_early_stop_warns_and_a_converged_design_does_not(design: str) -> None:
    C = np.random.default_rng(8).standard_normal((10, 120))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = solve_noise_covariance(C, design=design)  # type: ignore[arg-type]
    assert full.converged
    with pytest.warns(pm_dpgp.ConvergenceWarning, match=f"{design} noise design") as rec:
        early = solve_noise_covariance(C, design=design, max_iter=1)  # type: ignore[arg-type]
    assert not early.converged
    assert f"{early.gap_bound:.3g}" in str(rec[0].message)
    assert rec[0].filename == __file__  # stacklevel: points at the caller


def test_release_warning_is_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``cloaked_release``: the trace design capped at 2 steps warns, with the same
    text for two different label vectors, and the text holds no label."""
    monkeypatch.setattr(cloaking_trace, "_MAX_STEPS", 2)
    X_star = np.linspace(0.0, 6.0, 40)
    messages = []
    X = np.sort(np.random.default_rng(3).uniform(0.0, 6.0, 60))
    for seed_y in (0, 1):
        y = np.random.default_rng(seed_y).uniform(-1.9, 1.9, 60)
        model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)
        with pytest.warns(pm_dpgp.ConvergenceWarning) as rec:
            release = cloaked_release(model, X_star, epsilon=1.0, delta=1e-5, y_bounds=(-2, 2),
                                      rng=np.random.default_rng(0), design="trace")  # fmt: skip
        assert release.metadata["solver_converged"] is False
        text = " ".join(str(w.message) for w in rec if w.category is pm_dpgp.ConvergenceWarning)
        messages.append(text)
    assert messages[0] == messages[1]
    assert "solve_noise_covariance" in messages[0]


def test_the_batched_solver_warns_too() -> None:
    """Stop-31 review: ``solve_noise_covariances`` (the CV-SSE selection's default) returned
    unconverged designs silently while the serial solver warned."""
    from pm_dpgp.mechanisms.label.cloaking_batch import solve_noise_covariances

    Cs = [np.random.default_rng(s).standard_normal((10, 120)) for s in (8, 9)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(r.converged for r in solve_noise_covariances(Cs))
    with pytest.warns(pm_dpgp.ConvergenceWarning, match="2 of 2 logdet noise designs") as rec:
        early = solve_noise_covariances(Cs, max_iter=1)
    assert not any(r.converged for r in early)
    assert len(rec) == 1 and "larger tol" in str(rec[0].message)
