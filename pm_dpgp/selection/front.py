"""One front end for private selection: ``select_hyperparameters`` (``docs/selection.md``).

``method="smith"``: label privacy, exponential mechanism over the clipped cross-validated SSE
of cloaked predictions (``pm_dpgp.selection.smith.select_by_cross_validated_sse``,
Smith et al. 2021, Alg. 1).  ``method="liu_talwar"``: full privacy, random stopping over
noise-aware releases scored by COINPRESS
(``pm_dpgp.selection.liu_talwar.select_by_random_stopping``, Honkela 2024, Alg. 2).
``method="sample_path"``: full privacy, the same random stopping with one released posterior
sample path per run (Maciazek) scored by COINPRESS
(``pm_dpgp.selection.sample_paths.select_by_sample_paths``, ``docs/selection.md`` §6).
All return a ``pm_dpgp.selection.result.SelectionResult`` (chosen configuration, its
privacy event, the owner's non-private scores kept out of every serialised form).

The privacy-constrained search
``pm_dpgp.mechanisms.full.sample_path_bounds.feasible_configurations`` uses public information
only and costs nothing, so it is not a method here (it can prune a grid before a selection).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pm_dpgp.accounting import Ledger
from pm_dpgp.selection.liu_talwar import select_by_random_stopping
from pm_dpgp.selection.result import SelectionResult
from pm_dpgp.selection.sample_paths import select_by_sample_paths
from pm_dpgp.selection.smith import select_by_cross_validated_sse

__all__ = ["select_hyperparameters"]

Method = Literal["smith", "liu_talwar", "sample_path"]


def select_hyperparameters(
    model: Any,
    grid: Sequence[dict[str, float]] | None = None,
    data: Any = None,
    *,
    ledger: Ledger | None,
    method: Method,
    **options: Any,
) -> SelectionResult:
    """DP choice of public hyperparameters from a PyMC GP model, a public grid and private data.

    ``grid=None`` builds the candidates from the model's priors (prior quantiles, no data).
    ``data``: for ``"liu_talwar"`` and ``"sample_path"`` the private ``(X, y)`` (default: the
    model's); for
    ``"smith"`` the labels are the model's own ``y`` (label privacy: inputs public), so
    ``data`` must be ``None``.  ``options`` go to the method (``epsilon``, ``y_bounds``,
    ``delta``, ``gamma``, folds, ``X_star`` and ``domain`` for sample paths, …; see the three
    functions).  The ledger is
    charged before any private value is read.
    """
    if method == "smith":
        if data is not None:
            raise ValueError(
                "method='smith' selects from the model's own labels (label privacy); build "
                "the model with the private y and pass data=None."
            )
        return select_by_cross_validated_sse(model, grid, ledger=ledger, **options)
    if method == "liu_talwar":
        return select_by_random_stopping(model, grid, data, ledger=ledger, **options)
    if method == "sample_path":
        return select_by_sample_paths(model, grid, data, ledger=ledger, **options)
    raise ValueError(f"method must be 'smith', 'liu_talwar' or 'sample_path', got {method!r}.")
