#!/usr/bin/python3
"""bench/tpp_torch.py - the PyTorch reference of nf's point-process model (nf tpp fit), for speed.

The model of training/model_tpp.c with the lognormmix decoder (distributions/gmm.c, context=linear),
written the way the authors' code (shchur/ifl-tpp, dpp/models) writes it, with padding and masks:

  inter-event times of sequence b on [t_start, t_end]: tau_1..tau_N (tau_1 from t_start) and the
  open last interval tau_{N+1} = t_end - t_N, padded with zeros to the batch's longest sequence;
  features x_i = (log(tau_i + 1e-8) - shift) / scale, shift and scale the mean and standard
  deviation of the training log inter-event times;
  contexts: c_1 = h0 (a learned vector, also the GRU's initial state), c_{i+1} = GRU(x_i, c_i);
  theta_i = Linear(c_i) -> K logits a, K means mu, K log-scales s (no clamp: nf clamps none);
  y = (log tau - shift) / scale,
  log p(tau_i) = lse_k(log_softmax(a)_k + log N(y; mu_k, e^{2 s_k})) - log scale - log tau_i,
  log S(tau_{N+1}) = lse_k(log_softmax(a)_k + log Phi(-(y - mu_k) e^{-s_k})), only for the B last
  intervals (the authors evaluate it at every position and gather one per row; nf computes only those);
  loss = -(sum_b sum_{i <= N_b} log p(tau_i) + log S(tau_{N_b+1})) / (events in the batch), Adam,
  gradient-norm clip 5 (nf's defaults: lr 5e-3, clip 5; the cosine schedule costs nothing and is left out).

  python3 bench/tpp_torch.py train --data SEQ.npy [--batch 64] [--hidden 64] [--components 64]
          [--steps 10] [--warmup 2] [--repeats 3] [--threads 1] [--seed 1]

prints one JSON line: the fastest of the timed blocks as steps per second (wall clock), the least CPU
time (user + system, all threads) per step of a block, the events per step, the loss before and
after.  SEQ.npy holds one row of increasing arrival times per sequence (the shared sets); t_start = 0
and t_end = each sequence's last event, as `nf tpp import` does by default.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def log_ndtr(x):
    if hasattr(torch.special, "log_ndtr"):
        return torch.special.log_ndtr(x)
    return torch.log(0.5 * torch.special.erfc(-x / math.sqrt(2.0)))


class LogNormMixTPP(nn.Module):
    def __init__(self, hidden, components, shift, scale):
        super().__init__()
        self.K, self.shift, self.scale = components, shift, scale
        self.h0 = nn.Parameter(torch.zeros(hidden))
        self.rnn = nn.GRU(input_size=1, hidden_size=hidden, batch_first=True)
        self.linear = nn.Linear(hidden, 3 * components)

    def mixture(self, ctx):
        raw = self.linear(ctx)
        a, mu, s = raw[..., : self.K], raw[..., self.K : 2 * self.K], raw[..., 2 * self.K :]
        return torch.log_softmax(a, dim=-1), mu, s

    def nll_per_event(self, tau, mask, last):
        """tau (B, L+1) padded inter-event times, mask (B, L+1) 1 on events, last (B) index of each open
        interval.  Returns the loss and the number of events."""
        B = tau.shape[0]
        x = ((torch.log(tau + 1e-8) - self.shift) / self.scale).unsqueeze(-1)
        h0 = self.h0[None, None, :].expand(1, B, -1).contiguous()
        out, _ = self.rnn(x, h0)
        ctx = torch.cat([self.h0[None, None, :].expand(B, 1, -1), out[:, :-1, :]], dim=1)  # (B, L+1, H)
        t = tau.clamp(min=1e-10)
        y = ((torch.log(t) - self.shift) / self.scale).unsqueeze(-1)
        lpi, mu, s = self.mixture(ctx)
        u = (y - mu) * torch.exp(-s)
        comp = lpi - 0.5 * u * u - s - 0.5 * math.log(2 * math.pi)
        logp = torch.logsumexp(comp, dim=-1) - math.log(self.scale) - torch.log(t)
        events = mask.sum()
        total = (logp * mask).sum()
        # survival of the open last interval, only at the B last positions
        idx = last.view(B, 1, 1)
        cl = torch.gather(ctx, 1, idx.expand(B, 1, ctx.shape[-1]))
        yl = torch.gather(y, 1, idx)
        lpl, mul, sl = self.mixture(cl)
        total = total + torch.logsumexp(lpl + log_ndtr(-(yl - mul) * torch.exp(-sl)), dim=-1).sum()
        return -total / events, events


def load_padded(path):
    """Arrival times (rows of increasing times) as padded inter-event times with the open interval."""
    arr = np.load(path, allow_pickle=False)
    seqs = [np.asarray(r, dtype=np.float64) for r in arr]
    L = max(len(r) for r in seqs)
    tau = np.zeros((len(seqs), L + 1))
    mask = np.zeros((len(seqs), L + 1))
    last = np.zeros(len(seqs), dtype=np.int64)
    for b, r in enumerate(seqs):
        d = np.diff(np.concatenate([[0.0], r, [r[-1]]]))  # t_start 0, t_end the last event
        tau[b, : len(d)] = d
        mask[b, : len(r)] = 1
        last[b] = len(r)
    lt = np.log(np.concatenate([np.diff(np.concatenate([[0.0], r])) for r in seqs]))
    lt = lt[np.isfinite(lt)]
    return tau, mask, last, float(lt.mean()), float(lt.std())


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tau, mask, last, shift, scale = load_padded(args.data)
    n = tau.shape[0]
    model = LogNormMixTPP(args.hidden, args.components, shift, scale)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    T, M, LAST = torch.tensor(tau, dtype=torch.float32), torch.tensor(mask, dtype=torch.float32), torch.tensor(last)

    def batch():
        idx = torch.tensor(rng.choice(n, size=args.batch, replace=args.batch > n))
        b = T[idx]
        # trim the padding to the batch's longest sequence (the authors pad per batch)
        Lb = int(LAST[idx].max()) + 1
        return b[:, :Lb], M[idx][:, :Lb], LAST[idx]

    def step():
        tb, mb, lb = batch()
        opt.zero_grad()
        loss, events = model.nll_per_event(tb, mb, lb)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return float(loss), int(events)

    first, events = step()
    for _ in range(max(args.warmup - 1, 0)):
        step()
    best, best_cpu = math.inf, math.inf
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            loss, events = step()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    print(json.dumps({"impl": "torch", "bench": "tpp_train", "torch": torch.__version__, "threads": args.threads,
                      "batch": args.batch, "hidden": args.hidden, "components": args.components,
                      "events_per_step": events, "steps": args.steps, "repeats": args.repeats,
                      "steps_per_s": args.steps / best, "cpu_s_per_step": best_cpu / args.steps,
                      "loss_first": first, "loss_last": loss,
                      "data": args.data}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["train"])
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--components", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=1)
    train(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
