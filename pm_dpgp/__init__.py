"""pm_dpgp: differentially private Gaussian-process releases for PyMC / ArviZ users."""

from pm_dpgp._validation import ConvergenceWarning, PrivacyWarning
from pm_dpgp.domain import Box

__version__ = "0.1.0"

__all__ = ["Box", "ConvergenceWarning", "PrivacyWarning"]
