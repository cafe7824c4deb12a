"""Stop-44 audit of the sample-path release and the tree/square-root Thompson loop.

Each test fails on the code before the fix it accompanies.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.sample_path import PrivateRows, sample_path_release
from pm_dpgp.mechanisms.full.sqrt_counter import sqrt_factor_coefficients
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import dp_thompson_sampling_tree


def _state(rng: np.random.Generator) -> str:
    return json.dumps(rng.bit_generator.state, sort_keys=True)


def test_a_release_too_large_to_factorise_is_refused_before_the_spend() -> None:
    """n = 3·10⁶ records: the packed training factor alone is 4.5·10¹² doubles (36 TB).

    The release charged the ledger and then raised ``MemoryError`` in the factorisation;
    the size is public (replace-one neighbours), so it is refused before the spend."""
    model = gp_regression(
        np.array([[0.2], [0.8]]),
        np.array([0.1, -0.1]),
        pm.gp.cov.ExpQuad(1, ls=0.3),
        noise_sd=2.0,
        mean=0.0,
        mean_is_public=True,
    )
    n = 3_000_000
    X = np.linspace(0.0, 1.0, n)[:, None]
    rows = PrivateRows(model.public_gp(), X, np.zeros(n))
    ledger = Ledger(epsilon=1e6, delta=1e-5)
    rng = np.random.default_rng(0)
    before = _state(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="more than this machine can hold"):
            sample_path_release(
                rows,
                np.array([[0.5]]),
                kernel_scale=1.0,
                y_bounds=(-1.0, 1.0),
                delta=1e-5,
                domain=(0.0, 1.0),
                ledger=ledger,
                rng=rng,
            )
    assert len(ledger.history) == 0
    assert _state(rng) == before


def test_a_square_root_counter_too_large_to_hold_is_refused_before_the_charge() -> None:
    """The square-root counter keeps every leaf: T × dim doubles (here 10⁷ × 45,450).

    The loop charged the whole run and then raised ``MemoryError`` in ``SqrtCounter``."""
    ledger = Ledger(epsilon=3.0, delta=1e-5)
    rng = np.random.default_rng(1)
    before = _state(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="more than this machine can hold"):
            dp_thompson_sampling_tree(
                lambda X: np.sin(3.0 * X[:, 0]),
                pm.gp.cov.ExpQuad(1, ls=0.3),
                domain=(0.0, 1.0),
                X_init=np.array([[0.1], [0.5], [0.9]]),
                n_rounds=10_000_000,
                noise_sd=0.1,
                inducing=300,  # M = 300: dim = M + M(M + 1)/2 = 45,450 for posterior="prefix"
                y_bounds=(-1.0, 1.0),
                ledger=ledger,
                counter="sqrt",
                posterior="prefix",
                rng=rng,
                progressbar=False,
            )
    assert len(ledger.history) == 0
    assert _state(rng) == before


@pytest.mark.parametrize("T", [10, 100, 1000, 100_000])
def test_sqrt_counter_noise_factor_matches_its_documented_growth(T: int) -> None:
    """``Σ_{k<T} c_k² ≈ (ln T + γ + 4 ln 2)/π`` (the module docstring said
    ``1 + (ln T + 1.27)/π``, 0.34 too large at every T)."""
    c = sqrt_factor_coefficients(T)
    approx = (math.log(T) + 0.5772156649 + 4.0 * math.log(2.0)) / math.pi
    assert abs(float(c @ c) - approx) < 0.01


def test_a_sample_path_loop_stopped_by_the_budget_draws_nothing_from_the_generator() -> None:
    """The ledger cannot afford round 1: the loop warns that nothing was spent or drawn.

    It had drawn the round's 256 candidates from the caller's Generator before asking the
    ledger (the tree loop asks first)."""
    from pm_dpgp.workflow import dp_thompson_sampling

    rng = np.random.default_rng(3)
    before = _state(rng)
    ledger = Ledger(epsilon=0.01, delta=1e-5)
    with pytest.warns(UserWarning, match="nothing was spent or drawn"):
        res = dp_thompson_sampling(
            lambda X: np.sin(3.0 * X[:, 0]),
            pm.gp.cov.ExpQuad(1, ls=0.3),
            domain=(0.0, 1.0),
            X_init=np.array([[0.1], [0.5]]),
            n_rounds=3,
            noise_sd=0.5,
            ledger=ledger,
            rng=rng,
            progressbar=False,
        )
    assert res.stop_reason == "budget" and res.n_rounds == 0
    assert len(ledger.history) == 0
    assert _state(rng) == before


def test_check_doubles_fit_refuses_beyond_physical_memory_even_if_granted(monkeypatch) -> None:
    """With ``vm.overcommit_memory = 1`` an untouched 11 TB ``np.empty`` can succeed; the
    refusal must not depend on that (stop-44 review)."""
    import pm_dpgp._validation as v

    monkeypatch.setattr(v, "_physical_memory", lambda: 2**30)
    with pytest.raises(ValueError, match="more than this machine can hold"):
        v.check_doubles_fit(2**28, "a test array")  # 2 GiB > the 1 GiB pretended
    v.check_doubles_fit(2**20, "a test array")  # 8 MiB: fine


def test_a_later_round_refused_before_its_charge_keeps_the_charged_rounds(monkeypatch) -> None:
    """Round 3 refused before its charge (too large to hold at that n): the two charged
    rounds were lost with the raised ValueError (stop-44 audit); now a ReleaseError holds them."""
    import pm_dpgp.workflow.thompson as loop
    from pm_dpgp.workflow import ReleaseError

    original, calls = loop.sample_path_release, []

    def refuse_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("too large to hold; nothing was spent or drawn")
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "sample_path_release", refuse_third)
    ledger = Ledger(30.0, 1e-5)
    with pytest.raises(ReleaseError, match="round 3") as info:
        loop.dp_thompson_sampling(
            lambda X: np.sin(6 * X[:, 0]), pm.gp.cov.ExpQuad(1, ls=0.2), domain=(0, 1),
            X_init=[[0.1], [0.5], [0.9]], n_rounds=5, noise_sd=2.0, y_bounds=(-1, 1),
            ledger=ledger, candidates=32, progressbar=False, rng=np.random.default_rng(0),
        )  # fmt: skip
    res = info.value.result
    assert isinstance(info.value.__cause__, ValueError)
    assert res.n_rounds == 2 and len(res.events) == len(ledger.history) == 2


def test_check_draws_fit_refuses_beyond_physical_memory_even_if_granted(monkeypatch) -> None:
    import pm_dpgp._validation as v

    monkeypatch.setattr(v, "_physical_memory", lambda: 2**30)
    with pytest.raises(ValueError, match="more than this machine can hold"):
        v.check_draws_fit(2**14, 2**12)  # 3 copies of 0.5 GiB > the 1 GiB pretended
    v.check_draws_fit(16, 16)
