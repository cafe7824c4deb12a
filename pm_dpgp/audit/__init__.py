"""Audits of privacy claims.

* ``leak``: scan a serialised release for private values;
* ``renyi``: exact Rényi divergence between Gaussian posteriors of
  neighbouring datasets;
* ``neighbours``: random and adversarial neighbouring datasets;
* ``lira``: LiRA-style membership-inference attack (Maciazek §4, App. C);
* ``public_choices``: the data owner's check that "public" choices
  (``Z``, bounds, prior mean, hold-out set) were not taken from the private data.
"""

from pm_dpgp.audit.leak import LeakFinding, scan_for_values
from pm_dpgp.audit.lira import LiraResult, LiraSetting, lira_attack
from pm_dpgp.audit.neighbours import (
    AdversarialResult,
    NeighbourPair,
    adversarial_neighbours,
    neighbour_divergence,
    random_neighbours,
)
from pm_dpgp.audit.public_choices import DataDerivedChoiceError, check_public_choices
from pm_dpgp.audit.renyi import (
    RenyiTerms,
    gaussian_renyi_divergence,
    posterior_renyi_divergence,
)

__all__ = [
    "AdversarialResult",
    "DataDerivedChoiceError",
    "LeakFinding",
    "LiraResult",
    "LiraSetting",
    "NeighbourPair",
    "RenyiTerms",
    "adversarial_neighbours",
    "check_public_choices",
    "gaussian_renyi_divergence",
    "lira_attack",
    "neighbour_divergence",
    "posterior_renyi_divergence",
    "random_neighbours",
    "scan_for_values",
]
