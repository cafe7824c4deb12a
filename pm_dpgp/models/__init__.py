"""pm_dpgp.models."""
