"""pm_dpgp.datasets."""
