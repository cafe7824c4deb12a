"""Privacy mechanisms: each turns a posterior into a differentially private release.

Split by what they protect: :mod:`pm_dpgp.mechanisms.label` (inputs public) and
:mod:`pm_dpgp.mechanisms.full` (whole records private); the calibration
(:mod:`~pm_dpgp.mechanisms.gaussian`), the noise source (:mod:`~pm_dpgp.mechanisms.noise`)
and the centred whitening (:mod:`~pm_dpgp.mechanisms.whitening`) are shared.

* label privacy (inputs public): :func:`cloaked_release` (Smith et al. 2018),
  :func:`prior_noise_release` (Hall et al. 2013 baseline);
* full privacy (inputs and outputs private): :func:`noise_aware_release` and
  :func:`dirichlet_release` (Honkela), :func:`sample_path_release` (Maciazek).
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
