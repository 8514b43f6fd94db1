"""bench/libs_bench.py - times the flow libraries PyTorch users run (zuko, nflows) on nf's benchmark
configurations; prints one JSON object a line, as bench/ref_bench.py does for the hand-written reference.

  libs_bench.py train LIB CONFIG [--steps N] [--warmup W] [--repeats R] [--threads T]
      optimizer steps per second: forward + backward + Adam (lr 1e-3) on a batch of the config's size.
  libs_bench.py sample LIB CONFIG [--n N] [--repeats R] [--threads T]
      samples per second (no log-density), after --pretrain steps of training.
  LIB: zuko | nflows.  CONFIG: maf | realnvp | nsf | maf-small (bench/bench_common.h).

Each configuration is built from the library's own classes the way its documentation shows, with
nf's sizes (layers, hidden widths, bins, tail bound, dimension, batch); where a library offers no
exact equivalent the nearest one is used and its parameter count is printed beside the time:

  maf        5 MADE layers of 2 x 256 (natural / reversed orders), affine, D = 8, batch 512.
             zuko.flows.MAF(transforms=5, hidden_features=(256, 256));
             nflows MaskedAutoregressiveFlow(hidden 256, 5 layers, 1 feed-forward block: 2 hidden layers).
  realnvp    8 affine couplings (alternating masks), conditioner 2 x 256, D = 64, batch 256.
             zuko MAF(passes=2): its coupling form, a masked MLP over all 64 inputs;
             nflows AffineCouplingTransform with nflows.nn.nets.MLP([256, 256]) and alternating masks.
  nsf        10 rational-quadratic spline couplings, 8 bins, tail bound 5, conditioner a residual net of
             2 blocks of 128, LU-linear layers between; D = 8, batch 512.
             nflows PiecewiseRationalQuadraticCouplingTransform (ResidualNet 2 x 128, linear tails, bound 5)
             with LULinear between, which is the design nf's nsf-coupling follows;
             zuko NSF(passes=2, bins=8): its coupling spline on [-5, 5], a masked MLP of 5 x 128 (the
             six products of the residual net), no LU layers (zuko has none in NSF).
  maf-small  as maf with 2 x 64, D = 2, batch 256.

Run it with the python3 that has torch, zuko and nflows (`pip install torch zuko nflows`).  --threads is
torch.set_num_threads (PyPI's torch does its products in its own kernels, not OpenBLAS).
"""
import argparse
import importlib.metadata
import json
import math
import time
import warnings

import torch

warnings.filterwarnings("ignore", category=UserWarning)  # nflows' LU inverse: torch's deprecation notice

# name: (dim, batch) - mirrors bench/bench_common.h
CONFIGS = {"maf": (8, 512), "realnvp": (64, 256), "nsf": (8, 512), "maf-small": (2, 256)}


def build_zuko(config, D):
    import zuko
    if config in ("maf", "maf-small"):
        h = 256 if config == "maf" else 64
        return zuko.flows.MAF(D, transforms=5, hidden_features=(h, h))
    if config == "realnvp":
        return zuko.flows.MAF(D, transforms=8, passes=2, hidden_features=(256, 256))
    return zuko.flows.NSF(D, transforms=10, bins=8, passes=2, hidden_features=(128,) * 5)


class _Conditioner(torch.nn.Module):
    """nflows calls a coupling's conditioner with (inputs, context); its MLP takes the inputs alone."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, context=None):
        return self.net(x)


def build_nflows(config, D):
    from nflows.distributions.normal import StandardNormal
    from nflows.flows.autoregressive import MaskedAutoregressiveFlow
    from nflows.flows.base import Flow
    from nflows.nn.nets import MLP, ResidualNet
    from nflows.transforms import (AffineCouplingTransform, CompositeTransform, LULinear,
                                   PiecewiseRationalQuadraticCouplingTransform)
    from nflows.utils.torchutils import create_alternating_binary_mask, create_mid_split_binary_mask
    if config in ("maf", "maf-small"):
        h = 256 if config == "maf" else 64
        return MaskedAutoregressiveFlow(D, h, num_layers=5, num_blocks_per_layer=1, use_residual_blocks=False)
    layers = []
    if config == "realnvp":
        for i in range(8):
            layers.append(AffineCouplingTransform(create_alternating_binary_mask(D, even=(i % 2 == 0)),
                                                  lambda n_in, n_out: _Conditioner(MLP((n_in,), (n_out,), [256, 256]))))
    else:
        for i in range(10):
            if i:
                layers.append(LULinear(D))
            mask = create_mid_split_binary_mask(D)
            layers.append(PiecewiseRationalQuadraticCouplingTransform(
                -mask if i % 2 else mask,
                lambda n_in, n_out: ResidualNet(n_in, n_out, hidden_features=128, num_blocks=2),
                num_bins=8, tails="linear", tail_bound=5.0))
    return Flow(CompositeTransform(layers), StandardNormal([D]))


def build(lib, config, seed):
    torch.manual_seed(seed)
    D, batch = CONFIGS[config]
    flow = build_zuko(config, D) if lib == "zuko" else build_nflows(config, D)
    if lib == "zuko":
        log_prob = lambda x: flow().log_prob(x)  # noqa: E731 - zuko builds the distribution per call
        sample = lambda n: flow().sample((n,))  # noqa: E731
    else:
        log_prob, sample = flow.log_prob, flow.sample
    return flow, log_prob, sample, D, batch


def emit(a, obj, flow):
    obj.update({"impl": a.lib, "version": importlib.metadata.version(a.lib), "torch": torch.__version__,
                "threads": torch.get_num_threads(), "config": a.config,
                "params": sum(p.numel() for p in flow.parameters())})
    print(json.dumps(obj), flush=True)


def timed(fn, repeats):
    """Fastest wall and least CPU time of repeats calls of fn."""
    best = best_cpu = math.inf
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def trainer(log_prob, flow, D, batch, seed):
    g = torch.Generator().manual_seed(seed)
    data = [torch.randn(batch, D, generator=g) for _ in range(8)]
    opt = torch.optim.Adam(flow.parameters(), lr=1e-3)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = -log_prob(data[i % len(data)]).mean()
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def train(a):
    flow, log_prob, _, D, batch = build(a.lib, a.config, a.seed)
    step = trainer(log_prob, flow, D, batch, a.seed)
    for i in range(a.warmup):
        step(i)

    def block():
        for i in range(a.steps):
            loss = step(i)
        return loss
    best, best_cpu, loss = timed(block, a.repeats)
    emit(a, {"bench": "train", "dim": D, "batch": batch, "steps": a.steps, "repeats": a.repeats,
             "seconds": best, "cpu_seconds": best_cpu, "steps_per_sec": a.steps / best, "loss": loss}, flow)


def sample(a):
    flow, log_prob, draw, D, batch = build(a.lib, a.config, a.seed)
    step = trainer(log_prob, flow, D, batch, a.seed)
    for i in range(a.pretrain):  # a fresh flow is near the identity, which says little about inversion
        step(i)
    flow.eval()
    with torch.no_grad():
        draw(a.n)  # warm-up
        best, best_cpu, x = timed(lambda: draw(a.n), a.repeats)
    emit(a, {"bench": "sample", "dim": D, "n": a.n, "seconds": best, "cpu_seconds": best_cpu,
             "samples_per_sec": a.n / best, "finite": bool(torch.isfinite(x).all())}, flow)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["train", "sample"])
    p.add_argument("lib", choices=["zuko", "nflows"])
    p.add_argument("config", choices=sorted(CONFIGS))
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--pretrain", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    train(a) if a.mode == "train" else sample(a)


if __name__ == "__main__":
    main()
