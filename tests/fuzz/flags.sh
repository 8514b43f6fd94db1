#!/usr/bin/env bash
# tests/fuzz/flags.sh - every numeric flag of the main commands at extreme values (a sweep, not part
# of `make check`: about 4 minutes).
#
#   NF=build/float/nf bash tests/fuzz/flags.sh
#
# Small inputs of each kind are made in a temporary folder (moons, event sequences, causal units,
# digits, bouncing balls, and a model of each).  Then each command that reads them (nf fit, tpp fit,
# causal fit, image fit for Glow and TarFlow, video fit, the samplers, eval, data make) runs with one
# numeric flag after its usual arguments, at each of 0, -1, 1e9, nan, abc, 2.5 and 99999999999.  It
# must work, or exit 1 or 2 with one line on stderr starting "nf ": anything else (a crash, more
# lines) is printed as FAIL and makes the exit status 1.  A run past 15 s is printed as LONG (a value
# taken as asked, such as 10^11 steps) and does not fail.  String flags (specs, paths, names) are
# left to the command scripts of tests/cli.
set -u
if [ -z "${NF:-}" ]; then
    echo "NF is not set (expected the path of the nf binary, e.g. NF=build/float/nf)" >&2
    exit 2
fi
case $NF in /*) ;; *) NF=$PWD/$NF ;; esac
W=$(mktemp -d "${TMPDIR:-/tmp}/nf_flags.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 2

make_input() {
    if ! timeout 120 "$NF" "$@" >/dev/null 2>err.txt; then
        echo "cannot make the inputs: nf $*: $(head -c 200 err.txt)" >&2
        exit 2
    fi
}
TINY_FLOW="2*(affine-coupling(hidden=8), permute(order=reverse))"
make_input data make moons -n 200 --seed 1 -o moons.h5
make_input fit moons.h5 --flow "$TINY_FLOW" --steps 3 --threads 1 --quiet -o density.h5
make_input data make tpp-poisson --rate 3 -n 8 --t-end 10 --seed 3 -o seq.h5
make_input tpp fit seq.h5 --hidden 8 --batch 4 --steps 3 --threads 1 --quiet -o tpp.h5
make_input data make causal-poly --shift 2 -n 100 --seed 3 -o poly.h5
make_input data make digits -o digits.h5
make_input image fit digits.h5 --arch tarflow --conditional --patch 2 --width 8 --heads 2 --layers 1 --blocks 1 \
    --batch 16 --steps 2 --val-frac 0 --threads 1 --quiet -o tarflow.h5
make_input data make video-balls -n 16 --frames 4 --size 16 --seed 2 -o balls.h5
make_input video fit balls.h5 --block 4 --keep 2 --local-blocks 1 --global-layers 1 --width 8 --heads 2 --batch 8 \
    --steps 2 --val-frac 0 --threads 1 --quiet -o video.h5

STRING_FLAGS=" --flow --activation --target --optimizer --schedule --dataset --dependence --kinship --val --decoder
 --rnn --arch --dequant --codec --from --history --h5 --context --context-value --method --denoise --resume
 --align-layers --groups "
# The flags of a command that take a value, from its --help.
flags_of() { "$NF" "$@" --help 2>&1 | grep -oE '^ +--[a-z0-9-]+ +[A-Z][A-Z0-9_]*' | awk '{print $1}'; }

failed=0 runs=0
# sweep NAME "FLAGS" ARGS...: nf ARGS FLAG VALUE for each numeric flag and value.
sweep() {
    local name=$1 flags=$2 f v rc lines
    shift 2
    for f in $flags; do
        case $STRING_FLAGS in *" $f "*) continue ;; esac
        for v in 0 -1 1e9 nan abc 2.5 99999999999; do
            rm -f o.h5 s.h5 s.gif s.png d.h5
            timeout -k 2 15 "$NF" "$@" "$f" "$v" >/dev/null 2>err.txt </dev/null
            rc=$?
            runs=$((runs + 1))
            lines=$(wc -l <err.txt)
            if [ "$rc" = 0 ]; then
                :
            elif { [ "$rc" = 1 ] || [ "$rc" = 2 ]; } && [ "$lines" = 1 ] && [ "$(head -c 3 err.txt)" = "nf " ]; then
                :
            elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
                echo "LONG  $name $f $v"
            else
                echo "FAIL  $name $f $v: exit $rc, $lines lines: $(head -c 250 err.txt | tr '\n' '|')"
                failed=$((failed + 1))
            fi
        done
    done
}
sweep fit "$(flags_of fit)" fit moons.h5 --flow "$TINY_FLOW" --steps 2 --val-frac 0 --threads 1 --quiet -o o.h5
sweep "tpp fit" "$(flags_of tpp fit)" tpp fit seq.h5 --hidden 8 --batch 4 --steps 2 --threads 1 --quiet -o o.h5
sweep "causal fit" "$(flags_of causal fit)" causal fit poly.h5 --repr 4 --hidden 8 --grid 32 --steps 2 --threads 1 --quiet -o o.h5
sweep "image fit (glow)" "$(flags_of image fit)" image fit digits.h5 --scales 1 --depth 1 --hidden 8 --batch 16 --steps 2 \
    --val-frac 0 --threads 1 --quiet -o o.h5
sweep "image fit (tarflow)" "--patch --width --heads --layers --blocks --label-drop" image fit digits.h5 --arch tarflow \
    --conditional --patch 2 --width 8 --heads 2 --layers 1 --blocks 1 --batch 16 --steps 2 --val-frac 0 --threads 1 --quiet -o o.h5
sweep "video fit" "$(flags_of video fit)" video fit balls.h5 --block 4 --keep 2 --local-blocks 1 --global-layers 1 --width 8 \
    --heads 2 --batch 8 --steps 2 --val-frac 0 --threads 1 --quiet -o o.h5
sweep "video sample" "$(flags_of video sample) -n" video sample video.h5 -n 2 --threads 1 -o s.gif
sweep "image sample" "$(flags_of image sample) -n" image sample tarflow.h5 -n 2 --class 1 --threads 1 -o s.png
sweep "tpp sample" "$(flags_of tpp sample) -n" tpp sample tpp.h5 -n 2 --t-end 5 --threads 1 -o s.h5
sweep sample "$(flags_of sample) -n" sample density.h5 -n 5 --threads 1 -o s.h5
sweep eval "$(flags_of eval)" eval density.h5 moons.h5 --threads 1
sweep "data make video-balls" "--frames --size -n" data make video-balls -n 4 --threads 1 -o d.h5
sweep "data make shapes" "--size -n" data make shapes -n 4 --threads 1 -o d.h5
echo "flags: $runs runs, $failed failed"
[ "$failed" = 0 ]
