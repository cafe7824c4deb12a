"""Stop-45 review of the stop-45 diff.

The integral kernel's narrow-box recomputation (``pm_dpgp.gp.integral``) keeps the closed
form where its *estimated* round-off is below ``10⁻⁹``; the actual error there can be about
twice the estimate, so the documented "absolute error below ``10⁻¹⁰``" was false (``1.4·10⁻⁹``
for a box of width ``4.6·10⁻⁸`` overlapping one of width ``0.16`` at ``ℓ = 1.95``).  The
documents now state ``< 2·10⁻⁹``; these tests pin that bound (a lower threshold would make
fine grids 4–6× slower, so the code is unchanged).
"""

from __future__ import annotations

import numpy as np
import pytest

from pm_dpgp.gp.integral import box_box_kernel


def _exact(a, b, c, d, ls):
    mp = pytest.importorskip("mpmath")
    with mp.workdps(60):
        a, b, c, d, ls = (mp.mpf(v) for v in (a, b, c, d, ls))

        def g(z):
            u = z / ls
            return ls**2 * (u * mp.sqrt(mp.pi / 2) * mp.erf(u / mp.sqrt(2)) + mp.exp(-u * u / 2))

        return float((g(b - c) + g(a - d) - g(a - c) - g(b - d)) / ((b - a) * (d - c)))


def _k(a, b, c, d, ls):
    one = np.array([[a]]), np.array([[b]]), np.array([[c]]), np.array([[d]])
    return float(box_box_kernel(*one, ls, 1.0)[0, 0])


def test_closed_form_kept_just_below_the_threshold_errs_above_1e10_below_2e9():
    case = (0.5862017078237574, 0.5862017533746657, 0.5862016755370312, 0.750233235306388)
    ls = 1.9540056927458578
    err = abs(_k(*case, ls) - _exact(*case, ls))
    assert 1e-10 < err < 2e-9  # the old docs said < 1e-10


def test_documented_bound_on_random_pairs():
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(300):
        wa, wb = 10.0 ** rng.uniform(-12, 0.5, size=2)
        a = rng.uniform(-5, 5)
        r = rng.random()
        c = a + (rng.uniform(-1, 1) * wa if r < 0.3 else rng.uniform(-30, 30))
        worst = max(worst, abs(_k(a, a + wa, c, c + wb, 1.0) - _exact(a, a + wa, c, c + wb, 1.0)))
    assert worst < 2e-9
