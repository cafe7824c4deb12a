"""How far apart the D-optimal support and the other columns are (issue 13, docs/cloaking.md §6).

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/design_complementarity.py`` from the repository
root.  It builds the 2-D problem of ``bench_cloaked_release.py`` (``n = 3,000`` training inputs,
``m = 5,041`` grid test inputs, seed 0), runs one cloaked release and captures the whitened
columns ``Bt`` (``n × k``) that reach the design solver, then prints, at the solver's optimum
(weights ``λ = k u``, so ``Σλ = k``; slacks ``z_i = 1 − g_i(u)/k``):

* the distribution of the support weights and of the other columns' slacks (strict
  complementarity and its margin);
* for ``μ`` = 1e-5 (the rounds' tolerance), 1e-6 and 1e-8, how many non-support columns still
  look like support columns on the central path (``λ_i z_i ≈ μ`` gives ``λ_i > z_i`` while
  ``z_i < √μ``), and how many support columns look inactive (``λ_i < √μ``);
* ``_solve_design`` with the public ``tol`` from 1e-9 to 1e-2: steps, support and the relative
  difference of ``A(u)`` from the default's (the interior-point path solves to its own
  tolerance whatever ``tol`` is, so a looser ``tol`` saves nothing).

This is a measurement of the problem, not of a release: nothing here is private output.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cloaked_release import problem, release  # noqa: E402

from pm_dpgp.mechanisms.label import cloaking  # noqa: E402

QUANTILES = (0.0, 0.01, 0.1, 0.5, 0.9, 1.0)
#: the public ``tol`` values tried; the first is the default of ``solve_noise_covariance``
TOLS = (1e-9, 1e-6, 1e-4, 1e-3, 1e-2)


def capture_columns(n: int = 3000, m: int = 5041, d: int = 2) -> np.ndarray:
    """The whitened columns ``Bt`` the design solver receives in one cloaked release."""
    captured: list[np.ndarray] = []
    solve = cloaking._solve_design

    def recording(Bt: np.ndarray, tol: float, max_iter: int):
        captured.append(Bt.copy())
        return solve(Bt, tol, max_iter)

    X, y, X_star = problem(n, m, d)
    cloaking._solve_design = recording
    try:
        release(X, y, X_star)
    finally:
        cloaking._solve_design = solve
    return captured[-1]


def main() -> None:
    Bt = capture_columns()
    n, k = Bt.shape
    runs = {}  # tol -> (u, steps, converged, CPU seconds); 1e-9 is the default
    for tol in TOLS:
        t0 = time.process_time()
        u, steps, converged = cloaking._solve_design(Bt, tol, 100_000)
        runs[tol] = (u, steps, converged, time.process_time() - t0)
    u, steps, converged, _ = runs[TOLS[0]]
    lam = k * u
    g, L = cloaking._gains(Bt, lam)  # g_i = b_iᵀ A(λ)⁻¹ b_i, A(λ) = L Lᵀ
    A_opt = L @ L.T
    support = lam > 0.0
    slack = 1.0 - g
    print(
        f"n = {n:,} columns, k = {k}, support {int(support.sum())}, steps {steps}, "
        f"converged {converged}, max |g - 1| on the support {np.abs(slack[support]).max():.1e}"
    )
    print(
        "support weights λ (Σλ = k), quantiles",
        QUANTILES,
        ":",
        np.array2string(np.quantile(lam[support], QUANTILES), precision=2),
    )
    other = slack[~support]
    print(
        f"slacks z of the {other.size:,} other columns, quantiles",
        QUANTILES,
        ":",
        np.array2string(np.quantile(other, QUANTILES), precision=2),
    )
    for t in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5):
        print(
            f"  columns with g > 1 - {t:g}: {int((slack < t).sum()):5,} "
            f"({int((other < t).sum()):,} outside the support)"
        )
    for mu in (1e-5, 1e-6, 1e-8):
        root = np.sqrt(mu)
        print(
            f"mu = {mu:g}: {int((other < root).sum()):4,} non-support columns with z < sqrt(mu), "
            f"{int((lam[support] < root).sum())} support columns with λ < sqrt(mu)"
        )
    for tol, (u_t, steps_t, _, cpu) in runs.items():
        L_t = cloaking._gains(Bt, k * u_t)[1]
        diff = np.abs(L_t @ L_t.T - A_opt).max() / np.abs(A_opt).max()
        print(
            f"tol {tol:g}: {steps_t} steps, support {int((u_t > 0).sum())}, "
            f"A(u) relative difference {diff:.1e}, CPU {cpu:.2f} s"
        )


if __name__ == "__main__":
    main()
