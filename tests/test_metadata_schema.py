"""One privacy-metadata schema for every release type (stop 41).

Before stop 41 a reader had to know the mechanism to find a release's guarantee: label
releases named it ``epsilon_total`` (at ``delta_per_draw``), full-privacy releases
``epsilon``/``delta``.  Every release now records ``epsilon`` and ``delta``: the (ε, δ)
guarantee of the whole release (all its draws), the same figure the ledger is charged; label
releases keep their per-draw figures beside it (``docs/workflow.md``, "Privacy metadata").
"""

from __future__ import annotations

import json

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger, event_from_metadata
from pm_dpgp.mechanisms import binned_gp, binned_release, classification_release, make_bins
from pm_dpgp.models import gp_classification
from tests import releases as R

#: keys every release's metadata carries, whatever the mechanism
CORE = (
    "privacy_model",
    "neighbouring_relation",
    "epsilon",
    "delta",
    "privacy_event",
    "noise_source",
    "seed_policy",
)


def _binned():
    rng = np.random.default_rng(7)
    X = rng.uniform(0.0, 10.0, (200, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(200)
    bins = make_bins(np.linspace(0.0, 10.0, 6))
    return binned_release(
        X, y, bins, epsilon=0.5, y_bounds=(-2.0, 2.0), n_draws=3, rng=np.random.default_rng(8)
    ), bins


def _classification():
    rng = np.random.default_rng(9)
    X = rng.uniform(0.0, 10.0, 40)
    t = (np.sin(X) > 0).astype(float)
    model = gp_classification(X, t, pm.gp.cov.ExpQuad(1, ls=2.0))
    return classification_release(
        model,
        np.linspace(0.0, 10.0, 15),
        epsilon=1.0,
        delta=1e-3,
        n_draws=2,
        rng=np.random.default_rng(10),
    )


@pytest.fixture(scope="module")
def every_release(small_gp):
    binned, bins = _binned()
    out = {
        "cloaking": R.label_release("cloaking", small_gp),
        "prior_noise": R.label_release("prior_noise", small_gp),
        "sample_path": R.sample_path(small_gp),
        "noise_aware": R.noise_aware(),
        "dirichlet": R.dirichlet(),
        "classification": _classification(),
        "binning": binned,
        "binned_gp": binned_gp(
            binned,
            np.linspace(0.5, 9.5, 7)[:, None],
            lengthscale=2.0,
            kernel_scale=1.0,
            noise_sd=0.3,
        ),
    }
    return out


@pytest.mark.parametrize(
    "kind",
    [
        "cloaking",
        "prior_noise",
        "sample_path",
        "noise_aware",
        "dirichlet",
        "classification",
        "binning",
        "binned_gp",
    ],
)
def test_every_release_records_its_guarantee_under_the_same_keys(every_release, kind):
    md = every_release[kind].metadata
    missing = [k for k in CORE if k not in md]
    assert not missing, f"{kind} lacks {missing}"
    json.dumps(md)  # JSON values only
    eps, delta = md["epsilon"], md["delta"]
    assert isinstance(eps, float) and isinstance(delta, float)
    assert 0.0 < eps < np.inf and 0.0 <= delta < 1.0
    # the figure is the whole release's: replaying its charged event at its δ gives it back
    event = event_from_metadata(md["privacy_event"])
    if delta > 0:
        assert event.epsilon(delta) == pytest.approx(eps, rel=1e-12)
        # and a fresh ledger charged with that event reports the same ε at the same δ
        ledger = Ledger(delta=delta)
        ledger.spend(event)
        assert ledger.epsilon() == pytest.approx(eps, rel=1e-9)
    else:  # pure DP (Laplace binning): the basic composition of its draws, at any δ
        assert event.count * event.eps == pytest.approx(eps, rel=1e-12)
        assert event.epsilon(1e-9) <= eps * (1 + 1e-12)


def test_label_releases_keep_per_draw_figures_beside_the_total(every_release):
    for kind in ("cloaking", "prior_noise", "classification", "binning"):
        md = every_release[kind].metadata
        assert md["delta"] == md["delta_per_draw"]
        assert md["epsilon"] == md["epsilon_total"]
        n = every_release[kind].n_draws
        # n draws of the per-draw mechanism cost more than one and no more than n of them
        assert md["epsilon_per_draw"] < md["epsilon"] <= n * md["epsilon_per_draw"] * (1 + 1e-12)


def test_the_guarantee_reaches_inference_data(every_release):
    from pm_dpgp.compat import get_group

    for kind in ("cloaking", "sample_path", "noise_aware", "binning"):
        rel = every_release[kind]
        idata = rel.to_inference_data()
        attrs = get_group(idata, "posterior").attrs
        assert float(attrs["epsilon"]) == rel.metadata["epsilon"], kind
        assert float(attrs["delta"]) == rel.metadata["delta"], kind
