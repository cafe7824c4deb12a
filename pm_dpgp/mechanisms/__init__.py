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

from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release
from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
from pm_dpgp.mechanisms.full.sample_path import SamplePathRelease, sample_path_release
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound
from pm_dpgp.mechanisms.gaussian import classic_c, gaussian_epsilon, gaussian_sigma
from pm_dpgp.mechanisms.label.cloaking import NoiseCovariance, solve_noise_covariance
from pm_dpgp.mechanisms.label.cloaking_release import cloaked_release, cloaking_noise
from pm_dpgp.mechanisms.label.prior_noise import prior_noise_release, rkhs_sensitivity

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
