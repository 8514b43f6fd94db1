#!/usr/bin/env bash
# tests/cli/hardening.sh - the defects of issue 16 stay fixed: damaged checkpoint fields, hostile flow
# specs, an output that is an input, a new fit over an existing model, bit flips in model files,
# datasets declared larger than stored, a full disk, and running nf under valgrind.  Each case must
# end with exit 1 (or the documented safe behaviour), one line on stderr naming the input and the
# field or file, no crash or hang, and every input byte-identical afterwards.  The damaged files
# are made with tests/cli/mkbad.c (through HDF5, so only nf's own checks can catch the damage) and
# the full disk with tests/cli/enospc.c (an LD_PRELOAD library).  Run by `make check` with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi
M=$MKBAD

# ---- inputs ----------------------------------------------------------------------------------
nfrun data make moons -n 400 --seed 2 -o data.h5 >/dev/null 2>&1
nfrun data make moons -n 200 --seed 3 -o val.h5 >/dev/null 2>&1
FIT=(--flow realnvp --layers 2 --hidden 8 --threads 1 --quiet)
# a run that stopped at step 20 of 1000 (a constant rate, so the stored schedule stays valid)
nfrun fit data.h5 "${FIT[@]}" --steps 20 --schedule constant --checkpoint-every 10 -o model.h5 2>"$T/err"
"$M" setnum model.h5 /training max_steps 1000
nfrun fit data.h5 "${FIT[@]}" --steps 20 -o done.h5 2>/dev/null
if [ ! -s data.h5 ] || [ ! -s model.h5 ] || [ ! -s done.h5 ]; then
    fail "make the input files (nf data make, nf fit): $(head -c 300 "$T/err")"
    finish
fi
cp model.h5 ok.h5
nfrun fit --resume ok.h5 --threads 1 --quiet 2>"$T/err"
check "control: the undamaged stopped run resumes (exit 0)" test $? = 0

# ---- 1. checkpoint contents are checked, each field named ------------------------------------
# resume_bad WHAT PATTERN MKBAD-ARGS...: damage a copy of model.h5 and resume it
resume_bad() {
    local what=$1 pat=$2
    shift 2
    cp model.h5 bad.h5
    if ! "$M" "$1" bad.h5 "${@:2}"; then
        fail "$what: mkbad $*"
        return
    fi
    cp bad.h5 bad.copy
    expect_err "resume: $what" "$pat" -- fit --resume bad.h5 --threads 1 --quiet
    check "resume: $what: the model file is left as it was" cmp -s bad.h5 bad.copy
}
CK=/training/checkpoint
resume_bad "order_rng_state of all 0xff bytes" "bad\.h5: checkpoint field $CK/order_rng_state is not a state of the random" \
    fillbytes $CK/order_rng_state 255
resume_bad "order_rng_state of all zero bytes" "$CK/order_rng_state is not a state" fillbytes $CK/order_rng_state 0
resume_bad "items 1800 (other data)" "checkpoint was made with 1800 training items, this data has 360" \
    setnum $CK items 1800
resume_bad "rng_state of all 0xff bytes" "$CK/rng_state is not a state of the random generator" \
    fillbytes $CK/rng_state 255
resume_bad "rng_state of all zero bytes" "$CK/rng_state is not a state" fillbytes $CK/rng_state 0
resume_bad "step NaN" "$CK/step is nan \(expected a whole number" setnum $CK step nan
resume_bad "step 1e300" "$CK/step is 1e\+300" setnum $CK step 1e300
resume_bad "epoch 1e300" "$CK/epoch is 1e\+300" setnum $CK epoch 1e300
resume_bad "pos NaN" "checkpoint position nan" setnum $CK pos nan
resume_bad "lr_scale 0" "$CK/lr_scale is 0" setnum $CK lr_scale 0
resume_bad "eval_every -1" "training setting /training/eval_every is -1 \(expected a whole number" \
    setnum /training eval_every -1
resume_bad "batch NaN" "training setting /training/batch is nan" setnum /training batch nan
resume_bad "lr infinite" "training setting /training/lr is inf" setnum /training lr inf
resume_bad "beta2 1 (Adam needs < 1)" "training settings in /training: adam: beta2=1" setnum /training beta2 1
resume_bad "a NaN parameter" "/model/params: 'value' entry 4 \(parameter 'b1\.affine-coupling\.[^']*'\) is nan" \
    setelem /model/params/value 4 nan
resume_bad "a negative Adam second moment" "$CK/current: 'v' entry 2 .* is -1 \(expected a finite number >= 0\)" \
    setelem $CK/current/v 2 -1
cp done.h5 nanp.h5
"$M" setelem nanp.h5 /model/params/value 7 inf
expect_err "eval: an infinite parameter is refused, not evaluated" "nanp\.h5:/model/params: 'value' entry 7 .* is inf" \
    -- eval nanp.h5 data.h5

# ---- 2. hostile flow specs ---------------------------------------------------------------------
deep=affine-coupling
for _ in $(seq 2000); do deep="1*($deep)"; done
expect_err "--flow nested 2000 deep (8 kB): a clear error, no stack overflow" \
    "--flow: flow spec '1\*\(1\*.*\.\.\.', position [0-9]+: repeats nested more than 32 deep" \
    -- fit data.h5 --flow "$deep" --threads 1 --quiet --steps 5 -o deep.h5
ok32=affine-coupling
for _ in $(seq 32); do ok32="1*($ok32)"; done
nfrun fit data.h5 --flow "$ok32" --threads 1 --quiet --steps 2 -o d32.h5 2>"$T/err"
check "--flow nested 32 deep still fits" test -s d32.h5
long=$(head -c 70000 /dev/zero | tr '\0' a)
expect_err "--flow of 70000 characters" "--flow: .*longer than" -- fit data.h5 --flow "$long" --threads 1 --quiet --steps 5 -o long.h5
cp done.h5 deepspec.h5
"$M" setstr deepspec.h5 /model/flow spec "standardize, $deep"
for c in info "eval deepspec.h5 data.h5" "sample deepspec.h5 -n 5 -o s.h5"; do
    read -r -a args <<<"$c"
    [ "$c" = info ] && args=(info deepspec.h5)
    expect_err "${args[0]}: a model file whose stored spec is nested 2000 deep" \
        "deepspec\.h5.*repeats nested more than 32 deep" -- "${args[@]}"
done

# ---- 3. an output that is an input -------------------------------------------------------------
hashes() { sha256sum data.h5 val.h5 done.h5 notes.csv 2>/dev/null; }
printf 'a,b\n1,2\n3,4.5\n' >notes.csv
ln -s data.h5 link.h5
ln data.h5 hard.h5
before=$(hashes)
expect_err "fit DATA -o DATA" "data\.h5: the output is the same file as the data file data\.h5" \
    -- fit data.h5 "${FIT[@]}" --steps 5 -o data.h5
expect_err "fit DATA -o ./DATA (another spelling)" "\./data\.h5: the output is the same file as the data file data\.h5" \
    -- fit data.h5 "${FIT[@]}" --steps 5 -o ./data.h5
expect_err "fit DATA -o a symbolic link to DATA" "link\.h5: the output is the same file as the data file data\.h5" \
    -- fit data.h5 "${FIT[@]}" --steps 5 -o link.h5
expect_err "fit DATA -o a hard link to DATA" "hard\.h5: the output is the same file as the data file data\.h5" \
    -- fit data.h5 "${FIT[@]}" --steps 5 -o hard.h5
expect_err "fit --val V -o V" "val\.h5: the output is the same file as the --val file val\.h5" \
    -- fit data.h5 --val val.h5 "${FIT[@]}" --steps 5 -o val.h5
expect_err "sample MODEL -o MODEL" "done\.h5: the output is the same file as the model done\.h5" \
    -- sample done.h5 -n 10 -o done.h5
expect_err "logprob MODEL DATA -o DATA" "data\.h5: the output is the same file as the data file data\.h5" \
    -- logprob done.h5 data.h5 -o data.h5
expect_err "logprob MODEL DATA -o MODEL" "done\.h5: the output is the same file as the model done\.h5" \
    -- logprob done.h5 data.h5 -o done.h5
expect_err "plot MODEL -o MODEL" "done\.h5: the output is the same file as the model done\.h5" -- plot done.h5 -o done.h5
expect_err "plot --data DATA -o DATA" "data\.h5: the output is the same file as the data file data\.h5" \
    -- plot done.h5 --data data.h5 -o data.h5
expect_err "plot --history MODEL -o MODEL" "the output is the same file as the model" \
    -- plot --history done.h5 -o done.h5
expect_err "data import X.csv -o X.csv" "notes\.csv: the output is the same file as the input file notes\.csv" \
    -- data import notes.csv -o notes.csv
cp data.h5 d.train.h5
expect_err "data split whose output would be its input" \
    "d\.train\.h5: the output is the same file as the input file d\.train\.h5" -- data split d.train.h5 -o d
check "every input byte-identical after the refusals" test "$before" = "$(hashes)"
# an image or a video file given to nf fit: the command that models it, unless --dataset /x is explicit
nfrun data make shapes -n 20 --size 16 -o shapes.h5 >/dev/null 2>&1
nfrun data make video-balls -n 3 -o balls.h5 >/dev/null 2>&1
expect_err "fit of an image file" "shapes\.h5 holds images .*nf image fit.*--dataset /x" -- fit shapes.h5 "${FIT[@]}" -o flat.h5
expect_err "fit of a video file" "balls\.h5 holds videos .*nf video fit.*--dataset /x" -- fit balls.h5 "${FIT[@]}" -o flat.h5
nfrun fit shapes.h5 --dataset /x "${FIT[@]}" --steps 2 -o flat.h5 2>"$T/err"
check "with --dataset /x nf fit takes each image as a flat vector ($(head -c 120 "$T/err"))" test -s flat.h5
# the other commands that write files
nfrun data make tpp-hawkes1 -o seq.h5 >/dev/null 2>&1
nfrun tpp fit seq.h5 --steps 3 --threads 1 --quiet -o tpp.h5 2>"$T/err"
nfrun data make dependent-crescent --structure kinship -n 300 --seed 1 -o kin.h5 >/dev/null 2>&1
if [ -s seq.h5 ] && [ -s tpp.h5 ] && [ -s kin.h5 ]; then
    thashes() { sha256sum seq.h5 tpp.h5 kin.h5; }
    before=$(thashes)
    expect_err "tpp fit SEQ -o SEQ --force" "seq\.h5: the output is the same file as the sequences file seq\.h5" \
        -- tpp fit seq.h5 --steps 3 --threads 1 --quiet --force -o seq.h5
    expect_err "tpp sample MODEL -o MODEL" "tpp\.h5: the output is the same file as the model tpp\.h5" \
        -- tpp sample tpp.h5 -n 2 --t-end 10 -o tpp.h5
    expect_err "tpp sample --history H -o H" "seq\.h5: the output is the same file as the --history file seq\.h5" \
        -- tpp sample tpp.h5 --history seq.h5 --t-end 200 -o seq.h5
    expect_err "tpp plot MODEL SEQ -o SEQ" "seq\.h5: the output is the same file as the sequences file seq\.h5" \
        -- tpp plot tpp.h5 seq.h5 -o seq.h5
    expect_err "fit --kinship K -o K --force" "kin\.h5: the output is the same file as the (data|--kinship) file kin\.h5" \
        -- fit kin.h5 --dependence kinship --kinship kin.h5 --val-frac 0 "${FIT[@]}" --steps 3 --force -o kin.h5
    cp kin.h5 k2.h5
    expect_err "fit --kinship K -o K (K not the data) --force" "k2\.h5: the output is the same file as the --kinship file k2\.h5" \
        -- fit kin.h5 --dependence kinship --kinship k2.h5 --val-frac 0 "${FIT[@]}" --steps 3 --force -o k2.h5
    check "the sequences, the point-process model and K byte-identical after the refusals" test "$before" = "$(thashes)"
    expect_err "data make with --val = -o" "a\.h5: the same file as -o and --val" \
        -- data make dependent-sign --structure equi -n 200 -o a.h5 --val ./a.h5
    check "and wrote nothing" test ! -e a.h5
else
    fail "make the point-process and kinship inputs ($(head -c 200 "$T/err"))"
fi
check "no temporary files left behind" test -z "$(stray_tmp)"

# a model given to another kind's command: one line naming the commands that read it
expect_err "a model of nf fit given to nf image eval: names nf eval" \
    "done\.h5 holds a 'density' model \(of nf fit\); use nf eval, nf sample or nf plot with it" \
    -- image eval done.h5 data.h5
expect_err "a model of nf fit given to nf video eval: names nf eval" \
    "done\.h5 holds a 'density' model \(of nf fit\); use nf eval" -- video eval done.h5 data.h5

# a new fit over an existing model: refused without --force, so the old model is never lost
cp done.h5 old.h5
expect_err "fit over an existing model without --force" \
    "old\.h5 already exists and a new fit would replace it: give --force .* --resume old\.h5" \
    -- fit data.h5 "${FIT[@]}" --steps 5 -o old.h5
check "the existing model is untouched" cmp -s old.h5 done.h5
nfrun fit data.h5 "${FIT[@]}" --steps 5 --force -o old.h5 2>"$T/err"
check "--force replaces it" bash -c "[ \$? = 0 ] && ! cmp -s old.h5 done.h5"
nfrun fit --help >"$T/help" 2>&1
check "nf fit --help says what happens to an existing MODEL.h5" grep -q -- '--force .*replace an existing MODEL.h5' "$T/help"

# ---- 4. damage inside HDF5: checksums and fixed-length strings ---------------------------------
read -r _ nstr _ nvlen _ nunchk <<<"$("$M" vlen done.h5)"
check "a model file holds no variable-length strings ($nstr strings) and no dataset without a checksum" \
    bash -c "[ '${nstr:-0}' -gt 10 ] && [ '$nvlen' = 0 ] && [ '$nunchk' = 0 ]"
read -r _ nstr _ nvlen _ nunchk <<<"$("$M" vlen data.h5)"
check "nf data files too" bash -c "[ '${nstr:-0}' -gt 2 ] && [ '$nvlen' = 0 ] && [ '$nunchk' = 0 ]"
cp done.h5 flipped.h5
"$M" flipdata flipped.h5 /model/params/value
expect_err "a flipped bit in the parameters is a checksum error" \
    "flipped\.h5: cannot read dataset /model/params/value \(damaged file: a checksum" -- eval flipped.h5 data.h5
# single-bit flips all over a model file: an error or the same answer, never another answer or a crash
ref=$(nfrun eval done.h5 data.h5 --json 2>/dev/null)
size=$(stat -c %s done.h5)
nbad=0 nerr=0 nsame=0 detail=""
for k in $(seq 0 59); do
    byte=$(((k * 7919 + 13) % size))
    cp done.h5 f.h5
    "$M" flip f.h5 "$byte" $((k % 8))
    out=$(NF_CLI_TIMEOUT=30 nfrun eval f.h5 data.h5 --json 2>/dev/null)
    rc=$?
    if [ $rc = 0 ] && [ "$out" = "$ref" ]; then nsame=$((nsame + 1))
    elif [ $rc = 1 ]; then nerr=$((nerr + 1))
    else nbad=$((nbad + 1)); detail="$detail byte $byte: exit $rc;"; fi
done
check "60 single-bit flips of a model: $nerr errors, $nsame unchanged results, no other outcome$detail" test $nbad = 0
nfrun info "$ROOT/tests/data/v1/model_v1.h5" >"$T/out" 2>"$T/err"
check "old files (variable-length strings, no checksums) still read" grep -q '^kind *density' "$T/out"

# ---- 5. lesser ---------------------------------------------------------------------------------
"$M" declared big.h5 100000000 10
"$M" declared big2.h5 100000000 2
SECONDS=0
expect_err "fit: /x declared 1e8 x 10 but never written" \
    "big\.h5: dataset /x declares 1000000000 values .* stores 0 bytes" -- fit big.h5 "${FIT[@]}" --steps 5 -o b.h5
expect_err "fit --stream: the same file" "big\.h5: dataset /x declares" -- fit big.h5 --stream "${FIT[@]}" --steps 5 -o b.h5
expect_err "eval: of another width: the width is checked first" "big\.h5:/x: 10 columns, expected 2" -- eval done.h5 big.h5
expect_err "eval: of the model's width" "big2\.h5: dataset /x declares 200000000 values" -- eval done.h5 big2.h5
check "refused before allocating for them (${SECONDS}s for the four)" test "$SECONDS" -lt 10
# an NPY header declaring 50,000,000 x 10 float64 (4 GB) over 8 bytes of data (found by fuzz_npy)
hdr="{'descr': '<f8', 'fortran_order': False, 'shape': (50000000, 10), }"
printf '\x93NUMPY\x01\x00'"$(printf '\\x%02x\\x00' $((${#hdr} + 1)))"'%s\n' "$hdr" >huge.npy
printf '\0\0\0\0\0\0\0\0' >>huge.npy
expect_err "data import: an NPY file shorter than its header declares" \
    "huge\.npy: file ends after 8 of 4000000000 bytes of data" -- data import huge.npy -o huge.h5

# foreign data files (h5py's, no checksums) damaged in their number types or dataspaces, found by
# fuzz_data: libhdf5 1.10 reads such types and extents out of bounds (SIGBUS, gigabyte buffers)
# instead of refusing them, so nf checks them before reading.  Later libhdf5 versions refuse some
# of them when the dataset is opened; there nf's error for that is accepted as well.
DMG=$ROOT/tests/data/damaged
for f in x_float_fields x_type_size x_dims_over_max group_int_offset; do cp "$DMG/$f.h5" "$f.h5"; done
h5_open_refusal=
case $(pkg-config --modversion hdf5-serial 2>/dev/null || pkg-config --modversion hdf5 2>/dev/null) in
    1.10.*) ;;
    *) h5_open_refusal="|(cannot open|no) dataset /(x|group)" ;;
esac
expect_err "fit: /x of a damaged float type" \
    "x_float_fields\.h5: (dataset /x: its number type \(8 bytes\) is damaged${h5_open_refusal})" \
    -- fit x_float_fields.h5 "${FIT[@]}" --steps 2 -o dmg.h5
expect_err "fit --stream: /x of a type of 4294967288 bytes" \
    "x_type_size\.h5: (dataset /x: its number type \(4294967288 bytes\)${h5_open_refusal})" \
    -- fit x_type_size.h5 --stream "${FIT[@]}" --steps 2 -o dmg.h5
expect_err "eval: /x longer than its stated maximum" \
    "x_dims_over_max\.h5: (dataset /x: dimension 0 is 2097168, over its stated maximum 16${h5_open_refusal})" \
    -- eval done.h5 x_dims_over_max.h5
expect_err "fit --dependence equi: /group of an integer type with bits past its size" \
    "group_int_offset\.h5: (dataset /group: its number type \(4 bytes\) is damaged${h5_open_refusal})" \
    -- fit group_int_offset.h5 --dependence equi --val-frac 0 "${FIT[@]}" --steps 2 -o dmg.h5
for f in x_float_fields x_type_size x_dims_over_max group_int_offset; do
    check "damaged $f.h5 left as it was" cmp -s "$f.h5" "$DMG/$f.h5"
done
check "no model written from a damaged file" test ! -e dmg.h5

# a full disk: the error, exit 1, no crash at exit, no file, the old model kept
if gcc -shared -fPIC -O1 -o "$T/enospc.so" "$ROOT/tests/cli/enospc.c" -ldl 2>"$T/cc.log"; then
    full() { NF_ENOSPC_AFTER=$1 LD_PRELOAD=$T/enospc.so ASAN_OPTIONS=verify_asan_link_order=0 "${@:2}"; }
    # the in-memory file is written at creation (64 KiB) and at the end: the end does not fit
    full 100000 timeout 60 "$NF" fit data.h5 "${FIT[@]}" --steps 20 -o e.h5 >"$T/out" 2>"$T/err"
    rc=$?
    check "fit on a full disk: exit 1 (not a crash at exit), one error line (exit $rc: $(head -c 200 "$T/err"))" \
        bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'e\.h5: cannot write .*(disk full?)' '$T/err'"
    check "fit on a full disk leaves no file" bash -c "[ ! -e e.h5 ] && [ -z \"\$(find . -name 'e.h5.tmp.*')\" ]"
    cp done.h5 keep.h5
    full 100000 timeout 60 "$NF" fit data.h5 "${FIT[@]}" --steps 20 --force -o keep.h5 >/dev/null 2>"$T/err"
    rc=$?
    check "fit --force over a model on a full disk: exit 1, the old model kept (exit $rc)" \
        bash -c "[ $rc = 1 ] && cmp -s keep.h5 done.h5"
    full 100000 timeout 60 "$NF" sample done.h5 -n 20000 -o s.h5 >/dev/null 2>"$T/err"
    rc=$?
    check "sample on a full disk: exit 1 (exit $rc)" bash -c "[ $rc = 1 ] && [ ! -e s.h5 ]"
else
    fail "build the test helper tests/cli/enospc.c: $(head -c 200 "$T/cc.log")"
fi

# nf runs itself again once (OMP_WAIT_POLICY); NF_NO_REEXEC is documented, and valgrind works
nfrun --help >"$T/help" 2>&1
check "nf --help documents NF_NO_REEXEC" grep -q 'NF_NO_REEXEC=1' "$T/help"
if command -v valgrind >/dev/null 2>&1 && [ "${BUILD%-san}" = "$BUILD" ]; then
    timeout 300 valgrind -q --error-exitcode=99 "$NF" info done.h5 >"$T/out" 2>"$T/err"
    rc=$?
    check "valgrind nf info: runs nf itself, no errors (exit $rc: $(grep -m1 -v '^$' "$T/err" | head -c 200))" \
        bash -c "[ $rc = 0 ] && grep -q '^kind *density' '$T/out'"
else
    skip "valgrind nf: valgrind not installed (or a sanitizer build)"
fi

finish
