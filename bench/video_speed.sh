#!/usr/bin/env bash
# bench/video_speed.sh - training steps per second of `nf video fit` against the PyTorch reference
# (bench/video_torch.py), side by side (issue 14's target: nf at least 2x): the same videos
# (nf data make video-sprites -n 512: 16 frames of 32x32, 17 levels), the same batch (16), the same
# model (nf video fit's defaults: DCT blocks 8, keep 4; 2 frame-local TarFlow blocks of 1 layer, 1
# global causal block of 4 layers, each attention layer reading its own frame and the one before
# (--context 1; torch masks its dense attention the same way); width 64, 4 heads; latent noise 0.02),
# the same thread count.
# The parameter counts are checked equal (nf info of a 1-step nf model vs the torch model).
#
#   bash bench/video_speed.sh
#
# Environment: NF (the nf binary, build/float/nf), VID_THREADS ("1 2"), VID_ROUNDS (3), VID_STEPS
# (16), VID_BATCH (16), VID_N (512 videos), VID_MODEL (extra model flags for both, e.g.
# "--global-layers 2"), VID_PY (the Python with torch and h5py, /usr/bin/python3), VID_OUT (the JSON
# lines, bench/out/video_speed.jsonl).
#
# nf: two fits, WARM = 2 and WARM + STEPS steps (--val-frac 0 --checkpoint-every 0 --eval-every 0),
# timed from outside (/usr/bin/time); one step costs the difference over STEPS, so start-up, loading
# and saving cancel.  PyTorch: STEPS timed steps after WARM warm-up steps, in the process.  Both
# report wall-clock steps/s and CPU seconds (user + system, all threads) per step.  The machine is
# shared and noisy: the rounds alternate nf and PyTorch (and which goes first), and the summary gives
# the median of the per-round ratios, by wall clock and by CPU time (the robust one).
set -u
cd "$(dirname "$0")/.."
NF=${NF:-build/float/nf}
PY=${VID_PY:-/usr/bin/python3}
THREADS=${VID_THREADS:-1 2}
ROUNDS=${VID_ROUNDS:-3}
STEPS=${VID_STEPS:-16}
BATCH=${VID_BATCH:-16}
NVID=${VID_N:-512}
MODEL=${VID_MODEL:-}
WARM=2
OUTF=${VID_OUT:-bench/out/video_speed.jsonl}
# nf passive (what it sets for itself); PyTorch under its own default wait policy (`env -u` below:
# passive waiting halved its two-thread rate on a quiet machine; until 2026-12-07 it ran passive too)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUTF")"
: > "$OUTF"

"$NF" data make video-sprites -n "$NVID" -o "$TMP/v.h5" > /dev/null 2>> "$TMP/err" ||
    { echo "video_speed: nf data make video-sprites failed:" >&2; cat "$TMP/err" >&2; exit 1; }

# nf_fit STEPS THREADS: prints "wall user+sys" of one fit
nf_fit() {
    # shellcheck disable=SC2086
    /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$NF" video fit --force "$TMP/v.h5" -o "$TMP/m.h5" $MODEL \
        --steps "$1" --batch "$BATCH" --val-frac 0 --checkpoint-every 0 --eval-every 0 --threads "$2" --quiet \
        2>> "$TMP/err" || { echo "video_speed: nf video fit failed:" >&2; cat "$TMP/err" >&2; exit 1; }
    rm -f "$TMP/m.h5"
    awk '{print $1, $2 + $3}' "$TMP/time"
}
nf_run() {  # THREADS ROUND: one JSON line
    read -r w1 c1 < <(nf_fit "$WARM" "$1")
    read -r w2 c2 < <(nf_fit $((WARM + STEPS)) "$1")
    awk -v w1="$w1" -v w2="$w2" -v c1="$c1" -v c2="$c2" -v s="$STEPS" -v t="$1" -v r="$2" -v p="$PARAMS" 'BEGIN {
        dw = (w2 - w1) / s; dc = (c2 - c1) / s; if (dw <= 0) dw = 1e-9
        printf "{\"impl\": \"nf\", \"bench\": \"video_train\", \"params\": %d, \"threads\": %d, \"round\": %d, \"steps\": %d, \"steps_per_s\": %.4f, \"cpu_s_per_step\": %.4f}\n", p, t, r, s, 1 / dw, dc }'
}
torch_run() {  # THREADS ROUND
    # shellcheck disable=SC2086
    env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS=1 "$PY" bench/video_torch.py speed --data "$TMP/v.h5" $MODEL --batch "$BATCH" \
        --steps "$STEPS" --warmup "$WARM" --repeats 1 --threads "$1" --expect-params "$PARAMS" |
        "$PY" -c "import json, sys; d = json.loads(sys.stdin.read()); d['round'] = $2; print(json.dumps(d))"
}

# nf's parameter count of this configuration (a 1-step model), which the torch model must equal
# shellcheck disable=SC2086
"$NF" video fit --force "$TMP/v.h5" -o "$TMP/m1.h5" $MODEL --steps 1 --batch "$BATCH" --val-frac 0 --checkpoint-every 0 \
    --eval-every 0 --threads 1 --quiet 2>> "$TMP/err" || { echo "video_speed: nf video fit failed:" >&2; cat "$TMP/err" >&2; exit 1; }
PARAMS=$("$NF" info "$TMP/m1.h5" | awk '$1 == "parameters" {print $2}')
rm -f "$TMP/m1.h5"
if [ "${VID_CHECK:-0}" = 1 ]; then
    # likelihood parity: a model trained 60 steps (lr 5e-3, far from the identity start), nf's bits/dim
    # of 8 other videos against the torch model's on nf's weights and nf's keyed dequantisation
    # shellcheck disable=SC2086
    "$NF" video fit --force "$TMP/v.h5" -o "$TMP/mc.h5" $MODEL --steps 60 --lr 5e-3 --batch "$BATCH" --val-frac 0 \
        --checkpoint-every 0 --eval-every 0 --threads 2 --quiet 2>> "$TMP/err" &&
    "$NF" data make video-sprites -n 8 --seed 5 -o "$TMP/t.h5" > /dev/null 2>> "$TMP/err" &&
    "$NF" video eval "$TMP/mc.h5" "$TMP/t.h5" --json > "$TMP/nf_eval.json" 2>> "$TMP/err" &&
    "$PY" bench/video_torch.py check --model "$TMP/mc.h5" --data "$TMP/t.h5" --videos 8 > "$TMP/torch_eval.json" ||
        { echo "video_speed: the parity check failed:" >&2; cat "$TMP/err" >&2; exit 1; }
    "$PY" - "$TMP/nf_eval.json" "$TMP/torch_eval.json" <<'EOF' >&2
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
d = abs(a["bits_per_dim"] - b["bits_per_dim"])
print(f"video_speed: parity: nf {a['bits_per_dim']:.8f} bits/dim, torch on nf's weights {b['bits_per_dim']:.8f} "
      f"(difference {d:.2g}; {'ok' if d < 1e-4 else 'DIFFERENT'}), parameters {b['params']}")
EOF
    rm -f "$TMP/mc.h5" "$TMP/t.h5"
fi
echo "video_speed: $NVID video-sprites; batch $BATCH; model flags '${MODEL}'; nf parameters $PARAMS; threads $THREADS; $ROUNDS rounds of $STEPS steps; $("$PY" -c 'import torch; print("torch", torch.__version__)')" >&2
echo "video_speed: load average at start $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
        if [ $((r % 2)) = 1 ]; then nf_run "$t" "$r" >> "$OUTF"; torch_run "$t" "$r" >> "$OUTF"
        else torch_run "$t" "$r" >> "$OUTF"; nf_run "$t" "$r" >> "$OUTF"; fi
        tail -2 "$OUTF" >&2
        echo "video_speed: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    done
done
echo "video_speed: load average at end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

"$PY" - "$OUTF" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("threads  nf steps/s  torch steps/s  nf CPU s/step  torch CPU s/step  ratio (wall, median)  ratio (CPU, median)  rounds")
for t in sorted({r["threads"] for r in rows}):
    nf = {r["round"]: r for r in rows if r["threads"] == t and r["impl"] == "nf"}
    th = {r["round"]: r for r in rows if r["threads"] == t and r["impl"] == "torch"}
    both = sorted(set(nf) & set(th))
    if not both:
        continue
    wall = [nf[k]["steps_per_s"] / th[k]["steps_per_s"] for k in both]
    cpu = [th[k]["cpu_s_per_step"] / nf[k]["cpu_s_per_step"] for k in both if nf[k]["cpu_s_per_step"] > 0]
    med = lambda key, d: statistics.median(d[k][key] for k in both)
    print(f"{t:7d}  {med('steps_per_s', nf):10.3f}  {med('steps_per_s', th):13.3f}  {med('cpu_s_per_step', nf):13.3f}  "
          f"{med('cpu_s_per_step', th):16.3f}  {statistics.median(wall):20.2f}  "
          f"{statistics.median(cpu) if cpu else float('nan'):19.2f}  {len(both)}")
EOF
