#!/usr/bin/env bash
# bench/image_jacobi.sh - TarFlow Jacobi sampling against token-by-token decoding (issue 13's target:
# at least 4x fewer sequential passes than tokens, largest difference to the token-by-token samples
# below 1e-3), for one or more trained models.
#
#   bash bench/image_jacobi.sh MODEL.h5 [MODEL.h5 ...]
#   JAC_TRAIN=1 bash bench/image_jacobi.sh        fit the models of bench/RESULTS.md first (long):
#       nf data make shapes --size $JAC_SIZE -n 3000; nf data split --test 0.2 --val 0 --seed 1;
#       nf image fit --arch tarflow with --blocks B --layers L for B x L in $JAC_ARCHS (4x2, nf's
#       default, and 12x1), one thread each, and $JAC_FIT (the 32x32 models of RESULTS: JAC_SIZE=32
#       JAC_FIT="--steps 600 --val-frac 0"); the test bits/dim of each
#
# For each model and sample seed in $JAC_SEEDS: `nf image sample -n 64 --method sequential` (one
# pass per token per block: the passes Jacobi is measured against) and `--method jacobi --tol T` for
# each T in $JAC_TOLS, then the largest |difference| of the two samples relative to the level range
# (tests/cli/h5reldiff.c).  One line per (model, seed, tol): passes in all and per block in sampling
# order, tokens / passes, the difference; then per (model, tol) the worst draw.
#
# Environment: NF (build/float/nf), JAC_SEEDS (1 2 3 4 5 6 7 8), JAC_TOLS (1e-4 3e-5), JAC_N (64),
# JAC_TRAIN (0), JAC_SIZE (16), JAC_ARCHS ("4x2 12x1"), JAC_FIT (extra fit flags, none), JAC_DIR
# (bench/out/jacobi: data, models, samples).
set -u
cd "$(dirname "$0")/.."
NF=${NF:-build/float/nf}
SEEDS=${JAC_SEEDS:-1 2 3 4 5 6 7 8}
TOLS=${JAC_TOLS:-1e-4 3e-5}
N=${JAC_N:-64}
DIR=${JAC_DIR:-bench/out/jacobi}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mkdir -p "$DIR"
say() { printf 'image_jacobi: %s\n' "$*" >&2; }
if ! gcc -O1 -o "$DIR/h5reldiff" tests/cli/h5reldiff.c $(pkg-config --cflags --libs hdf5-serial) -lm; then
    say "building tests/cli/h5reldiff.c failed (HDF5's serial build: bash scripts/deps.sh)"; exit 1
fi

MODELS=("$@")
if [ "${JAC_TRAIN:-0}" = 1 ]; then
    sz=${JAC_SIZE:-16}
    "$NF" data make shapes --size "$sz" -n 3000 -o "$DIR/s$sz.h5" > /dev/null &&
        "$NF" data split "$DIR/s$sz.h5" --test 0.2 --val 0 --seed 1 > /dev/null || exit 1
    for a in ${JAC_ARCHS:-4x2 12x1}; do
        m=$DIR/t${sz}_$a.h5
        say "fitting $m (--blocks ${a%x*} --layers ${a#*x} ${JAC_FIT:-}, one thread)"
        # shellcheck disable=SC2086
        "$NF" image fit --force "$DIR/s$sz.train.h5" --arch tarflow --blocks "${a%x*}" --layers "${a#*x}" --threads 1 \
            ${JAC_FIT:-} --quiet -o "$m" > "$m.fit.log" 2>&1 || { say "fit failed (see $m.fit.log)"; exit 1; }
        say "$m: test $("$NF" image eval "$m" "$DIR/s$sz.test.h5" | grep bits/dim)"
        MODELS+=("$m")
    done
fi
[ ${#MODELS[@]} -gt 0 ] || { say "no model: give MODEL.h5 files or set JAC_TRAIN=1"; exit 2; }

json() { grep -o "\"$2\": *[^,}]*" "$1" | head -1 | sed 's/.*: *//'; }
printf '| model | seed | --tol | passes (per block, sampling order) | tokens / passes | max difference to token by token |\n'
printf '|---|---|---|---|---|---|\n'
for m in "${MODELS[@]}"; do
    b=$(basename "$m" .h5)
    for s in $SEEDS; do
        "$NF" image sample "$m" -n "$N" --seed "$s" --method sequential --h5 "$DIR/$b.seq$s.h5" -o "$DIR/$b.seq$s.png" \
            --json > "$DIR/$b.seq$s.json" || { say "$m: sequential sampling failed"; exit 1; }
        tokens=$(json "$DIR/$b.seq$s.json" passes)
        for t in $TOLS; do
            j=$DIR/$b.jac$s.$t
            "$NF" image sample "$m" -n "$N" --seed "$s" --method jacobi --tol "$t" --h5 "$j.h5" -o "$j.png" \
                --json > "$j.json" || { say "$m: Jacobi sampling failed"; exit 1; }
            p=$(json "$j.json" passes)
            per=$(grep -o '"block_passes": *\[[^]]*\]' "$j.json" | sed 's/.*\[//; s/\]//; s/ //g')
            d=$("$DIR/h5reldiff" "$DIR/$b.seq$s.h5" "$j.h5" /x)
            printf '| %s | %s | %s | %s (%s) | %.2fx | %s |\n' "$b" "$s" "$t" "$p" "$per" \
                "$(awk -v a="$tokens" -v b="$p" 'BEGIN { print a / b }')" "$d"
        done
    done
done | tee "$DIR/table.md"
echo
echo "| model | --tol | draws | tokens / passes, worst | max difference, worst |"
echo "|---|---|---|---|---|"
awk -F' \\| ' '{ k = $1 " | " $3; r = $5 + 0; d = $6 + 0; n[k]++
                 if (!(k in lo) || r < lo[k]) lo[k] = r; if (d > hi[k]) hi[k] = d }
               END { for (k in n) printf "%s | %d | %.2fx | %.2e |\n", k, n[k], lo[k], hi[k] }' \
    "$DIR/table.md" | sort
