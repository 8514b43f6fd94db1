#!/usr/bin/env bash
# bench/image_align.sh - the reverse-alignment target of issue 13: the number of steps a TarFlow
# trained with reverse representation alignment (nf image fit --align) needs to reach the final
# held-out bits/dim of the same model trained without it, and the accuracy of the likelihood
# classifier (nf image eval) with and without alignment.
#
#   bash bench/image_align.sh
#
# Data: `nf data make digits` (1,797 8x8 images, 17 levels, 10 classes), split once by
# `nf data split --test 0.2 --val 0 --seed 1`.  Every arm fits the same class-conditional TarFlow
# (ALIGN_MODEL) on the train part with the same seed, steps, batch, learning rate and cosine
# schedule, holding out --val-frac 0.1 of it for validation every 25 steps (--patience 0: no early
# stop).  The flow's initial weights are the same in every arm (the aligned model builds its flow
# from the same seed).  Arm "none" is the unaligned model; an arm "0" or "0,1" aligns those
# generative blocks (0 = the block sampling runs first) with weight ALIGN_WEIGHT, after an encoder
# stage of the same number of steps (not counted: it trains a 20k-parameter classifier only); an
# arm "LAYERS:W" uses weight W instead, and "0:0" is the control: the same two stages (so the same
# batches as the aligned arms) with no alignment gradient.
# Reported per seed and arm: the held-out (validation) bits/dim at the end, the first validation step
# at which the arm is at or below the unaligned model's final validation bits/dim ("steps to
# baseline"; the unaligned model itself gets there at its last evaluation or earlier), the test
# bits/dim and the likelihood classifier's test accuracy, and for aligned arms the frozen encoder's
# accuracy as a classifier (for scale).  Lines of JSON go to ALIGN_OUT/results.jsonl.
#
# Measured 2026-12-03 (float build, 400 steps, weight 0.5; seeds 1-3 with the defaults, seeds 4-5 with
# ALIGN_SEEDS="4 5" ALIGN_ARMS="none 0 0:0 0:1"): aligning generative block 0 reached the unaligned
# model's final validation bits/dim after 231, 350, 300, 273, 300 steps (mean 291; unaligned: 382,
# its own last evaluations), test bits/dim 2.846 vs 2.877 (paired -0.030 +- 0.014), likelihood
# classifier accuracy 0.889 vs 0.834 (paired +0.055 +- 0.006, higher on every seed); the control 0:0
# changed neither (+0.001 bits/dim, +0.002 accuracy); aligning blocks 0,1 was worse (+0.022 bits/dim).
#
# Environment (defaults: about 17 minutes on 2 busy cores):
#   NF (build/float/nf), ALIGN_STEPS (400), ALIGN_SEEDS ("1 2 3"), ALIGN_ARMS ("none 0 0,1 0:0"),
#   ALIGN_WEIGHT (0.5), ALIGN_THREADS (1), ALIGN_MODEL (the flow flags below),
#   ALIGN_OUT (bench/out/image_align).
set -u
cd "$(dirname "$0")/.." || exit 1
NF=${NF:-build/float/nf}
PY=/usr/bin/python3
STEPS=${ALIGN_STEPS:-400}
SEEDS=${ALIGN_SEEDS:-1 2 3}
ARMS=${ALIGN_ARMS:-none 0 0,1 0:0}
WEIGHT=${ALIGN_WEIGHT:-0.5}
THREADS=${ALIGN_THREADS:-1}
MODEL=${ALIGN_MODEL:---arch tarflow --conditional --patch 2 --width 32 --heads 4 --layers 2 --blocks 4}
OUT=${ALIGN_OUT:-bench/out/image_align}
[ -x "$NF" ] || { echo "image_align: $NF not built (make B=$(dirname "$NF"))" >&2; exit 1; }
mkdir -p "$OUT"
rm -f "$OUT"/digits*.h5 "$OUT"/m_*.h5 "$OUT/results.jsonl"
if ! "$NF" data make digits -o "$OUT/digits.h5" >/dev/null 2>&1 ||
    ! "$NF" data split "$OUT/digits.h5" --test 0.2 --val 0 --seed 1 >/dev/null 2>&1; then
    echo "image_align: cannot make the digits" >&2
    exit 1
fi

# shellcheck disable=SC2086
for seed in $SEEDS; do
    for arm in $ARMS; do
        m="$OUT/m_$(tr ',:' '-w' <<<"$arm")_s$seed.h5"
        layers=${arm%%:*} w=$WEIGHT
        [ "$layers" = "$arm" ] || w=${arm#*:}
        [ "$arm" = none ] && w=0
        extra=()
        [ "$arm" = none ] || extra=(--align --align-layers "$layers" --align-weight "$w")
        t0=$(date +%s.%N)
        if ! "$NF" image fit --force "$OUT/digits.train.h5" $MODEL --batch 64 --lr 2e-3 --steps "$STEPS" --eval-every 25 \
            --patience 0 --val-frac 0.1 --threads "$THREADS" --seed "$seed" "${extra[@]}" -o "$m" 2>"$m.log" >/dev/null; then
            echo "image_align: fit failed for arm $arm, seed $seed: $(tail -n 1 "$m.log")" >&2
            continue
        fi
        t1=$(date +%s.%N)
        ev=$("$NF" image eval "$m" "$OUT/digits.test.h5" --json 2>&1)
        enc=$(sed -n 's/.*the frozen encoder classifies \([0-9.]*\)%.*/\1/p' "$m.log")
        echo "{\"seed\": $seed, \"arm\": \"$arm\", \"weight\": $w, \"steps\": $STEPS, \"wall\": $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'), \"encoder_val_accuracy_pct\": \"${enc}\", \"model\": \"$m\", \"test\": $ev}" >>"$OUT/results.jsonl"
    done
done

"$PY" - "$OUT/results.jsonl" <<'EOF'
import json, sys
import h5py

rows = [json.loads(l) for l in open(sys.argv[1])]

def history(path):
    with h5py.File(path, "r") as f:
        g = f["/training/checkpoint/history"]  # the last stage's: the flow's
        return list(g["step"][:]), [-v for v in g["val_log_likelihood"][:]]

final = {}
for r in rows:
    r["steps_hist"], r["val_bpd"] = history(r["model"])
    if r["arm"] == "none":
        final[r["seed"]] = r["val_bpd"][-1]
print("%-5s %-6s %10s %18s %10s %10s %10s %8s" % ("seed", "arm", "val bpd", "steps to baseline", "test bpd",
                                                  "test acc", "encoder", "wall s"))
for r in rows:
    target = final.get(r["seed"])
    reach = next((s for s, v in zip(r["steps_hist"], r["val_bpd"]) if target is not None and v <= target), None)
    r["steps_to_baseline"] = reach
    print("%-5s %-6s %10.4f %18s %10.4f %10.4f %10s %8.1f" % (r["seed"], r["arm"], r["val_bpd"][-1],
          "-" if reach is None else "%d" % reach, r["test"]["bits_per_dim"], r["test"]["accuracy"],
          (r["encoder_val_accuracy_pct"] + "%") if r["encoder_val_accuracy_pct"] else "-", r["wall"]))
arms = sorted({r["arm"] for r in rows}, key=lambda a: (a != "none", a))
print("\nmeans over seeds")
for a in arms:
    rs = [r for r in rows if r["arm"] == a]
    reached = [r["steps_to_baseline"] for r in rs if r["steps_to_baseline"] is not None]
    print("%-6s val bpd %.4f  test bpd %.4f  test acc %.4f  steps to baseline %s (%d of %d seeds reach it)" % (
        a, sum(r["val_bpd"][-1] for r in rs) / len(rs), sum(r["test"]["bits_per_dim"] for r in rs) / len(rs),
        sum(r["test"]["accuracy"] for r in rs) / len(rs),
        "%.0f" % (sum(reached) / len(reached)) if reached else "-", len(reached), len(rs)))
EOF
