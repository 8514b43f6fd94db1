#!/usr/bin/env bash
# Run Check suites, then examples and command-line scripts; exit non-zero if anything failed.
# Usage: NF_BUILD=build/float run_tests.sh SUITE... -- EXAMPLE...
set -u
: "${CK_DEFAULT_TIMEOUT:=120}"; export CK_DEFAULT_TIMEOUT
# fontconfig (under cairo's text) keeps part of its configuration for the life of the process
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fail=0; passed=0; failed=0
mode=suite
for t in "$@"; do
  if [ "$t" = "--" ]; then mode=example; continue; fi
  if [ "$mode" = suite ]; then
    echo "== $t"
    if "$t"; then passed=$((passed+1)); else failed=$((failed+1)); fail=1; echo "FAILED: $t"; fi
  else
    echo "== example $t"
    if (cd "$(mktemp -d)" && "$OLDPWD/$t" >/dev/null); then passed=$((passed+1));
    else failed=$((failed+1)); fail=1; echo "FAILED: $t"; fi
  fi
done
for s in tests/cli/*.sh; do
  [ -f "$s" ] || continue
  echo "== script $s"
  if NF="$NF_BUILD/nf" bash "$s"; then passed=$((passed+1)); else failed=$((failed+1)); fail=1; echo "FAILED: $s"; fi
done
echo "$NF_BUILD: $passed passed, $failed failed"
exit $fail
