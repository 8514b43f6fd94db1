#!/usr/bin/python3
"""The pinwheel's entropy, independently of nf's code: its density from the written-down definition
(x = 2 R(-theta) f, theta = 2 pi k/5 + 0.25 exp(f0), f0 ~ N(1, 0.3^2), f1 ~ N(0, 0.1^2), k ~ U{0..4})
by solving for f0 on each arm (f = R(theta) x / 2, so f0 = (x0 cos theta - x1 sin theta) / 2 is a
1-D equation in f0: scanned on a fine grid, refined by Newton), then H = -int p log p by the
midpoint rule on a grid of x.  Prints the mass and entropy on two grids (their difference is the
quadrature's error).  nf's datasets/pinwheel.c solves for the polar angle instead."""
import numpy as np, sys

def density(x0, x1):
    p = np.zeros_like(x0)
    f0s = np.arange(-1.5, 4.0, 0.004)          # 1 +- 8 sd and more
    for k in range(5):
        def res(f0):
            th = 2 * np.pi * k / 5 + 0.25 * np.exp(f0)
            return f0 - (x0 * np.cos(th) - x1 * np.sin(th)) / 2
        prev = res(f0s[0])
        for i in range(1, len(f0s)):
            cur = res(f0s[i])
            hit = np.sign(cur) != np.sign(prev)
            if hit.any():
                idx = np.nonzero(hit)
                a, b = f0s[i - 1], f0s[i]
                ra, rb = prev[idx], cur[idx]
                f0 = a + (b - a) * ra / (ra - rb)
                X0, X1 = x0[idx], x1[idx]
                for _ in range(30):                # Newton on the bracketed root
                    th = 2 * np.pi * k / 5 + 0.25 * np.exp(f0)
                    dth = 0.25 * np.exp(f0)
                    r = f0 - (X0 * np.cos(th) - X1 * np.sin(th)) / 2
                    dr = 1 + (X0 * np.sin(th) + X1 * np.cos(th)) / 2 * dth
                    f0 = np.clip(f0 - r / dr, a, b)
                th = 2 * np.pi * k / 5 + 0.25 * np.exp(f0)
                f1 = (X0 * np.sin(th) + X1 * np.cos(th)) / 2
                lp = (-0.5 * ((f0 - 1) / 0.3) ** 2 - np.log(0.3 * np.sqrt(2 * np.pi))
                      - 0.5 * (f1 / 0.1) ** 2 - np.log(0.1 * np.sqrt(2 * np.pi)))
                p[idx] += np.exp(lp) / np.abs(4 * (1 + 0.25 * np.exp(f0) * f1)) / 5
            prev = cur
    return p

def entropy(m, L=6.0):
    h = 2 * L / m
    c = -L + (np.arange(m) + 0.5) * h
    mass = H = 0.0
    for row in np.array_split(np.arange(m), 16):
        X0, X1 = np.meshgrid(c[row], c, indexing="ij")
        p = density(X0.ravel(), X1.ravel())
        mass += p.sum() * h * h
        nz = p > 0
        H -= (p[nz] * np.log(p[nz])).sum() * h * h
    return mass, H

for m in [int(a) for a in sys.argv[1:]] or [300, 600]:
    mass, H = entropy(m)
    print(f"grid {m} x {m} on [-6, 6]^2: mass {mass:.6f}  entropy {H:.5f}  (normalised {H / mass + np.log(mass):.5f})", flush=True)
