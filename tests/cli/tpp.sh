#!/usr/bin/env bash
# tests/cli/tpp.sh - nf tpp import / fit / eval on good and bad input: a long-form CSV with marks and
# an NPY matrix become sequences files, a short fit learns a Poisson process (NLL per event near the
# true 1 - log rate) whose time-rescaling test passes on its data and rejects a faster process,
# SIGTERM and --resume end with the uninterrupted model, and bad files get one
# clear line.  (The library suites check the model itself.)  Run by `make check` with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

# ---- import ------------------------------------------------------------------------------------
printf 'seq,time,mark\n7,2.5,1\n3,0.4,0\n7,0.9,2\n11,5.0,0\n3,1.75,1\n' >ev.csv
nfrun tpp import ev.csv -o ev.h5 >/dev/null 2>"$T/err"
rc=$?
check "import of a long-form CSV with marks (exit $rc): $(head -c 160 "$T/err")" \
    bash -c "[ $rc = 0 ] && grep -q '3 sequences, 5 events, 3 mark types' '$T/err' && [ -s ev.h5 ]"
printf 'seq,time\n1,0.5\n1,0.2\n2,nan\n' >bad.csv
nfrun tpp import bad.csv -o bad.h5 >/dev/null 2>"$T/err"
rc=$?
check "a NaN time: exit 1, one line naming the row, no file" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'row 2' '$T/err' && [ ! -e bad.h5 ]"
nfrun tpp import ev.csv --t-end 3 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a window that misses events: exit 1 naming --t-end" bash -c "[ $rc = 1 ] && grep -q -- '--t-end' '$T/err'"

# ---- a Poisson process of rate 2 on [0, 30]: 40 sequences written as a long-form CSV -------------
awk 'BEGIN { srand(7); print "id,time"; for (s = 0; s < 40; s++) { t = -log(1 - rand()) / 2;
     while (t < 30) { printf "%d,%.9f\n", s, t; t += -log(1 - rand()) / 2 } } }' >pois.csv
nfrun tpp import pois.csv --t-end 30 -o pois.h5 >/dev/null 2>"$T/err"
check "import of a 40-sequence Poisson CSV with a common window" test -s pois.h5
FIT=(--decoder lognormmix --hidden 8 --components 4 --steps 150 --batch 8 --lr 1e-2 --eval-every 25 --threads 1
    --seed 2 --quiet --checkpoint-every 10)
nfrun tpp fit pois.h5 "${FIT[@]}" -o m.h5 2>"$T/err"
rc=$?
check "tpp fit exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
cp m.h5 rr.h5
refuses_replace rr.h5 tpp fit pois.h5 "${FIT[@]}" --steps 3
j=$(nfrun tpp eval m.h5 pois.h5 --json 2>&1)
jt=$(nfrun tpp eval m.h5 pois.h5 --json --threads 1 2>&1)
check "tpp eval --threads 1 gives the same result" test "$jt" = "$j"
nll=$(sed -n 's/.*"nll_per_event": \([-0-9.e]*\).*/\1/p' <<<"$j")
# true NLL per event of a rate-2 Poisson process on its window: (2*30 - N log 2) / N = 1 - log 2 = 0.307
check "the fit reaches the Poisson NLL per event: $nll within 0.05 of 0.307" \
    awk -v v="$nll" 'BEGIN { exit !(v > 0.257 && v < 0.357) }'
# time rescaling: the fitted model's compensators of its own training data are close to Exp(1)
rp=$(sed -n 's/.*"rescaled_ks_p": \([-0-9.e]*\).*/\1/p' <<<"$j")
rm_=$(sed -n 's/.*"rescaled_mean": \([-0-9.e]*\).*/\1/p' <<<"$j")
check "time rescaling of the Poisson data: KS p $rp > 0.001, mean compensator $rm_ within 0.1 of 1" \
    awk -v p="$rp" -v m="$rm_" 'BEGIN { exit !(p > 0.001 && m > 0.9 && m < 1.1) }'
nfrun data make tpp-poisson --rate 3 -n 20 --t-end 30 --seed 3 -o fast.h5 >/dev/null 2>"$T/err"
jf=$(nfrun tpp eval m.h5 fast.h5 --json 2>&1)
rp=$(sed -n 's/.*"rescaled_ks_p": \([-0-9.e]*\).*/\1/p' <<<"$jf")
rm_=$(sed -n 's/.*"rescaled_mean": \([-0-9.e]*\).*/\1/p' <<<"$jf")
check "time rescaling rejects a rate-3 process under the rate-2 fit: KS p $rp < 1e-6, mean $rm_ < 0.8" \
    awk -v p="$rp" -v m="$rm_" 'BEGIN { exit !(p != "" && p < 1e-6 && m < 0.8) }'
nfrun info m.h5 >"$T/info" 2>&1
check "info shows the tpp kind" grep -q '^kind *tpp' "$T/info"
check "info names the units of a point process's history: per event (training), per sequence (validation)" \
    bash -c "grep -q 'train ll/event *val ll/sequence' '$T/info'"
nfrun tpp fit pois.h5 --decoder lognormmix --hidden 8 --components 4 --batch 8 --threads 1 --steps 4 --eval-every 2 -o units.h5 2>"$T/units.err" >/dev/null
check "progress says the training value is per event and the validation value per sequence" \
    bash -c "grep -q 'train ll/event -*[0-9.]* | val ll/sequence' '$T/units.err' &&
             grep -q 'best validation log-likelihood per sequence' '$T/units.err'"
nfrun plot --history units.h5 -o units.png >/dev/null 2>"$T/err"
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{ print $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8 }'; }
check "nf plot --history of a point process draws its two histories side by side (PNG of 1400 x 560)" \
    test "$(png_size units.png 2>/dev/null)" = "1400 560"
# --weight-decay: stored with the model (nf info shows it) and it changes the fit
nfrun tpp fit pois.h5 "${FIT[@]}" --steps 40 --weight-decay 0.5 -o wd.h5 2>"$T/err"
rc=$?
nfrun info wd.h5 >"$T/info" 2>&1
check "tpp fit --weight-decay 0.5 exits 0 and nf info shows the decay (exit $rc)" \
    bash -c "[ $rc = 0 ] && grep -q 'weight decay 0.5' '$T/info'"
nfrun tpp fit pois.h5 "${FIT[@]}" --steps 40 -o nowd.h5 2>/dev/null
e1=$(nfrun tpp eval wd.h5 pois.h5 --json 2>&1)
e2=$(nfrun tpp eval nowd.h5 pois.h5 --json 2>&1)
check "weight decay changes the fitted model" bash -c "[ -n '$e1' ] && [ -n '$e2' ] && [ '$e1' != '$e2' ]"
nfrun tpp fit pois.h5 --decoder flow --hidden 8 --steps 3 --batch 8 --threads 1 --quiet -o fl.h5 2>"$T/err"
nfrun info fl.h5 >"$T/info" 2>&1
check "the flow decoder's default weight decay is 1e-3" grep -q 'weight decay 0.001' "$T/info"
nfrun tpp fit pois.h5 --decoder flow --weight-decay 0 --hidden 8 --steps 3 --batch 8 --threads 1 --quiet \
    -o fl0.h5 2>"$T/err"
nfrun info fl0.h5 >"$T/info" 2>&1
check "--weight-decay 0 turns it off for the flow decoder" bash -c "! grep -q 'weight decay' '$T/info'"
nfrun tpp fit pois.h5 --weight-decay -1 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a negative weight decay: usage error naming the flag" bash -c "[ $rc = 2 ] && grep -q weight-decay '$T/err'"
nfrun eval m.h5 pois.h5 >/dev/null 2>"$T/err"
rc=$?
check "nf eval of a tpp model names the kind and nf tpp" bash -c "[ $rc != 0 ] && grep -q 'tpp' '$T/err'"

# ---- stop and resume ---------------------------------------------------------------------------
"$NF" tpp fit pois.h5 "${FIT[@]}" --steps 2000 --patience 0 -o r.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file r.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 30
st=$?
if [ "$st" = 0 ]; then
    skip "the fit finished before SIGTERM: resume not exercised"
else
    check "SIGTERM stops tpp fit with exit 130 (got $st)" test "$st" = 130
    nfrun tpp fit --resume r.h5 --threads 1 --quiet 2>"$T/err"
    nfrun tpp fit pois.h5 "${FIT[@]}" --steps 2000 --patience 0 -o ref.h5 2>/dev/null
    e1=$(nfrun tpp eval r.h5 pois.h5 --json 2>&1)
    e2=$(nfrun tpp eval ref.h5 pois.h5 --json 2>&1)
    check "the resumed fit ends with the uninterrupted model" bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ]"
fi
nfrun tpp fit missing.h5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a missing sequences file: exit 1, one line" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ]"
nfrun tpp fit pois.h5 --decoder hawkes -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown decoder: usage error listing the decoders" bash -c "[ $rc = 2 ] && grep -q lognormmix '$T/err'"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
