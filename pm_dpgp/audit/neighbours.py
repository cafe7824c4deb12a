r"""Adversarial search for neighbouring datasets that maximise the exact Rényi divergence.

A replace-one neighbouring pair is a common core ``(X_c, y_c)`` of ``n − 1`` points plus one
differing point: ``D = core ∪ {(x, y)}``, ``D' = core ∪ {(x', y')}``.  Together with a finite
test set ``T`` it determines the exact divergence ``D_α(P_D(T) ‖ P_D'(T))`` of the released
sample paths (``pm_dpgp.audit.renyi``).  The sample-path bound
(``SamplePathBound``) must dominate it for every
pair and every ``T``; this module looks for counter-examples.

Search: every coordinate (core inputs and outputs, both differing points, the test inputs) is
a box-constrained variable (inputs in the public domain, ``|y| ≤ M_Y``), and
``scipy.optimize.minimize(method="L-BFGS-B")`` maximises the chosen objective (the total, or
only the mean or covariance part, which the bound controls separately) from several starts:
random ones, and structured ones known to be hard (test points on the differing inputs,
``y = M_Y``, ``y' = −M_Y``, ``x = x'``).  Randomness only from the passed ``Generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize

from pm_dpgp._validation import (
    check_count,
    check_positive,
    check_rng,
    reject_unexpected,
    renamed,
    require,
)
from pm_dpgp.audit.renyi import Kernel, RenyiTerms, posterior_renyi_terms
from pm_dpgp.domain import Box, parse_domain

__all__ = [
    "NeighbourPair",
    "AdversarialResult",
    "Objective",
    "random_neighbours",
    "neighbour_divergence",
    "adversarial_neighbours",
]

Objective = Literal["total", "mean", "cov"]

#: Finite stand-in for D_α = +inf in the search's objective (L-BFGS-B needs finite values).
_INFINITE = 1e15


@dataclass(frozen=True, eq=False)
class NeighbourPair:
    """Two replace-one neighbouring datasets and a test set.

    ``X_core`` has shape ``(n−1, d)`` (possibly ``(0, d)``), ``x``/``x_prime`` shape ``(d,)``,
    ``X_test`` shape ``(m, d)``.
    """

    X_core: NDArray[np.float64]
    y_core: NDArray[np.float64]
    x: NDArray[np.float64]
    y: float
    x_prime: NDArray[np.float64]
    y_prime: float
    X_test: NDArray[np.float64]

    @property
    def n(self) -> int:
        return self.X_core.shape[0] + 1

    def datasets(
        self,
    ) -> tuple[tuple[NDArray, NDArray], tuple[NDArray, NDArray]]:
        """``((X, y), (X', y'))``: the differing point last in both."""
        X1 = np.vstack([self.X_core, self.x[None, :]])
        X2 = np.vstack([self.X_core, self.x_prime[None, :]])
        y1 = np.append(self.y_core, self.y)
        y2 = np.append(self.y_core, self.y_prime)
        return (X1, y1), (X2, y2)

    def swapped(self) -> NeighbourPair:
        """The same pair with the roles of D and D' exchanged."""
        return NeighbourPair(
            self.X_core, self.y_core, self.x_prime, self.y_prime, self.x, self.y, self.X_test
        )


@dataclass(frozen=True, eq=False)
class AdversarialResult:
    """The worst pair found, its exact divergence terms, and the search record."""

    pair: NeighbourPair
    terms: RenyiTerms
    objective: Objective
    values: tuple[float, ...] = field(default=())  # best objective value of each start

    @property
    def divergence(self) -> float:
        """The objective value of the worst pair (total, mean or cov part)."""
        return _objective_value(self.terms, self.objective)


def _objective_value(terms: RenyiTerms, objective: Objective) -> float:
    if objective == "total":
        return terms.total
    if objective == "mean":
        return terms.mean
    return terms.cov


def neighbour_divergence(
    kernel_fn: Kernel,
    pair: NeighbourPair,
    *,
    alpha: float,
    kernel_scale: float | None = None,
    r2: float,
    eta: float = 0.0,
    L: int = 1,
    **deprecated: Any,
) -> RenyiTerms:
    """Exact ``D_α(P_D ‖ P_D')`` on ``pair.X_test`` (via ``posterior_renyi_terms``).

    ``kernel_scale`` was ``sigma`` (deprecated)."""
    (X1, y1), (X2, y2) = pair.datasets()
    ks = renamed("sigma", "kernel_scale", deprecated, kernel_scale, func="neighbour_divergence")
    reject_unexpected(deprecated, func="neighbour_divergence")
    return posterior_renyi_terms(
        kernel_fn, X1, y1, X2, y2, pair.X_test, alpha=alpha, kernel_scale=ks, r2=r2, eta=eta, L=L
    )


def random_neighbours(
    domain: ArrayLike,
    n: int,
    M_Y: float,
    n_test: int,
    rng: np.random.Generator,
) -> NeighbourPair:
    """A uniformly random neighbouring pair and test set in the box ``domain``.

    Responses are drawn in ``[−M_Y, M_Y]`` (the centred bound of ``SamplePathBound``)."""
    rng = check_rng(rng)
    lows, highs = parse_domain(domain)
    d = lows.size
    M = check_positive(M_Y, "M_Y")
    n = check_count(n, "n")  # n=True was one point (stop 40)
    n_test = check_count(n_test, "n_test")

    def pts(k: int) -> NDArray:
        return lows + (highs - lows) * rng.random((k, d))

    return NeighbourPair(
        pts(n - 1),
        rng.uniform(-M, M, n - 1),
        pts(1)[0],
        float(rng.uniform(-M, M)),
        pts(1)[0],
        float(rng.uniform(-M, M)),
        pts(n_test),
    )


# --------------------------------------------------------------------------------------------
# packing the pair into one box-constrained vector
# --------------------------------------------------------------------------------------------
def _pack(pair: NeighbourPair) -> NDArray[np.float64]:
    return np.concatenate(
        [
            pair.X_core.ravel(),
            pair.y_core,
            pair.x,
            [pair.y],
            pair.x_prime,
            [pair.y_prime],
            pair.X_test.ravel(),
        ]
    )


def _unpack(z: NDArray[np.float64], n: int, d: int, m: int) -> NeighbourPair:
    i = 0
    Xc = z[i : i + (n - 1) * d].reshape(n - 1, d)
    i += (n - 1) * d
    yc = z[i : i + n - 1]
    i += n - 1
    x = z[i : i + d]
    i += d
    y = float(z[i])
    i += 1
    xp = z[i : i + d]
    i += d
    yp = float(z[i])
    i += 1
    T = z[i : i + m * d].reshape(m, d)
    return NeighbourPair(Xc.copy(), yc.copy(), x.copy(), y, xp.copy(), yp, T.copy())


def _structured_start(
    k: int, lows: NDArray, highs: NDArray, n: int, m: int, M: float, rng: np.random.Generator
) -> NeighbourPair:
    """Starts known to be hard: T on the differing inputs, extreme and opposite responses."""
    base = random_neighbours(Box(lows, highs), n, M, m, rng)
    x = base.x
    xp = lows + (highs - lows) * (1.0 - (x - lows) / np.where(highs > lows, highs - lows, 1.0))
    if k % 3 == 1:
        xp = x.copy()  # same input, opposite response (tight for the mean term)
    T = base.X_test.copy()
    T[0] = x
    if m > 1 and k % 3 != 1:
        T[1] = xp
    y_core = base.y_core
    if k % 2 == 0:  # core responses opposite to y near x (large residual)
        y_core = -M * np.ones(n - 1)
    return NeighbourPair(base.X_core, y_core, x, M, xp, -M, T)


def _separated(T: NDArray[np.float64], min_sep: float) -> NDArray[np.bool_]:
    """Whether the test points of each stacked test set ``T`` (N, m, d) are ≥ ``min_sep`` apart.

    Nearly coincident test points make the posterior covariance singular to working precision
    (the divergence then is a float64 artefact); exactly coincident ones are harmless but are
    not produced by the search.
    """
    m = T.shape[1]
    if m < 2:
        return np.ones(T.shape[0], dtype=bool)
    dist = np.sqrt(np.sum((T[:, :, None, :] - T[:, None, :, :]) ** 2, axis=-1))
    dist = dist + np.where(np.eye(m, dtype=bool), np.inf, 0.0)
    return np.min(dist, axis=(1, 2)) >= min_sep


def _repair_test_set(
    pair: NeighbourPair, lows: NDArray, highs: NDArray, min_sep: float, rng: np.random.Generator
) -> NeighbourPair:
    """Resample test points (after the first) that lie closer than ``min_sep`` to earlier ones."""
    T = pair.X_test.copy()
    for j in range(1, T.shape[0]):
        for _ in range(100):
            if np.min(np.linalg.norm(T[:j] - T[j], axis=1)) >= min_sep:
                break
            T[j] = lows + (highs - lows) * rng.random(lows.size)
    return NeighbourPair(pair.X_core, pair.y_core, pair.x, pair.y, pair.x_prime, pair.y_prime, T)


class _BatchedObjective:
    """Objective values for a stack of packed pairs, plus a forward-difference gradient.

    Search guidance only: the same posterior algebra as ``pm_dpgp.audit.renyi``, batched over
    pairs with NumPy's stacked Cholesky/solve/eigh (a relative jitter of 1e-12 keeps degenerate
    test sets factorisable).  The reported divergence of the final pair is recomputed with
    ``neighbour_divergence``.
    """

    def __init__(
        self,
        kernel_fn: Kernel,
        n: int,
        d: int,
        m: int,
        bounds: NDArray[np.float64],
        *,
        alpha: float,
        kernel_scale: float,
        r2: float,
        eta: float,
        L: int,
        objective: Objective,
        min_sep: float,
    ) -> None:
        self.kernel_fn, self.n, self.d, self.m = kernel_fn, n, d, m
        self.min_sep = min_sep
        self.lo, self.hi = bounds[:, 0], bounds[:, 1]
        self.alpha, self.sigma, self.r2, self.eta, self.L = alpha, kernel_scale, r2, eta, L
        self.objective = objective
        probe_a, probe_b = np.zeros((2, 3, d)), np.zeros((2, 2, d))
        try:
            out = np.asarray(kernel_fn(probe_a, probe_b))
            self.batched = out.shape == (2, 3, 2)
        except Exception:  # noqa: BLE001 - any failure means "not batch-capable"
            self.batched = False

    def _k(self, A: NDArray, B: NDArray) -> NDArray:
        if self.batched:
            return np.asarray(self.kernel_fn(A, B), dtype=np.float64)
        return np.stack(
            [np.asarray(self.kernel_fn(a, b), dtype=np.float64) for a, b in zip(A, B, strict=True)]
        )

    def values(self, Z: NDArray[np.float64]) -> NDArray[np.float64]:
        """Objective value of each row of ``Z``: ``+inf`` where ``Σ_2`` or ``Σ_α`` is not PD
        (``D_α = +∞``), ``−inf`` where it cannot be evaluated or the test points are too close."""
        n, d, m, N = self.n, self.d, self.m, Z.shape[0]
        i = (n - 1) * d
        Xc = Z[:, :i].reshape(N, n - 1, d)
        yc = Z[:, i : i + n - 1]
        i += n - 1
        x, y = Z[:, i : i + d], Z[:, i + d]
        i += d + 1
        xp, yp = Z[:, i : i + d], Z[:, i + d]
        i += d + 1
        T = Z[:, i : i + m * d].reshape(N, m, d)
        sep_ok = _separated(T, self.min_sep)
        XX = np.concatenate(
            [np.concatenate([Xc, x[:, None]], 1), np.concatenate([Xc, xp[:, None]], 1)], 0
        )
        YY = np.concatenate(
            [np.concatenate([yc, y[:, None]], 1), np.concatenate([yc, yp[:, None]], 1)], 0
        )
        TT = np.concatenate([T, T], 0)
        Lc = np.linalg.cholesky(self._k(XX, XX) + self.r2 * np.eye(n))
        W = np.linalg.solve(Lc, np.swapaxes(self._k(TT, XX), 1, 2))
        zc = np.linalg.solve(Lc, YY[..., None])[..., 0]
        mean = np.einsum("bnm,bn->bm", W, zc)
        Kss = self._k(T, T)
        Kss = 0.5 * (Kss + np.swapaxes(Kss, 1, 2))
        Kss2 = np.concatenate([Kss, Kss], 0)
        cov = self.sigma**2 * (Kss2 - np.swapaxes(W, 1, 2) @ W) + self.eta**2 * Kss2
        S1, S2, dmu = cov[:N], cov[N:], mean[:N] - mean[N:]
        diff = S2 - S1  # both laws get the same jitter, so the difference is unchanged
        scale = np.einsum("bii->b", S1) / m
        try:
            L1 = np.linalg.cholesky(S1 + (1e-12 * scale)[:, None, None] * np.eye(m))
        except np.linalg.LinAlgError:
            if N == 1:
                return np.array([-math.inf])
            return np.concatenate([self.values(Z[j : j + 1]) for j in range(N)])
        A = np.linalg.solve(L1, diff)
        E = np.linalg.solve(L1, np.swapaxes(A, 1, 2))
        delta, Q = np.linalg.eigh(0.5 * (E + np.swapaxes(E, 1, 2)))
        w = np.einsum("bij,bi->bj", Q, np.linalg.solve(L1, dmu[..., None])[..., 0])
        a = self.alpha
        ok = np.all(1.0 + delta > 0.0, axis=1) & np.all(1.0 + a * delta > 0.0, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_part = 0.5 * a * np.sum(w * w / (1.0 + a * delta), axis=1)
            cov_part = np.sum(a * np.log1p(delta) - np.log1p(a * delta), axis=1) / (2 * (a - 1))
        val = {"total": mean_part + cov_part, "mean": mean_part, "cov": cov_part}[self.objective]
        val = self.L * val
        # Σ_2 or Σ_α not PD: D_α = +inf, the worst case, not a point to avoid (the search was
        # repelled from it: at α = 1.55 > α_max it reported 6.1 where 2% of random pairs give
        # +inf; stop-45 audit).  Non-finite δ (a failed decomposition) stays −inf.
        infinite = np.all(np.isfinite(delta), axis=1) & ~ok
        val = np.where(ok & np.isfinite(val), val, -math.inf)
        return np.where(sep_ok, np.where(infinite, math.inf, val), -math.inf)

    def __call__(self, z: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        """``(−value, −gradient)`` at ``z`` for L-BFGS-B (forward differences, one batch)."""
        h = 1e-6 * np.maximum(self.hi - self.lo, 1e-12)
        h = np.where(z + h > self.hi, -h, h)  # stay inside the box
        Z = np.vstack([z[None, :], z[None, :] + np.diag(h)])
        v = self.values(Z)
        if v[0] == math.inf:  # D_α = +inf found: the best value; stop here (zero gradient)
            return -_INFINITE, np.zeros_like(z)
        if not np.isfinite(v[0]):
            return 1e6, np.zeros_like(z)
        v = np.where(v == math.inf, _INFINITE, v)  # a step into D_α = +inf is uphill
        g = np.where(np.isfinite(v[1:]), (v[1:] - v[0]) / h, 0.0)
        return -float(v[0]), -g


def adversarial_neighbours(
    kernel_fn: Kernel,
    domain: ArrayLike,
    *,
    n: int,
    alpha: float,
    kernel_scale: float | None = None,
    r2: float,
    M_Y: float | None = None,
    eta: float = 0.0,
    L: int = 1,
    n_test: int = 2,
    objective: Objective = "total",
    restarts: int = 6,
    maxiter: int = 200,
    rng: np.random.Generator | None = None,
    starts: list[NeighbourPair] | None = None,
    min_test_separation: float = 1e-3,
    **deprecated: Any,
) -> AdversarialResult:
    """Maximise the exact divergence over neighbouring pairs and test sets.

    Parameters
    ----------
    kernel_fn
        Normalised kernel (``k(x, x) ≤ 1``), e.g. ``eq_kernel``.
        Kernels that accept stacked inputs ``(..., n, d)`` are evaluated batched.
    domain
        Public input box (``parse_domain``).
    n, alpha, kernel_scale, r2, M_Y, eta, L
        Dataset size, Rényi order, kernel scale, effective ridge, centred response bound
        (responses in ``[−M_Y, M_Y]``), extra noise and number of paths of the release being
        audited (``kernel_scale`` and ``M_Y`` were ``sigma`` and ``y_bound``, deprecated).
    n_test
        Size ``m`` of the optimised test set.
    objective
        ``"total"`` (D_α), ``"mean"`` or ``"cov"`` (the two parts the bound controls).
    restarts
        Number of starts (half structured, half uniformly random) besides ``starts``.
    maxiter
        L-BFGS-B iterations per start (batched forward-difference gradients).
    rng
        The only source of randomness.
    starts
        Extra starting pairs (e.g. the worst pair of an earlier search).
    min_test_separation
        Test points are kept at least this far apart, relative to the domain's diameter:
        nearly coincident test points make the covariance singular to working precision and the
        computed divergence meaningless (training points may coincide freely).

    Returns
    -------
    AdversarialResult
        The best pair over both orientations (D, D') and (D', D); its ``terms`` are recomputed
        exactly with ``neighbour_divergence`` (``ExactPosterior``).
    """
    func = "adversarial_neighbours"
    sigma = renamed("sigma", "kernel_scale", deprecated, kernel_scale, func=func)
    sigma = require(sigma, "kernel_scale", func=func)
    M_Y = require(renamed("y_bound", "M_Y", deprecated, M_Y, func=func), "M_Y", func=func)
    reject_unexpected(deprecated, func=func)
    if objective not in ("total", "mean", "cov"):
        raise ValueError(f"objective must be 'total', 'mean' or 'cov', got {objective!r}.")
    rng = check_rng(rng)
    lows, highs = parse_domain(domain)
    d = lows.size
    M = check_positive(M_Y, "M_Y")
    for name, v in (("n", n), ("n_test", n_test), ("L", L), ("restarts", restarts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "restarts" else 1):
            raise ValueError(f"{name} must be a positive integer, got {v!r}.")
    kw = {"alpha": alpha, "kernel_scale": sigma, "r2": r2, "eta": eta, "L": L}
    box = np.column_stack([lows, highs])
    bounds = np.vstack(
        [np.tile(box, (n - 1, 1)), np.tile([-M, M], (n - 1, 1))]
        + [box, [[-M, M]], box, [[-M, M]], np.tile(box, (n_test, 1))]
    )
    diam = float(np.linalg.norm(highs - lows))
    min_sep = check_positive(min_test_separation, "min_test_separation", allow_zero=True) * diam
    fun = _BatchedObjective(
        kernel_fn, n, d, n_test, bounds, objective=objective, min_sep=min_sep, **kw
    )

    init = list(starts or [])
    for k in range(restarts):
        if k % 2 == 0:
            init.append(_structured_start(k // 2, lows, highs, n, n_test, M, rng))
        else:
            init.append(random_neighbours(box, n, M, n_test, rng))
    if not init:
        raise ValueError("nothing to search: restarts = 0 and no starts given.")
    init = [_repair_test_set(p, lows, highs, min_sep, rng) for p in init]

    def exact(p: NeighbourPair) -> tuple[float, RenyiTerms]:
        if not _separated(p.X_test[None], min_sep)[0]:
            return -math.inf, RenyiTerms(float(alpha), math.nan, math.nan)
        try:
            t = neighbour_divergence(kernel_fn, p, **kw)
        except (np.linalg.LinAlgError, ValueError):
            return -math.inf, RenyiTerms(float(alpha), math.nan, math.nan)
        v = _objective_value(t, objective)
        return (v if not math.isnan(v) else -math.inf), t

    best_pair: NeighbourPair | None = None
    best_terms = RenyiTerms(float(alpha), math.nan, math.nan)
    best_val = -math.inf
    values: list[float] = []
    for start in init:
        z0 = np.clip(_pack(start), bounds[:, 0], bounds[:, 1])
        res = minimize(
            fun,
            z0,
            jac=True,
            method="L-BFGS-B",
            bounds=[tuple(b) for b in bounds],
            options={"maxiter": maxiter},
        )
        cand = _unpack(np.clip(res.x, bounds[:, 0], bounds[:, 1]), n, d, n_test)
        run_best = -math.inf
        for p in (cand, cand.swapped(), start, start.swapped()):
            v, t = exact(p)
            run_best = max(run_best, v)
            if v > best_val:
                best_val, best_pair, best_terms = v, p, t
        values.append(run_best)
    if best_pair is None:
        best_pair = init[0]
    return AdversarialResult(best_pair, best_terms, objective, tuple(values))
