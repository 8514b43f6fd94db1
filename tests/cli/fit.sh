#!/usr/bin/env bash
# tests/cli/fit.sh - the nf commands on good input: every --help, data -> fit -> info -> eval ->
# sample -> logprob, and what each output file holds.  Run by `make check` with NF=build/<variant>/nf.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi

# ---- help and version -----------------------------------------------------------------------
cmds=$(nfrun --help 2>/dev/null | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}')
# shellcheck disable=SC2086  # one command per word
found=$(printf '%s\n' $cmds | grep -cxE 'fit|eval|logprob|sample|info|data')
check "nf --help lists the commands fit, eval, logprob, sample, info, data (found $found of 6)" test "$found" = 6
for c in "" $cmds "data make" "data import" "data split"; do
    # shellcheck disable=SC2086
    nfrun $c --help >"$T/out" 2>"$T/err"
    rc=$?
    if [ $rc = 0 ] && [ -s "$T/out" ] && [ ! -s "$T/err" ] && grep -qi "example" "$T/out"; then
        pass "nf ${c:+$c }--help exits 0 and shows an example"
    else
        fail "nf ${c:+$c }--help: exit $rc, $(wc -l <"$T/out") lines on stdout, $(wc -l <"$T/err") on stderr, example: $(grep -ci example "$T/out")"
    fi
done
# Every help text fits a 100-column terminal (subcommands and the data make families included).
wide=""
for c in "" $cmds "data make" "data import" "data split" "data show" "data make tpp-hawkes" "data make shapes" \
    "data make video-sprites" "data make causal-poly" "data make dependent-crescent" "tpp fit" "tpp eval" \
    "tpp import" "tpp sample" "causal fit" "causal eval" "causal density" "causal sample" "causal plot" \
    "causal import" "image fit" "image eval" "image sample" "image classify" "video fit" "video eval" \
    "video sample"; do
    # shellcheck disable=SC2086
    n=$(nfrun $c --help 2>&1 | awk 'length > 100 {n++} END {print n + 0}')
    [ "$n" = 0 ] || wide="$wide nf${c:+ $c}: $n;"
done
check "every --help fits in 100 columns (lines wider:${wide:- none})" test -z "$wide"
nfrun >"$T/out" 2>"$T/err"
rc=$?
check "nf without a command exits 2 with the usage on stderr" \
    bash -c "[ $rc = 2 ] && [ ! -s '$T/out' ] && grep -q 'usage' '$T/err'"
v=$(nfrun --version 2>&1)
vre='^nf [0-9]+\.[0-9]+\.[0-9]+ \((float|double) build; matrix kernel: (nf-avx512|openblas \(.+\)); MPI: (none|Open MPI [0-9.]+ \(MPI [0-9.]+\))\)$'
check "nf --version names the version, precision, matrix kernel and MPI ($v)" bash -c '[[ $1 =~ $2 ]]' _ "$v" "$vre"
# the kernel follows the CPU (cpuid) and NF_KERNEL; the same binary runs without AVX-512.  Under
# NF_WRAP (valgrind) nf runs on the wrapper's emulated CPU, which /proc/cpuinfo does not describe.
if grep -qw avx512f /proc/cpuinfo; then want=nf-avx512; else want="openblas (this CPU has no AVX-512)"; fi
case "${NF_KERNEL:-}" in blas | openblas) want="openblas (NF_KERNEL=blas)" ;; esac
if [ -n "${NF_WRAP:-}" ]; then
    skip "nf --version under NF_WRAP: the kernel follows the wrapper's CPU, not /proc/cpuinfo"
else
    check "nf --version: the kernel is '$want' on this CPU" bash -c '[[ $1 == *"kernel: $2; MPI"* ]]' _ "$v" "$want"
fi
vb=$(NF_KERNEL=blas nfrun --version 2>&1)
check "NF_KERNEL=blas: the kernel is OpenBLAS ($vb)" bash -c '[[ $1 == *"kernel: openblas ("* ]]' _ "$vb"
NF_KERNEL=avx nfrun --version >"$T/out" 2>"$T/err"
rc=$?
check "NF_KERNEL=avx (unknown): exit 2 with one line naming the variable" \
    bash -c "[ $rc = 2 ] && [ ! -s '$T/out' ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q NF_KERNEL '$T/err'"

# ---- data ------------------------------------------------------------------------------------
nfrun data make moons -n 1500 --seed 11 -o train.h5 >/dev/null 2>"$T/err"
check "data make writes the training file" test -s train.h5
nfrun data make moons -n 1000 --seed 12 -o test.h5 >/dev/null 2>"$T/err"
read -r rows cols rank _ <<<"$("$MKBAD" stats test.h5 /x)"
check "data make: /x is 1000 x 2 (got $rows x $cols)" test "$rows $cols $rank" = "1000 2 2"
read -r rows cols rank _ _ _ _ fin <<<"$("$MKBAD" stats test.h5 /logp_true)"
check "data make: /logp_true has 1000 finite values (got $rows x $cols, $fin)" test "$rows $cols $rank $fin" = "1000 1 1 finite"

# ---- fit -------------------------------------------------------------------------------------
FLOW=(--flow realnvp --layers 2 --hidden 16)
TRAIN=(--flow realnvp --layers 4 --hidden 32 --steps 500 --batch 256 --lr 5e-3 --seed 5 --threads 1)
nfrun fit train.h5 "${TRAIN[@]}" --quiet -o model.h5 \
    >"$T/out" 2>"$T/err"
rc=$?
check "fit exits 0 and writes model.h5" bash -c "[ $rc = 0 ] && [ -s model.h5 ]"
check "fit --quiet prints nothing" bash -c "[ ! -s '$T/out' ] && [ ! -s '$T/err' ]"
check "fit leaves no temporary files" test -z "$(stray_tmp)"
nfrun fit train.h5 "${FLOW[@]}" --steps 40 --batch 256 --threads 1 -o progress.h5 >"$T/out" 2>"$T/err"
check "fit reports progress on stderr and nothing on stdout" \
    bash -c "[ ! -s '$T/out' ] && grep -q 'step 40/40' '$T/err' && grep -q 'wrote progress.h5' '$T/err'"

# ---- info ------------------------------------------------------------------------------------
nfrun info model.h5 >"$T/info" 2>"$T/err"
rc=$?
nparam=$(awk '/^parameters/ {print $2}' "$T/info")
read -r prows _ <<<"$("$MKBAD" stats model.h5 /model/params/value)"
check "info exits 0 and shows the flow spec" bash -c "[ $rc = 0 ] && grep -qE '^flow spec +standardize, affine-coupling' '$T/info'"
check "info shows the parameter count, equal to /model/params/value ($nparam, $prows)" \
    bash -c "[ -n '$nparam' ] && [ '$nparam' -gt 0 ] && [ '$nparam' = '$prows' ]"
check "info shows the preset, dimension and how training ended" \
    bash -c "grep -q '^preset  *realnvp' '$T/info' && grep -q '^dimension  *2' '$T/info' && grep -q 'reached 500 steps' '$T/info'"

# ---- eval --json -----------------------------------------------------------------------------
NUM='-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?'
JSON5="^\{\"n\": [0-9]+, \"dim\": [0-9]+, \"mean_log_prob\": $NUM, \"stderr\": $NUM, \"bits_per_dim\": $NUM"
json_field() { sed -E "s/.*\"$2\": ($NUM).*/\1/" <<<"$1"; }

nfrun eval model.h5 test.h5 --json >"$T/out" 2>"$T/err"
rc=$?
j=$(cat "$T/out")
check "eval --json prints exactly one line" bash -c "[ $rc = 0 ] && [ \$(wc -l <'$T/out') = 1 ]"
check "eval --json is one JSON object with n, dim, mean_log_prob, stderr, bits_per_dim, true_mean_log_prob, kl_gap" \
    grep -qE "$JSON5, \"true_mean_log_prob\": $NUM, \"kl_gap\": $NUM\}$" "$T/out"
n=$(json_field "$j" n)
dim=$(json_field "$j" dim)
mean=$(json_field "$j" mean_log_prob)
se=$(json_field "$j" stderr)
bpd=$(json_field "$j" bits_per_dim)
tmean=$(json_field "$j" true_mean_log_prob)
gap=$(json_field "$j" kl_gap)
check "eval: n = 1000 and dim = 2 (got $n, $dim)" test "$n $dim" = "1000 2"
check "eval: bits_per_dim = -mean_log_prob / (2 ln 2) ($bpd)" close_to "$bpd" "$(awk -v m="$mean" 'BEGIN {printf "%.12g", -m / (2 * log(2))}')" 1e-6
check "eval: kl_gap = true_mean_log_prob - mean_log_prob ($gap)" close_to "$gap" "$(awk -v a="$tmean" -v b="$mean" 'BEGIN {printf "%.12g", a - b}')" 1e-6
# An untrained flow (a Gaussian fit, thanks to the standardize layer) is 1.0 nats off; these 500
# steps reach 0.19-0.27 (seeds 5-7, both builds); a model cannot beat the truth on average.
check "eval: the trained model is within 0.35 nats of the truth and not better (gap $gap)" \
    awk -v g="$gap" 'BEGIN {exit !(g > 0 && g < 0.35)}'
check "eval: standard error is positive and small ($se)" awk -v s="$se" 'BEGIN {exit !(s > 0.001 && s < 0.2)}'
nfrun eval model.h5 test.h5 >"$T/out" 2>"$T/err"
check "eval without --json prints log-likelihood, bits/dim and the KL gap" \
    bash -c "grep -q '^log-likelihood' '$T/out' && grep -q '^bits/dim' '$T/out' && grep -q '^KL gap' '$T/out'"

# ---- sample ----------------------------------------------------------------------------------
nfrun sample model.h5 -n 700 --seed 3 -o samples.h5 2>"$T/err"
rc=$?
check "sample exits 0 and says what it wrote" bash -c "[ $rc = 0 ] && grep -q 'wrote 700 samples of dimension 2' '$T/err'"
read -r rows cols rank _ _ _ _ fin <<<"$("$MKBAD" stats samples.h5 /x)"
check "sample: /x is 700 x 2, finite (got $rows x $cols, $fin)" test "$rows $cols $rank $fin" = "700 2 2 finite"
read -r rows cols rank slmean _ _ _ fin <<<"$("$MKBAD" stats samples.h5 /logp)"
check "sample: /logp holds 700 finite values (got $rows x $cols, $fin)" test "$rows $cols $rank $fin" = "700 1 1 finite"
# 5000 draws: a mean is known to 0.014 sd; the model's own error is below 0.05 sd
nfrun sample model.h5 -n 5000 --seed 8 -o many.h5 2>/dev/null
for k in 0 1; do
    read -r dm ds <<<"$("$MKBAD" col train.h5 /x $k)"
    read -r sm ss <<<"$("$MKBAD" col many.h5 /x $k)"
    check "sample: column $k mean $sm within 0.1 sd and std $ss within 10% of the data's $dm and $ds" \
        awk -v dm="$dm" -v ds="$ds" -v sm="$sm" -v ss="$ss" \
        'BEGIN {d = sm - dm; if (d < 0) d = -d; exit !(d < 0.1 * ds && ss > 0.9 * ds && ss < 1.1 * ds)}'
done
nfrun sample model.h5 -n 700 --seed 3 -o again.h5 2>/dev/null
nfrun sample model.h5 -n 700 --seed 4 -o other.h5 2>/dev/null
check "sample: the same seed draws the same samples, another seed others" \
    bash -c "[ '$("$MKBAD" stats samples.h5 /x)' = '$("$MKBAD" stats again.h5 /x)' ] && [ '$("$MKBAD" stats samples.h5 /x)' != '$("$MKBAD" stats other.h5 /x)' ]"
nfrun eval model.h5 samples.h5 --json >"$T/out" 2>"$T/err"
j=$(cat "$T/out")
check "eval of samples (no /logp_true): JSON without true_mean_log_prob and kl_gap" grep -qE "$JSON5\}$" "$T/out"
check "eval of samples: mean log-density equals the mean of the sampler's /logp ($(json_field "$j" mean_log_prob), $slmean)" \
    close_to "$(json_field "$j" mean_log_prob)" "$slmean" 2e-4

# ---- logprob ---------------------------------------------------------------------------------
nfrun logprob model.h5 test.h5 -o logp.h5 2>"$T/err"
rc=$?
check "logprob exits 0 and says how many values it wrote" bash -c "[ $rc = 0 ] && grep -q 'wrote 1000 log-densities' '$T/err'"
read -r rows cols rank lmean _ _ _ fin <<<"$("$MKBAD" stats logp.h5 /logp)"
check "logprob: /logp holds 1000 finite values (got $rows x $cols, $fin)" test "$rows $cols $rank $fin" = "1000 1 1 finite"
check "logprob: their mean equals eval's mean_log_prob ($lmean, $mean)" close_to "$lmean" "$mean" 1e-5

# ---- other ways to fit -----------------------------------------------------------------------
nfrun fit train.h5 --flow "2*(affine-coupling(hidden=8), permute(order=reverse))" --no-standardize --steps 30 \
    --threads 1 --quiet -o spec.h5 2>"$T/err"
nfrun info spec.h5 >"$T/info" 2>&1
check "fit with an explicit spec and --no-standardize: info shows the spec as given, 4 bijectors" \
    bash -c "grep -qxF 'flow spec       2*(affine-coupling(hidden=8), permute(order=reverse))' '$T/info' &&
             grep -q '^bijectors  *4 ' '$T/info'"
nfrun fit train.h5 "${FLOW[@]}" --val test.h5 --epochs 2 --batch 500 --threads 1 --quiet -o val.h5 2>"$T/err"
nfrun info val.h5 >"$T/info" 2>&1
check "fit --val FILE --epochs 2: validates on the file, stops after 2 epochs" \
    bash -c "grep -q 'validation file test.h5 with 1000' '$T/info' && grep -q 'reached 2 epochs' '$T/info'"
# --ema (the trainer's moving average of the weights; its arithmetic and resume: check_trainer)
nfrun fit train.h5 "${FLOW[@]}" --ema 0.95 --steps 60 --eval-every 20 --batch 200 --threads 1 --quiet -o ema.h5 2>"$T/err"
rc=$?
nfrun info ema.h5 >"$T/info" 2>&1
check "fit --ema 0.95: exit 0, info names the moving average" \
    bash -c "[ $rc = 0 ] && grep -q 'moving average of the weights, decay 0.95' '$T/info'"
nfrun fit train.h5 --ema 1 -o never.h5 >"$T/out" 2>"$T/err"
rc=$?
check "fit --ema 1: exit 2, one line naming --ema, no file" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q -- '--ema' '$T/err' && [ ! -e never.h5 ]"
cp model.h5 model.before
nfrun fit --resume model.h5 >"$T/out" 2>"$T/err"
rc=$?
check "fit --resume of a finished run: exit 0, says so, leaves the file alone" \
    bash -c "[ $rc = 0 ] && grep -q 'already finished' '$T/err' && cmp -s model.h5 model.before"
nfrun fit train.h5 "${TRAIN[@]}" --quiet -o twin.h5 2>/dev/null
j1=$(nfrun eval model.h5 test.h5 --json 2>&1)
j2=$(nfrun eval twin.h5 test.h5 --json 2>&1)
check "fit is reproducible: same settings and seed, same evaluation" test "$j1" = "$j2"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
