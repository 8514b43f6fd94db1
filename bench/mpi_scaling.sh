#!/usr/bin/env bash
# bench/mpi_scaling.sh - data-parallel nf fit on this machine (issue 15): optimizer steps per second
# of 2 processes x 1 thread (mpirun) against 1 process x 2 threads and 1 process x 1 thread, the same
# fit (MAF, batch 512) alternated REPEATS times, and the all-reduce time per step for the model's
# parameter count (bench/mpi_allreduce.c).  Appends JSON lines to bench/out/mpi.jsonl and prints a
# table; bench/RESULTS.md records a run and docs/MPI.md the scaling estimate built on it.
# Usage: bench/mpi_scaling.sh [REPEATS]   (build first: make)
set -u
cd "$(dirname "$0")/.."
REPEATS=${1:-3}
NF=$PWD/build/float/nf
OUT=$PWD/bench/out
PY=/usr/bin/python3
mkdir -p "$OUT/bin" "$OUT/mpi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
command -v mpirun >/dev/null && [[ $("$NF" --version) != *"MPI: none"* ]] || {
    echo "bench/mpi_scaling.sh: needs nf built with MPI and mpirun (make MPI=1)" >&2; exit 1; }
mpicc -O2 -o "$OUT/bin/mpi_allreduce" bench/mpi_allreduce.c || exit 1
cd "$OUT/mpi" || exit 1
[ -f g8.h5 ] || "$NF" data make gmm --dim 8 -n 200000 --seed 1 -o g8.h5 >/dev/null
FIT=(--flow maf --layers 5 --hidden 128 --steps 400 --batch 512 --eval-every 0 --val-frac 0 --checkpoint-every 0
     --seed 3 --quiet --force)
rate() { $PY -c "import h5py; c = h5py.File('$1')['/training/checkpoint']; print(c.attrs['step'] / c.attrs['seconds'])"; }
declare -A sum
for r in $(seq 1 "$REPEATS"); do
    "$NF" fit g8.h5 "${FIT[@]}" --threads 1 -o p1t1.h5
    sum[p1t1]+=" $(rate p1t1.h5)"
    "$NF" fit g8.h5 "${FIT[@]}" --threads 2 -o p1t2.h5
    sum[p1t2]+=" $(rate p1t2.h5)"
    mpirun --oversubscribe -np 2 "$NF" fit g8.h5 "${FIT[@]}" --threads 1 -o p2t1.h5
    sum[p2t1]+=" $(rate p2t1.h5)"
done
P=$($PY -c "import h5py; print(h5py.File('p2t1.h5')['/model/params/value'].shape[0])")
ar=$(mpirun --oversubscribe -np 2 "$OUT/bin/mpi_allreduce" "$P" 200)
med() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
a=$(med <<<"${sum[p1t1]}"); b=$(med <<<"${sum[p1t2]}"); c=$(med <<<"${sum[p2t1]}")
load=$(cut -d' ' -f1-3 /proc/loadavg)
line="{\"date\": \"$(date -u +%F)\", \"params\": $P, \"steps_per_s\": {\"1x1\": $a, \"1x2\": $b, \"2x1\": $c}, \"allreduce\": $ar, \"load\": \"$load\"}"
echo "$line" >>"$OUT/mpi.jsonl"
printf '%-32s %10s\n' "configuration (median of $REPEATS)" "steps/s"
printf '%-32s %10.1f\n' "1 process x 1 thread" "$a" "1 process x 2 threads" "$b" "2 processes x 1 thread (mpirun)" "$c"
echo "2x1 / 1x2 = $(awk -v x="$c" -v y="$b" 'BEGIN {printf "%.2f", x / y}'); all-reduce of $P floats: $ar"
echo "load average during the run: $load"
