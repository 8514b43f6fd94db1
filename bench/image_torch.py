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
              Class-conditional (--conditional, nn/convnet.c): every coupling's net adds Wc ctx_b, Wc
              (hidden, K) without a bias, U(+-1/sqrt(K)), to its first convolution's output at every
              pixel of image b (before the relu); nothing else (actnorm, 1x1 convolutions, the base) sees
              the class.
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
              Class-conditional (--conditional, nn/transformer.c): each block's transformer has a linear
              K -> width with a bias (both U(+-1/sqrt(K)), "tf.ctx"), its output added to h_0 at every
              position (after the input linear and the positional embedding).
Class conditioning (--conditional; training/model_image.c, apps/cmd_image.c): the context is the data
file's /context (n, K) as stored, the one-hot classes that nf data make / import write (K >= 2), used
as is; label dropout: in training each image of each step independently gets the all-zero context
with probability --label-drop (nf's default 0.1 when conditional); the actnorm start (init_data) and
evaluation use the true classes (held-out bits/dim are log p(x | class)).
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
  train, fit and init-bpd take --conditional [--label-drop P] (both files need the classes, /context).
  python3 bench/image_torch.py check [--data IMAGES.h5]
      correctness: log-det of every architecture against the brute-force Jacobian on a tiny image
      (random, non-zero couplings and outputs), float64; with --data also the bits/dim of the data
      under an identity TarFlow (zero-initialised outputs) against the closed form.
  python3 bench/image_torch.py init-bpd --data IMAGES.h5 --arch ... [knobs]
      bits/dim of the data under the untrained model (after the actnorm start), to compare with
      nf image eval of a model fitted for one step at lr ~0.
  python3 bench/image_torch.py nf-parity --nf-model MODEL.h5 --data IMAGES.h5 [--nf NF]
      the same map with nf's trained weights: builds this model from MODEL.h5's configuration
      (/model/image), copies nf's parameters and conv1x1 state in (conv weights from NHWC patches, the
      LU triangles row by row), and computes the bits/dim of IMAGES.h5 on nf's own evaluation
      dequantisation (the keyed hash of training/keyed_noise.h, draw 0) with each image's class, in
      float64; with --nf also `nf image eval` of the same model and data, ok when they differ < 1e-4.

Model knobs, as nf image fit --help: --scales 2 --depth 4 --hidden 64 (glow, realnvp); --patch 2
--width 64 --heads 4 --layers 2 --blocks 4 (tarflow); --noise S [0; tarflow 0.05]; --lr 1e-3
--clip 50; --conditional, --label-drop P [0.1].

Status: mirrors the nf working tree of 2026-12-03 (nf 0.1.0, uncommitted issue-13 files, re-read at
16:35 UTC; class conditioning added 2026-12-05 from the tree at bb70cf7): training/model_image.[ch]
(dequantisation, bits/dim, init_data on <= 512 images, label dropout; nf draws its training u, noise
and label-dropout uniforms from a hash of (seed, draw count, image index), here from torch's
generator: the same distributions, other draws), training/image_config.c (nf_image_spec, the defaults),
flows/squeeze.c, flows/split.c, flows/actnorm2d.c, flows/conv1x1.c (+ lu_factor), flows/coupling2d.c,
nn/conv2d.c, nn/convnet.c, nn/attention.[ch], nn/transformer.[ch], nn/linear.c, flows/tarflow.c,
apps/cmd_image.c (defaults of nf image fit, --conditional, --label-drop; eval with the data's classes).
Checked: parameter counts equal nf's for glow (75,728), realnvp (142,096) and tarflow (408,112) on
8x8x1 digits with the defaults, and class-conditional on the 10 digit classes glow (80,848), realnvp
(152,336) and tarflow (410,928); bits/dim at the start equals nf's to 1e-3 (bench/image_targets.sh,
IMG_CHECK, with IMG_CONDITIONAL=1 for the conditional models; at the start the zero-initialised
couplings / outputs make the class irrelevant, so that check only covers the actnorm start and the
counts); nf-parity: nf's weights after 40-60 steps give nf's held-out bits/dim to < 3e-7 (conditional
glow, realnvp and tarflow, unconditional glow on 359 test digits), which checks the context injection,
weight layouts and the dequantisation map.  Not mirrored: nf's keyed noise in training (dequantisation,
augmentation, label dropout are drawn from torch's generator instead: the same distributions, so
same-seed runs do not follow the same path), sampling and classifier-free guidance, Jacobi inversion,
the likelihood classifier (nf image eval's accuracy), reverse alignment, variational dequantisation,
the EMA of weights (--ema, off by default).
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


def load_context(path, n):
    """The images' classes as nf reads them: /context (n, K) float64, the one-hot rows that nf data make
    and nf data import write (datasets/images.c), used as the flow's context as stored (nf image fit
    --conditional copies the rows; a class-conditional model needs K >= 2, as apps/cmd_image.c)."""
    import h5py
    with h5py.File(path, "r") as f:
        if "/context" not in f:
            raise SystemExit(f"{path}: --conditional needs image classes (a one-hot /context); this file has none")
        ctx = np.asarray(f["/context"][...], dtype=np.float64)
    if ctx.ndim == 1:
        ctx = ctx.reshape(-1, 1)
    if ctx.shape[0] != n or ctx.shape[1] < 2:
        raise SystemExit(f"{path}: /context is {ctx.shape}, expected ({n}, K) with K >= 2 classes")
    return ctx


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
    """nn/convnet.h: conv kxk -> relu -> conv 1x1 -> relu -> conv kxk (zero-initialised).  With a context
    of C values (classes > 0): z1 = conv_in(x) + Wc ctx_b at every pixel of image b, Wc (hidden, C) without
    a bias (the convolution has one), initialised U(+-1/sqrt(C)) (nf_convnet_init, "<net>.ctx.weight")."""

    def __init__(self, cin, hidden, cout, k=3, ctx=0):
        super().__init__()
        self.inp = nn.Conv2d(cin, hidden, k, padding=k // 2)
        self.mid = nn.Conv2d(hidden, hidden, 1)
        self.out = nn.Conv2d(hidden, cout, k, padding=k // 2)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.ctx = None
        if ctx > 0:
            self.ctx = nn.Linear(ctx, hidden, bias=False)
            nn.init.uniform_(self.ctx.weight, -1.0 / math.sqrt(ctx), 1.0 / math.sqrt(ctx))

    def forward(self, x, ctx=None):
        z1 = self.inp(x)
        if self.ctx is not None:
            z1 = z1 + self.ctx(ctx)[:, :, None, None]
        return self.out(F.relu(self.mid(F.relu(z1))))


class Coupling2d(nn.Module):
    """flows/coupling2d.c with scale=tanh, clamp=3."""

    def __init__(self, c, h, w, mask, flip, hidden, k=3, clamp=3.0, ctx=0):
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
        self.net = ConvNet(self.cin, hidden, 2 * self.ct, k, ctx)

    def forward(self, x, ctx=None):
        if self.mask == "checkerboard":
            o = self.net(x * self.cond, ctx)
            r, t = o[:, 0::2], o[:, 1::2]
            keep = 1 - self.cond
            s = self.clamp * torch.tanh(r / self.clamp) * keep
            y = x * torch.exp(s) + t * keep
            return y, s.sum(dim=(1, 2, 3))
        xc = x[:, self.c0:self.c0 + self.cin]
        xt = x[:, self.t0:self.t0 + self.ct]
        o = self.net(xc, ctx)
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

    def forward(self, y, ctx=None):
        """z (B, D) (the factored-out parts, then the rest) and log-det (B); ctx (B, C) reaches the couplings."""
        B = y.shape[0]
        logdet = torch.zeros(B, dtype=y.dtype)
        zs = []
        x = y
        for m in self.layers:
            if isinstance(m, Split):
                x, out = m(x)
                zs.append(out.reshape(B, -1))
                continue
            x, ld = m(x, ctx) if isinstance(m, Coupling2d) else m(x)
            if ld is not None:
                logdet = logdet + ld
        zs.append(x.reshape(B, -1))
        return torch.cat(zs, 1), logdet


def glow(h, w, c, scales, depth, hidden, ctx=0):
    L = []
    for s in range(scales):
        L.append(Squeeze())
        h, w, c = h // 2, w // 2, c * 4
        for _ in range(depth):
            L += [ActNorm2d(c), Conv1x1LU(c), Coupling2d(c, h, w, "channel", 0, hidden, ctx=ctx)]
        if s + 1 < scales:
            L.append(Split())
            c //= 2
    return MultiScaleFlow(L)


def realnvp(h, w, c, scales, hidden, ctx=0):
    L = []
    for s in range(scales + 1):
        last = s == scales
        for k in range(4 if last else 3):
            L += [ActNorm2d(c), Coupling2d(c, h, w, "checkerboard", k % 2, hidden, ctx=ctx)]
        if last:
            break
        L.append(Squeeze())
        h, w, c = h // 2, w // 2, c * 4
        for k in range(3):
            L += [ActNorm2d(c), Coupling2d(c, h, w, "channel", k % 2, hidden, ctx=ctx)]
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
    def __init__(self, T, dp, width, heads, layers, reverse, clamp=4.0, ctx=0):
        super().__init__()
        self.reverse, self.clamp, self.dp = reverse, clamp, dp
        self.inp = nn.Linear(dp, width)
        self.start = nn.Parameter(torch.randn(dp) * 0.02)
        self.pos = nn.Parameter(torch.randn(T, width) * 0.02)
        self.ctx = None
        if ctx > 0:  # nn/transformer.c: a linear C -> width with a bias, both U(+-1/sqrt(C)) as torch.nn.Linear
            self.ctx = nn.Linear(ctx, width)
            nn.init.uniform_(self.ctx.weight, -1.0 / math.sqrt(ctx), 1.0 / math.sqrt(ctx))
            nn.init.uniform_(self.ctx.bias, -1.0 / math.sqrt(ctx), 1.0 / math.sqrt(ctx))
        self.layers = nn.ModuleList([TransformerLayer(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, 2 * dp)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

    def forward(self, x, ctx=None):
        """x (B, T, dp) tokens, ctx (B, C) -> z (B, T, dp), log-det (B)."""
        if self.reverse:
            x = x.flip(1)
        B = x.shape[0]
        u = torch.cat([self.start.expand(B, 1, -1), x[:, :-1]], 1)
        h = self.inp(u) + self.pos
        if self.ctx is not None:  # h_0 += ctx_b Wc^T + bc at every position
            h = h + self.ctx(ctx)[:, None, :]
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
    def __init__(self, h, w, c, patch, width, heads, layers, blocks, ctx=0):
        super().__init__()
        self.p = patch
        T, dp = (h // patch) * (w // patch), patch * patch * c
        self.blocks = nn.ModuleList([TarFlowBlock(T, dp, width, heads, layers, k % 2 == 1, ctx=ctx)
                                     for k in range(blocks)])

    def patchify(self, x):
        B, c, h, w = x.shape
        p = self.p
        x = x.view(B, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)  # (B, h/p, w/p, pi, pj, c)
        return x.reshape(B, (h // p) * (w // p), p * p * c)

    def forward(self, y, ctx=None):
        z = self.patchify(y)
        logdet = torch.zeros(y.shape[0], dtype=y.dtype)
        for blk in self.blocks:
            z, ld = blk(z, ctx)
            logdet = logdet + ld
        return z.reshape(y.shape[0], -1), logdet


# ---- the model ------------------------------------------------------------------------------------

def build(args, shape):
    """The model; args.classes > 0 (--conditional: the data's classes) makes it class-conditional."""
    h, w, c = shape
    K = getattr(args, "classes", 0)
    if args.arch == "glow":
        return glow(h, w, c, args.scales, args.depth, args.hidden, ctx=K)
    if args.arch == "realnvp":
        return realnvp(h, w, c, args.scales, args.hidden, ctx=K)
    return TarFlow(h, w, c, args.patch, args.width, args.heads, args.layers, args.blocks, ctx=K)


def log_prob(model, y, ctx=None):
    z, ld = model(y, ctx)
    return -0.5 * (z * z).sum(1) - z.shape[1] * HALF_LOG_2PI + ld


def bpd(model, y, L, ctx=None):
    D = y[0].numel()
    return -(log_prob(model, y, ctx) - D * math.log(L)) / (D * LN2)


def data_init(model, X, L, gen, C=None):
    """ActNorm's data-dependent start on the first (up to) 512 training images (in the shuffled order),
    with their classes (nf's init_data passes them; the zero-initialised couplings do not use them yet)."""
    acts = [m for m in model.modules() if isinstance(m, ActNorm2d)]
    if not acts:
        return
    for m in acts:
        m.init_mode = True
    with torch.no_grad():
        model(dequantize(X[:512], L, gen), None if C is None else C[:512])


def setup(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    # The initial weights come from torch's global generator and the batches, dequantisation and noise
    # from `gen`: seeded alike, the two Mersenne twisters would give the same stream, and the
    # weights would be the noise's own numbers (an artefact worth 0.04 bits/dim on digits TarFlow,
    # bench/RESULTS.md).  The weights' seed is therefore another.
    torch.manual_seed(args.seed + 100003 if getattr(args, "init_seed", None) is None else args.init_seed)
    x, L, shape = load_images(args.data)
    gen = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(x.shape[0], generator=gen)
    X = torch.tensor(x, dtype=torch.float32)[perm]
    C = None
    args.classes = 0
    if args.conditional:
        C = torch.tensor(load_context(args.data, x.shape[0]), dtype=torch.float32)[perm]
        args.classes = C.shape[1]
        if args.label_drop is None:
            args.label_drop = 0.1
    else:
        args.label_drop = 0.0
    if not 0 <= args.label_drop < 1:
        raise SystemExit(f"--label-drop {args.label_drop}: expected a probability in [0, 1)")
    model = build(args, shape)
    if getattr(args, "init_from_nf", None):  # start from an nf model's weights (a diagnostic of the training)
        load_nf_weights(model, args.arch, read_nf_model(args.init_from_nf)[1])
    if args.noise is None:
        args.noise = 0.05 if args.arch == "tarflow" else 0.0
    data_init(model, X, L, gen, C)
    return model, X, C, L, shape, gen


class Trainer:
    def __init__(self, model, X, C, L, args, gen):
        self.model, self.X, self.C, self.L, self.args, self.gen = model, X, C, L, args, gen
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
        return self.X[idx], None if self.C is None else self.C[idx]

    def step(self):
        lr = self.args.lr * 0.5 * (1 + math.cos(math.pi * min(self.t, self.total) / self.total))
        for g in self.opt.param_groups:
            g["lr"] = lr
        x, c = self.batch()
        y = dequantize(x, self.L, self.gen)
        if self.args.noise > 0:
            y = y + self.args.noise * torch.randn(y.shape, generator=self.gen)
        if c is not None and self.args.label_drop > 0:
            # label dropout (training/model_image.c): each image of each step independently gets the
            # all-zero context with probability label_drop (nf keys the uniform by seed, draw, image)
            keep = torch.rand(c.shape[0], generator=self.gen) >= self.args.label_drop
            c = c * keep.to(c.dtype)[:, None]
        self.opt.zero_grad(set_to_none=True)
        loss = bpd(self.model, y, self.L, c).mean()
        loss.backward()
        if self.args.clip > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip)
        self.opt.step()
        self.t += 1
        return float(loss)


def evaluate(model, X, L, seed, batch=256, C=None):
    """Held-out bits/dim, one dequantisation draw per image; a conditional model sees each image's true
    class (nf image eval: image_eval passes the data's /context, no label dropout)."""
    gen = torch.Generator().manual_seed(seed + 7)
    out = []
    with torch.no_grad():
        for i in range(0, X.shape[0], batch):
            c = None if C is None else C[i:i + batch]
            out.append(bpd(model, dequantize(X[i:i + batch], L, gen), L, c).double())
    v = torch.cat(out)
    return float(v.mean()), float(v.std(unbiased=True) / math.sqrt(len(v))) if len(v) > 1 else float("nan")


def config(args, shape, model):
    # counted as nf counts them: an LU 1x1 convolution has c^2 free values (L, U stored here as full c x c)
    params = sum(p.numel() for p in model.parameters())
    params -= sum(m.log_s.numel() ** 2 + m.log_s.numel() for m in model.modules() if isinstance(m, Conv1x1LU))
    d = {"arch": args.arch, "shape": list(shape), "params": params,
         "noise": args.noise, "batch": args.batch, "lr": args.lr, "clip": args.clip, "seed": args.seed,
         "threads": args.threads, "torch": torch.__version__}
    if args.conditional:
        d.update(conditional=True, classes=args.classes, label_drop=args.label_drop)
    if args.arch == "tarflow":
        d.update(patch=args.patch, width=args.width, heads=args.heads, layers=args.layers, blocks=args.blocks)
    else:
        d.update(scales=args.scales, hidden=args.hidden)
        if args.arch == "glow":
            d.update(depth=args.depth)
    return d


def cmd_train(args):
    model, X, C, L, shape, gen = setup(args)
    args.total_steps = args.warmup + args.repeats * args.steps
    tr = Trainer(model, X, C, L, args, gen)
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
    model, X, C, L, shape, gen = setup(args)
    args.total_steps = args.steps
    tr = Trainer(model, X, C, L, args, gen)
    t0, c0 = time.perf_counter(), time.process_time()
    losses = [tr.step() for _ in range(args.steps)]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    xt, Lt, shape_t = load_images(args.test)
    if shape_t != shape or Lt != L:
        raise SystemExit(f"{args.test}: images {shape_t} with {Lt} levels; training data {shape} with {L}")
    Ct = torch.tensor(load_context(args.test, xt.shape[0]), dtype=torch.float32) if args.conditional else None
    if Ct is not None and Ct.shape[1] != args.classes:
        raise SystemExit(f"{args.test}: {Ct.shape[1]} classes; the training data has {args.classes}")
    model.eval()
    mean, se = evaluate(model, torch.tensor(xt, dtype=torch.float32), L, args.seed, C=Ct)
    k = max(1, min(50, len(losses) // 10))
    d = {"impl": "torch", "bench": "image_fit"}
    d.update(config(args, shape, model))
    d.update({"steps": args.steps, "train_images": int(X.shape[0]), "test_images": int(xt.shape[0]),
              "bits_per_dim": mean, "bits_per_dim_stderr": se,
              "train_bpd_first": float(np.mean(losses[:k])), "train_bpd_last": float(np.mean(losses[-k:])),
              "train_seconds": wall, "train_cpu_seconds": cpu, "data": args.data, "test": args.test})
    print(json.dumps(d))


def cmd_init_bpd(args):
    model, X, C, L, shape, gen = setup(args)
    mean, se = evaluate(model, X, L, args.seed, C=C)
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
             ("tarflow", dict(patch=1, width=8, heads=2, layers=1, blocks=3), (2, 3, 2)),
             # class-conditional (--conditional): the log-det given a one-hot class, and that the class
             # reaches the map (another class or the all-zero context changes z and the log-det)
             ("glow", dict(scales=2, depth=2, hidden=8, classes=3), (4, 4, 1)),
             ("realnvp", dict(scales=1, hidden=8, classes=3), (4, 4, 1)),
             ("tarflow", dict(patch=2, width=16, heads=2, layers=2, blocks=2, classes=3), (4, 4, 1))]
    for arch, knobs, (h, w, c) in cases:
        a = argparse.Namespace(arch=arch, scales=2, depth=4, hidden=64, patch=2, width=64, heads=4, layers=2, blocks=4,
                               classes=0)
        for k, v in knobs.items():
            setattr(a, k, v)
        model = build(a, (h, w, c))
        with torch.no_grad():  # move everything off its start: zero outputs, unit gains, identity actnorms
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))  # larger: ill-conditioned J, slogdet loses digits
        y = torch.rand(1, c, h, w) - 0.5
        ctx = None
        if a.classes:
            ctx = torch.zeros(1, a.classes)
            ctx[0, 1] = 1
        z, ld = model(y, ctx)
        J = torch.autograd.functional.jacobian(lambda v: model(v.view(1, c, h, w), ctx)[0].reshape(-1), y.reshape(-1))
        sign, brute = torch.linalg.slogdet(J)
        err = abs(float(brute) - float(ld[0]))
        good = err < 1e-8 * max(1.0, abs(float(brute))) and float(sign) != 0 and J.shape == (h * w * c, h * w * c)
        extra = {}
        if a.classes:
            with torch.no_grad():
                z0, ld0 = model(y, torch.zeros_like(ctx))
                z2, ld2 = model(y, torch.roll(ctx, 1, 1))
            moved = min(float((z - z0).abs().max()), float((z - z2).abs().max()),
                        abs(float(ld[0] - ld0[0])), abs(float(ld[0] - ld2[0])))
            extra = {"class_effect": moved}
            good = good and moved > 1e-6
        ok &= good
        print(json.dumps({"check": "logdet", "arch": arch, "shape": [h, w, c], **knobs, "logdet": float(ld[0]),
                          "brute_force": float(brute), "abs_error": err, **extra, "ok": bool(good)}))
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


# ---- nf's weights in this model (nf-parity) ---------------------------------------------------------

def _mix64(x):
    """core/rng.c nf_mix64 (splitmix64's finaliser) on uint64 arrays."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9e3779b97f4a7c15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return x ^ (x >> np.uint64(31))


def nf_eval_dequantize(x_nhwc, L, seed):
    """nf's evaluation dequantisation (training/model_image.c, draw 0): image i (its row in the file), entry k:
    key = mix64(seed * 0x632be59bd9b4e019 ^ i), u = ((mix64(key ^ mix64(k + 0x9e3779b97f4a7c15)) >> 11) + 1/2) 2^-53,
    y = float32((x + u) / L - 1/2).  x (n, D) in NHWC order; returns y (n, D) float64 of the float32 values."""
    n, D = x_nhwc.shape
    with np.errstate(over="ignore"):
        key = _mix64((np.uint64(seed) * np.uint64(0x632be59bd9b4e019)) ^ np.arange(n, dtype=np.uint64))
        kk = _mix64(np.arange(D, dtype=np.uint64) + np.uint64(0x9e3779b97f4a7c15))
        bits = _mix64(key[:, None] ^ kk[None, :]) >> np.uint64(11)
    u = (bits.astype(np.float64) + 0.5) * 2.0 ** -53
    return ((x_nhwc + u) / L - 0.5).astype(np.float32).astype(np.float64)


def read_nf_model(path):
    """An nf image model file: its configuration (the attributes of /model/image) and its parameters and
    state, name -> float64 array."""
    import h5py
    with h5py.File(path, "r") as f:
        cfg = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["model/image"].attrs.items()}
        params = {}
        for grp in ("model/params", "model/state"):
            g = f[grp]
            vals = np.asarray(g["value"][...], dtype=np.float64)
            for nm, o, z in zip(g["names"][...], g["offsets"][...], g["sizes"][...]):
                params[nm.decode()] = vals[int(o):int(o) + int(z)]
    return cfg, params


def load_nf_weights(model, arch, params):
    """Copy nf's parameters (name -> numpy array, and the conv1x1 state) into the model built by build():
    bijector j of nf's flow ("b<j>.") is layer j of a multi-scale flow / block j of a TarFlow."""
    used = set()

    def get(name, shape=None):
        used.add(name)
        v = torch.tensor(params[name], dtype=torch.float64)
        return v if shape is None else v.reshape(shape)

    def conv(m, name):  # nn/conv2d.h: W[o, (di*k + dj)*cin + ch] -> torch (o, ch, di, dj)
        o, ci, k, _ = m.weight.shape
        m.weight.copy_(get(name + ".weight", (o, k, k, ci)).permute(0, 3, 1, 2))
        m.bias.copy_(get(name + ".bias"))

    def lin(m, name, bias=True):
        m.weight.copy_(get(name + ".weight", tuple(m.weight.shape)))
        if bias:
            m.bias.copy_(get(name + ".bias"))

    with torch.no_grad():
        if arch == "tarflow":
            for j, blk in enumerate(model.blocks):
                t = f"b{j}.tarflow.tf"
                blk.start.copy_(get(t + ".start"))
                blk.pos.copy_(get(t + ".pos", tuple(blk.pos.shape)))
                lin(blk.inp, t + ".in")
                if blk.ctx is not None:
                    lin(blk.ctx, t + ".ctx")
                for l, lay in enumerate(blk.layers):
                    b = f"{t}.b{l}"
                    for ln, nm in ((lay.ln1, "ln1"), (lay.ln2, "ln2")):
                        ln.weight.copy_(get(f"{b}.{nm}.gamma"))
                        ln.bias.copy_(get(f"{b}.{nm}.beta"))
                    lin(lay.attn.qkv, b + ".attn.qkv")
                    lin(lay.attn.out, b + ".attn.out")
                    lay.attn.q_gain.copy_(get(b + ".attn.q_gain"))
                    lay.attn.k_gain.copy_(get(b + ".attn.k_gain"))
                    lin(lay.fc1, b + ".fc1")
                    lin(lay.fc2, b + ".fc2")
                blk.norm.weight.copy_(get(t + ".ln_f.gamma"))
                blk.norm.bias.copy_(get(t + ".ln_f.beta"))
                lin(blk.out, t + ".out")
        else:
            for j, m in enumerate(model.layers):
                if isinstance(m, ActNorm2d):
                    m.loc.copy_(get(f"b{j}.actnorm2d.loc"))
                    m.log_scale.copy_(get(f"b{j}.actnorm2d.log_scale"))
                elif isinstance(m, Conv1x1LU):  # flows/lu_factor.h: W = P L (U + diag(sign e^log_s))
                    c = m.log_s.numel()
                    il, jl = np.tril_indices(c, -1)  # row by row, as nf stores the strict triangles
                    iu, ju = np.triu_indices(c, 1)
                    Lo, U = torch.zeros(c, c, dtype=torch.float64), torch.zeros(c, c, dtype=torch.float64)
                    if c > 1:
                        Lo[il, jl] = get(f"b{j}.conv1x1.lower")
                        U[iu, ju] = get(f"b{j}.conv1x1.upper")
                    m.L.copy_(Lo)
                    m.U.copy_(U)
                    m.log_s.copy_(get(f"b{j}.conv1x1.log_s"))
                    perm = get(f"b{j}.conv1x1.perm").long()
                    P = torch.zeros(c, c, dtype=torch.float64)
                    P[torch.arange(c), perm] = 1  # (P A)_i = A_{perm_i}
                    m.P.copy_(P)
                    m.sign_s.copy_(get(f"b{j}.conv1x1.sign"))
                elif isinstance(m, Coupling2d):
                    net = f"b{j}.coupling2d.net"
                    conv(m.net.inp, net + ".in")
                    conv(m.net.mid, net + ".mid")
                    conv(m.net.out, net + ".out")
                    if m.net.ctx is not None:
                        lin(m.net.ctx, net + ".ctx", bias=False)
    left = sorted(set(k for k in params if not k.endswith(".initialized") and k != "image.draws") - used)
    if left:
        raise SystemExit(f"nf-parity: nf parameters not mapped: {left[:5]}")


def cmd_nf_parity(args):
    """Bits/dim of IMAGES.h5 under nf's trained weights in this model, on nf's own evaluation dequantisation
    (the same y to float32), with each image's class when conditional; against nf image eval when --nf is given."""
    import subprocess
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    cfg, params = read_nf_model(args.nf_model)
    a = argparse.Namespace(arch=cfg["arch"], scales=int(cfg["scales"]), depth=int(cfg["steps"]), hidden=int(cfg["hidden"]),
                           patch=int(cfg["patch"]), width=int(cfg["width"]), heads=int(cfg["heads"]),
                           layers=int(cfg["layers"]), blocks=int(cfg["blocks"]), classes=int(cfg["classes"]))
    x, L, shape = load_images(args.data)
    if shape != (int(cfg["h"]), int(cfg["w"]), int(cfg["c"])) or L != int(cfg["levels"]):
        raise SystemExit(f"{args.data}: images {shape}, {L} levels; the model's {cfg['h']}x{cfg['w']}x{cfg['c']}, {cfg['levels']}")
    model = build(a, shape)
    load_nf_weights(model, a.arch, params)
    n = x.shape[0]
    h, w, c = shape
    y = nf_eval_dequantize(x.transpose(0, 2, 3, 1).reshape(n, -1), L, int(cfg["seed"]))
    Y = torch.tensor(y.reshape(n, h, w, c).transpose(0, 3, 1, 2).copy())
    C = torch.tensor(load_context(args.data, n)) if a.classes else None
    with torch.no_grad():
        v = bpd(model, Y, L, C)
        d = {"check": "nf_parity", "arch": a.arch, "classes": a.classes, "model": args.nf_model, "data": args.data,
             "images": n, "torch_bits_per_dim": float(v.mean())}
        if a.classes:  # how much the class matters under these weights: the all-zero (dropped) class instead
            d["torch_bits_per_dim_empty_class"] = float(bpd(model, Y, L, torch.zeros_like(C)).mean())
    ok = True
    if args.nf:
        e = json.loads(subprocess.run([args.nf, "image", "eval", args.nf_model, args.data, "--json"], check=True,
                                      capture_output=True, text=True).stdout)
        d["nf_bits_per_dim"] = e["bits_per_dim"]
        d["difference"] = e["bits_per_dim"] - d["torch_bits_per_dim"]
        ok = abs(d["difference"]) < 1e-4
        d["ok"] = ok
    print(json.dumps(d))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["train", "fit", "check", "init-bpd", "nf-parity"])
    p.add_argument("--nf-model", help="nf-parity: a model of nf image fit (its configuration and weights)")
    p.add_argument("--nf", help="nf-parity: the nf binary, to compare with nf image eval MODEL DATA --json")
    p.add_argument("--data")
    p.add_argument("--test")
    p.add_argument("--init-seed", type=int, help="seed of the initial weights (default --seed + 100003: not the "
                   "seed of the batches and noise)")
    p.add_argument("--init-from-nf", help="fit/train: start from the weights of this nf image model (same configuration)")
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
    p.add_argument("--conditional", action="store_true",
                   help="condition on the class (the one-hot /context of the data file), as nf image fit --conditional")
    p.add_argument("--label-drop", type=float, default=None,
                   help="train on the empty (all-zero) class with this probability [0.1 if conditional]")
    args = p.parse_args()
    if args.mode != "check" and not args.data:
        p.error("--data is required")
    if args.mode == "nf-parity" and not args.nf_model:
        p.error("nf-parity needs --nf-model MODEL.h5")
    return {"train": cmd_train, "fit": cmd_fit, "check": cmd_check, "init-bpd": cmd_init_bpd,
            "nf-parity": cmd_nf_parity}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
