#!/usr/bin/env bash
# bench/image_speed.sh - training steps per second of `nf image fit` against the PyTorch reference
# (bench/image_torch.py), side by side: the same images, the same batch (64), the same model
# (nf's defaults unless set: glow 2 scales x 4 steps, hidden 64; tarflow patch 2, width 64, 4 heads,
# 2 layers, 4 blocks, noise 0.05; realnvp 2 scales, hidden 64), the same thread count.
#
#   bash bench/image_speed.sh
#
# Environment: NF (the nf binary, build/float/nf), IMG_SETS ("digits shapes16": nf data make digits,
# 8x8 with 17 levels, and nf data make shapes --size 16), IMG_ARCHS ("glow tarflow"), IMG_THREADS
# ("1 2"), IMG_ROUNDS (3), IMG_STEPS (16), IMG_BATCH (64), IMG_MODEL (extra model flags for both, e.g.
# "--hidden 32" or "--width 128"), IMG_OUT (the JSON lines, bench/out/image_speed.jsonl), IMG_PY (the
# Python with torch and h5py, /usr/bin/python3).
#
# nf: two fits, WARM = 2 and WARM + STEPS steps (--val-frac 0: every image trains, no validation,
# no checkpoint), timed from outside; one step costs the difference over STEPS, so start-up,
# loading, the actnorm start and saving cancel.  PyTorch: STEPS timed steps after WARM warm-up steps,
# in the process.  Both report wall-clock steps/s and CPU seconds (user + system) per step.  The
# machine is shared and noisy: the rounds alternate nf and PyTorch (and which goes first), and the
# summary gives the median of the per-round ratios, by wall clock and by CPU time.
set -u
cd "$(dirname "$0")/.."
NF=${NF:-build/float/nf}
PY=${IMG_PY:-/usr/bin/python3}   # IMG_PY=python3: the pip PyTorch instead of Debian's 1.13
SETS=${IMG_SETS:-digits shapes16}
ARCHS=${IMG_ARCHS:-glow tarflow}
THREADS=${IMG_THREADS:-1 2}
ROUNDS=${IMG_ROUNDS:-3}
STEPS=${IMG_STEPS:-16}
BATCH=${IMG_BATCH:-64}
MODEL=${IMG_MODEL:-}
WARM=2
OUTF=${IMG_OUT:-bench/out/image_speed.jsonl}
# nf passive (what it sets for itself); PyTorch under its own default wait policy (`env -u` below:
# passive waiting halved its two-thread rate on a quiet machine; until 2026-12-07 it ran passive too)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUTF")"
: > "$OUTF"

make_set() {  # NAME -> $TMP/NAME.h5
    case "$1" in
    digits) "$NF" data make digits -o "$TMP/$1.h5" ;;
    shapes16) "$NF" data make shapes --size 16 -o "$TMP/$1.h5" ;;
    shapes32) "$NF" data make shapes --size 32 -o "$TMP/$1.h5" ;;
    *) echo "image_speed: unknown set $1 (digits, shapes16, shapes32)" >&2; return 1 ;;
    esac >/dev/null 2>> "$TMP/err" || { echo "image_speed: nf data make $1 failed:" >&2; cat "$TMP/err" >&2; exit 1; }
}

# nf_fit SET ARCH STEPS THREADS: prints "wall user+sys" of one fit
nf_fit() {
    # shellcheck disable=SC2086
    /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$NF" image fit --force "$TMP/$1.h5" -o "$TMP/m.h5" --arch "$2" $MODEL \
        --steps "$3" --batch "$BATCH" --val-frac 0 --checkpoint-every 0 --eval-every 1000000 --threads "$4" --quiet \
        2>> "$TMP/err" || { echo "image_speed: nf image fit failed:" >&2; cat "$TMP/err" >&2; exit 1; }
    rm -f "$TMP/m.h5"
    awk '{print $1, $2 + $3}' "$TMP/time"
}
nf_run() {  # SET ARCH THREADS ROUND: one JSON line
    read -r w1 c1 < <(nf_fit "$1" "$2" "$WARM" "$3")
    read -r w2 c2 < <(nf_fit "$1" "$2" $((WARM + STEPS)) "$3")
    awk -v w1="$w1" -v w2="$w2" -v c1="$c1" -v c2="$c2" -v s="$STEPS" -v t="$3" -v r="$4" -v set="$1" -v a="$2" 'BEGIN {
        dw = (w2 - w1) / s; dc = (c2 - c1) / s; if (dw <= 0) dw = 1e-9
        printf "{\"impl\": \"nf\", \"bench\": \"image_train\", \"set\": \"%s\", \"arch\": \"%s\", \"threads\": %d, \"round\": %d, \"steps\": %d, \"steps_per_s\": %.4f, \"cpu_s_per_step\": %.4f}\n", set, a, t, r, s, 1 / dw, dc }'
}
torch_run() {  # SET ARCH THREADS ROUND
    # shellcheck disable=SC2086
    env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS=1 $PY bench/image_torch.py train --data "$TMP/$1.h5" --arch "$2" $MODEL --batch "$BATCH" \
        --steps "$STEPS" --warmup "$WARM" --repeats 1 --threads "$3" |
        $PY -c "import json, sys; d = json.loads(sys.stdin.read()); d['round'] = $4; d['set'] = '$1'; print(json.dumps(d))"
}

for s in $SETS; do make_set "$s"; done
echo "image_speed: sets $SETS; archs $ARCHS; batch $BATCH; model flags '${MODEL}'; threads $THREADS; $ROUNDS rounds of $STEPS steps" >&2
echo "image_speed: load average at start $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
    for s in $SETS; do
        for a in $ARCHS; do
            for t in $THREADS; do
                if [ $((r % 2)) = 1 ]; then nf_run "$s" "$a" "$t" "$r" >> "$OUTF"; torch_run "$s" "$a" "$t" "$r" >> "$OUTF"
                else torch_run "$s" "$a" "$t" "$r" >> "$OUTF"; nf_run "$s" "$a" "$t" "$r" >> "$OUTF"; fi
                tail -2 "$OUTF" >&2
            done
        done
    done
done
echo "image_speed: load average at end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

$PY - "$OUTF" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("set       arch     threads  nf steps/s  torch steps/s  ratio (wall, median)  ratio (CPU, median)  rounds")
keys = sorted({(r["set"], r["arch"], r["threads"]) for r in rows})
for s, a, t in keys:
    sel = [r for r in rows if (r["set"], r["arch"], r["threads"]) == (s, a, t)]
    nf = {r["round"]: r for r in sel if r["impl"] == "nf"}
    th = {r["round"]: r for r in sel if r["impl"] == "torch"}
    both = sorted(set(nf) & set(th))
    if not both:
        continue
    wall = [nf[k]["steps_per_s"] / th[k]["steps_per_s"] for k in both]
    cpu = [th[k]["cpu_s_per_step"] / nf[k]["cpu_s_per_step"] for k in both if nf[k]["cpu_s_per_step"] > 0]
    print(f"{s:9s} {a:8s} {t:7d}  {statistics.median(nf[k]['steps_per_s'] for k in both):10.3f}  "
          f"{statistics.median(th[k]['steps_per_s'] for k in both):13.3f}  {statistics.median(wall):20.2f}  "
          f"{statistics.median(cpu) if cpu else float('nan'):19.2f}  {len(both)}")
EOF
