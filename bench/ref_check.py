"""bench/ref_check.py - check that the PyTorch reference computes exactly nf's function.

  ref_check.py CONFIG DUMP.h5      (DUMP.h5 from bench/bench_dump)

Loads nf's trained parameters (and LU permutations and signs) into the reference model of the same
configuration by slice name, then compares log-densities of the dumped batch, and the samples the
reference's inverse makes from nf's latents, against nf's.  Prints one JSON object; exits 1 when
the largest relative difference is above 1e-3 (float arithmetic in both).
"""
import json
import sys

import h5py
import torch

import ref_flows


def table(f, group):
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in f[group + "/names"][...]]
    val = torch.from_numpy(f[group + "/value"][...].astype("float32")) if names else torch.zeros(0)
    return {n: val[o:o + s] for n, o, s in zip(names, f[group + "/offsets"][...], f[group + "/sizes"][...])}


def linear_for(layer, part):
    """nf's name of a linear ('fc0', 'out', 'in', 'block1.fc0') -> the torch nn.Linear."""
    if isinstance(layer, ref_flows.MAF):
        seq = layer.made.net
        return seq[2 * int(part[2:])] if part.startswith("fc") else seq[-1]
    net = layer.net
    if isinstance(net, ref_flows.ResidualNet):
        if part == "in":
            return net.inp
        if part == "out":
            return net.out
        blk, fc = part.split(".")
        return net.blocks[int(blk[5:])][int(fc[2:])]
    return net[2 * int(part[2:])] if part.startswith("fc") else net[-1]


def load(flow, P, S):
    used = 0
    with torch.no_grad():
        for name, v in P.items():
            b, typ, rest = name.split(".", 2)
            layer = flow.layers[int(b[1:])]
            if typ == "lu":
                getattr(layer, rest).copy_(v)
            else:
                part, kind = rest.split(".", 1)[1].rsplit(".", 1)  # drop "made"/"net"
                lin = linear_for(layer, part)
                getattr(lin, kind).copy_(v.view_as(getattr(lin, kind)))
            used += v.numel()
        for name, v in S.items():
            b, typ, rest = name.split(".", 2)
            layer = flow.layers[int(b[1:])]
            if rest == "perm":
                layer.perm.copy_(v.long())
            elif rest == "sign":
                layer.sign.copy_(v)
    return used


def main():
    config, path = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as f:
        P, S = table(f, "P"), table(f, "S")
        x, lp = (torch.from_numpy(f[k][...].astype("float32")) for k in ("x", "logp"))
        z, xs = (torch.from_numpy(f[k][...].astype("float32")) for k in ("z", "xs"))
    flow = ref_flows.build(config)
    used = load(flow, P, S)
    total = sum(p.numel() for p in flow.parameters())
    with torch.no_grad():
        lpt = flow.log_prob(x)
        xt = z
        for b in reversed(flow.layers):
            xt = b.inverse(xt)
    d_lp = float(((lpt - lp).abs() / (1 + lp.abs())).max())
    d_x = float(((xt - xs).abs() / (1 + xs.abs())).max())
    ok = used == total and d_lp < 1e-3 and d_x < 1e-3
    print(json.dumps({"bench": "check", "config": config, "params_nf": used, "params_torch": total,
                      "max_rel_diff_logp": d_lp, "max_rel_diff_sample": d_x, "ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
