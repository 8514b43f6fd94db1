"""The simulation test of issue 10 for the best model any fit could give: a Hawkes process of the right
family, fitted by maximum likelihood.

    /usr/bin/python3 bench/tpp_hawkes_mle.py --out DIR --set hawkes1 [--nf build/float/nf] [--draws 20]
        [--kernels 1]

DIR is a bench/tpp_targets.sh output folder (SET.train.h5, SET.test.h5, SET.ntest, SET.tend).  The
script fits mu, alpha_j and beta_j of lambda(t) = mu + sum_j sum_{t_i < t} alpha_j beta_j
exp(-beta_j (t - t_i)) to the training sequences (all of SET.train.h5: the sequences nf tpp fit
trains and validates on) by maximum likelihood, simulates the fitted process like the models'
samples (`nf data make tpp-hawkes -n NTEST --t-end TEND --seed k`, k = 1..draws) and gives each
sample the two-sample KS test of pooled inter-event times against the test sequences.  A fitted
model can do no better than this one, which has the generating process's form and only the
estimation error of 51 sequences: its failure rate is the floor for a fitted decoder.

The log-likelihood of one sequence on [t0, t1] with A_j(i) = sum_{k < i} exp(-beta_j (t_i - t_k)):
    sum_i log(mu + sum_j alpha_j beta_j A_j(i)) - mu (t1 - t0) - sum_j alpha_j sum_i (1 - exp(-beta_j (t1 - t_i)))
A_j(i) = exp(-beta_j tau_i) (A_j(i-1) + 1); all sequences advance together, one event index at a
time (numpy over sequences).  Nelder-Mead on (log mu, log alpha_j, log beta_j).
"""
import argparse
import json
import os
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpp_ks import intervals, ks_2samp  # noqa: E402


def load(path):
    """Padded event times (sequences x longest), their counts, and the windows."""
    f = h5py.File(path, "r")
    t, off, t0, t1 = f["times"][...], f["offsets"][...], f["t_start"][...], f["t_end"][...]
    n = np.diff(off)
    T = np.full((len(n), n.max()), np.nan)
    for b in range(len(n)):
        T[b, :n[b]] = t[off[b]:off[b + 1]]
    return T, n, t0, t1


def log_lik(theta, T, n, t0, t1, J):
    """Total log-likelihood of all sequences; theta = (log mu, log alpha_1..J, log beta_1..J)."""
    mu, alpha, beta = np.exp(theta[0]), np.exp(theta[1:1 + J]), np.exp(theta[1 + J:])
    B, L = T.shape
    A = np.zeros((B, J))
    prev = t0.copy()
    ll = -mu * (t1 - t0)
    for i in range(L):
        live = i < n
        ti = np.where(live, T[:, i], prev)
        A = np.exp(-beta[None, :] * (ti - prev)[:, None]) * (A + (i > 0))
        lam = mu + A @ (alpha * beta)
        ll = ll + np.where(live, np.log(lam) - (alpha * -np.expm1(-beta[None, :] * (t1 - ti)[:, None])).sum(1), 0)
        prev = ti
    return float(ll.sum())


def nelder_mead(f, x0, step=0.3, iters=2000, tol=1e-9):
    """Minimise f from x0 (the textbook simplex: reflection 1, expansion 2, contraction 0.5, shrink 0.5)."""
    d = len(x0)
    X = [np.array(x0, float)] + [np.array(x0, float) + step * np.eye(d)[k] for k in range(d)]
    F = [f(x) for x in X]
    for _ in range(iters):
        o = np.argsort(F)
        X, F = [X[k] for k in o], [F[k] for k in o]
        if abs(F[-1] - F[0]) <= tol * (abs(F[0]) + 1):
            break
        c = np.mean(X[:-1], axis=0)
        xr = c + (c - X[-1])
        fr = f(xr)
        if fr < F[0]:
            xe = c + 2 * (c - X[-1])
            fe = f(xe)
            X[-1], F[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < F[-2]:
            X[-1], F[-1] = xr, fr
        else:
            xc = c + 0.5 * (X[-1] - c) if fr >= F[-1] else c + 0.5 * (xr - c)
            fc = f(xc)
            if fc < min(fr, F[-1]):
                X[-1], F[-1] = xc, fc
            else:
                X = [X[0]] + [X[0] + 0.5 * (x - X[0]) for x in X[1:]]
                F = [F[0]] + [f(x) for x in X[1:]]
    k = int(np.argmin(F))
    return X[k], F[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="hawkes1")
    ap.add_argument("--nf", default="build/float/nf")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--kernels", type=int, default=1)
    a = ap.parse_args()
    p = os.path.join(a.out, a.set)
    T, n, t0, t1 = load(p + ".train.h5")
    J = a.kernels
    x0 = np.log(np.r_[0.5, np.full(J, 0.5 / J), np.geomspace(1, 10, J)])
    theta, nll = nelder_mead(lambda x: -log_lik(x, T, n, t0, t1, J), x0)
    mu, alpha, beta = np.exp(theta[0]), np.exp(theta[1:1 + J]), np.exp(theta[1 + J:])
    ntest, tend = open(p + ".ntest").read().strip(), open(p + ".tend").read().strip()
    test = intervals(p + ".test.h5")
    ps = []
    for k in range(1, a.draws + 1):
        s = f"{p}.mle.draw{k}.h5"
        subprocess.run([a.nf, "data", "make", "tpp-hawkes", "--mu", repr(mu), "--alpha",
                        ":".join(map(repr, alpha)), "--beta", ":".join(map(repr, beta)), "-n", ntest,
                        "--t-end", tend, "--seed", str(k), "-o", s], check=True, stdout=subprocess.DEVNULL)
        ps.append(ks_2samp(intervals(s), test)[1])
    events = int(n.sum())
    print(json.dumps({"set": a.set, "sequences": len(n), "events": events, "mu": mu, "alpha": alpha.tolist(),
                      "beta": beta.tolist(), "branching_ratio": float(alpha.sum()),
                      "nll_per_event": nll / events, "draws": a.draws, "ks_p": ps,
                      "ks_p_median": float(np.median(ps)), "ks_p_below_0.01": int(sum(q < 0.01 for q in ps))}))


if __name__ == "__main__":
    main()
