#!/usr/bin/env bash
# tests/cli/video.sh - nf video fit / eval / sample on small bouncing-ball videos: a short fit beats
# the model it starts from; eval reports bits/dim and the codec's error (per pixel when nothing is
# dropped); samples go to a GIF and a PNG filmstrip, reproducibly; video-aware Jacobi gives the
# token-by-token videos; continuation keeps the given frames; SIGTERM and --resume end with the
# uninterrupted model; the generic commands refuse a video model; bad input gets one line and no
# output.  With --denoiser: both stages run and are named, samples with each denoiser (the learned
# one by default), their comparison, stop and resume across the stage boundary.  With --codec ae: the
# autoencoder's stage lowers its error, then the flow's; samples decode; stop and resume.  (tests/check_video_model.c checks the model itself.)  Run by `make check`.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

nfrun data make video-balls -n 240 --frames 4 --size 16 --seed 2 -o balls.h5 >/dev/null 2>"$T/err"
nfrun data split balls.h5 --test 0.2 --val 0 --seed 3 >/dev/null 2>>"$T/err"
check "video-balls made and split ($(head -c 200 "$T/err"))" test -s balls.train.h5 -a -s balls.test.h5
nfrun info balls.train.h5 >"$T/vinfo" 2>&1
check "info of video data gives frames and shape and one line over all pixels" \
    bash -c "grep -q '^videos *4 frames of 16x16x1, 256 levels' '$T/vinfo' && grep -q '^pixels *mean ' '$T/vinfo' && ! grep -q '^ *x0 ' '$T/vinfo'"
bpd() { sed -n 's/.*"bits_per_dim": \([-0-9.e]*\).*/\1/p'; }
field() { sed -n "s/.*\"$1\": \"*\([^,\"}]*\).*/\1/p"; }

VID=(--block 4 --keep 2 --local-blocks 2 --global-layers 2 --width 16 --heads 2 --batch 16 --lr 3e-3 --threads 1
     --seed 4 --quiet)
nfrun video fit balls.train.h5 "${VID[@]}" --steps 1 --lr 1e-12 --val-frac 0 -o v0.h5 2>"$T/err"
nfrun video fit balls.train.h5 "${VID[@]}" --steps 80 --eval-every 40 -o v.h5 2>>"$T/err"
rc=$?
check "video fit exits 0 (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
cp v0.h5 rr.h5
refuses_replace rr.h5 video fit balls.train.h5 "${VID[@]}" --steps 2 --val-frac 0
j0=$(nfrun video eval v0.h5 balls.test.h5 --json 2>&1)
j1=$(nfrun video eval v.h5 balls.test.h5 --json 2>&1)
b0=$(bpd <<<"$j0") b1=$(bpd <<<"$j1")
jt=$(nfrun video eval v.h5 balls.test.h5 --json --threads 1 2>&1)
check "eval --threads 1 gives the same result ($jt)" test "$jt" = "$j1"
check "80 steps lower the held-out bits/dim by at least 0.3: $b0 -> $b1" \
    awk -v a="$b0" -v b="$b1" 'BEGIN { exit !(a != "" && b != "" && b < a - 0.3 && b > 0) }'
e=$(field codec_rms_levels <<<"$j1")
# 2 x 2 of 4 x 4 frequencies kept: sharp discs on 256 levels lose detail (22 levels RMS here), but
# less than with the block means alone (keep 1: 41 levels)
check "eval reports the codec's error per kept coefficient ($(field per <<<"$j1"), rms $e levels)" \
    bash -c "[ '$(field per <<<"$j1")' = 'kept DCT coefficient' ] && awk -v e='$e' 'BEGIN { exit !(e > 1 && e < 35) }'"
nfrun video fit balls.train.h5 "${VID[@]}" --keep 4 --steps 1 --val-frac 0 -o vk.h5 2>/dev/null
jk=$(nfrun video eval vk.h5 balls.test.h5 --json 2>&1)
check "with --keep = --block the codec is lossless and bits/dim are per pixel ($jk)" \
    bash -c "[ '$(field per <<<"$jk")' = pixel ] && awk -v e='$(field codec_rms_levels <<<"$jk")' 'BEGIN { exit !(e < 1e-3) }'"

# ---- sampling ---------------------------------------------------------------------------------------
nfrun video sample v.h5 -n 3 --seed 2 -o a.gif --h5 a.h5 2>"$T/err"
check "sample writes an animated GIF and the videos ($(head -c 160 "$T/err"))" \
    bash -c "test -s a.gif -a -s a.h5 && head -c 6 a.gif | grep -q GIF89a"
nfrun video sample v.h5 -n 3 --seed 2 -o a2.gif 2>/dev/null
check "the same seed gives the same GIF" cmp -s a.gif a2.gif
nfrun video sample v.h5 -n 3 --seed 2 --threads 1 -o a3.gif 2>/dev/null
check "and so does --threads 1" cmp -s a.gif a3.gif
nfrun video sample v.h5 -n 3 --seed 2 -o a.png 2>/dev/null
check "a PNG filmstrip" bash -c "test -s a.png && head -c 4 a.png | grep -q PNG"
js=$(nfrun video sample v.h5 -n 3 --seed 5 --method jacobi --compare -o j.png --json 2>&1)
d=$(field max_difference_levels <<<"$js") p=$(field passes <<<"$js") ps=$(field sequential_passes <<<"$js")
check "video-aware Jacobi gives the token-by-token videos (largest difference $d levels; $p passes against $ps)" \
    awk -v d="$d" -v p="$p" -v q="$ps" 'BEGIN { exit !(d != "" && d < 0.05 && p > 0 && p <= q) }'
nfrun video sample v.h5 -n 2 --given 2 --from balls.test.h5 -o c.png --h5 c.h5 2>"$T/err"
check "continuation of 2 given frames writes its filmstrip ($(head -c 160 "$T/err"))" test -s c.png -a -s c.h5
before=$(cksum <balls.test.h5; cksum <v.h5)
expect_err "sample --h5 over the --from videos: refused" \
    "balls\.test\.h5: the output is the same file as the --from file balls\.test\.h5" \
    -- video sample v.h5 -n 2 --given 2 --from balls.test.h5 -o c2.png --h5 balls.test.h5
expect_err "sample --h5 MODEL: refused" "v\.h5: the output is the same file as the model v\.h5" \
    -- video sample v.h5 -n 2 -o c2.png --h5 v.h5
check "the videos and the model are untouched" bash -c "[ '$(cksum <balls.test.h5; cksum <v.h5)' = '$before' ] && [ ! -e c2.png ]"
nfrun video sample v.h5 -n 2 --given 2 -o x.png >/dev/null 2>"$T/err"
rc=$?
check "--given without --from: exit 2, one line, no output" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q -- '--from' '$T/err' && [ ! -e x.png ]"
nfrun video sample v.h5 -n 2 --given 4 --from balls.test.h5 -o x.png >/dev/null 2>"$T/err"
rc=$?
check "as many given frames as the video has: exit 1, one line, no output" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'given 4' '$T/err' && [ ! -e x.png ]"
nfrun video sample v.h5 -n 2 -o x.txt >/dev/null 2>"$T/err"
rc=$?
check "an output that is neither .gif nor .png: exit 2, one line" bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ]"

nfrun info v.h5 >"$T/info" 2>&1
check "info shows the video kind and bits/dim" \
    bash -c "grep -q '^kind *video' '$T/info' && grep -q 'frames=4' '$T/info' && grep -q '^best validation .* bits/dim' '$T/info'"
for c in eval sample; do
    case $c in sample) args=(v.h5 -n 2 -o x.h5) ;; *) args=(v.h5 balls.test.h5) ;; esac
    nfrun "$c" "${args[@]}" >/dev/null 2>"$T/err"
    rc=$?
    check "nf $c refuses a video model, naming nf video (exit $rc)" \
        bash -c "[ $rc != 0 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'nf video' '$T/err' && [ ! -e x.h5 ]"
done

# ---- stop and resume --------------------------------------------------------------------------------
"$NF" video fit balls.train.h5 "${VID[@]}" --steps 600 --patience 0 --checkpoint-every 10 -o r.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file r.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 60
st=$?
if [ "$st" = 0 ]; then
    skip "the fit finished before SIGTERM: resume not exercised"
else
    check "SIGTERM stops video fit with exit 130 (got $st)" test "$st" = 130
    nfrun video fit --resume r.h5 --threads 1 --quiet 2>"$T/err" >/dev/null
    rsteps=$(nfrun info r.h5 2>&1 | sed -n 's/^progress *step \([0-9]*\).*/\1/p')
    nfrun video fit balls.train.h5 "${VID[@]}" --steps 600 --patience 0 --checkpoint-every 10 -o ref.h5 \
        2>/dev/null >/dev/null
    e1=$(nfrun video eval r.h5 balls.test.h5 --json 2>&1)
    e2=$(nfrun video eval ref.h5 balls.test.h5 --json 2>&1)
    check "the resumed fit (step $rsteps) ends with the uninterrupted model" bash -c "[ -n '$e1' ] && [ '$e1' = '$e2' ]"
fi

# ---- the learned denoiser (flow-score matching) ------------------------------------------------------
DN=("${VID[@]}" --denoiser --denoiser-layers 1 --denoiser-width 16 --noise 0.05)
nfrun video fit balls.train.h5 "${DN[@]}" --steps 40 --eval-every 20 -o dn.h5 2>"$T/err"
rc=$?
check "video fit --denoiser runs both stages (exit $rc: $(head -c 200 "$T/err"))" test "$rc" = 0
LOUD=()
for a in "${DN[@]}"; do [ "$a" = --quiet ] || LOUD+=("$a"); done
nfrun video fit balls.train.h5 "${LOUD[@]}" --steps 4 --eval-every 2 --batch 8 --val-frac 0.1 -o dnp.h5 2>&1 |
    grep -v '^nf video fit: [0-9]' >"$T/progress"
check "progress shows bits/dim in stage flow and the mean squared error in stage denoiser" \
    bash -c "grep -q 'val bpd' '$T/progress' && grep -q 'val mse' '$T/progress' && grep -q 'best validation mean squared error' '$T/progress'"
nfrun info dn.h5 >"$T/info" 2>&1
check "info names the stages and shows the denoiser" \
    bash -c "grep -q 'stages: flow, denoiser' '$T/info' && grep -q '^denoiser *learned .* 1 layers, width 16' '$T/info'"
nfrun video fit --help >"$T/help" 2>&1
check "fit --help shows the denoiser flags with their defaults" \
    bash -c "grep -q -- '--denoiser ' '$T/help' && grep -q -- '--denoiser-layers N .*\[2\]' '$T/help' && grep -q -- '--denoiser-width N .*\[32\]' '$T/help'"
for d in none flow learned default; do
    case $d in default) args=() ;; *) args=(--denoise "$d") ;; esac
    js=$(nfrun video sample dn.h5 -n 2 --seed 6 "${args[@]}" -o "d_$d.png" --h5 "d_$d.h5" --json 2>&1)
    want=$d; [ "$d" = default ] && want=learned
    check "sample --denoise $d writes its videos and reports the denoiser's time ($js)" \
        bash -c "test -s d_$d.png -a -s d_$d.h5 && [ '$(field denoise <<<"$js")' = $want ] && [ -n '$(field denoise_seconds <<<"$js")' ]"
done
# videos compared by their bits/dim under a model, printed to 9 digits (the files themselves carry
# HDF5's modification times)
vsig() { nfrun video eval "$1" "$2" --json 2>&1; }
check "the learned denoiser is the default of a model with one" \
    bash -c "[ -n '$(vsig dn.h5 d_default.h5)' ] && [ '$(vsig dn.h5 d_default.h5)' = '$(vsig dn.h5 d_learned.h5)' ]"
check "the denoisers change the videos" \
    bash -c "[ '$(vsig dn.h5 d_none.h5)' != '$(vsig dn.h5 d_flow.h5)' ] && [ '$(vsig dn.h5 d_none.h5)' != '$(vsig dn.h5 d_learned.h5)' ]"
jc=$(nfrun video sample dn.h5 -n 2 --seed 6 --compare-denoise -o dc.png --json 2>&1)
check "--compare-denoise reports both denoisers' times and differences ($jc)" \
    awk -v a="$(field flow_step_rms_levels <<<"$jc")" -v b="$(field learned_flow_rms_levels <<<"$jc")" \
        -v t="$(field learned_denoise_seconds <<<"$jc")" 'BEGIN { exit !(a > 0 && b > 0 && t > 0) }'
nfrun video sample dn.h5 -n 2 --given 2 --from balls.test.h5 --denoise flow -o dg.png --h5 dg.h5 2>"$T/err"
check "continuation with the flow's score step ($(head -c 160 "$T/err"))" test -s dg.png -a -s dg.h5
nfrun video sample dn.h5 -n 2 --denoise tweedie -o x.png >/dev/null 2>"$T/err"
rc=$?
check "--denoise tweedie: exit 2, one line naming the choices, no output" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'none, flow or learned' '$T/err' && [ ! -e x.png ]"
nfrun video sample v.h5 -n 2 --denoise learned -o x.png >/dev/null 2>"$T/err"
rc=$?
check "--denoise learned without a denoiser: exit 1, one line, no output" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'no learned denoiser' '$T/err' && [ ! -e x.png ]"
nfrun video fit balls.train.h5 "${VID[@]}" --denoiser --denoiser-width 9 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a denoiser width that the heads do not divide: exit 1, one line naming it, no model" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'denoiser width 9' '$T/err' && [ ! -e x.h5 ]"
# stop in stage "flow", resume, stop again (by then, usually in stage "denoiser"), resume to the end:
# the same model as one uninterrupted run, flow (eval) and denoiser (the denoised videos) alike
stage_of() { # the stage a checkpoint is in, from the unit of its best validation (the stage's metric)
    nfrun info "$1" 2>/dev/null | awk '/^best validation/ { print ($4 == "mse" ? "denoiser" : "flow") }'
}
"$NF" video fit balls.train.h5 "${DN[@]}" --steps 120 --eval-every 30 --patience 0 --checkpoint-every 10 -o dr.h5 \
    2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file dr.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 60
st=$?
if [ "$st" = 0 ]; then
    skip "the denoiser fit finished before SIGTERM: resume not exercised"
else
    s1=$(stage_of dr.h5)
    "$NF" video fit --resume dr.h5 --threads 1 --quiet 2>"$T/bg.err" >/dev/null &
    pid=$!
    BG_PIDS="$BG_PIDS $pid"
    sleep 3
    kill -TERM "$pid" 2>/dev/null
    wait_bg "$pid" 60
    st2=$?
    s2=$(stage_of dr.h5)
    [ "$st2" = 0 ] && s2=finished
    nfrun video fit --resume dr.h5 --threads 1 --quiet 2>"$T/err" >/dev/null
    nfrun video fit balls.train.h5 "${DN[@]}" --steps 120 --eval-every 30 --patience 0 --checkpoint-every 10 \
        -o dref.h5 2>/dev/null >/dev/null
    e1=$(nfrun video eval dr.h5 balls.test.h5 --json 2>&1)
    e2=$(nfrun video eval dref.h5 balls.test.h5 --json 2>&1)
    nfrun video sample dr.h5 -n 2 --seed 8 --denoise learned -o r1.png --h5 r1.h5 2>/dev/null
    nfrun video sample dref.h5 -n 2 --seed 8 --denoise learned -o r2.png --h5 r2.h5 2>/dev/null
    v1=$(vsig dref.h5 r1.h5) v2=$(vsig dref.h5 r2.h5)
    check "stopped in stage $s1 (exit $st), then in stage $s2 (exit $st2), resumed: the uninterrupted model" \
        bash -c "[ $st = 130 ] && [ -n '$e1' ] && [ '$e1' = '$e2' ] && [ -n '$v1' ] && [ '$v1' = '$v2' ]"
fi

# ---- the learned autoencoder codec (--codec ae): stage "codec", then the flow on its latents ---------
AE=(--codec ae --ae-width 8 --block 4 --keep 2 --local-blocks 1 --global-layers 1 --width 16 --heads 2 --batch 16
    --lr 3e-3 --threads 1 --seed 4)
nfrun video fit balls.train.h5 "${AE[@]}" --steps 1 --lr 1e-12 --val-frac 0 --quiet -o ae0.h5 2>"$T/err"
nfrun video fit balls.train.h5 "${AE[@]}" --steps 60 --eval-every 30 -o ae.h5 2>"$T/err"
rc=$?
check "video fit --codec ae: exit 0, the stages codec (mse) then flow (bpd) ($(head -c 200 "$T/err" | tr "\n" " "))" \
    bash -c "[ $rc = 0 ] && grep -q 'train mse' '$T/err' && grep -q 'train bpd' '$T/err' && grep -q autoencoder '$T/err'"
j0=$(nfrun video eval ae0.h5 balls.test.h5 --json 2>&1)
j1=$(nfrun video eval ae.h5 balls.test.h5 --json 2>&1)
e0=$(field codec_rms_levels <<<"$j0") e1=$(field codec_rms_levels <<<"$j1")
check "60 codec steps lower the autoencoder's held-out error by a fifth: $e0 -> $e1 levels RMS" \
    awk -v a="$e0" -v b="$e1" 'BEGIN { exit !(a != "" && b != "" && b < 0.8 * a) }'
check "eval of an autoencoder model: bits per latent value ($(head -c 200 <<<"$j1"))" \
    bash -c "[ '$(field per <<<"$j1")' = 'latent value' ] && [ -n '$(bpd <<<"$j1")' ]"
nfrun video sample ae.h5 -n 2 --seed 3 -o aes.png >/dev/null 2>"$T/err"
check "samples of an autoencoder model decode to a filmstrip ($(head -c 160 "$T/err"))" test -s aes.png
# killed in stage "codec", resumed: the latent scale is set when the flow's stage begins in the
# resumed run, and the model is the uninterrupted one
"$NF" video fit balls.train.h5 "${AE[@]}" --steps 60 --eval-every 30 --patience 0 --checkpoint-every 5 --quiet \
    -o aer.h5 2>"$T/bg.err" &
pid=$!
BG_PIDS="$BG_PIDS $pid"
wait_for_file aer.h5 "$pid"
kill -TERM "$pid" 2>/dev/null
wait_bg "$pid" 60
st=$?
nfrun video fit --resume aer.h5 --threads 1 --quiet 2>"$T/err" >/dev/null
nfrun video fit balls.train.h5 "${AE[@]}" --steps 60 --eval-every 30 --patience 0 --checkpoint-every 5 --quiet \
    -o aeref.h5 2>/dev/null
e1=$(nfrun video eval aer.h5 balls.test.h5 --json 2>&1)
e2=$(nfrun video eval aeref.h5 balls.test.h5 --json 2>&1)
check "autoencoder fit stopped (exit $st) and resumed: the uninterrupted model ($(head -c 120 <<<"$e1"))" \
    bash -c "[ $st = 130 ] && [ -n '$e1' ] && [ '$e1' = '$e2' ]"
# paired comparison of two models on the same videos: the difference of their own evaluations
jc=$(nfrun video eval v.h5 balls.test.h5 --compare v0.h5 --json 2>&1)
dif=$(sed -n 's/.*"difference": \([-0-9.e]*\).*/\1/p' <<<"$jc")
dse=$(sed -n 's/.*"difference_stderr": \([-0-9.e]*\).*/\1/p' <<<"$jc")
check "eval --compare: the paired difference is the difference of the two evaluations ($dif +- $dse; $b1 - $b0)" \
    awk -v d="$dif" -v s="$dse" -v a="$b1" -v b="$b0" \
    'BEGIN { exit !(d != "" && s != "" && (d - (a - b))^2 < 1e-10 && s > 0) }'
nfrun video eval v.h5 balls.test.h5 --compare ae.h5 >/dev/null 2>"$T/err"
rc=$?
check "eval --compare with a model of another codec: exit 1, one line ($(head -c 160 "$T/err"))" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'codec' '$T/err'"
nfrun video fit balls.train.h5 --codec wavelet -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "--codec wavelet: usage error naming the choices, no model" \
    bash -c "[ $rc = 2 ] && grep -q 'dct or ae' '$T/err' && [ ! -e x.h5 ]"

# ---- bad input --------------------------------------------------------------------------------------
nfrun data make digits -o digits.h5 >/dev/null 2>&1
nfrun video fit digits.h5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "an image file: exit 1, one line saying it holds images and naming nf image, no model" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'holds images .*nf image' '$T/err' && [ ! -e x.h5 ]"
nfrun image fit balls.train.h5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "nf image fit of a video file: exit 1, one line naming nf video, no model" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'holds videos .*nf video' '$T/err' && [ ! -e x.h5 ]"
nfrun video fit missing.h5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a missing file: exit 1, one line" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && [ ! -e x.h5 ]"
nfrun video fit balls.train.h5 --block 5 -o x.h5 >/dev/null 2>"$T/err"
rc=$?
check "a DCT block that does not divide the frame: exit 1, one line naming it, no model" \
    bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'block 5' '$T/err' && [ ! -e x.h5 ]"
nfrun video eval v.h5 digits.h5 >/dev/null 2>"$T/err"
rc=$?
check "eval on images: exit 1, one line" bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/err') = 1 ]"
nfrun video fit --help >"$T/help" 2>&1
check "fit --help shows the codec with its defaults and an example" \
    bash -c "grep -q -- '--block B .*\[8\]' '$T/help' && grep -q -- '--keep K .*\[4\]' '$T/help' && grep -q '^example' '$T/help'"
check "no temporary files left behind: $(stray_tmp)" test -z "$(stray_tmp)"
finish
