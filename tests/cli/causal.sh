#!/usr/bin/env bash
# tests/cli/causal.sh - nf data make causal-*, nf causal import / fit / density / sample / eval / plot
# on good and bad input: generated data fit in both stages gives interventional densities near the
# truth that integrate to one, SIGTERM and --resume end with the uninterrupted model, IHDP
# replication 1 imports with both potential outcomes, and a treatment that is not 0/1, an empty arm
# and NaN outcomes get one clear line.  (tests/check_causal*.c check the model and the data
# themselves.)  Run by `make check` with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

# ---- data ----------------------------------------------------------------------------------------
nfrun data make causal-poly --shift 2 -n 600 --seed 3 -o poly.h5 >/dev/null 2>"$T/err"
rc=$?
check "data make causal-poly (exit $rc: $(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q '600 units (300 treated, 300 control)' '$T/err' && [ -s poly.h5 ]"
nfrun data make causal-poly --shift 2 -n 1000 --seed 4 -o test.h5 >/dev/null 2>&1
nfrun data make causal-moons -n 200 -o moons.h5 >/dev/null 2>"$T/err"
check "data make causal-moons" test -s moons.h5
nfrun data make causal-nope -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown causal family: usage error naming both" \
    bash -c "[ $rc = 2 ] && grep -q 'causal-poly or causal-moons' '$T/err' && [ ! -e x.h5 ]"

# ---- split and info: by units within each arm, every array kept -----------------------------------
nfrun data split poly.h5 --val 0.1 --test 0.2 --seed 3 -o ps >"$T/out" 2>"$T/err"
rc=$?
check "data split of a causal file: by units within each arm (exit $rc: $(cat "$T/out" "$T/err" | head -c 200))" \
    bash -c "[ $rc = 0 ] && grep -q '420 train, 60 validation, 120 test units (treated: 210, 30, 60)' '$T/out'"
nfrun info ps.test.h5 >"$T/out" 2>&1
check "info of a causal part: its units per arm, the truth it carries, where it came from" \
    bash -c "grep -q 'units  *120 (60 control, 60 treated)' '$T/out' &&
             grep -q 'truth  *both potential outcomes, their true log-densities, true propensities' '$T/out' &&
             grep -q 'split_of  *poly.h5' '$T/out'"
nfrun causal fit ps.train.h5 --repr 8 --hidden 16 --grid 64 --steps 4 --eval-every 2 --threads 1 -o stg.h5 2>"$T/stg" >/dev/null
check "progress names the stage it is in (nuisance, then target)" \
    bash -c "grep -q '^\[nuisance\] epoch [0-9]* step' '$T/stg' && grep -q '^\[target\] epoch [0-9]* step' '$T/stg'"
nfrun causal fit ps.train.h5 --repr 8 --hidden 16 --grid 64 --steps 30 --threads 1 --quiet -o psm.h5 2>"$T/err" &&
    nfrun causal eval psm.h5 ps.test.h5 --json >"$T/out" 2>>"$T/err"
rc=$?
check "the training part fits and the test part evaluates against its truth (exit $rc: $(head -c 200 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q '\"gap\"' '$T/out'"
nfrun data make causal-poly --shift 2 -n 12 --seed 3 -o tiny.h5 >/dev/null 2>&1
nfrun data split tiny.h5 --val 0.5 --test 0.45 -o tp >"$T/out" 2>"$T/err"
rc=$?
check "a causal split that leaves an arm nothing to train on: exit 1, one line, no file" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'arm.s 6 units with --val 0.5 and --test 0.45 leave none' '$T/err' && [ ! -e tp.train.h5 ]"

# ---- fit, eval, density, sample, plot -------------------------------------------------------------
FIT=(--repr 8 --hidden 16 --grid 64 --steps 400 --batch 64 --lr 1e-2 --eval-every 50 --threads 1 --seed 2 --quiet
    --checkpoint-every 20)
nfrun causal fit poly.h5 "${FIT[@]}" -o m.h5 2>"$T/err"
rc=$?
check "causal fit exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
cp m.h5 rr.h5
refuses_replace rr.h5 causal fit poly.h5 "${FIT[@]}" --steps 3
nfrun info m.h5 >"$T/out" 2>&1
check "info shows the history of both stages, nuisance then target" \
    bash -c "grep -n 'history (stage nuisance) [0-9]* evaluations' '$T/out' | cut -d: -f1 >'$T/a' &&
             grep -n 'history (stage target) [0-9]* evaluations' '$T/out' | cut -d: -f1 >'$T/b' &&
             [ \"\$(cat '$T/a')\" -lt \"\$(cat '$T/b')\" ]"
j=$(nfrun causal eval m.h5 test.h5 --json 2>&1)
g0=$(sed -n 's/.*"arm": 0.*"gap": {"target": \([-0-9.e]*\).*"arm": 1.*/\1/p' <<<"$j")
g1=$(sed -n 's/.*"arm": 1.*"gap": {"target": \([-0-9.e]*\).*/\1/p' <<<"$j")
check "eval --json has both arms' gaps to the truth ($g0, $g1)" bash -c "[ -n '$g0' ] && [ -n '$g1' ]"
check "the target flows come within 0.4 nats of the true densities: gaps $g0, $g1" \
    awk -v a="$g0" -v b="$g1" 'BEGIN { exit !(a > -0.1 && a < 0.4 && b > -0.1 && b < 0.4) }'
nfrun causal eval m.h5 test.h5 >"$T/out" 2>&1
check "eval's table names the estimators and the truth" \
    bash -c "grep -q 'plug-in' '$T/out' && grep -q 'truth' '$T/out' && grep -q 'mean of Y\[1\]' '$T/out'"
nfrun causal density m.h5 --arm 1 --grid -15:40:600 -o d1.h5 >/dev/null 2>"$T/err"
mass=$(sed -n 's/.*mass on the grid \([0-9.]*\).*/\1/p' "$T/err")
check "density of arm 1 on a wide grid integrates to one: $mass" \
    awk -v v="$mass" 'BEGIN { exit !(v > 0.99 && v < 1.01) }'
nfrun causal density m.h5 --arm 2 --grid 0:1:10 -o d.h5 >/dev/null 2>"$T/err"
rc=$?
check "--arm 2: usage error" bash -c "[ $rc = 2 ] && [ ! -e d.h5 ]"
nfrun causal density m.h5 --arm 0 --grid 5:1:10 -o d.h5 >/dev/null 2>"$T/err"
rc=$?
check "a grid with LO > HI: usage error naming --grid" bash -c "[ $rc = 2 ] && grep -q -- '--grid' '$T/err'"
nfrun causal sample m.h5 --arm 0 -n 500 -o s0.h5 >/dev/null 2>"$T/err"
rc=$?
check "sample 500 draws of Y[0]" bash -c "[ $rc = 0 ] && [ -s s0.h5 ] && grep -q '500 draws of Y\[0\]' '$T/err'"
nfrun causal plot m.h5 --data test.h5 -o p.png >/dev/null 2>"$T/err"
rc=$?
check "plot against the truth (exit $rc: $(head -c 160 "$T/err"))" bash -c "[ $rc = 0 ] && [ -s p.png ]"
nfrun info m.h5 >"$T/info" 2>&1
nfrun eval m.h5 test.h5 >/dev/null 2>"$T/err"
rc=$?
check "nf eval of a causal model points to nf causal" bash -c "[ $rc != 0 ] && grep -q 'causal' '$T/err'"
nfrun causal fit poly.h5 --treatment /t "${FIT[@]}" -o nt.h5 >/dev/null 2>"$T/err"
rc=$?
check "a treatment dataset that is not there: one line naming it and the flags (exit $rc: $(head -c 200 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'poly.h5: no dataset /t (expected the treatment, 0/1; nf causal fit --covariates, --treatment' '$T/err' && [ ! -e nt.h5 ]"

# ---- --linear-shift: arm 0 (linear in x), seen only at x ~ N(3, 1), extrapolates to the treated's x --
nfrun data make causal-poly --shift 3 -n 600 --seed 5 -o poly3.h5 >/dev/null 2>&1
nfrun data make causal-poly --shift 3 -n 1000 --seed 6 -o test3.h5 >/dev/null 2>&1
nfrun causal fit poly3.h5 "${FIT[@]}" --linear-shift -o ms.h5 2>"$T/err"
rc=$?
check "causal fit --linear-shift exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
j=$(nfrun causal eval ms.h5 test3.h5 --json 2>&1)
g0=$(sed -n 's/.*"arm": 0.*"gap": {"target": \([-0-9.e]*\).*"arm": 1.*/\1/p' <<<"$j")
check "with --linear-shift arm 0 comes within 0.25 nats of the truth at shift 3: gap $g0" \
    awk -v a="$g0" 'BEGIN { exit !(a != "" && a > -0.1 && a < 0.25) }'
nfrun info ms.h5 >"$T/info" 2>&1
check "nf info shows the settings, the linear shift among them" \
    bash -c "grep -q 'least-squares line removed' '$T/info' && grep -q 'grid of 64 points' '$T/info'"
nfrun info m.h5 >"$T/info" 2>&1
check "nf info of a model without the shift does not claim it" \
    bash -c "grep -q 'spline conditioner 16' '$T/info' && ! grep -q 'least-squares' '$T/info'"

# ---- stop and resume -----------------------------------------------------------------------------
"$NF" causal fit poly.h5 "${FIT[@]}" --steps 1500 -o r.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
# at its first checkpoint (step 20 of 3,000: a fixed 1.5 s sleep let the whole fit finish first on a
# fast machine)
wait_for_file r.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 60
st=$?
check "SIGTERM stops causal fit with exit 130 (got $st)" test "$st" = 130
if [ "$st" = 130 ]; then
    nfrun causal fit --resume r.h5 --threads 1 --quiet 2>"$T/err"
    nfrun causal fit poly.h5 "${FIT[@]}" --steps 1500 -o ref.h5 2>/dev/null
    e1=$(nfrun causal eval r.h5 test.h5 --json 2>&1)
    e2=$(nfrun causal eval ref.h5 test.h5 --json 2>&1)
    check "the resumed fit ends with the uninterrupted model" bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ]"
fi

# ---- IHDP replication 1: treatment, y_factual, y_cfactual, mu0, mu1, x1..x25 -----------------------
nfrun causal import "$ROOT/tests/data/causal/ihdp_npci_1.csv" --treatment 0 --outcome 1 --counterfactual 2 \
    --covariates 5-29 -o ihdp.h5 >/dev/null 2>"$T/err"
rc=$?
check "IHDP replication 1 imports (exit $rc: $(head -c 200 "$T/err"))" \
    bash -c "[ $rc = 0 ] && grep -q '747 units (139 treated), 25 covariates' '$T/err'"
nfrun causal fit ihdp.h5 --repr 8 --hidden 16 --grid 64 --steps 60 --threads 1 --quiet -o mi.h5 2>"$T/err"
rc=$?
j=$(nfrun causal eval mi.h5 ihdp.h5 --json 2>&1)
check "a short IHDP fit evaluates on both potential outcomes (exit $rc)" \
    bash -c "[ $rc = 0 ] && grep -q '\"units\": 747, \"outcomes\": \"potential\"' <<<'$j'"

# ---- bad input: one clear line, exit 1, no file ------------------------------------------------------
printf 't,y,x\n0,1.5,0.2\n1,2.5,0.3\n2,0.5,0.1\n0,1.0,0.4\n' >t2.csv
nfrun causal import t2.csv --treatment t --outcome y -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "a treatment of 2: exit 1, one line naming the unit and 0 or 1 ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'unit 2' '$T/err' && grep -q '0 or 1' '$T/err' && [ ! -e b.h5 ]"
printf 't,y,x\n0,1.5,0.2\n0,2.5,0.3\n0,0.5,0.1\n' >t0.csv
nfrun causal import t0.csv --treatment t --outcome y -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "no treated units: exit 1, one line ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'no treated' '$T/err' && [ ! -e b.h5 ]"
printf 't,y,x\n0,1.5,0.2\n1,nan,0.3\n1,0.5,0.1\n0,1.0,0.4\n' >tn.csv
nfrun causal import tn.csv --treatment t --outcome y -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "a NaN outcome: exit 1, one line naming the unit ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'unit 1' '$T/err' && [ ! -e b.h5 ]"
nfrun causal import t2.csv --treatment nope --outcome y -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown treatment column: exit 1, one line naming the flag and the column ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q -- \"--treatment 'nope'\" '$T/err'"
nfrun causal import t2.csv --treatment t,x --outcome y -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "a treatment of two columns: exit 1, one line counting them ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'names 2 columns (expected one)' '$T/err'"
nfrun causal fit poly.h5 --treatment /y --steps 5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "fit with a treatment dataset that is not 0/1: exit 1, one line naming the file ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'poly.h5' '$T/err' && grep -q '0 or 1' '$T/err' && [ ! -e b.h5 ]"

# ---- a 2-D outcome (causal-moons): stage 2 by the nuisance's draws --------------------------------
nfrun data make causal-moons -n 200 --seed 2 -o moons_test.h5 >/dev/null 2>&1
nfrun causal fit moons.h5 --repr 8 --hidden 16 --draws 8 --steps 60 --eval-every 30 --threads 1 --quiet \
    -o mm.h5 2>"$T/err"
rc=$?
check "causal fit of a 2-D outcome exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
j=$(nfrun causal eval mm.h5 moons_test.h5 --json 2>&1)
check "eval --json of a 2-D outcome: finite log-densities and the truth, 2-vector means ($(head -c 200 <<<"$j"))" \
    bash -c "grep -q '\"truth\": -[0-9]' <<<'$j' && grep -q '\"target\": \[[-0-9.e]*, [-0-9.e]*\]' <<<'$j' &&
             ! grep -q null <<<'$j'"
nfrun causal density mm.h5 --arm 1 --grid -3:3:61,-3:3:61 -o dm.h5 >/dev/null 2>"$T/err"
mass=$(sed -n 's/.*mass on the grid \([0-9.]*\).*/\1/p' "$T/err")
check "2-D density on a 61 x 61 grid that covers Y[1] integrates to one: $mass ($(head -c 160 "$T/err"))" \
    awk -v v="$mass" 'BEGIN { exit !(v > 0.97 && v < 1.03) }'
nfrun info dm.h5 >"$T/info" 2>&1
check "the 2-D density file holds the 3,721 points" grep -q 3721 "$T/info"
nfrun causal sample mm.h5 --arm 0 -n 300 -o sm.h5 >/dev/null 2>"$T/err"
nfrun info sm.h5 >"$T/info" 2>&1
check "300 draws of a 2-D Y[0]: 300 rows of 2 columns" \
    bash -c "grep -q '^rows *300' '$T/info' && grep -q '^columns *2' '$T/info'"
nfrun causal plot mm.h5 --data moons_test.h5 -o pm.png >/dev/null 2>"$T/err"
rc=$?
check "plot of a 2-D outcome against the truth (exit $rc: $(head -c 160 "$T/err"))" bash -c "[ $rc = 0 ] && [ -s pm.png ]"
nfrun causal density mm.h5 --arm 0 --grid -3:3:10,-3:3:10,-3:3:10 -o db.h5 >/dev/null 2>"$T/err"
rc=$?
check "a grid of three axes: usage error naming --grid" bash -c "[ $rc = 2 ] && grep -q -- '--grid' '$T/err' && [ ! -e db.h5 ]"
nfrun causal density m.h5 --arm 0 --grid -3:3:10,-3:3:10 -o db.h5 >/dev/null 2>"$T/err"
rc=$?
check "two grid axes for a 1-D outcome: exit 1, one line ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q '1-D' '$T/err' && [ ! -e db.h5 ]"
nfrun causal eval mm.h5 test.h5 >/dev/null 2>"$T/err"
rc=$?
check "eval of the 2-D moons model on causal-poly data: exit 1, one line naming the file ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'test.h5: .*the model' '$T/err'"
nfrun causal fit missing.h5 -o b.h5 >/dev/null 2>"$T/err"
rc=$?
check "a missing data file: exit 1, one line" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ]"
nfrun causal fit poly.h5 >/dev/null 2>"$T/err"
rc=$?
check "fit without -o: usage error" test "$rc" = 2
nfrun causal frobnicate >/dev/null 2>"$T/err"
rc=$?
check "an unknown subcommand: usage error listing them" bash -c "[ $rc = 2 ] && grep -q 'density' '$T/err'"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
