#!/usr/bin/env bash
# Run Check suites, then examples and command-line scripts; exit non-zero if anything failed.
# Usage: NF_BUILD=build/float run_tests.sh SUITE... -- EXAMPLE...
# NF_TEST_WRAP: a command that every suite, example and nf runs through, with the time limits
# raised 20-fold:
#   NF_TEST_WRAP="env OPENBLAS_CORETYPE=Sandybridge valgrind --tool=none --trace-children=yes -q"
# checks that the binary runs on a CPU valgrind emulates (no instruction it lacks, such as AVX-512
# outside the dispatch).  OPENBLAS_CORETYPE=Sandybridge (AVX kernels, no FMA) makes it about ten
# times faster: valgrind emulates each FMA of OpenBLAS's Haswell kernels through a helper call.
set -u
: "${CK_DEFAULT_TIMEOUT:=120}"; export CK_DEFAULT_TIMEOUT
wrap=${NF_TEST_WRAP:-}
if [ -n "$wrap" ]; then
  : "${CK_TIMEOUT_MULTIPLIER:=20}" "${NF_CLI_TIMEOUT:=2400}"; export CK_TIMEOUT_MULTIPLIER NF_CLI_TIMEOUT
fi
# fontconfig (under cairo's text) keeps part of its configuration for the life of the process
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fail=0; passed=0; failed=0
mode=suite
for t in "$@"; do
  if [ "$t" = "--" ]; then mode=example; continue; fi
  if [ "$mode" = suite ]; then
    echo "== $t"
    if $wrap "$t"; then passed=$((passed+1)); else failed=$((failed+1)); fail=1; echo "FAILED: $t"; fi
  else
    echo "== example $t"
    if (cd "$(mktemp -d)" && $wrap "$OLDPWD/$t" >/dev/null); then passed=$((passed+1));
    else failed=$((failed+1)); fail=1; echo "FAILED: $t"; fi
  fi
done
for s in tests/cli/*.sh; do
  [ -f "$s" ] || continue
  echo "== script $s"
  if NF="$NF_BUILD/nf" NF_WRAP="$wrap" bash "$s"; then passed=$((passed+1)); else failed=$((failed+1)); fail=1; echo "FAILED: $s"; fi
done
echo "$NF_BUILD: $passed passed, $failed failed"
exit $fail
