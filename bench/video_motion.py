#!/usr/bin/python3
"""bench/video_motion.py - coherent motion in videos: the displacement of the bright pixels' centre
of mass from one frame to the next, pooled over videos and frames, for two video data files (the
data's and a model's samples), and a two-sample Kolmogorov-Smirnov test of the two distributions.

Usage: /usr/bin/python3 bench/video_motion.py DATA.h5 SAMPLES.h5 [--codec B K]  -> one JSON line.
With --codec, also the data as the model's codec gives it back: each frame through the orthonormal
B x B block DCT keeping the K x K lowest frequencies (training/video_codec.h) and back, clipped to the
grey range as nf video sample clips.  A flow on that codec can only draw such frames, so their
displacements (no longer the raw data's whole-pixel steps) are what its samples can match: the
samples are tested against them too, and the reconstructed data against the raw.
The centre of mass weighs each pixel by its grey level above a quarter of the range (the sprite on a
black background; sampled noise below that is ignored); a frame with no such pixel is skipped.
Displacements are compared to 1e-6 px.

Also, for scale (the KS test alone cannot give it, see below):
- w1: the Wasserstein-1 distance (px) between the data's and the samples' displacements, with three
  references on the same data: w1_data_halves (the test videos' two halves against each other: the
  sampling noise), w1_shuffled_frames (the data with each video's frames in a random order: right
  sprites, incoherent motion) and w1_still (every displacement 0: no motion).
- ks_d_jitter_floor: the data's displacements moved by at most 0.05 px (uniform, seeded) against
  themselves.  The data's displacements sit on a few atoms (whole-pixel steps of an unchanged sprite);
  any sample whose displacements spread however little around the right atoms puts about half of each
  atom's mass on either side of it, so KS D cannot fall below about half the largest atom's mass
  (largest_atom) unless the samples move their sprites by exact whole pixels."""
import json
import math
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ks import ks_2samp  # noqa: E402


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
    # to 1e-6 px: the data's displacements are a few exact values (whole-pixel steps), and rounding
    # error in a codec's round trip would otherwise split each into many (the lossless codec, keep 8
    # of 8, then differed from the data at KS D = 0.10)
    return np.round(d[np.isfinite(d)], 6)


def wasserstein1(a, b):
    """W1 between two empirical distributions on the line: the integral of |F_a - F_b|."""
    grid = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), grid[:-1], side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid[:-1], side="right") / len(b)
    return float(np.sum(np.abs(fa - fb) * np.diff(grid)))


def references(data, levels, a, rng):
    """The scale of w1 and the floor of KS D on these data (see the module's docstring)."""
    half = len(data) // 2
    shuffled = np.stack([v[rng.permutation(v.shape[0])] for v in data])
    jitter = a + rng.uniform(-0.05, 0.05, size=a.shape)
    _, counts = np.unique(a, return_counts=True)
    return {"w1_data_halves": wasserstein1(displacements(data[:half], levels), displacements(data[half:], levels)),
            "w1_shuffled_frames": wasserstein1(a, displacements(shuffled, levels)),
            "w1_still": wasserstein1(a, np.zeros(1)),
            "largest_atom": float(counts.max() / len(a)),
            "ks_d_jitter_floor": ks_2samp(a, jitter)[0]}


def dct_matrix(B):
    """Orthonormal DCT-II: row u, column x."""
    C = np.array([[math.cos(math.pi * (2 * x + 1) * u / (2 * B)) for x in range(B)] for u in range(B)])
    C[0] *= math.sqrt(1.0 / B)
    C[1:] *= math.sqrt(2.0 / B)
    return C


def through_codec(v, levels, B, K):
    """Each frame's B x B blocks projected onto their K x K lowest DCT frequencies, clipped to 0..L-1."""
    n, T, h, w = v.shape
    Ck = dct_matrix(B)[:K]  # (K, B)
    P = Ck.T @ Ck  # (B, B) projection onto the kept frequencies along one side
    blocks = v.reshape(n, T, h // B, B, w // B, B)
    r = np.einsum("ab,ntibjc,cd->ntiajd", P, blocks, P.T).reshape(n, T, h, w)
    return np.clip(r, 0, levels - 1)


def main():
    data, levels = load(sys.argv[1])
    samp, _ = load(sys.argv[2])
    a, b = displacements(data, levels), displacements(samp, levels)
    d, p = ks_2samp(a, b)
    out = {"data_steps": len(a), "sample_steps": len(b), "data_mean": float(a.mean()),
           "sample_mean": float(b.mean()), "data_median": float(np.median(a)),
           "sample_median": float(np.median(b)), "ks_d": d, "ks_p": p, "w1": wasserstein1(a, b)}
    out.update(references(data, levels, a, np.random.default_rng(1)))
    if len(sys.argv) == 6 and sys.argv[3] == "--codec":
        B, K = int(sys.argv[4]), int(sys.argv[5])
        c = displacements(through_codec(data, levels, B, K), levels)
        dc, pc = ks_2samp(c, b)
        dr, pr = ks_2samp(a, c)
        out.update({"codec": f"block {B}, keep {K}", "codec_data_mean": float(c.mean()),
                    "codec_data_median": float(np.median(c)), "ks_d_vs_codec_data": dc, "ks_p_vs_codec_data": pc,
                    "ks_d_codec_data_vs_data": dr, "ks_p_codec_data_vs_data": pr})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
