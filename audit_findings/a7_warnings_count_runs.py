"""Audit: do warnings emitted inside the random-stopping loop reveal K (the secret number of
runs)?  Count the warnings per call with the filter set to "always" and compare with K."""

import sys
import warnings

import numpy as np

sys.path.insert(0, ".")
from pm_dpgp.accounting import Ledger  # noqa: E402
from pm_dpgp.selection import select_by_random_stopping  # noqa: E402
from tests.test_liu_talwar import GRID, _sparse_model  # noqa: E402

model = _sparse_model(80)
for seed in range(4):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = select_by_random_stopping(model, GRID, epsilon=20.0, delta=0.1, y_bounds=(-2.0, 2.0),
                                        ledger=Ledger(epsilon=1e9, delta=0.5, filter="renyi"),
                                        gamma=0.3, rng=np.random.default_rng(seed))  # fmt: skip
    K = res.owner_report()["n_runs"]
    kinds = sorted({f"{w.category.__name__}: {str(w.message)[:70]}" for w in caught})
    print(f"seed {seed}: K = {K}, warnings emitted = {len(caught)}; distinct: {kinds}")
