"""pm_dpgp: differentially private Gaussian-process releases for PyMC / ArviZ users."""

from pm_dpgp._validation import ConvergenceWarning, PrivacyWarning

__version__ = "0.1.0"

__all__ = ["ConvergenceWarning", "PrivacyWarning"]
