"""Adversarial review of the stop-44 fixes (each test fails on the code before this review).

* ``_physical_memory``: ``os.sysconf`` returns -1 for a value the platform does not define;
  the product was then negative and ``check_doubles_fit`` / ``check_draws_fit`` refused
  every release that checks its memory.
* ``plan.sample_path`` without a domain: a model's ``eta**2 * ExpQuad(ls=ell)`` (random-variable
  hyperparameters), which ``sample_path_release`` takes without a domain at positive public
  values, was refused as "not recognised as stationary" (and with a domain the plan cannot
  build a kernel of another model's variables).  A kernel of no random variable that is no
  covariance is refused with the release's own error.
* ``public_real_array`` read a float pandas Series / xarray DataArray entry by entry as Python
  objects (0.7 s per 10⁶ values); only lists, scalars and object containers need it.
* ``dp_summary(var_names=["f", "~p"])``: ArviZ (0.x and 1) reads it as every variable but
  ``p``; the stop-44 rule gave ``f`` alone on ArviZ 1 and refused ``["f", "~f"]``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pm_dpgp._validation as validation
from pm_dpgp import plan
from pm_dpgp._validation import check_doubles_fit, check_draws_fit, public_real_array


@pytest.mark.parametrize("answer", [-1, 0])
def test_an_undefined_physical_memory_refuses_nothing(monkeypatch, answer) -> None:
    monkeypatch.setattr(
        validation.os, "sysconf", lambda name: 4096 if name == "SC_PAGE_SIZE" else answer
    )
    assert validation._physical_memory() == float("inf")
    check_doubles_fit(10, "ten doubles")
    check_draws_fit(1, 1)


def _plan(cov_func):
    return plan.sample_path(
        30,
        kernel_scale=1.5,
        y_bounds=(-1.0, 1.0),
        delta=1e-5,
        noise_sd=0.6,
        kappa=0.0,
        cov_func=cov_func,
    )


def test_plan_without_domain_takes_a_model_kernel_the_release_takes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pm.Model():
            eta, ell = pm.HalfNormal("eta", 1.0), pm.Gamma("ell", 2.0, 4.0)
            cov = eta**2 * pm.gp.cov.ExpQuad(1, ls=ell)
        assert _plan(cov).epsilon == _plan(None).epsilon


def test_plan_without_domain_refuses_a_constant_kernel_that_is_no_covariance() -> None:
    h = pt.constant(-0.7) * pt.constant(1.0)  # symbolic, no random variable
    cov = pm.gp.cov.ExpQuad(1, ls=1.0) + h * pm.gp.cov.ExpQuad(1, ls=10.0)
    with pytest.raises(ValueError, match="not a covariance by construction"):
        _plan(cov)
    # a positive one is planned as before
    cov = pm.gp.cov.ExpQuad(1, ls=1.0) + (-h) * pm.gp.cov.ExpQuad(1, ls=10.0)
    assert _plan(cov).epsilon == _plan(None).epsilon


class _FloatArrayLike:
    """A float container (as a pandas Series or xarray DataArray of floats): its values are
    read as float64, never entry by entry as Python objects."""

    dtype = np.dtype(np.float64)

    def __array__(self, dtype=None, copy=None):
        if dtype is not None and np.dtype(dtype) == np.dtype(object):
            raise AssertionError("a float container was read entry by entry")
        return np.arange(3.0)


def test_public_real_array_reads_a_float_container_without_its_entries() -> None:
    np.testing.assert_array_equal(public_real_array(_FloatArrayLike(), "x"), np.arange(3.0))
    # lists are still read entry by entry
    with pytest.raises(ValueError, match="booleans"):
        public_real_array([True, 1.0], "x")


def test_dp_summary_reads_a_mixed_var_names_list_as_arviz_on_both_stacks() -> None:
    """ArviZ (0.x and 1) reads ``["f", "~p"]`` as every variable but ``p``: ``f`` and ``q`` of a
    group ``f, p, q``.  Since stop 44 ArviZ 1's path gave ``f`` only (ArviZ 0.x: ``f``, ``q``)."""
    import xarray as xr

    from pm_dpgp.compat import make_inference_data
    from pm_dpgp.workflow.summary import dp_summary

    draws = np.random.default_rng(0).normal(size=(1, 20, 2))
    ds = xr.Dataset(
        {
            "f": (("chain", "draw", "i"), draws),
            "p": (("chain", "draw"), draws[..., 0]),
            "q": (("chain", "draw"), draws[..., 1]),
        }
    )
    idata = make_inference_data({"posterior": ds})
    for var_names, expected in ((["f", "~p"], ["f", "f", "q"]), (["f", "~f"], ["p", "q"])):
        table = dp_summary(idata, var_names=var_names)
        assert [str(i).split("[")[0] for i in table.index] == expected


def test_an_integer_hyperparameter_refuses_a_fractional_value_clearly():
    """DiscreteUniform alpha = 2.5: the kernel used 2 silently (before stop 44), and the
    structure check of stop 44 raised PyTensor's TypeError; now a ValueError naming it."""
    import numpy as np
    import pymc as pm

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
    from pm_dpgp.models import sparse_gp_regression

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (30, 1))
    model = sparse_gp_regression(
        X,
        np.sin(X[:, 0]),
        lambda: pm.gp.cov.RatQuad(1, alpha=pm.DiscreteUniform("a", 1, 5), ls=1.0),
        Z=np.linspace(-2, 2, 5)[:, None],
        noise_sd=0.3,
    )
    ledger = Ledger(epsilon=5.0, delta=1e-5)
    kw = {"epsilon": 1.0, "delta": 1e-5, "y_bounds": (-1, 1), "ledger": ledger}
    with pytest.raises(ValueError, match="integer-valued"):
        noise_aware_release(model, hyperparameters={"a": 2.5}, rng=np.random.default_rng(1), **kw)
    assert ledger.history == []
    noise_aware_release(model, hyperparameters={"a": 2}, rng=np.random.default_rng(1), **kw)
    assert len(ledger.history) == 1
