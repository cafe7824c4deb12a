"""Stop-46 documentation audit: recipes written inline in the docs' prose run as written.

The pages' fenced examples run in ``test_docs_examples.py``; a recipe given in running text is
not executed there.  ``docs/selection.md`` §2 tells the reader how to plan the cross-validated
SSE with the release's own rank cut, ``rank_tol=TruncationSetting(...).auto_rank_tol()``; the
call had five arguments after ``TruncationSetting`` gained ``m`` (the number of test inputs) and
raised ``TypeError``.  Here the recipe is read from the page, evaluated with the page's own
names, and compared with the cut a release records.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _inline_recipe(page: str, start: str) -> str:
    text = re.sub(r"\s*\n\s*", " ", (DOCS / page).read_text(encoding="utf-8"))
    spans = re.findall(r"`(" + re.escape(start) + r"[^`]*)`", text)
    assert len(spans) == 1, f"{page}: expected one inline `{start}...` recipe, found {spans}"
    return spans[0]


def test_selection_rank_tol_recipe_runs_and_is_the_release_cut():
    import pymc as pm

    from pm_dpgp.mechanisms import cloaked_release
    from pm_dpgp.mechanisms.label.truncation import TruncationSetting
    from pm_dpgp.models import gp_regression

    recipe = _inline_recipe("selection.md", "rank_tol=TruncationSetting(")
    rng = np.random.default_rng(0)
    n, m = 40, 7
    X = np.sort(rng.uniform(0.0, 10.0, n))
    y = np.sin(X) + 0.1 * rng.standard_normal(n)
    X_star = np.linspace(0.0, 10.0, m)
    names = {
        "TruncationSetting": TruncationSetting,
        "release_epsilon": 1.0,
        "release_delta": 1e-5,
        "n_train": n,
        "m_test": m,
        "y_bounds": (-2.0, 2.0),
        "prior_mean": 0.0,
    }
    rank_tol = eval(recipe.removeprefix("rank_tol="), names)  # noqa: S307 - our own docs
    model = gp_regression(X, y, pm.gp.cov.ExpQuad(1, ls=2.0), noise_sd=0.3, mean=0.0)
    release = cloaked_release(
        model,
        X_star,
        epsilon=1.0,
        delta=1e-5,
        y_bounds=(-2.0, 2.0),
        rng=np.random.default_rng(1),
    )
    assert release.metadata["rank_tol"] == pytest.approx(rank_tol, rel=1e-12)
