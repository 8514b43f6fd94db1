#!/usr/bin/env bash
# tests/cli/context.sh - conditional models end to end, against a known conditional density: data
# p(x | kind), three kinds, each a different axis-aligned Gaussian, imported with the kind as a
# one-hot /context; nf fit learns p(x | kind) (eval within 0.05 nats of the true conditional
# log-likelihood), uses the context (the same flow without it, and the conditional one given the
# wrong kinds, are worse by about the information the kind carries), and nf sample draws from
# p(x | kind) for one kind (--context-value) or per row (--context FILE), every draw carrying its
# context and a /logp that nf eval reproduces.  Run by `make check` with NF set to the nf binary.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi

# kind a: x ~ N((-2, 0), diag(0.5, 0.3)^2); b: N((2, 1), diag(0.3, 0.6)^2); c: N((0, -2), diag(0.4, 0.25)^2).
# The kinds overlap little, so the kind carries close to log 3 = 1.10 nats about x.  Also written:
# the mean true log p(x | kind) of the test rows, and a copy of the test rows with every kind
# replaced by the next one (a -> b -> c -> a).
awk 'BEGIN {
    srand(11); pi = 3.14159265358979
    split("-2 0.5 0 0.3|2 0.3 1 0.6|0 0.4 -2 0.25", P, "|")
    for (f = 0; f < 2; f++) {
        n = f ? 3000 : 6000; file = f ? "test.csv" : "train.csv"; lp = 0
        print "x0,x1,kind" > file
        if (f) print "x0,x1,kind" > "wrong.csv"
        for (i = 0; i < n; i++) {
            k = int(3 * rand()); split(P[k + 1], q, " ")
            z1 = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand())
            z2 = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand())
            x0 = q[1] + q[2] * z1; x1 = q[3] + q[4] * z2
            lp += -0.5 * (z1 * z1 + z2 * z2) - log(q[2] * q[4]) - log(2 * pi)
            printf "%.6f,%.6f,%s\n", x0, x1, substr("abc", k + 1, 1) > file
            if (f) printf "%.6f,%.6f,%s\n", x0, x1, substr("abc", (k + 1) % 3 + 1, 1) > "wrong.csv"
        }
        if (f) printf "%.6f\n", lp / n > "truth.txt"
    }
}'
truth=$(cat truth.txt)
nfrun data import train.csv --context kind -o train.h5 >/dev/null 2>"$T/err"
nfrun data import test.csv --context kind -o test.h5 >/dev/null 2>>"$T/err"
nfrun data import wrong.csv --context kind -o wrong.h5 >/dev/null 2>>"$T/err"
nfrun data import train.csv --columns x0,x1 -o train_u.h5 >/dev/null 2>>"$T/err"
nfrun data import test.csv --columns x0,x1 -o test_u.h5 >/dev/null 2>>"$T/err"
read -r crows ccols _ <<<"$("$MKBAD" stats train.h5 /context)"
check "import --context kind: a one-hot /context of 6000 x 3 ($crows x $ccols)" test "$crows $ccols" = "6000 3"

NUM='-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?'
# the first "NAME": value of the line (eval's overall figures come before its by_context ones)
json_field() { grep -oE "\"$2\": $NUM" <<<"$1" | head -1 | sed -E 's/.*: //'; }
FIT=(--flow realnvp --layers 4 --hidden 32 --steps 4000 --batch 512 --lr 1e-3 --threads 1 --seed 3 --quiet)

# ---- fit: p(x | kind) is learnt -----------------------------------------------------------------
nfrun fit train.h5 "${FIT[@]}" -o cond.h5 2>"$T/err"
rc=$?
check "fit on data with /context: exit 0, a model conditional on 3 context values" \
    bash -c "[ $rc = 0 ] && \"$NF\" info cond.h5 | grep -q 'conditional on 3 context values'"
j=$(nfrun eval cond.h5 test.h5 --json 2>"$T/err")
mc=$(json_field "$j" mean_log_prob)
check "eval with the test rows' kinds: mean log p(x | kind) $mc within 0.05 nats of the truth $truth (and not above it)" \
    awk -v m="$mc" -v t="$truth" 'BEGIN { exit !(m > t - 0.05 && m < t + 0.02) }'

# ---- the context is used ------------------------------------------------------------------------
nfrun fit train_u.h5 "${FIT[@]}" -o uncond.h5 2>"$T/err"
mu=$(json_field "$(nfrun eval uncond.h5 test_u.h5 --json 2>"$T/err")" mean_log_prob)
check "the same flow without the kinds: mean log p(x) $mu is about log 3 below the conditional $mc (0.8 .. 1.3)" \
    awk -v u="$mu" -v c="$mc" 'BEGIN { d = c - u; exit !(d > 0.8 && d < 1.3) }'
mw=$(json_field "$(nfrun eval cond.h5 wrong.h5 --json 2>"$T/err")" mean_log_prob)
check "eval with every kind replaced by another: mean log p $mw far below the right kinds' $mc (by more than 5 nats)" \
    awk -v w="$mw" -v c="$mc" 'BEGIN { exit !(w < c - 5) }'
nfrun eval cond.h5 test_u.h5 --json >/dev/null 2>"$T/err"
rc=$?
check "eval of a conditional model on data without /context: exit 1, one line naming the missing context" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -qi 'context' '$T/err'"

# ---- sample one kind: the draws follow p(x | kind) ------------------------------------------------
for k in a b c; do
    nfrun sample cond.h5 -n 4000 --context-value kind=$k --seed 5 --threads 1 -o s_$k.h5 >/dev/null 2>"$T/err"
done
# expected means and standard deviations of kind a, b, c (as generated above)
while read -r k m0 s0 m1 s1; do
    read -r gm0 gs0 <<<"$("$MKBAD" col s_$k.h5 /x 0)"
    read -r gm1 gs1 <<<"$("$MKBAD" col s_$k.h5 /x 1)"
    check "sample --context-value kind=$k: mean ($gm0, $gm1) within 0.2 sd of ($m0, $m1), std ($gs0, $gs1) within 10% of ($s0, $s1)" \
        awk -v a="$gm0" -v b="$gm1" -v c="$gs0" -v d="$gs1" -v A="$m0" -v B="$m1" -v C="$s0" -v D="$s1" \
        'function abs(v) { return v < 0 ? -v : v }
         BEGIN { exit !(abs(a - A) < 0.2 * C && abs(b - B) < 0.2 * D && abs(c / C - 1) < 0.1 && abs(d / D - 1) < 0.1) }'
done <<'EOF'
a -2 0.5 0 0.3
b 2 0.3 1 0.6
c 0 0.4 -2 0.25
EOF
read -r rows cols _ cmean _ <<<"$("$MKBAD" stats s_b.h5 /context)"
check "the draws of kind b carry their context (4000 x 3, a third of it ones: $rows x $cols, mean $cmean)" \
    bash -c "[ '$rows $cols' = '4000 3' ] && awk -v m='$cmean' 'BEGIN { exit !(m > 0.3333 && m < 0.3334) }'"
read -r _ _ _ slmean _ <<<"$("$MKBAD" stats s_b.h5 /logp)"
me=$(json_field "$(nfrun eval cond.h5 s_b.h5 --json 2>"$T/err")" mean_log_prob)
check "eval of the draws (their own /context) gives the mean of the sampler's /logp ($me, $slmean)" close_to "$me" "$slmean" 2e-4

# ---- sample per row: --context FILE ---------------------------------------------------------------
nfrun sample cond.h5 -n 3000 --context test.h5 --seed 6 --threads 1 -o s_rows.h5 >/dev/null 2>"$T/err"
rc=$?
ms=$(json_field "$(nfrun eval cond.h5 s_rows.h5 --json 2>"$T/err")" mean_log_prob)
check "sample --context test.h5 (one row each): exit 0, and the draws score like the test rows ($ms vs $mc, within 0.15)" \
    bash -c "[ $rc = 0 ] && awk -v s='$ms' -v c='$mc' 'BEGIN { d = s - c; if (d < 0) d = -d; exit !(d < 0.15) }'"
check "the per-row draws keep the test rows' contexts, row for row" \
    test "$("$MKBAD" stats s_rows.h5 /context)" = "$("$MKBAD" stats test.h5 /context)"

# ---- logprob with context ---------------------------------------------------------------------------
nfrun logprob cond.h5 test.h5 -o lp.h5 2>"$T/err"
read -r _ _ _ lmean _ <<<"$("$MKBAD" stats lp.h5 /logp)"
check "logprob of the test rows: the mean equals eval's ($lmean, $mc)" close_to "$lmean" "$mc" 1e-5
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
