"""pm_dpgp.gp."""
