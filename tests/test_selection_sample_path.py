"""Fully private selection with sample paths as candidates (issue 9; docs/selection.md §6).

Random stopping (Honkela 2024, Alg. 2; Liu & Talwar 2019) around one Maciazek sample path per
run, scored by COINPRESS; accounting by Papernot & Steinke (2022), Thm. 2, on the per-candidate
RDP curves of ``SamplePathBound`` (docs/sample_paths.md, eqs. SP1–SP11).
"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pymc as pm
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_repeat_and_select

import pm_dpgp.selection.sample_paths as sp_module
from pm_dpgp.accounting import (
    DEFAULT_ORDERS,
    BudgetExceededError,
    Ledger,
    event_from_metadata,
)
from pm_dpgp.mechanisms.full.sample_path import PrivateRows
from pm_dpgp.mechanisms.full.sample_path_bounds import SamplePathBound
from pm_dpgp.mechanisms.gaussian import zcdp_rho
from pm_dpgp.models import InducingFromDataError, gp_regression
from pm_dpgp.selection import (
    plan_sample_path_selection,
    product_grid,
    select_by_sample_paths,
    select_hyperparameters,
)
from tests.private_checks import assert_no_private_number, untouchable_private_data

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N, KERNEL_SD, DOMAIN, Y_BOUNDS = 288, 5.0, (0.0, 10.0), (-2.0, 2.0)
GRID = product_grid({"ell": [1.0, 3.0], "noise": [20.0, 30.0]})
X_STAR = np.linspace(0.0, 10.0, 21)[:, None]  # public probe grid on the domain
OPTS = dict(X_star=X_STAR, domain=DOMAIN, y_bounds=Y_BOUNDS, epsilon=1.0, delta=1e-4)


def _data(n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(*DOMAIN, (n, 1))
    return X, np.clip(np.sin(X[:, 0]) + 0.5 * rng.standard_normal(n), *Y_BOUNDS)


@pytest.fixture(scope="module")
def model():
    """Kernel 25·ExpQuad(ℓ) (kernel sd 5), noise sd a hyperparameter: r² = noise²/25."""
    X, y = _data()
    return gp_regression(
        X, y, lambda: KERNEL_SD**2 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )  # fmt: skip


def _independent_bounds(n1: int) -> list[SamplePathBound]:
    """Each candidate's bound from its public numbers, κ in closed form: the ExpQuad kernel's
    value at the domain's diameter, exp(−10²/(2ℓ²))."""
    return [
        SamplePathBound(
            n=n1,
            kernel_scale=KERNEL_SD,
            r2=c["noise"] ** 2 / KERNEL_SD**2,
            M_Y=2.0,
            kappa=math.exp(-(10.0**2) / (2 * c["ell"] ** 2)),
            eta=0.0,
        )  # fmt: skip
        for c in GRID
    ]


def _papernot_steinke(orders, eps, gamma):
    """Thm. 2 with η = 1 (geometric K, E[K] = 1/γ), min over λ̂ in ``orders``, written out,
    then the monotone envelope (bound at λ = min over grid orders ≥ λ)."""
    with np.errstate(invalid="ignore"):
        hat = np.min((1 - 1 / orders) * eps + math.log(1 / gamma) / orders)
    out = eps + 2 * hat + math.log(1 / gamma) / (orders - 1)
    return np.minimum.accumulate(out[::-1])[::-1]


# ------------------------------------------------------------------ the accounting
def test_event_is_the_planned_curve_composed_by_papernot_steinke(model):
    ledger = Ledger(epsilon=10.0, delta=1e-3, filter="renyi")
    res = select_by_sample_paths(
        model, GRID, **OPTS, ledger=ledger, gamma=0.2, rng=np.random.default_rng(1)
    )
    assert ledger.history[0].event == res.event and ledger.history[0].privacy_model == "full"
    base = res.event.base
    G = np.asarray(base.orders)
    n1 = res.public_details["n_train"]
    assert n1 == N - len(range(0, N, 5))  # every 5th row validates: public split of n
    bounds = _independent_bounds(n1)
    assert base.alpha_max == min(b.alpha_max for b in bounds)
    assert G.max() < base.alpha_max and G.min() > 1.0
    # ε_Q(α) = max(max_i ε_path,i(α), α ρ_CP) on G (each path curve as its release's event),
    # the same curve for ρ_CP = zcdp_rho(ε, δ) and for the score's larger ρ (stop 39), which is
    # the largest the paths' curve pays for at every grid order
    rho_cp = zcdp_rho(1.0, 1e-4)
    paths = np.vstack([b.event(1).rdp(G) for b in bounds])
    np.testing.assert_allclose(base.values, np.maximum(paths.max(0), G * rho_cp), rtol=1e-12)
    rho_score = res.public_details["coinpress_rho"]
    assert rho_score == pytest.approx(max(rho_cp, np.min(paths.max(0) / G)), rel=1e-12)
    np.testing.assert_allclose(base.values, np.maximum(paths.max(0), G * rho_score), rtol=1e-12)
    # κ of the plan equals the closed form
    np.testing.assert_allclose(
        res.public_details["kappa_per_candidate"], [b.kappa for b in bounds], rtol=1e-9, atol=1e-300
    )
    # the whole selection: Papernot & Steinke Thm. 2 written out on G ∪ DEFAULT_ORDERS
    U = np.unique(np.concatenate([G, DEFAULT_ORDERS]))
    eps_u = base.rdp(U)  # +inf at orders ≥ min α_max
    assert np.isinf(eps_u[U >= base.alpha_max]).all()
    ours = res.event.rdp(U)
    np.testing.assert_allclose(ours, _papernot_steinke(U, eps_u, 0.2), rtol=1e-12)
    # ... and dp_accounting's own implementation of the theorem on the same curve
    ref = np.asarray(_compute_rdp_repeat_and_select(U, eps_u, 1 / 0.2, 1.0))
    finite = np.isfinite(ref)
    assert np.array_equal(finite, np.isfinite(ours))
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-13)
    # what the ledger composes is that event; the plan function gives it without any data
    plan = plan_sample_path_selection(model, GRID, n=N, **OPTS, gamma=0.2)
    assert plan.event == res.event
    # the persistent ledger restores it exactly (nested RdpCurveEvent with its alpha_max)
    assert event_from_metadata(json.loads(json.dumps(res.event.to_metadata()))) == res.event
    assert ledger.epsilon() == pytest.approx(res.event.epsilon(1e-3), rel=1e-12)


def test_planned_curve_bounds_each_release_and_a_costlier_release_aborts(model, monkeypatch):
    real = sp_module.sample_path_release
    seen = []

    def spy(data, X_star, **kw):
        release = real(data, X_star, **kw)
        seen.append(release)
        return release

    monkeypatch.setattr(sp_module, "sample_path_release", spy)
    plan = plan_sample_path_selection(model, GRID, n=N, **OPTS, gamma=0.1)
    res = select_by_sample_paths(
        model, GRID, **OPTS, ledger=None, gamma=0.1, owner_scores=False,
        rng=np.random.default_rng(7),
    )  # fmt: skip
    runs = [i for i, _ in res.owner_report()["runs"]]
    assert len(seen) == len(runs) >= 2
    for i, release in zip(runs, seen, strict=True):
        own = event_from_metadata(release.metadata["privacy_event"])
        assert np.all(own.rdp(plan.orders) <= plan.path_curves[i])
        assert np.all(own.rdp(plan.orders) <= np.asarray(plan.base.values))
        # the released path was evaluated at the validation inputs after the public probes
        assert len(release.released_inputs) == len(X_STAR) + len(range(0, N, 5))

    # a release that costs more than planned (a wider y range: larger M_Y) aborts the run
    def costlier(data, X_star, **kw):
        kw = dict(kw, y_bounds=(-4.0, 4.0), epsilon=None, ledger=Ledger(epsilon=None, delta=1e-4))
        return real(data, X_star, **kw)

    monkeypatch.setattr(sp_module, "sample_path_release", costlier)
    with pytest.raises(RuntimeError, match="exceeded its planned curve"):
        select_by_sample_paths(
            model, GRID, **OPTS, ledger=None, owner_scores=False, rng=np.random.default_rng(7)
        )


def _raise(*a, **k):
    raise AssertionError("called before the spend")


def test_refusal_before_any_randomness_or_data(model, monkeypatch):
    monkeypatch.setattr(sp_module, "sample_path_release", _raise)
    monkeypatch.setattr(sp_module, "coinpress_mean", _raise)
    rng = np.random.default_rng(11)
    state = rng.bit_generator.state
    ledger = Ledger(epsilon=1.0, delta=1e-3, filter="renyi")  # the selection costs ≈ 2.1
    with pytest.raises(BudgetExceededError):
        select_by_sample_paths(
            model, GRID, untouchable_private_data(monkeypatch, N), **OPTS, ledger=ledger, rng=rng
        )
    assert rng.bit_generator.state == state and ledger.history == []
    # a zCDP filter cannot hold an RDP curve: refused the same way
    zled = Ledger(epsilon=100.0, delta=1e-3, filter="zcdp")
    with pytest.raises(BudgetExceededError):
        select_by_sample_paths(model, GRID, **OPTS, ledger=zled, rng=rng)
    assert rng.bit_generator.state == state and zled.history == []


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"X_star": None}, "X_star"),
        ({"X_star": np.zeros((0, 1))}, "X_star"),
        ({"X_star": np.zeros((3, 2))}, "domain has 1 dimension"),
        ({"domain": None}, "domain"),
        ({"domain": (10.0, 0.0)}, "domain"),
        ({"grid": [{"ell": 1.0}]}, "noise"),
        ({"grid": [{"ell": 1.0, "noise": -1.0}]}, "noise"),
        ({"grid": product_grid({"ell": [1.0], "noise": [0.5]})}, "alpha_max"),
        ({"kernel_scale": "amplitude"}, "kernel_scale"),
        ({"eta": [0.0, 1.0]}, "one value per candidate"),
        ({"validation": np.arange(N)}, "validation"),
        ({"gamma": 1.0}, "gamma"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"y_bounds": (2.0, -2.0)}, "y_bounds|lower|upper"),
    ],
)
def test_bad_public_input_is_refused_before_the_spend(model, monkeypatch, change, match):
    monkeypatch.setattr(sp_module, "sample_path_release", _raise)
    monkeypatch.setattr(sp_module, "coinpress_mean", _raise)
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    kw = dict(OPTS, grid=GRID) | change
    grid = kw.pop("grid")
    with pytest.raises(ValueError, match=match):
        select_by_sample_paths(
            model, grid, untouchable_private_data(monkeypatch, N), **kw, ledger=ledger, rng=rng
        )
    assert ledger.history == [] and rng.bit_generator.state == state


def test_owner_check_refuses_probe_points_copied_from_the_private_inputs(model):
    """No data-independent check can tell X_star from the private validation inputs; the data
    owner's heuristic check (``owner_check=True``) does, before the spend."""
    ledger = Ledger(epsilon=100.0, delta=1e-3, filter="renyi")
    X, y = _data()
    copied = X[range(0, N, 5)][:21]
    with pytest.raises(InducingFromDataError):
        select_by_sample_paths(
            model, GRID, (X, y), **dict(OPTS, X_star=copied), ledger=ledger, owner_check=True,
            rng=np.random.default_rng(0),
        )  # fmt: skip
    assert ledger.history == []


# ------------------------------------------------------------------ front end, leak scan
def test_front_end_dispatch_and_nothing_private_in_serialised_result(model):
    kw = dict(OPTS, gamma=0.3)
    res = select_hyperparameters(
        model, GRID, ledger=Ledger(epsilon=10.0, delta=1e-3, filter="renyi"),
        method="sample_path", rng=np.random.default_rng(4), **kw,
    )  # fmt: skip
    direct = select_by_sample_paths(model, GRID, ledger=None, rng=np.random.default_rng(4), **kw)
    assert res.method == "sample_path_random_stopping"
    assert res.index == direct.index and res.event == direct.event
    assert res.owner_report()["runs"] == direct.owner_report()["runs"]
    owner = res.owner_report()
    dp_score = res.public_details["dp_mean_validation_loglik"]
    private = np.concatenate(
        [
            model.y, model.X[:, 0], owner["validation_scores"], owner["predictive_scores"],
            np.array([s for _, s in owner["runs"]]),
        ]
    )  # fmt: skip
    # the winner's score is DP output; labels clipped to the public bounds equal public numbers
    private = private[np.isfinite(private) & (private != dp_score) & ~np.isin(private, Y_BOUNDS)]
    blob = assert_no_private_number(res, private)
    with pytest.raises(ValueError):
        pickle.loads(blob).owner_report()
    meta = json.dumps(res.to_metadata())
    assert "n_runs" not in meta and "validation_scores" not in meta
    with pytest.raises(ValueError, match="sample_path"):
        select_hyperparameters(model, GRID, ledger=None, method="paths")


def test_non_finite_private_inputs_are_mapped_not_refused_after_the_spend(model):
    X, y = _data()
    for row, value in [(0, np.nan), (1, np.inf), (0, 1e308)]:  # row 0: validation
        Xb = X.copy()
        Xb[row, 0] = value
        ledger = Ledger(epsilon=10.0, delta=1e-3, filter="renyi")
        res = select_by_sample_paths(
            model, GRID, (Xb, y), **OPTS, ledger=ledger, gamma=0.5, rng=np.random.default_rng(5)
        )
        assert res.index >= 0 and len(ledger.history) == 1
        assert np.all(np.isfinite(res.owner_report()["validation_scores"]))


# ------------------------------------------------------------------ the worked example
def test_worked_example_end_to_end_secure_and_simulated(model):
    """docs/selection.md §6: 288 points on [0, 10], kernel sd 5, noise sd 20 or 30 (r² = 16 or
    36), y in [−2, 2]; COINPRESS at (1, 1e-4), γ = 0.1.  The whole selection costs ε ≈ 2.14 at
    δ = 1e-3 (one noise-sd-20 path alone: 0.57), it composes with a following release, and the
    secure mode (OS-entropy paths and coins, OpenDP COINPRESS noise) runs as well."""
    ledger = Ledger(epsilon=5.0, delta=1e-3, filter="renyi")
    res = select_by_sample_paths(model, GRID, **OPTS, ledger=ledger, gamma=0.1)
    assert res.public_details["noise_source"].startswith("numpy_os_entropy+opendp")
    bottom = res.public_details["outcome"].startswith("no valid candidate")
    assert (res.index == -1) if bottom else (0 <= res.index < len(GRID))
    total = ledger.epsilon()
    path_eps = res.public_details["path_epsilon_per_candidate"]
    assert 2.0 < total < 2.3 and max(path_eps) < total  # selection ≈ 3.8 × the dearest path
    plan = plan_sample_path_selection(model, GRID, n=N, **OPTS, gamma=0.1)
    assert max(plan.path_epsilons(1e-3)) == pytest.approx(0.569, abs=0.01)
    # the owner's non-private scores rank the smaller noise sd first (its L_max is higher)
    scores = res.owner_report()["validation_scores"]
    assert np.argmax(scores) in (0, 2)  # noise sd 20


def test_owner_path_score_is_the_expected_score_of_a_released_path(model):
    """docs §6, "The score is not Honkela's": over many released paths, the mean clipped score
    E_f[log N(y; f(x), s²)] equals log N(y; μ, s²) − v/(2s²) (the owner's
    ``validation_scores``), which differs from eq. 18 when v is not ≪ s² (here noise sd 0.5,
    ℓ = 0.3: not affordable privately, the check is of the score, on an unbounded ledger)."""
    from pm_dpgp.mechanisms.full.sample_path import sample_path_release
    from pm_dpgp.selection.liu_talwar import loglik_bounds, validation_loglik

    X, y = _data()
    val = np.arange(0, N, 5)
    train = np.setdiff1d(np.arange(N), val)
    public = model.public_gp_without_data({"ell": 0.3, "noise": 0.5})
    usable = np.ones(val.size, bool)
    path, pred = sp_module._owner_scores(
        public, 0.0, KERNEL_SD, X[train], y[train], X[val], usable, y[val], 2.0
    )
    release = sample_path_release(
        PrivateRows(public, X[train], y[train]), X_STAR, n_draws=4000,
        kernel_scale=KERNEL_SD, y_bounds=Y_BOUNDS, delta=1e-3, domain=DOMAIN,
        ledger=Ledger(epsilon=None, delta=1e-3, filter="renyi"), rng=np.random.default_rng(2),
    )  # fmt: skip
    F = release.evaluate(X[val])  # (4000 paths, 58 validation inputs)
    s2 = 0.25
    v = validation_loglik(F, np.full_like(F, s2), y[val], 0.0, 2.0)
    per_path = np.mean(np.clip(v, *loglik_bounds(s2, 2.0)), axis=1)
    se = per_path.std() / np.sqrt(per_path.size)
    assert abs(per_path.mean() - path) < 4 * se
    assert abs(pred - path) > 20 * se  # eq. 18 ranks by something else


def test_a_candidate_whose_path_costs_zero_epsilon_runs():
    """Stop-26 audit: a candidate so private that its planned path ε rounds to 0 (noise sd
    1000) was given to its release as the target ε = 0, which is refused: a RuntimeError after
    the selection's spend, in a mixed grid only when the secret loop drew that candidate."""
    X = np.linspace(-3, 3, 25)[:, None]
    model = gp_regression(
        X,
        np.sin(X[:, 0]),
        lambda: 25.0 * pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 0.5)),
        noise_sd=lambda: pm.HalfNormal("noise", 20.0),
    )
    grid = [{"ell": 1.0, "noise": 20.0}, {"ell": 1.0, "noise": 1e3}]
    kw = dict(X_star=np.linspace(-3, 3, 7)[:, None], domain=(-3, 3), y_bounds=(-2, 2))
    plan = plan_sample_path_selection(model, grid[1:], n=25, epsilon=1.0, delta=1e-4, **kw)
    assert plan.path_epsilons(1e-4)[0] == 0.0
    for seed in range(6):
        ledger = Ledger(1e9, 1e-3, filter="renyi")
        select_by_sample_paths(
            model,
            grid,
            epsilon=1.0,
            delta=1e-4,
            gamma=0.5,
            ledger=ledger,
            rng=np.random.default_rng(seed),
            n_steps=2,
            **kw,
        )
        assert len(ledger.history) == 1


def test_a_coinpress_step_too_small_for_secure_noise_is_refused_before_the_spend():
    """Stop-26 review: with ε = 1e-11, δ = 1e-13 a COINPRESS step's ρ_t (2e-28) made the secure
    noise's scale exceed 2^40 grid units, refused by the planner *after* the selection's spend
    (with a message saying nothing was spent).  Since stop 39 the score runs at the larger of
    zcdp_rho(ε, δ) and what the paths' curve pays for, so the paths must be cheap too: η = 10¹²
    (ρ ≈ 1e-26; at η = 0 the paths pay for ρ = 6e-3 and nothing needs refusing)."""
    from pm_dpgp.selection.coinpress import MIN_STEP_RHO, check_coinpress_settings

    with pytest.raises(ValueError, match="rho_t"):
        check_coinpress_settings(MIN_STEP_RHO / 2.0, n_steps=1)
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (40, 1))
    with pm.Model():
        model = gp_regression(
            X,
            np.clip(np.sin(4 * X[:, 0]), -1, 1),
            lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 2)),
            noise_sd=5.0,
        )
    ledger = Ledger(1e6, 1e-2, filter="renyi")
    with pytest.raises(ValueError, match="rho_t"):
        select_by_sample_paths(
            model,
            product_grid({"ell": [0.3, 0.6]}),
            X_star=np.linspace(0, 1, 9)[:, None],
            domain=(0, 1),
            y_bounds=(-1, 1),
            epsilon=1e-11,
            delta=1e-13,
            eta=1e12,
            ledger=ledger,
            gamma=0.5,
            rng=None,
        )
    assert ledger.history == []


def test_empty_loglik_interval_is_refused_before_the_spend(model):
    """Stop-38 audit (sibling of the Liu–Talwar finding): y_bounds = ±1e-9 make
    L_max − L_min = 2M_Y²/s² underflow the spacing of doubles at L_max, so L_min == L_max and
    COINPRESS refused its bounds in the first run, after the ledger was charged."""
    ledger = Ledger(epsilon=1e6, delta=1e-3, filter="renyi")
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    opts = {**OPTS, "y_bounds": (-1e-9, 1e-9)}
    with pytest.raises(ValueError, match="log-likelihood interval"):
        select_by_sample_paths(
            model, GRID[:1], **opts, ledger=ledger, gamma=0.5, n_steps=2, rng=rng
        )  # fmt: skip
    assert ledger.history == [] and rng.bit_generator.state == state
