"""A differentially private release and its conversion to ArviZ ``InferenceData``.

A ``Release`` holds only public and DP content: the DP draws, the public test
inputs, the public shape of the DP noise (it depends only on public inputs,
public hyperparameters and the privacy parameters) and the privacy metadata the
design requires (mechanism, privacy model, neighbouring relation, ε, δ,
sensitivity, clipping bounds, hyperparameters, seed policy, version).  It never
holds the private training outputs or the non-DP posterior mean.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pm_dpgp import __version__

__all__ = ["Release", "release_to_inference_data"]


def _jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays (recursively) into JSON-serialisable objects."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class Release:
    """Differentially private draws at public test inputs, with their metadata.

    Attributes
    ----------
    mechanism:
        Name of the mechanism (``"cloaking"``, ``"prior_noise"``, ...).
    draws:
        ``(n_draws, m)`` array of DP values; every draw is one release and was
        charged to the ledger as such.
    X_star:
        ``(m, d)`` public test inputs.
    noise_factor:
        ``(m, k)`` public factor ``F`` with DP-noise covariance ``F Fᵀ``.
    metadata:
        Privacy metadata (JSON-serialisable values only).
    """

    mechanism: str
    draws: NDArray[np.float64]
    X_star: NDArray[np.float64]
    noise_factor: NDArray[np.float64]
    metadata: dict[str, Any] = field(default_factory=dict)
    variable_name: str = "f_dp"

    @property
    def n_draws(self) -> int:
        return int(self.draws.shape[0])

    @property
    def noise_sd(self) -> NDArray[np.float64]:
        """``(m,)`` marginal standard deviation of the DP noise (public)."""
        return np.sqrt(np.einsum("ij,ij->i", self.noise_factor, self.noise_factor))

    @property
    def noise_cov(self) -> NDArray[np.float64]:
        """Public covariance of the DP noise added to each draw."""
        return self.noise_factor @ self.noise_factor.T

    def noise_band(self, width: float = 1.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return first draw ∓ ``width`` × noise sd (public; post-processing of the release)."""
        centre = self.draws[0]
        return centre - width * self.noise_sd, centre + width * self.noise_sd

    def to_inference_data(self) -> Any:
        """Return the installed ArviZ's result object (see ``release_to_inference_data``)."""
        return release_to_inference_data(self)


def release_to_inference_data(release: Release) -> Any:
    """Store a ``Release`` as ``arviz.InferenceData`` (ArviZ 0.x) or ``DataTree`` (ArviZ 1).

    * ``posterior_predictive[variable_name]``: dims ``(chain, draw, x_star)``, one
      chain, one entry of ``draw`` per DP draw; coordinate ``x_star`` holds the
      test inputs when they are 1-D, else an index.
    * ``constant_data``: the public test inputs ``X_star`` (dims ``x_star, input_dim``)
      and the public DP-noise sd.
    * attrs of every group: the privacy metadata, flat; nested values are stored
      as JSON strings so that the object round-trips through netCDF.
    """
    import xarray as xr

    from pm_dpgp.compat import make_inference_data

    X = np.asarray(release.X_star, dtype=np.float64)
    m, d = X.shape
    x_coord = X[:, 0] if d == 1 else np.arange(m)
    name = release.variable_name
    pp = xr.Dataset(
        {name: (("chain", "draw", "x_star"), release.draws[None, :, :])},
        coords={"chain": [0], "draw": np.arange(release.n_draws), "x_star": x_coord},
    )
    const = xr.Dataset(
        {
            "X_star": (("x_star", "input_dim"), X),
            "dp_noise_sd": (("x_star",), np.asarray(release.noise_sd, dtype=np.float64)),
        },
        coords={"x_star": x_coord, "input_dim": np.arange(d)},
    )
    attrs = _flat_attrs(release)
    pp.attrs.update(attrs)
    const.attrs.update(attrs)
    return make_inference_data({"posterior_predictive": pp, "constant_data": const})


def _flat_attrs(release: Release) -> dict[str, Any]:
    """Flatten metadata for netCDF: scalars and strings stay, the rest becomes JSON."""
    attrs: dict[str, Any] = {
        "mechanism": release.mechanism,
        "pm_dpgp_version": __version__,
        "n_draws": release.n_draws,
    }
    for key, value in release.metadata.items():
        value = _jsonable(value)
        if value is None:
            attrs[key] = "none"
        elif isinstance(value, bool):
            attrs[key] = int(value)
        elif isinstance(value, str | int | float):
            attrs[key] = value
        else:
            attrs[key] = json.dumps(value)
    return attrs
