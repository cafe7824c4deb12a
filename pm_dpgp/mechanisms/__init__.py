"""pm_dpgp.mechanisms."""
