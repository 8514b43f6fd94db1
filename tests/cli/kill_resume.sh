#!/usr/bin/env bash
# tests/cli/kill_resume.sh - killing nf fit never leaves a corrupt model or checkpoint, and
# --resume continues from the last one.  nf fit is killed with SIGKILL at random moments and
# resumed; after every kill the model file must load and evaluate, its step never goes back, and
# the resumed run must end with exactly the model of a run that was never interrupted (the trainer
# promises bit-exact resume for the same build and thread count).  SIGTERM must stop with exit
# 130 and a resumable checkpoint.  NF_TEST_SEED=S repeats the kill times of an earlier run.
# Run by `make check` with NF=build/<variant>/nf.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

seed=${NF_TEST_SEED:-$(($$ % 32768))}
RANDOM=$seed

nfrun data make moons -n 2000 --seed 21 -o train.h5 >/dev/null 2>&1
nfrun data make moons -n 1000 --seed 22 -o test.h5 >/dev/null 2>&1
FIT=(--flow realnvp --layers 2 --hidden 16 --steps 2500 --batch 128 --checkpoint-every 25 --eval-every 100
    --threads 1 --seed 9 --quiet)
nfrun fit train.h5 "${FIT[@]}" -o ref.h5 2>"$T/err"
ref=$(nfrun eval ref.h5 test.h5 --json 2>&1)
if ! grep -q '^{"n": 1000, "dim": 2, "mean_log_prob": ' <<<"$ref"; then
    fail "uninterrupted reference run: $ref $(head -c 200 "$T/err")"
    finish
fi
pass "uninterrupted reference run (kill times from NF_TEST_SEED=$seed)"

step_of() { awk '/^progress/ {gsub(";", "", $3); print $3}' "$1"; }

# Start nf fit (fresh, or resuming model.h5 once it exists) in the background; sets PID.
start_fit() {
    if [ -f model.h5 ]; then
        "$NF" fit --resume model.h5 --threads 1 --quiet 2>"$T/bg.err" &
    else
        "$NF" fit train.h5 "${FIT[@]}" -o model.h5 2>"$T/bg.err" &
    fi
    PID=$!
    BG_PIDS="$BG_PIDS $PID"
}

# ---- SIGKILL at random moments ---------------------------------------------------------------
# under NF_WRAP (valgrind: nf starts and trains a few hundred times slower) the moments are 20 times
# later, as the time limits are, so some kills still come after the first checkpoint
scale=1
[ -n "${NF_WRAP:-}" ] && scale=20
last=-1
had_model=0
finished=0
for i in 1 2 3 4 5 6 7 8; do
    ms=$(((60 + RANDOM % 700) * scale))
    start_fit
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    kill -9 "$PID" 2>/dev/null
    wait_bg "$PID" 10 2>/dev/null
    st=$?
    what="SIGKILL $i after $ms ms"
    if [ "$st" = 0 ]; then
        pass "$what: the run had already finished"
        finished=1
        break
    fi
    if [ "$st" != 137 ]; then
        fail "$what: exit $st before the kill: $(head -c 300 "$T/bg.err")"
        continue
    fi
    if [ ! -f model.h5 ]; then
        if [ $had_model = 0 ]; then pass "$what: killed before the first checkpoint, no model file"
        else fail "$what: model.h5 disappeared"; fi
        continue
    fi
    had_model=1
    nfrun info model.h5 >"$T/info" 2>&1
    rc=$?
    step=$(step_of "$T/info")
    j=$(nfrun eval model.h5 test.h5 --json 2>&1)
    if [ $rc = 0 ] && [ -n "$step" ] && [ "$step" -ge "$last" ] && grep -q '"mean_log_prob": -[0-9]' <<<"$j"; then
        pass "$what: model.h5 loads and evaluates, checkpoint at step $step (was $last)"
    else
        fail "$what: info exit $rc, step '$step' (was $last), eval: $j $(head -c 200 "$T/info")"
    fi
    last=${step:-$last}
done

nfrun fit --resume model.h5 --threads 1 >"$T/out" 2>"$T/err"
rc=$?
if [ $finished = 1 ] || [ "$last" = 2500 ]; then
    check "resume of the finished run exits 0" test $rc = 0
else
    check "resume continues from the last checkpoint (step $last) and finishes" \
        bash -c "[ $rc = 0 ] && grep -q 'resuming model.h5 at step $last ' '$T/err' && grep -q 'reached 2500 steps' '$T/err'"
fi
j=$(nfrun eval model.h5 test.h5 --json 2>&1)
check "the killed and resumed run ends with the uninterrupted run's model" test "$j" = "$ref"
check "no temporary files left behind (stale ones of killed runs removed)" test -z "$(stray_tmp)"

# ---- SIGTERM ---------------------------------------------------------------------------------
"$NF" fit train.h5 "${FIT[@]}" -o term.h5 2>"$T/term.err" &
PID=$!
BG_PIDS="$BG_PIDS $PID"
wait_for_file term.h5 "$PID"
kill -TERM "$PID" 2>/dev/null
wait_bg "$PID" 60
st=$?
check "SIGTERM: stops with exit 130 (got $st)" test "$st" = 130
check "SIGTERM: one line on stderr saying how to continue" \
    bash -c "[ \$(wc -l <'$T/term.err') = 1 ] && grep -q 'continue with: nf fit --resume term.h5' '$T/term.err'"
nfrun info term.h5 >"$T/info" 2>&1
tstep=$(step_of "$T/info")
check "SIGTERM: the checkpoint loads, stopped on request at step $tstep" \
    bash -c "grep -q 'stopped on request' '$T/info' && [ '$tstep' -gt 0 ] && [ '$tstep' -lt 2500 ]"
check "SIGTERM: no temporary files" test -z "$(stray_tmp)"
cp term.h5 term.copy
nfrun fit --resume term.h5 --threads 1 >"$T/out" 2>"$T/err"
rc=$?
check "SIGTERM: --resume continues at step $tstep and finishes" \
    bash -c "[ $rc = 0 ] && grep -q 'resuming term.h5 at step $tstep ' '$T/err'"
j=$(nfrun eval term.h5 test.h5 --json 2>&1)
check "SIGTERM: the resumed run ends with the uninterrupted run's model" test "$j" = "$ref"

# ---- resuming with the data changed under the checkpoint -------------------------------------
nfrun data make moons -n 1500 --seed 23 -o train.h5 >/dev/null 2>&1
sum=$(sha256sum <term.copy)
nfrun fit --resume term.copy >"$T/out" 2>"$T/err"
rc=$?
check "resume after the data changed: exit 1, one line naming the row counts, checkpoint untouched" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'training items' '$T/err' &&
             [ '$sum' = \"\$(sha256sum <term.copy)\" ]"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
