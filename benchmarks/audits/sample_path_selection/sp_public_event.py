"""Audit (sample-path selection, Q1): is everything that determines the charged event and the
post-run check public, and is the charge made before any private value is read or any
randomness is drawn (secure mode and simulation)?

1. Order: the data are wrappers whose ``__array__`` records the first read; Ledger.spend,
   secrets.randbelow, numpy's default_rng, plan_discrete_gaussian and sample_path_release are
   wrapped to record their first call.  The spend must come first.
2. The charged event and every release's own event (metadata) are identical across private
   datasets of the same n, including adversarial ones (non-finite, huge, duplicated inputs,
   huge responses), and no exception is raised after the spend on them.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import json
import secrets
import warnings

import numpy as np
import pymc as pm

import pm_dpgp.selection.coinpress as coinpress_module
import pm_dpgp.selection.sample_paths as sp_module
from pm_dpgp.accounting import Ledger
from pm_dpgp.models import gp_regression
from pm_dpgp.selection import product_grid, select_by_sample_paths

warnings.simplefilter("ignore")
N = 288
GRID = product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]})
OPTS = dict(
    X_star=np.linspace(0, 10, 21)[:, None],
    domain=(0, 10),
    y_bounds=(-2.0, 2.0),
    epsilon=1.0,
    delta=1e-4,
    gamma=0.08,
)


def make_model():
    r = np.random.default_rng(0)
    X = r.uniform(0, 10, (N, 1))
    return gp_regression(
        X,
        np.sin(X[:, 0]),
        lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )


LOG: list[str] = []


class Watched:
    def __init__(self, arr):
        self.arr = np.asarray(arr)

    def __len__(self):
        return len(self.arr)

    @property
    def shape(self):
        return self.arr.shape

    @property
    def dtype(self):
        # the declared schema (after the D3 fix an array-like without a declared numeric dtype
        # is converted before the spend to check its schema; with one, nothing is read)
        return self.arr.dtype

    def __array__(self, dtype=None, copy=None):
        LOG.append("data read")
        return self.arr if dtype is None else self.arr.astype(dtype)


def wrap(obj, name, label):
    real = getattr(obj, name)

    def w(*a, **k):
        LOG.append(label)
        return real(*a, **k)

    setattr(obj, name, w)
    return real


def order_check(model, secure):
    LOG.clear()
    saved = [
        (Ledger, "spend", wrap(Ledger, "spend", "ledger.spend")),
        (secrets, "randbelow", wrap(secrets, "randbelow", "secrets.randbelow")),
        (
            coinpress_module,
            "plan_discrete_gaussian",
            wrap(coinpress_module, "plan_discrete_gaussian", "discrete gaussian"),
        ),
        (sp_module, "sample_path_release", wrap(sp_module, "sample_path_release", "path release")),
        (np.random, "default_rng", wrap(np.random, "default_rng", "np.random.default_rng")),
    ]
    try:
        r = np.random.default_rng(3)
        X = np.random.default_rng(1).uniform(0, 10, (N, 1))
        y = np.sin(X[:, 0])
        LOG.clear()
        ledger = Ledger(epsilon=10.0, delta=1e-3, filter="renyi")
        res = select_by_sample_paths(
            model, GRID, (Watched(X), Watched(y)), **OPTS, ledger=ledger, rng=None if secure else r
        )
    finally:
        for obj, name, real in saved:
            setattr(obj, name, real)
    first = {k: LOG.index(k) for k in dict.fromkeys(LOG)}
    print(f"secure={secure}: first calls in order: {sorted(first, key=first.get)}")
    assert LOG[0] == "ledger.spend", LOG[:5]
    return res


def adversarial_datasets():
    r = np.random.default_rng(2)
    base_X = r.uniform(0, 10, (N, 1))
    base_y = np.sin(base_X[:, 0])
    out = {"plain": (base_X, base_y)}
    X = base_X.copy()
    X[::7], X[1::11], X[2::13], X[0] = np.nan, np.inf, -1e308, 1e308
    y = base_y.copy()
    y[::3], y[1::5], y[2::9] = 1e300, np.nan, -np.inf
    out["non-finite/huge"] = (X, y)
    out["all inputs equal"] = (np.full((N, 1), 5.0), base_y)
    out["all inputs outside domain"] = (np.full((N, 1), -50.0), -base_y)
    half = N // 2
    out["duplicated pairs"] = (np.repeat(base_X[:half], 2, axis=0), np.repeat(base_y[:half], 2))
    return out


def public_event_check(model):
    own_events: dict[str, list[str]] = {}
    real = sp_module.sample_path_release

    def spy(data, X_star, **kw):
        rel = real(data, X_star, **kw)
        own_events.setdefault(current, []).append(
            (
                json.dumps(rel.metadata["hyperparameters"], sort_keys=True),
                json.dumps(rel.metadata["privacy_event"], sort_keys=True),
            )
        )
        return rel

    sp_module.sample_path_release = spy
    charged = {}
    try:
        for current, (X, y) in adversarial_datasets().items():
            ledger = Ledger(epsilon=10.0, delta=1e-3, filter="renyi")
            res = select_by_sample_paths(
                model, GRID, (X, y), **OPTS, ledger=ledger, rng=np.random.default_rng(4)
            )
            charged[current] = json.dumps(ledger.history[0].event.to_metadata(), sort_keys=True)
            print(f"  {current}: index={res.index} runs={res.owner_report()['n_runs']} ok")
    finally:
        sp_module.sample_path_release = real
    assert len(set(charged.values())) == 1, "charged event depends on the data"
    per_candidate: dict[str, set[str]] = {}
    for evs in own_events.values():
        for cand, e in evs:
            per_candidate.setdefault(cand, set()).add(e)
    n_rel = sum(len(v) for v in own_events.values())
    print(
        f"charged events identical across {len(charged)} datasets; {n_rel} releases of "
        f"{len(per_candidate)} candidates; distinct own events per candidate: "
        f"{[len(v) for v in per_candidate.values()]}"
    )
    assert all(len(v) == 1 for v in per_candidate.values()), "own event depends on the data"


if __name__ == "__main__":
    model = make_model()
    order_check(model, secure=False)
    order_check(model, secure=True)
    public_event_check(model)
