"""Benchmark: recording privacy events in the Ledger, against the former dp_accounting path.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_ledger.py``.  It reports, in one process:

* the time to record 1,000 Gaussian events (three noise multipliers, as in a DP Thompson
  run) in a :class:`~pm_dpgp.accounting.Ledger` (target < 0.5 s);
* the time of 1,000 calls of :func:`~pm_dpgp.accounting.events.gdp_epsilon` (own root solve on
  ``ln δ(ε)``, cache cleared) against 1,000 calls of the former path,
  :func:`dp_accounting.get_epsilon_gaussian` plus the same safety nudge, as a ratio, and the
  largest relative difference of the two ε;
* the same for the RDP → ε conversion (vectorised vs ``dp_accounting.rdp.compute_epsilon``).
"""

from __future__ import annotations

import time

import numpy as np
from dp_accounting import get_epsilon_gaussian

from pm_dpgp.accounting import GaussianEvent, Ledger
from pm_dpgp.accounting import events as ev


def main() -> None:
    t0 = time.perf_counter()
    ledger = Ledger(epsilon=None, delta=1e-5)
    for i in range(1000):
        ledger.spend(GaussianEvent(20.0 + (i % 3)))
    t_ledger = time.perf_counter() - t0
    print(
        f"1,000 Gaussian events recorded in {t_ledger:.3f} s "
        f"({'OK' if t_ledger < 0.5 else 'MISSED'} < 0.5 s); epsilon = {ledger.spent_epsilon:.6f}"
    )

    mus = np.geomspace(1e-2, 10.0, 1000)
    ev._gdp_epsilon.cache_clear()
    t0 = time.perf_counter()
    new = [ev.gdp_epsilon(float(mu), 1e-5) for mu in mus]
    t_new = time.perf_counter() - t0
    t0 = time.perf_counter()
    old = [
        ev._nudge_up(
            float(get_epsilon_gaussian(1.0 / mu, 1e-5)),
            lambda e, mu=mu: ev._log_delta_ok(ev._gdp_log_delta(float(mu), e), 1e-5),
        )
        for mu in mus
    ]
    t_old = time.perf_counter() - t0
    diff = float(np.max(np.abs(np.array(new) - old) / np.array(old)))
    print(
        f"gdp_epsilon x1000: {t_new:.3f} s vs dp_accounting path {t_old:.3f} s "
        f"= {t_old / t_new:.0f}x faster; max relative difference {diff:.2e}"
    )

    curve = ev.DEFAULT_ORDERS * 0.01
    t0 = time.perf_counter()
    for _ in range(1000):
        a = ev.rdp_to_epsilon(ev.DEFAULT_ORDERS, curve, 1e-5)
    t_new = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(1000):
        b = ev._rdp_to_epsilon_reference(ev.DEFAULT_ORDERS, curve, 1e-5)
    t_old = time.perf_counter() - t0
    print(
        f"rdp_to_epsilon x1000: {t_new:.3f} s vs dp_accounting {t_old:.3f} s "
        f"= {t_old / t_new:.0f}x faster; relative difference {abs(a - b) / b:.1e}"
    )


if __name__ == "__main__":
    main()
