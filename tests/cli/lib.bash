# tests/cli/lib.bash - shared setup of the tests/cli/*.sh scripts (sourced; not a test itself).
#
# `make check` runs each script with NF set to the nf binary under test and the repository root as
# the working directory.  After sourcing this file a script is inside $W, an empty directory under
# a private mktemp -d that is removed on exit (with any background nf it started and registered in
# BG_PIDS).  Each check prints one line ("ok    SCRIPT: what" or "FAIL  SCRIPT: what: why");
# `finish` prints the totals and exits non-zero if anything failed.
set -u

if [ -z "${NF:-}" ]; then
    echo "NF is not set (expected the path of the nf binary, e.g. NF=build/float/nf)" >&2
    exit 2
fi
case $NF in /*) ;; *) NF=$PWD/$NF ;; esac
if [ ! -x "$NF" ]; then
    echo "$NF: not an executable (expected the nf binary; run make first)" >&2
    exit 2
fi
ROOT=$PWD
BUILD=$(dirname "$NF")
SCRIPT=$(basename "$0" .sh)
T=$(mktemp -d "${TMPDIR:-/tmp}/nf_cli_$SCRIPT.XXXXXX") || exit 2
W=$T/w
mkdir "$W" || exit 2
BG_PIDS=""
# NF_WRAP (scripts/run_tests.sh's NF_TEST_WRAP): every nf of the script runs through it.
if [ -n "${NF_WRAP:-}" ]; then
    mkdir "$T/wrap" || exit 2
    printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$NF_WRAP" "$NF" >"$T/wrap/nf"
    chmod +x "$T/wrap/nf"
    NF=$T/wrap/nf
fi

# The traps belong to this shell only: a subshell (the watchdog of wait_bg) that is signalled in
# the instant after fork, before bash resets its traps, would otherwise run them and delete $T
# under the running test.
cleanup() {
    local p
    [ "${BASHPID:-$$}" = "$$" ] || return 0
    for p in $BG_PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap '[ "${BASHPID:-$$}" = "$$" ] && exit 3' INT TERM
cd "$W" || exit 2

NPASS=0
NFAIL=0
pass() { NPASS=$((NPASS + 1)); echo "ok    $SCRIPT: $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL  $SCRIPT: $*"; }
skip() { echo "skip  $SCRIPT: $*"; }
# check WHAT COMMAND...: one line, ok if COMMAND succeeds.
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
    echo "$SCRIPT: $NPASS passed, $NFAIL failed"
    [ "$NFAIL" -eq 0 ] && exit 0
    exit 1
}

# Background processes: bg_forget once waited for (so cleanup never signals a reused pid);
# wait_bg PID LIMIT waits, killing PID with SIGKILL if it runs LIMIT seconds longer, and returns
# its exit status.
bg_forget() { BG_PIDS=$(echo " $BG_PIDS " | sed "s/ $1 / /g"); }
# wait_for_file FILE PID: until FILE exists (a fit's first checkpoint: its signal handler is in
# place, so SIGTERM now stops it with exit 130) or PID has ended, at most NF_CLI_TIMEOUT seconds.
# A fixed sleep instead signalled nf before its handler on a loaded machine or under valgrind.
wait_for_file() {
    local n=$((${NF_CLI_TIMEOUT:-120} * 40))
    while [ "$n" -gt 0 ] && [ ! -e "$1" ] && kill -0 "$2" 2>/dev/null; do sleep 0.025; n=$((n - 1)); done
}
wait_bg() {
    local pid=$1 limit=$2 dog st
    (
        n=$((limit * 10))
        while [ $n -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
        kill -9 "$pid" 2>/dev/null
    ) &
    dog=$!
    wait "$pid"
    st=$?
    kill -9 "$dog" 2>/dev/null   # SIGKILL runs no trap, even in a subshell not yet set up
    wait "$dog" 2>/dev/null
    bg_forget "$pid"
    return $st
}

# nf with a time limit, so a hang fails the check instead of the whole run.
nfrun() { timeout -k 5 "${NF_CLI_TIMEOUT:-120}" "$NF" "$@"; }

# refuses_replace MODEL CMD ARGS...: `nf CMD ARGS -o MODEL` over the existing MODEL exits 1 with one
# line naming --force and leaves MODEL as it was; with --force (and --seed 99, for other weights)
# it replaces MODEL.  CMD is one word ("fit") or two ("tpp fit") given as separate arguments.
refuses_replace() {
    local model=$1 what="$2 $3" before rc
    shift
    before=$(cksum <"$model")
    nfrun "$@" -o "$model" >/dev/null 2>"$T/replace.err"
    rc=$?
    check "$what over an existing model without --force: exit $rc, one line naming --force, the model kept" \
        bash -c "[ $rc = 1 ] && [ \$(wc -l <'$T/replace.err') = 1 ] &&
                 grep -q 'already exists and a new fit would replace it: give --force' '$T/replace.err' &&
                 [ \"\$(cksum <'$model')\" = '$before' ]"
    nfrun "$@" --force --seed 99 -o "$model" >/dev/null 2>"$T/replace.err"
    rc=$?
    check "$what --force replaces it (exit $rc)" bash -c "[ $rc = 0 ] && [ \"\$(cksum <'$model')\" != '$before' ]"
}
# expect_err WHAT PATTERN -- nf ARGS...: exit 1 within the time limit, nothing on stdout, one line on
# stderr starting "nf " and matching PATTERN (extended regex).
expect_err() {
    local what=$1 pat=$2 rc why=""
    shift 3
    NF_CLI_TIMEOUT=60 nfrun "$@" >"$T/out" 2>"$T/err"
    rc=$?
    [ "$rc" = 1 ] || why="$why; exit $rc, expected 1"
    [ "$rc" -lt 124 ] || why="$why; crashed or hung"
    [ ! -s "$T/out" ] || why="$why; wrote to stdout"
    [ "$(wc -l <"$T/err")" = 1 ] || why="$why; $(wc -l <"$T/err") lines on stderr"
    case $(head -c 3 "$T/err") in "nf ") ;; *) why="$why; stderr does not start with 'nf '" ;; esac
    grep -qE -- "$pat" "$T/err" || why="$why; stderr does not match /$pat/"
    if [ -z "$why" ]; then pass "$what"; else fail "$what (nf $*)${why}: $(head -c 300 "$T/err" | tr '\n' '|')"; fi
}
# Temporary files of the atomic writers ("<path>.tmp.<pid>") anywhere under $W.
stray_tmp() { find "$W" -name '*.tmp.*' | sed "s|^$W/||"; }

# "a b" -> 1 if |a - b| <= tol * max(1, |a|, |b|)
close_to() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN {
    d = a - b; if (d < 0) d = -d; m = 1; if (a > m) m = a; if (-a > m) m = -a; if (b > m) m = b; if (-b > m) m = -b;
    exit !(d <= t * m) }'; }

# The test helper tests/cli/mkbad.c, compiled against the libnf.a next to $NF with that build's
# precision and sanitizers.  Sets MKBAD; returns non-zero (after printing why) if it cannot build.
build_mkbad() {
    local flags="-std=c11 -D_POSIX_C_SOURCE=200809L -O1 -g -I$ROOT $(pkg-config --cflags hdf5-serial 2>/dev/null)"
    case $BUILD in *-san) flags="$flags -fsanitize=address,undefined" ;; esac
    case $BUILD in *double*) flags="$flags -DNF_DOUBLE=1" ;; esac
    local libs
    libs="$(pkg-config --libs gsl hdf5-serial fftw3 fftw3f cairo 2>/dev/null | sed 's/-lgslcblas//g') -lopenblas -lgif"
    MKBAD=$T/mkbad
    # shellcheck disable=SC2086
    if ! gcc $flags "$ROOT/tests/cli/mkbad.c" -o "$MKBAD" "$BUILD/libnf.a" $libs -fopenmp -lm 2>"$T/mkbad.log"; then
        sed 's/^/    /' "$T/mkbad.log" | head -20
        return 1
    fi
}
