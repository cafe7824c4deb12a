"""``quiet_masked_entries`` from two threads at once (stop-48 review, confirmed here).

``warnings.catch_warnings`` saves and restores the process-wide filter list.  Two threads
inside it at once restore each other's lists: in the interleaving A enters, B enters, A
leaves, B leaves, A's exit removes the filter while B is still converting (B's masked entry
warns: whether a private record is missing shows again), and B's exit re-installs the list
it saved, which holds A's filter, for good.  The library's own entries are now serialised.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

from pm_dpgp._validation import quiet_masked_entries


def test_two_threads_neither_leave_the_filter_installed_nor_warn() -> None:
    before = list(warnings.filters)
    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()
    heard: list[str] = []

    def thread_a() -> None:
        with quiet_masked_entries([1.0, np.ma.masked]):
            a_inside.set()
            # the old code let B in at once; now B waits for A (the wait times out)
            b_inside.wait(timeout=1.0)
        a_done.set()

    def thread_b() -> None:
        a_inside.wait()
        with quiet_masked_entries([np.ma.masked, 2.0]):
            b_inside.set()
            a_done.wait(timeout=5.0)
            with warnings.catch_warnings(record=True) as caught:
                # what a conversion inside does: NumPy warns for a masked entry unless
                # the filter is in place ("always" is not set: the filter list decides)
                np.asarray([np.ma.masked, 2.0], dtype=np.float64)
            heard.extend(str(w.message) for w in caught)

    ta, tb = threading.Thread(target=thread_a), threading.Thread(target=thread_b)
    ta.start()
    tb.start()
    ta.join(10.0)
    tb.join(10.0)
    assert not ta.is_alive() and not tb.is_alive()
    assert list(warnings.filters) == before  # no filter left behind
    assert not any("masked element" in m for m in heard)


def test_nested_entries_in_one_thread_do_not_deadlock() -> None:
    with quiet_masked_entries([np.ma.masked]):
        with quiet_masked_entries([np.ma.masked]):
            values = np.asarray([np.ma.masked, 1.0], dtype=np.float64)
    assert np.isnan(values[0]) and values[1] == 1.0
