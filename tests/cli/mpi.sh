#!/usr/bin/env bash
# tests/cli/mpi.sh - data-parallel nf fit under mpirun (issue 15): two processes with the batch
# split between them end with the parameters of one process with the whole batch (to rounding),
# for nf fit (also with ActNorm), nf tpp fit, nf image fit, nf video fit and nf causal fit (both stages;
# also 3 processes, and a 2-D outcome; nf video fit also with the learned autoencoder);
# a killed two-process run (nf fit, nf causal fit) resumes with two processes (to the bit) and with
# one (to rounding); other commands refuse to run as several processes.  Skipped when nf was built without MPI or
# mpirun is missing.  Run by `make check` with NF=build/<variant>/nf.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

# not under mpirun: a command that is one process's work refuses the launcher's environment
OMPI_COMM_WORLD_SIZE=2 nfrun data make moons -n 10 -o x.h5 >"$T/out" 2>"$T/err"
rc=$?
check "nf data make as 2 processes: exit 2, one line naming mpirun" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'mpirun started 2' '$T/err' && [ ! -e x.h5 ]"

v=$("$NF" --version)
if [[ $v == *"MPI: none"* ]] || ! command -v mpirun >/dev/null; then
    skip "nf built without MPI or no mpirun ($v)"
    finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
# In a sanitizer build (SANITIZE=1), Open MPI's own allocations at MPI_Init that it never frees are
# reported as leaks; tests/lsan.supp names its libraries, which only the slow unwinder finds in the
# stacks (Open MPI has no frame pointers; a variable the other builds ignore).
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
mpi() { timeout -k 5 "${NF_CLI_TIMEOUT:-120}" mpirun --oversubscribe -np "$@"; }
if ! gcc -O1 -o "$T/h5reldiff" "$ROOT/tests/cli/h5reldiff.c" $(pkg-config --cflags --libs hdf5-serial) -lm \
    2>"$T/cc.log"; then
    fail "building tests/cli/h5reldiff.c: $(head -c 300 "$T/cc.log")"
    finish
fi
reldiff() { "$T/h5reldiff" "$1" "$2" /model/params/value; }
# the float build sums a batch's gradient in another order when it is split: rounding of float
# (and over a longer run the differences grow with the steps)
case $v in *"double build"*) tol=1e-5 long_tol=1e-5 ;; *) tol=1e-4 long_tol=2e-3 ;; esac
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 <= b + 0) }'; }

nfrun data make gmm --dim 4 -n 3000 --seed 3 -o g.h5 >/dev/null 2>&1
FIT=(--flow maf --layers 2 --hidden 16 --steps 200 --batch 256 --eval-every 50 --threads 1 --seed 5 --quiet)
nfrun fit g.h5 "${FIT[@]}" -o one.h5 2>"$T/err1"
mpi 2 "$NF" fit g.h5 "${FIT[@]}" -o two.h5 >"$T/out2" 2>"$T/err2"
rc=$?
check "mpirun -np 2 nf fit: exit 0 ($(head -c 300 "$T/err2"))" test "$rc" = 0
d=$(reldiff one.h5 two.h5)
check "2 processes x batch 128 = 1 process x batch 256 after 200 steps (relative difference $d <= $tol)" below "$d" "$tol"
check "one process speaks: no output on stdout or stderr with --quiet" bash -c "[ ! -s '$T/out2' ] && [ ! -s '$T/err2' ]"
dv=$("$T/h5reldiff" one.h5 two.h5 /training/checkpoint/best/value)
check "the same best validation parameters (validation summed over processes: $dv)" below "$dv" "$tol"
mpi 2 "$NF" fit g.h5 "${FIT[@]:0:${#FIT[@]}-1}" -o three.h5 >"$T/out3" 2>"$T/err3"
check "progress from one process only ($(grep -c 'step 200/200' "$T/err3") closing progress lines)" \
    bash -c "[ \$(grep -c 'step 200/200' '$T/err3') = 1 ] && grep -q '2 processes, batches of 256' '$T/err3'"

# ActNorm (the glow preset) sets itself from the first rows of the data in every process alike, not
# from each process's part of the first batch
GL=(--flow glow --layers 2 --hidden 8 --steps 50 --batch 128 --eval-every 25 --threads 1 --seed 6 --quiet)
nfrun fit g.h5 "${GL[@]}" -o glow1.h5 2>"$T/errg1"
mpi 2 "$NF" fit g.h5 "${GL[@]}" -o glow2.h5 2>"$T/errg2"
d=$(reldiff glow1.h5 glow2.h5)
check "with ActNorm (glow): 2 processes = 1 after 50 steps (relative difference $d <= $tol; $(head -c 200 "$T/errg2"))" \
    below "$d" "$tol"

# the image kind: dequantisation and noise are keyed by the image's index and the step, not by a
# process's stream, so 2 processes reproduce 1 (a conditional tarflow: noise, class dropout)
nfrun data make digits -o dg.h5 >/dev/null 2>&1
IM=(--arch tarflow --conditional --patch 2 --width 8 --heads 2 --layers 1 --blocks 2 --steps 30 --batch 64
    --eval-every 10 --threads 1 --seed 2 --quiet)
nfrun image fit dg.h5 "${IM[@]}" -o im1.h5 2>"$T/erri1"
mpi 2 "$NF" image fit dg.h5 "${IM[@]}" -o im2.h5 2>"$T/erri2"
d=$(reldiff im1.h5 im2.h5)
check "mpirun -np 2 nf image fit = one process (relative difference $d <= $tol; $(head -c 200 "$T/erri2"))" \
    below "$d" "$tol"
OMPI_COMM_WORLD_SIZE=2 nfrun image eval im1.h5 dg.h5 >"$T/out" 2>"$T/err"
check "nf image eval as 2 processes: refused (exit $?)" grep -q 'one process' "$T/err"

# the video kind: its dequantisation and latent noise are keyed the same way
nfrun data make video-balls -n 64 --frames 3 --size 16 -o vb.h5 >/dev/null 2>&1
VI=(--block 4 --keep 2 --local-blocks 1 --global-layers 1 --width 8 --heads 2 --steps 20 --batch 16 --eval-every 10
    --threads 1 --seed 2 --quiet)
nfrun video fit vb.h5 "${VI[@]}" -o vi1.h5 2>"$T/errv1"
mpi 2 "$NF" video fit vb.h5 "${VI[@]}" -o vi2.h5 2>"$T/errv2"
d=$(reldiff vi1.h5 vi2.h5)
check "mpirun -np 2 nf video fit = one process (relative difference $d <= $tol; $(head -c 200 "$T/errv2"))" \
    below "$d" "$tol"
# with the learned autoencoder: its stage, then the latent scale set alike in every process (from the
# same first videos, which a share reads from the file) when the flow's stage begins
nfrun video fit vb.h5 "${VI[@]}" --codec ae --ae-width 8 --steps 10 --eval-every 5 -o va1.h5 2>"$T/errv1"
mpi 2 "$NF" video fit vb.h5 "${VI[@]}" --codec ae --ae-width 8 --steps 10 --eval-every 5 -o va2.h5 2>"$T/errv2"
d=$(reldiff va1.h5 va2.h5)
ds=$("$T/h5reldiff" va1.h5 va2.h5 /model/state/value)
check "mpirun -np 2 nf video fit --codec ae = one process (parameters $d, state $ds <= $tol; $(head -c 200 "$T/errv2"))" \
    bash -c "awk -v a='$d' -v b='$ds' -v t='$tol' 'BEGIN { exit !(a != \"\" && b != \"\" && a + 0 <= t && b + 0 <= t) }'"

# the point-process kind: its loss is a mean over events, so processes combine by event counts
nfrun tpp import "$ROOT/tests/data/tpp/hawkes1.npy" -o h.h5 >/dev/null 2>&1
TPP=(--steps 60 --batch 32 --hidden 16 --components 8 --threads 1 --quiet)
nfrun tpp fit h.h5 "${TPP[@]}" -o tpp1.h5 2>"$T/errt1"
mpi 2 "$NF" tpp fit h.h5 "${TPP[@]}" -o tpp2.h5 2>"$T/errt2"
d=$(reldiff tpp1.h5 tpp2.h5)
check "mpirun -np 2 nf tpp fit = one process (relative difference $d <= $tol; $(head -c 200 "$T/errt2"))" below "$d" "$tol"
OMPI_COMM_WORLD_SIZE=2 nfrun tpp eval tpp1.h5 h.h5 >"$T/out" 2>"$T/err"
check "nf tpp eval as 2 processes: refused (exit $?)" grep -q 'runs in one process' "$T/err"

# the causal kind, both stages: its flows' ActNorm layers start from the training units (at
# creation), not from each process's part of the first batch.  Without training noise (each process
# draws its own, from the seed and its rank) 2 processes end where one does.
nfrun data make causal-poly --shift 2 -n 600 --seed 3 -o poly.h5 >/dev/null 2>&1
CAUSAL=(--repr 8 --hidden 16 --grid 32 --steps 100 --batch 64 --lr 1e-2 --eval-every 50 --noise 0 --threads 1
        --seed 2 --quiet)
nfrun causal fit poly.h5 "${CAUSAL[@]}" -o c1.h5 2>"$T/errc1"
mpi 2 "$NF" causal fit poly.h5 "${CAUSAL[@]}" -o c2.h5 2>"$T/errc2"
rc=$?
check "mpirun -np 2 nf causal fit: exit 0, nothing printed with --quiet ($(head -c 300 "$T/errc2"))" \
    bash -c "[ $rc = 0 ] && [ ! -s '$T/errc2' ]"
d=$(reldiff c1.h5 c2.h5)
check "2 processes x batch 32 = 1 process x batch 64 after both causal stages (relative difference $d <= $tol)" \
    below "$d" "$tol"
# each process reads only its share of the units (datasets/causal_share.c; tests/check_causal_data.c
# checks what a share holds): three uneven shares of 600 units still make the one-process model
mpi 3 "$NF" causal fit poly.h5 "${CAUSAL[@]}" -o c3.h5 2>"$T/errc3"
d=$(reldiff c1.h5 c3.h5)
check "3 processes (shares of 200 units) = 1 process after both causal stages (relative difference $d <= $tol)" \
    below "$d" "$tol"
# a 2-D outcome: stage 2 on the nuisance's draws, which each process takes for its own units from
# streams keyed by the unit's index, so 2 processes still end where one does.  10 steps a stage: in
# float this fit amplifies rounding fast (1 and 2 processes 3e-6 apart after 10 steps, 3e-2 after 60;
# the double build 6e-14 after 60)
nfrun data make causal-moons -n 400 --seed 3 -o moons.h5 >/dev/null 2>&1
MOONS=(--repr 8 --hidden 16 --draws 8 --steps 10 --batch 64 --lr 1e-2 --eval-every 5 --noise 0 --threads 1 --seed 2
       --quiet)
nfrun causal fit moons.h5 "${MOONS[@]}" -o cm1.h5 2>"$T/errm1"
mpi 2 "$NF" causal fit moons.h5 "${MOONS[@]}" -o cm2.h5 2>"$T/errm2"
d=$(reldiff cm1.h5 cm2.h5)
check "2-D outcome: 2 processes = 1 process after both causal stages (relative difference $d <= $tol; $(head -c 200 "$T/errm2"))" \
    below "$d" "$tol"
# 480 training units in batches of 479: every other step one process holds no unit, and the target
# flows' moving average (state, read by validation) must still advance in both (it did not when it
# advanced in the loss: the validations differed by 6e-4)
SMALL=(--repr 8 --hidden 16 --grid 32 --steps 12 --batch 479 --eval-every 4 --noise 0 --threads 1 --seed 2 --quiet)
nfrun causal fit poly.h5 "${SMALL[@]}" -o s1.h5 2>/dev/null
mpi 2 "$NF" causal fit poly.h5 "${SMALL[@]}" -o s2.h5 2>/dev/null
d=$("$T/h5reldiff" s1.h5 s2.h5 /model/state/value)
dv=$("$T/h5reldiff" s1.h5 s2.h5 /training/checkpoint/history/val_log_likelihood)
check "a step where one process holds no unit: state ($d) and validations ($dv) as one process's (<= $tol)" \
    bash -c "awk -v a='$d' -v b='$dv' -v t='$tol' 'BEGIN { exit !(a != \"\" && b != \"\" && a + 0 <= t && b + 0 <= t) }'"
OMPI_COMM_WORLD_SIZE=2 nfrun causal eval c1.h5 poly.h5 >"$T/out" 2>"$T/err"
rc=$?
check "nf causal eval as 2 processes: refused with one line (exit $rc)" \
    bash -c "[ $rc = 2 ] && [ \$(wc -l <'$T/err') = 1 ] && grep -q 'nf causal: runs in one process' '$T/err'"

# ---- a killed run resumes ----------------------------------------------------------------------
LONG=(--flow maf --layers 2 --hidden 16 --steps 800 --batch 256 --eval-every 100 --checkpoint-every 20 --threads 1
      --seed 7 --quiet)
mpi 2 "$NF" fit g.h5 "${LONG[@]}" -o ref.h5 2>"$T/errr"
check "uninterrupted 2-process reference run" test -f ref.h5
# killed_run OUT ARGS...: mpirun -np 2 nf ARGS... writing OUT, its processes killed with SIGKILL
# once the first checkpoint is there; returns mpirun's exit status after they are all gone.
killed_run() {
    local out=$1 mpid kids alive k st
    shift
    mpirun --oversubscribe -np 2 "$NF" "$@" 2>"$T/errk" &
    mpid=$!
    BG_PIDS="$BG_PIDS $mpid"
    # at once: a causal stage lasts about 0.1 s on a fast machine (a further 0.2 s sleep here let the
    # whole run finish before the kill, 2026-12-04)
    wait_for_file "$out" "$mpid"
    kids=$(pgrep -P "$mpid") # the processes (the children of mpirun), not mpirun
    # shellcheck disable=SC2086
    kill -9 $kids 2>/dev/null
    wait_bg "$mpid" 30 >/dev/null 2>&1
    st=$?
    # mpirun may exit before every process is gone; a resumed run cleans up the temporary files of
    # processes that no longer exist only
    for _ in $(seq 1 100); do
        alive=0
        for k in $kids; do kill -0 "$k" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    return "$st"
}
killed_run run.h5 fit g.h5 "${LONG[@]}" -o run.h5
killed=$?
check "SIGKILL of the processes: mpirun fails (exit $killed), the model file is there" \
    bash -c "[ $killed != 0 ] && [ -f run.h5 ]"
cp run.h5 run1.h5
mpi 2 "$NF" fit --resume run.h5 --threads 1 --quiet 2>"$T/errr2"
check "resumed with 2 processes: exit 0 ($(head -c 200 "$T/errr2"))" test $? = 0
d=$(reldiff ref.h5 run.h5)
check "resumed with 2 processes = the uninterrupted run (relative difference $d)" below "$d" 0
nfrun fit --resume run1.h5 --threads 1 --quiet 2>"$T/errr1"
check "resumed with 1 process: exit 0 ($(head -c 200 "$T/errr1"))" test $? = 0
d=$(reldiff ref.h5 run1.h5)
# In float, 800 steps of Adam amplify the rounding of a split batch sum chaotically: uninterrupted runs of
# this configuration, 1 process against 2, differed by 1e-7 to 9e-4 over 8 seeds, and a killed run resumed
# with 1 process once by 2.3e-3 (CI, 2026-12-05), while a 1 % change of --lr moves the result by 1e-2. No
# float tolerance separates a resume bug from rounding, so the double build checks it (to 1e-5).
case $v in
*"double build"*)
    check "resumed with 1 process = the uninterrupted 2-process run to rounding ($d <= $long_tol)" \
        below "$d" "$long_tol" ;;
*) skip "resumed with 1 process = the 2-process run: checked in the double build (float: $d)" ;;
esac

# the same for nf causal fit: killed in its first stage, resumed across the change of stage.  A short
# run: this fit amplifies rounding quickly (at lr 1e-2 one process and two, in the double build,
# differ by 1e-13 after 150 steps per stage and by 3e-3 after 300), so "to rounding" is checked early
CLONG=(--repr 8 --hidden 16 --grid 32 --steps 100 --batch 64 --lr 1e-2 --eval-every 50 --noise 0 --threads 1
       --checkpoint-every 5 --seed 2 --quiet)
mpi 2 "$NF" causal fit poly.h5 "${CLONG[@]}" -o cref.h5 2>"$T/errcr"
check "uninterrupted 2-process causal run" test -f cref.h5
killed_run crun.h5 causal fit poly.h5 "${CLONG[@]}" -o crun.h5
killed=$?
check "SIGKILL of the causal processes: mpirun fails (exit $killed), the model file is there" \
    bash -c "[ $killed != 0 ] && [ -f crun.h5 ]"
cp crun.h5 crun1.h5
mpi 2 "$NF" causal fit --resume crun.h5 --threads 1 --quiet 2>"$T/errcr2"
check "causal: resumed with 2 processes: exit 0 ($(head -c 200 "$T/errcr2"))" test $? = 0
d=$(reldiff cref.h5 crun.h5)
check "causal: resumed with 2 processes = the uninterrupted run (relative difference $d)" below "$d" 0
nfrun causal fit --resume crun1.h5 --threads 1 --quiet 2>"$T/errcr1"
check "causal: resumed with 1 process: exit 0 ($(head -c 200 "$T/errcr1"))" test $? = 0
d=$(reldiff cref.h5 crun1.h5)
check "causal: resumed with 1 process = the uninterrupted 2-process run to rounding ($d <= $long_tol)" \
    below "$d" "$long_tol"
check "no temporary files left behind: $(stray_tmp | tr '\n' ' ')" test -z "$(stray_tmp)"
finish
