#!/usr/bin/env python3
"""Fit of S(t) = erfcx(z) / t, t = 1 / (1 + z/2), by a degree-8 polynomial in t for z in [0, 11]:
the coefficients S_COEF0..8 of nn/activation.c (fast_phi_density, the float build's Phi and GELU).

Relative least squares on Chebyshev nodes, reweighted toward the minimax fit; prints the largest
relative error of the polynomial in double and in float32 Horner, then the #defines.  Needs numpy
(Debian's /usr/bin/python3 has it); not used at build or run time.

    /usr/bin/python3 scripts/fit_gelu_erfc.py
"""
import math

import numpy as np


def s_of_t(t):
    z = 2 * (1 - t) / t
    return math.exp(z * z) * math.erfc(z) / t


def main():
    lo, hi, deg, nodes = 1 / (1 + 11 / 2), 1.0, 8, 3000
    k = np.arange(nodes)
    t = lo + (hi - lo) * (np.cos(np.pi * (k + 0.5) / nodes) + 1) / 2
    y = np.array([s_of_t(v) for v in t])
    V = np.vander(t, deg + 1, increasing=True)
    w = 1 / y
    c, *_ = np.linalg.lstsq(V * w[:, None], y * w, rcond=None)
    for _ in range(30):
        r = np.abs(V @ c / y - 1)
        w = w * (1 + 5 * r / r.max())
        c, *_ = np.linalg.lstsq(V * w[:, None], y * w, rcond=None)
    tt = np.linspace(lo, hi, 40001)
    yy = np.array([s_of_t(v) for v in tt])
    cf = c.astype(np.float32)
    p = np.full_like(tt.astype(np.float32), cf[-1])
    for ci in cf[-2::-1]:
        p = (p * tt.astype(np.float32) + ci).astype(np.float32)
    print("/* largest relative error: double %.2e, float Horner %.2e */" %
          (np.max(np.abs(np.polyval(c[::-1], tt) / yy - 1)), np.max(np.abs(p / yy - 1))))
    for i, ci in enumerate(cf):
        print("#define S_COEF%d %.9ef" % (i, ci))


if __name__ == "__main__":
    main()
