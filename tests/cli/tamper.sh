#!/usr/bin/env bash
# tests/cli/tamper.sh - every numeric setting a model file of each kind holds, misstated: a small
# model of each kind (density, dependent, point process, causal, image, video) is written by its fit;
# then, one attribute at a time (the model's configuration, its data and training records; the
# values NaN, -1, 0 and 2^40, written through HDF5 so only nf's own checks can catch them), `nf
# info` and, for the model's own settings, the kind's evaluation and sampling commands on the damaged copy must either
# work or exit 1 with one line naming the problem: no crash, no hang, no usage error, nothing on
# stderr but that line.  (tests/cli/hardening.sh checks what the training records mean to --resume.)
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

# The commands run on a damaged copy of each model, "@" standing for its path.
declare -A USES
USES[density]="info @|eval @ moons.h5|sample @ -n 5 -o s.h5"
USES[dependent]="info @|eval @ dep.h5|sample @ -n 5 -o s.h5"
USES[tpp]="info @|tpp eval @ seq.h5|tpp sample @ -n 2 --t-end 5 -o s.h5"
USES[causal]="info @|causal eval @ poly.h5|causal sample @ --arm 1 -n 5 -o s.h5"
USES[glow]="info @|image eval @ digits.h5|image sample @ -n 2 -o s.png"
USES[tarflow]="info @|image eval @ digits.h5|image sample @ -n 2 --class 1 -o s.png"
USES[video]="info @|video eval @ balls.h5|video sample @ -n 2 -o s.gif"

checked=0
for kind in density dependent tpp causal glow tarflow video; do
    IFS='|' read -ra uses <<<"${USES[$kind]}"
    for use in "${uses[@]}"; do # the undamaged model: every command works
        # shellcheck disable=SC2206
        args=(${use//@/$kind.h5})
        rm -f s.h5 s.png s.gif
        NF_CLI_TIMEOUT=60 nfrun "${args[@]}" >/dev/null 2>"$T/err" </dev/null ||
            fail "$kind: nf ${args[*]} on the undamaged model: $(head -c 300 "$T/err" | tr '\n' '|')"
    done
    "$M" numattrs "$kind.h5" >"$T/attrs" || { fail "list the settings of $kind.h5"; continue; }
    nattr=$(wc -l <"$T/attrs")
    bad=0
    while read -r obj name; do
        for v in $VALUES; do
            cp "$kind.h5" t.h5
            if [ "$v" = nan ]; then "$M" setnum t.h5 "$obj" "$name" nan; else "$M" setint t.h5 "$obj" "$name" "$v"; fi ||
                { fail "$kind: set $obj $name to $v"; bad=$((bad + 1)); continue; }
            for use in "${uses[@]}"; do
                # the data and training records are read by info (and --resume: hardening.sh) only
                case $obj in /model*) ;; *) [ "${use%% *}" = info ] || continue ;; esac
                # shellcheck disable=SC2206
                args=(${use//@/t.h5})
                rm -f s.h5 s.png s.gif
                NF_CLI_TIMEOUT=60 nfrun "${args[@]}" >/dev/null 2>"$T/err" </dev/null
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
                    fail "$kind: $obj $name = $v: nf ${args[*]}: $why: $(head -c 300 "$T/err" | tr '\n' '|')"
                    bad=$((bad + 1))
                fi
            done
        done
    done <"$T/attrs"
    [ "$bad" = 0 ] && pass "$kind: $nattr settings, each misstated $nvalues ways: info, evaluation and sampling work or give one line"
done
check "$checked commands on damaged models ran" test "$checked" -gt 300
check "no temporary files left behind: $(stray_tmp | head -3 | tr '\n' ' ')" test -z "$(stray_tmp)"
finish
