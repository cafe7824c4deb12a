"""Binning baselines (Smith et al. 2018 §4): Laplace bin means, integral-kernel GP, LaplaceEvent."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from scipy import integrate

from pm_dpgp.accounting import (
    DEFAULT_ORDERS,
    BudgetExceededError,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    PureDpEvent,
    event_from_metadata,
)
from pm_dpgp.audit import scan_for_values
from pm_dpgp.datasets import load_kung_women
from pm_dpgp.gp.integral import box_box_kernel, point_box_kernel
from pm_dpgp.mechanisms.label.binning import (
    binned_gp,
    binned_predict,
    binned_release,
    make_bins,
    occupied_bins,
    simulation_unit_sensitivity,
    summation_rounding,
)
from tests.tolerances import scalar_rtol

BOUNDS = (50.0, 180.0)


def dense_bins(release):
    """``(counts, laplace_scale)`` with one entry per bin of the grid (0 for an empty bin),
    from the release's occupied-bin metadata (stop 43)."""
    index, counts, scale = occupied_bins(release)
    n_bins = release.draws.shape[1]  # one DP mean per bin
    dense_counts, dense_scale = np.zeros(n_bins, dtype=np.int64), np.zeros(n_bins)
    dense_counts[index], dense_scale[index] = counts, scale
    return dense_counts, dense_scale


@pytest.fixture(scope="module")
def kung():
    age, height = load_kung_women()
    return age[:, None], height


def _exact_means(X, y, bins, lo=BOUNDS[0], hi=BOUNDS[1]):
    idx = bins.index(X, "drop")
    keep = idx >= 0
    yc = np.clip(y[keep], lo, hi)
    counts = np.bincount(idx[keep], minlength=bins.n_bins)
    sums = np.bincount(idx[keep], weights=yc, minlength=bins.n_bins)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), counts


def test_laplace_scale_is_the_closed_form(kung):
    X, y = kung
    bins = make_bins(np.linspace(0, 90, 10))
    eps = 0.7
    r = binned_release(X, y, bins, epsilon=eps, y_bounds=BOUNDS, rng=np.random.default_rng(0))
    _, counts = _exact_means(X, y, bins)
    d = BOUNDS[1] - BOUNDS[0]
    b = np.asarray(dense_bins(r)[1])
    # × S = 1 + 4u + 2r ≥ 1: the computed sums' sensitivity (round-off included, stop 47)
    unit = simulation_unit_sensitivity(summation_rounding(counts[counts > 0].astype(np.int64)))
    assert 1.0 < unit < 1.0 + 1e-9
    np.testing.assert_allclose(b, d / counts / eps * unit, rtol=scalar_rtol(3), atol=0)
    assert (
        r.metadata["privacy_event"]
        == LaplaceEvent(1 / eps, r.metadata["privacy_event"]["label"]).to_metadata()
    )
    # secure sampler: the scale is the closed form up to its grid (relative ≤ 2^-18), never below
    s = binned_release(X, y, bins, epsilon=eps, y_bounds=BOUNDS)
    bs = np.asarray(dense_bins(s)[1])
    assert np.all(bs >= d / counts / eps) and np.all(bs <= d / counts / eps * (1 + 2.0**-18))
    assert s.metadata["privacy_event"]["type"] == "PureDpEvent"
    assert s.metadata["privacy_event"]["epsilon"] <= eps


@pytest.mark.parametrize("secure", [False, True])
def test_noise_has_the_laplace_law(kung, secure):
    """Mean absolute deviation of the noise is b_j (Laplace), within 6 standard errors.

    The secure case draws from OS entropy: 5 standard errors at n = 4000 failed by chance with
    probability 6.8e-7 per bin (exact Gamma tail of the mean of |Lap(b)|), ~4e-6 per 3-stack CI
    run; 6 at n = 10000 give 3e-9 per bin and a tighter bound (0.06 b, was 0.079 b), so a wrong
    scale is caught at least as before."""
    X, y = kung
    bins = make_bins([0.0, 20.0, 90.0])
    n = 10000
    rng = None if secure else np.random.default_rng(1)
    r = binned_release(X, y, bins, epsilon=1.0, y_bounds=BOUNDS, n_draws=n, rng=rng)
    means, _ = _exact_means(X, y, bins)
    noise = r.draws - means[None, :]
    b = np.asarray(dense_bins(r)[1])
    mad = np.mean(np.abs(noise), axis=0)
    assert np.all(np.abs(mad - b) <= 6 * b / math.sqrt(n))  # sd of |Lap(b)| is b
    assert np.all(np.abs(np.median(noise, axis=0)) <= 6 * b / math.sqrt(n) * 1.5)


def test_privacy_loss_of_worst_neighbour(kung):
    """The worst single-label change (smallest bin, across the range) costs at most ε."""
    X, y = kung
    bins = make_bins(np.linspace(0, 90, 10))
    eps = 1.0
    _, counts = _exact_means(X, y, bins)
    j_bin = int(np.argmin(np.where(counts > 0, counts, np.inf)))
    i = int(np.flatnonzero(bins.index(X) == j_bin)[0])
    y1, y2 = y.copy(), y.copy()
    y1[i], y2[i] = BOUNDS
    r1, r2 = (
        binned_release(X, yy, bins, epsilon=eps, y_bounds=BOUNDS, rng=np.random.default_rng(4))
        for yy in (y1, y2)
    )
    diff = r2.draws[0] - r1.draws[0]  # same noise: the change of the exact means
    b = np.asarray(dense_bins(r1)[1])
    loss = np.sum(np.abs(diff)[b > 0] / b[b > 0])  # sup of the Laplace log-likelihood ratio
    assert loss <= eps * (1 + scalar_rtol(10))
    assert loss >= eps * (1 - 1e-9)  # tight: the worst change uses the whole budget
    assert np.count_nonzero(diff) == 1  # only one bin moves


def test_empty_bins_and_out_of_range_inputs(kung):
    X, y = kung
    edges = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    keep = (X[:, 0] < 10) | (X[:, 0] >= 20)  # bin [10, 20) empty
    Xk, yk = X[keep], y[keep]
    bins = make_bins(edges)
    with pytest.raises(ValueError, match="outside the bin edges"):
        binned_release(Xk, yk, bins, epsilon=1.0, y_bounds=BOUNDS, rng=np.random.default_rng(0))
    ledger = Ledger(epsilon=5.0, delta=1e-5)
    r = binned_release(
        Xk,
        yk,
        bins,
        epsilon=1.0,
        y_bounds=BOUNDS,
        out_of_range="drop",
        rng=np.random.default_rng(0),
        ledger=ledger,
    )
    counts = np.asarray(dense_bins(r)[0])
    assert counts[1] == 0 and counts.sum() == np.count_nonzero(Xk[:, 0] <= 40)
    assert r.draws[0, 1] == pytest.approx(115.0)  # public midpoint, no noise
    assert r.noise_sd[1] == 0.0 and np.all(r.noise_sd[counts > 0] > 0)
    r_fill = binned_release(
        Xk,
        yk,
        bins,
        epsilon=1.0,
        y_bounds=BOUNDS,
        out_of_range="clip",
        empty_value=140.0,
        rng=np.random.default_rng(1),
        ledger=ledger,
    )
    counts_c = np.asarray(dense_bins(r_fill)[0])
    assert counts_c.sum() == len(yk) and counts_c[-1] > counts[-1]  # ages > 40 in the last bin
    assert r_fill.draws[0, 1] == 140.0
    # prediction: out-of-range test points clipped (default), refused, or NaN
    Xs = np.array([[-5.0], [15.0], [35.0], [99.0]])
    p = binned_predict(r, Xs)
    assert p[0, 0] == r.draws[0, 0] and p[0, 1] == 115.0 and p[0, 3] == r.draws[0, -1]
    assert np.isnan(binned_predict(r, Xs, out_of_range="drop")[0, [0, 3]]).all()
    with pytest.raises(ValueError):
        binned_predict(r, Xs, out_of_range="raise")
    # the GP skips empty bins and predicts everywhere
    g = binned_gp(r, Xs, lengthscale=10.0, kernel_scale=20.0, noise_sd=5.0)
    assert np.all(np.isfinite(g.draws)) and g.noise_factor.shape == (4, 3)


def test_bad_input_is_refused_before_spending(kung):
    X, y = kung
    bins = make_bins(np.linspace(0, 90, 4))
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    bad = [
        dict(epsilon=0.0),
        dict(y_bounds=(5.0, 1.0)),
        dict(X=X[:10]),
        dict(bins=np.linspace(0, 1, 3)),
        dict(out_of_range="ignore"),
        dict(n_draws=0),
        dict(empty_value=float("nan")),
        dict(X=X - 100.0),  # every input out of range: refused (public inputs)
    ]
    for b in bad:
        kw = dict(
            X=X,
            y=y,
            bins=bins,
            epsilon=0.5,
            y_bounds=BOUNDS,
            ledger=ledger,
            rng=np.random.default_rng(0),
        )
        kw.update(b)
        with pytest.raises((ValueError, TypeError)):
            binned_release(**kw)
        assert ledger.history == [], b
    for edges in ([0.0], [0.0, 0.0, 1.0], [0.0, np.inf]):
        with pytest.raises(ValueError):
            make_bins(edges)
    binned_release(
        X, y, bins, epsilon=0.6, y_bounds=BOUNDS, ledger=ledger, rng=np.random.default_rng(0)
    )
    with pytest.raises(BudgetExceededError):
        binned_release(
            X, y, bins, epsilon=0.6, y_bounds=BOUNDS, ledger=ledger, rng=np.random.default_rng(1)
        )
    assert len(ledger.history) == 1


@pytest.mark.parametrize("lam", [0.25, 1.0, 3.0, 20.0])
@pytest.mark.parametrize("count", [1, 7])
def test_laplace_event_agrees_with_dp_accounting(lam, count):
    event = LaplaceEvent(lam, count=count)
    acc = RdpAccountant(list(DEFAULT_ORDERS))
    acc.compose(dp_accounting.LaplaceDpEvent(lam), count)
    np.testing.assert_allclose(event.rdp(DEFAULT_ORDERS), acc._rdp, rtol=1e-10, atol=0)
    for delta in (1e-3, 1e-6):
        ours = event.epsilon(delta)
        assert ours == pytest.approx(min(count / lam, acc.get_epsilon(delta)), rel=1e-9)
    # never above the curve every ε-DP mechanism satisfies (randomized response)
    assert np.all(event.rdp() <= PureDpEvent(1 / lam, count=count).rdp() * (1 + 1e-12))
    assert event_from_metadata(event.to_metadata()) == event


def test_laplace_event_composes_with_gaussian_releases():
    ledger = Ledger(epsilon=10.0, delta=1e-5, filter="renyi")
    ledger.spend(GaussianEvent(2.0))
    ledger.spend(LaplaceEvent(2.0, count=2))
    acc = RdpAccountant(list(DEFAULT_ORDERS))
    acc.compose(dp_accounting.GaussianDpEvent(2.0))
    acc.compose(dp_accounting.LaplaceDpEvent(2.0), 2)
    assert ledger.epsilon() <= acc.get_epsilon(1e-5) * (1 + 1e-9)


@pytest.mark.parametrize("ls", [0.3, 2.0])
def test_integral_kernel_matches_quadrature(ls):
    lo_a, hi_a, lo_b, hi_b = (
        np.array([[0.0]]),
        np.array([[1.0]]),
        np.array([[0.5]]),
        np.array([[2.5]]),
    )
    k = box_box_kernel(lo_a, hi_a, lo_b, hi_b, ls, 1.5)[0, 0]
    f = lambda v, u: 1.5**2 * math.exp(-((u - v) ** 2) / (2 * ls**2))  # noqa: E731
    ref, err = integrate.dblquad(f, 0.0, 1.0, 0.5, 2.5, epsabs=1e-13, epsrel=1e-12)
    assert k == pytest.approx(ref / 2.0, rel=1e-9)
    x = np.array([[0.7], [3.0]])
    kp = point_box_kernel(x, lo_b, hi_b, ls, 1.5)[:, 0]
    for xi, ki in zip(x[:, 0], kp, strict=True):
        ref, _ = integrate.quad(
            lambda v, xi=xi: 1.5**2 * math.exp(-((xi - v) ** 2) / (2 * ls**2)),
            0.5,
            2.5,
            epsabs=1e-14,
        )
        assert ki == pytest.approx(ref / 2.0, rel=1e-9)
    # 2-D boxes: the product of the 1-D factors (ARD lengthscales)
    lo, hi = np.array([[0.0, 1.0]]), np.array([[1.0, 1.5]])
    k2 = box_box_kernel(lo, hi, lo, hi, [ls, 1.0], 1.0)[0, 0]
    k1a = box_box_kernel(lo[:, :1], hi[:, :1], lo[:, :1], hi[:, :1], ls, 1.0)[0, 0]
    k1b = box_box_kernel(lo[:, 1:], hi[:, 1:], lo[:, 1:], hi[:, 1:], 1.0, 1.0)[0, 0]
    assert k2 == pytest.approx(k1a * k1b, rel=1e-12)


def test_binned_gp_and_leak_scan(kung):
    X, y = kung
    bins = make_bins(np.linspace(0, 90, 10))
    r = binned_release(X, y, bins, epsilon=1.0, y_bounds=BOUNDS, rng=np.random.default_rng(2))
    Xs = np.linspace(0, 90, 30)[:, None]
    for method in ("integral", "point"):
        g = binned_gp(r, Xs, lengthscale=15.0, kernel_scale=30.0, noise_sd=5.0, method=method)
        assert g.draws.shape == (1, 30) and np.all(np.isfinite(g.draws))
        assert g.metadata["epsilon_per_draw"] == 1.0  # post-processing: same guarantee
        # linear in the DP means: shifting every mean by c shifts the prediction by A·1·c
        r_shift = type(r)(
            r.mechanism, r.draws + 1.0, r.X_star, r.noise_factor, r.metadata, r.variable_name
        )
        g2 = binned_gp(
            r_shift, Xs, lengthscale=15.0, kernel_scale=30.0, noise_sd=5.0, method=method
        )
        A1 = g.noise_factor @ (1.0 / (math.sqrt(2.0) * np.asarray(dense_bins(r)[1])))
        np.testing.assert_allclose(g2.draws[0] - g.draws[0], A1, rtol=1e-8, atol=1e-10)
        means, _ = _exact_means(X, y, bins)
        private = np.concatenate([y, np.clip(y, *BOUNDS), means])
        assert scan_for_values(g.to_inference_data(), private) == []
    assert scan_for_values(r.to_inference_data(), np.concatenate([y, means])) == []


def test_integral_kernel_of_narrow_boxes_and_zero_width_boxes():
    """Audit 38c: identical or adjacent boxes of width w lost ``ε_mach ℓ²/w²`` relative (9e-5
    at ``w = ℓ/10⁶``, 2e-2 at ``ℓ/10⁷``, 0 instead of 1 at ``ℓ/10⁸``) to the four-term
    cancellation of ``G``; a zero-width box gave NaN silently.  References: the closed form
    in 60-digit arithmetic (validated against quadrature above)."""
    import mpmath

    mpmath.mp.dps = 60

    def ref(a, b, c, d):
        a, b, c, d = map(mpmath.mpf, (a, b, c, d))

        def h(u):
            root = mpmath.sqrt(mpmath.pi / 2)
            return u * root * mpmath.erf(u / mpmath.sqrt(2)) + mpmath.exp(-u * u / 2)

        return float((h(b - c) + h(a - d) - h(a - c) - h(b - d)) / ((b - a) * (d - c)))

    for w in (1e-2, 1e-6, 1e-8):
        for c in (0.0, w):  # the same box, the adjacent box
            k = box_box_kernel(
                np.array([[0.0]]), np.array([[w]]), np.array([[c]]), np.array([[c + w]]), 1.0, 1.0
            )[0, 0]
            assert k == pytest.approx(ref(0.0, w, c, c + w), rel=1e-13)
    with pytest.raises(ValueError, match="upper > lower"):
        box_box_kernel(
            np.ones((1, 1)), np.ones((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), 1.0, 1.0
        )
    with pytest.raises(ValueError, match="upper > lower"):
        point_box_kernel(np.zeros((1, 1)), np.ones((1, 1)), np.ones((1, 1)), 1.0, 1.0)


@pytest.mark.parametrize("method", ["integral", "point"])
def test_binned_gp_mean_equals_an_independent_gp_computation(method):
    """Audit 38c: the only check of ``binned_gp``'s predictive was its linearity in the DP
    means, which every error in its matrix ``A`` passes (dropping ``noise_sd²/n_j``, using
    ``b²`` for the Laplace variance ``2b²``, point covariances for the cross term, reversed
    ARD lengthscales, ignoring the prior mean).  Here: 2-D ARD bins of unequal widths, a
    prior mean, covariances by ``scipy.integrate`` per dimension, a dense solve."""
    rng = np.random.default_rng(4)
    X = rng.uniform(0, 4, (120, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(120)
    edges = [np.array([0.0, 1.0, 2.5, 4.0]), np.array([0.0, 0.5, 3.0, 4.0])]
    r = binned_release(
        X, y, make_bins(edges), epsilon=0.8, y_bounds=(-2.0, 4.0), rng=np.random.default_rng(1)
    )
    ls, s, nsd, mu = np.array([0.7, 2.0]), 1.2, 0.3, 0.4
    Xs = np.array([[0.2, 0.3], [2.7, 3.5], [3.9, 1.0], [6.0, -1.0]])
    g = binned_gp(r, Xs, lengthscale=ls, kernel_scale=s, noise_sd=nsd, mean=mu, method=method)
    counts = np.asarray(dense_bins(r)[0])
    b = np.asarray(dense_bins(r)[1])
    lower, upper = make_bins(edges).boxes()

    def k1(u, v, l):
        return math.exp(-((u - v) ** 2) / (2 * l * l))

    def bb(i, j):
        out = s * s
        for dim in range(2):
            a, bu, c, d, l = lower[i, dim], upper[i, dim], lower[j, dim], upper[j, dim], ls[dim]
            q = integrate.dblquad(lambda v, u, l=l: k1(u, v, l), a, bu, c, d, epsabs=1e-13)[0]
            out *= q / ((bu - a) * (d - c))
        return out

    def pb(x, j):
        out = s * s
        for dim in range(2):
            a, bu, l = lower[j, dim], upper[j, dim], ls[dim]
            out *= integrate.quad(lambda u, xd=x[dim], l=l: k1(xd, u, l), a, bu, epsabs=1e-14)[
                0
            ] / (bu - a)
        return out

    nb = len(counts)
    if method == "integral":
        K = np.array([[bb(i, j) for j in range(nb)] for i in range(nb)])
        Ks = np.array([[pb(x, j) for j in range(nb)] for x in Xs])
    else:
        c = 0.5 * (lower + upper)

        def kk(p, q):
            return s * s * k1(p[0], q[0], ls[0]) * k1(p[1], q[1], ls[1])

        K = np.array([[kk(p, q) for q in c] for p in c])
        Ks = np.array([[kk(x, q) for q in c] for x in Xs])
    occ = counts > 0
    K = K[np.ix_(occ, occ)] + np.diag(nsd**2 / counts[occ] + 2.0 * b[occ] ** 2)
    expected = mu + Ks[:, occ] @ np.linalg.solve(K, r.draws[0, occ] - mu)
    np.testing.assert_allclose(g.draws[0], expected, rtol=1e-8, atol=1e-10)
