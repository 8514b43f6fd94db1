#!/usr/bin/env bash
# tests/cli/realdata.sh - real data on the first try: a CSV with a header, an id, two measurements,
# a free-text column and a categorical one is imported with chosen columns and the category as a
# one-hot context; a conditional flow is fit on it, sampled per category and drawn with the column
# names; nf info describes the data, sample, model, log-density and sequences files; nf eval names
# the columns and reports per category; nf data split --val 0 writes no empty file; every command
# that computes takes --threads.  The README's "Your own CSV" commands are run exactly as written.
# Run by `make check` with NF set to the nf binary.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi

# faithful.csv: 272 eruptions of a geyser, short (about 2 min, 55 min wait) or long (about 4.3 min,
# 80 min wait); station is free text with a comma inside quotes.
awk 'BEGIN {
    srand(7); pi = 3.14159265358979
    print "id,eruptions,waiting,station,kind"
    for (i = 1; i <= 272; i++) {
        short = rand() < 0.36
        z1 = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand())
        z2 = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand())
        e = short ? 2.0 + 0.27 * z1 : 4.3 + 0.43 * z1
        w = (short ? 54.5 : 80) + 5.9 * z2 + 3 * (e - (short ? 2.0 : 4.3))
        printf "%d,%.3f,%.0f,\"%s\",%s\n", i, e, w, (rand() < 0.5 ? "north gate" : "south, lot"), (short ? "short" : "long")
    }
}' >faithful.csv

# ---- the README's example, literally -------------------------------------------------------
mkdir -p "$T/bin"
ln -s "$NF" "$T/bin/nf"
awk '/^## Your own CSV/ {on = 1; next} /^## / {on = 0} on && /^    nf / {sub(/^    /, ""); sub(/ +# .*$/, ""); print}' \
    "$ROOT/README.md" >readme.sh
ncmd=$(wc -l <readme.sh)
PATH="$T/bin:$PATH" timeout -k 5 "${NF_CLI_TIMEOUT:-120}" bash -e readme.sh >"$T/readme.out" 2>"$T/readme.err"
rc=$?
check "README 'Your own CSV': its $ncmd nf commands run as written (exit $rc)" \
    bash -c "[ $rc = 0 ] && [ $ncmd -ge 4 ] && grep -q '^nf data import faithful.csv' readme.sh && grep -q '^nf fit ' readme.sh"
[ $rc = 0 ] || sed 's/^/    /' "$T/readme.err" | tail -5

# ---- import: columns by name, the text column left out, the category as context ---------------
nfrun data import faithful.csv --columns eruptions,waiting --context kind -o f.h5 >"$T/out" 2>"$T/err"
rc=$?
check "import --columns --context: exit 0, 272 x 2 with a context of 2 values" \
    bash -c "[ $rc = 0 ] && grep -q 'f.h5: 272 x 2 from faithful.csv, context of 2 values' '$T/out'"
nfrun data import faithful.csv --context kind -o d.h5 >"$T/out" 2>"$T/err"
rc=$?
read -r _ cols _ <<<"$("$MKBAD" stats d.h5 /x)"
check "import without --columns: the numeric columns (id, eruptions, waiting), a note on the text column" \
    bash -c "[ $rc = 0 ] && [ '$cols' = 3 ] && grep -q \"left out 1 text column: 'station'\" '$T/err'"
nfrun data import faithful.csv --drop id --context 4 -o d2.h5 >"$T/out" 2>&1
check "import --drop id --context 4 (an index) gives the same data" \
    bash -c "$MKBAD stats d2.h5 /x >a.txt && $MKBAD stats f.h5 /x >b.txt && cmp -s a.txt b.txt"
nfrun data import faithful.csv --columns eruptions,station -o bad.h5 >"$T/out" 2>"$T/err"
rc=$?
check "import of a text column as data: exit 1 naming the line, column and what to do, no file" \
    bash -c "[ $rc = 1 ] && grep -q \"line 2, column 4: '.*' is not a number (column 'station'\" '$T/err' && [ ! -e bad.h5 ]"
nfrun data import faithful.csv --columns eruption -o bad.h5 >"$T/out" 2>"$T/err"
rc=$?
check "import of an unknown column: exit 1 listing the columns" \
    bash -c "[ $rc = 1 ] && grep -q \"no column 'eruption' (columns: id, eruptions, waiting, station, kind)\" '$T/err'"

# ---- info on the data file -------------------------------------------------------------------
nfrun info f.h5 >"$T/info" 2>"$T/err"
rc=$?
long=$(awk '$1 == "kind=long" {print $2}' "$T/info")
short=$(awk '$1 == "kind=short" {print $2}' "$T/info")
check "info DATA: rows, the named columns with statistics, rows per category ($long + $short), provenance" \
    bash -c "[ $rc = 0 ] && grep -qE '^data +f.h5 \(nf-data v1' '$T/info' && grep -qE '^rows +272$' '$T/info' &&
             grep -qE '^ +eruptions +[0-9.]+ ' '$T/info' && grep -qE '^ +waiting +[0-9.]+ ' '$T/info' &&
             [ \$(( $long + $short )) = 272 ] && grep -qE '^source +faithful.csv$' '$T/info'"

# ---- fit a conditional flow, sample per category -----------------------------------------------
FIT=(--flow realnvp --layers 4 --hidden 32 --steps 600 --lr 3e-3 --threads 1 --seed 3)
nfrun fit f.h5 "${FIT[@]}" -o m.h5 >"$T/out" 2>"$T/err"
rc=$?
check "fit on the imported file: a conditional flow (exit $rc)" \
    bash -c "[ $rc = 0 ] && grep -q 'conditional on 2 context values' <(\"$NF\" info m.h5)"
nfrun info m.h5 >"$T/info" 2>&1
check "info MODEL: the column and context names of its data" \
    bash -c "grep -qE '^columns +eruptions, waiting$' '$T/info' && grep -qE '^context +kind=long, kind=short$' '$T/info'"
for k in long short; do
    nfrun sample m.h5 -n 2000 --context-value kind=$k --seed 4 --threads 1 -o $k.h5 >/dev/null 2>"$T/err.$k"
done
read -r me_long _ <<<"$("$MKBAD" col long.h5 /x 0)"
read -r me_short _ <<<"$("$MKBAD" col short.h5 /x 0)"
read -r ctx_rows ctx_cols _ ctx_mean _ <<<"$("$MKBAD" stats short.h5 /context)"
check "sample --context-value per category: short eruptions ($me_short) below 3, long ones ($me_long) above 3.5" \
    awk -v s="$me_short" -v l="$me_long" 'BEGIN { exit !(s < 3 && l > 3.5) }'
check "the sample file holds the context of every sample (2000 x 2, mean 0.5: $ctx_rows x $ctx_cols, $ctx_mean)" \
    bash -c "[ '$ctx_rows $ctx_cols' = '2000 2' ] && awk -v m='$ctx_mean' 'BEGIN { exit !(m == 0.5) }'"
nfrun info short.h5 >"$T/info" 2>&1
check "info SAMPLES: the columns, the category of all 2000 rows, the model's log-density, how they were drawn" \
    bash -c "grep -qE '^samples +short.h5' '$T/info' && grep -qE '^ +eruptions ' '$T/info' &&
             grep -qE '^ +kind=short +2000 rows' '$T/info' && grep -qE '^log-density +/logp' '$T/info' &&
             grep -qE '^context_value +kind=short$' '$T/info' && grep -qE '^model +m.h5$' '$T/info'"
nfrun sample m.h5 -n 10 -o bad.h5 >/dev/null 2>"$T/err"
rc=$?
check "sample of a conditional model without a context: exit 1 suggesting --context-value kind=long" \
    bash -c "[ $rc = 1 ] && grep -q 'choose them with --context-value (e.g. --context-value kind=long)' '$T/err'"
nfrun sample m.h5 -n 10 --context-value kind=medium -o bad.h5 >/dev/null 2>"$T/err"
rc=$?
check "sample --context-value of an unknown category: exit 1 listing the categories" \
    bash -c "[ $rc = 1 ] && grep -q \"no context value 'kind=medium' (expected: kind=long, kind=short)\" '$T/err'"

# ---- eval and logprob: names and categories ---------------------------------------------------
nfrun eval m.h5 f.h5 --threads 1 >"$T/out" 2>&1
check "eval names the columns and reports each category" \
    bash -c "grep -qE '^columns +eruptions, waiting$' '$T/out' && grep -qE '^by context +kind=long: [0-9]+ samples' '$T/out' &&
             grep -qE '^ +kind=short: [0-9]+ samples' '$T/out'"
j=$(nfrun eval m.h5 f.h5 --json --threads 1 2>&1)
check "eval --json: columns and by_context" \
    bash -c "grep -qF '\"columns\": [\"eruptions\", \"waiting\"]' <<<'$j' && grep -qF '{\"context\": \"kind=short\", \"n\": ' <<<'$j'"
nfrun logprob m.h5 f.h5 --threads 1 -o lp.h5 >/dev/null 2>&1
nfrun info lp.h5 >"$T/info" 2>&1
check "info LOGPROB: the count, the mean and where they came from" \
    bash -c "grep -qE '^/logp +272 values, mean' '$T/info' && grep -qE '^model +m.h5$' '$T/info' && grep -qE '^data +f.h5$' '$T/info'"

# ---- plot with the column names ---------------------------------------------------------------
nfrun plot m.h5 --data f.h5 --context-value kind=short --threads 1 -o short.png >"$T/out" 2>"$T/err"
rc=$?
check "plot of one category: exit 0, a PNG, labelled with the column names and the category" \
    bash -c "[ $rc = 0 ] && [ -s short.png ] && grep -q 'wrote short.png (columns eruptions, waiting; context kind=short)' '$T/err'"
# the same picture from data whose short rows come in the opposite order and whose long rows are
# elsewhere: the plot shows the chosen context's rows, all of them, whatever the others hold
awk -F, 'NR == FNR { if ($NF == "short") s[++n] = $2 "," $3; next }
         FNR == 1 { print; next }
         { OFS = ","; if ($NF == "short") { split(s[n--], v, ","); $2 = v[1]; $3 = v[2] } else $3 += 500; print }' \
    faithful.csv faithful.csv >other.csv
nfrun data import other.csv --columns eruptions,waiting --context kind -o other.h5 >/dev/null 2>&1
nfrun plot m.h5 --data other.h5 --context-value kind=short --threads 1 -o short2.png >/dev/null 2>&1
check "plot of one category: the same picture from the category's rows in another order, the other rows moved" \
    cmp -s short.png short2.png
nfrun plot m.h5 -o bad.png >/dev/null 2>"$T/err"
rc=$?
check "plot of a conditional model without a context: exit 1 naming --context-value, no file" \
    bash -c "[ $rc = 1 ] && grep -q 'choose the context to draw with --context-value' '$T/err' && [ ! -e bad.png ]"
nfrun data import faithful.csv --columns eruptions,waiting,id -o three.h5 >/dev/null 2>&1
nfrun fit three.h5 --flow realnvp --layers 2 --hidden 8 --steps 20 --threads 1 --quiet -o m3.h5 2>/dev/null
nfrun plot m3.h5 --data three.h5 -o pair.png >/dev/null 2>"$T/err"
check "pair plot of an imported file: named after its columns" \
    grep -q 'wrote pair.png (columns eruptions, waiting, id)' "$T/err"

# ---- split --val 0, small-data defaults, --threads everywhere ----------------------------------
nfrun data split f.h5 --val 0 --test 0.25 -o parts >"$T/out" 2>&1
check "split --val 0: train and test files, no empty validation file" \
    bash -c "[ -s parts.train.h5 ] && [ -s parts.test.h5 ] && [ ! -e parts.val.h5 ] &&
             grep -q '204 train, 0 validation, 68 test rows -> parts.train.h5, parts.test.h5' '$T/out'"
nfrun info parts.test.h5 >"$T/info" 2>&1
check "split keeps the names: info of a part shows the columns and categories" \
    bash -c "grep -qE '^ +waiting ' '$T/info' && grep -qE '^ +kind=(long|short) ' '$T/info' && grep -qE '^split +test$' '$T/info'"
nfrun fit f.h5 --steps 3000 --threads 1 -o small.h5 >"$T/out" 2>"$T/err"
rc=$?
check "fit with defaults on 272 rows: a note on parameters against numbers, stops early keeping the best weights" \
    bash -c "[ $rc = 0 ] && grep -q 'parameters for 490 numbers of training data (245 x 2) may overfit' '$T/err' &&
             grep -q 'early stopping (no improvement in 50 evaluations)' '$T/err'"
nfrun fit --help >"$T/out" 2>&1
check "fit --help states the default patience" grep -qE -- '--patience N .*\[50' "$T/out"
ok=1
nfrun data make moons -n 300 --threads 1 -o t.h5 >/dev/null 2>&1 || ok=0
for c in "sample m3.h5 -n 50 -o ts.h5" "eval m3.h5 three.h5" "logprob m3.h5 three.h5 -o tl.h5" \
         "plot m3.h5 -o tp.png"; do
    # shellcheck disable=SC2086
    nfrun $c --threads 2 >/dev/null 2>&1 || { ok=0; echo "    nf $c --threads 2 failed"; }
done
check "--threads on data make, sample, eval, logprob and plot" test $ok = 1

# ---- info on any file: sequences, a foreign HDF5 file ------------------------------------------
# seq FILE: an nf-sequences file; seq FILE plain: an HDF5 file of nobody's format (only /y)
cat >"$T/seq.c" <<'EOF'
#include <hdf5.h>
#include <string.h>
#include "datasets/sequences.h"
int main(int argc, char **argv)
{
    int64_t off[4] = {0, 3, 3, 5}, marks[5] = {1, 0, 1, 1, 0};
    double times[5] = {0.7, 1.35, 4.02, 2.385, 5.1}, t0[3] = {0, 0, 0}, t1[3] = {6.5, 3.75, 9};
    if (argc == 3 && !strcmp(argv[2], "plain")) {
        hsize_t n = 5;
        hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), s = H5Screate_simple(1, &n, NULL);
        hid_t d = H5Dcreate2(f, "/y", H5T_NATIVE_DOUBLE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        int bad = f < 0 || d < 0 || H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, times) < 0;
        H5Dclose(d), H5Sclose(s), H5Fclose(f);
        return bad;
    }
    return argc == 2 && nf_sequences_save(argv[1], 3, off, times, t0, t1, marks, 2) == NF_OK ? 0 : 1;
}
EOF
flags="-std=c11 -D_POSIX_C_SOURCE=200809L -I$ROOT $(pkg-config --cflags hdf5-serial 2>/dev/null)"
case $BUILD in *double*) flags="$flags -DNF_DOUBLE=1" ;; esac
case $BUILD in *-san) flags="$flags -fsanitize=address,undefined" ;; esac
libs="$(pkg-config --libs gsl hdf5-serial fftw3 fftw3f cairo 2>/dev/null | sed 's/-lgslcblas//g') -lopenblas -lgif"
# shellcheck disable=SC2086
if gcc $flags "$T/seq.c" -o "$T/seq" "$BUILD/libnf.a" $libs -fopenmp -lm 2>"$T/seq.log" && "$T/seq" seq.h5; then
    nfrun info seq.h5 >"$T/info" 2>&1
    check "info SEQUENCES: 3 sequences, 5 events, 2 mark types, the windows" \
        bash -c "grep -qE '^sequences +seq.h5 \(nf-sequences v1' '$T/info' && grep -qE '^sequences +3$' '$T/info' &&
                 grep -qE '^events +5 in all' '$T/info' && grep -qE '^marks +2 types' '$T/info' &&
                 grep -qE '^windows +from 0 to 9$' '$T/info'"
else
    fail "build the sequences writer: $(head -c 300 "$T/seq.log")"
fi
if [ -x "$T/seq" ] && "$T/seq" plain.h5 plain; then
    nfrun info plain.h5 >"$T/out" 2>"$T/err"
    rc=$?
    check "info of an HDF5 file that is not an nf file: exit 1, one line saying so" \
        bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'plain.h5: not an nf file' '$T/err'"
fi
"$MKBAD" noxy noxy.h5
nfrun info noxy.h5 >"$T/out" 2>"$T/err"
rc=$?
check "info of an nf-data file without /x: exit 1 naming /x" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'noxy.h5: no dataset /x' '$T/err'"
finish
