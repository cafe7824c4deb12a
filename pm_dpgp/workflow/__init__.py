"""Bayesian workflow on DP releases: posterior predictive checks and Thompson sampling.

* ``dp_ppc`` — DP draws next to a public hold-out set as ``InferenceData``
  (``az.plot_ppc``, ``az.summary``); refuses the private training data.
* ``holdout_elpd`` — the hold-out elpd of a ``dp_ppc`` object (``az.loo`` does not apply).
* ``plot_dp_release`` — non-DP band (owner's view), DP draws, DP noise band.
* ``dp_thompson_sampling`` — Thompson sampling with DP sample paths under a budget.
* ``dp_thompson_sampling_tree`` — Thompson sampling on sufficient statistics released by
  tree aggregation, the whole run one Gaussian event (``docs/thompson_tree.md``), on
  Nyström features of a kernel or on a ``DyadicPartitionFeatures`` basis (§10).
* ``dp_summary`` — mean, sd and credible interval of DP draws, no MCMC diagnostics.
* ``release_posterior`` — the posterior of ``f`` given a cloaking / prior-noise release
  under the model's GP prior (closed form, post-processing).

See ``docs/workflow.md``.
"""

from pm_dpgp.workflow.given_release import ReleasePosterior, release_posterior
from pm_dpgp.workflow.partition_features import DyadicPartitionFeatures
from pm_dpgp.workflow.ppc import PrivateDataError, dp_ppc, holdout_elpd, plot_dp_release
from pm_dpgp.workflow.summary import dp_summary, spread_meaning
from pm_dpgp.workflow.thompson import (
    LoopError,
    ObjectiveError,
    OwnerRecord,
    ReleaseError,
    ThompsonResult,
    dp_thompson_sampling,
    random_search,
)
from pm_dpgp.workflow.thompson_tree import dp_thompson_sampling_tree

__all__ = [
    "DyadicPartitionFeatures",
    "LoopError",
    "ObjectiveError",
    "OwnerRecord",
    "PrivateDataError",
    "ReleaseError",
    "ReleasePosterior",
    "ThompsonResult",
    "dp_ppc",
    "dp_summary",
    "dp_thompson_sampling",
    "dp_thompson_sampling_tree",
    "holdout_elpd",
    "plot_dp_release",
    "random_search",
    "release_posterior",
    "spread_meaning",
]
