#!/usr/bin/env bash
# tests/cli/data.sh - nf data make / import / split from the command line, and their error paths.
# Run by `make check` with $NF set to the nf binary; exits non-zero on the first failure.
set -u
NF=${NF:-build/float/nf}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect_ok DESCRIPTION CMD... : exit 0, stdout kept in $T/out
expect_ok() {
  local what=$1; shift
  "$@" >"$T/out" 2>"$T/err" || { fail "$what: exit $? ($(cat "$T/err"))"; return 1; }
}
# expect_fails DESCRIPTION WORD CMD... : non-zero exit, one line on stderr that contains WORD
expect_fails() {
  local what=$1 word=$2; shift 2
  if "$@" >"$T/out" 2>"$T/err"; then fail "$what: succeeded, expected an error"; return 1; fi
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$what: expected one line on stderr, got: $(cat "$T/err")"
  grep -q -- "$word" "$T/err" || fail "$what: stderr does not name '$word': $(cat "$T/err")"
}
contains() { grep -q -- "$2" "$1" || fail "expected '$2' in $(basename "$1"): $(head -c 400 "$1")"; }
absent() { [ ! -e "$1" ] || fail "$1 exists but should not"; }

# ---- help ---------------------------------------------------------------------------------------
expect_ok "data --help" "$NF" data --help
for w in make import split -n --seed --dim --components --model-seed --flow --entropy-n --delimiter \
         --header --val --test "default 10000" "default 0.1" "example"; do contains "$T/out" "$w"; done
for sub in make import split; do
  expect_ok "data $sub --help" "$NF" data "$sub" --help
  contains "$T/out" "usage: nf data $sub"
  contains "$T/out" "nf data $sub "   # an example line
  contains "$T/out" "default"
done
if "$NF" data >/dev/null 2>&1; then fail "'nf data' without a subcommand succeeded"; fi

# ---- make ---------------------------------------------------------------------------------------
expect_ok "make --list" "$NF" data make --list
[ "$(grep -Evc '^(tpp-|shapes |digits |video-|causal-|dependent-)' "$T/out")" -eq 12 ] || fail "make --list: expected 12 lines (besides tpp-* and the images), got $(wc -l <"$T/out")"
for s in causal-poly causal-moons dependent-sign dependent-crescent-cube video-sprites; do
  grep -q "^$s " "$T/out" || fail "make --list does not list $s"
done
for s in moons circles rings 8gaussians pinwheel 2spirals checkerboard swissroll crescent sinewave gmm teacher; do
  grep -q "^$s " "$T/out" || fail "make --list does not list $s"
done

expect_ok "make checkerboard" "$NF" data make checkerboard -n 2000 --seed 5 -o "$T/cb.h5"
[ -s "$T/cb.h5" ] || fail "make checkerboard: no file"
contains "$T/out" "checkerboard, 2000 x 2, entropy 3.4657 +- 0.0000"   # exactly ln 32
expect_ok "make moons" "$NF" data make moons -n 500 --entropy-n 2000 -o "$T/moons.h5"
contains "$T/out" "moons, 500 x 2, entropy 2.[34]"
expect_ok "make gmm" "$NF" data make gmm --dim 3 --components 2 --model-seed 9 -n 300 -o "$T/gmm.h5"
contains "$T/out" "gmm, 300 x 3"
expect_ok "make teacher" "$NF" data make teacher --dim 3 -n 200 --entropy-n 1000 -o "$T/teacher.h5"
contains "$T/out" "teacher, 200 x 3"

# ---- import -------------------------------------------------------------------------------------
printf 'height,weight\n1.5,2.25\n-0.5,4\n3.125,0.75\n' >"$T/t.csv"
expect_ok "import csv" "$NF" data import "$T/t.csv" -o "$T/csv.h5"
contains "$T/out" "3 x 2 from"
printf '1.5;2.25;7\n-0.5;4;8\n' >"$T/nohead.txt"
expect_ok "import csv options" "$NF" data import "$T/nohead.txt" --delimiter ';' --header no -o "$T/nohead.h5"
contains "$T/out" "2 x 3 from"

# NPY 1.0, little-endian float64, shape (3, 2): 1.5 2.25 / -0.5 4 / 3.125 0.75
hdr="{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }"
pad=$(( 64 - (10 + ${#hdr} + 1) % 64 ))
hdr="$hdr$(printf '%*s' "$pad" '')"
hl=$(( ${#hdr} + 1 ))
{
  printf '\223NUMPY\001\000'
  printf "\\$(printf '%03o' $((hl & 255)))\\$(printf '%03o' $((hl >> 8)))"
  printf '%s\n' "$hdr"
  printf '\000\000\000\000\000\000\370\077'   # 1.5
  printf '\000\000\000\000\000\000\002\100'   # 2.25
  printf '\000\000\000\000\000\000\340\277'   # -0.5
  printf '\000\000\000\000\000\000\020\100'   # 4
  printf '\000\000\000\000\000\000\011\100'   # 3.125
  printf '\000\000\000\000\000\000\350\077'   # 0.75
} >"$T/t.npy"
expect_ok "import npy" "$NF" data import "$T/t.npy" -o "$T/npy.h5"
contains "$T/out" "3 x 2 from"

# ---- split --------------------------------------------------------------------------------------
expect_ok "split" "$NF" data split "$T/cb.h5" --val 0.25 --test 0.125 --seed 3
contains "$T/out" "1250 train, 500 validation, 250 test rows"
for p in train val test; do [ -s "$T/cb.$p.h5" ] || fail "split: no cb.$p.h5"; done
expect_ok "split -o" "$NF" data split "$T/csv.h5" --val 0.34 --test 0.34 -o "$T/parts"
contains "$T/out" "1 train, 1 validation, 1 test rows"
for p in train val test; do [ -s "$T/parts.$p.h5" ] || fail "split -o: no parts.$p.h5"; done
expect_ok "split of a split" "$NF" data split "$T/cb.train.h5" --val 0.2 --test 0 -o "$T/again"
contains "$T/out" "1000 train, 250 validation, 0 test rows"

# ---- errors: one line naming the input, non-zero exit, no file created or changed ----------------
expect_fails "make bad name" "moonz" "$NF" data make moonz -n 10 -o "$T/bad.h5"
absent "$T/bad.h5"
for n in 0 -5 12x ""; do
  expect_fails "make -n '$n'" "-n" "$NF" data make moons -n "$n" -o "$T/bad.h5"
done
expect_fails "make -n without a value" "-n" "$NF" data make moons -o "$T/bad.h5" -n
absent "$T/bad.h5"
expect_fails "make without -o" "-o" "$NF" data make moons -n 10
expect_fails "make --dim on a 2-D set" "--dim" "$NF" data make rings --dim 3 -o "$T/bad.h5"
expect_fails "make unknown option" "--frobnicate" "$NF" data make moons --frobnicate -o "$T/bad.h5"
expect_fails "make unwritable output" "$T/nodir/x.h5" "$NF" data make moons -n 10 -o "$T/nodir/x.h5"
absent "$T/nodir"
expect_fails "import missing file" "missing.csv" "$NF" data import "$T/missing.csv" -o "$T/bad.h5"
absent "$T/bad.h5"
printf 'a,b\n1,2\n3\n' >"$T/ragged.csv"
expect_fails "import ragged csv" "ragged.csv" "$NF" data import "$T/ragged.csv" -o "$T/bad.h5"
printf 'a,b\n1,2\n3,inf\n' >"$T/inf.csv"
expect_fails "import non-finite csv" "inf.csv" "$NF" data import "$T/inf.csv" -o "$T/bad.h5"
absent "$T/bad.h5"
expect_fails "split missing file" "missing.h5" "$NF" data split "$T/missing.h5"
absent "$T/missing.train.h5"
expect_fails "split not HDF5" "t.csv" "$NF" data split "$T/t.csv" -o "$T/nothdf"
absent "$T/nothdf.train.h5"
expect_fails "split fractions" "--val" "$NF" data split "$T/cb.h5" --val 0.6 --test 0.5 -o "$T/toomuch"
absent "$T/toomuch.train.h5"

# a failing command leaves an existing output untouched
before=$(cksum <"$T/moons.h5")
expect_fails "make onto existing, bad -n" "-n" "$NF" data make moons -n nope -o "$T/moons.h5"
expect_fails "import onto existing, ragged" "ragged.csv" "$NF" data import "$T/ragged.csv" -o "$T/moons.h5"
[ "$(cksum <"$T/moons.h5")" = "$before" ] || fail "a failed command changed moons.h5"
ls "$T" | grep -q '\.tmp\.' && fail "temporary files left behind: $(ls "$T")"

if [ "$fails" -ne 0 ]; then echo "tests/cli/data.sh: $fails failures"; exit 1; fi
echo "tests/cli/data.sh: all passed"
