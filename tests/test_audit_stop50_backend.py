"""Stop-50 audit: the library's numbers do not depend on the PyTensor backend or its state.

``pm_dpgp._ieee.ieee_arithmetic`` holds a process-wide lock while it compiles with Numba's
fast math off; a fork from another thread at that moment left the child with the lock held
for ever (its owner does not exist in the child) and the flag switched off.
``kernel_structure_at`` evaluated the kernel's scalars with their constants, so PyTensor's
rewrites computed a different value than the public kernel (its constants are inputs).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings

import pytensor
import pytest

from pm_dpgp._ieee import ieee_arithmetic

_FASTMATH = hasattr(pytensor.config, "numba__fastmath")


def _child_compiles() -> None:  # pragma: no cover - in the child
    """In the forked child: may it enter ``ieee_arithmetic`` (exit code 3 if not), and is the
    fast-math flag the parent's own (exit code 4 if not)?"""
    # the child's own main thread (a new thread may reuse the dead owner's identity); a hang
    # ends by SIGALRM
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(20)
    with ieee_arithmetic():
        entered = True
    signal.alarm(0)
    flag_ok = not _FASTMATH or pytensor.config.numba__fastmath is True
    os._exit(0 if entered and flag_ok else 3 if not entered else 4)


@pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")
def test_fork_while_another_thread_compiles_gives_a_usable_child() -> None:
    """A thread inside ``ieee_arithmetic`` (a kernel compile takes seconds under Numba) while
    another thread forks (a ``multiprocessing`` pool with the fork start method): before the
    fix the child's first kernel compile waited for ever on the inherited lock."""
    flags = {"numba__fastmath": True} if _FASTMATH else {}
    with pytensor.config.change_flags(**flags):
        inside = threading.Event()

        def compile_slowly() -> None:
            with ieee_arithmetic():
                inside.set()
                time.sleep(1.0)

        worker = threading.Thread(target=compile_slowly)
        worker.start()
        assert inside.wait(10.0)
        ctx = multiprocessing.get_context("fork")
        with warnings.catch_warnings():  # Python 3.12+: "multi-threaded, use of fork()"
            warnings.simplefilter("ignore", DeprecationWarning)
            child = ctx.Process(target=_child_compiles)
            child.start()
        child.join(60.0)
        worker.join()
    if child.exitcode is None:  # pragma: no cover - a hung child is a failure, not a hang
        child.kill()
        child.join()
    assert child.exitcode != 3, "the forked child could not enter ieee_arithmetic (held lock)"
    assert child.exitcode != 4, "the forked child inherited numba__fastmath=False"
    assert child.exitcode == 0, child.exitcode


def _cancelling_model() -> tuple[object, object]:
    """``ExpQuad(1) + c · ExpQuad(0.5)`` with ``c = (h + 1e16) − 1e16 − 0.2``: in IEEE
    arithmetic (the compiled public kernel) ``c = −0.2`` at ``h = 0.7``, and the kernel is
    no covariance (its spectral density ``e^{−ω²/2} − 0.1 e^{−ω²/8}`` is negative for
    ``ω > 2.5``), though it is positive and decreasing, so the corner check passes."""
    import numpy as np
    import pymc as pm

    from pm_dpgp.models import gp_regression

    X = np.linspace(0.0, 6.0, 30)
    with pm.Model():
        h = pm.HalfNormal("h", 1.0)
        coef = (h + 1e16) - 1e16 - 0.2
        cov = pm.gp.cov.ExpQuad(1, ls=1.0) + coef * pm.gp.cov.ExpQuad(1, ls=0.5)
        model = gp_regression(X, np.sin(X), cov, noise_sd=0.3)
    return model, cov


def test_kernel_structure_reads_the_scalars_the_kernel_computes() -> None:
    """``kernel_structure_at`` evaluated the scalars with constants, so PyTensor's rewrites
    cancelled ``(h + 1e16) − 1e16`` to ``h`` (0.5 ≥ 0: "a covariance by construction"),
    while the public kernel, compiled with its constants as inputs, computed ``−0.2``."""
    import numpy as np

    from pm_dpgp.models.sparse import kernel_structure_at

    model, cov = _cancelling_model()
    k = model.public_gp({"h": 0.7}).kernel(np.array([[0.0], [0.3]]))
    np.testing.assert_allclose(k[0, 0], 0.8, rtol=1e-15)  # 1 − 0.2, not 1 + 0.5
    assert not kernel_structure_at(cov, {"h": 0.7}, 1).covariance


def test_sample_path_release_refuses_the_cancelled_negative_scalar() -> None:
    import numpy as np

    from pm_dpgp.accounting import Ledger
    from pm_dpgp.mechanisms import sample_path_release

    model, _ = _cancelling_model()
    ledger = Ledger()
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="not a covariance by construction"):
        sample_path_release(
            model,
            np.linspace(0.0, 6.0, 10),
            n_draws=2,
            kernel_scale=1.0,
            y_bounds=(-2.0, 2.0),
            delta=1e-5,
            ledger=ledger,
            domain=(0.0, 6.0),
            hyperparameters={"h": 0.7},
            rng=rng,
        )
    assert ledger.history == []
    assert rng.bit_generator.state == state
