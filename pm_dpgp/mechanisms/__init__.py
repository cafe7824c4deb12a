"""Privacy mechanisms: each turns a posterior into a differentially private release.

Split by what they protect: ``pm_dpgp.mechanisms.label`` (inputs public) and
``pm_dpgp.mechanisms.full`` (whole records private); the calibration
(``gaussian``), the noise source (``noise``)
and the centred whitening (``whitening``) are shared.

* label privacy (inputs public): ``cloaked_release`` (Smith et al. 2018),
  ``prior_noise_release`` (Hall et al. 2013 baseline);
* full privacy (inputs and outputs private): ``noise_aware_release`` and
  ``dirichlet_release`` (Honkela), ``sample_path_release`` (Maciazek).
"""

from pm_dpgp.mechanisms.full.dirichlet import DirichletRelease, dirichlet_release
from pm_dpgp.mechanisms.full.noise_aware import SparseQuRelease, noise_aware_release
from pm_dpgp.mechanisms.full.sample_path import SamplePathRelease, sample_path_release
from pm_dpgp.mechanisms.full.sample_path_bounds import (
    FeasibleConfiguration,
    SamplePathBound,
    feasible_configurations,
    kernel_lower_bound,
    path_costs,
    paths_affordable,
)
from pm_dpgp.mechanisms.gaussian import classic_c, gaussian_epsilon, gaussian_sigma
from pm_dpgp.mechanisms.label.cloaking import NoiseCovariance, solve_noise_covariance
from pm_dpgp.mechanisms.label.cloaking_release import cloaked_release, cloaking_noise
from pm_dpgp.mechanisms.label.prior_noise import prior_noise_release, rkhs_sensitivity

__all__ = [
    "DirichletRelease",
    "FeasibleConfiguration",
    "NoiseCovariance",
    "SamplePathBound",
    "SamplePathRelease",
    "SparseQuRelease",
    "classic_c",
    "cloaked_release",
    "cloaking_noise",
    "dirichlet_release",
    "feasible_configurations",
    "gaussian_epsilon",
    "gaussian_sigma",
    "kernel_lower_bound",
    "noise_aware_release",
    "path_costs",
    "paths_affordable",
    "prior_noise_release",
    "rkhs_sensitivity",
    "sample_path_release",
    "solve_noise_covariance",
]

from pm_dpgp.mechanisms.label import (  # noqa: E402
    Bins,
    binned_gp,
    binned_predict,
    binned_release,
    class_probabilities,
    classification_release,
    make_bins,
)

__all__ += [
    "Bins",
    "binned_gp",
    "binned_predict",
    "binned_release",
    "class_probabilities",
    "classification_release",
    "make_bins",
]
