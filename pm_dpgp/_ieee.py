"""PyTensor functions compiled with IEEE-754 arithmetic (no "fast math").

PyTensor 3 (PyMC 6) compiles through Numba by default, with LLVM fast-math flags on
(``pytensor.config.numba__fastmath``: ``reassoc``, ``arcp``, ``contract``, ``afn``, ``nsz``).
Those flags let the compiler re-associate and cancel arithmetic that this library writes in a
particular order on purpose.  The Gibbs kernel (``pm_dpgp.models.nonstationary``) is the
case that showed it: eq. 8 is evaluated in units of ``m = max(r(x), r(x'))`` so that the
squares of lengthscales near 1e-170 or 1e160 neither underflow nor overflow; with
``reassoc`` the compiled function cancelled ``m`` again and returned NaN at 1e-170 and
wrong values at 1e160 (CI of stop 49; the Numba cache made it depend on the run order).
PyTensor 2 (PyMC 5) compiles C without fast math and is unaffected.

Every PyTensor function the library compiles to compute numbers it uses — the public
kernels, their per-thread copies and their unpickled copies on Dask workers (both re-link
the graph under the configuration in force), the KDE lengthscales, the prior quantiles —
is made inside ``ieee_arithmetic()``.  PyMC's own sampling is left as the user configured it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytensor

__all__ = ["ieee_arithmetic", "ieee_function"]

#: ``change_flags`` sets a process-wide flag; the lock keeps one thread from restoring
#: fast math while another is still compiling (Dask's threaded scheduler copies kernels
#: from several threads at once).  Re-entrant: a compile may unpickle or copy inside.
_LOCK = threading.RLock()


def _release_after_fork() -> None:
    _LOCK.release()


if hasattr(os, "register_at_fork"):  # POSIX
    # a fork while another thread compiles inside ``ieee_arithmetic`` gave a child whose
    # ``_LOCK`` was held for ever (its owner does not exist there: the child's first kernel
    # compile hung) and whose fast-math flag stayed switched off; the fork waits for the
    # compile instead (as the ledgers' fork hooks do, ``pm_dpgp.accounting.ledger``)
    os.register_at_fork(
        before=_LOCK.acquire,
        after_in_parent=_release_after_fork,
        after_in_child=_release_after_fork,
    )


@contextmanager
def ieee_arithmetic() -> Iterator[None]:
    """Compile (or copy, or unpickle) PyTensor functions without Numba's fast-math flags.

    A no-op for PyTensor's C backend, which never used them (nor for a PyTensor without
    the flag).
    """
    flags = {"numba__fastmath": False} if hasattr(pytensor.config, "numba__fastmath") else {}
    with _LOCK, pytensor.config.change_flags(**flags):
        yield


def ieee_function(*args: Any, **kwargs: Any) -> Any:
    """``pytensor.function(*args, **kwargs)`` compiled inside ``ieee_arithmetic()``."""
    with ieee_arithmetic():
        return pytensor.function(*args, **kwargs)
