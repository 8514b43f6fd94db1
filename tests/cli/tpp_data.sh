#!/usr/bin/env bash
# tests/cli/tpp_data.sh - event-sequence data with the truth: nf data make tpp-* (every process),
# nf data import --sequences and nf tpp import --true-process, nf data split of a sequences file by
# whole sequences, and nf tpp eval's true NLL and gap.  The truth is checked against closed forms
# computed here with awk (a Poisson process: log L = n log r - r (t_end - t_start)), and eval on the
# five shared-set copies reports the README's true NLL per event to 3 decimals.  Bad input: one
# clear line.  Run by `make check` with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

TPP_DATA=${NF_TEST_DATA:-$ROOT/tests/data}/tpp
# one_line_err RC WANT WORD: exit status RC and exactly one line on stderr ($T/err) containing WORD
one_line_err() { [ "$1" = "$2" ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q -- "$3" "$T/err"; }
# num KEY: the number after "KEY": in the JSON in $T/json
num() { sed -n "s/.*\"$1\": \([-0-9.e+]*\).*/\1/p" "$T/json"; }

# ---- nf data make tpp-* --------------------------------------------------------------------------
nfrun data make --list >"$T/list" 2>&1
for p in poisson hawkes self-correcting renewal nonstationary-poisson nonstationary-renewal hawkes1 hawkes2; do
    check "nf data make --list lists tpp-$p" grep -q "^tpp-$p " "$T/list"
done
nfrun data make --help >"$T/help" 2>&1
check "nf data make --help points to tpp-NAME" grep -q "tpp-NAME" "$T/help"
nfrun data make tpp-hawkes --help >"$T/help" 2>&1
check "nf data make tpp-hawkes --help gives the options, defaults and an example" \
    bash -c "grep -q -- '--t-end' '$T/help' && grep -q 'default 64' '$T/help' && grep -q 'default 1024' '$T/help' && grep -q example '$T/help'"

for p in poisson hawkes self-correcting renewal nonstationary-poisson nonstationary-renewal; do
    nfrun data make "tpp-$p" -n 5 --t-end 40 --seed 2 -o "$p.h5" >"$T/out" 2>"$T/err"
    rc=$?
    check "make tpp-$p on a window (exit $rc: $(head -c 200 "$T/err"))" \
        bash -c "[ $rc = 0 ] && [ -s '$p.h5' ] && grep -q 'true NLL [-0-9.]* per event' '$T/out'"
done
# the stored truth of a Poisson process: its closed form, from the counts the command reports
nfrun data make tpp-poisson --rate 2.5 -n 20 --t-end 40 --seed 4 -o pois.h5 >"$T/out" 2>&1
ev=$(sed -n 's/.* \([0-9]*\) events.*/\1/p' "$T/out")
got=$(sed -n 's/.*true NLL \([-0-9.]*\) per event.*/\1/p' "$T/out")
want=$(awk -v n="$ev" 'BEGIN { printf "%.5f", (2.5 * 40 * 20 - n * log(2.5)) / n }')
check "tpp-poisson --rate 2.5: true NLL per event $got = (r T n_seq - N log r) / N = $want" test "$got" = "$want"
nfrun data make tpp-poisson --rate 2.5 -n 20 --t-end 40 --seed 4 -o pois2.h5 >"$T/out2" 2>&1
nfrun data make tpp-poisson --rate 2.5 -n 20 --t-end 40 --seed 5 -o pois3.h5 >"$T/out3" 2>&1
check "the same seed draws the same sequences, another seed others" \
    bash -c "[ \"\$(sed 's/pois2/pois/' '$T/out2')\" = \"\$(cat '$T/out')\" ] && [ \"\$(sed 's/pois3/pois/' '$T/out3')\" != \"\$(cat '$T/out')\" ]"
nfrun data make tpp-hawkes1 -n 3 -o h1.h5 >"$T/out" 2>&1
check "the default count is the shared sets' 1,024 events a sequence" grep -q '3 sequences, 3072 events' "$T/out"
nfrun data make tpp-hawkes --params mu=0.3,alpha=0.5:0.2 --beta 1:10 -n 2 --events 50 -o hp.h5 >"$T/out" 2>&1
check "parameters by --params and --KEY together" grep -q 'hawkes(mu=0.3,alpha=0.5:0.2,beta=1:10), 2 sequences, 100 events' "$T/out"

nfrun data make tpp-nosuch -o bad.h5 >/dev/null 2>"$T/err"
check "an unknown process: usage error, one line listing the processes" one_line_err $? 2 "expected one of poisson, hawkes"
nfrun data make tpp-poisson --rate -1 -o bad.h5 >/dev/null 2>"$T/err"
check "a negative rate: usage error, one line naming rate" one_line_err $? 2 "rate=-1"
nfrun data make tpp-hawkes --gamma 2 -o bad.h5 >/dev/null 2>"$T/err"
check "an unknown parameter: usage error, one line naming it" one_line_err $? 2 "unknown option 'gamma'"
nfrun data make tpp-poisson --t-end 0 -o bad.h5 >/dev/null 2>"$T/err"
check "--t-end 0: usage error, one line" one_line_err $? 2 "expected a window end after --t-start"
nfrun data make tpp-poisson --t-end -3 -o bad.h5 >/dev/null 2>"$T/err"
check "--t-end -3: usage error, one line" one_line_err $? 2 "--t-end -3"
nfrun data make tpp-poisson --t-end 5 --events 10 -o bad.h5 >/dev/null 2>"$T/err"
check "--t-end and --events together: usage error" one_line_err $? 2 "give one"
nfrun data make tpp-poisson >/dev/null 2>"$T/err"
check "no output file: usage error" one_line_err $? 2 "-o SEQ.h5"
check "no file is left by a refused make" test ! -e bad.h5

# ---- import with the truth -----------------------------------------------------------------------
awk 'BEGIN { srand(7); print "id,time"; for (s = 0; s < 40; s++) { t = -log(1 - rand()) / 2;
     while (t < 30) { printf "%d,%.9f\n", s, t; t += -log(1 - rand()) / 2 } } }' >pois.csv
N=$(($(wc -l <pois.csv) - 1))
nfrun data import pois.csv --sequences --t-end 30 --true-process poisson:rate=2 -o ps.h5 >/dev/null 2>"$T/err"
rc=$?
got=$(sed -n 's/.*NLL per event \([-0-9.]*\) on the windows.*/\1/p' "$T/err")
want=$(awk -v n="$N" 'BEGIN { printf "%.6f", (2 * 30 * 40 - n * log(2)) / n }')
check "nf data import --sequences --true-process: true NLL per event $got = (r T n_seq - N log r) / N = $want (exit $rc)" \
    bash -c "[ $rc = 0 ] && [ '$got' = '$want' ]"
nfrun data import pois.csv -o rows.h5 >/dev/null 2>&1
check "without --sequences the CSV is rows (no autodetection)" bash -c "'$NF' info rows.h5 2>&1 | grep -q 'nf-data'"
printf 'id,time\n1,0.5\n1,0.5\n2,0.7\n' >ties.csv
nfrun tpp import ties.csv --true-process poisson -o t.h5 >/dev/null 2>"$T/err"
check "a tie under a true process: exit 1, one line naming the sequence" \
    one_line_err $? 1 "sequence 0 under the true process poisson"
nfrun tpp import ties.csv --true-process hawkes:mu=-2 -o t.h5 >/dev/null 2>"$T/err"
check "a bad true-process parameter: usage error, one line" one_line_err $? 2 "mu=-2"
check "no file is left by a refused import" test ! -e t.h5
# text sequence ids (users, machines): the same sequences as numbered ids, 7 and 7.0 one sequence
printf 'user,time,kind\nann,0.5,0\nbob,0.25,1\nann,1.5,1\n7,2,0\n7.0,3,1\nbob,4,0\n' >named.csv
printf 'user,time,kind\n1,0.5,0\n2,0.25,1\n1,1.5,1\n3,2,0\n3,3,1\n2,4,0\n' >numbered.csv
nfrun tpp import named.csv -o named.h5 >/dev/null 2>"$T/err"
rc=$?
nfrun tpp import numbered.csv -o numbered.h5 >/dev/null 2>&1
gcc -O1 -o "$T/h5reldiff" "$ROOT/tests/cli/h5reldiff.c" $(pkg-config --cflags --libs hdf5-serial) -lm 2>/dev/null
same() { for d in /times /offsets /marks; do [ "$("$T/h5reldiff" named.h5 numbered.h5 $d 2>&1)" = 0.000e+00 ] || return 1; done; }
check "text sequence ids import like numbered ones, 7 and 7.0 one sequence (exit $rc: $(head -c 200 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q '3 sequences, 6 events, 2 mark types' '$T/err'"
check "the same times, sequences and marks as the numbered file" same
printf 'user,time\nann,0.5\n,0.7\n' >noid.csv
nfrun tpp import noid.csv -o t.h5 >/dev/null 2>"$T/err"
check "an empty sequence id: exit 1, one line naming the line and column" one_line_err $? 1 "noid.csv line 3, column 1 ('user'): empty field"

# ---- split by whole sequences --------------------------------------------------------------------
nfrun data split ps.h5 --val 0.2 --test 0.2 --seed 5 -o parts >"$T/out" 2>"$T/err"
rc=$?
check "split of a sequences file: 24/8/8 sequences with their truth (exit $rc: $(cat "$T/out" "$T/err" | head -c 300))" \
    bash -c "[ $rc = 0 ] && grep -q '24 train, 8 validation, 8 test sequences (with their true log-likelihoods)' '$T/out' && [ -s parts.train.h5 ] && [ -s parts.val.h5 ] && [ -s parts.test.h5 ]"
nfrun data split ps.h5 --val 0.5 --test 0.5 -o no >/dev/null 2>"$T/err"
check "fractions summing to 1: usage error, one line" one_line_err $? 2 "leave no training"
nfrun data split ps.h5 --val 0.7 --test 0.4 -o no >/dev/null 2>"$T/err"
check "fractions summing above 1: usage error, one line" one_line_err $? 2 "leave no training"
check "no part is written by a refused split" test -z "$(ls no.* 2>/dev/null)"

# ---- eval: the true NLL in both conventions and the gap -------------------------------------------
FIT=(--hidden 4 --components 2 --steps 3 --batch 8 --eval-every 0 --threads 2 --quiet --seed 3)
nfrun tpp fit parts.train.h5 "${FIT[@]}" -o m.h5 >/dev/null 2>"$T/err"
check "a tiny fit on the training part (exit $?: $(head -c 200 "$T/err"))" test -s m.h5
nfrun tpp eval m.h5 parts.test.h5 --json >"$T/json" 2>"$T/err"
k=8
n=$(num events)
t1=$(num true_nll_per_event)
t2=$(num true_nll_per_event_no_survival)
g=$(num gap_nll_per_event)
nll=$(num nll_per_event)
w1=$(awk -v n="$n" -v k=$k 'BEGIN { printf "%.10f", (2 * 30 * k - n * log(2)) / n }')
check "eval: the test part's true NLL per event $t1 is its own sequences' closed form $w1" close_to "$t1" "$w1" 1e-7
check "eval: the gap is model minus truth ($g = $nll - $t1)" \
    close_to "$g" "$(awk -v a="$nll" -v b="$t1" 'BEGIN { print a - b }')" 1e-6
se=$(num gap_nll_per_event_stderr)
check "eval: the gap's standard error over sequences is positive and below the gap's scale ($se)" \
    awk -v s="$se" 'BEGIN { exit !(s > 0 && s < 1) }'
# without the survival term each sequence loses -2 (30 - t_last) < 0 from its log-likelihood's
# window form, so its true NLL is lower
check "eval: the no-survival truth ($t2) is below the window truth ($t1)" awk -v a="$t2" -v b="$t1" 'BEGIN { exit !(a < b) }'
nfrun tpp eval m.h5 parts.test.h5 >"$T/out" 2>&1
check "eval's text names the process and prints the gap" \
    bash -c "grep -q 'true process  *poisson(rate=2)' '$T/out' && grep -q 'true NLL per event .*gap [-+]' '$T/out'"
nfrun tpp eval m.h5 pois.h5 --json >"$T/json" 2>&1
check "a made file's truth is read by eval: true NLL per event $(num true_nll_per_event)" test -n "$(num true_nll_per_event)"

# the five shared sets: the README's true NLL per event (first interval from 0, no survival term)
if [ -r "$TPP_DATA/poisson.npy" ]; then
    for pair in poisson:0.995 renewal:0.260 self_correcting:0.757 hawkes1:0.500 hawkes2:0.015; do
        set=${pair%%:*}
        readme=${pair#*:}
        nfrun tpp import "$TPP_DATA/$set.npy" --true-process "$set" -o "$set.h5" >/dev/null 2>"$T/err"
        nfrun tpp eval m.h5 "$set.h5" --json >"$T/json" 2>>"$T/err"
        got=$(awk -v v="$(num true_nll_per_event_no_survival)" 'BEGIN { printf "%.3f", v }')
        check "eval on $set: true NLL per event $got (README $readme)" test "$got" = "$readme"
    done
else
    skip "the shared TPP sets are not in $TPP_DATA"
fi

# ---- bad truth in a sequences file ----------------------------------------------------------------
# a file whose /log_lik_true is one entry short, written through HDF5 by a helper built here
cat >"$T/mktruth.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include "core/h5.h"
/* mktruth IN OUT: OUT = IN's sequences with a /log_lik_true one entry short */
int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    nf_h5 *f, *g;
    double *t, *ts, *te;
    int64_t *off;
    size_t nt, ns, no, c;
    if (nf_h5_open(&f, argv[1], NULL, 0) || nf_h5_read_double(f, "/times", &t, &nt, &c) ||
        nf_h5_read_int64(f, "/offsets", &off, &no, &c) || nf_h5_read_double(f, "/t_start", &ts, &ns, &c) ||
        nf_h5_read_double(f, "/t_end", &te, &ns, &c)) return fprintf(stderr, "%s\n", nf_strerror_last()), 1;
    nf_h5_close(f);
    if (nf_h5_create(&g, argv[2], "nf-sequences", 1) || nf_h5_write_double(g, "/times", t, nt, 0) ||
        nf_h5_write_int64(g, "/offsets", off, no, 0) || nf_h5_write_double(g, "/t_start", ts, ns, 0) ||
        nf_h5_write_double(g, "/t_end", te, ns, 0) || nf_h5_write_double(g, "/log_lik_true", ts, ns - 1, 0) ||
        nf_h5_commit(g)) return fprintf(stderr, "%s\n", nf_strerror_last()), 1;
    free(t), free(ts), free(te), free(off);
    return 0;
}
EOF
libs="$(pkg-config --libs gsl hdf5-serial fftw3 fftw3f cairo 2>/dev/null | sed 's/-lgslcblas//g') -lopenblas -lgif"
san=""
case $BUILD in *tsan*) san="-fsanitize=thread" ;; *san*) san="-fsanitize=address,undefined" ;; esac
# shellcheck disable=SC2086
if gcc -std=c11 -D_POSIX_C_SOURCE=200809L -O1 $san -I"$ROOT" $(pkg-config --cflags hdf5-serial 2>/dev/null) \
    "$T/mktruth.c" -o "$T/mktruth" "$BUILD/libnf.a" $libs -fopenmp -lm 2>"$T/cc.log" && "$T/mktruth" ps.h5 short.h5; then
    nfrun tpp eval m.h5 short.h5 >/dev/null 2>"$T/err"
    rc=$?
    check "eval of a /log_lik_true one entry short: exit 1, one line ($(head -c 200 "$T/err"))" \
        one_line_err $rc 1 "short.h5:/log_lik_true has 39 entries for 40 sequences"
    nfrun data split short.h5 -o sp >/dev/null 2>"$T/err"
    check "split of it: exit 1, the same line" one_line_err $? 1 "/log_lik_true has 39 entries for 40 sequences"
else
    fail "build the helper that writes a bad truth: $(head -c 300 "$T/cc.log")"
fi
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
