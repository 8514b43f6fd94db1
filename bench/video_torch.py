#!/usr/bin/python3
"""bench/video_torch.py - the PyTorch reference of nf's latent video flow (nf video fit, issue 14), for
training speed and for likelihood parity.

What it mirrors (training/model_video.[ch], training/video_codec.h, flows/tarflow.c, nn/transformer.h,
apps/cmd_video.c of the nf working tree of 2026-12-03):

Data: an nf video data file (nf data make video-sprites): /x (n, T*h*w*c) float64 grey levels
0..L-1, frame-major, each frame NHWC, with the attributes video_shape = (T, h, w, c) and levels = L.

Model, per video:
  dequantise  y = (x + u) / L - 1/2, u ~ U(0, 1)^D (nf keys u by (seed, draw, index); here torch's
              generator in training, the same distribution; `check` reproduces nf's keyed draw 0);
  encode      frame by frame, the orthonormal 2-D DCT-II of each block x block block, keeping the
              keep x keep lowest frequencies: here ONE fixed (F, h*w*c) matrix E (a truncated
              orthonormal basis) applied as a matrix multiply, z0_t = E y_t, latent layout of
              video_codec.h: z[(bi*tw + bj)*tc + (u*keep + v)*c + k], tc = keep^2 c, F = th tw tc;
  flow        z0 (n, T*F) = T*th*tw tokens of tc values, frame-major, raster within a frame:
                local_blocks TarFlow blocks (local_layers layers each) on each frame's th*tw tokens
                  alone (tarflow frames=T: n*T sequences), token order reversed in odd blocks;
                global_blocks TarFlow blocks (global_layers layers) over all T*th*tw tokens, causal,
                  never reversed (with --independent: frame-local too);
              the TarFlow block, its transformer (start token, linear in, learned positions, pre-norm
              layers with QK-RMS-normalised causal attention and a GELU MLP of ratio 4, final LN,
              zero-initialised output to (a, mu)), s = 4 tanh(a / 4), z = (x - mu) exp(-s), log-det
              -sum s, are bench/image_torch.py's TarFlowBlock (imported), patch 1;
  score       log p(z0) = log N(z; 0, I) + log-det,  bits/dim = -(log p - T F log L) / (T F ln 2);
  train       batch mean of bits/dim with Gaussian noise of std --noise (0.02) added to z0;
              Adam (0.9, 0.999, 1e-8), lr 1e-3 cosine to 0 over the run, grad-norm clip 50, batches
              of --batch (16) from a fresh permutation every epoch.

Modes:
  python3 bench/video_torch.py speed --data VIDEOS.h5 [model knobs] [--batch 16] [--steps 8]
          [--warmup 2] [--repeats 1] [--threads 1] [--expect-params N]
      one JSON line: steps/s (wall) and CPU seconds (user + system, all threads) per step of the
      fastest timed block of --steps steps after --warmup steps, the parameter count (asserted equal
      to --expect-params when given: nf info's count of the same configuration).
  python3 bench/video_torch.py check --model NF_MODEL.h5 --data VIDEOS.h5 [--videos 8]
      likelihood parity: builds the model from the nf model file's configuration, loads nf's weights
      (/model/params/names and /model/params/value, the flow's parameters by name), dequantises with
      nf's keyed evaluation draw (nf_keyed_uniform(nf_noise_key(seed, 0, i), k), reimplemented with
      numpy uint64) and prints the mean bits/dim of the first --videos videos in float64, to compare
      with `nf video eval NF_MODEL.h5 VIDEOS.h5 --json` on the same videos.

Model knobs as nf video fit: --block 8 --keep 4 --local-blocks 2 --local-layers 1 --global-blocks 1
--global-layers 4 --width 64 --heads 4 --noise 0.02 --independent; --lr 1e-3 --clip 50 --seed 1.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_torch import TarFlowBlock  # noqa: E402  (the same TarFlow block as nf's image flows' mirror)

LN2 = math.log(2.0)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


# ---- data -----------------------------------------------------------------------------------------

def load_videos(path, n=None):
    """(x (n, T*h*w*c) float64 grey levels, levels L, (T, h, w, c))."""
    import h5py
    with h5py.File(path, "r") as f:
        ds = f["/x"]
        T, h, w, c = (int(v) for v in ds.attrs["video_shape"])
        L = int(np.asarray(ds.attrs["levels"]).reshape(-1)[0])
        x = np.asarray(ds[:n] if n else ds[...], dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != T * h * w * c:
        raise SystemExit(f"{path}: /x is {x.shape}, expected (n, {T * h * w * c}) for videos {T}x{h}x{w}x{c}")
    return x, L, (T, h, w, c)


# ---- the codec: a truncated orthonormal block DCT-II as one matrix ---------------------------------

def dct_matrix(h, w, c, block, keep):
    """E (F, h*w*c): latent (bi*tw + bj)*tc + (u*keep + v)*c + k  <-  pixel ((bi*B + m)*w + bj*B + n)*c + k."""
    B = block
    m = np.arange(B)
    C = np.array([np.sqrt((1.0 if u == 0 else 2.0) / B) * np.cos(np.pi * (2 * m + 1) * u / (2 * B))
                  for u in range(keep)])  # (keep, B)
    th, tw, tc = h // B, w // B, keep * keep * c
    E = np.zeros((th * tw * tc, h * w * c))
    for bi in range(th):
        for bj in range(tw):
            for u in range(keep):
                for v in range(keep):
                    basis = np.outer(C[u], C[v])  # (B, B): rows m, columns n
                    for k in range(c):
                        row = (bi * tw + bj) * tc + (u * keep + v) * c + k
                        img = np.zeros((h, w, c))
                        img[bi * B:(bi + 1) * B, bj * B:(bj + 1) * B, k] = basis
                        E[row] = img.reshape(-1)
    return E


# ---- the flow -------------------------------------------------------------------------------------

class VideoFlow(nn.Module):
    def __init__(self, shape, a):
        super().__init__()
        T, h, w, c = shape
        self.T, self.th, self.tw, self.tc = T, h // a.block, w // a.block, a.keep * a.keep * c
        self.F = self.th * self.tw * self.tc
        self.P = self.th * self.tw  # tokens a frame
        self.register_buffer("E", torch.tensor(dct_matrix(h, w, c, a.block, a.keep), dtype=torch.get_default_dtype()))
        self.local = nn.ModuleList([TarFlowBlock(self.P, self.tc, a.width, a.heads, a.local_layers, k % 2 == 1)
                                    for k in range(a.local_blocks)])
        self.independent = a.independent
        Tg = self.P if a.independent else T * self.P
        self.glob = nn.ModuleList([TarFlowBlock(Tg, self.tc, a.width, a.heads, a.global_layers, False)
                                   for _ in range(a.global_blocks)])
        self.global_first = bool(getattr(a, "global_first", False))
        K = int(getattr(a, "context", 0))
        if K > 0 and not a.independent:  # nn/attention.h's window: own frame and the K before it
            i = torch.arange(Tg)
            lo = ((i // self.P - K) * self.P).clamp(min=0)
            seen = (i[None, :] <= i[:, None]) & (i[None, :] >= lo[:, None])
            for blk in self.glob:
                blk.mask.copy_(torch.where(seen, 0.0, float("-inf")))

    def encode(self, y):
        """y (n, T*h*w*c) -> z0 (n, T*F)."""
        n = y.shape[0]
        return (y.reshape(n * self.T, -1) @ self.E.T).reshape(n, self.T * self.F)

    def forward(self, z0):
        """z0 (n, T*F) -> z (n, T*F), log-det (n)."""
        n = z0.shape[0]
        ld = torch.zeros(n, dtype=z0.dtype)
        z = z0
        for part in (("global", "local") if self.global_first else ("local", "global")):
            if part == "local" or self.independent:
                z = z.reshape(n * self.T, self.P, self.tc)  # each frame its own sequence
                for blk in (self.local if part == "local" else self.glob):
                    z, l = blk(z)
                    ld = ld + l.view(n, self.T).sum(1)
            else:
                z = z.reshape(n, self.T * self.P, self.tc)  # all frames' tokens, frame-major
                for blk in self.glob:
                    z, l = blk(z)
                    ld = ld + l
        return z.reshape(n, -1), ld


def bits_per_dim(model, z0, L):
    z, ld = model(z0)
    Ld = z.shape[1]
    logp = -0.5 * (z * z).sum(1) - Ld * HALF_LOG_2PI + ld
    return -(logp - Ld * math.log(L)) / (Ld * LN2)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ---- training -------------------------------------------------------------------------------------

class Trainer:
    def __init__(self, model, X, L, a, gen, total):
        self.model, self.X, self.L, self.a, self.gen = model, X, L, a, gen
        self.opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
        self.total, self.t = max(total, 1), 0
        self.perm, self.pos = None, 0

    def batch(self):
        n = self.X.shape[0]
        if self.perm is None or self.pos >= n:
            self.perm, self.pos = torch.randperm(n, generator=self.gen), 0
        b = min(self.a.batch, n - self.pos)
        idx = self.perm[self.pos:self.pos + b]
        self.pos += b
        return self.X[idx]

    def step(self):
        lr = self.a.lr * 0.5 * (1 + math.cos(math.pi * min(self.t, self.total) / self.total))
        for g in self.opt.param_groups:
            g["lr"] = lr
        x = self.batch()
        y = (x + torch.rand(x.shape, generator=self.gen)) / self.L - 0.5
        z0 = self.model.encode(y)
        if self.a.noise > 0:
            z0 = z0 + self.a.noise * torch.randn(z0.shape, generator=self.gen)
        self.opt.zero_grad(set_to_none=True)
        loss = bits_per_dim(self.model, z0, self.L).mean()
        loss.backward()
        if self.a.clip > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.a.clip)
        self.opt.step()
        self.t += 1
        return float(loss)


def cmd_speed(a):
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    # The initial weights come from torch's global generator and the batches and noise from `gen`:
    # seeded alike, the two Mersenne twisters would give one stream, the weights the noise's own
    # numbers (the artefact bench/image_torch.py had, bench/RESULTS.md); the weights' seed is another.
    torch.manual_seed(a.seed + 100003 if a.init_seed is None else a.init_seed)
    x, L, shape = load_videos(a.data)
    X = torch.tensor(x, dtype=torch.float32)
    model = VideoFlow(shape, a)
    params = count_params(model)
    if a.expect_params and params != a.expect_params:
        raise SystemExit(f"video_torch: {params} parameters, nf has {a.expect_params}: the models differ")
    gen = torch.Generator().manual_seed(a.seed)
    tr = Trainer(model, X, L, a, gen, a.warmup + a.repeats * a.steps)
    first = tr.step()
    for _ in range(max(a.warmup - 1, 0)):
        tr.step()
    best, best_cpu, loss = math.inf, math.inf, first
    for _ in range(a.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(a.steps):
            loss = tr.step()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    print(json.dumps({"impl": "torch", "bench": "video_train", "torch": torch.__version__,
                      "python": sys.executable, "shape": list(shape), "levels": L, "params": params,
                      "block": a.block, "keep": a.keep, "local": [a.local_blocks, a.local_layers],
                      "global": [a.global_blocks, a.global_layers], "width": a.width, "heads": a.heads,
                      "noise": a.noise, "batch": a.batch, "threads": a.threads, "steps": a.steps,
                      "repeats": a.repeats, "steps_per_s": a.steps / best, "cpu_s_per_step": best_cpu / a.steps,
                      "loss_first": first, "loss_last": loss, "data": a.data}))


# ---- likelihood parity with an nf model file ------------------------------------------------------

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x):
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9e3779b97f4a7c15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return x ^ (x >> np.uint64(31))


def noise_key(seed, draw, idx):
    with np.errstate(over="ignore"):
        a = np.uint64(seed) * np.uint64(0x632be59bd9b4e019)
        b = mix64(np.uint64(draw) * np.uint64(0xd1b54a32d192ed03) + np.uint64(0x5851f42d4c957f2d))
        c = mix64(np.uint64(idx) + np.uint64(0x9e3779b97f4a7c15))
    return mix64(a ^ b ^ c)


def keyed_uniform(key, k):
    with np.errstate(over="ignore"):
        r = mix64(np.uint64(key) ^ mix64(np.asarray(k, dtype=np.uint64) + np.uint64(0x9e3779b97f4a7c15)))
    return ((r >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


def load_nf(path):
    """(config of /model/video, and /model/params: names, values, sizes, offsets)."""
    import h5py
    with h5py.File(path, "r") as f:
        cfg = {k: (v.item() if hasattr(v, "item") else v) for k, v in f["/model/video"].attrs.items()}
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in np.asarray(f["/model/params/names"][...]).reshape(-1)]
        value = np.asarray(f["/model/params/value"][...], dtype=np.float64).reshape(-1)
        sizes = np.asarray(f["/model/params/sizes"][...]).reshape(-1).astype(np.int64)
        offsets = np.asarray(f["/model/params/offsets"][...]).reshape(-1).astype(np.int64)
    return cfg, names, value, sizes, offsets


def torch_name(rest):
    """nf's name inside one TarFlow block's transformer -> the torch TarFlowBlock's parameter name."""
    parts = rest.split(".")
    m = {"start": "start", "pos": "pos", "in": "inp", "ln_f": "norm", "out": "out"}
    ln = {"gamma": "weight", "beta": "bias"}
    if parts[0] in ("start", "pos"):
        return parts[0]
    if parts[0] in ("in", "out"):
        return f"{m[parts[0]]}.{parts[1]}"
    if parts[0] == "ln_f":
        return f"norm.{ln[parts[1]]}"
    if parts[0][0] == "b" and parts[0][1:].isdigit():
        l, sub = int(parts[0][1:]), parts[1:]
        if sub[0] in ("ln1", "ln2"):
            return f"layers.{l}.{sub[0]}.{ln[sub[1]]}"
        return f"layers.{l}." + ".".join(sub)
    raise KeyError(rest)


def cmd_check(a):
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(a.threads)
    cfg, names, value, sizes, offsets = load_nf(a.model)
    for k in ("block", "keep", "local_blocks", "local_layers", "global_blocks", "global_layers", "width", "heads"):
        setattr(a, k, int(cfg[k]))
    a.independent = bool(cfg.get("independent", 0))
    a.global_first = bool(cfg.get("global_first", 0))
    a.context = int(cfg.get("context", 0))
    shape = tuple(int(cfg[k]) for k in ("frames", "h", "w", "c"))
    model = VideoFlow(shape, a)
    blocks = list(model.glob) + list(model.local) if a.global_first else list(model.local) + list(model.glob)
    # nf's names: "<block prefix>.<transformer name>" (b0.tarflow.tf.b1.attn.qkv.weight); the blocks'
    # prefixes in the order of the flow
    prefixes, loaded = [], 0
    for i, n in enumerate(names):
        head, _, rest = n.partition(".")
        while rest and not (rest.split(".")[0] in ("start", "pos", "in", "ln_f", "out") or
                            (rest.split(".")[0][:1] == "b" and rest.split(".")[0][1:].isdigit())):
            h2, _, rest = rest.partition(".")
            head = head + "." + h2
        if not rest:
            raise SystemExit(f"video_torch check: cannot place nf parameter {n}")
        if head not in prefixes:
            prefixes.append(head)
        bi = prefixes.index(head)
        tn = torch_name(rest)
        p = dict(blocks[bi].named_parameters())[tn]
        v = value[offsets[i]:offsets[i] + sizes[i]]
        if v.size != p.numel():
            raise SystemExit(f"video_torch check: {n} has {v.size} values, torch {tn} {p.numel()}")
        with torch.no_grad():
            p.copy_(torch.tensor(v).view_as(p))
        loaded += v.size
    params = count_params(model)
    if loaded != params or len(prefixes) != len(blocks):
        raise SystemExit(f"video_torch check: loaded {loaded} values into {len(prefixes)} blocks; torch has {params} in {len(blocks)}")
    x, L, shape_d = load_videos(a.data, a.videos)
    if shape_d != shape:
        raise SystemExit(f"{a.data}: videos {shape_d}, model {shape}")
    D = x.shape[1]
    seed = int(cfg.get("seed", 1))
    u = np.stack([keyed_uniform(noise_key(seed, 0, i), np.arange(D, dtype=np.uint64)) for i in range(x.shape[0])])
    y = torch.tensor((x + u) / L - 0.5)
    model.eval()
    with torch.no_grad():
        bpd = bits_per_dim(model, model.encode(y), L)
        out = model.glob[-1].out.weight.abs().max().item()
    print(json.dumps({"check": "video_bpd", "model": a.model, "data": a.data, "videos": int(x.shape[0]),
                      "params": params, "nf_blocks": prefixes, "max_abs_out_weight_last_block": out,
                      "bits_per_dim": float(bpd.mean()), "torch": torch.__version__}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["speed", "check"])
    p.add_argument("--data", required=True)
    p.add_argument("--model")
    p.add_argument("--videos", type=int, default=8)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--keep", type=int, default=4)
    p.add_argument("--local-blocks", type=int, default=2)
    p.add_argument("--local-layers", type=int, default=1)
    p.add_argument("--global-blocks", type=int, default=1)
    p.add_argument("--global-layers", type=int, default=4)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--independent", action="store_true")
    p.add_argument("--context", type=int, default=1, help="earlier frames each global attention layer reads (0: all), as nf video fit")
    p.add_argument("--global-first", action="store_true")
    p.add_argument("--noise", type=float, default=0.02)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip", type=float, default=50.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--init-seed", type=int, help="seed of the initial weights (default --seed + 100003: not the "
                   "seed of the batches and noise)")
    p.add_argument("--expect-params", type=int, default=0)
    a = p.parse_args()
    if a.mode == "check" and not a.model:
        p.error("check: --model NF_MODEL.h5 is required")
    return {"speed": cmd_speed, "check": cmd_check}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
