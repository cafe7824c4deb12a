"""Label-private hyperparameter selection for cloaking (Smith, Álvarez & Lawrence 2021, §5, Alg. 1).

The steps, each named in the code:

1. validate the public inputs (grid against the model's hyperparameters, split, bounds, ε);
2. plan from public information only (``plan_cv_sse``): cloaking
   matrices per fold, the release noise, the sensitivity Δ(θ) of each configuration (corrected
   eq. 13, ``docs/selection.md`` §2), the drop of configurations above the public threshold and
   Δu = max over the kept ones (eq. 14);
3. charge the ledger (refusal here happens before the labels are read or anything is drawn);
4. compute the utilities −E[clipped CV SSE] from the private labels;
5. draw one configuration with the exponential mechanism (eq. 12), secure by default;
6. package: a ``SelectionResult`` whose public part holds no
   private value.

Privacy: ε-DP (and ε²/8-zCDP) with respect to the labels under label privacy (one clipped
label changes by at most ``d = upper − lower``; inputs, split and grid public).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from pm_dpgp._validation import check_epsilon, check_flag, check_public_bounds, check_rng
from pm_dpgp.accounting import Ledger
from pm_dpgp.selection.cv_sse import cv_sse_utilities, plan_cv_sse
from pm_dpgp.selection.exponential import (
    EventKind,
    exponential_mechanism_event,
    exponential_mechanism_probabilities,
    sample_exponential_mechanism,
)
from pm_dpgp.selection.grids import check_folds, check_grid, kfold_splits, prior_quantile_grid
from pm_dpgp.selection.private_data import check_data_schema, private_data
from pm_dpgp.selection.result import SelectionResult

__all__ = ["select_by_cross_validated_sse"]

LABEL_RELATION = "replace one clipped label by at most d (inputs, split and grid public)"


def select_by_cross_validated_sse(
    gpr: object,
    grid: Sequence[dict[str, float]] | None = None,
    *,
    epsilon: float,
    y_bounds: tuple[float, float],
    ledger: Ledger | None,
    folds: Sequence[ArrayLike] | None = None,
    n_folds: int = 5,
    release_epsilon: float | None = None,
    release_delta: float | None = None,
    error_clip: float = 4.0,
    max_sensitivity: float | None = None,
    calibration: Literal["analytic", "classic"] = "analytic",
    event_kind: EventKind = "auto",
    rng: np.random.Generator | None = None,
    noise_solver: Literal["batched", "per_fold"] = "batched",
    fold_linalg: Literal["fast", "reference"] = "fast",
    progressbar: bool = False,
) -> SelectionResult:
    """ε-DP choice of public hyperparameters for a cloaked release (Smith et al. 2021, Alg. 1).

    Privacy model: label privacy; neighbouring relation: one label, after clipping to
    ``y_bounds``, changes by at most ``d``.  Guarantee: ε-DP, charged as the event
    ``exponential_mechanism_event`` picks for the ledger
    (ε²/8-zCDP on a zCDP or empty ledger).  Proof: ``docs/selection.md`` §1–2.

    Parameters
    ----------
    gpr:
        a model from ``pm_dpgp.models.gp_regression`` (X public, y private).
    grid:
        candidate configurations ``[{name: value}, ...]``;
        ``None``: the prior 0.1/0.5/0.9 quantiles
        (``prior_quantile_grid``, public).
    epsilon:
        the selection's own ε.
    y_bounds:
        public clipping range of the labels; ``d = upper − lower``.
    ledger:
        charged before the labels are read; ``None`` only for a caller that charges the
        returned ``event`` itself.
    folds, n_folds:
        public split (list of test-index arrays); default: ``n_folds`` interleaved folds.
    release_epsilon, release_delta:
        the budget of the release that will follow: its cloaking noise enters the utility
        (Algorithm 1).  ``None``: noise-free utility.
    error_clip:
        prediction errors clipped at ``error_clip · d`` (the paper's 4).
    max_sensitivity:
        drop configurations whose Δ(θ) exceeds it, before the data are looked at (§5).
    calibration:
        Gaussian calibration of the release noise inside the utility.
    event_kind:
        ``"auto"``, ``"zcdp"``, ``"pure"`` or ``"renyi"``.
    rng:
        ``None``: OpenDP Gumbel noisy max from OS entropy; a Generator: simulation mode.
    noise_solver:
        how the release-noise covariances of the folds are solved (public; the same optimum
        either way, ``docs/selection.md`` §9): ``"batched"`` per configuration, or
        ``"per_fold"``.
    fold_linalg:
        the linear algebra of the fold cloaking matrices (public; equal in exact arithmetic,
        ``docs/selection.md`` §9): ``"fast"`` (one inverse per configuration, R-SVD bases) or
        ``"reference"`` (one Cholesky factor per fold, LAPACK ``gesdd``: the previous path).
    progressbar:
        show a progress bar over the configurations while their sensitivities are planned
        (one noise covariance per configuration and fold), as PyMC's samplers do.

    Examples
    --------
    >>> import pymc as pm, numpy as np
    >>> from pm_dpgp.models import gp_regression
    >>> from pm_dpgp.accounting import Ledger
    >>> from pm_dpgp.selection import select_by_cross_validated_sse, product_grid
    >>> X = np.linspace(0, 10, 40)[:, None]; y = np.sin(X[:, 0])
    >>> gpr = gp_regression(X, y, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)),
    ...                     noise_sd=0.3)
    >>> ledger = Ledger(epsilon=2.0, delta=1e-5)
    >>> res = select_by_cross_validated_sse(gpr, product_grid({"ell": [0.5, 2.0, 8.0]}),
    ...     epsilon=0.5, y_bounds=(-1.5, 1.5), ledger=ledger, release_epsilon=1.0,
    ...     release_delta=1e-5)
    >>> sorted(res.hyperparameters)
    ['ell']
    """
    # 1. validate public inputs
    progressbar = check_flag(progressbar, "progressbar")  # "no" showed a bar
    epsilon = check_epsilon(epsilon)
    y_bounds = check_public_bounds(y_bounds)
    if ledger is not None and not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a pm_dpgp Ledger or None, got {type(ledger).__name__}.")
    if rng is not None:  # None: OpenDP's noisy max; checked here, before the spend
        rng = check_rng(rng)
    names = tuple(gpr.hyperparameter_names)  # type: ignore[attr-defined]
    configs = check_grid(prior_quantile_grid(gpr) if grid is None else grid, names)
    n = int(np.asarray(gpr.X).shape[0])  # type: ignore[attr-defined]
    split = kfold_splits(n, n_folds) if folds is None else check_folds(folds, n)
    # the labels as stored, NOT checked finite: a refusal after the spend would depend on one
    # private label (and spend for nothing); only their schema is checked here, and a
    # non-finite label is mapped to the midpoint of y_bounds after the spend
    # (``cv_sse_utilities``), record by record
    _, y_private, _ = check_data_schema(gpr.X, private_data(gpr, None)[1], gpr.input_dim)
    # 2. plan from public information only
    plan = plan_cv_sse(
        gpr,
        configs,
        split,
        y_bounds=y_bounds,
        release_epsilon=release_epsilon,
        release_delta=release_delta,
        error_clip=error_clip,
        max_sensitivity=max_sensitivity,
        calibration=calibration,
        noise_solver=noise_solver,
        fold_linalg=fold_linalg,
        progressbar=progressbar,
    )
    # 3. charge before the labels are read
    event = exponential_mechanism_event(
        epsilon, event_kind, ledger=ledger, label="hyperparameter selection (exponential mechanism)"
    )
    if ledger is not None:
        ledger.spend(
            event,
            label="DP hyperparameter selection (Smith et al. 2021, Alg. 1)",
            privacy_model="label",
            neighbouring_relation=LABEL_RELATION,
            # registered like every release's Generator: a state reused for another release on
            # this ledger is refused (its Gumbel and Gaussian noise would share one stream)
            rng=rng,
        )
    # 4. private utilities (the owner's view)
    utilities = cv_sse_utilities(plan, np.asarray(y_private, dtype=np.float64).reshape(-1))
    kept = np.flatnonzero(plan.kept)
    # 5. draw
    pick = sample_exponential_mechanism(utilities[kept], plan.sensitivity, epsilon, rng=rng)
    index = int(kept[pick])
    # 6. package
    probs = np.zeros(len(configs))
    probs[kept] = exponential_mechanism_probabilities(utilities[kept], plan.sensitivity, epsilon)
    details = {
        "epsilon": epsilon,
        "utility": "negative expected clipped cross-validated SSE of cloaked predictions",
        "y_bounds": list(y_bounds),
        "folds": [f.tolist() for f in split],
        "configuration_sensitivities": plan.sensitivities.tolist(),
        "kept": plan.kept.tolist(),
        "noise_source": "opendp_gumbel_noisy_max" if rng is None else "numpy_simulation",
        **plan.metadata(),
    }
    return SelectionResult(
        method="exponential_mechanism_cv_sse",
        hyperparameters=dict(configs[index]),
        index=index,
        grid=configs,
        event=event,
        privacy_model="label",
        neighbouring_relation=LABEL_RELATION,
        public_details=details,
        owner={"utilities": utilities, "probabilities": probs},
    )
