#!/usr/bin/python3
"""bench/video_motion.py - coherent motion in videos: the displacement of the bright pixels' centre
of mass from one frame to the next, pooled over videos and frames, for two video data files (the
data's and a model's samples), and a two-sample Kolmogorov-Smirnov test of the two distributions.

Usage: /usr/bin/python3 bench/video_motion.py DATA.h5 SAMPLES.h5  -> one JSON line.
The centre of mass weighs each pixel by its grey level above a quarter of the range (the sprite on a
black background; sampled noise below that is ignored); a frame with no such pixel is skipped."""
import json
import math
import sys

import h5py
import numpy as np


def load(path):
    with h5py.File(path, "r") as f:
        x = f["/x"][()]
        T, h, w, c = (int(v) for v in f["/x"].attrs["video_shape"])
        levels = int(f["/x"].attrs["levels"])
    return x.reshape(len(x), T, h, w, c).mean(axis=4), levels


def displacements(v, levels):
    n, T, h, w = v.shape
    ii, jj = np.mgrid[0:h, 0:w]
    wgt = np.clip(v - 0.25 * (levels - 1), 0, None)
    mass = wgt.sum(axis=(2, 3))
    ok = mass > 0
    ci = np.where(ok, (wgt * ii).sum(axis=(2, 3)) / np.where(ok, mass, 1), np.nan)
    cj = np.where(ok, (wgt * jj).sum(axis=(2, 3)) / np.where(ok, mass, 1), np.nan)
    d = np.hypot(np.diff(ci, axis=1), np.diff(cj, axis=1)).ravel()
    return d[np.isfinite(d)]


def ks_2samp(a, b):
    """Two-sample KS statistic and its asymptotic p-value (scipy's 'asymp' method)."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    if lam < 0.3:  # the series converges slowly there; Q_KS(0.3) > 0.9999
        return float(d), 1.0
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return float(d), float(min(max(p, 0.0), 1.0))


def main():
    data, levels = load(sys.argv[1])
    samp, _ = load(sys.argv[2])
    a, b = displacements(data, levels), displacements(samp, levels)
    d, p = ks_2samp(a, b)
    print(json.dumps({"data_steps": len(a), "sample_steps": len(b), "data_mean": float(a.mean()),
                      "sample_mean": float(b.mean()), "data_median": float(np.median(a)),
                      "sample_median": float(np.median(b)), "ks_d": d, "ks_p": p}))


if __name__ == "__main__":
    main()
