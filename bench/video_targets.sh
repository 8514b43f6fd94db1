#!/usr/bin/env bash
# bench/video_targets.sh - issue 14's quality targets for nf video on video-sprites:
#   1. held-out bits/dim of the video model against the frame-independent baseline of the same size
#      (nf video fit --independent): time should help;
#   2. video-aware Jacobi against token-by-token decoding: passes, wall time, largest difference;
#   3. coherent motion: the per-frame displacement of the sprite's centre of mass in sampled videos
#      against the test videos' (two-sample KS, bench/video_motion.py), and a GIF of samples.
# Usage: NF=build/float/nf [VT_STEPS=800] [VT_N=1000] [VT_LR=1e-3] [VT_OUT=bench/out/video] bash bench/video_targets.sh
# Results: $VT_OUT/*.json and the lines printed at the end (copied into bench/RESULTS.md by hand).
set -eu
NF=${NF:-build/float/nf}
NF=$(cd "$(dirname "$NF")" && pwd)/$(basename "$NF")
STEPS=${VT_STEPS:-800}
LR=${VT_LR:-1e-3}
N=${VT_N:-1000}
OUT=${VT_OUT:-bench/out/video}
PY=/usr/bin/python3
ROOT=$(pwd)
mkdir -p "$OUT"
cd "$OUT"
"$NF" data make video-sprites -n "$N" --seed 1 -o sprites.h5 >/dev/null
"$NF" data split sprites.h5 --test 0.1 --val 0 --seed 2 >/dev/null
FIT=(--steps "$STEPS" --batch 16 --lr "$LR" --eval-every 100 --val-frac 0.1 --threads 1 --seed 3 --quiet)
start=$(date +%s)
"$NF" video fit --force sprites.train.h5 "${FIT[@]}" -o video.h5 &
p1=$!
"$NF" video fit --force sprites.train.h5 "${FIT[@]}" --independent -o independent.h5 &
p2=$!
wait $p1 $p2
echo "fits: $(( $(date +%s) - start )) s for two fits of $STEPS steps, side by side"
"$NF" video eval video.h5 sprites.test.h5 --json >eval_video.json
"$NF" video eval independent.h5 sprites.test.h5 --json >eval_independent.json
# the paired difference, video by video (far tighter than the two standard errors)
"$NF" video eval video.h5 sprites.test.h5 --compare independent.h5 --json >eval_paired.json
# sampling: token by token against video-aware Jacobi (the same latents), 16 videos
for tol in 1e-3 1e-4; do
    "$NF" video sample video.h5 -n 16 --seed 5 --method jacobi --tol $tol --compare -o jacobi_$tol.png --json \
        >"jacobi_$tol.json"
    "$NF" video sample video.h5 -n 16 --seed 5 --method jacobi --tol $tol --whole --compare -o whole_$tol.png \
        --json >"whole_$tol.json"
done
# samples for the motion statistics and the pictures
"$NF" video sample video.h5 -n 100 --seed 7 -o samples.png --h5 samples.h5 --json >sample.json
"$NF" video sample video.h5 -n 9 --seed 8 --scale 3 -o samples.gif >/dev/null 2>&1
"$NF" video sample video.h5 -n 4 --given 4 --from sprites.test.h5 --seed 9 --scale 3 -o continued.gif >/dev/null 2>&1
"$NF" video sample video.h5 -n 4 --given 4 --from sprites.test.h5 --seed 9 -o continued.png >/dev/null 2>&1
"$PY" "$ROOT/bench/video_motion.py" sprites.test.h5 samples.h5 --codec 8 4 >motion.json   # nf video fit's codec
echo "== results ($OUT)"
for f in eval_video.json eval_independent.json eval_paired.json jacobi_1e-3.json jacobi_1e-4.json whole_1e-3.json whole_1e-4.json motion.json; do
    echo "$f: $(cat "$f")"
done
