#!/usr/bin/env bash
# bench/video_codec.sh - the video model's two latent codecs on video-sprites at the same latent size
# (32 x 32 frames, block 8, keep 4: 4 x 4 latent pixels of 16 values, 256 a frame): the block DCT
# (fixed) against the learned convolutional autoencoder (nf video fit --codec ae: a stage "codec" of
# VC_STEPS steps, then the flow's stage of VC_STEPS steps).  Reports the held-out reconstruction
# error (RMS, grey levels) of both and the bits/dim of each model (the DCT's per kept coefficient, the
# autoencoder's per latent value: not comparable with each other).
# Usage: NF=build/float/nf [VC_STEPS=1000] [VC_N=1000] [VC_OUT=bench/out/video_codec] bash bench/video_codec.sh
set -eu
NF=${NF:-build/float/nf}
NF=$(cd "$(dirname "$NF")" && pwd)/$(basename "$NF")
STEPS=${VC_STEPS:-1000}
N=${VC_N:-1000}
OUT=${VC_OUT:-bench/out/video_codec}
mkdir -p "$OUT"
rm -f "$OUT/dct.h5" "$OUT/ae.h5" "$OUT"/sprites*.h5
cd "$OUT"
"$NF" data make video-sprites -n "$N" --seed 1 -o sprites.h5 >/dev/null
"$NF" data split sprites.h5 --test 0.1 --val 0 --seed 2 >/dev/null
FIT=(--steps "$STEPS" --batch 16 --eval-every 100 --val-frac 0.1 --threads 1 --seed 3 --quiet)
start=$(date +%s)
"$NF" video fit --force sprites.train.h5 "${FIT[@]}" -o dct.h5 &
p1=$!
"$NF" video fit --force sprites.train.h5 "${FIT[@]}" --codec ae -o ae.h5 &
p2=$!
wait $p1 $p2
echo "fits: $(( $(date +%s) - start )) s, side by side (the DCT model $STEPS steps; the autoencoder's $STEPS + $STEPS)"
"$NF" video eval dct.h5 sprites.test.h5 --json >eval_dct.json
"$NF" video eval ae.h5 sprites.test.h5 --json >eval_ae.json
"$NF" video sample ae.h5 -n 4 --given 4 --from sprites.test.h5 --seed 9 -o ae_continued.png >/dev/null 2>&1
echo "== results ($OUT)"
for f in eval_dct.json eval_ae.json; do echo "$f: $(cat "$f")"; done
