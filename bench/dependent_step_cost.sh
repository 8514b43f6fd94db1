#!/usr/bin/env bash
# bench/dependent_step_cost.sh - what one training step of nf fit --dependence costs against an i.i.d.
# step of the same flow and batch, with the one-off work of the structure taken out: each
# configuration is fit for S1 and S2 steps (no early stopping, no validation), and the cost of a step
# is (seconds(S2) - seconds(S1)) / (S2 - S1) on the trainer's own clock, so the kinship precision
# build at the first step and the eigendecomposition before training cancel; the rebuilds of a
# learned lambda are reported separately (each new lambda costs one).
#
#   bash bench/dependent_step_cost.sh   (NF: build/float/nf; N_EQUI 10000, N_KIN 5000; S1 500, S2 2500;
#                                        FLOW: "--flow realnvp --layers 6 --hidden 64 --batch 256
#                                        --lr 2e-3 --threads 1"; SETS: "eq kin kinped", which data sets:
#                                        equi, kinship with families (nf data make's default), kinship
#                                        with pedigrees (one component: the whole n x n precision))
set -u
cd "$(dirname "$0")/.." || exit 1
NF=${NF:-build/float/nf}
PY=/usr/bin/python3
N_EQUI=${N_EQUI:-10000}
N_KIN=${N_KIN:-5000}
S1=${S1:-500}
S2=${S2:-2500}
SETS=${SETS:-eq kin kinped}
FLOW=${FLOW:---flow realnvp --layers 6 --hidden 64 --batch 256 --lr 2e-3 --threads 1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if ! $PY -c 'import h5py' 2>/dev/null; then
    echo "$(basename "$0"): $PY cannot import h5py (install it: bash scripts/deps.sh bench)" >&2
    exit 1
fi
"$NF" data make dependent-crescent --structure equi -n "$N_EQUI" --seed 1 -o "$TMP/eq.h5" 2>/dev/null || exit 1
"$NF" data make dependent-crescent --structure kinship -n "$N_KIN" --seed 1 -o "$TMP/kin.h5" 2>/dev/null || exit 1
"$NF" data make dependent-crescent --structure kinship --relatives pedigree -n "$N_KIN" --seed 1 -o "$TMP/kinped.h5" \
    2>/dev/null || exit 1

seconds() { # training seconds of a model file (the last history entry)
    $PY -c "import h5py,sys; print(float(h5py.File(sys.argv[1],'r')['/training/checkpoint/history/seconds'][-1]))" "$1"
}
# per_step DATA ARGS...: seconds per step between S1 and S2 steps
per_step() {
    local data=$1 a b
    shift
    # shellcheck disable=SC2086
    "$NF" fit "$data" "$@" $FLOW --val-frac 0 --patience 0 --checkpoint-every 0 --steps "$S1" --quiet --force \
        -o "$TMP/a.h5" 2>"$TMP/err" || { echo "fit failed: $(tail -1 "$TMP/err")" >&2; exit 1; }
    # shellcheck disable=SC2086
    "$NF" fit "$data" "$@" $FLOW --val-frac 0 --patience 0 --checkpoint-every 0 --steps "$S2" --quiet --force \
        -o "$TMP/b.h5" 2>"$TMP/err" || { echo "fit failed: $(tail -1 "$TMP/err")" >&2; exit 1; }
    a=$(seconds "$TMP/a.h5")
    b=$(seconds "$TMP/b.h5")
    $PY -c "print(($b - $a) / ($S2 - $S1))"
}
echo "| data | fit | ms per step | against i.i.d. |"
echo "|---|---|---|---|"
for data in $SETS; do
    iid=$(per_step "$TMP/$data.h5")
    echo "| $data | i.i.d. | $($PY -c "print('%.3f' % (1e3 * $iid))") | 1 |"
    if [ $data = eq ]; then
        set -- "--dependence equi --per-block-rho" "--dependence equi --per-block-rho --update-every 0"
    else
        set -- "--dependence kinship --kinship $TMP/$data.h5" "--dependence kinship --kinship $TMP/$data.h5 --learn-lambda"
    fi
    for args in "$@"; do
        # shellcheck disable=SC2086
        dep=$(per_step "$TMP/$data.h5" $args)
        label=${args//$TMP\//}
        echo "| $data | $label | $($PY -c "print('%.3f' % (1e3 * $dep))") | $($PY -c "print('%.2fx' % ($dep / $iid))") |"
    done
done
