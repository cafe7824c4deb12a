"""pm_dpgp.models: PyMC model builders with named GP parts.

Exact GP regression: ``gp_regression`` returns a ``GPRegression`` (PyMC
model for ordinary inference) whose ``public_gp`` gives the
``PublicGP`` that privacy mechanisms consume.
"""

from pm_dpgp.models.exact import GPRegression, PrivateHyperparameterError, PublicGP, gp_regression
from pm_dpgp.models.hyperparameters import (
    PublicHyperparameters,
    hyperparameter_source,
    public_hyperparameters,
)

__all__ = [
    "GPRegression",
    "PrivateHyperparameterError",
    "PublicGP",
    "PublicHyperparameters",
    "gp_regression",
    "hyperparameter_source",
    "public_hyperparameters",
]

from pm_dpgp.models.sparse import (  # noqa: E402
    DirichletGPClassification,
    DirichletTargets,
    InducingFromDataError,
    PublicSparseGP,
    SparseGPRegression,
    dirichlet_gp_classification,
    dirichlet_targets,
    grid_inducing_points,
    kmeans_inducing_points,
    sparse_gp_regression,
)

__all__ += [
    "DirichletGPClassification",
    "DirichletTargets",
    "InducingFromDataError",
    "PublicSparseGP",
    "SparseGPRegression",
    "dirichlet_gp_classification",
    "dirichlet_targets",
    "grid_inducing_points",
    "kmeans_inducing_points",
    "sparse_gp_regression",
]

from pm_dpgp.models.classification import (  # noqa: E402
    GPClassification,
    PublicLatentGP,
    gp_classification,
)

__all__ += ["GPClassification", "PublicLatentGP", "gp_classification"]
from pm_dpgp.models.fitc import (  # noqa: E402
    FITCRegression,
    PublicFITC,
    fitc_gp_regression,
    kmeans_public_inducing,
)
from pm_dpgp.models.nonstationary import (  # noqa: E402
    GibbsKernel,
    KDELengthscale,
    nonstationary_gp_regression,
)

__all__ += [
    "FITCRegression",
    "GibbsKernel",
    "KDELengthscale",
    "PublicFITC",
    "fitc_gp_regression",
    "kmeans_public_inducing",
    "nonstationary_gp_regression",
]
