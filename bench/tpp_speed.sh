#!/usr/bin/env bash
# bench/tpp_speed.sh - training steps per second of `nf tpp fit` against the PyTorch reference
# (bench/tpp_torch.py), side by side: the same data (all sequences of one shared set), the same batch
# (64 sequences, 65,536 events), the same model (GRU 64, lognormmix K = 64), the same thread count.
#
#   bash bench/tpp_speed.sh [SET.npy]      (default tests/data/tpp/hawkes1.npy)
#
# Environment: NF (the nf binary, build/float/nf), TPP_THREADS ("1 2"), TPP_ROUNDS (3), TPP_STEPS (8),
# TPP_OUT (the JSON lines, bench/out/tpp_speed.jsonl), TPP_PY (the Python of the reference, /usr/bin/python3).
#
# nf: two fits, WARM = 2 and WARM + STEPS steps (--val-frac 0: every sequence trains, no validation,
# no checkpoint), timed from outside; one step costs the difference over STEPS, so start-up, loading
# and saving cancel.  PyTorch: STEPS timed steps after WARM warm-up steps, in the process.  Both report
# wall-clock steps/s and CPU seconds (user + system) per step.  The machine is shared and noisy: the
# rounds alternate nf and PyTorch (and which goes first), and the summary gives the median of the
# per-round ratios, by wall clock and by CPU time (at one thread the CPU ratio is the one that other
# processes on the cores do not distort).
set -u
cd "$(dirname "$0")/.."
SET=${1:-tests/data/tpp/hawkes1.npy}
NF=${NF:-build/float/nf}
PY=${TPP_PY:-/usr/bin/python3}   # TPP_PY=python3: the pip PyTorch instead of Debian's 1.13
THREADS=${TPP_THREADS:-1 2}
ROUNDS=${TPP_ROUNDS:-3}
STEPS=${TPP_STEPS:-8}
WARM=2
OUTF=${TPP_OUT:-bench/out/tpp_speed.jsonl}
# nf passive (what it sets for itself); PyTorch under its own default wait policy (`env -u` below:
# passive waiting halved its two-thread rate on a quiet machine; until 2026-12-07 it ran passive too)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUTF")"
: > "$OUTF"

"$NF" tpp import "$SET" -o "$TMP/seq.h5" >/dev/null || { echo "tpp_speed: nf tpp import $SET failed" >&2; exit 1; }

# nf_fit STEPS THREADS: prints "wall user+sys" of one fit
nf_fit() {
    /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$NF" tpp fit --force "$TMP/seq.h5" -o "$TMP/m.h5" --steps "$1" --batch 64 \
        --hidden 64 --components 64 --val-frac 0 --checkpoint-every 0 --eval-every 1000000 --threads "$2" --quiet \
        2>> "$TMP/err" || { echo "tpp_speed: nf tpp fit failed:" >&2; cat "$TMP/err" >&2; exit 1; }
    awk '{print $1, $2 + $3}' "$TMP/time"
}
nf_run() {  # THREADS ROUND: one JSON line
    read -r w1 c1 < <(nf_fit "$WARM" "$1")
    read -r w2 c2 < <(nf_fit $((WARM + STEPS)) "$1")
    awk -v w1="$w1" -v w2="$w2" -v c1="$c1" -v c2="$c2" -v s="$STEPS" -v t="$1" -v r="$2" 'BEGIN {
        dw = (w2 - w1) / s; dc = (c2 - c1) / s; if (dw <= 0) dw = 1e-9
        printf "{\"impl\": \"nf\", \"bench\": \"tpp_train\", \"threads\": %d, \"round\": %d, \"steps\": %d, \"steps_per_s\": %.4f, \"cpu_s_per_step\": %.4f}\n", t, r, s, 1 / dw, dc }'
}
torch_run() {  # THREADS ROUND
    env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS=1 $PY bench/tpp_torch.py train --data "$SET" --batch 64 --hidden 64 --components 64 \
        --steps "$STEPS" --warmup "$WARM" --repeats 1 --threads "$1" |
        $PY -c "import json, sys; d = json.loads(sys.stdin.read()); d['round'] = $2; print(json.dumps(d))"
}

echo "tpp_speed: $SET, batch 64, GRU 64, K 64; threads: $THREADS; $ROUNDS rounds of $STEPS steps" >&2
echo "tpp_speed: load average at start $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
        if [ $((r % 2)) = 1 ]; then nf_run "$t" "$r" >> "$OUTF"; torch_run "$t" "$r" >> "$OUTF"
        else torch_run "$t" "$r" >> "$OUTF"; nf_run "$t" "$r" >> "$OUTF"; fi
        tail -2 "$OUTF" >&2
    done
done
echo "tpp_speed: load average at end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

$PY - "$OUTF" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("threads  nf steps/s  torch steps/s  ratio (wall, median)  ratio (CPU, median)  rounds")
for t in sorted({r["threads"] for r in rows}):
    nf = {r["round"]: r for r in rows if r["threads"] == t and r["impl"] == "nf"}
    th = {r["round"]: r for r in rows if r["threads"] == t and r["impl"] == "torch"}
    both = sorted(set(nf) & set(th))
    if not both:
        continue
    wall = [nf[k]["steps_per_s"] / th[k]["steps_per_s"] for k in both]
    cpu = [th[k]["cpu_s_per_step"] / nf[k]["cpu_s_per_step"] for k in both if nf[k]["cpu_s_per_step"] > 0]
    print(f"{t:7d}  {statistics.median(nf[k]['steps_per_s'] for k in both):10.3f}  "
          f"{statistics.median(th[k]['steps_per_s'] for k in both):13.3f}  {statistics.median(wall):20.2f}  "
          f"{statistics.median(cpu) if cpu else float('nan'):19.2f}  {len(both)}")
EOF
