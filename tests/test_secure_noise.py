"""Secure (discretised) noise: sampler distribution, privacy of the discretised release,
floating-point independence from low-order bits, calibration, defaults, refusals.

See ``docs/secure_noise.md``.  OpenDP samples from OS entropy and cannot be seeded, so the
distribution tests are random: each states its false-failure probability.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.linalg import solve_triangular

import pm_dpgp.mechanisms.noise as noise_mod
from pm_dpgp.accounting import (
    BudgetExceededError,
    GaussianEvent,
    Ledger,
    RdpCurveEvent,
    ZCDPEvent,
    event_from_metadata,
)
from pm_dpgp.audit import scan_for_values
from pm_dpgp.compat import to_netcdf
from pm_dpgp.mechanisms import cloaked_release, cloaking_noise, prior_noise_release
from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release
from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
from pm_dpgp.mechanisms.gaussian import zcdp_rho
from pm_dpgp.mechanisms.noise import (
    GRID_BITS,
    INT_LIMIT,
    discretise,
    grid_for,
    integer_sensitivity,
    plan_discrete_gaussian,
    secure_plan,
)
from pm_dpgp.models import gp_regression, sparse_gp_regression
from tests.tolerances import scalar_rtol

from .conftest import small_model

BOUNDS = (-2.0, 2.0)
XS = np.linspace(0.0, 6.0, 25)[:, None]


X_TRAIN = np.linspace(0.0, 6.0, 12)


def _model(y: np.ndarray):
    """A small 1-D GP regression on fixed public inputs with the given (private) outputs."""
    return gp_regression(X_TRAIN, y, pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=0.3, mean=0.0)


Y0 = np.clip(np.sin(X_TRAIN), -1.9, 1.9)


# --------------------------------------------------------------------------- the sampler
def _pmf(scale: float, half_width: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Exact discrete Gaussian pmf ∝ exp(−x²/(2 scale²)) on |x| ≤ half_width, normalised.

    The mass beyond 200 at scale ≤ 4 is < exp(−1250): nothing a float can see.
    """
    x = np.arange(-half_width, half_width + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2.0 * scale**2))
    return x, w / w.sum()


def _gof_pvalue(draws: np.ndarray, scale: float) -> float:
    """Chi-square p-value of ``draws`` against the exact pmf, bins −9 … 9 plus two tails."""
    x, p = _pmf(scale)
    edges = np.arange(-9, 10)
    expected = [p[x < -9].sum()] + [p[x == e].sum() for e in edges] + [p[x > 9].sum()]
    observed = [np.sum(draws < -9)] + [np.sum(draws == e) for e in edges] + [np.sum(draws > 9)]
    n = draws.size
    return float(stats.chisquare(observed, n * np.asarray(expected)).pvalue)


N_DRAWS = 200_000
SCALE = 3.0


@pytest.fixture(scope="module")
def sampled() -> np.ndarray:
    """200k draws of OpenDP's discrete Gaussian at scale 3 (one vector release of zeros)."""
    meas = noise_mod._measurement(N_DRAWS, SCALE)
    return np.asarray(meas([0] * N_DRAWS), dtype=np.int64)


def test_discrete_gaussian_moments(sampled) -> None:
    x, p = _pmf(SCALE)
    var = float(np.sum(x**2 * p))
    mu4 = float(np.sum(x**4 * p))
    # the exact variance is below scale² (CKS 2020, Cor. 9), here by < 1e-80 relative
    assert var == pytest.approx(SCALE**2, rel=1e-12)
    # 6 standard errors: each check fails by chance with probability < 2e-9 (CLT)
    se_mean = math.sqrt(var / N_DRAWS)
    se_var = math.sqrt((mu4 - var**2) / N_DRAWS)
    assert abs(sampled.mean()) < 6 * se_mean
    assert abs(sampled.var() - var) < 6 * se_var
    # a 5 % wrong scale is ~30 standard errors away in the variance: the check has power
    assert abs(sampled.var() - (1.05 * SCALE) ** 2) > 6 * se_var


def test_discrete_gaussian_goodness_of_fit(sampled) -> None:
    # 21 fixed bins, threshold p > 1e-9: false-failure probability 1e-9 per run (1e-6 gave
    # 3e-6 per 3-stack CI run)
    assert _gof_pvalue(sampled, SCALE) > 1e-9
    # the same test rejects draws at scale·1.05 (p ~ 1e-100 at 200k draws)
    wrong = np.asarray(noise_mod._measurement(N_DRAWS, SCALE * 1.05)([0] * N_DRAWS))
    assert _gof_pvalue(wrong, SCALE) < 1e-9


# --------------------------------------------------------------------------- the grid
def test_grid_is_a_power_of_two_below_sigma_2_pow_minus_20() -> None:
    for sigma in (1e-8, 0.3, 1.0, 3.0, 7.5e5):
        g = grid_for(sigma)
        assert math.frexp(g)[0] == 0.5  # exactly a power of two
        assert sigma * 2.0 ** -(GRID_BITS + 1) < g <= sigma * 2.0**-GRID_BITS


def test_integer_sensitivity_is_the_exact_ceiling() -> None:
    g = 2.0**-10
    # (Δ + γ√k)/γ = 1024·Δ + √k; with Δ = 1, k = 4: 1026 exactly, so the ceiling is 1026
    assert integer_sensitivity(1.0, g, 4) == 1026
    assert integer_sensitivity(1.0, g, 5) == 1027  # 1024 + 2.236…
    assert integer_sensitivity(1.0 + 2.0**-30, g, 4) == 1027  # a hair above an integer


def test_release_depends_on_w_only_through_its_grid_point() -> None:
    """Perturbations below the grid (away from rounding boundaries) do not change n.

    w sits within γ/4 of its grid point and moves by at most 0.2γ: never across a boundary.
    """
    rng = np.random.default_rng(0)
    g = grid_for(0.7)
    n = rng.integers(-(10**9), 10**9, 500)
    w = g * (n + rng.uniform(-0.25, 0.25, n.size))
    for tiny in (1e-300, 1e-13, 0.2 * g):
        assert np.array_equal(discretise(w + tiny * rng.uniform(-1, 1, n.size), g), n)
    # control: a perturbation of one grid step is seen
    assert not np.array_equal(discretise(w + g, g), n)
    # clamp: no int64 overflow, whatever w is
    big = discretise(np.array([1e300, -np.inf, np.nan]), g)
    assert big.tolist() == [int(INT_LIMIT), -int(INT_LIMIT), 0]


def _zero_noise(monkeypatch) -> None:
    """Replace OpenDP's draw by the identity (its privacy map is kept): isolates the rounding."""
    real = noise_mod._measurement

    class Identity:
        def __init__(self, dim, scale):
            self._m = real(dim, scale)

        def map(self, d_in):
            return self._m.map(d_in)

        def __call__(self, ints):
            return list(ints)

    monkeypatch.setattr(noise_mod, "_measurement", Identity)


def test_cloaked_release_is_bitwise_independent_of_low_order_bits(monkeypatch) -> None:
    _zero_noise(monkeypatch)
    kw = dict(epsilon=1.0, delta=1e-5, y_bounds=BOUNDS)
    a = cloaked_release(_model(Y0), XS, **kw).draws
    # moves the whitened mean by ~1e-14 ≪ γ ≈ 1e-6 (a boundary within 1e-14 of one of the
    # ~12 coordinates has probability ~1e-7 for these fixed data, and the test is deterministic)
    b = cloaked_release(_model(Y0 * (1.0 + 1e-14)), XS, **kw).draws
    assert np.array_equal(a, b)
    # control: a change of ~100 grid steps in the mean moves the release
    assert not np.array_equal(a, cloaked_release(_model(Y0 + 1e-4), XS, **kw).draws)


# --------------------------------------------------------------------------- privacy property
@pytest.fixture
def captured(monkeypatch) -> list:
    """Record (plan, whitened vector) of every secure draw made by a mechanism."""
    calls: list = []
    original = noise_mod.DiscreteGaussianPlan.release

    def release(self, w, n_draws=1):
        calls.append((self, np.array(w, dtype=np.float64)))
        return original(self, w, n_draws)

    monkeypatch.setattr(noise_mod.DiscreteGaussianPlan, "release", release)
    return calls


def _integer_gap(calls) -> tuple[float, int]:
    (plan, w1), (plan2, w2) = calls
    assert plan == plan2  # the plan is public: identical for both neighbours
    n1, n2 = discretise(w1, plan.gamma), discretise(w2, plan.gamma)
    diff = (n1 - n2).astype(np.float64)
    return float(np.linalg.norm(diff)), plan.sensitivity_int


def _check_plan(plan) -> None:
    """The event's RDP is OpenDP's map: ρ = Δ_int²/(2 scale²) (CKS 2020, Thm. 14)."""
    rho = float(noise_mod._measurement(plan.dim, plan.scale).map(plan.sensitivity_int))
    assert plan.rho == rho
    # scalar formula vs OpenDP's map (which rounds up by a few ulps): machine independent
    assert plan.rho == pytest.approx(plan.sensitivity_int**2 / (2 * plan.scale**2), rel=1e-12)
    orders = np.array([1.5, 2.0, 10.0, 100.0])
    assert np.array_equal(plan.event(3).rdp(orders), orders * (3 * rho))


def test_cloaking_neighbours_within_integer_sensitivity(captured) -> None:
    C, noise = cloaking_noise(_model(Y0).public_gp(), XS)
    white = solve_triangular(noise.chol_k, noise.basis.T @ C, lower=True)
    j = int(np.argmax(np.linalg.norm(white, axis=0)))  # the label with the largest c_jᵀM⁺c_j
    for value in BOUNDS:
        y = Y0.copy()
        y[j] = value  # the worst label moved across the whole public range
        cloaked_release(
            _model(y), XS, epsilon=1.0, delta=1e-5, y_bounds=BOUNDS, bounds_are_public=True
        )
    gap, d_int = _integer_gap(captured)
    assert gap <= d_int
    # non-vacuous: the worst neighbour uses nearly all of Δ_int (slack √k + 1e-6 relative)
    plan = captured[0][0]
    assert gap >= d_int - math.sqrt(plan.dim) - 1e-5 * d_int
    _check_plan(plan)


def test_prior_noise_neighbours_within_integer_sensitivity(captured) -> None:
    for value in BOUNDS:
        y = Y0.copy()
        y[0] = value
        prior_noise_release(
            _model(y), XS, epsilon=1.0, delta=1e-5, y_bounds=BOUNDS, bounds_are_public=True
        )
    gap, d_int = _integer_gap(captured)
    assert 0 < gap <= d_int
    _check_plan(captured[0][0])


Z8 = np.linspace(-3, 3, 8)[:, None]


def _sparse_pub():
    return sparse_gp_regression(
        None, None, pm.gp.cov.ExpQuad(1, ls=1.0), Z=Z8, noise_sd=0.3
    ).public_sparse_gp()


def test_noise_aware_neighbours_within_integer_sensitivity(captured) -> None:
    rng = np.random.default_rng(4)
    X = rng.uniform(-3, 3, 50)
    y = np.sin(X)
    pub = _sparse_pub()
    # replace one record (x, y); -1.5 is clipped to the bound, silently (docs/errors.md)
    for x_new, y_new in ((X[0], y[0]), (0.0, -1.5)):
        X2, y2 = X.copy(), y.copy()
        X2[0], y2[0] = x_new, y_new
        noise_aware_release(pub, (X2, y2), epsilon=1.0, delta=1e-4, y_bounds=(-1.0, 1.0))
    gap, d_int = _integer_gap(captured)
    assert 0 < gap <= d_int
    _check_plan(captured[0][0])


def test_dirichlet_neighbours_within_integer_sensitivity(captured) -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, 60)
    lab = (X > 0).astype(int)
    pub = _sparse_pub()
    for x_new, l_new in ((X[0], lab[0]), (0.0, 1 - lab[0])):
        X2, lab2 = X.copy(), lab.copy()
        X2[0], lab2[0] = x_new, l_new
        dirichlet_release(pub, (X2, lab2), n_classes=2, epsilon=1.0, delta=1e-4)
    gap, d_int = _integer_gap(captured)
    assert 0 < gap <= d_int
    plan = captured[0][0]
    assert plan.dim == 2 * (8 + 8 * 9 // 2)  # both classes in one joint release
    _check_plan(plan)


# --------------------------------------------------------------------------- calibration
@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-6), (1.0, 1e-5), (1.0, 0.01), (8.0, 1e-3)])
def test_zcdp_calibration_fits_and_is_nearly_optimal(eps, delta) -> None:
    rho = zcdp_rho(eps, delta)
    assert ZCDPEvent(rho).epsilon(delta) <= eps
    # 1e-9 more ρ exceeds ε: the calibration leaves nothing on the table (ε is linear in ρ
    # near the optimum with slope α* ≥ 1, and the nudge stops within 1e-12 relative)
    assert ZCDPEvent(rho * (1 + 1e-9)).epsilon(delta) > eps


def test_plan_inflation_from_rounding_is_negligible() -> None:
    for sens, dim in ((1.0, 1), (0.37, 5000), (250.0, 40)):
        rho = zcdp_rho(1.0, 1e-5)
        plan = plan_discrete_gaussian(sens, dim, rho)
        assert plan.rho <= rho
        sigma0 = sens / math.sqrt(2 * rho)
        # σ = Δ_int·γ/√(2ρ) with Δ_int·γ ≤ Δ + γ(√k + 1): relative inflation ≤ (√k + 1)γ/Δ
        bound = (math.sqrt(dim) + 1) * plan.gamma / sens
        assert 0.0 <= plan.sigma / sigma0 - 1.0 <= bound + scalar_rtol()
        assert bound < 1e-4 * (1 + math.sqrt(dim)) * sigma0 / sens


def test_secure_release_charge_fits_budget_and_ledger_agrees() -> None:
    model = small_model(6)
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    rel = cloaked_release(model, XS, epsilon=1.0, delta=1e-5, y_bounds=BOUNDS, ledger=ledger)
    event = event_from_metadata(rel.metadata["privacy_event"])
    assert isinstance(event, ZCDPEvent)
    charged = event.epsilon(1e-5)
    assert charged <= 1.0
    assert ledger.filter_family == "zcdp"
    assert ledger.filter_epsilon == charged == rel.metadata["epsilon_total"]
    assert ledger.spent_epsilon == pytest.approx(charged, rel=scalar_rtol())
    with pytest.raises(BudgetExceededError):
        cloaked_release(model, XS, epsilon=0.01, delta=1e-5, y_bounds=BOUNDS, ledger=ledger)
    assert len(ledger.history) == 1


def test_classic_calibration_in_secure_mode_never_adds_less_noise() -> None:
    plan_c = secure_plan(0.5, 1e-5, 1.0, 10, "classic")
    plan_a = secure_plan(0.5, 1e-5, 1.0, 10, "analytic")
    classic_sigma = math.sqrt(2 * math.log(2 / 1e-5)) / 0.5
    assert plan_c.sigma >= classic_sigma and plan_c.sigma >= plan_a.sigma
    assert plan_c.event().epsilon(1e-5) <= 0.5


# --------------------------------------------------------------------------- ledger mixing
def test_zcdp_filter_mixes_gaussian_and_zcdp_and_is_theorem_z() -> None:
    rho_b = zcdp_rho(2.0, 1e-5)
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    ledger.spend(ZCDPEvent(rho_b / 2))
    z = 1.0 / math.sqrt(rho_b / 2 * 2 * 0.999)  # a Gaussian with ρ = 0.999·ρ_B/2
    ledger.spend(GaussianEvent(z))
    # Σρ ≤ ρ_B is the whole condition: ρ_B·(1e-3 / 2) fits, twice that does not
    assert ledger.can_afford(ZCDPEvent(rho_b * 0.0004))
    assert not ledger.can_afford(ZCDPEvent(rho_b * 0.0006))
    with pytest.raises(BudgetExceededError, match="cannot account for RdpCurveEvent"):
        ledger.spend(RdpCurveEvent((2.0, 4.0), (0.001, 0.002)))
    # the GDP composition bound must not ignore the zCDP event
    assert "gdp" not in ledger.bounds()


def test_gdp_ledger_refuses_zcdp_with_a_clear_message() -> None:
    ledger = Ledger(epsilon=5.0, delta=1e-5)
    ledger.spend(GaussianEvent(5.0))
    with pytest.raises(BudgetExceededError, match="filter='zcdp'"):
        ledger.spend(ZCDPEvent(0.01))
    renyi = Ledger(epsilon=5.0, delta=1e-5, filter="renyi")
    renyi.spend(ZCDPEvent(0.01))
    renyi.spend(RdpCurveEvent((2.0, 4.0), (0.01, 0.02)))
    assert len(renyi.history) == 2


def test_zcdp_event_metadata_round_trip_and_validation() -> None:
    e = ZCDPEvent(0.0123, count=3, label="x")
    assert event_from_metadata(e.to_metadata()) == e
    assert e.describe() == "zCDP(ρ=0.0123)×3"
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            ZCDPEvent(bad)


# --------------------------------------------------------------------------- defaults, leaks
def test_secure_is_the_default_and_simulation_is_explicit(tmp_path) -> None:
    model = small_model(7)
    secure = cloaked_release(model, XS, epsilon=1.0, delta=1e-5, y_bounds=BOUNDS)
    sim = cloaked_release(
        model, XS, epsilon=1.0, delta=1e-5, y_bounds=BOUNDS, rng=np.random.default_rng(0)
    )
    md = secure.metadata
    assert md["noise_source"] == "opendp_discrete_gaussian"
    assert md["privacy_event"]["type"] == "ZCDPEvent"
    assert {"grid", "integer_sensitivity", "integer_scale", "zcdp_rho_per_draw"} <= set(md)
    assert sim.metadata["noise_source"] == "numpy_simulation"
    assert sim.metadata["privacy_event"]["type"] == "GaussianEvent"
    y = model.y
    clipped = np.clip(y, *BOUNDS)
    path = tmp_path / "secure.nc"
    to_netcdf(secure.to_inference_data(), path)
    assert scan_for_values(str(path), np.concatenate([y, clipped])) == []


def test_noise_aware_default_is_secure_with_metadata() -> None:
    rng = np.random.default_rng(8)
    X = rng.uniform(-3, 3, 40)
    rel = noise_aware_release(
        _sparse_pub(), (X, np.sin(X)), epsilon=1.0, delta=1e-4, y_bounds=(-1.0, 1.0)
    )
    assert rel.metadata["noise_source"] == "opendp_discrete_gaussian"
    assert rel.metadata["sigma_a"] == rel.metadata["integer_scale"] * rel.metadata["grid"]
    sim = noise_aware_release(
        _sparse_pub(),
        (X, np.sin(X)),
        epsilon=1.0,
        delta=1e-4,
        y_bounds=(-1.0, 1.0),
        rng=np.random.default_rng(0),
    )
    assert sim.metadata["noise_source"] == "numpy_simulation"


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"rng": 1234}, TypeError),
        ({"epsilon": -1.0}, ValueError),
        ({"delta": 1.5}, ValueError),
        ({"n_draws": 0}, ValueError),
        ({"calibration": "classic", "epsilon": 2.0}, ValueError),
    ],
)
def test_bad_input_refused_before_spending_or_drawing(kw, error, captured) -> None:
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    args = dict(epsilon=1.0, delta=1e-5, y_bounds=BOUNDS, ledger=ledger) | kw
    with pytest.raises(error):
        cloaked_release(small_model(9), XS, **args)
    assert ledger.history == [] and captured == []


def test_refused_spend_draws_no_noise(captured) -> None:
    ledger = Ledger(epsilon=0.5, delta=1e-5)
    with pytest.raises(BudgetExceededError):
        cloaked_release(
            small_model(10), XS, epsilon=1.0, delta=1e-5, y_bounds=BOUNDS, ledger=ledger
        )
    assert ledger.history == [] and captured == []


@pytest.mark.parametrize("mechanism", [prior_noise_release, cloaked_release])
@pytest.mark.parametrize("L", [0.0, 1e12])
def test_labels_far_from_the_prior_mean_stay_within_integer_sensitivity(
    captured, mechanism, L
) -> None:
    """Regression (adversarial audit): public bounds [L, L + 1] with prior mean 0.

    Before the whitened mean was centred at the bounds' midpoint with its round-off bounded
    (mechanisms/whitening.py), the rounding of W(y − μ) ~ u·L·‖W‖ made two label-neighbours'
    integer vectors differ by 45× Δ_int for prior noise at L = 10¹² (1.0003× for cloaking).
    """
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 6, 30))
    X_star = np.linspace(0, 6, 40)[:, None]
    bounds = (L, L + 1.0)
    worst = 0.0
    for _ in range(4):
        y, j = L + rng.uniform(0, 1, 30), int(rng.integers(30))
        captured.clear()
        for value in bounds:  # label j moved across the whole public range
            y_j = y.copy()
            y_j[j] = value
            model = gp_regression(X, y_j, pm.gp.cov.ExpQuad(1, ls=1.0), noise_sd=0.1)
            mechanism(model, X_star, epsilon=1.0, delta=1e-5, y_bounds=bounds)
        gap, d_int = _integer_gap(captured)
        assert gap <= d_int
        worst = max(worst, gap / d_int)
    assert worst > 0.5  # the check is not vacuous: the neighbours come close to the bound


def test_a_scale_too_large_for_int64_safety_is_refused_and_huge_values_do_not_warn():
    """Stop-26 audit: the docs claimed scale < 2^22 always; ε = 0.001 with 10⁶ coordinates
    gave 6.6·10⁶.  Scales above 2^40 (where int64 overflow would stop being astronomically
    unlikely) are refused from the public settings; below it the plan is as before.  A huge
    whitened value is clamped without a RuntimeWarning (a warning would depend on it)."""
    with pytest.raises(ValueError, match="2\\^40"):
        plan_discrete_gaussian(1.0, 10**6, 1e-19)
    plan = plan_discrete_gaussian(1.0, 10**6, 1e-12)
    assert plan.scale <= 2.0**40
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = discretise(np.array([1e308, -np.inf, np.nan, 0.3]), 2.0**-30)
    assert out.tolist() == [INT_LIMIT, -INT_LIMIT, 0, round(0.3 * 2**30)]


def test_unreachable_epsilon_delta_pair_is_a_clear_public_error() -> None:
    """ε = 1e-3 at δ = 1e-300: δ² underflows and no Rényi order reaches ε (stop-36 audit: a
    RuntimeError asking to report a bug); refused before the spend, nothing drawn."""
    with pytest.raises(ValueError, match="cannot be reached by a zCDP"):
        zcdp_rho(1e-3, 1e-300)
    ledger = Ledger(epsilon=1.0, delta=1e-3)
    with pytest.raises(ValueError, match="cannot be reached by a zCDP"):
        cloaked_release(
            small_model(0),
            np.linspace(0, 6, 5)[:, None],
            epsilon=1e-3,
            delta=1e-300,
            y_bounds=(-2.0, 2.0),
            bounds_are_public=True,
            ledger=ledger,
        )
    assert ledger.spent_epsilon == 0.0
    assert zcdp_rho(1e-3, 1e-10) > 0.0  # a reachable pair still calibrates
