"""The two-sample Kolmogorov-Smirnov test (bench only; numpy, since scipy is not installed).

Shared by bench/tpp_targets.sh, bench/tpp_hawkes_mle.py (through tpp_ks.py) and bench/video_motion.py."""
import math

import numpy as np


def ks_2samp(a, b):
    """Two-sample KS statistic and its asymptotic p-value (scipy's 'asymp' method, Numerical Recipes' series)."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    if lam < 0.3:  # the series converges slowly there; Q_KS(0.3) > 0.9999
        return float(d), 1.0
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return float(d), float(min(max(p, 0.0), 1.0))
