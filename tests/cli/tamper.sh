#!/usr/bin/env bash
# tests/cli/tamper.sh - every numeric attribute of nf's files misstated.  A small model of each kind
# (density, dependent, point process, causal, image, video) and the data it was fit on are written by
# nf; then, one attribute at a time (a model's configuration, its data and training records; a data
# file's shape, levels, kinship), set to NaN, -1, 0 or 2^40 through HDF5 (so only nf's own checks can
# catch it), the commands that read the file must work or exit 1 with one line naming the problem: no
# crash, no hang, no usage error, nothing else on stderr.  For a model: nf info, its evaluation and
# sampling; for data: nf info, evaluation by a model and one step of a fit.  (What the training
# records mean to --resume: tests/cli/hardening.sh.)
#
# NF_TAMPER_VALUES sets the values (default "nan -1 0 1099511627776").
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

if ! build_mkbad; then
    fail "build the test helper tests/cli/mkbad.c"
    finish
fi
M=$MKBAD
VALUES=${NF_TAMPER_VALUES:-"nan -1 0 1099511627776"}
nvalues=$(echo "$VALUES" | wc -w)

# ---- one small model of each kind, and the data its commands read ----------------------------------
mk() { # mk WHAT COMMAND...: run an nf command that makes an input, failing the script if it does not
    local what=$1
    shift
    if ! nfrun "$@" >/dev/null 2>"$T/err"; then
        fail "make $what: nf $*: $(head -c 200 "$T/err")"
        finish
    fi
}
mk "density data" data make moons -n 200 --seed 1 -o moons.h5
mk "density model" fit moons.h5 --flow "2*(affine-coupling(hidden=8), permute(order=reverse))" --steps 3 \
    --threads 1 --quiet -o density.h5
mk "dependent data" data make dependent-crescent --structure equi -n 200 --seed 3 -o dep.h5
mk "dependent model" fit dep.h5 --dependence equi --flow "2*(affine-coupling(hidden=8), permute(order=reverse))" \
    --steps 3 --val-frac 0 --threads 1 --quiet -o dependent.h5
mk "kinship data" data make dependent-crescent --structure kinship -n 200 --seed 3 -o kin.h5
mk "event sequences" data make tpp-poisson --rate 3 -n 8 --t-end 10 --seed 3 -o seq.h5
mk "point-process model" tpp fit seq.h5 --hidden 8 --batch 4 --steps 3 --threads 1 --quiet -o tpp.h5
mk "causal data" data make causal-poly --shift 2 -n 100 --seed 3 -o poly.h5
mk "causal model" causal fit poly.h5 --repr 4 --hidden 8 --grid 32 --steps 2 --threads 1 --quiet -o causal.h5
mk "images" data make digits -o digits.h5
mk "image model (glow)" image fit digits.h5 --scales 1 --depth 1 --hidden 8 --batch 16 --steps 2 --val-frac 0 \
    --threads 1 --quiet -o glow.h5
mk "image model (tarflow)" image fit digits.h5 --arch tarflow --conditional --patch 2 --width 8 --heads 2 --layers 1 \
    --blocks 1 --batch 16 --steps 2 --val-frac 0 --threads 1 --quiet -o tarflow.h5
mk "videos" data make video-balls -n 16 --frames 4 --size 16 --seed 2 -o balls.h5
mk "video model" video fit balls.h5 --block 4 --keep 2 --local-blocks 1 --global-layers 1 --width 8 --heads 2 \
    --batch 8 --steps 2 --val-frac 0 --threads 1 --quiet -o video.h5

# run_use USE FILE: one command line of USES ("@" standing for FILE) with the outputs cleared; its
# arguments in ARGS, its exit status returned, its stderr in $T/err.
run_use() {
    # shellcheck disable=SC2206
    ARGS=(${1//@/$2})
    rm -f s.h5 s.png s.gif f.h5
    NF_CLI_TIMEOUT=60 nfrun "${ARGS[@]}" >/dev/null 2>"$T/err" </dev/null
}

# tamper WHAT FILE USES: the commands USES ("|" between them) work on FILE; then, on a copy of FILE
# with one numeric attribute misstated, each works or exits 1 with one line (in a model file, the
# data and training records only with info, which alone reads them besides --resume: hardening.sh).
checked=0
tamper() {
    local what=$1 file=$2 uses obj name v use rc why bad=0 nattr
    IFS='|' read -ra uses <<<"$3"
    for use in "${uses[@]}"; do
        run_use "$use" "$file" || fail "$what: nf ${ARGS[*]} on the undamaged file: $(head -c 300 "$T/err" | tr '\n' '|')"
    done
    "$M" numattrs "$file" >"$T/attrs" || { fail "$what: list the settings of $file"; return; }
    nattr=$(wc -l <"$T/attrs")
    while read -r obj name; do
        for v in $VALUES; do
            cp "$file" t.h5
            if [ "$v" = nan ]; then "$M" setnum t.h5 "$obj" "$name" nan; else "$M" setint t.h5 "$obj" "$name" "$v"; fi ||
                { fail "$what: set $obj $name to $v"; bad=$((bad + 1)); continue; }
            for use in "${uses[@]}"; do
                case $obj in /data* | /training*) [ "${use%% *}" = info ] || continue ;; esac
                run_use "$use" t.h5
                rc=$?
                checked=$((checked + 1))
                why=""
                if [ "$rc" = 1 ]; then
                    [ "$(wc -l <"$T/err")" = 1 ] || why="$(wc -l <"$T/err") lines on stderr"
                    case $(head -c 3 "$T/err") in "nf ") ;; *) why="$why; stderr does not start with 'nf '" ;; esac
                elif [ "$rc" != 0 ]; then
                    why="exit $rc"
                fi
                if [ -n "$why" ]; then
                    fail "$what: $obj $name = $v: nf ${ARGS[*]}: $why: $(head -c 300 "$T/err" | tr '\n' '|')"
                    bad=$((bad + 1))
                fi
            done
        done
    done <"$T/attrs"
    [ "$bad" = 0 ] && pass "$what: $nattr numeric attributes, each misstated $nvalues ways: every command works or gives one line"
}

# the models: info, evaluation and sampling ("@": the damaged copy)
tamper "density model" density.h5 "info @|eval @ moons.h5|sample @ -n 5 -o s.h5"
tamper "dependent model" dependent.h5 "info @|eval @ dep.h5|sample @ -n 5 -o s.h5"
tamper "point-process model" tpp.h5 "info @|tpp eval @ seq.h5|tpp sample @ -n 2 --t-end 5 -o s.h5"
tamper "causal model" causal.h5 "info @|causal eval @ poly.h5|causal sample @ --arm 1 -n 5 -o s.h5"
tamper "image model (glow)" glow.h5 "info @|image eval @ digits.h5|image sample @ -n 2 -o s.png"
tamper "image model (tarflow)" tarflow.h5 "info @|image eval @ digits.h5|image sample @ -n 2 --class 1 -o s.png"
tamper "video model" video.h5 "info @|video eval @ balls.h5|video sample @ -n 2 -o s.gif"
# the data: info, evaluation by a model and one step of a fit
ONE=(--steps 1 --val-frac 0 --threads 1 --quiet -o f.h5)
tamper "density data" moons.h5 "info @|eval density.h5 @|fit @ ${ONE[*]}"
tamper "dependent data" dep.h5 "info @|eval dependent.h5 @|fit @ --dependence equi ${ONE[*]}"
tamper "kinship data" kin.h5 "info @|fit @ --dependence kinship --kinship @ ${ONE[*]}"
tamper "event sequences" seq.h5 "info @|tpp eval tpp.h5 @|tpp fit @ --hidden 8 --batch 4 ${ONE[*]}"
tamper "causal data" poly.h5 "info @|causal eval causal.h5 @|causal fit @ --repr 4 --hidden 8 --grid 32 ${ONE[*]}"
tamper "images" digits.h5 "info @|image eval glow.h5 @|image fit @ --scales 1 --depth 1 --hidden 8 ${ONE[*]}"
tamper "videos" balls.h5 "info @|video eval video.h5 @|video fit @ --block 4 --keep 2 --width 8 --heads 2 ${ONE[*]}"
check "$checked commands on damaged files ran" test "$checked" -gt 300
check "no temporary files left behind: $(stray_tmp | head -3 | tr '\n' ' ')" test -z "$(stray_tmp)"
finish
