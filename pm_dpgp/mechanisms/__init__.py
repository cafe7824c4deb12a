"""Privacy mechanisms: each turns a posterior into a differentially private release.

* label privacy (inputs public): :func:`cloaked_release` (Smith et al. 2018),
  :func:`prior_noise_release` (Hall et al. 2013 baseline);
* full privacy (inputs and outputs private): :func:`noise_aware_release` and
  :func:`dirichlet_release` (Honkela), :func:`sample_path_release` (Maciazek).
"""

from pm_dpgp.mechanisms.cloaking import NoiseCovariance, solve_noise_covariance
from pm_dpgp.mechanisms.cloaking_release import cloaked_release, cloaking_noise
from pm_dpgp.mechanisms.dirichlet import dirichlet_release
from pm_dpgp.mechanisms.gaussian import classic_c, gaussian_epsilon, gaussian_sigma
from pm_dpgp.mechanisms.noise_aware import noise_aware_release
from pm_dpgp.mechanisms.prior_noise import prior_noise_release, rkhs_sensitivity
from pm_dpgp.mechanisms.sample_path import SamplePathRelease, sample_path_release
from pm_dpgp.mechanisms.sample_path_bounds import SamplePathBound

__all__ = [
    "NoiseCovariance",
    "SamplePathBound",
    "SamplePathRelease",
    "classic_c",
    "cloaked_release",
    "cloaking_noise",
    "dirichlet_release",
    "gaussian_epsilon",
    "gaussian_sigma",
    "noise_aware_release",
    "prior_noise_release",
    "rkhs_sensitivity",
    "sample_path_release",
    "solve_noise_covariance",
]
