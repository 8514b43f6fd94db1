#!/usr/bin/env bash
# tests/cli/stream.sh - nf fit --stream reads the training rows from the file batch by batch (data
# larger than memory): it must train exactly the model that loading the rows trains (same split,
# same batches), resume after SIGTERM as streamed, and name a bad row when it reaches it (context
# rows: tests/check_source.c).  Run by `make check` with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi
nfrun data make gmm --dim 3 -n 3000 --seed 5 -o g.h5 >/dev/null 2>&1
nfrun data make gmm --dim 3 -n 1000 --seed 6 -o gt.h5 >/dev/null 2>&1
FIT=(--flow maf --layers 2 --hidden 16 --steps 150 --batch 128 --eval-every 50 --threads 1 --seed 3 --quiet)
nfrun fit g.h5 "${FIT[@]}" -o mem.h5 2>"$T/err"
nfrun fit g.h5 "${FIT[@]}" --stream -o str.h5 2>>"$T/err"
a=$(nfrun eval mem.h5 gt.h5 --json 2>&1)
b=$(nfrun eval str.h5 gt.h5 --json 2>&1)
check "--stream trains exactly the model of the loaded rows ($b)" \
    bash -c "[ -n '$a' ] && [ '$a' = '$b' ] && grep -q mean_log_prob <<<'$a'"
nfrun info str.h5 >"$T/info" 2>&1
check "info of the streamed fit loads" grep -q '^kind *density' "$T/info"

# stopped and resumed: the checkpoint remembers the streaming
LONG=(--flow maf --layers 2 --hidden 16 --steps 3000 --batch 64 --eval-every 100 --threads 1 --seed 3 --quiet
    --checkpoint-every 20)
"$NF" fit g.h5 "${LONG[@]}" --stream -o r.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file r.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 20
st=$?
if [ "$st" = 0 ]; then
    skip "the run finished before SIGTERM: resume not exercised"
else
    nfrun fit --resume r.h5 --threads 1 --quiet 2>"$T/err"
    rc=$?
    nfrun fit g.h5 "${LONG[@]}" -o ref.h5 2>/dev/null
    e1=$(nfrun eval r.h5 gt.h5 --json 2>&1)
    e2=$(nfrun eval ref.h5 gt.h5 --json 2>&1)
    check "a streamed run stopped (exit $st) and resumed (exit $rc) ends with the uninterrupted model" \
        bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ] && grep -q mean_log_prob <<<'$e1'"
fi

# a NaN in the file is found when its row is read, and named
"$MKBAD" nan bad.h5 >/dev/null 2>&1 # 120 x 2, NaN at row 37, column 1
nfrun fit bad.h5 --flow maf --layers 1 --hidden 8 --stream --val-frac 0 --batch 16 --steps 50 -o x.h5 2>"$T/err"
rc=$?
check "a NaN row is named when it is read (exit $rc: $(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'row 37, column 1' '$T/err' && [ ! -e x.h5 ]"
nfrun fit missing.h5 --stream -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a missing file: exit 1, one line" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q missing.h5 '$T/err'"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
