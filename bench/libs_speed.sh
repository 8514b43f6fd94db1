#!/usr/bin/env bash
# bench/libs_speed.sh - nf against the flow libraries PyTorch users run (zuko, nflows), side by side:
# the four benchmark configurations (bench/bench_common.h), training steps per second and sampling.
#
#   bash bench/libs_speed.sh
#
# Environment: LIBS_PY (the python3 with torch, zuko and nflows: `pip install torch zuko nflows`;
# default python3), LIBS_CONFIGS ("maf realnvp nsf maf-small"), LIBS_THREADS ("1 2"), LIBS_ROUNDS (3),
# LIBS_SAMPLE (1: also samples per second), LIBS_OUT (the JSON lines, bench/out/libs_speed.jsonl),
# BIN (where bench_train and bench_sample are: build/float/bench, built by `make bench-build`).
#
# nf: bench_train (forward + backward + Adam, the fastest of 3 blocks) and bench_sample (after 200
# training steps); zuko and nflows: bench/libs_bench.py, the same protocol.  nf trains on a Gaussian
# mixture of the config's dimension, the libraries on standard normal draws (the same shapes and
# arithmetic; the draws only move the splines' share of points in their tails).  The machine is
# shared and noisy: the rounds rotate which side goes first, and the summary gives each side's median
# over rounds and nf's ratio to each library at the same thread count and best against best;
# the libraries' two-thread figures are the better of two OpenMP wait policies (below).
set -u
cd "$(dirname "$0")/.."
PY=${LIBS_PY:-python3}
CONFIGS=${LIBS_CONFIGS:-maf realnvp nsf maf-small}
THREADS=${LIBS_THREADS:-1 2}
ROUNDS=${LIBS_ROUNDS:-3}
SAMPLE=${LIBS_SAMPLE:-1}
OUTF=${LIBS_OUT:-bench/out/libs_speed.jsonl}
BIN=${BIN:-build/float/bench}
# OpenMP's wait policy: nf's programs run passive (what nf sets for itself, apps/main.c; nf's thread
# pool is as fast either way on a quiet machine).  PyTorch's OpenMP threads are not: on a quiet machine
# nflows' MAF and RealNVP steps ran at two threads under PASSIVE at about 0.6 of their one-thread rate,
# under PyTorch's default (spin, then sleep) at 1.2-1.5x it.  So the libraries run under their default,
# and at more than one thread under PASSIVE as well (which a busy machine favours); each round keeps
# their better figure.
export OMP_WAIT_POLICY=PASSIVE
mkdir -p "$(dirname "$OUTF")"
: > "$OUTF"

$PY -c 'import torch, zuko, nflows' 2> /dev/null ||
    { echo "libs_speed: $PY cannot import torch, zuko and nflows (pip install torch zuko nflows; or set LIBS_PY)" >&2; exit 1; }
[ -x "$BIN/bench_train" ] && [ -x "$BIN/bench_sample" ] ||
    { echo "libs_speed: no $BIN/bench_train or bench_sample (make bench-build)" >&2; exit 1; }

steps_for() { case $1 in maf) echo 60 ;; realnvp) echo 40 ;; nsf) echo 30 ;; maf-small) echo 300 ;; esac; }
tag() {  # ROUND POLICY: adds the round and the OpenMP wait policy to each JSON line
    $PY -c "import json, sys
for l in sys.stdin:
    if l.strip(): d = json.loads(l); d['round'] = $1; d['wait_policy'] = '$2'; print(json.dumps(d))"
}
lib() {  # POLICY LIB CONFIG THREADS ROUND STEPS: the library under one OpenMP wait policy
    local envp=(env -u OMP_WAIT_POLICY)
    [ "$1" = passive ] && envp=(env OMP_WAIT_POLICY=PASSIVE)
    "${envp[@]}" $PY bench/libs_bench.py train "$2" "$3" --steps "$6" --warmup 5 --repeats 3 --threads "$4" | tag "$5" "$1"
    [ "$SAMPLE" = 1 ] && "${envp[@]}" $PY bench/libs_bench.py sample "$2" "$3" --n 2048 --repeats 6 --threads "$4" \
        --pretrain 200 | tag "$5" "$1"
    return 0
}
one() {  # IMPL CONFIG THREADS ROUND
    local s; s=$(steps_for "$2")
    case $1 in
    nf) "$BIN/bench_train" "$2" --steps "$s" --warmup 5 --repeats 3 --threads "$3" 2> /dev/null | tag "$4" passive
        [ "$SAMPLE" = 1 ] && "$BIN/bench_sample" "$2" --n 2048 --repeats 6 --threads "$3" --pretrain 200 2> /dev/null |
            tag "$4" passive ;;
    *) lib default "$1" "$2" "$3" "$4" "$s"
        [ "$3" -gt 1 ] && lib passive "$1" "$2" "$3" "$4" "$s" ;;
    esac
    return 0
}

echo "libs_speed: $($PY -c 'import importlib.metadata as m; print("torch", m.version("torch"), "zuko", m.version("zuko"), "nflows", m.version("nflows"))'); configs: $CONFIGS; threads: $THREADS; $ROUNDS rounds" >&2
echo "libs_speed: load average at start $(cut -d' ' -f1-3 /proc/loadavg)" >&2
ORDERS=("nf zuko nflows" "zuko nflows nf" "nflows nf zuko")
for r in $(seq 1 "$ROUNDS"); do
    for c in $CONFIGS; do
        for t in $THREADS; do
            for impl in ${ORDERS[$(((r - 1) % 3))]}; do
                one "$impl" "$c" "$t" "$r" >> "$OUTF" || echo "libs_speed: $impl $c threads $t failed" >&2
            done
        done
    done
    echo "libs_speed: round $r done" >&2
done
echo "libs_speed: load average at end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

$PY - "$OUTF" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(bench, impl, config, threads, key, method=None):
    """Median over rounds of the round's best over wait policies (nf: its default inversion)."""
    by_round = {}
    for r in rows:
        if (r["bench"] == bench and r["impl"] == impl and r["config"] == config and r["threads"] == threads
                and (method is None or r.get("method", method) == method)):
            by_round[r["round"]] = max(by_round.get(r["round"], 0), r[key])
    return statistics.median(by_round.values()) if by_round else None
configs = list(dict.fromkeys(r["config"] for r in rows))
threads = sorted({r["threads"] for r in rows})
params = {(r["impl"], r["config"]): r.get("params") for r in rows if r.get("params")}
for bench, key, unit in (("train", "steps_per_sec", "steps/s"), ("sample", "samples_per_sec", "samples/s")):
    if not any(r["bench"] == bench for r in rows):
        continue
    print(f"\n{bench}: {unit}, median over rounds (nf / zuko / nflows), nf's ratio to each\n")
    print("| config | threads | nf | zuko | nflows | nf / zuko | nf / nflows |")
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        best = {}
        for t in threads:
            v = {i: med(bench, i, c, t, key, "auto" if i == "nf" else None) for i in ("nf", "zuko", "nflows")}
            for i, x in v.items():
                if x is not None: best[i] = max(best.get(i, 0), x)
            f = lambda x: "-" if x is None else f"{x:,.1f}"
            q = lambda a, b: "-" if a is None or b is None else f"**{a / b:.2f}x**"
            print(f"| {c} | {t} | {f(v['nf'])} | {f(v['zuko'])} | {f(v['nflows'])} | {q(v['nf'], v['zuko'])} | {q(v['nf'], v['nflows'])} |")
        if len(best) == 3:
            print(f"| {c} | best | {best['nf']:,.1f} | {best['zuko']:,.1f} | {best['nflows']:,.1f} | "
                  f"**{best['nf'] / best['zuko']:.2f}x** | **{best['nf'] / best['nflows']:.2f}x** |")
print("\nparameters: " + "; ".join(f"{c}: nf {params.get(('nf', c), '?')}, zuko {params.get(('zuko', c), '?')}, "
                                     f"nflows {params.get(('nflows', c), '?')}" for c in configs))
EOF
