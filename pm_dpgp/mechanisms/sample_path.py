"""Posterior sample-path release (Maciazek): the posterior's own randomness as mechanism.

Full privacy: inputs and outputs are private, neighbours replace one ``(x, y)``.
The prior is ``f ~ GP(μ₀, σ² k)`` with ``k(x, x) ≤ 1`` and the observation noise
variance is ``σ² r²`` (``r²`` the effective ridge), all public (REFERENCE §4).  The
release is ``L`` independent draws of the posterior process, optionally plus
``η g`` with ``g ~ GP(0, k)`` independent (extra prior-GP noise).  Its Rényi-DP
curve comes from :mod:`pm_dpgp.mechanisms.sample_path_bounds`; the ledger is
charged before any path is drawn.

The release is *function-valued*: :meth:`SamplePathRelease.evaluate` draws the
released paths at new inputs conditionally on every value released so far, so
the joint law of all values ever released is the posterior joint — this costs no
extra privacy (the paths were released as whole functions; evaluating them is
post-processing).  Only the data owner (curator) holds this object, because it
needs the private data to condition; what is published is
:meth:`SamplePathRelease.to_inference_data`.

Randomness: with ``rng=None`` (default) the paths are drawn from a NumPy Generator seeded
from OS entropy (``noise_source = "numpy_os_entropy"``); a Generator passed by the caller is
the simulation mode (``"numpy_simulation"``).  Either way the sampler is floating point; see
``docs/secure_noise.md`` ("Sample paths") for what this does and does not protect.

Numerics: the posterior covariance at many nearby inputs is numerically
singular.  A nugget ``j`` (relative to ``σ²``) is added to the covariance of the
released values: the release is then ``f(x) + e(x)`` with ``e`` independent white
noise of variance ``j``, i.e. data-independent noise added after the private
draw (post-processing, so the guarantee is unchanged).  The nugget actually used
is recorded in the metadata and the statistics ``evaluate`` returns are exact for
that law.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.linalg import LinAlgError
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import cholesky, eigh, qr, solve_triangular

from pm_dpgp._validation import (
    PrivacyWarning,
    check_delta,
    check_finite_array,
    check_positive,
    check_rng,
)
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.noise import SEED_POLICY_SIMULATION, SIMULATION
from pm_dpgp.mechanisms.sample_path_bounds import (
    SamplePathBound,
    kernel_lower_bound,
    parse_domain,
)
from pm_dpgp.models import GPRegression, PublicGP

#: ``noise_source`` of a sample-path release drawn without a caller's Generator.
SAMPLE_PATH_OS_ENTROPY = "numpy_os_entropy"

__all__ = ["SamplePathRelease", "sample_path_release"]

KernelClass = Literal["generic", "exponential_1d", "constant"]


@dataclass
class _PathState:
    """Growing joint factor of all released values: ``F = μ + L_full W``."""

    X: NDArray[np.float64]  # (q, d) inputs released so far
    mean: NDArray[np.float64]  # (q,) posterior mean there (private; never published)
    L: NDArray[np.float64]  # (q, q) lower factor of the released values' covariance
    W: NDArray[np.float64]  # (q, L_paths) standard normals behind the released values
    nugget: float


@dataclass
class SamplePathRelease:
    """``L`` released posterior paths, evaluable anywhere (curator-side object).

    Attributes
    ----------
    bound:
        the public Rényi-DP bound of one path (:class:`SamplePathBound`).
    n_paths:
        ``L``, the number of released paths (all charged to the ledger at once).
    delta:
        δ at which ``epsilon`` is reported.
    epsilon:
        ε of the ``L`` paths at ``delta`` (optimal RDP conversion).
    """

    public_gp: PublicGP
    bound: SamplePathBound
    n_paths: int
    delta: float
    epsilon: float
    eta: float
    _alpha: NDArray[np.float64] = field(repr=False)  # (K + σ²r²I)⁻¹ (y − μ₀): private
    _rng: np.random.Generator = field(repr=False)
    _state: _PathState | None = field(default=None, repr=False)
    metadata: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ algebra
    def _cross_cov(self, A: NDArray[np.float64], B: NDArray[np.float64]) -> NDArray[np.float64]:
        """Covariance of the released process between inputs ``A`` and ``B``.

        ``σ²[k(A,B) − k(A,X)(K + r²I)⁻¹k(X,B)] + η² k(A,B)``: the PublicGP kernel is
        ``σ² k`` and its noise variance ``σ² r²`` (R&W 2006, eq. 2.24).
        """
        gp = self.public_gp
        post = gp.posterior()
        Va = solve_triangular(post.L, gp.kernel(gp.X, A), lower=True)
        Vb = Va if B is A else solve_triangular(post.L, gp.kernel(gp.X, B), lower=True)
        K_ab = gp.kernel(A, B)
        scale = 1.0 + self.eta**2 / self.bound.sigma**2
        return scale * K_ab - Va.T @ Vb

    def _mean(self, A: NDArray[np.float64]) -> NDArray[np.float64]:
        gp = self.public_gp
        return gp.mean + gp.kernel(A, gp.X) @ self._alpha

    # ------------------------------------------------------------------ release
    def evaluate(self, X_new: ArrayLike) -> NDArray[np.float64]:
        """Values of the ``L`` released paths at ``X_new``, shape ``(L, m)``.

        Drawn from the posterior conditional on every value released so far
        (block-Cholesky extension of the joint factor), so repeated and lazy
        evaluations are consistent with one path per draw.  No privacy cost.
        """
        X_new = check_finite_array(X_new, "X_new", ndim=2)
        if X_new.shape[1] != self.public_gp.input_dim:
            raise ValueError(
                f"X_new must have {self.public_gp.input_dim} column(s), got {X_new.shape}."
            )
        if self._state is None:
            fresh = X_new
        else:
            known, _ = _match_rows(X_new, self._state.X)
            fresh = X_new[~known]
        if len(fresh):
            _, first = np.unique(fresh, axis=0, return_index=True)
            self._extend(fresh[np.sort(first)])
        state = self._state
        _, where = _match_rows(X_new, state.X)
        return (state.mean[where, None] + state.L[where] @ state.W).T

    def _extend(self, X_new: NDArray[np.float64]) -> None:
        """Draw the paths at new, distinct inputs conditionally on all released values."""
        state = self._state
        S_nn = self._cross_cov(X_new, X_new)
        mean_new = self._mean(X_new)
        nugget = self.metadata["nugget_variance"]
        if state is None:
            L_nn = _nugget_cholesky(S_nn, nugget)
            L_no = np.zeros((len(X_new), 0))
        else:
            S_on = self._cross_cov(state.X, X_new)
            L_no = solve_triangular(state.L, S_on, lower=True).T
            S_cond = S_nn - L_no @ L_no.T
            L_nn = _nugget_cholesky(S_cond, nugget)
        Z = self._rng.standard_normal((len(X_new), self.n_paths))
        if state is None:
            self._state = _PathState(X_new, mean_new, L_nn, Z, nugget)
            return
        q, m = len(state.X), len(X_new)
        L_full = np.zeros((q + m, q + m))
        L_full[:q, :q] = state.L
        L_full[q:, :q] = L_no
        L_full[q:, q:] = L_nn
        self._state = _PathState(
            np.vstack([state.X, X_new]),
            np.concatenate([state.mean, mean_new]),
            L_full,
            np.vstack([state.W, Z]),
            nugget,
        )

    @property
    def released_inputs(self) -> NDArray[np.float64]:
        """All inputs at which values were released so far (public queries)."""
        return np.empty((0, self.public_gp.input_dim)) if self._state is None else self._state.X

    @property
    def released_values(self) -> NDArray[np.float64]:
        """``(L, q)``: all values released so far, in query order."""
        if self._state is None:
            return np.empty((self.n_paths, 0))
        s = self._state
        return (s.mean[:, None] + s.L @ s.W).T

    def to_inference_data(self, variable_name: str = "f_path") -> Any:
        """Everything released so far as ``InferenceData`` (DP content only).

        ``posterior_predictive[variable_name]`` has dims ``(chain, draw, x_star)`` with
        one draw per released path; the public query inputs are in ``constant_data``.
        """
        from pm_dpgp.compat import add_groups, get_group
        from pm_dpgp.release import Release

        release = Release(
            mechanism="sample_path",
            draws=self.released_values,
            X_star=self.released_inputs,
            noise_factor=np.zeros((len(self.released_inputs), 0)),
            metadata=self.metadata,
            variable_name=variable_name,
        )
        idata = release.to_inference_data()
        const = get_group(idata, "constant_data").drop_vars("dp_noise_sd")
        return add_groups(idata, {"constant_data": const})


def _check_kernel_class(
    public_gp: PublicGP, kernel_class: str, sigma: float, points: NDArray[np.float64]
) -> None:
    """Refuse a kernel class whose sensitivity bound does not apply to this kernel.

    ``"exponential_1d"`` relies on the Markov property of ``exp(−|x − x'|/ℓ)`` in 1-D,
    ``k(a, c) = k(a, b) k(b, c)`` for ``a ≤ b ≤ c``; ``"constant"`` on ``k`` being constant.
    Both are checked numerically on the training and query inputs.
    """
    if kernel_class == "generic":
        return
    if kernel_class not in ("exponential_1d", "constant"):
        raise ValueError(
            f"kernel_class must be 'generic', 'exponential_1d' or 'constant', got {kernel_class!r}."
        )
    x = np.unique(points, axis=0)
    K = public_gp.kernel(x, x) / sigma**2
    if kernel_class == "constant":
        ok = np.allclose(K, K[0, 0], rtol=1e-9, atol=1e-12)
    else:
        if x.shape[1] != 1:
            raise ValueError("kernel_class='exponential_1d' needs one-dimensional inputs.")
        a, b, c = 0, np.arange(1, len(x) - 1), len(x) - 1  # sorted: x[a] <= x[b] <= x[c]
        ok = len(x) < 3 or np.allclose(K[a, c], K[a, b] * K[b, c], rtol=1e-7, atol=1e-12)
        ok = ok and np.allclose(np.diag(K), K[0, 0], rtol=1e-9)
    if not ok:
        raise ValueError(
            f"The kernel is not of class {kernel_class!r} (checked numerically on the inputs); "
            "its sensitivity bound would not hold. Use kernel_class='generic'."
        )


def _nugget_cholesky(S: NDArray[np.float64], nugget: float) -> NDArray[np.float64]:
    """Lower factor ``L`` with ``L Lᵀ = S₊ + nugget·I``, ``S₊`` the PSD part of ``S``.

    The nugget is fixed in advance (data-independent), never grown on failure: a
    jitter chosen by trial on a matrix that depends on private inputs would make
    the added noise data-dependent.  When the Cholesky factorisation of
    ``S + nugget·I`` fails because round-off made ``S`` slightly indefinite, its
    negative eigenvalues (zero in exact arithmetic) are clipped and the factor is
    re-triangularised by a QR decomposition.
    """
    S = 0.5 * (S + S.T)
    try:
        return cholesky(S + nugget * np.eye(len(S)), lower=True)
    except LinAlgError:
        w, V = eigh(S)
        F = V * np.sqrt(np.clip(w, 0.0, None) + nugget)
        R = qr(F.T, mode="r")[0]
        L = R.T
        return L * np.sign(np.diag(L))[None, :]


def _match_rows(
    X_new: NDArray[np.float64], X_old: NDArray[np.float64]
) -> tuple[NDArray[np.bool_], NDArray[np.intp]]:
    """For each row of ``X_new``: is it a row of ``X_old``, and which one."""
    eq = np.all(X_new[:, None, :] == X_old[None, :, :], axis=2)
    return eq.any(axis=1), eq.argmax(axis=1)


def sample_path_release(
    gpr: GPRegression,
    X_star: ArrayLike,
    *,
    n_paths: int = 1,
    sigma: float,
    y_bound: float,
    delta: float,
    kappa: float | None = None,
    domain: ArrayLike | None = None,
    eta: float = 0.0,
    kernel_class: KernelClass = "generic",
    constant: Literal["proved", "author"] = "proved",
    hyperparameters: dict[str, float] | None = None,
    ledger: Ledger | None = None,
    rng: np.random.Generator | None = None,
    clip: Literal["warn", "raise"] = "warn",
    nugget: float = 1e-10,
) -> SamplePathRelease:
    """Release ``n_paths`` GP posterior sample paths of a fully private dataset.

    Parameters
    ----------
    gpr:
        model from :func:`pm_dpgp.models.gp_regression` with kernel ``σ² k``
        (``k(x,x) ≤ 1``), noise sd ``σ r`` and public prior mean ``μ₀``.
    X_star:
        public inputs at which the paths are first evaluated (more later, for free,
        with :meth:`SamplePathRelease.evaluate`).
    sigma:
        the public kernel scale ``σ``; ``k = kernel / σ²`` must satisfy ``k(x, x) ≤ 1``.
    y_bound:
        public ``M_Y``: the centred responses ``y − μ₀`` are clipped to ``[−M_Y, M_Y]``.
    delta:
        δ at which ε is reported (the ledger composes the RDP curve itself).
    kappa, domain:
        lower bound ``κ`` of ``k`` on the public input domain, or the domain from which
        it is computed: an interval ``(low, high)`` or one ``(low, high)`` pair per input
        dimension; private inputs outside the box
        are clipped into it (with a warning) so that the bound holds.
    eta:
        extra prior-GP noise scale ``η`` (0 for none).
    kernel_class:
        which mean-sensitivity bound applies.
    constant:
        must be ``"proved"`` (``Δ = 2 B √Φ``).  ``"author"`` (``√2 B √Φ``, the author's code
        constant) is **refused** with ``ValueError`` before anything is computed, spent or
        drawn: exact neighbouring pairs violate it (``docs/sample_paths.md`` §6).  It stays
        available as ``SamplePathBound(..., constant="author")`` for comparison.
    nugget:
        relative white-noise variance added to the released values for numerical
        stability (post-processing; recorded).
    """
    if constant != "proved":
        raise ValueError(
            f"sample_path_release needs constant='proved', got {constant!r}. The author's "
            "constant sqrt(2)*B*sqrt(Phi) is not a valid bound (exact neighbouring pairs exceed "
            "it, docs/sample_paths.md section 6), so it cannot be used for a release; nothing "
            "was spent or drawn. For comparison use SamplePathBound(..., constant='author')."
        )
    # The posterior draw *is* the mechanism, so there is no discretised form of it: without a
    # Generator, use a fresh one seeded from OS entropy (np.random.default_rng() does so),
    # never a fixed or global seed.  Float caveat: docs/secure_noise.md, "Sample paths".
    noise_source = SAMPLE_PATH_OS_ENTROPY if rng is None else SIMULATION
    rng = np.random.default_rng() if rng is None else check_rng(rng)
    delta = check_delta(delta)
    sigma = check_positive(sigma, "sigma")
    y_bound = check_positive(y_bound, "y_bound")
    eta = check_positive(eta, "eta", allow_zero=True)
    if int(n_paths) != n_paths or n_paths < 1:
        raise ValueError(f"n_paths must be a positive integer, got {n_paths!r}.")
    n_paths = int(n_paths)
    X_star = check_finite_array(X_star, "X_star", ndim=2)
    public_gp = gpr.public_gp(hyperparameters)
    X = public_gp.X
    if domain is not None:
        lower, upper = parse_domain(domain)
        if lower.size != X.shape[1]:
            raise ValueError(
                f"domain has {lower.size} dimension(s) but the inputs have {X.shape[1]}; give "
                "one (low, high) pair per input dimension."
            )
        outside = np.any((X < lower) | (X > upper), axis=1)
        if outside.any():
            if clip == "raise":
                raise ValueError(
                    f"{int(outside.sum())} private inputs lie outside the public domain; widen "
                    "it or pass clip='warn' to clip them into it."
                )
            warnings.warn(
                f"{int(outside.sum())} private inputs lie outside the public domain and were "
                "clipped into it; the release describes the clipped data.",
                PrivacyWarning,
                stacklevel=2,
            )
            public_gp = dataclasses.replace(public_gp, X=np.clip(X, lower, upper))
            X = public_gp.X
    for name, inputs in (("training inputs", X), ("X_star", X_star)):
        ratio = public_gp.kernel_diag(inputs) / sigma**2
        if np.any(ratio > 1 + 1e-9):
            raise ValueError(
                f"k(x, x) = kernel(x, x) / sigma² reaches {ratio.max():.4g} > 1 on the {name}: "
                "sigma must be the kernel's public scale (k(x, x) <= 1, REFERENCE §4)."
            )
    if kappa is None:
        if domain is None:
            raise ValueError(
                "Give the public input domain (domain=(lower, upper)) or a kernel lower bound "
                "kappa in [0, 1] (kappa=0 is always valid but gives a weaker bound)."
            )
        kappa = kernel_lower_bound(lambda A, B: public_gp.kernel(A, B) / sigma**2, domain)
    _check_kernel_class(public_gp, kernel_class, sigma, np.vstack([X, X_star]))
    r2 = public_gp.noise_var / sigma**2
    bound = SamplePathBound(
        n=X.shape[0],
        sigma=sigma,
        r2=r2,
        y_bound=y_bound,
        kappa=float(kappa),
        eta=eta,
        kernel_class=kernel_class,
        constant=constant,
    )
    event = bound.event(n_paths, label=f"{n_paths} GP posterior sample path(s) (Maciazek)")
    if ledger is not None:
        ledger.spend(event)  # refuses before any path is drawn
    y_centred = gpr.y - public_gp.mean
    n_clipped = int(np.sum(np.abs(y_centred) > y_bound))
    if n_clipped:
        if clip == "raise":
            raise ValueError(
                f"{n_clipped} centred responses exceed the public bound {y_bound}; widen it "
                "or pass clip='warn'."
            )
        warnings.warn(
            f"{n_clipped} of {y_centred.size} centred responses exceed the public bound "
            f"|y - mean| <= {y_bound} and were clipped; the release describes the clipped data.",
            PrivacyWarning,
            stacklevel=2,
        )
    alpha = public_gp.posterior().alpha(np.clip(y_centred, -y_bound, y_bound))
    epsilon = event.epsilon(delta)
    metadata = {
        "privacy_model": "full",
        "neighbouring_relation": "replace-one (x, y); inputs and outputs private",
        "n_paths": n_paths,
        "epsilon": epsilon,
        "delta": delta,
        "alpha_max": bound.alpha_max,
        "kappa": float(kappa),
        "V": bound.V,
        "Phi": bound.Phi,
        "mean_sensitivity": bound.Delta,
        "tau": bound.tau,
        "kernel_class": kernel_class,
        "sensitivity_constant": constant,
        "sigma": sigma,
        "r2": r2,
        "eta": eta,
        "y_bound": y_bound,
        "prior_mean": public_gp.mean,
        "kernel": public_gp.description,
        "hyperparameters": public_gp.hyperparameters,
        "nugget_variance": nugget * sigma**2,
        "privacy_event": event.to_metadata(),
        "noise_source": noise_source,
        "seed_policy": SEED_POLICY_SIMULATION
        if noise_source == SIMULATION
        else (
            "no stored seed: numpy Generator seeded from OS entropy (float sampler; see "
            "docs/secure_noise.md, 'Sample paths')"
        ),
    }
    release = SamplePathRelease(
        public_gp=public_gp,
        bound=bound,
        n_paths=n_paths,
        delta=delta,
        epsilon=epsilon,
        eta=eta,
        _alpha=alpha,
        _rng=rng,
        metadata=metadata,
    )
    release.evaluate(X_star)
    return release
