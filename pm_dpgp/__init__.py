"""pm_dpgp: differentially private Gaussian-process releases for PyMC / ArviZ users."""

__version__ = "0.1.0"
