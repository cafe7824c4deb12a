"""pm_dpgp.audit."""
