"""Small public data sets packaged with pm_dpgp (see ``data/ATTRIBUTION.md``)."""

from pm_dpgp.datasets.hmeq import HMEQ_FEATURES, load_hmeq
from pm_dpgp.datasets.howell import load_howell1, load_kung_women

__all__ = ["HMEQ_FEATURES", "load_hmeq", "load_howell1", "load_kung_women"]
