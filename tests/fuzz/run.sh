#!/usr/bin/env bash
# tests/fuzz/run.sh - run the libFuzzer harnesses built by `make fuzz`.
#
#   run.sh SECONDS BIN...              each harness for SECONDS on a fresh copy of its seed corpus
#                                      (tests/fuzz/corpus/NAME), stopping at the first crash, leak,
#                                      timeout (10 s per input) or out-of-memory (2.5 GB); exit 1 if
#                                      any harness found one.  `make check` runs this for 3 seconds.
#   run.sh --keep-going SECONDS BIN... the long run: libFuzzer's fork mode carries on past crashes,
#                                      then every saved input is replayed and reported with the
#                                      frame it failed in (nf's own code, or libhdf5 reading a
#                                      damaged file)
#   run.sh --replay BIN DIR            only that report, for the inputs saved in DIR/artifacts
#
# Work files (corpus copies, logs, the inputs that failed) go to $FUZZ_OUT (default build/fuzz/run).
# FUZZ_CORPUS=DIR seeds from DIR instead (one harness at a time): tests/fuzz/corpus/model_v1 holds a
# model file of nf 0.1.0 (variable-length strings, no checksums), the kind of file whose damage
# reaches libhdf5's own bugs (docs/HARDENING.md).
set -u
limits=(-timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2560)
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
replay() {
    # Replay each saved input alone (libFuzzer prints the stack of a crash, a timeout or an
    # allocation over the limit) and name the first frame outside the sanitizer and fuzzer runtime.
    runtime='__interceptor_|__sanitizer|__asan|__lsan|__ubsan|fuzzer::|libFuzzer| in (malloc|calloc|realloc|free|memcpy|memmove|memset|strdup|strlen|strnlen|strcpy|strncpy) |sysdeps/|libc\.so|libpthread|libgcc_s|AlarmCallback|MallocHook'
    for a in "$2"/artifacts/*; do
        [ -f "$a" ] || continue
        case $a in *.replay) continue ;; esac
        timeout -k 5 120 "$1" "${limits[@]}" -artifact_prefix="$2/replay-" "$a" >"$a.replay" 2>&1
        frames=$(grep -E '^ *#[0-9]+ ' "$a.replay" | grep -Ev "$runtime" | sed -E 's/^ *#[0-9]+ 0x[0-9a-f]+ //; s/ \(BuildId[^)]*\)//')
        frame=$(head -1 <<<"$frames")
        named=$(grep -m1 '^in ' <<<"$frames") # the first function with a name, under an anonymous one
        [ -n "$named" ] && [ "$named" != "$frame" ] && frame="$frame, $named"
        frame=${frame#in }
        kind=$(grep -m1 -Eo 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer|UndefinedBehaviorSanitizer): [a-zA-Z-]+' "$a.replay")
        [ -z "$kind" ] && kind=$(grep -m1 -Eo 'runtime error: .*' "$a.replay")
        where=nf
        case $frame in *libhdf5*) where=libhdf5 ;; esac
        echo "  $(basename "$a") ($(stat -c %s "$a") bytes): ${kind:-no failure on replay} in ${frame:-?} [$where]"
    done
    rm -f "$2"/replay-*
}

if [ "${1:-}" = --replay ] && [ $# = 3 ]; then
    replay "$2" "$3"
    exit 0
fi
keep=0
if [ "${1:-}" = --keep-going ]; then keep=1; shift; fi
if [ $# -lt 2 ]; then
    echo "usage: tests/fuzz/run.sh [--keep-going] SECONDS build/fuzz/fuzz_NAME... | --replay BIN DIR" >&2
    exit 2
fi
secs=$1
shift
out=${FUZZ_OUT:-build/fuzz/run}
status=0
for bin in "$@"; do
    name=$(basename "$bin")
    name=${name#fuzz_}
    work=$out/$name
    rm -rf "$work"
    mkdir -p "$work/corpus" "$work/artifacts"
    cp "${FUZZ_CORPUS:-tests/fuzz/corpus/$name}"/* "$work/corpus/" 2>/dev/null
    common=("${limits[@]}" -artifact_prefix="$work/artifacts/"
            -print_final_stats=1)
    if [ $keep = 1 ]; then
        "$bin" "$work/corpus" -max_total_time="$secs" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
            "${common[@]}" >"$work/log" 2>&1
    else
        "$bin" "$work/corpus" -max_total_time="$secs" -seed=1 "${common[@]}" >"$work/log" 2>&1
    fi
    rc=$?
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$work/log" | awk '{s += $2} END {print s + 0}')
    [ "$runs" = 0 ] && runs=$(grep -Eo '#[0-9]+' "$work/log" | tail -1 | tr -d '#')
    n_art=$(find "$work/artifacts" -type f | wc -l)
    if [ $keep = 0 ]; then
        if [ $rc = 0 ] && [ "$n_art" = 0 ]; then
            echo "ok    fuzz $name: ${runs:-?} inputs in ${secs}s, no crash"
        else
            echo "FAIL  fuzz $name: exit $rc, $n_art failing input(s) in $work/artifacts (log: $work/log)"
            grep -m3 -E 'ERROR|SUMMARY|runtime error' "$work/log" | sed 's/^/      /'
            status=1
        fi
        continue
    fi
    echo "fuzz $name: ${runs:-?} inputs in ${secs}s, $n_art saved failing input(s)"
    replay "$bin" "$work"
done
exit $status
