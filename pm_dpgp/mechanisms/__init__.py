"""Privacy mechanisms: each turns a posterior into a differentially private release."""

from pm_dpgp.mechanisms.cloaking import NoiseCovariance, solve_noise_covariance
from pm_dpgp.mechanisms.cloaking_release import cloaked_release, cloaking_noise
from pm_dpgp.mechanisms.gaussian import classic_c, gaussian_epsilon, gaussian_sigma
from pm_dpgp.mechanisms.prior_noise import prior_noise_release, rkhs_sensitivity

__all__ = [
    "NoiseCovariance",
    "classic_c",
    "cloaked_release",
    "cloaking_noise",
    "gaussian_epsilon",
    "gaussian_sigma",
    "prior_noise_release",
    "rkhs_sensitivity",
    "solve_noise_covariance",
]
