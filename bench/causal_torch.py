"""bench/causal_torch.py - the PyTorch reference for `nf causal fit`: the same interventional flows
(training/model_causal.c) with the same sizes and settings, trained for the same steps, timed.

  nuisance  R = tanh(W_r xs + b_r) (R = 16), g = w_p . R + b_p; p(ys | x, a) in the density direction
            a conditional rational-quadratic spline (K = 8 bins, bound B; parameters from a tanh MLP on
            the context [R + noise, a], 2 hidden layers of 32, plus the MADE's direct context-to-output
            weights, as nf's 1-D spline-ar), a conditional affine (1 hidden layer of 32, s = 3 tanh(a/3)),
            a learned affine, a standard normal base; loss NLL + alpha BCE, noise 0.05 on R and ys.
  target    per arm two unconditional flows (spline with free parameters, then an affine): the
            corrected one on CE + BC over a grid of K_g = 200 points, the ablation on CE alone.

Both stages take `--steps` Adam steps (lr 5e-3, cosine) on batches of 64 units; no validation.
Prints one JSON line: {"impl": "torch", "steps": S, "seconds_stage1": ..., "seconds_stage2": ..., "cpu": ...}.

    /usr/bin/python3 bench/causal_torch.py DATA.h5 --steps 300 --threads 1
"""
import argparse
import json
import math
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_flows import unconstrained_rq_spline  # noqa: E402


class CondNet(nn.Module):
    """tanh MLP on the context with the MADE's direct context-to-output weights (zero-initialised out)."""

    def __init__(self, ctx, hidden, layers, out):
        super().__init__()
        mods, w = [], ctx
        for _ in range(layers):
            mods += [nn.Linear(w, hidden), nn.Tanh()]
            w = hidden
        self.body = nn.Sequential(*mods)
        self.out = nn.Linear(hidden, out)
        self.skip = nn.Linear(ctx, out, bias=False)
        for p in (self.out.weight, self.out.bias, self.skip.weight):
            nn.init.zeros_(p)

    def forward(self, c):
        return self.out(self.body(c)) + self.skip(c)


class Nuisance(nn.Module):
    def __init__(self, dx, R=16, hidden=32, K=8, B=3.0):
        super().__init__()
        self.K, self.B = K, B
        self.repr = nn.Linear(dx, R)
        self.prop = nn.Linear(R, 1)
        self.spline = CondNet(R + 1, hidden, 2, 3 * K - 1)
        self.affine = CondNet(R + 1, hidden, 1, 2)
        self.loc = nn.Parameter(torch.zeros(1))
        self.log_scale = nn.Parameter(torch.zeros(1))

    def encode(self, x):
        r = torch.tanh(self.repr(x))
        return r, self.prop(r)[:, 0]

    def log_prob(self, y, ctx):
        th = self.spline(ctx)
        K = self.K
        u, lad = unconstrained_rq_spline(y, th[:, :K], th[:, K:2 * K], th[:, 2 * K:], False, self.B)
        ts = self.affine(ctx)
        s = 3 * torch.tanh(ts[:, 1] / 3)
        z = u * torch.exp(s) + ts[:, 0]
        z = (z - self.loc) * torch.exp(self.log_scale)
        return -0.5 * z * z - 0.5 * math.log(2 * math.pi) + lad + s + self.log_scale


class Target(nn.Module):
    def __init__(self, K=8, B=3.0):
        super().__init__()
        self.K, self.B = K, B
        self.theta = nn.Parameter(torch.zeros(3 * K - 1))
        self.loc = nn.Parameter(torch.zeros(1))
        self.log_scale = nn.Parameter(torch.zeros(1))

    def log_prob(self, y):
        th = self.theta.expand(y.shape[0], -1)
        K = self.K
        u, lad = unconstrained_rq_spline(y, th[:, :K], th[:, K:2 * K], th[:, 2 * K:], False, self.B)
        z = (u - self.loc) * torch.exp(self.log_scale)
        return -0.5 * z * z - 0.5 * math.log(2 * math.pi) + lad + self.log_scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--grid", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--clip", type=float, default=0.05)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    with h5py.File(args.data, "r") as f:
        x = torch.tensor(np.asarray(f["x"], dtype=np.float32)).reshape(-1, f["x"].shape[1] if f["x"].ndim > 1 else 1)
        a = torch.tensor(np.asarray(f["a"], dtype=np.float32)).reshape(-1)
        y = torch.tensor(np.asarray(f["y"], dtype=np.float32)).reshape(-1)
    n = x.shape[0]
    xs = (x - x.mean(0)) / x.std(0, unbiased=False)
    ym, ysd = y.mean(), y.std(unbiased=False)
    ys = (y - ym) / ysd
    lo, hi = float(ys.min()) - 0.5, float(ys.max()) + 0.5
    B = max(abs(lo), abs(hi))
    nu = Nuisance(x.shape[1], B=B)
    gen = torch.Generator().manual_seed(2)

    def batches():
        while True:
            perm = torch.randperm(n, generator=gen)
            for s in range(0, n - args.batch + 1, args.batch):
                yield perm[s:s + args.batch]

    it = batches()
    cpu0, t0 = time.process_time(), time.perf_counter()
    opt = torch.optim.Adam(nu.parameters(), lr=5e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    for _ in range(args.steps):
        idx = next(it)
        r, g = nu.encode(xs[idx])
        ctx = torch.cat([r + args.noise * torch.randn_like(r), a[idx, None]], 1)
        lp = nu.log_prob(ys[idx] + args.noise * torch.randn(len(idx)), ctx)
        loss = -lp.mean() + F.binary_cross_entropy_with_logits(g, a[idx])
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(nu.parameters(), 5.0)
        opt.step()
        sched.step()
    t1 = time.perf_counter()

    K = args.grid
    grid = torch.linspace(lo, hi, K)
    D = (hi - lo) / (K - 1)
    flows = nn.ModuleList([Target(B=B) for _ in range(4)])  # target0, target1, nobc0, nobc1
    ema = [p.detach().clone() for p in flows.parameters()]
    opt = torch.optim.Adam(flows.parameters(), lr=5e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    for _ in range(args.steps):
        idx = next(it)
        b = len(idx)
        with torch.no_grad():
            r, g = nu.encode(xs[idx])
            pk, w = [], []
            for arm in (0, 1):
                ctx = torch.cat([r, torch.full((b, 1), float(arm))], 1).repeat_interleave(K, 0)
                pk.append(torch.exp(nu.log_prob(grid.repeat(b), ctx)).view(b, K))
                pi = torch.sigmoid(g) if arm else torch.sigmoid(-g)
                w.append(torch.where((a[idx] == arm) & (pi >= args.clip), 1 / pi, torch.zeros_like(pi)))
        loss = 0
        for v in (0, 1):
            for arm in (0, 1):
                q = flows[2 * v + arm]
                wi = w[arm] if v == 0 else torch.zeros(b)
                sel = wi != 0
                lq = q.log_prob(torch.cat([grid, ys[idx][sel]]))
                c = (D * (1 - wi)[:, None] * pk[arm]).sum(0)
                loss = loss - (c * lq[:K]).sum() / b - (wi[sel] * lq[K:]).sum() / b
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(flows.parameters(), 5.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            for e, p in zip(ema, flows.parameters()):
                e.mul_(0.995).add_(0.005 * p)
    t2 = time.perf_counter()
    print(json.dumps({"impl": "torch", "steps": args.steps, "grid": K, "batch": args.batch, "threads": args.threads,
                      "seconds_stage1": t1 - t0, "seconds_stage2": t2 - t1, "seconds": t2 - t0,
                      "cpu_seconds": time.process_time() - cpu0}))


if __name__ == "__main__":
    main()
