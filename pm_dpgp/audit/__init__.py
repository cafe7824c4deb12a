"""Audits: scans of releases for private values, divergence checks."""

from pm_dpgp.audit.leak import LeakFinding, scan_for_values

__all__ = ["LeakFinding", "scan_for_values"]
