#!/usr/bin/env bash
# make demo-tpp: an intensity-free point process on one shared benchmark set whose generating process
# is known (hawkes1 by default; the copies in tests/data/tpp): import it with the truth, split it
# 60/20/20 by whole sequences, fit a LogNormMix model for a modest number of steps, and evaluate it on
# the held-out test sequences: the model's NLL, the true process's NLL and the gap.  Everything lands
# in demo/tpp/.  About a minute on 2 cores.
#   NF_DEMO_TPP_SET=renewal    another of the five sets (hawkes1 hawkes2 poisson renewal self_correcting)
#   NF_DEMO_TPP_FIT_ARGS=...   more nf tpp fit options (--steps 2000 for the full default training)
set -euo pipefail
NF=${1:-build/float/nf}
SET=${NF_DEMO_TPP_SET:-hawkes1}
DATA=tests/data/tpp/$SET.npy
OUT=demo/tpp
mkdir -p "$OUT"
rm -f "$OUT/model.h5"
echo "== importing $DATA (64 sequences of 1,024 events) with its generating process, $SET"
"$NF" tpp import "$DATA" --true-process "$SET" -o "$OUT/$SET.h5"
echo "== splitting by whole sequences: 60% train, 20% validation, 20% test"
"$NF" data split "$OUT/$SET.h5" --val 0.2 --test 0.2 --seed 1 -o "$OUT/$SET"
echo "== fitting a LogNormMix decoder on a GRU history (a short run; progress below)"
# shellcheck disable=SC2086  # the extra arguments are words
"$NF" tpp fit --force "$OUT/$SET.train.h5" --decoder lognormmix --hidden 32 --components 16 --batch 16 --steps 200 \
    --eval-every 50 --threads "${NF_DEMO_THREADS:-2}" --seed 1 -o "$OUT/model.h5" ${NF_DEMO_TPP_FIT_ARGS:-}
echo "== the held-out test sequences: model NLL, true NLL and the gap (model - truth)"
"$NF" tpp eval "$OUT/model.h5" "$OUT/$SET.test.h5"
# pictures and simulated sequences, where this nf has them
if "$NF" tpp --help 2>/dev/null | grep -q '^  sample '; then
    echo "== simulating 13 sequences from the model"
    "$NF" tpp sample "$OUT/model.h5" -n 13 --t-end 1000 --seed 2 --threads "${NF_DEMO_THREADS:-2}" \
        -o "$OUT/sampled.h5" ||
        echo "demo-tpp: nf tpp sample failed (see above); going on"
fi
if "$NF" tpp --help 2>/dev/null | grep -q '^  plot '; then
    echo "== drawing the model against the test sequences"
    "$NF" tpp plot "$OUT/model.h5" "$OUT/$SET.test.h5" --threads "${NF_DEMO_THREADS:-2}" -o "$OUT/tpp.png" ||
        echo "demo-tpp: nf tpp plot failed (see above); going on"
fi
echo "demo-tpp: done - data $OUT/$SET.{train,val,test}.h5, model $OUT/model.h5$([ -e "$OUT/tpp.png" ] && echo ", picture $OUT/tpp.png")"
