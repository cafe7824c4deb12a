"""Guard rails: no silent way to void the guarantee (issue 15).

One test (or a small group) per numbered point of the issue, each failing on the code before
it, and a Hypothesis sweep over the numeric arguments of the public release API: every outcome
is a result, a documented exception (``docs/errors.md``) or a documented warning
(:class:`~pm_dpgp.PrivacyWarning`), and a refused call spends nothing and draws nothing.  The
bad-input machinery (documented types, message rules, the shared models) is imported from
``tests/test_error_privacy.py``.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import warnings
from contextlib import closing

import numpy as np
import pymc as pm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pm_dpgp._validation import EPSILON_WARN_THRESHOLD, PrivacyWarning
from pm_dpgp.accounting import (
    GaussianEvent,
    Ledger,
    PersistentLedger,
    PrivacyModelMismatchError,
    ReusedGeneratorError,
    dataset_fingerprint,
)
from pm_dpgp.accounting.persistent import _canonical
from pm_dpgp.audit import DataDerivedChoiceError, check_public_choices
from pm_dpgp.mechanisms import (
    cloaked_release,
    noise_aware_release,
    prior_noise_release,
    sample_path_release,
)
from pm_dpgp.mechanisms.full.sample_path_bounds import paths_affordable
from pm_dpgp.models import PublicGP, gp_regression, sparse_gp_regression
from tests.test_error_privacy import _calls, _check_failure, build_models

X_STAR = np.linspace(0.0, 2.0, 5)


@pytest.fixture(scope="module")
def models():
    return build_models()


def _neighbours(n: int = 12):
    """Two label-neighbouring datasets (same inputs, one output changed)."""
    rng = np.random.default_rng(7)
    X = np.sort(rng.uniform(0.0, 6.0, n))
    y = np.clip(np.sin(X), -1.9, 1.9)
    y2 = y.copy()
    y2[3] = -y2[3] + 0.5
    cov = pm.gp.cov.ExpQuad(1, ls=1.5)
    return gp_regression(X, y, cov, noise_sd=0.3), gp_regression(X, y2, cov, noise_sd=0.3)


def _silent(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        return fn(*args, **kw)


# ------------------------------------------------------------------ point 1: seed reuse
LABEL_KW = dict(epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0))


def test_same_seed_on_neighbouring_data_cancels_the_noise_and_is_refused():
    a, b = _neighbours()
    # Why: the difference of two releases with the same seed is the non-DP difference.
    ra = cloaked_release(a, X_STAR, rng=np.random.default_rng(99), **LABEL_KW)
    rb = cloaked_release(b, X_STAR, rng=np.random.default_rng(99), **LABEL_KW)
    pa, pb = a.public_gp(), b.public_gp()
    exact = pa.predict(np.clip(a.y, -2, 2), X_STAR[:, None])[0]
    exact_b = pb.predict(np.clip(b.y, -2, 2), X_STAR[:, None])[0]
    # up to the default rank cut's projection (5e-4 here; noise sd 3-9)
    assert np.allclose(ra.draws[0] - rb.draws[0], exact - exact_b, atol=1e-3)
    # The ledger refuses the second use of the same Generator state, before spending or drawing.
    ledger = Ledger(epsilon=10.0, delta=1e-3)
    cloaked_release(a, X_STAR, rng=np.random.default_rng(99), ledger=ledger, **LABEL_KW)
    rng = np.random.default_rng(99)
    state = rng.bit_generator.state
    with pytest.raises(ReusedGeneratorError) as info:
        cloaked_release(b, X_STAR, rng=rng, ledger=ledger, **LABEL_KW)
    _check_failure(info.value)
    assert len(ledger.history) == 1 and rng.bit_generator.state == state
    # the same Generator object, advanced by the first release, is a fresh state: accepted
    g = np.random.default_rng(5)
    cloaked_release(a, X_STAR, rng=g, ledger=ledger, **LABEL_KW)
    cloaked_release(a, X_STAR, rng=g, ledger=ledger, **LABEL_KW)
    assert len(ledger.history) == 3


def test_seed_fingerprint_is_salted_one_way_and_persistent(tmp_path):
    rng = np.random.default_rng(99)
    seed_state = str(rng.bit_generator.state["state"]["state"])
    event = GaussianEvent(noise_multiplier=5.0)
    one, two = Ledger(), Ledger()
    f1 = one.spend(event, rng=rng).generator_fingerprint
    f2 = two.spend(event, rng=rng).generator_fingerprint
    assert f1 != f2 and len(f1) == 64  # salted per ledger
    path = tmp_path / "ledger.db"
    fp = dataset_fingerprint("guard rails")
    led = PersistentLedger(path, fp, epsilon=None)
    led.spend(event, rng=np.random.default_rng(99))
    reopened = PersistentLedger(path, fp)  # another handle (e.g. another process) refuses it
    with pytest.raises(ReusedGeneratorError):
        reopened.spend(event, rng=np.random.default_rng(99))
    assert len(reopened.history) == 1
    assert seed_state not in path.read_bytes().decode("latin-1")  # neither state nor seed
    assert seed_state not in reopened.export_json()
    assert seed_state not in json.dumps(one.to_metadata())


# ------------------------------------------------------------- point 2: no epsilon, no ledger
def test_sample_path_release_needs_a_target_or_a_ledger(models):
    path = models["path"]
    kw = dict(
        kernel_scale=1.0,
        y_bounds=(-2.0, 2.0),
        delta=1e-5,
        domain=(0.0, 2.0),
        kernel_class="exponential_1d",
    )
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="epsilon= or a ledger=") as info:
        sample_path_release(path, X_STAR, rng=rng, **kw)
    _check_failure(info.value)
    assert rng.bit_generator.state == state
    # a target below the cost of one path is refused with a range (centred bound) that fits
    with pytest.raises(ValueError, match=r"\|y - prior mean\| <= ") as info:
        sample_path_release(path, X_STAR, epsilon=9.0, rng=rng, **kw)
    _check_failure(info.value)
    fit_bound = float(info.value.args[0].split("prior mean| <= ")[1].split(" ")[0])
    assert rng.bit_generator.state == state and 0.0 < fit_bound < 2.0
    one = _silent(
        sample_path_release,
        path,
        X_STAR,
        epsilon=9.0,
        rng=rng,
        **{**kw, "y_bounds": (-fit_bound, fit_bound)},
    )
    assert one.epsilon <= 9.0
    # ... and a number of paths above the target with the largest n_draws that fits
    kw["eta"] = 2.0  # extra noise: one path fits within 9
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=r"n_draws=(\d+)") as info:
        sample_path_release(path, X_STAR, n_draws=50, epsilon=9.0, rng=rng, **kw)
    _check_failure(info.value)
    assert rng.bit_generator.state == state
    fit = int(info.value.args[0].split("n_draws=")[1].split(" ")[0])
    bound = _silent(sample_path_release, path, X_STAR, epsilon=9.0, rng=rng, **kw).bound
    assert fit == paths_affordable(bound, 9.0, 1e-5) and 1 <= fit < 50
    rel = _silent(sample_path_release, path, X_STAR, n_draws=fit, epsilon=9.0, rng=rng, **kw)
    assert rel.epsilon <= 9.0


def test_every_gaussian_mechanism_requires_epsilon_and_delta(models):
    """The Gaussian mechanisms have no default ε or δ: a call without them is a TypeError
    raised by Python before any code runs (nothing spent, nothing drawn)."""
    calls = {
        cloaked_release: (models["exact"], X_STAR, {"y_bounds": (-2.0, 2.0)}),
        prior_noise_release: (models["exact"], X_STAR, {"y_bounds": (-2.0, 2.0)}),
        noise_aware_release: (models["sparse"], None, {"y_bounds": (-2.0, 2.0)}),
    }
    for fn, (model, x, extra) in calls.items():
        for missing in ("epsilon", "delta"):
            kw = {"epsilon": 1.0, "delta": 1e-3, **extra}
            del kw[missing]
            ledger = Ledger(epsilon=10.0, delta=1e-3)
            with pytest.raises(TypeError, match=missing):
                fn(model, x, ledger=ledger, rng=np.random.default_rng(0), **kw)
            assert ledger.history == []


# ---------------------------------------------------- point 3: the same validation everywhere
def _free_noise_model():
    X = np.linspace(0.0, 6.0, 10)
    return gp_regression(
        X, np.sin(X), pm.gp.cov.ExpQuad(1, ls=1.5), noise_sd=lambda: pm.HalfNormal("s", 1.0)
    )


@pytest.mark.parametrize("route", ["builder", "dict", "dict_sparse", "public_gp"])
def test_zero_noise_is_refused_on_every_path(route):
    X = np.linspace(0.0, 6.0, 10)
    cov = pm.gp.cov.ExpQuad(1, ls=1.5)
    ledger = Ledger(epsilon=10.0, delta=1e-3)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="> 0") as info:
        if route == "builder":
            gp_regression(X, np.sin(X), cov, noise_sd=0.0)
        elif route == "dict":
            cloaked_release(
                _free_noise_model(),
                X_STAR,
                hyperparameters={"s": 0.0},
                ledger=ledger,
                rng=rng,
                **LABEL_KW,
            )
        elif route == "dict_sparse":
            sparse_gp_regression(
                X, np.sin(X), cov, Z=X[::3] + 0.1, noise_sd=lambda: pm.HalfNormal("s", 1.0)
            ).public_sparse_gp({"s": 0.0})
        else:
            pub = _free_noise_model().public_gp({"s": 0.5})
            PublicGP(
                X=pub.X,
                noise_var=0.0,
                mean=0.0,
                hyperparameters={},
                description="",
                _kernel=pub._kernel,
                _kernel_diag=pub._kernel_diag,
            )
    _check_failure(info.value)
    assert ledger.history == [] and rng.bit_generator.state == state


# --------------------------------------------------------- point 4: data-derived public values
def test_data_derived_values_are_caught_near_equality_by_the_owner_check():
    rng = np.random.default_rng(4)
    y = 140.0 + 20.0 * rng.standard_normal(60)
    X = rng.uniform(0, 80, 60)
    bounds = (50.0, 230.0)
    with pytest.raises(DataDerivedChoiceError, match="mean"):
        check_public_choices(X, y, mean=round(float(y.mean()), 2), y_bounds=bounds)
    with pytest.raises(DataDerivedChoiceError, match="y_bounds"):
        check_public_choices(X, y, y_bounds=(y.min() - 1e-9, y.max() + 1e-9))
    half = float(np.max(np.abs(y - 140))) + 1e-6  # a centred bound from the data
    with pytest.raises(DataDerivedChoiceError, match="y_bounds"):
        check_public_choices(X, y, y_bounds=(140.0 - half, 140.0 + half), mean=140.0)
    # exact comparison (the old behaviour) misses them: the tolerance is what catches them
    check_public_choices(X, y, mean=round(float(y.mean()), 2), y_bounds=bounds, rtol=0.0)
    check_public_choices(X, y, y_bounds=(y.min() - 1e-9, y.max() + 1e-9), rtol=0.0)
    # public choices away from the data's statistics pass
    check_public_choices(X, y, mean=110.0, y_bounds=bounds)
    # releases never compare: the same data-derived bounds go through silently
    model = gp_regression(X, y, 20.0**2 * pm.gp.cov.ExpQuad(1, ls=25.0), noise_sd=14.0, mean=140.0)
    _silent(
        cloaked_release,
        model,
        np.linspace(0, 80, 5),
        epsilon=1.0,
        delta=1e-3,
        y_bounds=(y.min() - 1e-9, y.max() + 1e-9),
        rng=np.random.default_rng(0),
    )


# -------------------------------------------------------- point 5: absurd but valid settings
@pytest.mark.parametrize(
    ("kw", "setting"),
    [
        ({"delta": 0.5}, "delta=0.5"),
        ({"delta": 0.1}, "delta=0.1"),
        ({"epsilon": 1e6}, "epsilon=1e+06"),
        ({"y_bounds": (-1e9, 1e9)}, "y_bounds"),
    ],
)
def test_absurd_settings_warn_naming_the_setting_and_a_fix(kw, setting):
    a, b = _neighbours(60)  # n = 60: delta = 0.1 >> 1/n
    messages = []
    for model in (a, b):  # the warnings do not depend on the private outputs
        with pytest.warns(PrivacyWarning) as record:
            cloaked_release(model, X_STAR, rng=np.random.default_rng(0), **{**LABEL_KW, **kw})
        texts = [str(w.message) for w in record if issubclass(w.category, PrivacyWarning)]
        assert any(setting in t for t in texts), texts
        assert all(re.search(r"\b(choose|rescale)\b", t, re.I) for t in texts)
        messages.append(texts)
    assert messages[0] == messages[1]


def test_sane_settings_do_not_warn_and_sample_path_cost_warns():
    a, _ = _neighbours(60)
    _silent(cloaked_release, a, X_STAR, rng=np.random.default_rng(0), **LABEL_KW)
    X = np.linspace(0.0, 2.0, 10)
    path = gp_regression(X, np.sin(X), pm.gp.cov.Exponential(1, ls=0.3), noise_sd=2.0)
    kw = dict(kernel_scale=1.0, y_bounds=(-2.0, 2.0), delta=1e-5, domain=(0.0, 2.0), epsilon=1e6)
    with pytest.warns(PrivacyWarning, match=f"exceeds {EPSILON_WARN_THRESHOLD:g}"):
        sample_path_release(path, [0.5], n_draws=30, rng=np.random.default_rng(0), **kw)


# ---------------------------------------------------- point 6: one ledger, one privacy model
def _full_release(models, ledger, rng):
    return noise_aware_release(
        models["sparse"], epsilon=1.0, delta=1e-3, y_bounds=(-2.0, 2.0), ledger=ledger, rng=rng
    )


def test_ledger_refuses_mixed_privacy_models_unless_allowed(models):
    ledger = Ledger(epsilon=20.0, delta=1e-3)
    cloaked_release(
        models["exact"], X_STAR, ledger=ledger, rng=np.random.default_rng(1), **LABEL_KW
    )
    assert ledger.privacy_model == "label"
    assert ledger.history[0].neighbouring_relation.startswith("replace-one-label")
    rng = np.random.default_rng(2)
    state = rng.bit_generator.state
    with pytest.raises(PrivacyModelMismatchError) as info:
        _full_release(models, ledger, rng)
    _check_failure(info.value)
    assert len(ledger.history) == 1 and rng.bit_generator.state == state
    mixed = Ledger(epsilon=20.0, delta=1e-3, allow_mixed_privacy_models=True)
    _full_release(models, mixed, np.random.default_rng(3))
    assert mixed.privacy_model == "full"
    cloaked_release(models["exact"], X_STAR, ledger=mixed, rng=np.random.default_rng(4), **LABEL_KW)
    assert [e.privacy_model for e in mixed.history] == ["full", "label"]
    assert mixed.privacy_model == "label"  # full privacy implies label privacy, not conversely
    assert "label (mixed" in mixed.summary()
    assert mixed.to_metadata()["privacy_model"] == "label"


def test_persistent_ledger_stores_the_model_and_reads_old_rows(models, tmp_path):
    path = tmp_path / "ledger.db"
    fp = dataset_fingerprint("guard rails persistent")
    led = PersistentLedger(path, fp, epsilon=20.0, delta=1e-3)
    led.spend(GaussianEvent(noise_multiplier=4.0))  # a row without a model, as stored before
    with (
        closing(sqlite3.connect(path)) as conn,
        conn,
    ):  # rewrite it as a pre-issue-15 row (no new keys)
        (record,) = conn.execute("SELECT record FROM entries").fetchone()
        old = {
            k: v
            for k, v in json.loads(record).items()
            if k not in ("privacy_model", "neighbouring_relation", "generator_fingerprint")
        }
        text = json.dumps(old, sort_keys=True, separators=(",", ":"))
        # and its parameters as hashed before stop 31 (no salt_id in the genesis)
        params = {k: v for k, v in led._params().items() if k != "salt_id"}
        genesis = led._hash(b"", _canonical(params))
        conn.execute("UPDATE ledgers SET genesis = ?", (genesis,))
        conn.execute(
            "UPDATE entries SET record = ?, hash = ?",
            (text, led._hash(genesis, text.encode())),
        )
        conn.execute("DROP TABLE salts")
    reopened = PersistentLedger(path, fp)
    assert reopened.history[0].privacy_model is None and reopened.privacy_model is None
    cloaked_release(
        models["exact"], X_STAR, ledger=reopened, rng=np.random.default_rng(1), **LABEL_KW
    )
    with pytest.raises(PrivacyModelMismatchError):
        _full_release(models, PersistentLedger(path, fp), np.random.default_rng(2))
    export = json.loads(PersistentLedger(path, fp).export_json())
    assert export["privacy_model"] == "label"
    assert [e["record"].get("privacy_model") for e in export["entries"]] == [None, "label"]
    assert reopened.verify() == 2


# ------------------------------------------------------------ sweep over numeric arguments
NUMBERS = st.one_of(
    st.sampled_from([0.0, -1.0, 1e-300, 1e-12, 0.5, 1.0, 5.0, 11.0, 1e6, 1e300, math.nan]),
    st.floats(min_value=-10.0, max_value=1e4, allow_nan=False),
    st.sampled_from([math.inf, -math.inf, 2, 0]),
)
NUMERIC_KEYS = {
    "cloaked_release": ["epsilon", "delta", "y_bounds", "n_draws"],
    "prior_noise_release": ["epsilon", "delta", "y_bounds", "n_draws"],
    "noise_aware_release": ["epsilon", "delta", "y_bounds", "ratio", "rho"],
    "dirichlet_release": ["epsilon", "delta", "ratio", "rho"],
    "sample_path_release": ["epsilon", "delta", "y_bounds", "kernel_scale", "eta", "n_draws"],
}


def _value(key: str, data) -> object:
    if key == "y_bounds":
        return (data.draw(NUMBERS, label="lower"), data.draw(NUMBERS, label="upper"))
    if key == "n_draws":
        return data.draw(st.sampled_from([0, 1, 2, 3, 1.5, -1]), label=key)
    return data.draw(NUMBERS, label=key)


@pytest.mark.parametrize("entry", sorted(NUMERIC_KEYS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_numeric_sweep_result_documented_error_or_warning(models, entry, data):
    call, _ = _calls(models)[entry]
    keys = data.draw(
        st.lists(st.sampled_from(NUMERIC_KEYS[entry]), min_size=1, max_size=3, unique=True)
    )
    kw = {k: _value(k, data) for k in keys}
    if entry == "sample_path_release":
        kw.setdefault("epsilon", 50.0)
    ledger = Ledger(epsilon=1e12, delta=0.5)
    rng = np.random.default_rng(11)
    state = rng.bit_generator.state
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call(ledger, rng, dict(kw))
        except Exception as err:  # noqa: BLE001 - the assertion is on its type and message
            _check_failure(err)
            assert ledger.history == [] and rng.bit_generator.state == state
            result = None
    # a ResourceWarning is the garbage collector's about an object of an earlier test (3.13's
    # sqlite3 "unclosed database", attributed to whatever frame runs when it is collected)
    ours = [
        w
        for w in caught
        if "pm_dpgp" in str(w.filename) and not issubclass(w.category, ResourceWarning)
    ]
    assert all(issubclass(w.category, PrivacyWarning) for w in ours), [
        (w.category.__name__, str(w.message)) for w in ours
    ]
    if result is not None:
        assert len(ledger.history) == 1
        assert ledger.history[0].privacy_model in ("label", "full")


def test_the_delta_advice_is_much_smaller_than_one_over_n():
    """Stop-38 usability audit: at n = 287 the advice was delta = 1/n**1.1 = 2.0e-3, 0.57/n,
    not "much smaller than 1/n".  It is now the smaller of 1e-5 and 1/n²."""
    from pm_dpgp._validation import warn_public_settings

    for n, advised in ((60, 1e-5), (287, 1e-5), (10_000, 1e-8)):
        with pytest.warns(PrivacyWarning, match=f"delta={advised:.1e}"):
            warn_public_settings(delta=0.5, n_records=n)
        assert advised <= 1e-2 / n
