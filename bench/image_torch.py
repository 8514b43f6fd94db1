#!/usr/bin/python3
"""bench/image_torch.py - the PyTorch reference of nf's image flows (nf image fit), for speed and quality.

What it mirrors (nf at the time of writing, issue 13; see "Status" at the end for what was read):

Data: an nf image data file (nf data make digits|shapes, nf data import): /x (n, h*w*c) float64 grey
levels 0..L-1 in NHWC order, with the attributes image_shape = (h, w, c) and levels = L on /x.  The
images are turned into NCHW tensors (PyTorch's layout); every map below is the same map nf computes
on NHWC, so the densities, bits/dim and the costs are those of the same model.

Dequantisation and loss (training/model_image.c):
    y = (x + u) / L - 1/2,  u ~ U(0, 1)^D           (one fresh u per image and step in training)
    bits/dim = -(log p(y) - D log L) / (D ln 2),  log p(y) = log N(z(y); 0, I) + log|det dz/dy|
training minimises the batch mean of bits/dim; with --noise s (TarFlow's noise augmentation, default
0.05 for tarflow as nf) the flow sees y + s * eps in training, evaluation stays on the clean y.

Architectures (nf_image_spec in training/model_image.c):
  glow     per scale: squeeze, K x (actnorm2d, conv1x1, coupling2d mask=channel), then split (not
           after the last scale).  K = --depth (4), --scales (2).
  realnvp  per scale: 3 x (actnorm2d, coupling2d checkerboard, flip = k % 2), squeeze,
           3 x (actnorm2d, coupling2d channel, flip = k % 2), split; at the last scale
           4 x (actnorm2d, coupling2d checkerboard).
  tarflow  --blocks x TarFlow block (patch, width, heads, layers), token order reversed in odd blocks.
The pieces:
  squeeze     (h, w, c) -> (h/2, w/2, 4c), new channel (di*2 + dj)*c + ch (NHWC reshape order).
  split       keeps the first c/2 channels, the last c/2 go to the N(0, I) base.
  actnorm2d   per-channel y = (x - b) e^s, log-det h*w*sum s; data-dependent start from the first
              (up to) 512 training images (b = mean, s = -1/2 log(var + 1e-6) over images and pixels),
              as nf's init_data, done once before training.
  conv1x1     invertible 1x1 convolution in LU form W = P L (U + diag(sign * e^{log|s|})), P fixed,
              started from a random rotation; log-det h*w*sum log|s|.
  coupling2d  affine coupling (flows/coupling2d.c): mask=channel: the first floor(c/2) channels
              condition the rest (flip swaps); mask=checkerboard: pixels with (i + j) % 2 == flip
              condition, the network reads the image with the transformed pixels zeroed.  Net
              (nn/convnet.h): conv kxk(cin -> hidden) relu conv 1x1(hidden -> hidden) relu
              conv kxk(hidden -> 2 ct), k = 3, 'same' zero padding, last layer zero-initialised,
              output channel 2q the raw log-scale r, 2q+1 the shift t of transformed channel q;
              s = 3 tanh(r / 3) (nf's default scale=tanh, clamp 3), y_t = x_t e^s + t, log-det sum s.
              Convolutions initialised as torch's (U(+-1/sqrt(fan_in)) weights and biases), as nf's.
  TarFlow     (Zhai et al. 2024; flows/tarflow.c with nn/transformer.h and nn/attention.h): the image
              as T = (h/p)(w/p) tokens of din = p*p*c values (raster order, entry (di, dj, k) of a patch
              at (di*p + dj)*c + k); a block reads the tokens (reversed when reverse=1, the odd blocks),
              and its causal transformer maps u = [s, x_0, ..., x_{T-2}] (s a learned start token of
              width din, 0.02 N(0, 1)) by a linear din -> width plus learned positional embeddings
              (0.02 N(0, 1)) through `layers` pre-norm layers (x += attn(LN(x)); x += MLP(LN(x)), MLP
              width -> 4 width -> width with exact GELU; LN eps 1e-5), a final LN and a
              zero-initialised linear width -> 2 din giving (a_t, mu_t) (the first din columns a, the
              next mu), so output t sees tokens < t only;
                s_t = 4 tanh(a_t / 4) (tarflow.c's soft clamp, clamp=4),  z_t = (x_t - mu_t) exp(-s_t),
                log-det -sum s.
              Attention (nn/attention.h): one linear d -> 3d for q, k, v, H heads, QK RMS norm per head
              with learned gains shared by the heads (eps 1e-6, the default qk=1), causal
              softmax(q k^T / sqrt(dh)), output linear d -> d.  Linears initialised as torch's.
Optimiser (nf image fit's defaults): Adam (0.9, 0.999, eps 1e-8), lr 1e-3 with a cosine schedule to 0
over --steps, no warm-up; gradient-norm clip 50; batches of --batch images from a fresh permutation of
the training images every epoch (the last batch of an epoch is the remainder, as nf's trainer).

Modes:
  python3 bench/image_torch.py train --data IMAGES.h5 [--arch glow|realnvp|tarflow] [model knobs]
          [--batch 64] [--steps 10] [--warmup 2] [--repeats 3] [--threads 1] [--seed 1]
      speed: one JSON line with the fastest timed block as steps/s (wall), the least CPU seconds
      (user + system, all threads) per step of a block, the loss (bits/dim) before and after.
  python3 bench/image_torch.py fit --data TRAIN.h5 --test TEST.h5 [--arch ...] [knobs] --steps S
      quality: S steps on all of TRAIN.h5 (nf image fit --val-frac 0 trains on all of it too), then
      held-out bits/dim of TEST.h5 with one uniform dequantisation draw per image; one JSON line.
  python3 bench/image_torch.py check [--data IMAGES.h5]
      correctness: log-det of every architecture against the brute-force Jacobian on a tiny image
      (random, non-zero couplings and outputs), float64; with --data also the bits/dim of the data
      under an identity TarFlow (zero-initialised outputs) against the closed form.
  python3 bench/image_torch.py init-bpd --data IMAGES.h5 --arch ... [knobs]
      bits/dim of the data under the untrained model (after the actnorm start), to compare with
      nf image eval of a model fitted for one step at lr ~0.

Model knobs, as nf image fit --help: --scales 2 --depth 4 --hidden 64 (glow, realnvp); --patch 2
--width 64 --heads 4 --layers 2 --blocks 4 (tarflow); --noise S [0; tarflow 0.05]; --lr 1e-3
--clip 50.  Class conditioning (--conditional, label dropout) is not implemented here.

Status: mirrors the nf working tree of 2026-12-03 (nf 0.1.0, uncommitted issue-13 files, re-read at
16:35 UTC): training/model_image.[ch] (dequantisation, bits/dim, init_data on <= 512 images; nf draws
its training u and noise from a hash of (seed, draw count, image index), here from torch's generator:
the same distributions), training/image_config.c (nf_image_spec, the defaults),
flows/squeeze.c, flows/split.c, flows/actnorm2d.c, flows/conv1x1.c (+ lu_factor), flows/coupling2d.c,
nn/conv2d.c, nn/convnet.c, nn/attention.[ch], nn/transformer.h, flows/tarflow.c, apps/cmd_image.c
(defaults of nf image fit).  Checked: parameter counts equal nf's for glow (75,728), realnvp (142,096)
and tarflow (408,112) on 8x8x1 digits with the defaults; bits/dim at the start equals nf's to 1e-3
(bench/image_targets.sh, IMG_CHECK).  Not mirrored: class conditioning and label dropout
(--conditional), sampling, Jacobi inversion, the likelihood classifier, reverse alignment.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LN2 = math.log(2.0)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


# ---- data ---------------------------------------------------------------------------------------

def load_images(path):
    """(x (n, c, h, w) float64 numpy array of grey levels, levels L, (h, w, c))."""
    import h5py
    with h5py.File(path, "r") as f:
        ds = f["/x"]
        h, w, c = (int(v) for v in ds.attrs["image_shape"])
        L = int(np.asarray(ds.attrs["levels"]).reshape(-1)[0])
        x = np.asarray(ds[...], dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != h * w * c:
        raise SystemExit(f"{path}: /x is {x.shape}, expected (n, {h * w * c}) for images {h}x{w}x{c}")
    return x.reshape(-1, h, w, c).transpose(0, 3, 1, 2).copy(), L, (h, w, c)


def dequantize(x, L, gen=None):
    u = torch.rand(x.shape, generator=gen, dtype=x.dtype)
    return (x + u) / L - 0.5


# ---- multi-scale pieces (each: forward(x) -> (y, logdet per image)) -----------------------------

def squeeze(x):
    """(B, c, h, w) -> (B, 4c, h/2, w/2), channel (di*2 + dj)*c + ch: NHWC's (h/2, 2, w/2, 2, c) order."""
    B, c, h, w = x.shape
    x = x.view(B, c, h // 2, 2, w // 2, 2).permute(0, 3, 5, 1, 2, 4)
    return x.reshape(B, 4 * c, h // 2, w // 2)


class Squeeze(nn.Module):
    def forward(self, x):
        return squeeze(x), None


class ActNorm2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(c))
        self.log_scale = nn.Parameter(torch.zeros(c))
        self.init_mode = False

    def forward(self, x):
        if self.init_mode:
            with torch.no_grad():
                self.loc.copy_(x.mean(dim=(0, 2, 3)))
                self.log_scale.copy_(-0.5 * torch.log(x.var(dim=(0, 2, 3), unbiased=False) + 1e-6))
            self.init_mode = False
        y = (x - self.loc.view(1, -1, 1, 1)) * torch.exp(self.log_scale).view(1, -1, 1, 1)
        return y, (x.shape[2] * x.shape[3]) * self.log_scale.sum().expand(x.shape[0])


class Conv1x1LU(nn.Module):
    def __init__(self, c):
        super().__init__()
        w0 = torch.linalg.qr(torch.randn(c, c, dtype=torch.float64))[0]
        P, Lo, U = torch.lu_unpack(*torch.linalg.lu_factor(w0))
        s = torch.diagonal(U)
        self.register_buffer("P", P.to(torch.get_default_dtype()))
        self.register_buffer("sign_s", torch.sign(s).to(torch.get_default_dtype()))
        self.register_buffer("lower_mask", torch.tril(torch.ones(c, c), -1))
        self.register_buffer("eye", torch.eye(c))
        self.L = nn.Parameter(Lo.to(torch.get_default_dtype()))
        self.U = nn.Parameter(torch.triu(U, 1).to(torch.get_default_dtype()))
        self.log_s = nn.Parameter(torch.log(torch.abs(s)).to(torch.get_default_dtype()))

    def weight(self):
        Lo = self.L * self.lower_mask + self.eye
        U = self.U * self.lower_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return self.P @ Lo @ U

    def forward(self, x):
        W = self.weight()
        y = F.conv2d(x, W.view(W.shape[0], W.shape[1], 1, 1))
        return y, (x.shape[2] * x.shape[3]) * self.log_s.sum().expand(x.shape[0])


class ConvNet(nn.Module):
    """nn/convnet.h: conv kxk -> relu -> conv 1x1 -> relu -> conv kxk (zero-initialised)."""

    def __init__(self, cin, hidden, cout, k=3):
        super().__init__()
        self.inp = nn.Conv2d(cin, hidden, k, padding=k // 2)
        self.mid = nn.Conv2d(hidden, hidden, 1)
        self.out = nn.Conv2d(hidden, cout, k, padding=k // 2)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x):
        return self.out(F.relu(self.mid(F.relu(self.inp(x)))))


class Coupling2d(nn.Module):
    """flows/coupling2d.c with scale=tanh, clamp=3."""

    def __init__(self, c, h, w, mask, flip, hidden, k=3, clamp=3.0):
        super().__init__()
        self.mask, self.clamp = mask, clamp
        if mask == "checkerboard":
            self.c0, self.cin, self.t0, self.ct = 0, c, 0, c
            ij = torch.arange(h).view(h, 1) + torch.arange(w).view(1, w)
            self.register_buffer("cond", ((ij % 2) == flip).to(torch.get_default_dtype()).view(1, 1, h, w))
        else:
            half = c // 2
            if not flip:
                self.c0, self.cin, self.t0, self.ct = 0, half, half, c - half
            else:
                self.c0, self.cin, self.t0, self.ct = half, c - half, 0, half
        self.net = ConvNet(self.cin, hidden, 2 * self.ct, k)

    def forward(self, x):
        if self.mask == "checkerboard":
            o = self.net(x * self.cond)
            r, t = o[:, 0::2], o[:, 1::2]
            keep = 1 - self.cond
            s = self.clamp * torch.tanh(r / self.clamp) * keep
            y = x * torch.exp(s) + t * keep
            return y, s.sum(dim=(1, 2, 3))
        xc = x[:, self.c0:self.c0 + self.cin]
        xt = x[:, self.t0:self.t0 + self.ct]
        o = self.net(xc)
        r, t = o[:, 0::2], o[:, 1::2]
        s = self.clamp * torch.tanh(r / self.clamp)
        yt = xt * torch.exp(s) + t
        y = torch.cat([xc, yt], 1) if self.t0 > self.c0 else torch.cat([yt, xc], 1)
        return y, s.sum(dim=(1, 2, 3))


class Split(nn.Module):
    """Keep the first c/2 channels; the rest go to the base."""

    def forward(self, x):
        c = x.shape[1] // 2
        return x[:, :c], x[:, c:]


class MultiScaleFlow(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, y):
        """z (B, D) (the factored-out parts, then the rest) and log-det (B)."""
        B = y.shape[0]
        logdet = torch.zeros(B, dtype=y.dtype)
        zs = []
        x = y
        for m in self.layers:
            if isinstance(m, Split):
                x, out = m(x)
                zs.append(out.reshape(B, -1))
                continue
            x, ld = m(x)
            if ld is not None:
                logdet = logdet + ld
        zs.append(x.reshape(B, -1))
        return torch.cat(zs, 1), logdet


def glow(h, w, c, scales, depth, hidden):
    L = []
    for s in range(scales):
        L.append(Squeeze())
        h, w, c = h // 2, w // 2, c * 4
        for _ in range(depth):
            L += [ActNorm2d(c), Conv1x1LU(c), Coupling2d(c, h, w, "channel", 0, hidden)]
        if s + 1 < scales:
            L.append(Split())
            c //= 2
    return MultiScaleFlow(L)


def realnvp(h, w, c, scales, hidden):
    L = []
    for s in range(scales + 1):
        last = s == scales
        for k in range(4 if last else 3):
            L += [ActNorm2d(c), Coupling2d(c, h, w, "checkerboard", k % 2, hidden)]
        if last:
            break
        L.append(Squeeze())
        h, w, c = h // 2, w // 2, c * 4
        for k in range(3):
            L += [ActNorm2d(c), Coupling2d(c, h, w, "channel", k % 2, hidden)]
        L.append(Split())
        c //= 2
    return MultiScaleFlow(L)


# ---- TarFlow --------------------------------------------------------------------------------------

class CausalAttention(nn.Module):
    """nn/attention.h: qkv linear, QK RMS norm per head (gains shared by the heads), causal softmax."""

    def __init__(self, d, heads, qk_norm=True):
        super().__init__()
        self.d, self.H, self.dh = d, heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_gain = nn.Parameter(torch.ones(self.dh))
            self.k_gain = nn.Parameter(torch.ones(self.dh))

    def forward(self, x, mask):
        B, T, d = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.H, self.dh).permute(2, 0, 3, 1, 4)  # (3, B, H, T, dh)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.qk_norm:
            q = self.q_gain * q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)
            k = self.k_gain * k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dh)) + mask
        o = torch.softmax(att, dim=-1) @ v  # (B, H, T, dh)
        return self.out(o.transpose(1, 2).reshape(B, T, d))


class TransformerLayer(nn.Module):
    def __init__(self, d, heads, mlp_ratio=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp_ratio * d)
        self.fc2 = nn.Linear(mlp_ratio * d, d)

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TarFlowBlock(nn.Module):
    def __init__(self, T, dp, width, heads, layers, reverse, clamp=4.0):
        super().__init__()
        self.reverse, self.clamp, self.dp = reverse, clamp, dp
        self.inp = nn.Linear(dp, width)
        self.start = nn.Parameter(torch.randn(dp) * 0.02)
        self.pos = nn.Parameter(torch.randn(T, width) * 0.02)
        self.layers = nn.ModuleList([TransformerLayer(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, 2 * dp)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

    def forward(self, x):
        """x (B, T, dp) tokens -> z (B, T, dp), log-det (B)."""
        if self.reverse:
            x = x.flip(1)
        B = x.shape[0]
        u = torch.cat([self.start.expand(B, 1, -1), x[:, :-1]], 1)
        h = self.inp(u) + self.pos
        mask = self.mask.to(h.dtype)
        for layer in self.layers:
            h = layer(h, mask)
        o = self.out(self.norm(h))
        a, mu = o[..., :self.dp], o[..., self.dp:]
        s = self.clamp * torch.tanh(a / self.clamp)
        z = (x - mu) * torch.exp(-s)
        if self.reverse:
            z = z.flip(1)
        return z, -s.sum(dim=(1, 2))


class TarFlow(nn.Module):
    def __init__(self, h, w, c, patch, width, heads, layers, blocks):
        super().__init__()
        self.p = patch
        T, dp = (h // patch) * (w // patch), patch * patch * c
        self.blocks = nn.ModuleList([TarFlowBlock(T, dp, width, heads, layers, k % 2 == 1) for k in range(blocks)])

    def patchify(self, x):
        B, c, h, w = x.shape
        p = self.p
        x = x.view(B, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)  # (B, h/p, w/p, pi, pj, c)
        return x.reshape(B, (h // p) * (w // p), p * p * c)

    def forward(self, y):
        z = self.patchify(y)
        logdet = torch.zeros(y.shape[0], dtype=y.dtype)
        for blk in self.blocks:
            z, ld = blk(z)
            logdet = logdet + ld
        return z.reshape(y.shape[0], -1), logdet


# ---- the model ------------------------------------------------------------------------------------

def build(args, shape):
    h, w, c = shape
    if args.arch == "glow":
        return glow(h, w, c, args.scales, args.depth, args.hidden)
    if args.arch == "realnvp":
        return realnvp(h, w, c, args.scales, args.hidden)
    return TarFlow(h, w, c, args.patch, args.width, args.heads, args.layers, args.blocks)


def log_prob(model, y):
    z, ld = model(y)
    return -0.5 * (z * z).sum(1) - z.shape[1] * HALF_LOG_2PI + ld


def bpd(model, y, L):
    D = y[0].numel()
    return -(log_prob(model, y) - D * math.log(L)) / (D * LN2)


def data_init(model, X, L, gen):
    """ActNorm's data-dependent start on the first (up to) 512 training images (in the shuffled order)."""
    acts = [m for m in model.modules() if isinstance(m, ActNorm2d)]
    if not acts:
        return
    for m in acts:
        m.init_mode = True
    with torch.no_grad():
        model(dequantize(X[:512], L, gen))


def setup(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)
    x, L, shape = load_images(args.data)
    gen = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(x.shape[0], generator=gen)
    X = torch.tensor(x, dtype=torch.float32)[perm]
    model = build(args, shape)
    if args.noise is None:
        args.noise = 0.05 if args.arch == "tarflow" else 0.0
    data_init(model, X, L, gen)
    return model, X, L, shape, gen


class Trainer:
    def __init__(self, model, X, L, args, gen):
        self.model, self.X, self.L, self.args, self.gen = model, X, L, args, gen
        self.opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        self.total = max(args.total_steps, 1)
        self.t = 0
        self.perm, self.pos = None, 0

    def batch(self):
        n = self.X.shape[0]
        if self.perm is None or self.pos >= n:
            self.perm, self.pos = torch.randperm(n, generator=self.gen), 0
        b = min(self.args.batch, n - self.pos)
        idx = self.perm[self.pos:self.pos + b]
        self.pos += b
        return self.X[idx]

    def step(self):
        lr = self.args.lr * 0.5 * (1 + math.cos(math.pi * min(self.t, self.total) / self.total))
        for g in self.opt.param_groups:
            g["lr"] = lr
        y = dequantize(self.batch(), self.L, self.gen)
        if self.args.noise > 0:
            y = y + self.args.noise * torch.randn(y.shape, generator=self.gen)
        self.opt.zero_grad(set_to_none=True)
        loss = bpd(self.model, y, self.L).mean()
        loss.backward()
        if self.args.clip > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip)
        self.opt.step()
        self.t += 1
        return float(loss)


def evaluate(model, X, L, seed, batch=256):
    gen = torch.Generator().manual_seed(seed + 7)
    out = []
    with torch.no_grad():
        for i in range(0, X.shape[0], batch):
            out.append(bpd(model, dequantize(X[i:i + batch], L, gen), L).double())
    v = torch.cat(out)
    return float(v.mean()), float(v.std(unbiased=True) / math.sqrt(len(v))) if len(v) > 1 else float("nan")


def config(args, shape, model):
    # counted as nf counts them: an LU 1x1 convolution has c^2 free values (L, U stored here as full c x c)
    params = sum(p.numel() for p in model.parameters())
    params -= sum(m.log_s.numel() ** 2 + m.log_s.numel() for m in model.modules() if isinstance(m, Conv1x1LU))
    d = {"arch": args.arch, "shape": list(shape), "params": params,
         "noise": args.noise, "batch": args.batch, "lr": args.lr, "clip": args.clip, "seed": args.seed,
         "threads": args.threads, "torch": torch.__version__}
    if args.arch == "tarflow":
        d.update(patch=args.patch, width=args.width, heads=args.heads, layers=args.layers, blocks=args.blocks)
    else:
        d.update(scales=args.scales, hidden=args.hidden)
        if args.arch == "glow":
            d.update(depth=args.depth)
    return d


def cmd_train(args):
    model, X, L, shape, gen = setup(args)
    args.total_steps = args.warmup + args.repeats * args.steps
    tr = Trainer(model, X, L, args, gen)
    first = tr.step()
    for _ in range(max(args.warmup - 1, 0)):
        tr.step()
    best, best_cpu, loss = math.inf, math.inf, first
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            loss = tr.step()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    d = {"impl": "torch", "bench": "image_train"}
    d.update(config(args, shape, model))
    d.update({"steps": args.steps, "repeats": args.repeats, "steps_per_s": args.steps / best,
              "cpu_s_per_step": best_cpu / args.steps, "loss_first": first, "loss_last": loss, "data": args.data})
    print(json.dumps(d))


def cmd_fit(args):
    if not args.test:
        raise SystemExit("fit: --test TEST.h5 is required")
    model, X, L, shape, gen = setup(args)
    args.total_steps = args.steps
    tr = Trainer(model, X, L, args, gen)
    t0, c0 = time.perf_counter(), time.process_time()
    losses = [tr.step() for _ in range(args.steps)]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    xt, Lt, shape_t = load_images(args.test)
    if shape_t != shape or Lt != L:
        raise SystemExit(f"{args.test}: images {shape_t} with {Lt} levels; training data {shape} with {L}")
    model.eval()
    mean, se = evaluate(model, torch.tensor(xt, dtype=torch.float32), L, args.seed)
    k = max(1, min(50, len(losses) // 10))
    d = {"impl": "torch", "bench": "image_fit"}
    d.update(config(args, shape, model))
    d.update({"steps": args.steps, "train_images": int(X.shape[0]), "test_images": int(xt.shape[0]),
              "bits_per_dim": mean, "bits_per_dim_stderr": se,
              "train_bpd_first": float(np.mean(losses[:k])), "train_bpd_last": float(np.mean(losses[-k:])),
              "train_seconds": wall, "train_cpu_seconds": cpu, "data": args.data, "test": args.test})
    print(json.dumps(d))


def cmd_init_bpd(args):
    model, X, L, shape, gen = setup(args)
    mean, se = evaluate(model, X, L, args.seed)
    d = {"impl": "torch", "bench": "image_init_bpd"}
    d.update(config(args, shape, model))
    d.update({"images": int(X.shape[0]), "bits_per_dim": mean, "bits_per_dim_stderr": se, "data": args.data})
    print(json.dumps(d))


def cmd_check(args):
    """Brute-force Jacobian log-determinants (float64) and, with --data, the identity TarFlow's bits/dim."""
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(args.seed)
    ok = True
    cases = [("glow", dict(scales=2, depth=2, hidden=8), (4, 4, 1)),
             ("glow", dict(scales=1, depth=2, hidden=8), (4, 2, 2)),
             ("realnvp", dict(scales=1, hidden=8), (4, 4, 1)),
             ("realnvp", dict(scales=2, hidden=8), (8, 8, 1)),
             ("tarflow", dict(patch=2, width=16, heads=2, layers=2, blocks=2), (4, 4, 1)),
             ("tarflow", dict(patch=1, width=8, heads=2, layers=1, blocks=3), (2, 3, 2))]
    for arch, knobs, (h, w, c) in cases:
        a = argparse.Namespace(arch=arch, scales=2, depth=4, hidden=64, patch=2, width=64, heads=4, layers=2, blocks=4)
        for k, v in knobs.items():
            setattr(a, k, v)
        model = build(a, (h, w, c))
        with torch.no_grad():  # move everything off its start: zero outputs, unit gains, identity actnorms
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))  # larger: ill-conditioned J, slogdet loses digits
        y = torch.rand(1, c, h, w) - 0.5
        z, ld = model(y)
        J = torch.autograd.functional.jacobian(lambda v: model(v.view(1, c, h, w))[0].reshape(-1), y.reshape(-1))
        sign, brute = torch.linalg.slogdet(J)
        err = abs(float(brute) - float(ld[0]))
        good = err < 1e-8 * max(1.0, abs(float(brute))) and float(sign) != 0 and J.shape == (h * w * c, h * w * c)
        ok &= good
        print(json.dumps({"check": "logdet", "arch": arch, "shape": [h, w, c], **knobs, "logdet": float(ld[0]),
                          "brute_force": float(brute), "abs_error": err, "ok": bool(good)}))
    if args.data:
        torch.set_default_dtype(torch.float32)
        x, L, shape = load_images(args.data)
        X = torch.tensor(x, dtype=torch.float32)
        a = argparse.Namespace(arch="tarflow", patch=1, width=8, heads=2, layers=1, blocks=2)
        model = build(a, shape)
        mean, _ = evaluate(model, X, L, args.seed)
        y = torch.cat([dequantize(X[i:i + 256], L, g) for g in [torch.Generator().manual_seed(args.seed + 7)]
                       for i in range(0, X.shape[0], 256)]).double()  # evaluate's draws
        D = y[0].numel()
        closed = float((-(-0.5 * (y * y).flatten(1).sum(1) - D * HALF_LOG_2PI - D * math.log(L)) / (D * LN2)).mean())
        good = abs(mean - closed) < 1e-5
        ok &= good
        print(json.dumps({"check": "identity_bpd", "data": args.data, "bits_per_dim": mean, "closed_form": closed,
                          "ok": bool(good)}))
    print(json.dumps({"check": "all", "ok": bool(ok)}))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["train", "fit", "check", "init-bpd"])
    p.add_argument("--data")
    p.add_argument("--test")
    p.add_argument("--arch", choices=["glow", "realnvp", "tarflow"], default="glow")
    p.add_argument("--scales", type=int, default=2)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--patch", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--noise", type=float, default=None)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip", type=float, default=50.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.mode != "check" and not args.data:
        p.error("--data is required")
    return {"train": cmd_train, "fit": cmd_fit, "check": cmd_check, "init-bpd": cmd_init_bpd}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
