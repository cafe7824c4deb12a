"""Stop-46 audit of the noise-aware release (Honkela): docs/noise_aware.md."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pymc as pm

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
