#!/usr/bin/env bash
# tests/cli/dependent.sh - nf data make dependent-*, nf fit --dependence equi|kinship, nf info's
# rho / lambda, nf eval (marginal, and --joint on the training rows), SIGTERM and --resume of a
# dependent fit ending with the uninterrupted model, and the errors: no i.i.d. validation set, a
# kinship matrix of the wrong size, a missing group dataset, --joint on an ordinary model.
# (tests/check_dependent*.c check the estimator and the model themselves.)  Run by `make check`
# with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

# ---- data ----------------------------------------------------------------------------------------
nfrun data make dependent-crescent --structure equi -n 1500 --n-val 1000 --seed 3 -o tr.h5 --val va.h5 \
    --test te.h5 >/dev/null 2>"$T/err"
rc=$?
check "data make dependent-crescent equi (exit $rc: $(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q '1500 dependent rows (equi: [0-9]* blocks)' '$T/err' && [ -s tr.h5 ] && [ -s va.h5 ] && [ -s te.h5 ]"
nfrun info tr.h5 >"$T/out" 2>&1
check "the training file carries the true marginal log-density" grep -q 'logp_true' "$T/out"
check "info counts its groups of related rows" \
    grep -q 'dependence  */group: [0-9]* groups of related rows, the largest [0-9]* rows' "$T/out"
# (the pedigree's many small groups of relatives let a 400-row fit find lambda; see the fits below)
nfrun data make dependent-abs --structure kinship --relatives pedigree -n 400 --n-val 800 --seed 4 -o trk.h5 \
    --val vak.h5 >/dev/null 2>"$T/err"
rc=$?
check "data make dependent-abs kinship, pedigree (exit $rc: $(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q 'kinship, pedigree: [0-9]* entries' '$T/err' && [ -s trk.h5 ]"
nfrun data make dependent-abs --structure kinship -n 400 -o trf.h5 >/dev/null 2>"$T/err"
rc=$?
check "data make dependent-abs kinship: families by default (exit $rc: $(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q 'kinship, families: [0-9]* entries' '$T/err' && [ -s trf.h5 ]"
nfrun fit trf.h5 --dependence kinship --kinship trf.h5 --val-frac 0 --steps 2 --threads 1 -o f.h5 >/dev/null 2>"$T/err"
rc=$?
check "fit on families: says how many (exit $rc: $(head -c 200 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q 'kinship over 400 rows in [0-9]* families of relatives (the largest [0-9]* rows)' '$T/err'"
nfrun data make dependent-abs --structure kinship --relatives cousins -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown --relatives: usage error listing both" \
    bash -c "[ $rc = 2 ] && grep -q 'families|pedigree' '$T/err' && [ ! -e x.h5 ]"
for s in sign sine crescent-cube; do
    nfrun data make dependent-$s -n 300 -o d_$s.h5 >/dev/null 2>&1
    check "data make dependent-$s" test -s d_$s.h5
done
nfrun data make dependent-nope -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown shape: usage error listing the shapes" \
    bash -c "[ $rc = 2 ] && grep -q 'crescent-cube' '$T/err' && [ ! -e x.h5 ]"
nfrun data make dependent-sign --structure blocks -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown structure: usage error" bash -c "[ $rc = 2 ] && grep -q 'equi or kinship' '$T/err'"

# ---- split by whole groups: each part keeps its rows' ids and K, and trains as the whole file -----
nfrun data split tr.h5 --val 0.1 --test 0.1 --seed 5 -o eqs >"$T/out" 2>"$T/err"
rc=$?
check "data split of equi rows: by whole groups (exit $rc: $(cat "$T/out" "$T/err" | head -c 200))" \
    bash -c "[ $rc = 0 ] && grep -q 'whole groups of related rows: [0-9]*, [0-9]*, [0-9]*' '$T/out' && [ -s eqs.train.h5 ]"
nfrun fit eqs.train.h5 --dependence equi --val-frac 0 --flow realnvp --layers 2 --hidden 8 --steps 20 --threads 1 \
    --quiet -o eqs.h5 2>"$T/err"
rc=$?
check "fit --dependence equi on the training part (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
nfrun data split trf.h5 --val 0.2 --test 0 --seed 5 -o kins >"$T/out" 2>"$T/err"
rc=$?
check "data split of kinship rows: by whole families (exit $rc: $(cat "$T/out" "$T/err" | head -c 200))" \
    bash -c "[ $rc = 0 ] && grep -q 'whole groups of related rows' '$T/out' && [ -s kins.train.h5 ] && [ ! -e kins.test.h5 ]"
nfrun fit kins.train.h5 --dependence kinship --kinship kins.train.h5 --learn-lambda --val kins.val.h5 --flow realnvp \
    --layers 2 --hidden 8 --steps 20 --threads 1 --quiet -o kins.h5 2>"$T/err"
rc=$?
check "fit --dependence kinship on the training part, its K restricted to its rows (exit $rc: $(head -c 200 "$T/err"))" \
    test "$rc" = 0
nfrun info kins.val.h5 >"$T/out" 2>&1
check "info of the validation part: its families of K" \
    grep -q 'dependence  */K (triplets): [0-9]* families of related rows' "$T/out"
nfrun data split trf.h5 --val 0.6 --test 0.39 -o none >"$T/out" 2>"$T/err"
rc=$?
check "a split whose validation and test take every family: exit 1, one line" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'leaving none to train on' '$T/err' && [ ! -e none.train.h5 ]"

# ---- fit, info, eval -----------------------------------------------------------------------------
FIT=(--flow realnvp --layers 4 --hidden 16 --steps 600 --batch 100 --lr 3e-3 --eval-every 100 --threads 1 --seed 2
    --quiet)
nfrun fit tr.h5 --dependence equi --val va.h5 "${FIT[@]}" -o m.h5 2>"$T/err"
rc=$?
check "fit --dependence equi exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
nfrun info m.h5 >"$T/out" 2>&1
rho=$(sed -n 's/.*learned rho \([0-9.]*\).*/\1/p' "$T/out")
check "info names the kind and the learned rho ($rho)" \
    bash -c "grep -q 'kind  *dependent' '$T/out' && grep -q 'tr.h5:/group' '$T/out' && [ -n '$rho' ]"
check "the learned rho moved off its start 0.5 into (0, 1): $rho" \
    awk -v r="$rho" 'BEGIN { exit !(r > 0 && r < 1 && (r - 0.5 > 0.02 || 0.5 - r > 0.02)) }'
check "info: rho updated every 100 steps, every 10 in the first 500" \
    grep -q 'rho updated every 100 steps (every 10 in the first 500) from the latents of all rows' "$T/out"
# without a validation set the rows stay in their order: the same rho as with one (a shuffle of
# the rows by the split once scrambled the groups, and rho fell to 0.0001)
nfrun fit tr.h5 --dependence equi --val-frac 0 "${FIT[@]}" -o m0.h5 2>"$T/err"
rho0=$(nfrun info m0.h5 2>&1 | sed -n 's/.*learned rho \([0-9.]*\).*/\1/p')
check "fit --val-frac 0 learns the rho of the fit with --val ($rho0 against $rho)" \
    awk -v a="$rho0" -v b="$rho" 'BEGIN { exit !(a != "" && a - b < 0.05 && b - a < 0.05) }'
# a fit shorter than one pass over the rows: not every row has a latent yet, and the file still opens
nfrun fit tr.h5 --dependence equi --val va.h5 --steps 5 --batch 100 --quiet -o early.h5 2>"$T/err"
rc=$?
nfrun info early.h5 >"$T/out" 2>&1
check "a fit of 5 steps (not all rows seen) writes a model that opens (exit $rc; $(head -c 200 "$T/out"))" \
    bash -c "[ $rc = 0 ] && grep -q 'kind  *dependent' '$T/out'"
nfrun fit tr.h5 --dependence equi --update-every 0 --val va.h5 "${FIT[@]}" -o mg.h5 2>"$T/err"
rc=$?
nfrun info mg.h5 >"$T/out" 2>&1
check "fit --update-every 0: rho trained by gradient (exit $rc)" \
    bash -c "[ $rc = 0 ] && grep -q 'rho trained by gradient with the flow' '$T/out'"
j=$(nfrun eval m.h5 te.h5 --json 2>&1)
gap=$(sed -n 's/.*"kl_gap": \([-0-9.e]*\).*/\1/p' <<<"$j")
check "eval on the i.i.d. test set: the marginal density is within 1 nat of the truth ($gap)" \
    awk -v g="$gap" 'BEGIN { exit !(g != "" && g > -0.2 && g < 1) }'
j=$(nfrun eval m.h5 tr.h5 --joint --json 2>&1)
jp=$(sed -n 's/.*"joint_per_row": \([-0-9.e]*\).*/\1/p' <<<"$j")
mp=$(sed -n 's/.*"mean_log_prob": \([-0-9.e]*\).*/\1/p' <<<"$j")
check "eval --joint on the training rows: the joint per row ($jp) is above the i.i.d. one ($mp)" \
    awk -v a="$jp" -v b="$mp" 'BEGIN { exit !(a != "" && b != "" && a > b) }'
nfrun logprob m.h5 te.h5 -o lp.h5 >/dev/null 2>"$T/err"
check "logprob of a dependent model (its marginal density)" test -s lp.h5
nfrun sample m.h5 -n 100 -o s.h5 >/dev/null 2>"$T/err"
check "sample from a dependent model (its marginal density)" test -s s.h5

nfrun fit trk.h5 --dependence kinship --kinship trk.h5 --lambda 0.4 --val vak.h5 "${FIT[@]}" -o k.h5 2>"$T/err"
rc=$?
check "fit --dependence kinship with a fixed lambda (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
nfrun info k.h5 >"$T/out" 2>&1
check "info: kinship mixture, fixed lambda 0.4000" grep -q 'kinship mixture over 400 rows.*fixed lambda 0.4000' "$T/out"
nfrun fit trk.h5 --dependence kinship --kinship trk.h5 --learn-lambda --val vak.h5 "${FIT[@]}" -o kl.h5 2>"$T/err"
rc=$?
nfrun info kl.h5 >"$T/out" 2>&1
lam=$(sed -n 's/.*learned lambda \([0-9.]*\).*/\1/p' "$T/out")
check "fit --learn-lambda: the learned lambda ($lam; exit $rc) within 0.1 of the generating 0.5" \
    awk -v r="$lam" -v rc="$rc" 'BEGIN { exit !(rc == 0 && r > 0.4 && r < 0.6) }'
check "info: the learned lambda's update schedule" grep -q 'lambda updated at steps 100, 200, 400' "$T/out"
nfrun eval kl.h5 trk.h5 --joint >"$T/out" 2>&1
check "eval --joint of a kinship model" grep -q 'joint log-lik' "$T/out"

# ---- stop and resume -----------------------------------------------------------------------------
RES=(--flow realnvp --layers 2 --hidden 16 --steps 3000 --batch 100 --eval-every 500 --checkpoint-every 50
    --threads 1 --seed 5 --quiet)
nfrun fit tr.h5 --dependence equi --per-block-rho --val va.h5 "${RES[@]}" -o ref.h5 2>"$T/err"
check "an uninterrupted per-block fit" test -s ref.h5
"$NF" fit tr.h5 --dependence equi --per-block-rho --val va.h5 "${RES[@]}" -o r.h5 2>"$T/bg.err" &
PID=$!
BG_PIDS="$BG_PIDS $PID"
n=0
while [ ! -e r.h5 ] && [ $n -lt 300 ]; do sleep 0.05; n=$((n + 1)); done
kill -TERM "$PID" 2>/dev/null
wait_bg "$PID" 60
st=$?
bg_forget "$PID"
if [ "$st" = 0 ]; then
    skip "the fit finished before SIGTERM reached it (a fast machine): resume not exercised"
else
    check "SIGTERM stops the dependent fit with a checkpoint (exit $st)" bash -c "[ $st = 130 ] && [ -s r.h5 ]"
    nfrun fit --resume r.h5 --quiet --threads 1 2>"$T/err"
    rc=$?
    check "--resume re-reads the groups and finishes (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
fi
a=$(nfrun eval ref.h5 te.h5 --json 2>&1)
b=$(nfrun eval r.h5 te.h5 --json 2>&1)
check "the stopped and resumed fit ends with the uninterrupted model" test "$a" = "$b"
nfrun info r.h5 >"$T/out" 2>&1
check "info: one rho per block, pooled" grep -q 'learned rho per block ([0-9]*, pooled)' "$T/out"
nfrun fit tr.h5 --dependence equi --per-block-rho --unpooled-rho --val va.h5 --flow realnvp --layers 2 --hidden 16 \
    --steps 200 --threads 1 --quiet -o up.h5 2>"$T/err"
nfrun info up.h5 >"$T/out" 2>&1
check "--unpooled-rho: one rho per block by maximum likelihood" \
    bash -c "grep -q 'learned rho per block ([0-9]*):' '$T/out' && ! grep -q pooled '$T/out'"

# ---- errors ---------------------------------------------------------------------------------------
nfrun fit tr.h5 --dependence equi --unpooled-rho --val va.h5 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "--unpooled-rho without --per-block-rho: usage error naming --per-block-rho" \
    bash -c "[ $rc = 2 ] && grep -q -- '--per-block-rho' '$T/err' && [ ! -e b.h5 ]"
nfrun fit tr.h5 --dependence equi --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "--dependence without an i.i.d. validation set: usage error naming --val" \
    bash -c "[ $rc = 2 ] && grep -q -- '--val FILE' '$T/err' && [ ! -e b.h5 ]"
nfrun fit tr.h5 --dependence kinship --val va.h5 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "--dependence kinship without --kinship: usage error" bash -c "[ $rc = 2 ] && grep -q -- '--kinship FILE' '$T/err'"
nfrun fit trk.h5 --dependence kinship --kinship trk.h5 --update-every 5 --val vak.h5 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "--update-every with a fixed lambda: usage error naming --learn-lambda" \
    bash -c "[ $rc = 2 ] && grep -q -- 'add --learn-lambda' '$T/err' && [ ! -e b.h5 ]"
nfrun fit tr.h5 --rho 0.3 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "--rho without --dependence: usage error" bash -c "[ $rc = 2 ] && grep -q -- 'need --dependence' '$T/err'"
nfrun fit tr.h5 --dependence kinship --kinship trk.h5 --val va.h5 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "a kinship matrix of the wrong size: exit 1, one line naming the file and both sizes ($(head -c 200 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'trk.h5' '$T/err' && grep -q '400 x 400 but there are 1500' '$T/err' && [ ! -e b.h5 ]"
nfrun fit tr.h5 --dependence equi --groups /nope --val va.h5 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "a missing group dataset: exit 1, one line naming it" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q '/nope' '$T/err'"
nfrun fit va.h5 --dependence equi --groups /logp_true --val te.h5 --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "group ids that are not whole numbers: exit 1, one line" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'whole numbers' '$T/err'"
nfrun fit tr.h5 --val va.h5 --flow realnvp --layers 2 --hidden 8 --steps 20 --quiet -o iid.h5 >/dev/null 2>&1
nfrun eval iid.h5 tr.h5 --joint >/dev/null 2>"$T/err"
rc=$?
check "--joint on an ordinary model: exit 1, one line" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'nf fit --dependence' '$T/err'"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
