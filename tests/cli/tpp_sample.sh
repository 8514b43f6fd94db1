#!/usr/bin/env bash
# tests/cli/tpp_sample.sh - nf tpp sample and nf tpp plot, and the mark accuracy of nf tpp eval: a
# short fit on Poisson sequences with cycling marks, sequences simulated from it (counts near the
# data's, marks present, windows as asked, reproducible for a seed), histories continued (their
# events kept, new ones after their end), the three pictures as valid, non-trivial PNG files, and
# bad input (a missing model, a model of another kind, t_end <= t_start, histories with another
# mark count) refused with one clear line.  Run by `make check` with NF set.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

# ---- data: 60 Poisson sequences of rate 1.5 on [0, 20], marks cycling 0, 1, 2 ------------------
awk 'BEGIN { srand(5); print "id,time,mark"; for (s = 0; s < 60; s++) { t = -log(1 - rand()) / 1.5; k = 0;
     while (t < 20) { printf "%d,%.9f,%d\n", s, t, k; k = (k + 1) % 3; t += -log(1 - rand()) / 1.5 } } }' >mk.csv
nfrun tpp import mk.csv --t-end 20 -o mk.h5 >/dev/null 2>"$T/err"
check "import of the marked sequences" test -s mk.h5
nfrun tpp fit mk.h5 --hidden 8 --components 4 --steps 150 --batch 16 --lr 1e-2 --threads 1 --quiet --rnn rnn \
    -o m.h5 2>"$T/err"
rc=$?
check "tpp fit --rnn rnn exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
nfrun tpp fit mk.h5 --hidden 8 --components 4 --steps 1 --batch 16 --threads 1 --quiet -o g.h5 2>/dev/null
# a tanh RNN of width H on I inputs has H(I + H + 2) weights, a GRU three times as many
pr=$(nfrun info m.h5 | sed -n 's/^parameters *\([0-9]*\).*/\1/p')
pg=$(nfrun info g.h5 | sed -n 's/^parameters *\([0-9]*\).*/\1/p')
check "the --rnn rnn model is the smaller encoder ($pr parameters, the GRU's $pg)" \
    awk -v r="$pr" -v g="$pg" 'BEGIN { exit !(r > 0 && g - r == 2 * 8 * (33 + 8 + 2)) }'

# ---- eval: mark accuracy ------------------------------------------------------------------------
j=$(nfrun tpp eval m.h5 mk.h5 --json 2>&1)
acc=$(sed -n 's/.*"mark_accuracy": \([-0-9.e]*\).*/\1/p' <<<"$j")
check "eval --json reports a mark accuracy above chance (got '$acc')" awk -v v="$acc" 'BEGIN { exit !(v > 0.4 && v <= 1) }'
nfrun tpp eval m.h5 mk.h5 >"$T/out" 2>&1
check "eval prints a mark accuracy line" grep -q '^mark accuracy' "$T/out"

# ---- sample -------------------------------------------------------------------------------------
nfrun tpp sample --help >"$T/help" 2>&1
check "sample --help shows the defaults and an example" bash -c "grep -q '\\[1000000\\]' '$T/help' && grep -q 'example' '$T/help'"
nfrun tpp sample m.h5 -n 200 --t-end 20 --seed 3 -o sim.h5 2>"$T/err"
rc=$?
check "sample exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
check "sample's summary names the sequences and marks" grep -q '200 sequences.*with marks' "$T/err"
events_of() { nfrun tpp eval m.h5 "$1" --json 2>/dev/null | sed -n 's/.*"events": \([0-9]*\).*/\1/p'; }
ev=$(events_of sim.h5)
# the data's rate: 1.5 events per unit on windows of 20 -> 30 per sequence; 200 sequences -> 6000
check "simulated counts near the data's rate: $ev events in 200 sequences (expected about 6000)" \
    awk -v v="$ev" 'BEGIN { exit !(v > 4500 && v < 7500) }'
nfrun tpp sample m.h5 -n 200 --t-end 20 --seed 3 -o sim2.h5 2>/dev/null
check "the same seed gives the same events" bash -c "[ '$(events_of sim2.h5)' = '$ev' ] &&
    [ \"\$($NF tpp eval m.h5 sim2.h5 --json)\" = \"\$($NF tpp eval m.h5 sim.h5 --json)\" ]"
nfrun tpp sample m.h5 -n 50 --t-start 5 --t-end 12 -o win.h5 2>/dev/null
nfrun tpp sample m.h5 --history win.h5 --t-end 30 -n 2 -o fut.h5 2>"$T/err"
rc=$?
check "sample --history exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
check "two continuations of each of the 50 histories" grep -q '100 sequences (histories and continuations)' "$T/err"
# the continuations hold at least the histories' events, and more (about 1.5 * 18 per sequence)
e1=$(events_of win.h5)
e2=$(events_of fut.h5)
check "continuations keep the histories and add events ($e1 in the histories, $e2 after)" \
    awk -v a="$e1" -v b="$e2" 'BEGIN { exit !(b > 2 * a + 1500) }'

# ---- plot ---------------------------------------------------------------------------------------
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$1")" -gt 20000 ]; }
nfrun tpp plot m.h5 mk.h5 -o all.png 2>"$T/err"
rc=$?
check "plot (all three panels) exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
check "plot writes a non-trivial PNG" is_png all.png
for k in density raster intensity; do
    nfrun tpp plot m.h5 mk.h5 --kind $k --sequence 0 -o $k.png 2>"$T/err"
    check "plot --kind $k writes a PNG" is_png $k.png
done
check "the panels differ" bash -c "! cmp -s density.png raster.png && ! cmp -s raster.png intensity.png"
nfrun tpp plot m.h5 mk.h5 --sequence 60 -o bad.png 2>"$T/err"
rc=$?
check "plot --sequence past the end: exit 1, one line naming the count, no file" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q '60 sequences\\|holds 60' '$T/err' && [ ! -e bad.png ]"

# ---- bad input ----------------------------------------------------------------------------------
nfrun tpp sample missing.h5 -n 3 --t-end 5 -o x.h5 2>"$T/err"
rc=$?
check "a missing model: exit 1, one line naming it" \
    bash -c "[ $rc = 1 ] && grep -q 'missing.h5' '$T/err' && [ \$(wc -l <'$T/err') = 1 ]"
nfrun data make moons -n 300 --seed 1 -o rows.h5 >/dev/null 2>&1
nfrun fit rows.h5 --steps 3 --quiet -o dens.h5 >/dev/null 2>&1
nfrun tpp sample dens.h5 -n 3 --t-end 5 -o x.h5 2>"$T/err"
rc=$?
check "a density model: exit 1, 'not a point process'" bash -c "[ $rc = 1 ] && grep -q 'not a point process' '$T/err'"
nfrun tpp plot dens.h5 mk.h5 -o x.png 2>"$T/err"
rc=$?
check "plot of a density model: exit 1" bash -c "[ $rc = 1 ] && grep -q 'not a point process' '$T/err'"
nfrun tpp sample m.h5 -n 3 --t-start 5 --t-end 5 -o x.h5 2>"$T/err"
rc=$?
check "t_end <= t_start: usage error (exit 2)" bash -c "[ $rc = 2 ] && grep -q 't-end' '$T/err'"
nfrun tpp sample m.h5 --t-end 5 -o x.h5 2>"$T/err"
rc=$?
check "no -n without --history: usage error" test "$rc" = 2
nfrun tpp sample m.h5 --history win.h5 --t-start 1 --t-end 40 -o x.h5 2>"$T/err"
rc=$?
check "--t-start with --history: usage error" test "$rc" = 2
nfrun tpp sample m.h5 --history win.h5 --t-end 10 -o x.h5 2>"$T/err"
rc=$?
check "a --t-end before the histories end: exit 1 naming the file" bash -c "[ $rc = 1 ] && grep -q 'win.h5' '$T/err'"
awk 'BEGIN { srand(9); print "id,time"; for (s = 0; s < 5; s++) { t = rand(); while (t < 10) { printf "%d,%.6f\n", s, t; t += rand() } } }' >nomk.csv
nfrun tpp import nomk.csv --t-end 10 -o nomk.h5 >/dev/null 2>&1
nfrun tpp sample m.h5 --history nomk.h5 --t-end 20 -o x.h5 2>"$T/err"
rc=$?
check "histories of another mark count: exit 1, one line naming the marks" \
    bash -c "[ $rc = 1 ] && grep -q 'nomk.h5.*mark types' '$T/err' && [ \$(wc -l <'$T/err') = 1 ] && [ ! -e x.h5 ]"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
