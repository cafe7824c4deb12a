"""Audit: error paths of select_by_random_stopping (full privacy: X and y private).

For each bad-but-private dataset, report whether the call raised, whether the ledger was
charged first, and whether the error message contains a private value.
"""

import sys
import warnings

import numpy as np

sys.path.insert(0, ".")
from pm_dpgp.accounting import Ledger  # noqa: E402
from pm_dpgp.selection import select_by_random_stopping  # noqa: E402
from tests.test_liu_talwar import GRID, _sparse_model  # noqa: E402

warnings.simplefilter("ignore")
model = _sparse_model(60)
rng0 = np.random.default_rng(1)
X = rng0.uniform(-3, 3, (60, 1))
y = np.sin(X[:, 0])
SECRET = 123.456789
cases = {}
Xn = X.copy()
Xn[0, 0] = np.nan  # validation row 0 (every 5th row is validation)
cases["NaN input in a validation row"] = (Xn, y)
Xt = X.copy()
Xt[1, 0] = np.nan
cases["NaN input in a training row"] = (Xt, y)
Xb = X.copy()
Xb[0, 0] = 1e308
cases["huge input 1e308 in a validation row"] = (Xb, y)
Xi = X.copy()
Xi[0, 0] = np.inf
cases["inf input in a validation row"] = (Xi, y)
Xs = X.copy()
Xs[0, 0] = SECRET
cases["secret-valued input (control)"] = (Xs, y)
ys = y.copy()
ys[0] = np.nan
cases["NaN response"] = (X, ys)
cases["y shorter than X (public shape)"] = (X, y[:-1])
cases["X with 2 columns (public shape)"] = (np.hstack([X, X]), y)
cases["y 2-D column (public shape)"] = (X, y[:, None])
for OWNER, (name, data) in [(o, c) for o in (False, True) for c in cases.items()]:
    led = Ledger(epsilon=1e6, delta=1e-3, filter="renyi")
    try:
        res = select_by_random_stopping(
            model,
            GRID,
            data,
            epsilon=1.0,
            delta=1e-5,
            y_bounds=(-2.0, 2.0),
            ledger=led,
            gamma=0.5,
            rng=np.random.default_rng(5),
            owner_scores=OWNER,
        )
        out = f"ok, index={res.index}, outcome={res.public_details['outcome']}"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        leak = any(s in msg for s in ["nan", "inf", "1e+308", "123.45", "1e308"])
        out = f"{type(e).__name__}: {msg[:150]!r} (value in message: {leak})"
    print(f"owner={OWNER!s:5s} {name:40s} charged_before={len(led.history) > 0}  -> {out}")
