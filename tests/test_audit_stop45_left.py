"""Stop 45: items noticed at earlier stops and left, fixed now.

* ``dp_thompson_sampling_tree``'s default all-releases posterior needs about ``4 n²`` doubles
  in its last round (n ≈ T records); a run too large to hold is refused before the charge.
* ``plan.cloaked`` / ``plan.prior_noise`` planned a release whose public offset
  ``μ + F (c − μ) W 1`` is not finite in float64 (prior mean far from ``y_bounds``), which the
  release itself refuses since stop 44 (``tests/test_audit_stop44_label_noise.py``); the plan
  now refuses it with the same message.
* A Dirichlet release's export did not refuse its training inputs as ``X_star`` (the
  stop-45 audit's fix covered the sparse-GP ``q(u)`` release, not its Dirichlet subclass).
* ``copy.copy`` / ``copy.deepcopy`` of a release dropped its weak references to the training
  data, so a copy exported what the original refuses (stop-45 review).
* ``sample_path_release`` accepted the training input array as ``X_star`` and published it
  (the export refuses it since the stop-45 release audit).
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import plan
from pm_dpgp.models import gp_regression


def _far_model():
    X = np.linspace(0.0, 5.0, 6)
    return gp_regression(
        X, np.full(6, 1.7e308), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.5, mean=-1.7e308
    )


@pytest.mark.parametrize("which", ["cloaked", "prior_noise"])
def test_a_plan_refuses_a_non_finite_public_offset_like_the_release(which):
    lower = 1.7e308
    bounds = (lower, float(np.nextafter(np.nextafter(lower, np.inf), np.inf)))
    planner = getattr(plan, which)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"public offset mu \+ F"):
            planner(
                _far_model(), np.linspace(0.0, 5.0, 3), epsilon=1.0, delta=1e-5, y_bounds=bounds
            )
        # an ordinary prior mean inside the bounds still plans
        ok = gp_regression(
            np.linspace(0.0, 5.0, 6), np.zeros(6), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.5
        )
        got = planner(ok, np.linspace(0.0, 5.0, 3), epsilon=1.0, delta=1e-5, y_bounds=(-1, 1))
    assert np.all(np.isfinite(got.noise_sd)) and np.all(got.noise_sd > 0)


def test_an_all_releases_posterior_too_large_to_hold_is_refused_before_the_charge():
    """``posterior="all_releases"`` (the default) conditions on every release: its last round
    holds four n × n matrices for n ≈ T records (here T = 2·10⁵: 1.6·10¹¹ doubles).  The
    loop charged the whole run and would have raised ``MemoryError`` in a late round."""
    import json

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.workflow import dp_thompson_sampling_tree

    calls = []

    def objective(X):
        # the initial design is observed before the plan; a later call ends the old code's
        # run at round 1 (after its charge) instead of running 2·10⁵ rounds
        calls.append(len(X))
        if len(calls) > 1:
            raise RuntimeError("round 1 reached")
        return np.sin(3.0 * X[:, 0])

    ledger = Ledger(epsilon=3.0, delta=1e-5)
    rng = np.random.default_rng(1)
    before = json.dumps(rng.bit_generator.state, sort_keys=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="all-releases posterior of 200000 rounds"):
            dp_thompson_sampling_tree(
                objective,
                pm.gp.cov.ExpQuad(1, ls=0.3),
                domain=(0.0, 1.0),
                X_init=np.array([[0.1], [0.5], [0.9]]),
                n_rounds=200_000,
                noise_sd=0.1,
                inducing=10,
                y_bounds=(-1.0, 1.0),
                ledger=ledger,
                rng=rng,
                progressbar=False,
            )
    assert len(ledger.history) == 0 and calls == [3]
    assert json.dumps(rng.bit_generator.state, sort_keys=True) == before


def test_a_dirichlet_export_refuses_the_training_inputs_as_x_star():
    """The stop-45 audit made the sparse-GP q(u) export refuse its training inputs as
    ``X_star`` (they would be published in ``constant_data``); a Dirichlet release is a
    ``SparseQuRelease`` too but kept no reference to its data, so it published them."""
    from pm_dpgp.mechanisms import dirichlet_release
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
    from pm_dpgp.workflow.ppc import PrivateDataError

    rng = np.random.default_rng(2)
    X = rng.uniform(-4, 4, 300)
    lab = np.where(X < -1.5, 0, np.where(X < 1.5, 1, 2))
    pub = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-4, 4, 8), noise_sd=1.0
    ).public_sparse_gp()
    rel = dirichlet_release(
        pub, (X, lab), n_classes=3, epsilon=3.0, delta=1e-4, rng=np.random.default_rng(0)
    )
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    for X_star in (X, X[:50], X[:, None]):
        with pytest.raises(PrivateDataError, match="training input"):
            rel.to_inference_data(X_star, rng=gen)
    assert gen.bit_generator.state == state
    rel.to_inference_data(X.copy(), n_draws=3, rng=gen)  # a copy is not recognised (identity)


def test_copies_of_a_release_refuse_the_training_outputs_too():
    """Stop-45 review: ``copy.copy`` / ``copy.deepcopy`` went through ``__getstate__``, which
    drops the weak references (so that nothing is pickled), and a copy of a cloaked release
    at the training inputs exported the training outputs its original refuses."""
    import copy

    from pm_dpgp.mechanisms import cloaked_release, noise_aware_release
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression
    from pm_dpgp.workflow import PrivateDataError

    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    y = np.clip(np.sin(X) + 0.3 * rng.standard_normal(30), -1.9, 1.9)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    release = cloaked_release(
        model, X, epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), rng=np.random.default_rng(1)
    )
    for twin in (copy.copy(release), copy.deepcopy(release)):
        assert twin is not release and twin.training_source() is model
        np.testing.assert_array_equal(twin.draws, release.draws)
        with pytest.raises(PrivateDataError, match="private training output"):
            twin.to_inference_data(
                observed_data={"y": y}, observed_is_public=True, predictive_sd=0.3,
                rng=np.random.default_rng(2),
            )  # fmt: skip
    assert copy.deepcopy(release).draws is not release.draws  # a deep copy of the fields
    Z = grid_inducing_points(0.0, 6.0, 6)
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=Z, noise_sd=0.3
    ).public_sparse_gp()
    qu = noise_aware_release(
        public, (X, y), epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(4),
    )  # fmt: skip
    for twin in (copy.copy(qu), copy.deepcopy(qu)):
        with pytest.raises(PrivateDataError, match="training input"):
            twin.to_inference_data(X, rng=np.random.default_rng(5))


def test_a_sample_path_release_refuses_the_training_inputs_as_x_star():
    """Under full privacy the release publishes its ``X_star`` (and every export does): the
    training input array itself, a view of it or the model's own array was accepted and
    published, while the export of the same release refuses it (stop-45 release audit).
    Refused by identity or shared memory before anything is read, spent or drawn; a public
    array with other values is released."""
    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import sample_path_release
    from pm_dpgp.workflow import PrivateDataError

    X = np.linspace(0.0, 1.0, 12)
    y = np.sin(3.0 * X)
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=2.0)
    kw = dict(kernel_scale=1.0, y_bounds=(-2.0, 2.0), delta=1e-5, epsilon=1e9, domain=(0.0, 1.0))
    ledger = Ledger()
    rng = np.random.default_rng(1)
    before = rng.bit_generator.state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for X_star in (X, X[:4], X[:, None], model.X):
            with pytest.raises(PrivateDataError, match="private training input"):
                sample_path_release(model, X_star, ledger=ledger, rng=rng, **kw)
        assert len(ledger.history) == 0 and rng.bit_generator.state == before
        rel = sample_path_release(model, np.linspace(0.05, 0.95, 4), ledger=ledger, rng=rng, **kw)
    assert len(ledger.history) == 1 and rel.metadata["privacy_model"] == "full"
