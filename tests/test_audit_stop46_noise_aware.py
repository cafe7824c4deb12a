"""Stop-46 audit of the noise-aware release (Honkela): docs/noise_aware.md."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms.full.noise_aware import noise_aware_release
from pm_dpgp.models import grid_inducing_points, sparse_gp_regression

DOC = Path(__file__).resolve().parents[1] / "docs" / "noise_aware.md"


def test_doc_example_uses_the_secure_default_and_section4_names_its_event() -> None:
    """The page's headline example passed ``rng=np.random.default_rng()``, i.e. the float
    simulation mode (docs/secure_noise.md: for tests), and §4 described only its
    ``GaussianEvent``; the default release is the discrete Gaussian with a ``ZCDPEvent``."""
    text = DOC.read_text(encoding="utf-8")
    first = re.search(r"```python\n(.*?)```", text, re.S)
    assert first is not None
    call = first.group(1).split("noise_aware_release(", 1)[1].split("\n\n")[0]
    assert "rng=" not in call.split(")\n")[0]
    section4 = text.split("## 4.", 1)[1].split("## 5.", 1)[0]
    assert "ZCDPEvent" in section4


def test_secure_default_charges_one_zcdp_event() -> None:
    """What the corrected page says: no ``rng`` gives one ``ZCDPEvent`` on the ledger."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, 60)
    y = np.sin(X) + 0.1 * rng.standard_normal(60)
    reg = sparse_gp_regression(
        X, y, pm.gp.cov.ExpQuad(1, ls=1.0), Z=grid_inducing_points(-3.5, 3.5, 6), noise_sd=0.1
    )
    ledger = Ledger(epsilon=2.0, delta=1e-4)
    rel = noise_aware_release(reg, epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0), ledger=ledger)
    assert rel.metadata["privacy_event"]["type"] == "ZCDPEvent"
    assert [type(e.event).__name__ for e in ledger.history] == ["ZCDPEvent"]
    assert rel.metadata["noise_source"] == "opendp_discrete_gaussian"


def _not_a_covariance_model() -> tuple[object, np.ndarray, np.ndarray]:
    """``ExpQuad(1) + (-0.7)·ExpQuad(10)`` (docs/noise_aware.md §3: no covariance, needs the
    caller's ``kernel_norm=R_k``): ``K_ZZ`` on ten points of [0, 3] has eigenvalue −1.5."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 3.0, 50)
    y = np.sin(X)
    cov = pm.gp.cov.ExpQuad(1, ls=1.0) + (-0.7) * pm.gp.cov.ExpQuad(1, ls=10.0)
    reg = sparse_gp_regression(X, y, cov, Z=grid_inducing_points(0.0, 3.0, 10), noise_sd=0.1)
    return reg, X, y


@pytest.mark.parametrize("secure", [False, True])
def test_indefinite_kzz_is_refused_before_the_spend(secure: bool) -> None:
    """The release charged ε = 1 (and drew the noise), then failed in ``dp_qu`` with a
    ``CholeskyError`` on the public ``K_ZZ``: a failed call must spend and draw nothing."""
    reg, _, _ = _not_a_covariance_model()
    ledger = Ledger(epsilon=5.0, delta=1e-4)
    rng = None if secure else np.random.default_rng(1)
    state = None if rng is None else rng.bit_generator.state
    with pytest.raises(ValueError, match="Nothing was spent"):
        noise_aware_release(
            reg,
            epsilon=1.0,
            delta=1e-4,
            y_bounds=(-2.0, 2.0),
            kernel_norm=5.0,
            ledger=ledger,
            rng=rng,
        )
    assert ledger.history == []
    if rng is not None:
        assert rng.bit_generator.state == state


def test_indefinite_kzz_dirichlet_spends_nothing() -> None:
    """The same for the Dirichlet classifier, which shares ``_account_draw_release``."""
    from pm_dpgp.mechanisms.full.dirichlet import dirichlet_release

    reg, X, _ = _not_a_covariance_model()
    labels = (X > 1.5).astype(int)
    ledger = Ledger(epsilon=5.0, delta=1e-4)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="Nothing was spent"):
        dirichlet_release(
            reg.public_sparse_gp(),
            (X, labels),
            epsilon=1.0,
            delta=1e-4,
            n_classes=2,
            kernel_norm=5.0,
            ledger=ledger,
            rng=rng,
        )
    assert ledger.history == []
    assert rng.bit_generator.state == state


def test_plan_refuses_an_indefinite_kzz_as_the_release_does() -> None:
    """``plan.noise_aware`` and ``plan.dirichlet`` refuse where the release refuses (they
    returned a plan for a release that then failed after its spend)."""
    from pm_dpgp import plan

    reg, _, _ = _not_a_covariance_model()
    with pytest.raises(ValueError, match="K_ZZ"):
        plan.noise_aware(reg, epsilon=1.0, delta=1e-4, y_bounds=(-2.0, 2.0), kernel_norm=5.0)
    with pytest.raises(ValueError, match="K_ZZ"):
        plan.dirichlet(
            reg.public_sparse_gp(), epsilon=1.0, delta=1e-4, n_classes=2, kernel_norm=5.0
        )
