"""Label-privacy mechanisms: the inputs X are public, one output y_i may change.

The neighbouring relation is "one label replaced by another within the public bounds"
(Smith et al. 2018, §2; Smith et al. 2021, §2).  Every mechanism here releases a linear
function ``C y`` of the labels with Gaussian noise whose covariance is shaped by the
cloaking matrix ``C`` (``cloaking``) or by the prior
(``prior_noise``, Hall et al. 2013); the shared steps
(clip, charge, draw) are in ``output_perturbation``.
"""

from pm_dpgp.mechanisms.label.cloaking import NoiseCovariance, solve_noise_covariance
from pm_dpgp.mechanisms.label.cloaking_release import cloaked_release, cloaking_noise
from pm_dpgp.mechanisms.label.prior_noise import prior_noise_release, rkhs_sensitivity

__all__ = [
    "NoiseCovariance",
    "cloaked_release",
    "cloaking_noise",
    "prior_noise_release",
    "rkhs_sensitivity",
    "solve_noise_covariance",
]

from pm_dpgp.mechanisms.label.binning import (  # noqa: E402
    Bins,
    binned_gp,
    binned_predict,
    binned_release,
    make_bins,
)
from pm_dpgp.mechanisms.label.classification import (  # noqa: E402
    class_probabilities,
    classification_release,
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
