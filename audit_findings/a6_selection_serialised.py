"""Audit: what of a Liu-Talwar SelectionResult leaves through its public / generic forms.

Checks that K (number of runs), the non-winning runs' DP scores and the owner's non-private
validation scores are absent from to_metadata(), repr, pickle and copy; and shows what
``dataclasses.asdict`` / ``vars`` (generic Python introspection) expose.
"""

import copy
import dataclasses
import json
import pickle
import sys
import warnings

import numpy as np

sys.path.insert(0, ".")
from pm_dpgp.accounting import Ledger  # noqa: E402
from pm_dpgp.selection import select_by_random_stopping  # noqa: E402
from tests.test_liu_talwar import GRID, _sparse_model  # noqa: E402

warnings.simplefilter("ignore")
model = _sparse_model(80)
res = select_by_random_stopping(model, GRID, epsilon=1.0, delta=1e-5, y_bounds=(-2.0, 2.0),
                                ledger=Ledger(epsilon=1e6, delta=1e-3, filter="renyi"),
                                gamma=0.3, rng=np.random.default_rng(2))  # fmt: skip
owner = res.owner_report()
K = owner["n_runs"]
secrets_ = {f"{s!r}" for _, s in owner["runs"]} | {f"{v!r}" for v in owner["validation_scores"]}
winner = repr(res.public_details["dp_mean_validation_loglik"])
secrets_.discard(winner)
meta = json.dumps(res.to_metadata(), default=str)
print("K =", K, "; keys of to_metadata:", sorted(res.to_metadata()))
for name, text in [("to_metadata", meta), ("repr", repr(res)),
                   ("pickle", repr(pickle.loads(pickle.dumps(res)).__dict__)),
                   ("copy.copy", repr(copy.copy(res).__dict__)),
                   ("dataclasses.asdict", repr(dataclasses.asdict(res))),
                   ("vars", repr(vars(res)))]:  # fmt: skip
    hits = [s for s in secrets_ if s in text]
    print(
        f"{name:20s} non-winning scores / owner scores present: {len(hits)}; "
        f"'n_runs' present: {'n_runs' in text}"
    )
