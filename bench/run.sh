#!/usr/bin/env bash
# bench/run.sh - `make bench`: nf against its PyTorch reference (bench/ref_flows.py) on this machine.
#
# Phases (each appends JSON lines to bench/out/<phase>.jsonl; a failing piece is recorded, not fatal):
#   check    the reference computes nf's function: nf's trained parameters loaded into PyTorch give the
#            same log-densities and samples (bench_dump + ref_check.py)
#   train    optimizer steps/s of the four configurations (bench_common.h), nf at every thread count in
#            BENCH_NF_THREADS and PyTorch at every setting in BENCH_TORCH_SETTINGS; the GEMM bound
#   sample   samples/s of the same configurations
#   jacobi   43-D MAF: sequential against Jacobi inversion
#   quality  test kl_gap after the same number of steps for nf fit and the reference, NSF config
#   memory   peak resident memory of nf fit on a 1,000,000 x 8 float32 file
#   tpp      point processes: nf tpp fit against bench/tpp_torch.py, steps/s side by side (bench/tpp_speed.sh;
#            its table is printed, the JSON lines go to bench/out/tpp_speed.jsonl; the point-process
#            targets, bench/tpp_targets.sh, take hours and run separately)
# then bench/report.py writes bench/RESULTS.md and prints one line per comparison.
# Separately (not a phase: it needs PyPI's torch, zuko and nflows): bench/libs_speed.sh, nf against the
# flow libraries themselves on the same four configurations.
#
# Knobs (environment):
#   BENCH_QUICK=1               smoke run (~3-4 minutes): few steps everywhere
#   BENCH_SKIP="quality,memory" phases to skip (the report keeps what earlier runs left in bench/out)
#   BENCH_REPEATS               timed blocks per measurement, fastest kept          [5; quick 1]
#                               (sampling calls are short: twice as many)
#   BENCH_NF_THREADS            nf thread counts to try                             ["1 2"]
#   BENCH_TORCH_SETTINGS        torch settings THREADS:OPENBLAS_NUM_THREADS to try  ["1:1 2:1 1:2"]
#   BENCH_QUALITY_STEPS         steps for checkerboard and 8gaussians (the targets) [5000; quick 100]
#   BENCH_QUALITY_STEPS_OTHER   steps for the other quality sets                    [1000; quick 100]
#   BENCH_QUALITY_SETS          which sets                       [all seven; quick: checkerboard 8gaussians teacher16]
#   BENCH_QUALITY_TRAIN_N / BENCH_QUALITY_TEST_N  rows of the train and test files  [100000 / 20000]
#   BENCH_QUALITY_SEED          training seed of both sides (initial weights, batches)  [1]
#   BENCH_QUALITY_SEEDS         several training seeds, e.g. "1 2 3 4 5": every set is fitted once per
#                               seed on each side and the report compares the means over seeds, with
#                               their standard errors (one seed's fit says which batches it drew as
#                               much as which implementation is better)     [BENCH_QUALITY_SEED]
#   BENCH_MEM_STEPS             steps of the memory run                             [300; quick 30]
set -u
cd "$(dirname "$0")/.."
OUT=bench/out
BIN=$OUT/bin
mkdir -p "$BIN" "$OUT/q" "$OUT/models"
PY=/usr/bin/python3
NF=build/float/nf
QUICK=${BENCH_QUICK:-0}
SKIP=",${BENCH_SKIP:-},"
if [ "$QUICK" = 1 ]; then
    REPEATS=${BENCH_REPEATS:-1}; SCALE=5; WARM=2
    QSTEPS=${BENCH_QUALITY_STEPS:-100}; QSTEPS_OTHER=${BENCH_QUALITY_STEPS_OTHER:-100}
    QTRAIN=${BENCH_QUALITY_TRAIN_N:-20000}; QTEST=${BENCH_QUALITY_TEST_N:-5000}
    MEM_STEPS=${BENCH_MEM_STEPS:-30}; JAC_PRETRAIN=50; SAMPLE_N=1024
    QSETS_DEFAULT="checkerboard 8gaussians teacher16"
else
    REPEATS=${BENCH_REPEATS:-5}; SCALE=1; WARM=5
    QSTEPS=${BENCH_QUALITY_STEPS:-5000}; QSTEPS_OTHER=${BENCH_QUALITY_STEPS_OTHER:-1000}
    QTRAIN=${BENCH_QUALITY_TRAIN_N:-100000}; QTEST=${BENCH_QUALITY_TEST_N:-20000}
    MEM_STEPS=${BENCH_MEM_STEPS:-300}; JAC_PRETRAIN=500; SAMPLE_N=2048
    QSETS_DEFAULT="checkerboard 8gaussians rings moons crescent sinewave teacher16"
fi
NF_THREADS=${BENCH_NF_THREADS:-1 2}
TORCH_SETTINGS=${BENCH_TORCH_SETTINGS:-1:1 2:1 1:2}
QSETS=${BENCH_QUALITY_SETS:-$QSETS_DEFAULT}
QSEEDS=${BENCH_QUALITY_SEEDS:-${BENCH_QUALITY_SEED:-1}}
CONFIGS="maf realnvp nsf maf-small"
# nf's command re-executes itself with passive OpenMP waiting (apps/main.c: spinning threads are
# many times slower on busy cores); the bench programs get the same environment.  PyTorch runs under
# its own default (`env -u OMP_WAIT_POLICY` below): passive waiting halved its two-thread step rate on
# a quiet machine (bench/RESULTS.md, "nf against zuko and nflows"); its one-thread settings, and
# OpenBLAS's own threads (OPENBLAS_NUM_THREADS), do not depend on it.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# the commands go to commands.txt (setting up) and commands.PHASE.txt (each phase run), so a run that
# skips phases keeps the commands of the earlier run that made their results
CMDS=$OUT/commands.txt
ERR=$OUT/stderr.log
: > "$CMDS"
: > "$ERR"
T_START=$(date +%s)

say() { printf 'bench: %s\n' "$*" >&2; }
PHASE=""; PHASE_T=0
# skip PHASE: 0 (and start timing the phase) unless BENCH_SKIP names it
skip() {
    case "$SKIP" in *",$1,"*) return 0 ;; esac
    phase_done
    PHASE=$1; PHASE_T=$(date +%s)
    CMDS=$OUT/commands.$1.txt
    : > "$CMDS"
    return 1
}
phase_done() { [ -n "$PHASE" ] && echo "seconds_$PHASE=$(( $(date +%s) - PHASE_T ))" >> "$OUT/machine.txt"; PHASE=""; }
# run OUTFILE CMD...: log the command, append its stdout to OUTFILE, stderr to the log.
run() {
    local out=$1; shift
    printf '%s >> %s\n' "$*" "$out" >> "$CMDS"
    "$@" >> "$out" 2>> "$ERR"
}
# steps for a configuration (a repeat lasts a few seconds on this machine)
steps_for() {
    case $1 in maf) echo $((60 / SCALE)) ;; realnvp) echo $((40 / SCALE)) ;; nsf) echo $((30 / SCALE)) ;;
               maf-small) echo $((300 / SCALE)) ;; esac
}

# ---- dependencies and build ----------------------------------------------------------------------
bash scripts/deps.sh bench || { say "the PyTorch reference needs python3-torch (see above)"; exit 1; }
$PY -c 'import torch, numpy, h5py' 2>> "$ERR" || { say "$PY cannot import torch, numpy and h5py"; exit 1; }
make -s build/float/libnf.a "$NF" || { say "the library does not build"; exit 1; }
# the benchmark programs, linked by the Makefile's bench-build (the rule make check runs, so the link
# line lives in one place)
echo "make bench-build B=build/float" >> "$CMDS"
make -s bench-build B=build/float >> "$ERR" 2>&1 || { say "cannot build the benchmark programs (see $ERR)"; exit 1; }
for p in bench_train bench_sample bench_data bench_dump; do cp "build/float/bench/$p" "$BIN/$p"; done

# ---- machine --------------------------------------------------------------------------------------
{
    echo "cpu_model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
    echo "cpus=$(nproc)"
    echo "mem_gib=$(free -g | awk '/^Mem:/ {print $2}')"
    echo "openblas=$(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || dpkg-query -W -f='${Version}' libopenblas0 2>/dev/null)"
    echo "openblas_coretype=${OPENBLAS_CORETYPE:-unset}"
    echo "omp_wait_policy=$OMP_WAIT_POLICY"
    echo "gcc=$(gcc -dumpfullversion)"
    echo "torch=$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "python=$($PY -c 'import sys; print(sys.version.split()[0])')"
    echo "kernel=$(uname -r)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+changes')"
    echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
    echo "quick=$QUICK"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"

# ---- check: the reference is the same function -----------------------------------------------------
if ! skip check; then
    say "check: nf parameters in the PyTorch reference"
    : > "$OUT/check.jsonl"
    for c in $CONFIGS; do
        run /dev/null "$BIN/bench_dump" "$c" "$OUT/models/dump_$c.h5" &&
            run "$OUT/check.jsonl" env PYTHONPATH=bench $PY bench/ref_check.py "$c" "$OUT/models/dump_$c.h5" ||
            echo "{\"bench\": \"check\", \"config\": \"$c\", \"ok\": false}" >> "$OUT/check.jsonl"
    done
fi

# ---- training throughput -----------------------------------------------------------------------------
if ! skip train; then
    say "train: steps per second (nf threads: $NF_THREADS; torch threads:openblas: $TORCH_SETTINGS)"
    : > "$OUT/train.jsonl"
    for c in $CONFIGS; do
        s=$(steps_for "$c")
        for t in $NF_THREADS; do
            run "$OUT/train.jsonl" "$BIN/bench_train" "$c" --steps "$s" --warmup "$WARM" --repeats "$REPEATS" --threads "$t" ||
                say "nf train $c threads $t failed"
        done
        for st in $TORCH_SETTINGS; do
            run "$OUT/train.jsonl" env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS="${st#*:}" $PY bench/ref_bench.py train "$c" \
                --steps "$s" --warmup "$WARM" --repeats "$REPEATS" --threads "${st%%:*}" || say "torch train $c $st failed"
        done
    done
fi

# ---- sampling ------------------------------------------------------------------------------------------
if ! skip sample; then
    say "sample: samples per second"
    : > "$OUT/sample.jsonl"
    for c in $CONFIGS; do
        for t in $NF_THREADS; do
            run "$OUT/sample.jsonl" "$BIN/bench_sample" "$c" --n "$SAMPLE_N" --repeats $((2 * REPEATS)) --threads "$t" \
                --pretrain $((200 / SCALE)) || say "nf sample $c failed"
        done
        for st in $TORCH_SETTINGS; do
            run "$OUT/sample.jsonl" env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS="${st#*:}" $PY bench/ref_bench.py sample "$c" \
                --n "$SAMPLE_N" --repeats $((2 * REPEATS)) --threads "${st%%:*}" || say "torch sample $c failed"
        done
    done
fi

# ---- Jacobi against sequential, 43-D MAF ----------------------------------------------------------------
if ! skip jacobi; then
    say "jacobi: 43-D MAF, sequential against Jacobi inversion"
    : > "$OUT/jacobi.jsonl"
    for t in $NF_THREADS; do
        run "$OUT/jacobi.jsonl" "$BIN/bench_sample" jacobi --dim 43 --n 1000 --repeats "$REPEATS" --threads "$t" \
            --pretrain "$JAC_PRETRAIN" || say "nf jacobi failed"
    done
    for st in $TORCH_SETTINGS; do
        run "$OUT/jacobi.jsonl" env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS="${st#*:}" $PY bench/ref_bench.py sample maf --dim 43 \
            --n 1000 --repeats "$REPEATS" --threads "${st%%:*}" || say "torch 43-D sample failed"
    done
fi

# ---- quality at a fixed budget ---------------------------------------------------------------------------
# One job per (set, implementation), two at a time (nf and PyTorch on one thread each); the step
# count is what is compared, so running side by side changes nothing but the wall time.
quality_nf() {  # SET STEPS TRAIN TEST SEED
    local name=$1 steps=$2 seed=$5 model=$OUT/models/q_$1_$5.h5 logp=$OUT/q/$1_$5.nf_logp.h5 ev
    rm -f "$model" # a fresh fit (nf fit refuses to replace a model without --force)
    if ! run /dev/null "$NF" fit "$3" -o "$model" --flow nsf-coupling --layers 10 --bins 8 --tail 5 --hidden 128 \
        --blocks 2 --steps "$steps" --batch 512 --lr 1e-3 --optimizer adam --schedule cosine --clip 5 --val-frac 0 \
        --checkpoint-every 0 --seed "$seed" --threads 1 --quiet; then
        echo "{\"impl\": \"nf\", \"bench\": \"quality\", \"name\": \"$name\", \"steps\": $steps, \"seed\": $seed, \"error\": \"nf fit failed\"}"
        return
    fi
    printf '%s\n' "$NF eval $model $4 --json" >> "$CMDS"
    if ev=$("$NF" eval "$model" "$4" --json 2>> "$ERR"); then
        # the gap's standard error from the per-point log-densities (nf eval prints it, but not in --json)
        rm -f "$logp"
        run /dev/null "$NF" logprob "$model" "$4" -o "$logp"
        echo "$ev" | $PY -c "
import json, sys, math, h5py
d = json.loads(sys.stdin.read())
d.update(impl='nf', bench='quality', name='$name', steps=$steps, seed=$seed)
try:
    lp = h5py.File('$logp', 'r')['logp'][...].astype('float64')
    lt = h5py.File('$4', 'r')['logp_true'][...].astype('float64')
    g = lt - lp
    d['kl_gap_stderr'] = float(g.std(ddof=1) / math.sqrt(g.size))
except Exception as e:
    d['kl_gap_stderr_error'] = str(e)
print(json.dumps(d))"
    else
        echo "{\"impl\": \"nf\", \"bench\": \"quality\", \"name\": \"$name\", \"steps\": $steps, \"seed\": $seed, \"error\": \"nf eval failed\"}"
    fi
}
quality_ref() {  # SET STEPS TRAIN TEST SEED
    run /dev/stdout env OPENBLAS_NUM_THREADS=1 $PY bench/ref_bench.py fit --train "$3" --test "$4" --steps "$2" \
        --batch 512 --threads 1 --seed "$5" --name "$1" ||
        echo "{\"impl\": \"torch\", \"bench\": \"quality\", \"name\": \"$1\", \"steps\": $2, \"seed\": $5, \"error\": \"reference fit failed\"}"
}
make_data() {  # NAME N SEED OUT [--dim D]: nf data make, or bench_data where the command is missing
    local name=$1 n=$2 seed=$3 out=$4; shift 4
    if run /dev/null "$NF" data make "$name" -n "$n" --seed "$seed" "$@" -o "$out"; then return 0; fi
    say "nf data make $name unavailable; writing it with bench/bench_data"
    run /dev/null "$BIN/bench_data" "$name" "$n" "$seed" "$out" "$@"
}
if ! skip quality; then
    say "quality: sets $QSETS, $QSTEPS / $QSTEPS_OTHER steps, seeds $QSEEDS"
    : > "$OUT/quality.jsonl"
    jobs_file=$OUT/q/jobs
    : > "$jobs_file"
    rm -f "$OUT"/q/*.nf.json "$OUT"/q/*.ref.json "$OUT"/q/*.nf_logp.h5
    for s in $QSETS; do
        ds=$s; extra=()
        [ "$s" = teacher16 ] && { ds=teacher; extra=(--dim 16); }
        tr=$OUT/q/$s.train.h5; te=$OUT/q/$s.test.h5
        rm -f "$tr" "$te"
        if ! { make_data "$ds" "$QTRAIN" 1 "$tr" "${extra[@]}" && make_data "$ds" "$QTEST" 2 "$te" "${extra[@]}"; }; then
            echo "{\"bench\": \"quality\", \"name\": \"$s\", \"error\": \"no data\"}" >> "$OUT/quality.jsonl"
            continue
        fi
        steps=$QSTEPS_OTHER
        case $s in checkerboard|8gaussians) steps=$QSTEPS ;; esac
        for seed in $QSEEDS; do
            echo "ref $s $steps $tr $te $seed" >> "$jobs_file"
            echo "nf $s $steps $tr $te $seed" >> "$jobs_file"
        done
    done
    # longest first (the reference is the slower one), two at a time
    while read -r impl s steps tr te seed; do
        while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
        if [ "$impl" = nf ]; then quality_nf "$s" "$steps" "$tr" "$te" "$seed" > "$OUT/q/${s}_$seed.nf.json" &
        else quality_ref "$s" "$steps" "$tr" "$te" "$seed" > "$OUT/q/${s}_$seed.ref.json" & fi
    done < <(sort -s -k3,3nr -k1,1r "$jobs_file")
    wait
    for s in $QSETS; do
        for seed in $QSEEDS; do
            cat "$OUT/q/${s}_$seed.nf.json" "$OUT/q/${s}_$seed.ref.json" 2>/dev/null >> "$OUT/quality.jsonl"
        done
    done
fi

# ---- memory of nf fit -------------------------------------------------------------------------------------
if ! skip memory; then
    say "memory: nf fit on 1,000,000 x 8"
    : > "$OUT/memory.jsonl"
    big=$OUT/q/big.h5
    if [ ! -f "$big" ]; then
        printf '%s\n' "$PY (h5py) -> $big: 1,000,000 x 8 float32, a 4-component Gaussian mixture" >> "$CMDS"
        $PY - "$big" <<'EOF' 2>> "$ERR"
import sys, h5py, numpy as np
r = np.random.default_rng(1)
k = r.integers(0, 4, 1000000)
x = (r.normal(size=(4, 8)) * 3)[k] + r.normal(size=(1000000, 8)) * r.uniform(0.5, 1.5, size=(4, 8))[k]
with h5py.File(sys.argv[1] + ".tmp", "w") as f:
    f["x"] = x.astype(np.float32)
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
EOF
    fi
    tv=$OUT/q/mem_time.txt
    rm -f "$OUT/models/big.h5" # a fresh fit (nf fit refuses to replace a model without --force)
    printf '%s\n' "/usr/bin/time -v $NF fit $big -o $OUT/models/big.h5 --flow maf --steps $MEM_STEPS --threads 2 --quiet" >> "$CMDS"
    if /usr/bin/time -v "$NF" fit "$big" -o "$OUT/models/big.h5" --flow maf --steps "$MEM_STEPS" --threads 2 --quiet \
        2> "$tv"; then
        rss=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$tv")
        wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): *//p' "$tv")
        echo "{\"impl\": \"nf\", \"bench\": \"memory\", \"rows\": 1000000, \"cols\": 8, \"steps\": $MEM_STEPS," \
             "\"data_bytes\": 32000000, \"file_bytes\": $(stat -c %s "$big"), \"max_rss_kb\": $rss, \"wall\": \"$wall\"}" \
             >> "$OUT/memory.jsonl"
    else
        cat "$tv" >> "$ERR"
        echo "{\"impl\": \"nf\", \"bench\": \"memory\", \"error\": \"nf fit failed: $(grep -m1 '^nf' "$tv" | tr -d '"')\"}" >> "$OUT/memory.jsonl"
    fi
fi

# ---- point processes: training steps/s against the PyTorch reference ------------------------------------
if ! skip tpp; then
    say "tpp: nf tpp fit against bench/tpp_torch.py (threads: $NF_THREADS)"
    tpp_env="NF=$NF TPP_THREADS=\"$NF_THREADS\" TPP_ROUNDS=$(( QUICK ? 1 : 3 )) TPP_STEPS=$(( QUICK ? 2 : 8 ))"
    printf '%s\n' "$tpp_env bash bench/tpp_speed.sh" >> "$CMDS"
    NF=$NF TPP_THREADS="$NF_THREADS" TPP_ROUNDS=$(( QUICK ? 1 : 3 )) TPP_STEPS=$(( QUICK ? 2 : 8 )) \
        TPP_OUT="$OUT/tpp_speed.jsonl" bash bench/tpp_speed.sh 2>> "$ERR" | tee "$OUT/tpp_speed.txt" >&2 ||
        say "tpp speed failed (see $ERR)"
fi

phase_done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
echo "wall_seconds=$(( $(date +%s) - T_START ))" >> "$OUT/machine.txt"
echo "skipped=${BENCH_SKIP:-}" >> "$OUT/machine.txt"
$PY bench/report.py "$OUT" bench/RESULTS.md
