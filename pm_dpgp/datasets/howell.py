"""Loader for the !Kung San census data (Howell1), packaged with attribution.

The file is the ``Howell1.csv`` of McElreath's *rethinking* package (GPL >= 3),
collected by Nancy Howell; see ``data/ATTRIBUTION.md``.
"""

from __future__ import annotations

from importlib import resources

import numpy as np
from numpy.typing import NDArray

__all__ = ["load_howell1", "load_kung_women"]


def load_howell1() -> dict[str, NDArray[np.float64]]:
    """Return all 544 rows as a dict of columns ``height, weight, age, male``."""
    with resources.files("pm_dpgp.datasets").joinpath("data/howell1.csv").open("r") as fh:
        table = np.loadtxt(fh, delimiter=";", skiprows=1, dtype=np.float64)
    return {name: table[:, j] for j, name in enumerate(("height", "weight", "age", "male"))}


def load_kung_women() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return ``(age, height)`` of the 287 women, as in Smith et al. (2018), Figure 1.

    Age (years) is treated as public, height (cm) as private.
    """
    data = load_howell1()
    women = data["male"] == 0
    return data["age"][women], data["height"][women]
