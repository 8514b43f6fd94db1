#!/usr/bin/env bash
# make demo: fit the default flow to the checkerboard (true density known), evaluate it on held-out
# data, sample from it and draw it.  Everything lands in demo/.
set -euo pipefail
NF=${1:-build/float/nf}
mkdir -p demo
echo "== making the checkerboard data (train 100000, test 20000 points)"
"$NF" data make checkerboard -n 100000 --seed 1 -o demo/train.h5
"$NF" data make checkerboard -n 20000 --seed 2 -o demo/test.h5
echo "== fitting the default flow (nsf-coupling); progress below"
"$NF" fit demo/train.h5 -o demo/model.h5 --force ${NF_DEMO_FIT_ARGS:-}  # demo/ is the demo's own: a second make demo starts over
echo "== evaluating on the held-out test set"
"$NF" eval demo/model.h5 demo/test.h5
"$NF" sample demo/model.h5 -n 20000 --seed 3 -o demo/samples.h5
"$NF" plot demo/model.h5 --data demo/test.h5 -o demo/density.png
"$NF" plot --history demo/model.h5 -o demo/history.png
echo "demo: done - model demo/model.h5, samples demo/samples.h5, pictures demo/density.png and demo/history.png"
echo "demo: nf is $NF; for the README's \"Using nf\" commands put it on the PATH: export PATH=\"$(cd "$(dirname "$NF")" && pwd):\$PATH\""
