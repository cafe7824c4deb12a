"""progressbar= on the releases that can take seconds, in PyMC's style (issue 14, point 6), and
the labels of the release figures (point 8)."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pymc as pm
import pytest

from pm_dpgp import _progress
from pm_dpgp._validation import PrivacyWarning
from pm_dpgp.accounting import Ledger
from pm_dpgp.mechanisms import (
    cloaked_release,
    dirichlet_release,
    noise_aware_release,
    sample_path_release,
)
from pm_dpgp.models import (
    dirichlet_gp_classification,
    gp_regression,
    grid_inducing_points,
    sparse_gp_regression,
)
from pm_dpgp.selection import product_grid, select_by_cross_validated_sse
from pm_dpgp.workflow import plot_dp_release

X = np.linspace(0.0, 2.0, 15)
Y = np.sin(3 * X)


@pytest.fixture
def bars(monkeypatch):
    """Record every progress bar opened (description, total, advances) with the bar enabled."""
    opened = []
    real = _progress.progress_bar

    def spy(total, description, *, enabled=True):
        record = {"description": description, "total": total, "enabled": enabled, "steps": 0}
        opened.append(record)
        cm = real(total, description, enabled=enabled)

        class Wrapped:
            def __enter__(self):
                bar = cm.__enter__()
                advance = bar.advance

                def counted(status=""):
                    record["steps"] += 1
                    advance(status)

                bar.advance = counted
                return bar

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Wrapped()

    import pm_dpgp.mechanisms.full.dirichlet as di
    import pm_dpgp.mechanisms.full.noise_aware as na
    import pm_dpgp.mechanisms.full.sample_path as sp
    import pm_dpgp.mechanisms.label.cloaking_release as cr
    import pm_dpgp.selection.cv_sse as cv

    for mod in (na, sp, cr, cv, di):
        monkeypatch.setattr(mod, "progress_bar", spy)
    return opened


def _done(bars, description):
    rec = [b for b in bars if b["description"] == description]
    assert len(rec) == 1 and rec[0]["enabled"], bars
    assert rec[0]["steps"] == rec[0]["total"], rec  # the bar runs to completion
    return rec[0]


def test_progress_bars_run_to_completion(bars):
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.5)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        cloaked_release(
            model, X[:, None], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), rng=rng, progressbar=True
        )
        sample_path_release(
            model,
            np.linspace(0.0, 2.0, 9)[:, None],  # public query inputs, not the training array
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            epsilon=1e9,
            kappa=0.0,
            rng=rng,
            progressbar=True,
        )
        Z = grid_inducing_points([0.0], [2.0], [5])
        sparse = sparse_gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, noise_sd=0.5)
        noise_aware_release(
            sparse, epsilon=1.0, delta=1e-5, y_bounds=(-2, 2), rng=rng, progressbar=True
        )
        labels = (X > 1.0).astype(int)
        clf = dirichlet_gp_classification(X, labels, pm.gp.cov.ExpQuad(1, ls=0.5), Z=Z, n_classes=2)
        dirichlet_release(clf, epsilon=1.0, delta=1e-5, rng=rng, progressbar=True)
        prior = gp_regression(
            X, Y, lambda: pm.gp.cov.ExpQuad(1, ls=pm.Gamma("ell", 2, 1)), noise_sd=0.5
        )
        select_by_cross_validated_sse(
            prior,
            product_grid({"ell": [0.3, 1.0]}),
            epsilon=1.0,
            y_bounds=(-2.0, 2.0),
            ledger=Ledger(),
            release_epsilon=1.0,
            release_delta=1e-3,
            rng=rng,
            progressbar=True,
        )
    _done(bars, "Cloaked release")
    _done(bars, "Sample paths")
    _done(bars, "Noise-aware release")
    _done(bars, "Dirichlet release")
    assert _done(bars, "Selection: planning")["total"] == 2


def test_progressbar_is_off_by_default(bars):
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.5)
    cloaked_release(
        model, X[:, None], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), rng=np.random.default_rng(1)
    )
    assert [b["enabled"] for b in bars] == [False]


def test_plot_dp_release_labels_axes_and_gives_epsilon_with_delta():
    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.5)
    rel = cloaked_release(
        model, X[:, None], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), rng=np.random.default_rng(2)
    )
    ax = plot_dp_release(rel, xlabel="age (years)", ylabel="height (cm)")
    assert ax.get_xlabel() == "age (years)" and ax.get_ylabel() == "height (cm)"
    assert "(ε, δ) = (1, 0.001)" in ax.get_title()
    ax = plot_dp_release(rel)
    assert ax.get_xlabel() and ax.get_ylabel()


def test_demo_band_is_centred_on_the_public_release(tmp_path):
    import matplotlib.pyplot as plt

    from pm_dpgp.demo import plot_owner_view, rmse_note

    model = gp_regression(X, Y, pm.gp.cov.ExpQuad(1, ls=0.5), noise_sd=0.5)
    rel = cloaked_release(
        model, X[:, None], epsilon=1.0, delta=1e-3, y_bounds=(-2, 2), rng=np.random.default_rng(3)
    )
    mean = np.zeros_like(X)  # a stand-in for the private mean: the band must not use it
    captured = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, *a, **k):
        captured["fig"] = fig
        return real_savefig(fig, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", keep)
        plot_owner_view(X, Y, X, mean, np.ones_like(X), rel, tmp_path / "f.png")
    ax = captured["fig"].axes[0]
    lines = {ln.get_label(): ln.get_ydata() for ln in ax.get_lines()}
    band = lines["DP release ± 1 DP-noise sd (public)"]
    assert np.allclose(band, rel.draws[0] + rel.noise_sd)
    assert not any("¼" in label for label in lines)
    assert "6.8" not in rmse_note(9.8, 6.6) or "kernel scale" in rmse_note(9.8, 6.6)
