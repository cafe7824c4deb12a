"""Loader for a small cleaned subset of the Home Equity Loans data (HMEQ), with attribution.

HMEQ is the SAS sample data set ``SAMPSIO.HMEQ`` (5,960 home-equity loans; ``BAD = 1`` if the
applicant defaulted or was seriously delinquent), distributed with Baesens, Rösch & Scheule,
*Credit Risk Analytics* (Wiley, 2016), and used by Smith, Álvarez & Lawrence (JMLR 2021, §6.4,
"Scheule et al. 2017") for DP GP classification.  The source file is ``dataset/hmeq.csv`` of
the GitHub repository ``vidush-dixit/hmeq`` (blob ``0e11ff8b…``, sha256 ``8a2e0b53…``); SAS
Institute publishes the same rows in ``sassoftware/python-sasctl`` (``examples/data/hmeq.csv``).
No licence is stated by either repository; see ``data/ATTRIBUTION.md``.

Cleaning (``data/hmeq_subset.csv``, 800 rows): rows with any of ``DELINQ, DEROG, NINQ, CLAGE,
CLNO, YOJ`` missing are dropped (4,748 remain: 1,002 BAD, 3,746 not), then 400 rows of each
class are drawn without replacement with ``numpy.random.default_rng(2021)`` (``choice`` on
the BAD rows, then on the others) and kept in the original order; column ``row`` is the
1-based data-row number in the source file.  Balancing the classes follows the paper, which
"bias sample[d] two hundred points ... to approximately balance ... the BAD outputs".
"""

from __future__ import annotations

from importlib import resources

import numpy as np
from numpy.typing import NDArray

__all__ = ["HMEQ_FEATURES", "load_hmeq"]

#: Numeric input columns of the packaged subset (public under label privacy).
HMEQ_FEATURES = ("DELINQ", "DEROG", "NINQ", "CLAGE", "CLNO", "YOJ")


def load_hmeq(
    features: tuple[str, ...] | list[str] = ("DELINQ",),
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return ``(X, bad)`` of the 800-row balanced HMEQ subset.

    ``X`` is ``(800, len(features))`` with the requested columns of ``HMEQ_FEATURES``
    (``DELINQ``: delinquent credit lines, ``DEROG``: derogatory reports, ``NINQ``: recent
    credit enquiries, ``CLAGE``: age of the oldest credit line in months, ``CLNO``: credit
    lines, ``YOJ``: years at present job); ``bad`` is 0/1.  In the paper's setting the inputs
    are public and ``bad`` private.
    """
    if isinstance(features, str) or not isinstance(features, list | tuple):
        # an iterator was used up by this check (X of shape (800, 0)); a set's order is
        # the string hash's (stop-40 fuzz)
        raise ValueError(
            f"features must be a list or tuple of names from {HMEQ_FEATURES}, got {features!r}."
        )
    unknown = [f for f in features if f not in HMEQ_FEATURES]
    if unknown or not features:
        raise ValueError(
            f"features must be a non-empty subset of {HMEQ_FEATURES}, got {features!r}."
        )
    with resources.files("pm_dpgp.datasets").joinpath("data/hmeq_subset.csv").open("r") as fh:
        header = fh.readline().strip().split(",")
        table = np.loadtxt(fh, delimiter=",", dtype=np.float64)
    cols = [header.index(f) for f in features]
    return table[:, cols], table[:, header.index("BAD")]
