"""Conditioning-based tolerances (tests/tolerances.py) accept round-off and reject errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from tests.tolerances import (
    EPS,
    assert_normwise_close,
    cond_rtol,
    condition_number,
    scalar_rtol,
)


def _spd(n: int, kappa: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * np.geomspace(1.0, 1.0 / kappa, n)) @ Q.T


@pytest.mark.parametrize("kappa", [1e2, 1e6, 1e10])
def test_two_backward_stable_solves_agree_within_cond_rtol(kappa) -> None:
    A = _spd(40, kappa, 0)
    b = np.random.default_rng(1).standard_normal(40)
    x_chol = sla.cho_solve(sla.cho_factor(A, lower=True), b)
    x_lu = np.linalg.solve(A, b)
    tol = cond_rtol(A)
    assert condition_number(A) == pytest.approx(kappa, rel=1e-3)
    assert_normwise_close(x_chol, x_lu, tol)
    # a deliberately wrong answer (one entry moved by 10 tolerances) fails
    wrong = x_lu.copy()
    wrong[0] += 10 * tol * np.linalg.norm(x_lu)
    with pytest.raises(AssertionError):
        assert_normwise_close(wrong, x_lu, tol)


def test_cond_rtol_refuses_vacuous_tolerances() -> None:
    with pytest.raises(AssertionError, match="ill-conditioned"):
        cond_rtol(_spd(30, 1e15, 0))
    with pytest.raises(ValueError):
        cond_rtol(1e3)
    assert cond_rtol(1e3, 10) == pytest.approx(4 * 10 * 1e3 * EPS)


def test_scalar_rtol_and_shape_check() -> None:
    assert scalar_rtol(10) == pytest.approx(40 * EPS)
    with pytest.raises(AssertionError, match="shape"):
        assert_normwise_close(np.zeros(3), np.zeros(4), 1.0)


def test_summation_atol_accepts_reordering_and_rejects_a_lost_term() -> None:
    from tests.tolerances import summation_atol

    t = np.random.default_rng(0).uniform(-1.0, 1.0, 100_000)
    forward = float(np.sum(t))
    blocked = float(sum(np.sum(t[i : i + 777]) for i in range(0, t.size, 777)))
    serial = 0.0
    for v in t[::-1]:
        serial += float(v)
    tol = summation_atol(t.size, 1.0)
    assert abs(blocked - forward) <= tol and abs(serial - forward) <= tol
    # a term counted twice, or dropped, is far outside
    assert abs((forward + t[5]) - forward) > tol


def test_design_rtol_accepts_two_certified_optima_and_rejects_an_unconverged_one() -> None:
    """Two certified solutions of the same design problem agree within ``design_rtol``; the
    covariance of a design stopped early (gap 1e-2) does not."""
    from pm_dpgp import ConvergenceWarning
    from pm_dpgp.mechanisms.label.cloaking import solve_noise_covariance
    from tests.tolerances import design_rtol, normwise_error

    rng = np.random.default_rng(3)
    C = rng.standard_normal((6, 40))
    a = solve_noise_covariance(C, tol=1e-9)
    b = solve_noise_covariance(C[:, ::-1], tol=1e-6)  # same columns, another order and tol
    kappa = np.linalg.cond(a.M_k)  # C is well conditioned: whitening changes κ little
    rtol = design_rtol(max(a.gap_bound, b.gap_bound), kappa, a.rank)
    assert_normwise_close(b.M_k, a.M_k, rtol, "two certified optima")
    with pytest.warns(ConvergenceWarning):
        early = solve_noise_covariance(C, tol=1e-1, max_iter=1)
    assert early.gap_bound > 1e-4
    assert normwise_error(early.M_k, a.M_k) > design_rtol(a.gap_bound, kappa, a.rank)


def test_projected_map_rtol_covers_a_perturbation_and_rejects_a_larger_one() -> None:
    """Wedin's bound for ``U_k U_kᵀ C``: a perturbation of size ρ stays within the tolerance, the
    same tolerance rejects a map moved by 10³ times it, and a gap the perturbation can close
    gives no bound."""
    from tests.tolerances import projected_map_rtol

    rng = np.random.default_rng(3)
    U, _ = np.linalg.qr(rng.standard_normal((20, 20)))
    V, _ = np.linalg.qr(rng.standard_normal((80, 20)))
    s = np.geomspace(1.0, 1e-6, 20)
    s[12:] *= 1e-6  # numerical rank 12 at a cut of 1e-8
    C = (U * s) @ V.T

    def cut(A: np.ndarray, k: int) -> np.ndarray:
        Uk = np.linalg.svd(A, full_matrices=False)[0][:, :k]
        return Uk @ (Uk.T @ A)

    E = rng.standard_normal(C.shape)
    E *= 1e-12 * np.linalg.norm(C) / np.linalg.norm(E)
    tol = projected_map_rtol(1e-12, s, 12)
    assert_normwise_close(cut(C + E, 12), cut(C, 12), tol)
    with pytest.raises(AssertionError):
        assert_normwise_close(cut(C, 12) * (1.0 + 1e3 * tol), cut(C, 12), tol)
    assert projected_map_rtol(1.0, s, 12) == float("inf")
