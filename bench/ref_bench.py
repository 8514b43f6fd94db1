"""bench/ref_bench.py - times the PyTorch reference (bench/ref_flows.py); prints one JSON object a line.

  ref_bench.py train CONFIG --steps N [--warmup W] [--repeats R] [--threads T] [--max-seconds S]
      optimizer steps per second: forward + backward + Adam (lr 1e-3) on a batch of the config's size
      (N lowered so the timed blocks take about S seconds when a step is very slow).
  ref_bench.py sample CONFIG [--n N] [--repeats R] [--threads T] [--dim D]
      samples per second (no log-density), sequential inversion for MAF (D passes per layer).
  ref_bench.py fit --train TRAIN.h5 --test TEST.h5 --steps N [--batch 512] [--threads T]
      the quality run: nsf-coupling (10 layers, 8 bins, tail 5, hidden 128, 2 blocks) after a fixed
      standardisation, Adam 1e-3 with a cosine decay to 0 over N steps, gradient-norm clip 5, a fresh
      permutation of the training set every epoch; then the test mean log-likelihood against /logp_true.

Run it with /usr/bin/python3 (Debian's python3-torch).  Set OPENBLAS_NUM_THREADS in the environment;
--threads is torch.set_num_threads.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_flows  # noqa: E402


def emit(obj):
    obj.update({"impl": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")})
    print(json.dumps(obj), flush=True)


def train(a):
    flow = ref_flows.build(a.config, seed=a.seed)
    _, D, batch = ref_flows.CONFIGS[a.config]
    batch = a.batch or batch
    g = torch.Generator().manual_seed(a.seed)
    data = [torch.randn(batch, D, generator=g) for _ in range(8)]
    opt = torch.optim.Adam(flow.parameters(), lr=1e-3)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = -flow.log_prob(data[i % len(data)]).mean()
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    t1 = time.perf_counter()
    step(0)
    t1 = time.perf_counter() - t1
    if t1 * a.steps * a.repeats > a.max_seconds:  # a busy machine: cap the timed part
        a.steps = max(3, int(a.max_seconds / (t1 * a.repeats)))
    best = best_cpu = math.inf  # wall time of the fastest block; the least process CPU time
    for _ in range(a.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(a.steps):
            loss = step(i)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    emit({"bench": "train", "config": a.config, "dim": D, "batch": batch, "steps": a.steps,
          "repeats": a.repeats, "seconds": best, "cpu_seconds": best_cpu, "steps_per_sec": a.steps / best,
          "params": sum(p.numel() for p in flow.parameters()),
          "dense_flops_per_step": ref_flows.dense_flops_per_step(flow, batch),
          "loss": float(loss)})


def sample(a):
    flow = ref_flows.build(a.config, dim=a.dim or None, seed=a.seed)
    D = a.dim or ref_flows.CONFIGS[a.config][1]
    flow.eval()
    flow.sample(a.n)  # warm-up
    best = best_cpu = math.inf
    for _ in range(a.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        flow.sample(a.n)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    emit({"bench": "sample", "config": a.config, "dim": D, "n": a.n, "seconds": best, "cpu_seconds": best_cpu,
          "samples_per_sec": a.n / best})


def read_h5(path):
    import h5py
    with h5py.File(path, "r") as f:
        x = torch.from_numpy(f["x"][...].astype("float32"))
        lp = torch.from_numpy(f["logp_true"][...].astype("float64")) if "logp_true" in f else None
    if x.dim() == 1:
        x = x[:, None]
    return x, lp


def fit(a):
    x, _ = read_h5(a.train)
    xt, lpt = read_h5(a.test)
    D = x.shape[1]
    torch.manual_seed(a.seed)
    layers = ref_flows.nsf_coupling(D, 10, 128, 2, 8, 5.0)
    flow = ref_flows.Flow([ref_flows.Standardize(x)] + layers, D)
    opt = torch.optim.Adam(flow.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, a.steps) / a.steps)))
    g = torch.Generator().manual_seed(a.seed)
    n, batch = x.shape[0], min(a.batch or 512, x.shape[0])
    perm, pos = torch.randperm(n, generator=g), 0
    t0 = time.perf_counter()
    for step in range(a.steps):
        if pos + batch > n:
            perm, pos = torch.randperm(n, generator=g), 0
        xb = x[perm[pos:pos + batch]]
        pos += batch
        opt.zero_grad(set_to_none=True)
        loss = -flow.log_prob(xb).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(flow.parameters(), 5.0)
        opt.step()
        sched.step()
    seconds = time.perf_counter() - t0
    flow.eval()
    with torch.no_grad():
        lp = torch.cat([flow.log_prob(xt[i:i + 4096]).double() for i in range(0, xt.shape[0], 4096)])
    out = {"bench": "quality", "name": a.name or os.path.basename(a.train), "steps": a.steps, "seed": a.seed, "batch": batch,
           "n_train": n, "n_test": xt.shape[0], "dim": D, "seconds": seconds,
           "mean_log_prob": float(lp.mean()), "stderr": float(lp.std() / math.sqrt(lp.numel()))}
    if lpt is not None:
        gap = lpt - lp
        out.update({"true_mean_log_prob": float(lpt.mean()), "kl_gap": float(gap.mean()),
                    "kl_gap_stderr": float(gap.std() / math.sqrt(gap.numel()))})
    emit(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["train", "sample", "fit"])
    p.add_argument("config", nargs="?", default="maf")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--dim", type=int, default=0)
    p.add_argument("--max-seconds", type=float, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--train")
    p.add_argument("--test")
    p.add_argument("--name")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    {"train": train, "sample": sample, "fit": fit}[a.mode](a)


if __name__ == "__main__":
    main()
