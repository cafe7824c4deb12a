"""Which model families a mechanism may take (stop-31 audits).

The model classes share ``GPRegression``: FITC, sparse (VFE), Dirichlet and binary
classification models subclass it, and a Dirichlet model subclasses ``SparseGPRegression``.
A mechanism written for the base class therefore accepts the subclasses and, through their
``public_gp`` / ``public_sparse_gp`` views, would release another model's posterior than the
one built.  These guards refuse that by the model's type (public), before anything is spent
or drawn.
"""

from __future__ import annotations

from typing import Any

from pm_dpgp.models.classification import GPClassification
from pm_dpgp.models.fitc import FITCRegression
from pm_dpgp.models.sparse import DirichletGPClassification, SparseGPRegression

__all__ = ["refuse_dirichlet_model", "require_exact_regression"]


def require_exact_regression(gpr: Any, mechanism: str) -> None:
    """Refuse a model whose own posterior is not the exact GP regression posterior.

    FITC, sparse (VFE), Dirichlet and binary-classification models subclass ``GPRegression``,
    and ``public_gp`` gives their exact-GP view; a mechanism that releases the exact posterior
    (prior noise, sample paths) would release another model's posterior than the one built,
    with nothing in the release saying so (stop-31 audit: 19 % off the FITC mean).  Public
    (the model's type); call before anything is spent or drawn.
    """
    use = (
        (DirichletGPClassification, "pm_dpgp.mechanisms.dirichlet_release"),
        (SparseGPRegression, "pm_dpgp.mechanisms.noise_aware_release (Honkela's sparse q(u))"),
        (FITCRegression, "pm_dpgp.mechanisms.cloaked_release (FITC cloaking)"),
        (GPClassification, "pm_dpgp.mechanisms.classification_release"),
    )
    for cls, alternative in use:
        if isinstance(gpr, cls):
            raise TypeError(
                f"{mechanism} releases the exact GP regression posterior, but this "
                f"{type(gpr).__name__}'s own posterior is another one. Use {alternative}, or "
                "build an exact pm_dpgp.models.gp_regression of the same kernel; nothing was "
                "spent or drawn."
            )


def refuse_dirichlet_model(model: Any, func: str) -> None:
    """A ``DirichletGPClassification`` is released by ``dirichlet_release``; the regression
    release (or its plan) would regress its raw class indices (stop-31 audit)."""
    if isinstance(model, DirichletGPClassification):
        raise TypeError(
            f"{func} would regress the raw class indices of a DirichletGPClassification; use "
            "pm_dpgp.mechanisms.dirichlet_release (or plan.dirichlet; Milios et al. 2018 "
            "targets) instead; nothing was spent or drawn."
        )
