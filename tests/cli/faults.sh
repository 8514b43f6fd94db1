#!/usr/bin/env bash
# tests/cli/faults.sh - every kind of bad input to every nf command: a missing or unreadable file,
# a non-HDF5 file, a missing dataset, a model/data dimension mismatch, NaN, infinite or empty data,
# a bad flag value, a bad flow spec, an unwritable output path.  Each must give exactly one line on
# stderr ("nf CMD: ...", or "nf: ..." from the dispatcher) naming the input and what was expected,
# exit 1 (bad input) or 2 (usage), not crash, print nothing on stdout, and leave every file in the
# directory as it was (same inode, size and time, and byte-identical at the end) with no new file,
# a temporary one included.  Run by `make check` with NF=build/<variant>/nf.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi

# ---- inputs ----------------------------------------------------------------------------------
nfrun data make moons -n 400 --seed 2 -o data.h5 >/dev/null 2>&1
nfrun data make gmm --dim 3 -n 200 -o d3.h5 >/dev/null 2>&1
nfrun fit data.h5 --flow realnvp --layers 2 --hidden 8 --steps 20 --threads 1 --quiet -o model.h5 2>/dev/null
for k in nan inf empty noxy text; do "$MKBAD" "$k" "$k.h5"; done
if [ ! -s data.h5 ] || [ ! -s d3.h5 ] || [ ! -s model.h5 ] || [ ! -s nan.h5 ] || [ ! -s empty.h5 ]; then
    fail "make the input files (nf data make, nf fit, mkbad)"
    finish
fi
printf 'x0,x1\n0.5,1.5\n' >notes.txt       # a file that is not HDF5
head -c 2000 model.h5 >trunc.h5            # a damaged (truncated) HDF5 file
mkdir adir                                 # a directory where a file is expected
cp model.h5 keep.h5                        # an existing output file that failures must not touch
cp data.h5 unreadable.h5
chmod 000 unreadable.h5
mkdir rodir
chmod 555 rodir
can_deny=1
if cat unreadable.h5 >/dev/null 2>&1; then can_deny=0; fi   # root reads and writes anything

# Every path under $W, and each file's mode, inode, size and modification time (to the nanosecond):
# a new file, a file replaced (atomic writes make a new inode) or rewritten in place all show.
snapshot() { (cd "$W" && { find . -type f -printf 'f %m %i %s %T@ %p\n'; find . ! -type f -printf '%y %m %p\n'; } |
    LC_ALL=C sort); }
# The contents of every file, compared once at the end: byte-identical after all the failures.
hashes() { (cd "$W" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum 2>&1); }

# expect_fail WHAT RC PATTERN -- nf ARGS...: exit RC, no stdout, one stderr line "nf CMD: ..."
# matching PATTERN (extended regex), and the directory exactly as before.
expect_fail() {
    local what=$1 want=$2 pat=$3
    shift 4
    local before after rc why=""
    before=$(snapshot)
    nfrun "$@" >"$T/out" 2>"$T/err"
    rc=$?
    after=$(snapshot)
    [ "$rc" = "$want" ] || why="$why; exit $rc, expected $want"
    [ "$rc" -lt 124 ] || why="$why; crashed or hung"
    [ ! -s "$T/out" ] || why="$why; wrote to stdout"
    [ "$(wc -l <"$T/err")" = 1 ] || why="$why; $(wc -l <"$T/err") lines on stderr"
    case $(head -c 3 "$T/err") in "nf " | "nf:") ;; *) why="$why; stderr does not start with 'nf'" ;; esac
    grep -qE -- "$pat" "$T/err" || why="$why; stderr does not match /$pat/"
    [ "$before" = "$after" ] || why="$why; files changed: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -3 | tr '\n' ' ')"
    if [ -z "$why" ]; then
        pass "$what"
    else
        fail "$what (nf $*)${why}: $(head -c 300 "$T/err" | tr '\n' '|')"
    fi
}

hashes >"$T/hashes.before"

# ---- nf fit: data files ----------------------------------------------------------------------
OUT=(-o keep.h5)
FAST=(--flow realnvp --layers 2 --hidden 8 --steps 5 --threads 1 --quiet)
expect_fail "fit: missing data file" 1 'nothere\.h5: cannot open \(No such file' -- fit nothere.h5 "${OUT[@]}"
if [ $can_deny = 1 ]; then
    expect_fail "fit: unreadable data file" 1 'unreadable\.h5: cannot open \(Permission denied' -- fit unreadable.h5 "${OUT[@]}"
else
    skip "fit: unreadable data file (running as root: permissions do not apply)"
fi
expect_fail "fit: a directory as the data file" 1 'adir' -- fit adir "${OUT[@]}"
expect_fail "fit: data file that is not HDF5" 1 'notes\.txt: not an HDF5 file' -- fit notes.txt "${OUT[@]}"
expect_fail "fit: damaged HDF5 data file" 1 'trunc\.h5: .*(damaged|cannot)' -- fit trunc.h5 "${OUT[@]}"
expect_fail "fit: data file without /x" 1 'noxy\.h5: no dataset /x \(expected the samples as an n x d array' \
    -- fit noxy.h5 "${OUT[@]}"
expect_fail "fit: --dataset that does not exist" 1 'data\.h5: no dataset /samples \(expected' \
    -- fit data.h5 --dataset /samples "${OUT[@]}"
expect_fail "fit: /x of strings" 1 'text\.h5: dataset /x holds strings, not numbers' -- fit text.h5 "${OUT[@]}"
expect_fail "fit: NaN in the data" 1 'nan\.h5:/x: row 37, column 1 is nan \(expected finite values' \
    -- fit nan.h5 "${OUT[@]}"
expect_fail "fit: infinity in the data" 1 'inf\.h5:/x: row 5, column 0 is inf \(expected finite values' \
    -- fit inf.h5 "${OUT[@]}"
expect_fail "fit: empty data" 1 'empty\.h5:/x: no rows \(expected at least one sample' -- fit empty.h5 "${OUT[@]}"
expect_fail "fit: --val file of another dimension" 1 'd3\.h5:/x: 3 columns, expected 2' \
    -- fit data.h5 --val d3.h5 "${FAST[@]}" "${OUT[@]}"
expect_fail "fit: --val file with NaN" 1 'nan\.h5:/x: row 37' -- fit data.h5 --val nan.h5 "${FAST[@]}" "${OUT[@]}"

# ---- nf fit: flags and flow specs ------------------------------------------------------------
expect_fail "fit: --steps not a number" 2 '--steps abc: expected an integer' -- fit data.h5 --steps abc "${OUT[@]}"
expect_fail "fit: --lr negative" 2 '--lr -1: expected a number from 0' -- fit data.h5 --lr -1 "${OUT[@]}"
expect_fail "fit: --lr not finite" 2 '--lr inf: expected a number' -- fit data.h5 --lr inf "${OUT[@]}"
expect_fail "fit: --batch 0" 2 '--batch 0: expected an integer from 1' -- fit data.h5 --batch 0 "${OUT[@]}"
expect_fail "fit: --val-frac 1.5" 2 '--val-frac 1.5: expected a number from 0 to 0.9' \
    -- fit data.h5 --val-frac 1.5 "${OUT[@]}"
expect_fail "fit: --threads 0" 2 '--threads 0: expected an integer from 1' -- fit data.h5 --threads 0 "${OUT[@]}"
expect_fail "fit: --optimizer unknown" 2 '--optimizer: .*rmsprop' -- fit data.h5 --optimizer rmsprop "${OUT[@]}"
expect_fail "fit: --schedule unknown" 2 '--schedule: .*linear' -- fit data.h5 --schedule linear "${OUT[@]}"
expect_fail "fit: --bins 1 (a spline needs 2)" 2 '--bins 1: expected an integer from 2' \
    -- fit data.h5 --bins 1 "${OUT[@]}"
expect_fail "fit: unknown option" 2 "unknown option '--colour'" -- fit data.h5 --colour red "${OUT[@]}"
expect_fail "fit: option without its value" 2 '--flow needs a value' -- fit data.h5 -o keep.h5 --flow
expect_fail "fit: no stopping rule" 2 'no stopping rule' -- fit data.h5 --steps 0 "${OUT[@]}"
expect_fail "fit: no output file" 2 'no output file given \(expected -o MODEL\.h5\)' -- fit data.h5
expect_fail "fit: two data files" 2 "more than one data file \('data\.h5' and 'd3\.h5'\)" -- fit data.h5 d3.h5 "${OUT[@]}"
expect_fail "fit: flow spec with an unknown bijector" 1 "--flow: .*unknown bijector 'wobble-layer'" \
    -- fit data.h5 --flow "wobble-layer" "${OUT[@]}"
expect_fail "fit: flow spec with a bad option value" 1 '--flow: .*hidden=abc: expected an integer' \
    -- fit data.h5 --flow "2*(affine-coupling(hidden=abc))" "${OUT[@]}"
expect_fail "fit: flow spec with an unknown option" 1 "--flow: .*unknown option 'depth'" \
    -- fit data.h5 --flow "affine-coupling(depth=3)" "${OUT[@]}"
expect_fail "fit: flow spec with an unclosed bracket" 1 "--flow: .*missing '\)'" \
    -- fit data.h5 --flow "2*(affine-coupling(hidden=8)" "${OUT[@]}"
expect_fail "fit: preset knobs with a spec" 2 '--layers/--hidden.* apply to presets' \
    -- fit data.h5 --flow "affine-coupling" --hidden 8 "${OUT[@]}"

# ---- nf fit: output and resume ---------------------------------------------------------------
expect_fail "fit: output in a directory that does not exist" 1 'nodir/m\.h5: cannot write here' \
    -- fit data.h5 "${FAST[@]}" -o nodir/m.h5
expect_fail "fit: output path is a directory" 1 'adir: is a directory \(expected' -- fit data.h5 "${FAST[@]}" -o adir
if [ $can_deny = 1 ]; then
    expect_fail "fit: output in a read-only directory" 1 'rodir/m\.h5: cannot write' -- fit data.h5 "${FAST[@]}" -o rodir/m.h5
else
    skip "fit: output in a read-only directory (running as root)"
fi
expect_fail "fit --resume: missing model" 1 'nothere\.h5: cannot open' -- fit --resume nothere.h5
expect_fail "fit --resume: a data file instead of a model" 1 "data\.h5: format 'nf-data' but expected 'nf-model'" \
    -- fit --resume data.h5
expect_fail "fit --resume: damaged model" 1 'trunc\.h5' -- fit --resume trunc.h5
expect_fail "fit --resume with a data file too" 2 '--resume takes the model file only' -- fit --resume keep.h5 data.h5
expect_fail "fit --resume with a setting it would ignore" 2 \
    "--lr does not apply with --resume: the run goes on with the settings stored in keep\.h5" -- fit --resume keep.h5 --lr 0.1
expect_fail "fit --resume with an output it would ignore" 2 "-o does not apply with --resume" -- fit --resume keep.h5 -o other.h5

# ---- nf eval and nf logprob ------------------------------------------------------------------
expect_fail "eval: missing model" 1 'nothere\.h5: cannot open' -- eval nothere.h5 data.h5
expect_fail "eval: model file that is not HDF5" 1 'notes\.txt: not an HDF5 file' -- eval notes.txt data.h5
expect_fail "eval: a data file as the model" 1 "data\.h5: format 'nf-data' but expected 'nf-model'" -- eval data.h5 data.h5
expect_fail "eval: damaged model" 1 'trunc\.h5' -- eval trunc.h5 data.h5
expect_fail "eval: missing data" 1 'nothere\.h5: cannot open' -- eval model.h5 nothere.h5
expect_fail "eval: data of another dimension" 1 'd3\.h5:/x: 3 columns, expected 2' -- eval model.h5 d3.h5
expect_fail "eval: NaN in the data" 1 'nan\.h5:/x: row 37, column 1 is nan' -- eval model.h5 nan.h5
expect_fail "eval: infinity in the data" 1 'inf\.h5:/x: row 5, column 0 is inf' -- eval model.h5 inf.h5
expect_fail "eval: empty data" 1 'empty\.h5:/x: no rows' -- eval model.h5 empty.h5
expect_fail "eval: data without /x" 1 'noxy\.h5: no dataset /x' -- eval model.h5 noxy.h5
expect_fail "eval: --batch 0" 2 '--batch 0: expected an integer from 1' -- eval model.h5 data.h5 --batch 0
expect_fail "eval: unknown option" 2 "unknown option '--csv'" -- eval model.h5 data.h5 --csv
expect_fail "eval: no data file" 2 'expected MODEL\.h5 and DATA\.h5' -- eval model.h5
expect_fail "logprob: data of another dimension, existing output kept" 1 'd3\.h5:/x: 3 columns, expected 2' \
    -- logprob model.h5 d3.h5 -o keep.h5
expect_fail "logprob: NaN in the data" 1 'nan\.h5:/x: row 37' -- logprob model.h5 nan.h5 -o keep.h5
expect_fail "logprob: unwritable output" 1 'nodir/l\.h5: cannot write here' -- logprob model.h5 data.h5 -o nodir/l.h5
expect_fail "logprob: output path is a directory" 1 'adir: is a directory' -- logprob model.h5 data.h5 -o adir
expect_fail "logprob: no output file" 2 'no output file given' -- logprob model.h5 data.h5

# ---- nf sample -------------------------------------------------------------------------------
expect_fail "sample: missing model" 1 'nothere\.h5: cannot open' -- sample nothere.h5 -n 10 -o keep.h5
expect_fail "sample: a data file as the model" 1 "data\.h5: format 'nf-data' but expected 'nf-model'" \
    -- sample data.h5 -n 10 -o keep.h5
expect_fail "sample: damaged model" 1 'trunc\.h5' -- sample trunc.h5 -n 10 -o keep.h5
expect_fail "sample: -n 0" 2 '-n 0: expected an integer from 1' -- sample model.h5 -n 0 -o keep.h5
expect_fail "sample: -n not a number" 2 '-n ten: expected an integer' -- sample model.h5 -n ten -o keep.h5
expect_fail "sample: --seed negative" 2 '--seed -4: expected an integer from 0' -- sample model.h5 -n 5 --seed -4 -o keep.h5
expect_fail "sample: --method unknown" 2 '--method fast: expected auto, sequential or jacobi' \
    -- sample model.h5 -n 10 --method fast -o keep.h5
expect_fail "sample: no -n" 2 'expected -n N' -- sample model.h5 -o keep.h5
expect_fail "sample: --context for an unconditional model" 1 'model\.h5 is not conditional' \
    -- sample model.h5 -n 10 --context data.h5 -o keep.h5
expect_fail "sample: unwritable output" 1 'nodir/s\.h5: cannot write here' -- sample model.h5 -n 10 -o nodir/s.h5
expect_fail "sample: output path is a directory" 1 'adir: is a directory' -- sample model.h5 -n 10 -o adir

# ---- nf info, nf data, nf --------------------------------------------------------------------
expect_fail "info: missing model" 1 'nothere\.h5: cannot open' -- info nothere.h5
expect_fail "info: file that is not HDF5" 1 'notes\.txt: not an HDF5 file' -- info notes.txt
expect_fail "info: a data file without /x" 1 'noxy\.h5: no dataset /x' -- info noxy.h5
expect_fail "info: damaged model" 1 'trunc\.h5' -- info trunc.h5
expect_fail "info: unknown option" 2 "unknown option '--all'" -- info model.h5 --all
expect_fail "data make: unknown data set" 2 "unknown data set 'wobble': expected one of moons" -- data make wobble -n 10 -o keep.h5
expect_fail "data make: -n not a number" 2 '-n many' -- data make moons -n many -o keep.h5
expect_fail "data make: unwritable output" 1 'nodir/d\.h5' -- data make moons -n 10 -o nodir/d.h5
expect_fail "data import: missing file" 1 'nothere\.csv' -- data import nothere.csv -o keep.h5
expect_fail "nf: unknown command" 2 "unknown command 'train'" -- train data.h5

hashes >"$T/hashes.after"
check "every file byte-identical after all the failures ($(wc -l <"$T/hashes.after") files)" \
    cmp -s "$T/hashes.before" "$T/hashes.after"
check "the existing output keep.h5 is still the model it was" cmp -s keep.h5 model.h5
check "no temporary files left behind" test -z "$(stray_tmp)"
chmod 755 rodir
chmod 644 unreadable.h5
finish
