"""Audit (sample-path selection, Q4 and Q3): does a bad input spend budget or draw randomness,
and do error messages reveal private values?

For each bad input: a fresh renyi ledger and a Generator; we record whether the call raised, the
exception type and message, whether the ledger recorded a spend, whether the Generator state moved
and whether a private marker value appears in the message.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression
from pm_dpgp.selection import product_grid, select_by_sample_paths
from pm_dpgp.selection.liu_talwar import select_by_random_stopping

warnings.simplefilter("ignore")
N = 288
rng0 = np.random.default_rng(0)
X = rng0.uniform(0, 10, (N, 1))
y = np.clip(np.sin(X[:, 0]) + 0.5 * rng0.standard_normal(N), -2, 2)
MODEL = gp_regression(
    X,
    y,
    lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
    noise_sd=lambda: pm.HalfNormal("noise", 20.0),
)
GRID = product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]})
OPTS = dict(
    X_star=np.linspace(0, 10, 21)[:, None],
    domain=(0, 10),
    y_bounds=(-2.0, 2.0),
    epsilon=1.0,
    delta=1e-4,
)
SECRET = 7.123456789  # a private marker value planted in the data

Xs, ys = X.copy(), y.copy()
ys[3] = SECRET
Xl = [[v] for v in X[:, 0]]
CASES = {
    "n_steps=0": dict(opts=dict(n_steps=0)),
    "n_steps=2.5": dict(opts=dict(n_steps=2.5)),
    "spread=0": dict(opts=dict(spread=0.0)),
    "spread=-1": dict(opts=dict(spread=-1.0)),
    "spread=nan": dict(opts=dict(spread=float("nan"))),
    "kernel_class='exponential_1d' (ExpQuad)": dict(opts=dict(kernel_class="exponential_1d")),
    "kernel_class='foo'": dict(opts=dict(kernel_class="foo")),
    "kernel_scale=1 (< amplitude 5), kappa=0 given": dict(opts=dict(kernel_scale=1.0, kappa=0.0)),
    "kernel_scale=1 (< amplitude 5), kappa=None": dict(opts=dict(kernel_scale=1.0)),
    "kernel_class='constant' (ExpQuad), kappa=0": dict(
        opts=dict(kernel_class="constant", kappa=0.0)
    ),
    "X list with 3 columns": dict(data=([[v, v, v] for v in X[:, 0]], ys)),
    "X ragged list": dict(data=([[v] if i else [v, v] for i, v in enumerate(X[:, 0])], ys)),
    "X object array with a string": dict(
        data=(np.array([[f"{SECRET}x"]] + [[float(v)] for v in X[1:, 0]], dtype=object), ys)
    ),
    "y list with a string": dict(data=(X, [f"{SECRET}x"] + list(y[1:]))),
    "y list of lists (n, 2)": dict(data=(X, [[v, v] for v in y])),
    "gamma=0": dict(opts=dict(gamma=0.0)),
    "validation out of range": dict(opts=dict(validation=[N])),
    "eta=-1": dict(opts=dict(eta=-1.0)),
    "kappa=2": dict(opts=dict(kappa=2.0)),
    "delta=0": dict(opts=dict(delta=0.0)),
    "y_bounds nan": dict(opts=dict(y_bounds=(float("nan"), 2.0))),
    "X_star with nan": dict(opts=dict(X_star=np.array([[np.nan]]))),
}


def probe(fn, model, grid, data, opts, ledger_filter="renyi"):
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter=ledger_filter)
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    try:
        fn(model, grid, data, ledger=ledger, rng=rng, **opts)
        outcome, msg = "no error", ""
    except Exception as err:  # noqa: BLE001
        outcome = type(err).__name__
        msg = str(err)
        if err.__cause__ is not None:
            msg += " | cause: " + str(err.__cause__)
    spent = len(ledger.history) > 0
    drawn = rng.bit_generator.state != state
    leak = f"{SECRET}" in msg
    return outcome, spent, drawn, leak, msg


def main():
    rows = []
    for name, case in CASES.items():
        opts = dict(OPTS, **case.get("opts", {}))
        out = probe(select_by_sample_paths, MODEL, GRID, case.get("data", (Xs, ys)), opts)
        rows.append((name, *out))
        flag = "DEFECT" if out[0] != "no error" and (out[1] or out[2] or out[3]) else "ok"
        if out[0] == "no error":
            flag = "accepted"
        print(
            f"[{flag:8s}] {name}: {out[0]}; spent={out[1]} drawn={out[2]} "
            f"secret-in-message={out[3]}\n           {out[4][:230]}"
        )
    return rows


if __name__ == "__main__":
    main()


def liu_talwar_cases():
    """The same post-spend refusals in the refactored select_by_random_stopping (shared code)."""
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

    r = np.random.default_rng(0)
    Xs_ = r.uniform(-3, 3, (300, 1))
    ys_ = np.sin(2 * Xs_[:, 0]) + 0.3 * r.standard_normal(300)
    sparse = sparse_gp_regression(
        Xs_,
        ys_,
        lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
        Z=grid_inducing_points(-3.5, 3.5, 10),
        sigma=lambda: pm.HalfNormal("sigma", 1.0),
    )
    grid = product_grid({"ell": [0.3, 1.0], "sigma": [0.3]})
    base = dict(epsilon=1.0, delta=1e-5, y_bounds=(-2.0, 2.0), gamma=0.5)
    yl = [f"{SECRET}x"] + list(ys_[1:])
    for name, data, extra in [
        ("n_steps=0", (Xs_, ys_), dict(n_steps=0)),
        ("spread=-1", (Xs_, ys_), dict(spread=-1.0)),
        ("y list with a string", (Xs_, yl), {}),
        ("y list of lists (n, 2)", (Xs_, [[v, v] for v in ys_]), {}),
    ]:
        out = probe(select_by_random_stopping, sparse, grid, data, dict(base, **extra))
        print(
            f"[liu_talwar] {name}: {out[0]}; spent={out[1]} drawn={out[2]} "
            f"secret-in-message={out[3]}  {out[4][:120]}"
        )


def one_record_in_both_parts():
    """(Before the fix) y given as a list of n pairs passed check_data_shapes (len(y) == n,
    no .shape) and was ravelled to 2n values: record j's two entries land at rows 2j and
    2j + 1, and with the default split (every 5th row validates) record 2 is at row 4
    (training) and row 5 (validation).  The charged event assumes each record is in D1 or
    D2, one row."""
    from pm_dpgp.selection.private_data import as_private_arrays, public_split

    n = 20
    Xr = np.arange(n, dtype=float)[:, None]
    yr = [[10.0 * j, 10.0 * j + 1] for j in range(n)]
    try:
        _, ya = as_private_arrays(Xr, yr)
    except ValueError as err:  # after the fix (check_data_schema refuses it before the spend)
        print(f"y as {n} pairs: refused ({err})")
        return
    train, val = public_split(n, None)
    owner = lambda v: int(v // 10)  # noqa: E731 - which record a value came from
    both = sorted({owner(v) for v in ya[train]} & {owner(v) for v in ya[val]})
    print(
        f"y as {n} pairs: ya has {ya.size} values; records in both D1 and D2: {both}; "
        f"training rows of record 0: {[int(i) for i in train if owner(ya[i]) == 0]}"
    )


if __name__ == "__main__":
    liu_talwar_cases()
    one_record_in_both_parts()
