"""Stop-50 audit: the library's numbers do not depend on the PyTensor backend or its state.

``pm_dpgp._ieee.ieee_arithmetic`` holds a process-wide lock while it compiles with Numba's
fast math off; a fork from another thread at that moment left the child with the lock held
for ever (its owner does not exist in the child) and the flag switched off.
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
