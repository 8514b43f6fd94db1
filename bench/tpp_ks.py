"""Pooled inter-event times of nf-sequences files and the two-sample KS test on them (bench only).

Shared by bench/tpp_targets.sh and bench/tpp_hawkes_mle.py; numpy only (scipy is not installed)."""
import math

import h5py
import numpy as np


def intervals(path):
    """Pooled inter-event times of an nf-sequences file (first interval from t_start, no open interval)."""
    f = h5py.File(path, "r")
    t, off, t0 = f["times"][...], f["offsets"][...], f["t_start"][...]
    return np.concatenate([np.diff(np.concatenate([[t0[b]], t[off[b]:off[b + 1]]])) for b in range(len(t0))])


def ks_2samp(a, b):
    """Two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value (Numerical Recipes' series)."""
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, x, side="right") / len(a) - np.searchsorted(b, x, side="right") / len(b)))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    p = 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam) for j in range(1, 101))
    return float(d), float(min(max(p, 0.0), 1.0))
