"""Audit: COINPRESS clipped-mean sensitivity allowance (relative 1e-9) vs the round-off of the
correctly rounded sum, for large n.

centred_clipped_mean = fsum(clip(v) − c)/n.  fsum is the correctly rounded EXACT sum, so two
neighbours' computed sums can differ by |t − t'| plus up to one ulp of |S| ≈ u·n·(h − l); the
allowance covers (h − l)·1e-9 only, i.e. n ≲ 9·10⁶.  Worst case: n = 2^26 records, interval
[−½, ½] (c = 0, all terms exact), 2^25 terms ½, one term x = 1.49·2^−29, the rest 0, the
neighbour's term ±½.  Because fsum is exact-then-round-once, fsum over the 2^26-long list equals
fsum([2^24, x, ±½]); FULL=1 checks that on the real function (≈3 GB of RAM, ~1 min).
"""

import math
import os

import numpy as np

from pm_dpgp.selection.coinpress import centred_clipped_mean, clipped_mean_sensitivity

n = 2**26
x = 1.49 * 2.0**-29
lo, hi = -0.5, 0.5
S1 = math.fsum([2.0**24, x, 0.5])
S2 = math.fsum([2.0**24, x, -0.5])
m1, m2 = S1 / n, S2 / n
Delta = clipped_mean_sensitivity(lo, hi, n)
print(f"computed |m − m'| = {abs(m1 - m2):.17g}")
print(f"charged Δ_t       = {Delta:.17g}")
print(f"ratio             = 1 + {abs(m1 - m2) / Delta - 1:.3e}  (> 1: sensitivity exceeded)")
print(f"ρ_t understated by a relative {(abs(m1 - m2) / Delta) ** 2 - 1:.3e}")
if os.environ.get("FULL"):
    v = np.zeros(n)
    v[: 2**25] = 0.5
    v[2**25] = x
    v[-1] = 0.5
    a = centred_clipped_mean(v, lo, hi)
    v[-1] = -0.5
    b = centred_clipped_mean(v, lo, hi)
    print("full-size check:", a == m1, b == m2, f"ratio 1 + {abs(a - b) / Delta - 1:.3e}")
