"""bench/ref_flows.py - the PyTorch reference: the same flows as nf's benchmark configurations.

Written the way a PyTorch user would write them (nflows' algorithms, torch.nn.Linear layers and their
default initialisation, torch.optim.Adam), with nf's architectural choices copied exactly so the two
sides do the same arithmetic:

  MADE        input degrees 1..D (natural) or D..1 (reversed); hidden degrees k % (D-1) + 1, SORTED
              ascending (nn/made.c); masks m_k >= deg_i (input), m_k' >= m_k (hidden),
              deg_i > m_h (output); output column i*P + k is parameter k of dimension i; masked
              products as nflows does them, F.linear(x, W * mask, b); output layer zero-initialised.
  MAF         per dimension (t, a) from the MADE:  z = x exp(s) + t, s = 3 tanh(a / 3) (flows/maf.c);
              sampling inverts dimension by dimension in the MADE order, D network passes.
  affine      RealNVP coupling (flows/affine_coupling.c): conditioner on x_c, columns (t, r) per
              transformed dimension, y_t = x_t exp(s) + t, s = clamp tanh(r / clamp), clamp = 3.
  spline      rational-quadratic spline coupling (flows/spline_coupling.c, flows/rqspline.c): residual
              conditioner (Linear_in, blocks act-Linear-act-Linear(U(+-1e-3)) + skip, act, Linear_out
              zero-initialised), 3K-1 parameters per transformed dimension (widths, heights, interior
              derivatives d = 1e-3 + softplus(u + c), c = log(e^(1-1e-3) - 1)), min width and height
              1e-3, identity outside [-B, B]; the spline itself follows nflows'
              rational_quadratic_spline (searchsorted, gather, the stable quadratic root).
  lu          W = P L (U + diag(sign e^log_s)), y = x W^T + b, initialised from the LU of a random
              orthogonal matrix (flows/lu.c).
  standardize the fixed affine map nf fit puts first (mean and population std of the training data).

Masks: coupling mask=alt conditions on the even indices, mask=halves on the first floor(D/2); flip=1
swaps the roles (flows/coupling_mask.c).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LOG2PI = math.log(2 * math.pi)


# ---- MADE ---------------------------------------------------------------------------------------

def made_degrees(D, order):
    if order == "natural":
        return torch.arange(1, D + 1)
    if order == "reversed":
        return torch.arange(D, 0, -1)
    raise ValueError(order)


def hidden_degrees(H, D):
    mx, mn = max(1, D - 1), min(1, D - 1)
    return torch.sort(torch.arange(H) % mx + mn).values


class MaskedLinear(nn.Linear):
    def __init__(self, fin, fout, mask):
        super().__init__(fin, fout)
        self.register_buffer("mask", mask.float())
        with torch.no_grad():
            self.weight.mul_(self.mask)

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class MADE(nn.Module):
    """Plain MADE: (masked Linear, ReLU) x layers, masked Linear to D * P outputs."""

    def __init__(self, D, hidden, layers, per_input, order):
        super().__init__()
        self.D, self.P = D, per_input
        deg = made_degrees(D, order)
        self.register_buffer("deg", deg)
        m = hidden_degrees(hidden, D)
        mods = [MaskedLinear(D, hidden, m[:, None] >= deg[None, :]), nn.ReLU()]
        for _ in range(layers - 1):
            mods += [MaskedLinear(hidden, hidden, m[:, None] >= m[None, :]), nn.ReLU()]
        out_deg = deg.repeat_interleave(per_input)
        last = MaskedLinear(hidden, D * per_input, out_deg[:, None] > m[None, :])
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        mods.append(last)
        self.net = nn.Sequential(*mods)

    def forward(self, x):
        return self.net(x)


def soft_clamp(r, clamp=3.0):
    return clamp * torch.tanh(r / clamp)


class MAF(nn.Module):
    """Affine MADE layer.  Density direction z = x exp(s) + t; sampling x = (z - t) exp(-s)."""

    def __init__(self, D, hidden, layers, order):
        super().__init__()
        self.made = MADE(D, hidden, layers, 2, order)
        self.order = torch.argsort(self.made.deg)  # dimensions in the order they are generated

    def params(self, x):
        h = self.made(x).view(x.shape[0], -1, 2)
        return h[..., 0], soft_clamp(h[..., 1])

    def forward(self, x):
        t, s = self.params(x)
        return x * torch.exp(s) + t, s.sum(1)

    def inverse(self, z):
        x = torch.zeros_like(z)
        for i in self.order.tolist():  # D sequential passes
            t, s = self.params(x)
            x[:, i] = (z[:, i] - t[:, i]) * torch.exp(-s[:, i])
        return x


# ---- couplings ----------------------------------------------------------------------------------

def coupling_split(D, mask, flip):
    cond = [j for j in range(D) if ((j < D // 2) if mask == "halves" else (j % 2 == 0)) != bool(flip)]
    trans = [j for j in range(D) if j not in cond]
    return cond, trans


def mlp(fin, hidden, layers, fout):
    mods, w = [], fin
    for _ in range(layers):
        mods += [nn.Linear(w, hidden), nn.ReLU()]
        w = hidden
    last = nn.Linear(w, fout)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    return nn.Sequential(*(mods + [last]))


class ResidualNet(nn.Module):
    """Linear_in; blocks r += Linear1(relu(Linear0(relu(r)))); relu; Linear_out (zero init)."""

    def __init__(self, fin, hidden, blocks, fout):
        super().__init__()
        self.inp = nn.Linear(fin, hidden)
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            l0, l1 = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
            nn.init.uniform_(l1.weight, -1e-3, 1e-3)
            nn.init.uniform_(l1.bias, -1e-3, 1e-3)
            self.blocks.append(nn.ModuleList([l0, l1]))
        self.out = nn.Linear(hidden, fout)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x):
        r = self.inp(x)
        for l0, l1 in self.blocks:
            r = r + l1(F.relu(l0(F.relu(r))))
        return self.out(F.relu(r))


class Coupling(nn.Module):
    def __init__(self, D, mask, flip, per_dim, net):
        super().__init__()
        cond, trans = coupling_split(D, mask, flip)
        self.register_buffer("cond", torch.tensor(cond))
        self.register_buffer("trans", torch.tensor(trans))
        self.per_dim = per_dim
        self.net = net

    def theta(self, x):
        return self.net(x[:, self.cond]).view(x.shape[0], len(self.trans), self.per_dim)

    def forward(self, x):
        yt, ld = self.transform(x[:, self.trans], self.theta(x), inverse=False)
        y = x.clone()
        y[:, self.trans] = yt
        return y, ld

    def inverse(self, y):
        xt, _ = self.transform(y[:, self.trans], self.theta(y), inverse=True)
        x = y.clone()
        x[:, self.trans] = xt
        return x


class AffineCoupling(Coupling):
    def __init__(self, D, hidden, layers, mask, flip, clamp=3.0):
        dc = len(coupling_split(D, mask, flip)[0])
        super().__init__(D, mask, flip, 2, mlp(dc, hidden, layers, (D - dc) * 2))
        self.clamp = clamp

    def transform(self, u, th, inverse):
        t, s = th[..., 0], soft_clamp(th[..., 1], self.clamp)
        if inverse:
            return (u - t) * torch.exp(-s), -s.sum(1)
        return u * torch.exp(s) + t, s.sum(1)


class SplineCoupling(Coupling):
    def __init__(self, D, hidden, blocks, bins, tail, mask, flip):
        dc = len(coupling_split(D, mask, flip)[0])
        P = 3 * bins - 1
        super().__init__(D, mask, flip, P, ResidualNet(dc, hidden, blocks, (D - dc) * P))
        self.K, self.B = bins, tail

    def transform(self, u, th, inverse):
        K = self.K
        out, lad = unconstrained_rq_spline(u, th[..., :K], th[..., K:2 * K], th[..., 2 * K:], inverse, self.B)
        return out, lad.sum(1)


# ---- the rational-quadratic spline (nflows' algorithm, nf's parameterisation) -------------------

MIN_W = MIN_H = MIN_D = 1e-3
DCONST = math.log(math.expm1(1 - MIN_D))


def searchsorted(locs, x, eps=1e-6):
    locs = locs.clone()
    locs[..., -1] += eps
    return torch.sum(x[..., None] >= locs, dim=-1) - 1


def unconstrained_rq_spline(x, uw, uh, ud, inverse, B):
    inside = (x >= -B) & (x <= B)
    out = torch.zeros_like(x)
    lad = torch.zeros_like(x)
    outside = ~inside
    out[outside] = x[outside]
    ud = F.pad(ud, (1, 1)) + DCONST  # d_0 = d_K = 1; interior m_d + softplus(u + c)
    if inside.any():
        out[inside], lad[inside] = rq_spline(x[inside], uw[inside], uh[inside], ud[inside], inverse, B)
    return out, lad


def rq_spline(x, uw, uh, ud, inverse, B):
    K = uw.shape[-1]
    w = MIN_W + (1 - MIN_W * K) * F.softmax(uw, dim=-1)
    cw = F.pad(torch.cumsum(w, dim=-1), (1, 0))
    cw = 2 * B * cw - B
    cw[..., 0], cw[..., -1] = -B, B
    w = cw[..., 1:] - cw[..., :-1]
    d = MIN_D + F.softplus(ud)
    h = MIN_H + (1 - MIN_H * K) * F.softmax(uh, dim=-1)
    ch = F.pad(torch.cumsum(h, dim=-1), (1, 0))
    ch = 2 * B * ch - B
    ch[..., 0], ch[..., -1] = -B, B
    h = ch[..., 1:] - ch[..., :-1]

    k = (searchsorted(ch, x) if inverse else searchsorted(cw, x))[..., None]
    xk, W = cw.gather(-1, k)[..., 0], w.gather(-1, k)[..., 0]
    yk, H = ch.gather(-1, k)[..., 0], h.gather(-1, k)[..., 0]
    S = (h / w).gather(-1, k)[..., 0]
    d0, d1 = d.gather(-1, k)[..., 0], d[..., 1:].gather(-1, k)[..., 0]
    if inverse:
        dy = x - yk
        a = dy * (d0 + d1 - 2 * S) + H * (S - d0)
        b = H * d0 - dy * (d0 + d1 - 2 * S)
        c = -S * dy
        disc = (b.pow(2) - 4 * a * c).clamp(min=0)
        xi = (2 * c) / (-b - torch.sqrt(disc))
        out = xi * W + xk
    else:
        xi = (x - xk) / W
    t = xi * (1 - xi)
    den = S + (d0 + d1 - 2 * S) * t
    dnum = S.pow(2) * (d1 * xi.pow(2) + 2 * S * t + d0 * (1 - xi).pow(2))
    lad = torch.log(dnum) - 2 * torch.log(den)
    if inverse:
        return out, -lad
    return yk + H * (S * xi.pow(2) + d0 * t) / den, lad


# ---- LU linear, standardize ---------------------------------------------------------------------

class LULinear(nn.Module):
    def __init__(self, D):
        super().__init__()
        q, r = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(r))[None, :]
        Pm, L, U = torch.linalg.lu(q)  # q = Pm L U
        self.register_buffer("perm", torch.argmax(Pm, dim=1))  # (Pm A)_i = A_{perm_i}
        du = torch.diagonal(U)
        self.register_buffer("sign", torch.sign(du).float())
        self.register_buffer("il", torch.tril_indices(D, D, -1))
        self.register_buffer("iu", torch.triu_indices(D, D, 1))
        # the strict triangles as vectors, row by row (nflows' LULinear, nf's "lower"/"upper")
        self.lower = nn.Parameter(L[self.il[0], self.il[1]].float())
        self.upper = nn.Parameter(U[self.iu[0], self.iu[1]].float())
        self.log_s = nn.Parameter(torch.log(du.abs()).float())
        self.bias = nn.Parameter(torch.zeros(D))
        self.register_buffer("eye", torch.eye(D))

    def factors(self):
        D = self.eye.shape[0]
        L = self.lower.new_zeros(D, D).index_put((self.il[0], self.il[1]), self.lower) + self.eye
        U = self.upper.new_zeros(D, D).index_put((self.iu[0], self.iu[1]), self.upper)
        return L, U + torch.diag(self.sign * torch.exp(self.log_s))

    def forward(self, x):
        L, U = self.factors()
        W = (L @ U)[self.perm]
        return F.linear(x, W, self.bias), self.log_s.sum().expand(x.shape[0])

    def inverse(self, y):
        L, U = self.factors()
        z = torch.empty_like(y)
        z[:, self.perm] = y - self.bias  # solve W x = z: P L U x = y - b
        v = torch.linalg.solve_triangular(L, z.T, upper=False, unitriangular=True)
        return torch.linalg.solve_triangular(U, v, upper=True).T


class Standardize(nn.Module):
    def __init__(self, x):
        super().__init__()
        x = x.double()
        self.register_buffer("mean", x.mean(0).float())
        self.register_buffer("std", x.std(0, unbiased=False).clamp(min=1e-8).float())

    def forward(self, x):
        return (x - self.mean) / self.std, -torch.log(self.std).sum().expand(x.shape[0])

    def inverse(self, y):
        return y * self.std + self.mean


# ---- flows and the benchmark configurations -----------------------------------------------------

class Flow(nn.Module):
    def __init__(self, layers, dim):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dim = dim

    def log_prob(self, x):
        ld = torch.zeros(x.shape[0], dtype=x.dtype)
        for b in self.layers:
            x, l = b(x)
            ld = ld + l
        return -0.5 * (x.pow(2).sum(1) + self.dim * LOG2PI) + ld

    @torch.no_grad()
    def sample(self, n):
        x = torch.randn(n, self.dim)
        for b in reversed(self.layers):
            x = b.inverse(x)
        return x


def maf(D, layers=5, hidden=128, blocks=2):
    return [MAF(D, hidden, blocks, "reversed" if i % 2 else "natural") for i in range(layers)]


def realnvp(D, layers=8, hidden=128, blocks=2):
    return [AffineCoupling(D, hidden, blocks, "alt", i % 2) for i in range(layers)]


def nsf_coupling(D, layers=10, hidden=128, blocks=2, bins=8, tail=5.0):
    out = []
    for i in range(layers):
        if i:
            out.append(LULinear(D))
        out.append(SplineCoupling(D, hidden, blocks, bins, tail, "halves", i % 2))
    return out


# name: (builder, dim, batch) - mirrors bench/bench_common.h
CONFIGS = {
    "maf": (lambda D: maf(D, 5, 256, 2), 8, 512),
    "realnvp": (lambda D: realnvp(D, 8, 256, 2), 64, 256),
    "nsf": (lambda D: nsf_coupling(D, 10, 128, 2, 8, 5.0), 8, 512),
    "maf-small": (lambda D: maf(D, 5, 64, 2), 2, 256),
}


def build(config, dim=None, data=None, seed=0):
    torch.manual_seed(seed)
    builder, D, _ = CONFIGS[config]
    D = dim or D
    layers = builder(D)
    if data is not None:
        layers = [Standardize(data)] + layers
    return Flow(layers, D)


def dense_flops_per_step(flow, batch):
    """Matrix-product FLOPs of one step computed densely: forward 1, backward 2 products per Linear."""
    w = sum(m.in_features * m.out_features for m in flow.modules() if isinstance(m, nn.Linear))
    return 6.0 * batch * w
