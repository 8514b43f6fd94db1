#!/usr/bin/env bash
# bench/image_targets.sh - the quality target of issue 13: held-out bits/dim of nf's image flows
# against the PyTorch reference of the same model (bench/image_torch.py) with the same budget:
# the same training images, the same steps, batch, learning rate and schedule (Adam, cosine, clip 50),
# then bits/dim of the same held-out images with one uniform dequantisation draw per image.
#
#   bash bench/image_targets.sh
#
# Data: `nf data make digits` (1,797 8x8 images, 17 levels) and `nf data make shapes --size 16`
# (IMG_SHAPES_N images, 256 levels), each split once by `nf data split --val 0 --test 0.2 --seed 1`;
# both sides train on all of the train part (nf: --val-frac 0, so no early stopping) and are scored
# on the test part (nf image eval --json; image_torch.py fit --test).  Every fit is repeated for each
# seed of IMG_SEEDS (weights, batches, dequantisation): after a few hundred steps the held-out
# bits/dim of one seed varies by +-0.2 between seeds (glow on shapes16, 100 steps: nf 5.06, 5.26, 5.23
# and PyTorch 5.50, 5.28, 5.07 for seeds 1, 2, 3), so the summary gives the mean over seeds and the
# mean paired difference nf - torch with its standard error.
#
# Environment (small defaults: about 20 minutes on 2 free cores):
#   NF (build/float/nf), IMG_SETS ("digits shapes16"), IMG_ARCHS ("glow tarflow"), IMG_STEPS (400),
#   IMG_STEPS_SHAPES (steps on shapes, default IMG_STEPS / 2), IMG_BATCH (64), IMG_THREADS (2),
#   IMG_SEEDS ("1 2"), IMG_SHAPES_N (3000), IMG_MODEL (extra model flags for both sides),
#   IMG_CHECK (1: first the untrained cross-check below; 0: skip), IMG_OUT (bench/out/image_targets.jsonl,
#   or bench/out/image_targets_conditional.jsonl with IMG_CONDITIONAL=1),
#   IMG_CONDITIONAL (0; 1: class-conditional models on both sides, nf image fit --conditional and
#   image_torch.py --conditional: the one-hot /context as the flow's context, label dropout
#   IMG_LABEL_DROP (unset: both sides' default 0.1); held-out bits/dim with each image's true class, as
#   nf image eval computes them; the nf rows also carry the likelihood classifier's test accuracy).
#
# The untrained cross-check (IMG_CHECK=1) compares the bits/dim of the data under both models at
# their start, where it is fixed by the data alone: a TarFlow starts as the identity (zero output
# layers), so bits/dim = -(log N(y; 0, I) - D log L) / (D ln 2) of the dequantised data; a one-scale,
# one-step Glow starts as squeeze + actnorm (data-dependent: each channel standardised) + a rotation
# (log-det 0, norm kept) + an identity coupling.  nf: `nf image fit --steps 1 --lr 1e-12` then eval on
# the first 500 digits (so both start their actnorms from all of those images); PyTorch: init-bpd.
# They differ only by the dequantisation draws (nf hashes the image index, PyTorch draws).
# With IMG_CONDITIONAL=1 the check also fits nf for 60 steps (glow, tarflow) and evaluates nf's weights
# in the reference on nf's own dequantisation (image_torch.py nf-parity): equal to ~1e-6 when the
# class enters both the same way.
set -u
cd "$(dirname "$0")/.."
NF=${NF:-build/float/nf}
PY=/usr/bin/python3
SETS=${IMG_SETS:-digits shapes16}
ARCHS=${IMG_ARCHS:-glow tarflow}
STEPS=${IMG_STEPS:-400}
STEPS_SHAPES=${IMG_STEPS_SHAPES:-$((STEPS / 2))}
BATCH=${IMG_BATCH:-64}
THREADS=${IMG_THREADS:-2}
SEEDS=${IMG_SEEDS:-1 2}
SEED=1
SHAPES_N=${IMG_SHAPES_N:-3000}
MODEL=${IMG_MODEL:-}
CHECK=${IMG_CHECK:-1}
COND=${IMG_CONDITIONAL:-0}
CFLAGS=()  # the conditional flags, the same for both sides
if [ "$COND" = 1 ]; then
    CFLAGS=(--conditional)
    [ -n "${IMG_LABEL_DROP:-}" ] && CFLAGS+=(--label-drop "$IMG_LABEL_DROP")
    OUTF=${IMG_OUT:-bench/out/image_targets_conditional.jsonl}
else
    OUTF=${IMG_OUT:-bench/out/image_targets.jsonl}
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUTF")"
: > "$OUTF"
fail() { echo "image_targets: $*" >&2; [ -s "$TMP/err" ] && cat "$TMP/err" >&2; exit 1; }

make_set() {  # NAME -> $TMP/NAME.h5, $TMP/NAME.train.h5, $TMP/NAME.test.h5
    case "$1" in
    digits) "$NF" data make digits -o "$TMP/$1.h5" ;;
    shapes16) "$NF" data make shapes --size 16 -n "$SHAPES_N" --seed "$SEED" -o "$TMP/$1.h5" ;;
    shapes32) "$NF" data make shapes --size 32 -n "$SHAPES_N" --seed "$SEED" -o "$TMP/$1.h5" ;;
    *) fail "unknown set $1 (digits, shapes16, shapes32)" ;;
    esac >/dev/null 2>> "$TMP/err" || fail "nf data make $1 failed"
    "$NF" data split "$TMP/$1.h5" --val 0 --test 0.2 --seed "$SEED" -o "$TMP/$1" >/dev/null 2>> "$TMP/err" ||
        fail "nf data split $1 failed"
}

# nf_fit SET ARCH STEPS SEED [extra flags]: trains on SET.train.h5, prints one JSON line (eval of SET.test.h5)
nf_fit() {
    local set=$1 arch=$2 steps=$3 seed=$4
    shift 4
    # shellcheck disable=SC2086
    /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$NF" image fit --force "$TMP/$set.train.h5" -o "$TMP/m.h5" --arch "$arch" \
        $MODEL "$@" --steps "$steps" --batch "$BATCH" --val-frac 0 --checkpoint-every 0 --eval-every 1000000 \
        --threads "$THREADS" --seed "$seed" --quiet 2>> "$TMP/err" || fail "nf image fit $set $arch failed"
    "$NF" image eval "$TMP/m.h5" "$TMP/$set.test.h5" --json > "$TMP/eval.json" 2>> "$TMP/err" || fail "nf image eval failed"
    rm -f "$TMP/m.h5"
    $PY - "$TMP/eval.json" "$TMP/time" "$set" "$arch" "$steps" "$seed" "$COND" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))
w, u, s = (float(v) for v in open(sys.argv[2]).read().split())
d = {"impl": "nf", "bench": "image_fit", "set": sys.argv[3], "arch": sys.argv[4], "steps": int(sys.argv[5]),
     "seed": int(sys.argv[6]),
     "test_images": e["images"], "bits_per_dim": e["bits_per_dim"],
     "bits_per_dim_stderr": e["bits_per_dim_stderr"], "fit_wall_s": w, "fit_cpu_s": u + s}
if sys.argv[7] == "1":
    d.update(conditional=True, accuracy=e.get("accuracy"))
print(json.dumps(d))
EOF
}
torch_fit() {  # SET ARCH STEPS SEED [extra flags]
    local set=$1 arch=$2 steps=$3 seed=$4
    shift 4
    # shellcheck disable=SC2086
    env OPENBLAS_NUM_THREADS=1 $PY bench/image_torch.py fit --data "$TMP/$set.train.h5" --test "$TMP/$set.test.h5" \
        --arch "$arch" $MODEL "$@" --steps "$steps" --batch "$BATCH" --threads "$THREADS" --seed "$seed" 2>> "$TMP/err" |
        $PY -c "import json, sys; d = json.loads(sys.stdin.read()); d['set'] = '$set'; print(json.dumps(d))" ||
        fail "image_torch.py fit $set $arch failed"
}

echo "image_targets: sets $SETS; archs $ARCHS; $STEPS steps (shapes $STEPS_SHAPES), batch $BATCH, $THREADS threads, seeds $SEEDS; model flags '$MODEL'${CFLAGS[*]:+; class-conditional: ${CFLAGS[*]}}" >&2
echo "image_targets: load average at start $(cut -d' ' -f1-3 /proc/loadavg)" >&2

if [ "$CHECK" = 1 ]; then
    "$NF" data make digits -o "$TMP/all.h5" >/dev/null 2>> "$TMP/err" || fail "nf data make digits failed"
    $PY - "$TMP/all.h5" "$TMP/d500.h5" "$COND" <<'EOF' || fail "could not write the 500-digit file"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    x = f["/x"]
    d = g.create_dataset("x", data=x[:500])
    for k, v in x.attrs.items():
        d.attrs[k] = v
    if sys.argv[3] == "1":  # the classes (one-hot /context and its names) for the conditional models
        g.create_dataset("context", data=f["/context"][:500])
        g.create_dataset("context_names", data=f["/context_names"][...])
EOF
    for a in "tarflow" "glow --scales 1 --depth 1"; do
        # shellcheck disable=SC2086
        "$NF" image fit --force "$TMP/d500.h5" -o "$TMP/m0.h5" --arch $a "${CFLAGS[@]}" --steps 1 --lr 1e-12 --noise 0 --val-frac 0 \
            --checkpoint-every 0 --threads "$THREADS" --quiet 2>> "$TMP/err" || fail "nf image fit (untrained $a) failed"
        nfb=$("$NF" image eval "$TMP/m0.h5" "$TMP/d500.h5" --json 2>> "$TMP/err") || fail "nf image eval (untrained) failed"
        # shellcheck disable=SC2086
        tb=$($PY bench/image_torch.py init-bpd --data "$TMP/d500.h5" --arch $a "${CFLAGS[@]}" --noise 0 --threads "$THREADS") ||
            fail "image_torch.py init-bpd failed"
        $PY -c "import json, sys; n = json.loads(sys.argv[1]); t = json.loads(sys.argv[2]); d = {'bench': 'image_init_bpd', 'arch': sys.argv[3], 'images': 500, 'nf_bits_per_dim': n['bits_per_dim'], 'torch_bits_per_dim': t['bits_per_dim'], 'difference': n['bits_per_dim'] - t['bits_per_dim']}; d.update({'conditional': True, 'torch_params': t['params']} if sys.argv[4] == '1' else {}); print(json.dumps(d))" \
            "$nfb" "$tb" "$a" "$COND" | tee -a "$OUTF" >&2
        rm -f "$TMP/m0.h5"
    done
    if [ "$COND" = 1 ]; then
        # at the start the class does not matter (zero-initialised couplings and outputs); this one
        # checks the context's way in: nf's weights after 60 steps, copied into the reference, give
        # nf image eval's bits/dim on nf's own dequantisation (image_torch.py nf-parity, float64)
        for a in glow tarflow; do
            "$NF" image fit --force "$TMP/d500.h5" -o "$TMP/m1.h5" --arch "$a" "${CFLAGS[@]}" --steps 60 --val-frac 0 \
                --checkpoint-every 0 --threads "$THREADS" --quiet 2>> "$TMP/err" || fail "nf image fit (60 steps, $a) failed"
            r=$($PY bench/image_torch.py nf-parity --nf-model "$TMP/m1.h5" --data "$TMP/d500.h5" --nf "$NF" \
                --threads "$THREADS" 2>> "$TMP/err") || fail "image_torch.py nf-parity $a: $r"
            echo "$r" | tee -a "$OUTF" >&2
            rm -f "$TMP/m1.h5"
        done
    fi
fi

for s in $SETS; do
    make_set "$s"
    st=$STEPS
    case "$s" in shapes*) st=$STEPS_SHAPES ;; esac
    for a in $ARCHS; do
        for seed in $SEEDS; do
            nf_fit "$s" "$a" "$st" "$seed" "${CFLAGS[@]}" >> "$OUTF"
            tail -1 "$OUTF" >&2
            torch_fit "$s" "$a" "$st" "$seed" "${CFLAGS[@]}" >> "$OUTF"
            tail -1 "$OUTF" >&2
        done
    done
done
echo "image_targets: load average at end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

$PY - "$OUTF" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if r.get("bench") == "image_init_bpd":
        print(f"untrained {r['arch']:26s} nf {r['nf_bits_per_dim']:.4f}  torch {r['torch_bits_per_dim']:.4f}  "
              f"difference {r['difference']:+.4f} bits/dim")
    if r.get("check") == "nf_parity":
        print(f"nf weights {r['arch']:7s} (60 steps)     nf {r['nf_bits_per_dim']:.6f}  torch {r['torch_bits_per_dim']:.6f}  "
              f"difference {r['difference']:+.1e} bits/dim (empty class {r.get('torch_bits_per_dim_empty_class', float('nan')):.4f})")
fits = [r for r in rows if r.get("bench") == "image_fit"]
if any(r.get("conditional") for r in fits):
    print("class-conditional models (label dropout in training; held-out bits/dim given the true class)")
print("set       arch     steps seeds  nf bits/dim  torch bits/dim  nf - torch (paired, +- se)  nf fit s  torch train s")
for s, a in sorted({(r["set"], r["arch"]) for r in fits}):
    nf = {r["seed"]: r for r in fits if (r["set"], r["arch"], r["impl"]) == (s, a, "nf")}
    th = {r["seed"]: r for r in fits if (r["set"], r["arch"], r["impl"]) == (s, a, "torch")}
    both = sorted(set(nf) & set(th))
    if not both:
        continue
    for k in both:
        acc = f" (nf likelihood-classifier accuracy {nf[k]['accuracy']:.3f})" if nf[k].get("accuracy") is not None else ""
        print(f"  seed {k}: nf {nf[k]['bits_per_dim']:.4f} +- {nf[k]['bits_per_dim_stderr']:.4f}, "
              f"torch {th[k]['bits_per_dim']:.4f} +- {th[k]['bits_per_dim_stderr']:.4f}{acc}")
    m = len(both)
    mn = sum(nf[k]["bits_per_dim"] for k in both) / m
    mt = sum(th[k]["bits_per_dim"] for k in both) / m
    d = [nf[k]["bits_per_dim"] - th[k]["bits_per_dim"] for k in both]
    md = sum(d) / m
    se = (sum((v - md) ** 2 for v in d) / (m - 1) / m) ** 0.5 if m > 1 else float("nan")
    ws = sum(nf[k]["fit_wall_s"] for k in both) / m
    wt = sum(th[k]["train_seconds"] for k in both) / m
    print(f"{s:9s} {a:8s} {nf[both[0]]['steps']:5d} {m:5d}  {mn:11.4f}  {mt:14.4f}  {md:+13.4f} +- {se:.4f}  "
          f"{ws:8.1f}  {wt:13.1f}")
EOF
