"""Pooled inter-event times of nf-sequences files, and the KS test they go through (bench only).

Shared by bench/tpp_targets.sh and bench/tpp_hawkes_mle.py."""
import h5py
import numpy as np

from ks import ks_2samp  # noqa: F401 (re-exported)


def intervals(path):
    """Pooled inter-event times of an nf-sequences file (first interval from t_start, no open interval)."""
    f = h5py.File(path, "r")
    t, off, t0 = f["times"][...], f["offsets"][...], f["t_start"][...]
    return np.concatenate([np.diff(np.concatenate([[t0[b]], t[off[b]:off[b + 1]]])) for b in range(len(t0))])
