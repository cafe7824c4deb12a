"""pm_dpgp.accounting."""
