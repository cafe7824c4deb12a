"""Full-privacy mechanisms: one whole record (x_i, y_i) may change.

* ``noise_aware_release`` and
  ``dirichlet_release``: Gaussian noise on the
  clipped sufficient statistics of a sparse GP, then the noise-aware posterior
  (Honkela et al., docs/noise_aware.md);
* ``sample_path_release``: posterior sample
  paths as a Gaussian mechanism in function space (Maciazek, docs/sample_paths.md).
"""

from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release
from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
from pm_dpgp.mechanisms.full.sample_path import SamplePathRelease, sample_path_release
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound

__all__ = [
    "SamplePathBound",
    "SamplePathRelease",
    "dirichlet_release",
    "noise_aware_release",
    "sample_path_release",
]
