"""Every Python example in ``docs/*.md`` runs against the current API (stop 38).

The README's examples run as printed (``test_readme_examples.py``); the pages' examples are
fragments that assume the reader's data (``age``, ``height``, ``X``, a ``release``, …).  Here
each page's blocks run in order in one namespace, after a prelude that supplies those names
with small synthetic *public* data, and with a few textual substitutions for the places where
a page writes ``...`` or asks for a full MCMC run.  A renamed function, a dropped keyword or a
changed attribute in any example fails this test.  Blocks that only restate an algorithm with
symbols of the text (``cloaking.md``'s ``res = solve_noise_covariance(C)`` sketch) run with
those symbols defined too.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

_KUNG = """
import numpy as np
import pymc as pm
rng = np.random.default_rng(0)
n = 40
age = np.sort(rng.uniform(1.0, 80.0, n))
height = np.clip(60 + 95 * (1 - np.exp(-age / 12)) + 5 * rng.standard_normal(n), 58, 158)
new_age = np.sort(rng.uniform(1.0, 80.0, 30))
new_height = 60 + 95 * (1 - np.exp(-new_age / 12))
ages_star = np.linspace(5.0, 75.0, 6)
X_star = ages_star[:, None]
"""

_FAST_SAMPLE = (
    "pm.sample(draws=40, tune=40, chains=1, cores=1, progressbar=False, random_seed=1, "
    "compute_convergence_checks=False)"
)

#: page -> (prelude run once before the page's first block, {block index: [(old, new)]})
PAGES: dict[str, tuple[str, dict[int, list[tuple[str, str]]]]] = {
    "accounting.md": ("", {}),
    "classification.md": ("", {}),
    "gaussian_calibration.md": ("", {}),
    "selection.md": ("", {}),
    "cloaking.md": (
        """
import numpy as np
from pm_dpgp.mechanisms.label.cloaking import solve_noise_covariance
from pm_dpgp.mechanisms.gaussian import gaussian_sigma
rng = np.random.default_rng(0)
x = np.linspace(0.0, 5.0, 12)
K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
C = K[::2] @ np.linalg.inv(K + 0.1 * np.eye(12))
y = rng.uniform(-1.0, 1.0, 12)
d = 2.0
lower, upper, prior_mean = -1.0, 1.0, 0.0  # public label bounds (d = upper - lower)
sigma_for_unit_sensitivity = gaussian_sigma(1.0, 1e-5, 1.0)
""",
        {},
    ),
    "models.md": (
        _KUNG,
        {
            0: [("pm.sample()", _FAST_SAMPLE)],
            2: [
                (
                    "hp = public_hyperparameters(pm.find_MAP(",
                    # a public fit of gpr's own structure (block 1), as the page describes
                    "from pm_dpgp.models import public_hyperparameters\n"
                    "from pm_dpgp.mechanisms import cloaked_release\n"
                    "public_fit = gp_regression(new_age, new_height, lambda: pm.gp.cov.ExpQuad("
                    "1, ls=pm.Gamma('ls', 2, 0.1)), noise_sd=7.7)\n"
                    "with public_fit.model:\n"
                    f"    idata_public = {_FAST_SAMPLE}\n"
                    "hp = public_hyperparameters(pm.find_MAP(progressbar=False, ",
                ),
                (
                    "hyperparameters=hp, ...)",
                    "hyperparameters=hp, epsilon=1.0, delta=1e-3, y_bounds=(58.0, 158.0), "
                    "rng=np.random.default_rng(2))",
                ),
            ],
        },
    ),
    "noise_aware.md": (
        """
import numpy as np
rng = np.random.default_rng(0)
X = rng.uniform(-3.0, 3.0, 200)
y = np.sin(X) + 0.1 * rng.standard_normal(200)
X_new = np.linspace(-3.0, 3.0, 9)
""",
        {},
    ),
    "sample_paths.md": (
        "from pm_dpgp.accounting import Ledger\nledger = Ledger(epsilon=10.0, delta=1e-5)\n",
        {},
    ),
    "sparse_cloaking.md": (
        _KUNG + "from pm_dpgp.accounting import Ledger\nledger = Ledger(epsilon=1.0, delta=1e-3)\n",
        {},
    ),
    "thompson_tree.md": (
        """
import numpy as np
from pm_dpgp.accounting import Ledger
def objective(X):
    return np.sin(6 * X[:, 0])
a, b = -1.0, 1.0
ledger = Ledger(epsilon=3.0, delta=1e-5)
""",
        {
            1: [
                (
                    "dp_thompson_sampling_tree(...,",
                    "dp_thompson_sampling_tree(objective, pm.gp.cov.ExpQuad(1, ls=0.2), "
                    "domain=(0.0, 1.0), X_init=np.array([[0.1], [0.5], [0.9]]), n_rounds=20, "
                    "noise_sd=0.05, inducing=6, progressbar=False,",
                )
            ]
        },
    ),
    "workflow.md": (
        _KUNG
        + """
import arviz as az
from pm_dpgp.mechanisms import cloaked_release
from pm_dpgp.models import gp_regression
from pm_dpgp.workflow import dp_summary
model = gp_regression(age, height, 10.0 * pm.gp.cov.ExpQuad(1, ls=15.0), noise_sd=5.0,
                      mean=108.0)
release = cloaked_release(model, X_star, epsilon=1.0, delta=1e-3, y_bounds=(58.0, 158.0),
                          n_draws=20, rng=np.random.default_rng(1))
y_holdout = 60 + 95 * (1 - np.exp(-X_star[:, 0] / 12))
X_holdout = X_star
lower, upper = np.zeros(2), np.ones(2)
X0 = np.array([[0.2, 0.3], [0.8, 0.6]])
""",
        {
            # plotting is ArviZ's; the page's point is the InferenceData it is given
            0: [
                (
                    "az.plot_posterior(idata); az.plot_trace(idata); az.hdi(idata); "
                    "az.plot_ppc(idata)",
                    "az.hdi(idata)",
                )
            ],
            1: [("az.plot_ppc(idata)", "pass")],
            3: [("n_rounds=40", "n_rounds=10, progressbar=False")],
            4: [
                ('counter="sqrt")', 'counter="sqrt", progressbar=False)'),
                ("X_init=X0, n_rounds=100", "X_init=X0, n_rounds=20"),
            ],
        },
    ),
}


#: a one-line statement whose comment names the exception it raises, as pages show refusals:
#: ``reg.public_gp()   # PrivateHyperparameterError``
RAISES = re.compile(r"^(?P<indent>[ \t]*)(?P<stmt>\S.*?)\s+#\s*(?P<error>[A-Z]\w*Error)\b.*$", re.M)


def _blocks(page: str) -> list[str]:
    return BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))


def _error_class(name: str) -> type[BaseException]:
    import builtins
    import sys

    if isinstance(getattr(builtins, name, None), type):
        return getattr(builtins, name)
    for module_name, module in list(sys.modules.items()):
        cls = getattr(module, name, None) if module_name.startswith("pm_dpgp") else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
    raise LookupError(f"no exception class {name!r} in builtins or pm_dpgp")


def _expect_documented_errors(block: str) -> str:
    """Run each ``stmt  # SomeError`` line inside ``pytest.raises(SomeError)``."""
    return RAISES.sub(
        lambda m: (
            f"{m['indent']}with __raises__(__error__({m['error']!r})):\n"
            f"{m['indent']}    {m['stmt']}"
        ),
        block,
    )


def test_every_page_with_python_examples_is_listed():
    with_examples = {p.name for p in DOCS.glob("*.md") if _blocks(p.name)}
    assert with_examples == set(PAGES), "add the page's prelude to PAGES"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_docs_examples_run(page, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    prelude, substitutions = PAGES[page]
    namespace: dict = {"__raises__": pytest.raises, "__error__": _error_class}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ε > 10, δ > 1/n and the like in small examples
        exec(compile(prelude, f"{page} (prelude)", "exec"), namespace)  # noqa: S102
        for i, block in enumerate(_blocks(page)):
            for old, new in substitutions.get(i, []):
                assert old in block, f"{page} block {i} no longer contains {old!r}"
                block = block.replace(old, new)
            block = _expect_documented_errors(block)
            exec(compile(block, f"{page} block {i}", "exec"), namespace)  # noqa: S102
