#!/usr/bin/env bash
# bench/causal_speed.sh - training time of both stages of `nf causal fit` against the PyTorch
# reference (bench/causal_torch.py) with the same model, data and settings: causal-poly (b = 2,
# 1000 units), batch 64, grid 200, STEPS Adam steps per stage, no validation, one thread each.
#
#   bash bench/causal_speed.sh            (NF: the nf binary, build/float/nf; CAUSAL_STEPS 500;
#                                          CAUSAL_ROUNDS 3; CAUSAL_OUT bench/out/causal_speed.jsonl)
#
# Both report CPU seconds (user + system) of the whole run; the machine is shared, so CPU time is
# the figure other processes do not distort, and the rounds alternate the two.  The summary is the
# median over rounds of torch CPU / nf CPU.  nf keeps each training unit's nuisance grid values
# across steps (the nuisance is fixed in stage 2); the reference recomputes them every step, as a
# straightforward PyTorch implementation does.
set -u
cd "$(dirname "$0")/.." || exit 1
NF=${NF:-build/float/nf}
PY=/usr/bin/python3
STEPS=${CAUSAL_STEPS:-500}
ROUNDS=${CAUSAL_ROUNDS:-3}
OUTF=${CAUSAL_OUT:-bench/out/causal_speed.jsonl}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUTF")"
: >"$OUTF"
"$NF" data make causal-poly --shift 2 -n 1000 --seed 1 -o "$TMP/poly.h5" 2>/dev/null ||
    { echo "causal_speed: nf data make failed" >&2; exit 1; }
for r in $(seq 1 "$ROUNDS"); do
    /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$NF" causal fit --force "$TMP/poly.h5" --steps "$STEPS" --batch 64 --grid 200 \
        --val-frac 0 --checkpoint-every 0 --eval-every 0 --threads 1 --quiet -o "$TMP/m.h5" ||
        { echo "causal_speed: nf causal fit failed" >&2; exit 1; }
    read -r wall user sys <"$TMP/time"
    printf '{"impl": "nf", "round": %d, "steps": %d, "seconds": %.2f, "cpu_seconds": %.2f}\n' "$r" "$STEPS" "$wall" \
        "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" >>"$OUTF"
    $PY bench/causal_torch.py "$TMP/poly.h5" --steps "$STEPS" --threads 1 | sed "s/^{/{\"round\": $r, /" >>"$OUTF" ||
        { echo "causal_speed: the PyTorch reference failed" >&2; exit 1; }
done
$PY - "$OUTF" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
nf = {r["round"]: r["cpu_seconds"] for r in rows if r["impl"] == "nf"}
pt = {r["round"]: r["cpu_seconds"] for r in rows if r["impl"] == "torch"}
ratios = [pt[k] / nf[k] for k in nf if k in pt]
print("causal_speed: %d steps per stage; CPU s nf %s, torch %s; median torch/nf %.1fx" % (
    rows[0]["steps"], [round(nf[k], 2) for k in sorted(nf)], [round(pt[k], 2) for k in sorted(pt)],
    statistics.median(ratios)))
PY
