"""Private hyperparameter and model selection (``docs/selection.md``).

One module per idea: public candidate grids and splits (``grids``), the exponential
mechanism and its events (``exponential``), Smith et al.'s cross-validated SSE utility and
its sensitivity (``cv_sse``), the label-private selection of Algorithm 1 (``smith``),
the result object (``result``), the 1-D COINPRESS mean (``coinpress``), the fully
private random-stopping selection of Honkela's Algorithm 2 (``liu_talwar``), its variant with
posterior sample paths as candidates (``sample_paths``) and the front end
``select_hyperparameters`` (``front``).
"""

from pm_dpgp.selection.coinpress import (
    CoinpressResult,
    clipped_mean_sensitivity,
    coinpress_mean,
    coinpress_rho_schedule,
)
from pm_dpgp.selection.cv_sse import (
    clipped_square_change_bound,
    cv_sse_utilities,
    expected_clipped_square,
    paper_sse_sensitivity,
    plan_cv_sse,
    utility_rounding_bound,
)
from pm_dpgp.selection.exponential import (
    bounded_range_rho,
    exponential_mechanism_event,
    exponential_mechanism_probabilities,
    sample_exponential_mechanism,
)
from pm_dpgp.selection.front import select_hyperparameters
from pm_dpgp.selection.grids import (
    check_grid,
    kfold_splits,
    prior_quantile_grid,
    product_grid,
)
from pm_dpgp.selection.liu_talwar import (
    loglik_bounds,
    random_stopping_event,
    sample_stopping_time,
    select_by_random_stopping,
    stopping_pmf,
    validation_loglik,
)
from pm_dpgp.selection.result import SelectionResult
from pm_dpgp.selection.sample_paths import (
    SamplePathSelectionPlan,
    plan_sample_path_selection,
    select_by_sample_paths,
)
from pm_dpgp.selection.smith import select_by_cross_validated_sse

__all__ = [
    "CoinpressResult",
    "SamplePathSelectionPlan",
    "SelectionResult",
    "clipped_mean_sensitivity",
    "coinpress_mean",
    "coinpress_rho_schedule",
    "loglik_bounds",
    "random_stopping_event",
    "sample_stopping_time",
    "plan_sample_path_selection",
    "select_by_random_stopping",
    "select_by_sample_paths",
    "select_hyperparameters",
    "stopping_pmf",
    "validation_loglik",
    "bounded_range_rho",
    "check_grid",
    "clipped_square_change_bound",
    "cv_sse_utilities",
    "expected_clipped_square",
    "exponential_mechanism_event",
    "exponential_mechanism_probabilities",
    "kfold_splits",
    "paper_sse_sensitivity",
    "plan_cv_sse",
    "utility_rounding_bound",
    "prior_quantile_grid",
    "product_grid",
    "sample_exponential_mechanism",
    "select_by_cross_validated_sse",
]
