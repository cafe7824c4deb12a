"""Audit (sample-path selection, Q3): does the returned SelectionResult leak private values
through its public forms (to_metadata/JSON, pickle, repr, copy, dataclasses.asdict)?

Private values: every y, every X entry, every run's DP score except the published winner's, the
owner's non-private scores, K.  Numbers are compared after a JSON round trip (relative 1e-9),
the pickle and repr are scanned for the float64 bytes and for repr strings.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import copy
import dataclasses
import json
import pickle
import warnings

import numpy as np
import pymc as pm

from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression
from pm_dpgp.selection import product_grid, select_hyperparameters

warnings.simplefilter("ignore")


def numbers(obj):
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in numbers(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in numbers(v)]
    if isinstance(obj, float | int) and not isinstance(obj, bool):
        return [float(obj)]
    return []


def main():
    N = 288
    r = np.random.default_rng(9)
    X = r.uniform(0, 10, (N, 1)) + 1e-7 * np.pi  # values unlikely to coincide with public ones
    y = np.clip(np.sin(X[:, 0]) + 0.5 * r.standard_normal(N), -2, 2)
    model = gp_regression(
        X,
        y,
        lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )
    grid = product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]})
    ledger = Ledger(epsilon=10.0, delta=1e-3, filter="renyi")
    res = select_hyperparameters(
        model,
        grid,
        ledger=ledger,
        method="sample_path",
        X_star=np.linspace(0, 10, 21)[:, None],
        domain=(0, 10),
        y_bounds=(-2.0, 2.0),
        epsilon=1.0,
        delta=1e-4,
        gamma=0.15,
        rng=np.random.default_rng(2),
    )
    owner = res.owner_report()
    winner = res.public_details["dp_mean_validation_loglik"]
    run_scores = [s for _, s in owner["runs"] if s != winner]
    private = np.concatenate(
        [y, X.ravel(), run_scores, owner["validation_scores"], owner["predictive_scores"]]
    )
    private = private[np.abs(private) != 2.0]  # clipped responses equal the public bound
    print(f"K = {owner['n_runs']} runs; winner score {winner}; {len(run_scores)} other run scores")
    meta = json.loads(json.dumps(res.to_metadata()))
    nums = np.array(numbers(meta))
    hits = [v for v in private if np.any(np.isclose(nums, v, rtol=1e-9, atol=0))]
    print("metadata keys:", sorted(meta))
    print("private numbers in JSON metadata:", hits)
    assert not hits and "runs" not in meta and "n_runs" not in meta
    blob = pickle.dumps(res)
    rep = repr(res)
    bad = [v for v in private if np.array(v, "<f8").tobytes() in blob or repr(float(v)) in rep]
    print("private numbers in pickle/repr:", bad, f"(pickle {len(blob)} bytes)")
    assert not bad
    for name, cp in [
        ("copy.copy", copy.copy(res)),
        ("copy.deepcopy", copy.deepcopy(res)),
        ("pickle round trip", pickle.loads(blob)),
    ]:
        try:
            cp.owner_report()
            kept = True
        except ValueError:
            kept = False
        print(f"{name}: owner report kept = {kept}")
    d = dataclasses.asdict(res)
    print(
        "dataclasses.asdict keeps '_owner':",
        "_owner" in d and d["_owner"] is not None,
        "-> its runs:",
        d.get("_owner", {}).get("runs", None) is not None,
    )


if __name__ == "__main__":
    main()
