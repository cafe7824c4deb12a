"""Stop-32 bad-input audit: each test fails on the code before the fix it guards.

Rules (developers' guide, "Standards"): a failed call spends no budget and draws no noise; a
refusal never depends on one private record; bad input gets a clear error, never a silent
wrong answer.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import (
    cloaked_release,
    dirichlet_release,
    noise_aware_release,
    sample_path_release,
)
from pm_dpgp.mechanisms.full.sample_path import _match_rows
from pm_dpgp.models import (
    dirichlet_gp_classification,
    gp_regression,
    grid_inducing_points,
    sparse_gp_regression,
)
from pm_dpgp.workflow import PrivateDataError, dp_ppc, dp_thompson_sampling_tree

X = np.linspace(0.0, 6.0, 12)
Y = np.sin(X)


def test_prefix_tree_loop_refuses_an_overflowing_posterior_before_its_charge():
    # noise_sd=1e-40: the whole run was charged (ε = 10) and noise drawn, then OverflowError
    ledger, rng = Ledger(epsilon=10, delta=1e-5), np.random.default_rng(1)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="Nothing was spent"):
        dp_thompson_sampling_tree(
            lambda Z: 0.5 * np.sin(6 * Z[:, 0]),
            pm.gp.cov.ExpQuad(1, ls=0.2),
            domain=(0.0, 1.0),
            X_init=[[0.2], [0.7]],
            n_rounds=3,
            y_bounds=(-1.0, 1.0),
            candidates=16,
            inducing=6,
            posterior="prefix",
            noise_sd=1e-40,
            ledger=ledger,
            rng=rng,
        )
    assert len(ledger.history) == 0 and rng.bit_generator.state == state


def test_match_rows_is_exact_and_linear_in_memory():
    rng = np.random.default_rng(0)
    for _ in range(200):
        d = int(rng.integers(1, 4))
        pool = rng.integers(-2, 3, size=(12, d)).astype(float)
        pool[rng.random(pool.shape) < 0.2] *= -0.0  # −0.0 equals 0.0
        old = pool[rng.integers(0, 12, int(rng.integers(0, 30)))]
        new = pool[rng.integers(0, 12, int(rng.integers(0, 30)))]
        found, where = _match_rows(new, old)
        if len(old) == 0:
            assert not found.any()
            continue
        eq = np.all(new[:, None, :] == old[None, :, :], axis=2)
        np.testing.assert_array_equal(found, eq.any(axis=1))
        np.testing.assert_array_equal(where[found], eq.argmax(axis=1)[found])
    # 20,000 × 20,000 rows: the (m, m, d) comparison held 800 MB (MemoryError after the charge)
    big = rng.uniform(size=(20_000, 2))
    tracemalloc.start()
    found, where = _match_rows(big[::-1], big)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert found.all() and np.array_equal(where, np.arange(20_000)[::-1])
    assert peak < 50e6


def test_sample_path_without_domain_checks_the_mapped_box_before_the_spend():
    # a Matérn lengthscale of 1e-55: a private input at inf (mapped to 1e100) made the kernel
    # NaN after the charge, while its clean neighbour was released
    with pm.Model() as pmm:
        Xd = pm.Data("Xd", X)
        model = gp_regression(Xd, pm.Data("yd", Y), pm.gp.cov.Matern52(1, ls=1e-55), noise_sd=2.0)
    for Xp in (X, np.where(np.arange(12) == 2, np.inf, X)):
        pm.set_data({"Xd": Xp}, model=pmm)
        ledger = Ledger(epsilon=100, delta=1e-5)
        with pytest.raises(ValueError, match="±1e100 box"):
            sample_path_release(
                model,
                [[0.5], [1.5]],
                kernel_scale=1.0,
                y_bounds=(-2, 2),
                delta=1e-5,
                kappa=0.0,
                ledger=ledger,
                rng=np.random.default_rng(1),
            )
        assert len(ledger.history) == 0


@pytest.mark.parametrize(
    "y_arg",
    [list(Y), Y.astype(np.float32), pd.Series(np.round(3 * Y).astype(np.int64))],
    ids=["list", "float32", "int-series"],
)
def test_dp_ppc_refuses_the_very_object_the_model_was_built_from(y_arg):
    # the builder stores a converted copy; passing the same object again published it
    model = gp_regression(X, y_arg, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    release = cloaked_release(
        model, X[:, None], epsilon=1, delta=1e-3, y_bounds=(-5, 5), rng=np.random.default_rng(0)
    )
    with pytest.raises(PrivateDataError):
        dp_ppc(release, X, y_arg, noise_sd=0.3, training=model, rng=np.random.default_rng(1))


def test_dp_ppc_checks_public_arguments_before_drawing():
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    release = cloaked_release(
        model, X[:, None], epsilon=1, delta=1e-3, y_bounds=(-5, 5), rng=np.random.default_rng(0)
    )
    hold = Y + 0.1
    for bad in ({"extra_sd": -1.0}, {"n_replicates": 0}, {"var_name": "chain"}):
        rng = np.random.default_rng(1)
        state = rng.bit_generator.state
        with pytest.raises(ValueError):
            dp_ppc(release, X, hold, noise_sd=0.3, training=model, rng=rng, **bad)
        assert rng.bit_generator.state == state


def test_labels_and_outputs_that_numpy_cannot_infer_are_mapped_like_nan():
    rng = np.random.default_rng(0)
    X2 = rng.uniform(size=(40, 1))
    Z = grid_inducing_points(0.0, 1.0, 5)
    for odd in (None, 2**64, 10**30):
        labels = list(np.arange(40) % 3)
        labels[5] = odd  # dtype object: it used to raise TypeError for this record only
        model = dirichlet_gp_classification(
            X2, labels, pm.gp.cov.ExpQuad(1, ls=0.3), Z=Z, n_classes=3
        )
        dirichlet_release(model, epsilon=1.0, delta=1e-3, rng=np.random.default_rng(1))
    pub = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=grid_inducing_points(0, 8, 6), noise_sd=0.3
    ).public_sparse_gp()
    y = [float(v) for v in np.sin(X)]
    releases = []
    for odd in (float("inf"), 10**400):  # the int raised OverflowError, inf was dropped
        y[5] = odd
        releases.append(
            noise_aware_release(
                pub,
                (X, list(y)),
                epsilon=1,
                delta=1e-3,
                y_bounds=(-2, 2),
                rng=np.random.default_rng(1),
            )
        )
    np.testing.assert_array_equal(releases[0].u_mean, releases[1].u_mean)


def test_masked_entries_are_missing_values():
    # the mask was ignored: a masked private y was released as its hidden .data, and a masked
    # X_star entry was released at its hidden value
    y = np.ma.masked_array(Y, mask=np.arange(12) == 3)
    y.data[3] = 1e6
    with pytest.raises(ValueError, match="NaN"):  # the builder's own check of its inputs
        gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    X_star = np.ma.masked_array(X[:3, None], mask=[[False], [True], [False]])
    with pytest.raises(ValueError, match="NaN"):
        cloaked_release(
            model, X_star, epsilon=1, delta=1e-3, y_bounds=(-5, 5), rng=np.random.default_rng(0)
        )
    # full privacy: a masked response is a missing one, mapped like NaN after the spend
    pub = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=grid_inducing_points(0, 8, 6), noise_sd=0.3
    ).public_sparse_gp()
    a, b = (
        noise_aware_release(
            pub, (X, yy), epsilon=1, delta=1e-3, y_bounds=(-2, 2), rng=np.random.default_rng(1)
        )
        for yy in (y, np.where(np.arange(12) == 3, np.nan, Y))
    )
    np.testing.assert_array_equal(a.u_mean, b.u_mean)


def test_noise_beyond_float64_is_refused_and_a_wide_range_publishes_finite_sds():
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3)
    ledger = Ledger(epsilon=100, delta=1e-3)
    with pytest.raises(ValueError, match="beyond float64"):  # was ZeroDivisionError
        cloaked_release(
            model,
            X[:3, None],
            epsilon=1,
            delta=1e-3,
            y_bounds=(-8e307, 8e307),
            ledger=ledger,
            rng=np.random.default_rng(0),
        )
    assert len(ledger.history) == 0
    with pytest.warns(Warning):
        release = cloaked_release(
            model,
            X[:3, None],
            epsilon=1,
            delta=1e-3,
            y_bounds=(-1e290, 1e290),
            rng=np.random.default_rng(0),
        )
    assert np.all(np.isfinite(release.noise_sd))  # the squares overflowed (inf published)
    F = release.noise_factor / 1e290
    np.testing.assert_allclose(release.noise_sd / 1e290, np.sqrt((F * F).sum(axis=1)), rtol=1e-12)


def test_masked_entries_are_missing_everywhere_and_never_fail_on_hidden_values():
    # stop-32 review: a masked object array holding 10**400 (masked or not) raised, Dirichlet
    # labels and the Liu–Talwar selection used the hidden .data
    from pm_dpgp._validation import float_array
    from pm_dpgp.models.sparse import sanitise_labels
    from pm_dpgp.selection.private_data import as_private_arrays

    hidden = np.ma.masked_array(np.array([1.0, 10**400, 2.0], dtype=object), mask=[0, 1, 0])
    out = float_array(hidden, "y", 1)
    assert out[0] == 1.0 and np.isnan(out[1]) and out[2] == 2.0
    labels = np.ma.masked_array([0, 1, 2, 1], mask=[0, 1, 0, 0])
    _, valid = sanitise_labels(labels, 3)
    np.testing.assert_array_equal(valid, [True, False, True, True])
    _, ya = as_private_arrays(np.zeros((3, 1)), np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0]))
    assert np.isnan(ya[1])
