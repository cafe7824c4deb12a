"""Stop-30 bad-input audit: each test fails on the code before the fix it guards.

An independent search of the public API (about 650 cases) found calls that charged the ledger
or advanced the caller's Generator before failing on a public argument, errors that quoted a
private observed value, a refusal that depended on one private record's content, and a few
silent or unclear answers.  The rules (developers' guide, "Standards"; ``docs/errors.md``):
bad input gets a clear error; a failed call spends no budget and draws no noise; errors never
reveal private values.
"""

from __future__ import annotations

import traceback
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import ConvergenceWarning
from pm_dpgp.accounting import Ledger, PrivacyModelMismatchError
from pm_dpgp.mechanisms import (
    binned_gp,
    binned_release,
    cloaked_release,
    make_bins,
    noise_aware_release,
    sample_path_release,
)
from pm_dpgp.models import (
    gp_regression,
    grid_inducing_points,
    nonstationary_gp_regression,
    sparse_gp_regression,
)
from pm_dpgp.selection import product_grid, select_by_cross_validated_sse, select_by_sample_paths
from pm_dpgp.workflow import ObjectiveError, dp_thompson_sampling, dp_thompson_sampling_tree

PLANTED = 123.456789  # a distinctive private value: it must never appear in an error


def _untouched(ledger: Ledger, rng: np.random.Generator, state: dict) -> None:
    assert len(ledger.history) == 0 and ledger.spent_epsilon == 0.0
    assert rng.bit_generator.state == state


def _full_text(err: BaseException) -> str:
    """Everything a formatted traceback shows, including chained exceptions."""
    return "".join(traceback.format_exception(err))


# ----------------------------------------------------------------------- sample-path release
@pytest.fixture(scope="module")
def sample_path_model():
    X = np.linspace(0.05, 0.95, 20)
    return gp_regression(X, np.sin(3 * X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=2.0)


SP_KW = dict(
    n_draws=1, kernel_scale=1.0, y_bounds=(-2.0, 2.0), delta=1e-5, domain=(0.0, 1.0), epsilon=40.0
)


@pytest.mark.parametrize(
    ("X_star", "extra", "match"),
    [
        ([[0.5]], {"nugget": -1.0}, "nugget"),  # was: released with a negative nugget
        (np.linspace(0, 1, 4)[:, None], {"nugget": -1.0}, "nugget"),  # was: spent, then failed
        ([[0.5]], {"nugget": float("nan")}, "nugget"),
        ([[0.5]], {"nugget": float("inf")}, "nugget"),
        ([[1e308]], {}, "X_star"),  # squared distances overflow: was spent, then failed
    ],
)
def test_sample_path_release_refuses_public_settings_before_the_spend(
    sample_path_model, X_star, extra, match
):
    ledger = Ledger(epsilon=100.0, delta=1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=match):
        sample_path_release(sample_path_model, X_star, ledger=ledger, rng=rng, **SP_KW, **extra)
    _untouched(ledger, rng, state)


def test_select_by_sample_paths_refuses_an_overflowing_x_star_before_the_spend():
    X = np.linspace(0.02, 0.98, 40)
    model = gp_regression(
        X, np.sin(3 * X), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 4)), noise_sd=2.0
    )
    ledger = Ledger(epsilon=1e4, delta=1e-3, filter="renyi")
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    # was: charged ε = 36.6, then "did not match its plan after the spend ... Please report"
    with pytest.raises(ValueError, match="X_star"):
        select_by_sample_paths(
            model,
            product_grid({"ell": [0.2, 0.5]}),
            None,
            X_star=[[0.5], [1e308]],
            domain=(0.0, 1.0),
            y_bounds=(-2.0, 2.0),
            epsilon=40.0,
            delta=1e-5,
            kernel_scale=1.0,
            eta=1.0,
            gamma=0.5,
            ledger=ledger,
            rng=rng,
        )
    _untouched(ledger, rng, state)


# --------------------------------------------------------- private data given as text
def _text_neighbours():
    y = np.sin(np.linspace(0.1, 5.9, 40))
    parses = np.array([str(v) for v in y])
    does_not = parses.copy()
    does_not[3] = f"{PLANTED}?"
    return parses, does_not


def test_private_text_is_refused_by_its_type_whatever_it_says():
    """Both neighbours (every entry parses / one does not) get the same refusal, before any
    spend, and no trace of the entry stays attached (``__context__``)."""
    X = np.linspace(0.1, 5.9, 40)
    public = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.5), Z=grid_inducing_points(0, 6, 6), noise_sd=0.3
    ).public_sparse_gp()
    bins = make_bins(np.linspace(0.0, 6.0, 5))
    calls = {
        "noise_aware": lambda y, led: noise_aware_release(
            public, (X, y), epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), ledger=led,
            rng=np.random.default_rng(0),
        ),
        "binned": lambda y, led: binned_release(
            X[:, None], y, bins, epsilon=1.0, y_bounds=(-2, 2), ledger=led,
            rng=np.random.default_rng(0),
        ),
    }  # fmt: skip
    for name, call in calls.items():
        messages = []
        for y in _text_neighbours():
            ledger = Ledger(epsilon=10.0, delta=1e-3)
            with pytest.raises(TypeError, match="text") as info:
                call(y, ledger)
            assert len(ledger.history) == 0, name
            assert info.value.__context__ is None, name
            assert str(PLANTED) not in _full_text(info.value), name
            messages.append(str(info.value))
        assert messages[0] == messages[1], name  # the refusal says nothing about the record


def test_complex_inputs_are_refused_not_cast():
    X = np.linspace(0.0, 5.0, 10)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)
    with pytest.raises(TypeError, match="complex"):
        cloaked_release(model, np.array([[1.0 + 2.0j]]), epsilon=1.0, delta=1e-3,
                        y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip


# ------------------------------------------------------------------- Thompson loops
COV = pm.gp.cov.ExpQuad(1, ls=0.2)
LOOP = dict(
    domain=(0.0, 1.0),
    X_init=[[0.2], [0.8]],
    n_rounds=3,
    noise_sd=1.0,
    y_bounds=(-1.5, 1.5),
    candidates=32,
    progressbar=False,
)
LOOPS = {
    "sample_path": lambda obj, led, rng, **kw: dp_thompson_sampling(
        obj, COV, ledger=led, rng=rng, **{**LOOP, **kw}
    ),
    "tree": lambda obj, led, rng, **kw: dp_thompson_sampling_tree(
        obj, COV, ledger=led, rng=rng, epsilon=2.0, inducing=8, **{**LOOP, "noise_sd": 0.5, **kw}
    ),
}


def _objective(bad_from_call: int, bad):
    calls = {"n": 0}

    def objective(X):
        calls["n"] += 1
        return bad(X) if calls["n"] >= bad_from_call else np.sin(6 * X[:, 0])

    return objective


def _as_text(X):
    return [f"{PLANTED:.6f} cm" for _ in range(len(X))]


def _one_too_many(X):
    return np.r_[np.sin(6 * X[:, 0]), 0.0]


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_text_observations_are_refused_without_quoting_them(loop):
    ledger = Ledger(epsilon=200.0, delta=1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(TypeError, match="text") as info:  # the initial design: before any charge
        LOOPS[loop](_objective(1, _as_text), ledger, rng)
    assert str(PLANTED) not in _full_text(info.value)
    _untouched(ledger, rng, state)


@pytest.mark.parametrize("bad", [_as_text, _one_too_many])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_an_objective_failing_mid_run_returns_what_was_charged(loop, bad):
    """Round 2's observation fails after charges were made: the error carries the completed
    rounds (which the charges paid for) and quotes no observed value."""
    ledger = Ledger(epsilon=200.0, delta=1e-3)
    with pytest.raises(ObjectiveError) as info:
        LOOPS[loop](_objective(3, bad), ledger, np.random.default_rng(0))
    err = info.value
    assert str(PLANTED) not in _full_text(err)
    assert err.result.stop_reason == "objective_error"
    assert err.result.n_rounds == 1 and err.result.x_chosen.shape == (1, 1)
    assert err.result.ledger is ledger and len(ledger.history) >= 1
    assert err.result.idata is not None
    assert isinstance(err.__cause__, TypeError | ValueError)


@pytest.mark.parametrize(
    "setting",
    [
        {"eta": -1.0},
        {"kernel_class": "foo"},
        {"sensitivity": "foo"},
        {"kernel_class": "exponential_1d"},  # not the class of ExpQuad
    ],
)
def test_thompson_settings_are_checked_before_the_first_random_number(setting):
    ledger = Ledger(epsilon=200.0, delta=1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError):
        LOOPS["sample_path"](lambda X: np.sin(6 * X[:, 0]), ledger, rng, **setting)
    _untouched(ledger, rng, state)


@pytest.mark.parametrize(
    "setting",
    [
        {"n_rounds": float("nan")},
        {"n_rounds": None},
        {"n_rounds": True},
        {"n_rounds": np.True_},
        {"domain": ((0.0, 0.0), (1.0, 1.0))},  # a 2-D box for 1-D inputs
    ],
)
def test_thompson_loop_arguments_get_clear_errors(setting):
    ledger = Ledger(epsilon=200.0, delta=1e-3)
    with pytest.raises(ValueError, match="n_rounds|domain"):
        LOOPS["sample_path"](lambda X: np.sin(6 * X[:, 0]), ledger, np.random.default_rng(0),
                             **setting)  # fmt: skip
    assert len(ledger.history) == 0


# ------------------------------------------------------------------------------ export
@pytest.mark.parametrize(
    "bad",
    [
        {"dims": {"f_dp": ["a", "b"]}},
        {"dims": {"f_dp": ["age"]}, "coords": {"age": [1, 2]}},
        {"predictive_sd": np.ones(3)},
        # the review's cases that NumPy's broadcasting or xarray refused after the draw
        {"dims": {"f_dp": ["draw"]}},
        {"dims": {"f_dp": ["age"]}, "coords": {"age": np.ones((5, 2))}},
        {"predictive_sd": np.full((2, 1, 1, 1), 0.3)},
        {"predictive_sd": np.full((3, 1, 5), 0.3)},
    ],
)
def test_export_checks_its_arguments_before_drawing_predictive_noise(bad):
    _export_refused(bad, "dims|coords|predictive_sd")


def _export_refused(bad: dict, match: str) -> None:
    """``to_inference_data`` of a small cloaked release refuses ``bad`` before any draw."""
    X = np.linspace(0, 5, 30)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)
    release = cloaked_release(model, np.linspace(0, 5, 5)[:, None], epsilon=1.0, delta=1e-3,
                              y_bounds=(-2, 2), rng=np.random.default_rng(0))  # fmt: skip
    g = np.random.default_rng(7)
    state = g.bit_generator.state
    with pytest.raises(ValueError, match=match):
        release.to_inference_data(**{"predictive_sd": 0.3, **bad}, rng=g)
    assert g.bit_generator.state == state


# ------------------------------------------------------------- clear errors, nothing silent
@pytest.fixture(scope="module")
def binned():
    X = np.linspace(0, 1, 40)[:, None]
    return X, np.sin(3 * X[:, 0]), make_bins(np.linspace(0, 1, 5))


def test_a_clipping_range_whose_width_overflows_is_refused(binned):
    X, y, bins = binned
    with pytest.raises(ValueError, match="overflows"):  # was: "empty_value must be finite"
        binned_release(X, y, bins, epsilon=1.0, y_bounds=(-1e308, 1e308),
                       rng=np.random.default_rng(0))  # fmt: skip


def test_secure_binning_refuses_an_epsilon_beyond_64_bit_integers(binned):
    X, y, bins = binned
    ledger = Ledger(epsilon=1e301, delta=1e-3)
    with pytest.raises(ValueError, match="64-bit"):  # was OpenDP's "… is not representable"
        binned_release(X, y, bins, epsilon=1e300, y_bounds=(-2, 2), ledger=ledger)
    assert len(ledger.history) == 0


def test_binned_gp_refuses_a_non_finite_prior_mean(binned):
    X, y, bins = binned
    release = binned_release(X, y, bins, epsilon=1.0, y_bounds=(-2, 2),
                             rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="mean"):  # was: every draw NaN
        binned_gp(release, [[0.5]], lengthscale=0.3, kernel_scale=1.0, noise_sd=0.3,
                  mean=float("nan"))  # fmt: skip


def test_fractional_fold_indices_are_refused_not_truncated():
    X = np.linspace(0, 1, 40)
    model = gp_regression(
        X, np.sin(3 * X), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)), noise_sd=0.3
    )
    ledger = Ledger(10.0, 1e-3)
    with pytest.raises(ValueError, match="integer row indices"):
        select_by_cross_validated_sse(
            model, product_grid({"ell": [0.5, 2.0]}), epsilon=1.0, y_bounds=(-2, 2),
            ledger=ledger, folds=[np.arange(20) + 0.7, np.arange(20, 40)],
            rng=np.random.default_rng(0),
        )  # fmt: skip
    assert len(ledger.history) == 0


def test_a_boolean_is_not_a_privacy_parameter():
    X = np.linspace(0, 1, 20)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    with pytest.raises(ValueError, match="boolean"):  # was: ε = 1
        cloaked_release(model, [[0.5]], epsilon=True, delta=1e-3, y_bounds=(-2, 2),
                        rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="boolean"):
        Ledger(epsilon=True, delta=1e-3)
    with pytest.raises(ValueError, match="boolean"):
        Ledger(epsilon=1.0, delta=True)


@pytest.mark.parametrize("text", ["1.0", b"1.0", np.str_("0.5")])
def test_text_is_not_a_privacy_parameter_even_when_it_parses(text, tmp_path):
    """Stop-39 walkthrough: ``epsilon="1.0"`` was parsed and charged as 1.0 by the releases, the
    selections and both ledgers, though docs/errors.md refuses text (even when it would parse)
    everywhere else.  Now a ``ValueError`` before anything is spent or drawn."""
    from pm_dpgp.accounting import PersistentLedger, dataset_fingerprint

    X = np.linspace(0, 1, 20)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    ledger = Ledger(10.0, 1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    for kw in ({"epsilon": text, "delta": 1e-3}, {"epsilon": 1.0, "delta": text}):
        with pytest.raises(ValueError, match="got text"):
            cloaked_release(model, [[0.5]], **kw, y_bounds=(-2, 2), ledger=ledger, rng=rng)
        with pytest.raises(ValueError, match="got text"):
            Ledger(**kw)
        with pytest.raises(ValueError, match="got text"):
            PersistentLedger(tmp_path / "ledger.json", dataset_fingerprint("d1"), **kw)
    with pytest.raises(ValueError, match="got text"):
        select_by_cross_validated_sse(
            gp_regression(X, np.sin(X), lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
                          noise_sd=0.3),
            product_grid({"ell": [0.5, 2.0]}), epsilon=text, y_bounds=(-2, 2), ledger=ledger,
            rng=rng,
        )  # fmt: skip
    assert ledger.history == [] and rng.bit_generator.state == state
    reopened = PersistentLedger(tmp_path / "ledger.json", dataset_fingerprint("d1"), 1.0, 1e-3)
    assert reopened.history == [] and reopened.epsilon_budget == 1.0


def test_test_points_where_the_cloaking_matrix_vanishes_get_a_clear_error():
    X = np.linspace(0, 1, 40)
    model = nonstationary_gp_regression(
        X, np.sin(3 * X), lambda x: 0.3 + 0.0 * x[:, 0], kernel_scale=1.0, noise_sd=0.3
    )
    with pytest.raises(ValueError, match="nothing to cloak"):  # was: "argmax of an empty …"
        cloaked_release(model, [[1e200]], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2),
                        rng=np.random.default_rng(0))  # fmt: skip


def test_the_trace_design_survives_a_public_near_duplicate_input():
    """A multiplicative step of the trace solver underflowed a weight and the design went
    singular: ``LinAlgError`` on a public configuration (stop-30 privacy audit, nothing was
    charged).  The solver now keeps the last nonsingular design; the release is certified."""
    rng = np.random.default_rng(7)
    X = np.r_[np.sort(rng.uniform(0, 10, 37)), [30.0, 30.0, 30.0 + 1e-9]]
    model = gp_regression(
        X, rng.uniform(-2, 5, 40), pm.gp.cov.ExpQuad(1, ls=0.1), noise_sd=0.3, mean=0.0
    )
    X_star = np.r_[np.linspace(-2, 12, 20), [30.0, 1e3]]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        release = cloaked_release(model, X_star, epsilon=1.0, delta=1e-5, y_bounds=(-2, 5),
                                  design="trace", rng=np.random.default_rng(0))  # fmt: skip
    gap = release.metadata["solver_gap_bound"]
    assert np.isfinite(gap) and gap >= 0.0
    # an early stop is never silent (stop 31): the ConvergenceWarning iff not converged
    warned = any(issubclass(w.category, ConvergenceWarning) for w in rec)
    assert warned == (not release.metadata["solver_converged"])
    assert np.all(np.isfinite(release.draws))


def test_the_trace_design_survives_a_singular_initial_rescale():
    """The stop-30 review's seed 11 of a fuzz over public near-duplicate inputs: the first
    rescale ``λ ← start ⊙ h²`` of the trace solver underflowed a weight (``h² ≈ 1e-14``)."""
    rng = np.random.default_rng(11)
    n0 = int(rng.integers(10, 50))
    ls = float(rng.choice([0.05, 0.1, 0.3, 1.0]))
    base = np.sort(rng.uniform(0, 10, n0))
    far = float(rng.uniform(12, 100))
    spacing = float(rng.choice([1e-12, 1e-10, 1e-9, 1e-7, 1e-5]))
    n_dup = int(rng.integers(2, 6))
    X = np.r_[base, far + spacing * np.arange(n_dup), base[: int(rng.integers(0, 3))] + spacing]
    noise_sd = float(rng.choice([0.01, 0.1, 0.3]))
    model = gp_regression(
        X, rng.uniform(-2, 5, len(X)), pm.gp.cov.ExpQuad(1, ls=ls), noise_sd=noise_sd, mean=0.0
    )
    X_star = np.r_[np.linspace(-2, 12, int(rng.integers(5, 30))), [far, far + 1e-3, 1e3]]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        release = cloaked_release(model, X_star, epsilon=1.0, delta=1e-5, y_bounds=(-2, 5),
                                  design="trace", rng=np.random.default_rng(0))  # fmt: skip
    gap = release.metadata["solver_gap_bound"]
    assert np.isfinite(gap) and gap >= 0.0
    # an early stop is never silent (stop 31): the ConvergenceWarning iff not converged
    warned = any(issubclass(w.category, ConvergenceWarning) for w in rec)
    assert warned == (not release.metadata["solver_converged"])


def test_thompson_refuses_a_ledger_of_the_other_privacy_model_before_drawing():
    """A ledger holding label-private releases: the refusal came inside round 1, after its
    candidates were drawn (stop-30 review); now before the first random number."""
    X = np.linspace(0, 1, 20)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=0.3), noise_sd=0.3)
    ledger = Ledger(epsilon=200.0, delta=1e-3, filter="renyi")
    cloaked_release(model, [[0.5]], epsilon=1.0, delta=1e-4, y_bounds=(-2, 2), ledger=ledger,
                    rng=np.random.default_rng(99))  # fmt: skip
    entries = len(ledger.history)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(PrivacyModelMismatchError):
        LOOPS["sample_path"](lambda X: np.sin(6 * X[:, 0]), ledger, rng)
    assert len(ledger.history) == entries and rng.bit_generator.state == state


def test_secure_binning_refuses_bin_sums_beyond_its_integer_range(binned):
    """200 labels at the upper bound, ε = 1e12: the sums on the grid were clamped silently
    and the bin mean 2 released as 0.04 (stop-30 review); refused before the charge now."""
    bins = make_bins(np.array([0.0, 1.0]))
    ledger = Ledger(epsilon=1e13, delta=1e-3)
    with pytest.raises(ValueError, match="64-bit"):
        binned_release(np.full((200, 1), 0.5), np.full(200, 2.0), bins, epsilon=1e12,
                       y_bounds=(-2, 2), ledger=ledger)  # fmt: skip
    assert len(ledger.history) == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"observed_data": {"x_star": np.zeros(5)}, "observed_is_public": True},  # a dim's name
        {"observed_data": {"a/b": np.zeros(5)}, "observed_is_public": True},  # DataTree path
        {"dims": {"f_dp": ["a/b"]}},
    ],
)
def test_export_refuses_names_arviz_would_drop_or_reject(bad):
    """A variable named like a dim silently lost the DP draws (ArviZ 0.x) or failed in xarray
    after the noise was drawn; '/' fails in ArviZ 1's DataTree (stop-30 review)."""
    _export_refused(bad, "name")


@pytest.mark.parametrize(
    "bad",
    [
        {"dims": {"f": ["draw"]}},
        {"predictive_sd": np.ones(3)},
        {"dims": {"f": ["x"]}, "coords": {"x": [1, 2]}},
    ],
)
def test_noise_aware_export_checks_its_arguments_before_sampling(bad):
    """``SparseQuRelease.to_inference_data`` sampled ``f`` from the caller's Generator before
    any check of dims, coords or predictive_sd (stop-30 review)."""
    from tests import releases

    release = releases.noise_aware()
    g = np.random.default_rng(5)
    state = g.bit_generator.state
    with pytest.raises(ValueError):
        release.to_inference_data(np.linspace(-3, 3, 11), n_draws=10, rng=g, **bad)
    assert g.bit_generator.state == state


def test_dates_mixed_into_numbers_are_refused():
    from pm_dpgp._validation import check_finite_array, private_array

    mixed = [np.datetime64("2020-01-01"), 1.0]  # NumPy read the date as its raw day count
    with pytest.raises(TypeError, match="dates"):
        check_finite_array(mixed, "X_star")
    with pytest.raises(TypeError, match="dates"):
        private_array(mixed, "y", ndim=1)


def test_label_release_metadata_is_json_serialisable(binned):
    """``Release.metadata`` holds JSON-serialisable values only (its docstring); binning and
    classification stored NumPy arrays, and ``json.dumps`` raised (stop-30 serialisation
    audit, which found no private value in any release)."""
    import json

    from pm_dpgp.mechanisms import classification_release
    from pm_dpgp.models import gp_classification

    X, y, bins = binned
    release = binned_release(X, y, bins, epsilon=1.0, y_bounds=(-2, 2),
                             rng=np.random.default_rng(0))  # fmt: skip
    gp = binned_gp(release, [[0.5]], lengthscale=0.3, kernel_scale=1.0, noise_sd=0.3)
    Xc = np.linspace(0, 10, 30)[:, None]
    labels = (np.sin(Xc[:, 0]) > 0).astype(float)
    clf = classification_release(
        gp_classification(Xc, labels, pm.gp.cov.ExpQuad(1, ls=1.0)), Xc[::3], epsilon=1.0,
        delta=1e-3, rng=np.random.default_rng(0),
    )  # fmt: skip
    for r in (release, gp, clf):
        json.dumps(r.metadata)


def test_noise_aware_export_refuses_a_var_name_that_is_taken():
    """Stop-31 review: ``var_name="u"`` made the ``u`` draws silently replace ``f``."""
    from pm_dpgp.mechanisms import noise_aware_release
    from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

    X = np.linspace(-3.0, 3.0, 40)
    model = sparse_gp_regression(
        X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3, 3, 5), noise_sd=0.1
    )
    rel = noise_aware_release(model, epsilon=1.0, delta=1e-5, y_bounds=(-2, 2),
                              rng=np.random.default_rng(0))  # fmt: skip
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="already a variable"):
        rel.to_inference_data(np.linspace(-2, 2, 3), n_draws=5, rng=rng, var_name="u")
    assert rng.bit_generator.state == state


def _small_path_release():
    """Three released path values of a small exact GP (the exports are under test)."""
    from pm_dpgp.mechanisms.full.sample_path import sample_path_release

    X = np.linspace(0.0, 6.0, 20)
    model = gp_regression(X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3, mean=0.0)
    return sample_path_release(
        model, np.array([[0.5], [2.5], [4.5]]), kernel_scale=1.0, y_bounds=(-2, 2), delta=1e-5,
        eta=1.0,
        domain=(0.0, 6.0), epsilon=1e6, rng=np.random.default_rng(0),
    )  # fmt: skip


def test_sample_path_export_says_to_pass_the_inputs_by_keyword():
    """Stop-31 walkthrough: ``rel.to_inference_data(X_new)``, as written for the noise-aware
    release, raised "unhashable type: 'numpy.ndarray'" on a sample-path release."""
    rel = _small_path_release()
    with pytest.raises(TypeError, match=r"to_inference_data\(X_star=X_new\)"):
        rel.to_inference_data(np.linspace(0.0, 6.0, 4)[:, None])
    assert "f_path" in rel.to_inference_data(X_star=np.linspace(0.0, 6.0, 4)[:, None]).posterior


def test_sample_path_export_takes_var_name_like_the_other_exports():
    """Stop-31 walkthrough: the q(u) export and dp_ppc take ``var_name=``, the sample-path
    export only ``variable_name``; both names now work there, and two different ones are
    refused."""
    rel = _small_path_release()
    assert "g" in rel.to_inference_data(var_name="g").posterior
    assert "g" in rel.to_inference_data("g").posterior
    with pytest.raises(TypeError, match="pass one of them"):
        rel.to_inference_data("g", var_name="h")


def test_one_row_given_as_a_1d_array_gets_a_message_about_the_shape_passed():
    """Stop-39 walkthrough: ``X_star = X[0]`` (one point of a 3-input model, shape (3,)) was
    refused as "got shape (3, 1)", a shape the caller never passed."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(20, 3))
    model = gp_regression(X, rng.uniform(size=20), pm.gp.cov.ExpQuad(3, ls=1.0), noise_sd=0.3)
    with pytest.raises(ValueError, match=r"read as 3 points of one input.*X_star\[None, :\]"):
        cloaked_release(model, X[0], epsilon=1.0, delta=1e-3, y_bounds=(0, 1), rng=rng)
    with pytest.raises(ValueError, match=r"got shape \(4, 1\); pass") as info:
        cloaked_release(model, X[0, :2].tolist() * 2, epsilon=1.0, delta=1e-3, y_bounds=(0, 1),
                        rng=rng)  # fmt: skip
    assert "None" not in str(info.value)


def test_pandas_objects_with_different_indexes_are_not_paired_by_position():
    """Stop-39 walkthrough: a shuffled ``y`` Series beside a data frame ``X`` was paired by
    position, silently (the release equalled the one on the mispaired arrays).  Builders, the
    noise-aware release (tuple and chunks) and the full-privacy selections now refuse two
    pandas objects whose indexes differ, before anything is spent or drawn; aligned ones and
    arrays pass."""
    pd = pytest.importorskip("pandas")
    from pm_dpgp.mechanisms import noise_aware_release
    from pm_dpgp.models import grid_inducing_points
    from pm_dpgp.selection.private_data import check_data_schema

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.uniform(-3, 3, 60)})
    df["y"] = np.sin(df["x"])
    shuffled = df["y"].sample(frac=1, random_state=0)
    with pytest.raises(ValueError, match="different indexes"):
        gp_regression(df[["x"]], shuffled, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)
    with pytest.raises(ValueError, match="different indexes"):
        check_data_schema(df[["x"]], shuffled, 1)
    base = sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3.5, 3.5, 6),
        noise_sd=0.3,
    )  # fmt: skip
    ledger = Ledger(10.0, 1e-5)
    gen = np.random.default_rng(1)
    state = gen.bit_generator.state
    for data in ((df[["x"]], shuffled), [(df[["x"]], shuffled)]):
        with pytest.raises(ValueError, match="different indexes"):
            noise_aware_release(base, data, epsilon=1.0, delta=1e-6, y_bounds=(-3.0, 3.0),
                                ledger=ledger, rng=gen)  # fmt: skip
    assert ledger.history == [] and gen.bit_generator.state == state
    aligned = noise_aware_release(
        base,
        (df[["x"]], shuffled.loc[df.index]),
        epsilon=1.0,
        delta=1e-6,
        y_bounds=(-3.0, 3.0),
        rng=np.random.default_rng(2),
    )
    arrays = noise_aware_release(
        base,
        (df[["x"]].to_numpy(), df["y"].to_numpy()),
        epsilon=1.0,
        delta=1e-6,
        y_bounds=(-3.0, 3.0),
        rng=np.random.default_rng(2),
    )
    np.testing.assert_array_equal(aligned.u_mean, arrays.u_mean)
    gp_regression(df[["x"]], df["y"], pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)
    gp_regression(df[["x"]].to_numpy(), shuffled, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3)


def test_a_prior_mean_outside_the_bounds_is_warned_about_before_the_spend():
    """Stop-39 walkthrough: the noise-aware and sample-path releases centre the clipped outputs
    at the prior mean; with mean 0 and ``y_bounds = (1, 3)`` the residual bound (and the noise)
    was 3 times the half-width, silently.  Public settings only: a PrivacyWarning before the
    spend, none for a mean inside the bounds."""
    from pm_dpgp import PrivacyWarning
    from pm_dpgp.mechanisms import noise_aware_release, sample_path_release
    from pm_dpgp.models import grid_inducing_points

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, 200)
    y = 2.0 + np.sin(X)
    for mean, warned in ((0.0, True), (2.0, False)):
        base = sparse_gp_regression(
            None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3.5, 3.5, 6),
            noise_sd=0.3, mean=mean,
        )  # fmt: skip
        exact = gp_regression(X[:40], y[:40], pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.3,
                              mean=mean)  # fmt: skip
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            noise_aware_release(base, (X, y), epsilon=1.0, delta=1e-6, y_bounds=(1.0, 3.0),
                                rng=np.random.default_rng(1))  # fmt: skip
            sample_path_release(exact, np.linspace(-3, 3, 5), y_bounds=(1.0, 3.0), delta=1e-5,
                                kernel_scale=1.0, domain=(-3.0, 3.0), ledger=Ledger(),
                                rng=np.random.default_rng(2))  # fmt: skip
        found = [
            str(w.message)
            for w in caught
            if issubclass(w.category, PrivacyWarning) and "lies outside" in str(w.message)
        ]
        assert len(found) == (2 if warned else 0), found
        if warned:
            assert "|y - mean| <= 3 " in found[0] and "3 times the half-width" in found[0]
