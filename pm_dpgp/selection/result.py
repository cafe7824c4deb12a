"""The outcome of a private selection: the public choice, its privacy event, and the owner's scores.

What may be published (``to_metadata()``, ``repr``, pickling) is a function of public inputs and
of the DP output (the chosen index) only.  The non-private scores, the selection probabilities
and anything else computed from the private data are kept in a private slot, returned by
``SelectionResult.owner_report`` for the data owner, and dropped on pickling and from every
serialised form (tested with the leak scanner).
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from typing import Any

import numpy as np

from pm_dpgp.accounting import PrivacyEvent
from pm_dpgp.models.hyperparameters import PublicHyperparameters

__all__ = ["SelectionResult"]


@dataclass(frozen=True, eq=False, repr=False)
class SelectionResult:
    """A DP-selected configuration.

    Attributes
    ----------
    method:
        e.g. ``"exponential_mechanism_cv_sse"`` (Smith et al. 2021, Algorithm 1) or
        ``"liu_talwar_random_stopping"`` (Honkela 2024, Algorithm 2).
    hyperparameters:
        the chosen configuration, public: pass it to any release
        (``cloaked_release(..., hyperparameters=result.public_hyperparameters())`` also
        records in the release's metadata that the values came from this selection).
    index:
        its position in ``grid``; ``-1`` when no candidate was valid (a full-privacy selection
        can end so; ``hyperparameters`` is then empty, and ``grid[index]`` is not a choice).
    grid:
        the candidate configurations (public).
    event:
        the privacy event of the selection: charged to the ledger if one was given, otherwise
        the caller must charge it (with ``privacy_model`` and ``neighbouring_relation``, so
        that the ledger records what the guarantee protects).
    privacy_model, neighbouring_relation:
        what the guarantee protects.
    public_details:
        public parameters (ε, sensitivity, folds, dropped configurations, …).
    """

    method: str
    hyperparameters: dict[str, float]
    index: int
    grid: list[dict[str, float]]
    event: PrivacyEvent
    privacy_model: str
    neighbouring_relation: str
    public_details: dict[str, Any]
    #: the owner's scores: an init-only argument kept outside the dataclass fields, so that
    #: ``dataclasses.asdict`` / ``astuple`` / ``replace`` never carry it (stop-34 audit:
    #: ``json.dumps(asdict(result))`` published the private utilities)
    owner: InitVar[dict[str, Any] | None] = None

    def __post_init__(self, owner: dict[str, Any] | None) -> None:
        object.__setattr__(self, "_owner", owner)

    def public_hyperparameters(self) -> PublicHyperparameters:
        """The chosen values with their provenance, for a release's ``hyperparameters=``: the
        release then records ``hyperparameter_source`` = this selection (method, event label,
        privacy model) instead of "given as public values by the caller".  Public."""
        if self.index < 0:
            raise ValueError(
                "this selection chose no candidate (no valid score): there are no "
                "hyperparameters to release with."
            )
        details = self.public_details
        planned = None
        if details.get("release_epsilon_in_utility") is not None:
            planned = {
                "epsilon": details["release_epsilon_in_utility"],
                "delta": details["release_delta_in_utility"],
                "y_bounds": tuple(details["y_bounds"]),
                "calibration": details.get("release_calibration_in_utility"),
            }
        return PublicHyperparameters(
            self.hyperparameters,
            # the charged event itself (its parameters are the selection's cost), so that a
            # reader of the release alone sees what the choice cost (walkthrough 40)
            f"private selection: {self.method} (charged event: {self.event!r}; "
            f"{self.privacy_model} privacy)",
            planned_release=planned,
        )

    def owner_report(self) -> dict[str, Any]:
        """The data owner's non-private view (scores, probabilities).  NEVER publish it.

        Raises ``ValueError`` on a copy that travelled through pickling (the slot is dropped).
        """
        if getattr(self, "_owner", None) is None:
            raise ValueError("this result carries no owner report (it was serialised or copied).")
        return {
            k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in self._owner.items()
        }

    def __repr__(self) -> str:
        """The choice and its charge on a few lines; the whole record is ``to_metadata()``.

        (The dataclass repr printed every fold index and every RDP order.)  Public fields only.
        """
        return (
            f"SelectionResult(method={self.method!r}, "
            f"hyperparameters={self.hyperparameters!r}, "
            f"index={self.index} (of {len(self.grid)} candidates), "
            f"privacy_model={self.privacy_model!r}, event={self.event!r}, "
            f"public_details: {', '.join(self.public_details)} (see to_metadata()))"
        )

    def to_metadata(self) -> dict[str, Any]:
        """Public metadata: method, choice, grid, event and public parameters (JSON-friendly)."""
        return {
            "method": self.method,
            "chosen_index": int(self.index),
            "hyperparameters": dict(self.hyperparameters),
            "grid": [dict(c) for c in self.grid],
            "privacy_model": self.privacy_model,
            "neighbouring_relation": self.neighbouring_relation,
            "event": self.event.to_metadata(),
            **{k: v for k, v in self.public_details.items()},
        }

    def __reduce__(self) -> Any:
        state = (
            self.method,
            dict(self.hyperparameters),
            self.index,
            list(self.grid),
            self.event,
            self.privacy_model,
            self.neighbouring_relation,
            dict(self.public_details),
        )
        return (SelectionResult, state)
