"""Progress bars (kept here for compatibility; the implementation is ``pm_dpgp._progress``,
a bottom layer that the mechanisms use too)."""

from pm_dpgp._progress import ProgressBar, progress_bar

__all__ = ["ProgressBar", "progress_bar"]
