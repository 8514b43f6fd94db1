#!/usr/bin/env bash
# tests/cli/image.sh - nf image fit / eval / sample / classify on the built-in digits: a short Glow fit
# beats the bits/dim of the model it starts from; a class-conditional TarFlow evaluates, classifies
# and samples by class; Jacobi sampling gives the token-by-token images; SIGTERM and --resume end
# with the uninterrupted model; the generic commands refuse an image model; --align trains its
# encoder then the aligned flow, which evaluates and samples; --dequant variational fits, evaluates
# reproducibly, samples and resumes; bad input gets one line and no output.  (The library suites check the flows themselves.)  Run by `make check`.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

nfrun data make digits -o digits.h5 >/dev/null 2>"$T/err"
nfrun data split digits.h5 --test 0.2 --val 0 --seed 3 >/dev/null 2>>"$T/err"
check "digits made and split ($(head -c 200 "$T/err"))" test -s digits.train.h5 -a -s digits.test.h5
nfrun info digits.train.h5 >"$T/dinfo" 2>&1
check "info of image data gives the shape and one line over all pixels, not a column per pixel" \
    bash -c "grep -q '^images *8x8x1, 17 levels' '$T/dinfo' && grep -q '^pixels *mean .*min 0, max 16' '$T/dinfo' &&
             ! grep -q '^ *x0 ' '$T/dinfo' && grep -q '^source *.*digits.csv.gz' '$T/dinfo' && ! grep -q '\.\./' '$T/dinfo'"
bpd() { sed -n 's/.*"bits_per_dim": \([-0-9.e]*\).*/\1/p'; }
acc() { sed -n 's/.*"accuracy": \([-0-9.e]*\).*/\1/p'; }

# ---- Glow: the untrained flow (the identity: every coupling starts at zero) against 150 steps ----
GLOW=(--scales 1 --depth 2 --hidden 16 --batch 32 --lr 2e-3 --threads 1 --seed 4 --quiet)
nfrun image fit digits.train.h5 "${GLOW[@]}" --steps 1 --lr 1e-12 --val-frac 0 -o g0.h5 2>"$T/err"
nfrun image fit digits.train.h5 "${GLOW[@]}" --steps 150 --eval-every 50 -o g.h5 2>>"$T/err"
rc=$?
check "image fit (glow) exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
cp g0.h5 rr.h5
refuses_replace rr.h5 image fit digits.train.h5 "${GLOW[@]}" --steps 2 --val-frac 0
b0=$(nfrun image eval g0.h5 digits.test.h5 --json 2>&1 | bpd)
b1=$(nfrun image eval g.h5 digits.test.h5 --json 2>&1 | bpd)
check "150 steps lower the held-out bits/dim by at least 0.5: $b0 -> $b1" \
    awk -v a="$b0" -v b="$b1" 'BEGIN { exit !(a != "" && b != "" && b < a - 0.5 && b > 0.5) }'
# 17 grey levels: a model no better than uniform noise has log2(17) = 4.09 bits/dim
check "and ends below the 4.09 bits/dim of uniform levels" awk -v b="$b1" 'BEGIN { exit !(b < 4.0) }'
bt=$(nfrun image eval g.h5 digits.test.h5 --json --threads 1 2>&1 | bpd)
check "eval --threads 1 gives the same bits/dim ($bt)" test "$bt" = "$b1"
nfrun image sample g.h5 -n 16 --seed 2 -o g.png --h5 g_s.h5 2>"$T/err"
check "sample writes a PNG grid and the images ($(head -c 160 "$T/err"))" test -s g.png -a -s g_s.h5
nfrun image sample g.h5 -n 16 --seed 2 -o g2.png 2>/dev/null
check "the same seed gives the same picture" cmp -s g.png g2.png
nfrun image sample g.h5 -n 16 --seed 2 --threads 1 -o g4.png 2>/dev/null
check "and so does --threads 1" cmp -s g.png g4.png
before=$(cksum <g.h5)
expect_err "sample --h5 MODEL: refused" "g\.h5: the output is the same file as the model g\.h5" \
    -- image sample g.h5 -n 2 -o g3.png --h5 g.h5
expect_err "sample -o X --h5 X: refused" "g3\.png: the same file as -o and --h5" -- image sample g.h5 -n 2 -o g3.png --h5 ./g3.png
check "the model is untouched and nothing was written" bash -c "[ '$(cksum <g.h5)' = '$before' ] && [ ! -e g3.png ]"
nfrun info g.h5 >"$T/info" 2>&1
check "info shows the image kind, the images and bits/dim" \
    bash -c "grep -q '^kind *image' '$T/info' && grep -q '^images *8x8x1, 17 grey levels' '$T/info' &&
             grep -q '^architecture *glow: 1 scales' '$T/info' && grep -q '^best validation .* bits/dim' '$T/info'"
for c in eval sample logprob; do
    case $c in sample) args=(g.h5 -n 2 -o x.h5) ;; logprob) args=(g.h5 digits.test.h5 -o x.h5) ;; *) args=(g.h5 digits.test.h5) ;; esac
    nfrun "$c" "${args[@]}" >/dev/null 2>"$T/err"
    rc=$?
    check "nf $c refuses an image model, naming nf image (exit $rc)" \
        bash -c "[ $rc != 0 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'nf image' '$T/err' && [ ! -e x.h5 ]"
done

# ---- a class-conditional TarFlow ----------------------------------------------------------------
TAR=(--arch tarflow --conditional --patch 2 --width 16 --heads 2 --layers 1 --blocks 2 --batch 32 --lr 3e-3
    --threads 1 --seed 5 --quiet)
nfrun image fit digits.train.h5 "${TAR[@]}" --steps 120 --eval-every 40 -o t.h5 2>"$T/err"
rc=$?
check "image fit (conditional tarflow) exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
j=$(nfrun image eval t.h5 digits.test.h5 --json 2>&1)
a=$(acc <<<"$j")
check "eval reports bits/dim and the likelihood classifier's accuracy, twice chance (0.1): $a" \
    awk -v a="$a" -v b="$(bpd <<<"$j")" 'BEGIN { exit !(a != "" && a > 0.2 && b > 0.5 && b < 4.5) }'
a2=$(nfrun image classify t.h5 digits.test.h5 --json 2>&1 | acc)
check "classify gives eval's accuracy ($a2)" test "$a2" = "$a"
printf '%s\n' "$j" >"$T/eval.json"
check "the classifier's prior is the training images' class frequencies, stored with the model" \
    grep -q '"prior": "training class frequencies"' "$T/eval.json"
nfrun image classify t.h5 digits.test.h5 >"$T/cls" 2>&1
check "classify names the prior it used" grep -q 'p(c) the training class frequencies' "$T/cls"
for m in sequential jacobi; do
    nfrun image sample t.h5 -n 8 --class 3 --seed 7 --method $m -o t_$m.png --h5 t_$m.h5 --json >"$T/$m.json" 2>&1
done
ps=$(sed -n 's/.*"passes": \([0-9]*\).*/\1/p' "$T/sequential.json")
check "sequential sampling takes one pass per token and block (16 x 2 = $ps)" test "$ps" = 32
bp=$(sed -n 's/.*"block_passes": \[\([0-9, ]*\)\].*/\1/p' "$T/sequential.json")
check "--json lists each block's passes (sequential: 16, 16; got $bp)" test "$bp" = "16, 16"
if [ -z "${H5RELDIFF:-}" ]; then
    gcc -O1 -o "$T/h5reldiff" "$ROOT/tests/cli/h5reldiff.c" $(pkg-config --cflags --libs hdf5-serial) -lm 2>/dev/null
    H5RELDIFF=$T/h5reldiff
fi
nfrun image sample t.h5 -n 8 --class 3 --seed 7 -o t_auto.png --h5 t_auto.h5 --json >"$T/auto.json" 2>&1
pa=$(sed -n 's/.*"passes": \([0-9]*\).*/\1/p' "$T/auto.json")
check "the default method (auto) is the token-by-token one, the faster on a CPU ($pa passes, the same images)" \
    bash -c "[ '$pa' = 32 ] && [ \"\$('$H5RELDIFF' t_sequential.h5 t_auto.h5 /x 2>&1)\" = 0.000e+00 ]"
d=$("$H5RELDIFF" t_sequential.h5 t_jacobi.h5 /x 2>&1)
# images in grey levels 0..16: 1e-3 in the flow's unit scale is 0.017 levels
check "Jacobi sampling gives the token-by-token images (relative difference $d)" \
    awk -v d="$d" 'BEGIN { exit !(d != "" && d + 0 < 2e-3) }'
nfrun image sample t.h5 -n 2 --class 10 -o x.png >/dev/null 2>"$T/err"
rc=$?
check "--class beyond the classes: exit 1, one line, no picture" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q '10 classes' '$T/err' && [ ! -e x.png ]"
nfrun image classify g.h5 digits.test.h5 >/dev/null 2>"$T/err"
rc=$?
check "classify of an unconditional model says how to train a conditional one" \
    bash -c "[ $rc = 1 ] && grep -q -- '--conditional' '$T/err'"

# ---- reverse alignment: a classifier stage, then the flow aligned to it ---------------------------
ALIGN=(--arch tarflow --conditional --patch 2 --width 16 --heads 2 --layers 1 --blocks 2 --batch 32 --lr 3e-3
    --threads 1 --seed 5 --align --align-layers "0,1" --align-weight 0.5)
nfrun image fit digits.train.h5 "${ALIGN[@]}" --steps 60 --eval-every 30 -o al.h5 >/dev/null 2>"$T/err"
rc=$?
check "image fit --align exits 0 (exit $rc: $(tail -n 1 "$T/err" | head -c 160))" test "$rc" = 0
check "it trains the encoder, then the flow, and reports both terms on validation" \
    bash -c "grep -q \"stage 'encoder'\" '$T/err' && grep -q 'alignment .* the frozen encoder classifies' '$T/err'"
j=$(nfrun image eval al.h5 digits.test.h5 --json 2>&1)
check "the aligned model evaluates in bits/dim with the likelihood classifier ($j)" \
    awk -v a="$(acc <<<"$j")" -v b="$(bpd <<<"$j")" 'BEGIN { exit !(a != "" && a > 0.1 && b > 0.5 && b < 4.5) }'
nfrun image sample al.h5 -n 4 --seed 2 -o al.png 2>/dev/null
check "and samples" test -s al.png
nfrun info al.h5 >"$T/info" 2>&1
check "info shows the image kind with its alignment" grep -q '^kind *image: .*alignment' "$T/info"
nfrun image fit digits.train.h5 --align -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "--align with glow: exit 1, one line naming tarflow, no model" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q tarflow '$T/err' && [ ! -e x.h5 ]"
nfrun image fit digits.train.h5 "${ALIGN[@]}" --align-layers 0,x -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a bad --align-layers list: usage error" bash -c "[ $rc = 2 ] && grep -q 'align' '$T/err' && [ ! -e x.h5 ]"
nfrun image fit digits.train.h5 "${ALIGN[@]}" --align-layers 2 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an aligned block the flow lacks: exit 1 naming the blocks" bash -c "[ $rc = 1 ] && grep -q '0..1' '$T/err' && [ ! -e x.h5 ]"

# ---- variational dequantisation: fit, evaluate (a bound, reproducibly), sample, stop and resume ----
VD=(--scales 1 --depth 2 --hidden 16 --batch 32 --lr 2e-3 --threads 1 --seed 4 --quiet --dequant variational
    --dequant-layers 2 --dequant-hidden 8)
nfrun image fit digits.train.h5 "${VD[@]}" --steps 150 --eval-every 50 -o v.h5 2>"$T/err"
rc=$?
check "image fit --dequant variational exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
v1=$(nfrun image eval v.h5 digits.test.h5 --json 2>&1 | bpd)
v2=$(nfrun image eval v.h5 digits.test.h5 --json --batch 7 2>&1 | bpd)
# (the same up to float rounding: the convolutions' products group the batch differently)
check "it evaluates below the 4.09 bits/dim of uniform levels ($v1), the same in batches of 7 ($v2)" \
    awk -v a="$v1" -v b="$v2" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d * d < 1e-12 && a > 0.5 && a < 4.0) }'
nfrun image sample v.h5 -n 8 --seed 2 -o v.png 2>"$T/err"
check "and samples ($(head -c 160 "$T/err"))" test -s v.png
nfrun info v.h5 >"$T/info" 2>&1
check "info names the variational dequantisation" \
    bash -c "grep -q '^kind *image: .*variational dequantisation' '$T/info' && grep -q '^dequantisation *variational: ' '$T/info'"
"$NF" image fit digits.train.h5 "${VD[@]}" --steps 800 --patience 0 --checkpoint-every 10 -o vr.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file vr.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 60
st=$?
if [ "$st" = 0 ]; then
    skip "the variational fit finished before SIGTERM: resume not exercised"
else
    check "SIGTERM stops the variational fit with exit 130 (got $st)" test "$st" = 130
    nfrun image fit --resume vr.h5 --threads 1 --quiet 2>"$T/err" >/dev/null
    nfrun image fit digits.train.h5 "${VD[@]}" --steps 800 --patience 0 --checkpoint-every 10 -o vref.h5 \
        2>/dev/null >/dev/null
    e1=$(nfrun image eval vr.h5 digits.test.h5 --json 2>&1)
    e2=$(nfrun image eval vref.h5 digits.test.h5 --json 2>&1)
    check "the resumed variational fit ends with the uninterrupted model" bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ]"
fi
nfrun image fit digits.train.h5 --dequant argmax -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a bad --dequant: exit 2, one line naming the choices, no model" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'uniform' '$T/err' && grep -q 'variational' '$T/err' && [ ! -e x.h5 ]"
nfrun image fit --help >"$T/help" 2>&1
check "fit --help shows --dequant with its default" grep -q -- '--dequant KIND .*\[uniform\]' "$T/help"
check "fit --help shows --micro-batch and its default (0: automatic)" grep -q -- "values. worth \[0\]" "$T/help"
nfrun image fit digits.train.h5 --micro-batch -2 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a bad --micro-batch: exit 2, one line naming the range, no model" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q '65536' '$T/err' && [ ! -e x.h5 ]"
# micro-batches: the same model at one and two threads (the order of the gradient's sums is fixed)
nfrun image fit digits.train.h5 "${GLOW[@]}" --micro-batch 5 --steps 6 --val-frac 0 --threads 1 -o mb1.h5 2>"$T/err" >/dev/null
nfrun image fit digits.train.h5 "${GLOW[@]}" --micro-batch 5 --steps 6 --val-frac 0 --threads 2 -o mb2.h5 2>>"$T/err" >/dev/null
e1=$(nfrun image eval mb1.h5 digits.test.h5 --json 2>&1 | bpd)
e2=$(nfrun image eval mb2.h5 digits.test.h5 --json 2>&1 | bpd)
check "micro-batches give the same model at one and two threads ($e1, $e2; $(head -c 160 "$T/err"))" \
    bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ]"

# ---- stop and resume ----------------------------------------------------------------------------
"$NF" image fit digits.train.h5 "${GLOW[@]}" --steps 3000 --patience 0 --checkpoint-every 10 -o r.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file r.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 60
st=$?
if [ "$st" = 0 ]; then
    skip "the fit finished before SIGTERM: resume not exercised"
else
    check "SIGTERM stops image fit with exit 130 (got $st)" test "$st" = 130
    nfrun image fit --resume r.h5 --threads 1 --quiet 2>"$T/err" >/dev/null
    rsteps=$(nfrun info r.h5 2>&1 | sed -n 's/^progress *step \([0-9]*\).*/\1/p')
    # the uninterrupted run, to the same step count
    nfrun image fit digits.train.h5 "${GLOW[@]}" --steps 3000 --patience 0 --checkpoint-every 10 -o ref.h5 \
        2>/dev/null >/dev/null
    e1=$(nfrun image eval r.h5 digits.test.h5 --json 2>&1)
    e2=$(nfrun image eval ref.h5 digits.test.h5 --json 2>&1)
    check "the resumed fit (step $rsteps) ends with the uninterrupted model" bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ]"
fi
nfrun image fit --resume g.h5 --steps 500 >/dev/null 2>"$T/err"
rc=$?
check "image fit --resume refuses a setting it would ignore, in one line (exit $rc)" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q -- '--steps does not apply with --resume' '$T/err'"

# ---- bad input ------------------------------------------------------------------------------------
nfrun data make moons -n 100 -o moons.h5 >/dev/null 2>&1
nfrun image fit moons.h5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a data file without images: exit 1, one line naming image_shape, no model" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q image_shape '$T/err' && [ ! -e x.h5 ]"
nfrun image fit missing.h5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a missing file: exit 1, one line" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && [ ! -e x.h5 ]"
nfrun image fit digits.train.h5 --arch unet -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an unknown architecture: usage error listing them" bash -c "[ $rc = 2 ] && grep -q 'glow|realnvp|tarflow' '$T/err'"
nfrun image fit digits.train.h5 --scales 4 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "more scales than the 8x8 digits allow: one line saying so" \
    bash -c "[ $rc = 1 ] && grep -q 'divisible by 16' '$T/err' && [ ! -e x.h5 ]"
nfrun image eval g.h5 moons.h5 >/dev/null 2>"$T/err"
rc=$?
check "eval on data without images: exit 1" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ]"
nfrun image --help >"$T/help" 2>&1
check "nf image --help lists the subcommands with an example" bash -c "grep -q classify '$T/help' && grep -q 'example' '$T/help'"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
