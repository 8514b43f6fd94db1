#!/usr/bin/env bash
# tests/cli/images.sh - image data from the command line: nf data make shapes|digits, nf data import
# of a PNG folder and of image NPY arrays, nf data split keeping the image attributes and labels,
# nf data show writing the grid; and the bad inputs: one line, non-zero exit, no file left.
. "$(dirname "$0")/lib.bash"

PNGSTAT=$T/pngstat
if ! gcc -O1 "$ROOT/tests/cli/pngstat.c" -o "$PNGSTAT" $(pkg-config --cflags --libs cairo) -lm 2>"$T/png.log"; then
    fail "build the PNG reader"; cat "$T/png.log"; finish
fi

# ok WHAT CMD...: exit 0, stdout in $T/out
ok() {
    local what=$1
    shift
    if nfrun "$@" >"$T/out" 2>"$T/err"; then pass "$what"; else fail "$what: exit $? ($(head -c 300 "$T/err"))"; fi
}
# bad WHAT WORD OUTPUT CMD...: non-zero exit, one line on stderr naming WORD, OUTPUT not created
bad() {
    local what=$1 word=$2 out=$3
    shift 3
    if nfrun "$@" >"$T/out" 2>"$T/err"; then fail "$what: succeeded, expected an error"; return; fi
    if [ "$(wc -l <"$T/err")" -ne 1 ]; then fail "$what: expected one line on stderr, got: $(cat "$T/err")"
    elif ! grep -q -- "$word" "$T/err"; then fail "$what: stderr does not name '$word': $(cat "$T/err")"
    elif [ -e "$out" ]; then fail "$what: $out was created"
    else pass "$what"; fi
}
has() { grep -q -- "$2" "$1" || { fail "expected '$2' in: $(head -c 400 "$1")"; return 1; }; }
# differ A.png B.png: the fraction of pixels that differ over the whole of A
differ() { "$PNGSTAT" "$1" "$2" 0 0 $("$PNGSTAT" "$1"); }

# NPY 1.0 file: npy FILE DESCR SHAPE PRINTF-BYTES
npy() {
    local hdr="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
    local pad=$(( 64 - (10 + ${#hdr} + 1) % 64 ))
    hdr="$hdr$(printf '%*s' "$pad" '')"
    local hl=$(( ${#hdr} + 1 ))
    {
        printf '\223NUMPY\001\000'
        printf "\\$(printf '%03o' $((hl & 255)))\\$(printf '%03o' $((hl >> 8)))"
        printf '%s\n' "$hdr"
        printf "$4"
    } >"$1"
}

# ---- help and listing ---------------------------------------------------------------------------
ok "data make --help names the image sets" data make --help
has "$T/out" "shapes|digits" && pass "make --help: shapes|digits"
ok "data make shapes --help" data make shapes --help
has "$T/out" "--size" && has "$T/out" "--from" && pass "make shapes --help: --size, --from"
ok "data make --list" data make --list
grep -q '^shapes ' "$T/out" && grep -q '^digits ' "$T/out" && pass "make --list: shapes and digits"
ok "data show --help" data show --help
has "$T/out" "usage: nf data show"

# ---- shapes -------------------------------------------------------------------------------------
ok "make shapes" data make shapes -n 300 --seed 4 -o s.h5
has "$T/out" "s.h5: shapes, 300 images of 16 x 16, 256 levels, 3 classes (disc " && pass "make shapes: summary line"
ok "make shapes again, same seed" data make shapes --n 300 --seed 4 -o s2.h5
ok "make shapes, another seed" data make shapes -n 300 --seed 5 -o s3.h5
ok "make shapes on one thread" data make shapes -n 300 --seed 4 --threads 1 -o s1t.h5
ok "make shapes --size 32" data make shapes --size 32 -n 50 -o s32.h5
has "$T/out" "50 images of 32 x 32"

ok "show" data show s.h5 -o s.png
has "$T/out" "s.png: images 0..63 of s.h5 (16 x 16, 256 levels, 3 classes)"
# 64 images of 16 pixels at 4x (64 px each), 8 x 8 with gaps of 2: 8 * 64 + 9 * 2
check "show: 530 x 530 grid" test "$("$PNGSTAT" s.png)" = "530 530"
nfrun data show s2.h5 -o s2.png >/dev/null && nfrun data show s3.h5 -o s3.png >/dev/null
check "the same seed draws the same images" awk -v f="$(differ s.png s2.png)" 'BEGIN { exit !(f == 0) }'
nfrun data show s1t.h5 -o s1t.png >/dev/null
check "one thread draws the same images" awk -v f="$(differ s.png s1t.png)" 'BEGIN { exit !(f == 0) }'
check "another seed draws others ($(differ s.png s3.png) of the pixels differ)" \
    awk -v f="$(differ s.png s3.png)" 'BEGIN { exit !(f > 0.3) }'
ok "show --n 10 --cols 5 --scale 2 --gap 1" data show s32.h5 --n 10 --cols 5 --scale 2 --gap 1 -o s32.png
check "show: 5 x 2 grid of 64 px images" test "$("$PNGSTAT" s32.png)" = "326 131"

# ---- digits ---------------------------------------------------------------------------------------
ok "make digits (found next to the binary)" data make digits -o d.h5
has "$T/out" "d.h5: digits, 1797 images of 8 x 8, 17 levels, 10 classes (0 178, 1 182"
ok "make digits --from" data make digits --from "$ROOT/data/digits.csv.gz" -o d2.h5
if [ -z "${NF_WRAP:-}" ]; then
    mkdir -p "$T/bin" && cp "$NF" "$T/bin/nf"
    if "$T/bin/nf" data make digits -o nod.h5 >"$T/out" 2>"$T/err"; then fail "digits without the file: succeeded"
    elif grep -q "no digits file: looked for .*bin/../../data/digits.csv.gz.*data/digits.csv.gz in the current directory.*--from" "$T/err" &&
         [ ! -e nod.h5 ]; then pass "digits without the file: says where it looked"
    else fail "digits without the file: $(cat "$T/err")"; fi
fi
bad "digits --from a missing file" "nowhere.csv.gz: cannot open" x.h5 data make digits --from nowhere.csv.gz -o x.h5
bad "digits -n" "fixed set" x.h5 data make digits -n 5 -o x.h5

# ---- split keeps the images' attributes and labels ---------------------------------------------------
ok "split digits" data split d.h5 --val 0.1 --test 0.1 --seed 2
has "$T/out" "1437 train, 180 validation, 180 test rows"
for p in train val test; do
    ok "show d.$p.h5" data show d.$p.h5 --n 16 -o d.$p.png
    has "$T/out" "(8 x 8, 17 levels, 10 classes)" && pass "split: d.$p.h5 keeps image_shape, levels and the classes"
done
ok "split of a split" data split d.train.h5 --val 0.5 --test 0 -o again
ok "show again.val.h5" data show again.val.h5 -o again.png
has "$T/out" "(8 x 8, 17 levels, 10 classes)"

# ---- a PNG folder: one class per sub-folder, images back as they were --------------------------------
mkdir -p pngs/a pngs/b
for k in 0 1 2 3 4; do
    c=a; [ $k -ge 3 ] && c=b
    nfrun data show s.h5 --n 1 --first $k --scale 1 --gap 0 -o pngs/$c/img$k.png >/dev/null
done
check "show --scale 1 --gap 0: the image's own size" test "$("$PNGSTAT" pngs/a/img0.png)" = "16 16"
ok "import a PNG folder" data import pngs -o p.h5
has "$T/out" "p.h5: 5 images of 16 x 16, 256 levels, 2 classes (a 3, b 2)"
nfrun data show p.h5 --cols 5 -o p.png >/dev/null && nfrun data show s.h5 --n 5 --cols 5 -o s5.png >/dev/null
check "PNG folder round trip: the same pixels" awk -v f="$(differ p.png s5.png)" 'BEGIN { exit !(f == 0) }'
ok "import PNGs without classes" data import pngs/a -o pa.h5
has "$T/out" "pa.h5: 3 images of 16 x 16, 256 levels"
ok "import --rgb" data import pngs/a --rgb -o prgb.h5
has "$T/out" "3 images of 16 x 16 x 3"
nfrun data show s32.h5 --n 1 --scale 1 --gap 0 -o pngs/b/img9.png >/dev/null
bad "a PNG of another size" "img9.png is 32 x 32 pixels (width x height), but .*img3.png, the first image, is 16 x 16" \
    bad.h5 data import pngs/b -o bad.h5
bad "labels for a folder" "--labels" bad.h5 data import pngs -o bad.h5 --labels x.npy

# ---- NPY image arrays ---------------------------------------------------------------------------------
# (2, 2, 3) uint8, grey levels 0..11; labels 1, 0
npy img3.npy '|u1' '(2, 2, 3)' '\000\001\002\003\004\005\006\007\010\011\012\013'
npy lab.npy '<i8' '(2,)' '\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000'
ok "import a 3-D NPY with labels" data import img3.npy --labels lab.npy --levels 17 -o n3.h5
has "$T/out" "n3.h5: 2 images of 2 x 3, 17 levels, 2 classes (0 1, 1 1)"
ok "show the NPY images" data show n3.h5 -o n3.png
# (1, 1, 2, 3) uint8: one RGB image of 1 x 2 pixels
npy img4.npy '|u1' '(1, 1, 2, 3)' '\377\000\000\000\200\377'
ok "import a 4-D NPY" data import img4.npy -o n4.h5
has "$T/out" "n4.h5: 1 image of 1 x 2 x 3, 256 levels"
ok "show an RGB image" data show n4.h5 --scale 3 --gap 0 -o n4.png
check "RGB grid: 6 x 3 pixels" test "$("$PNGSTAT" n4.png)" = "6 3"
bad "values beyond --levels" "image 1, pixel (1, 0) channel 0 is 9 (expected an integer grey level 0..8)" bad.h5 \
    data import img3.npy --levels 9 -o bad.h5
npy lab3.npy '<i8' '(3,)' '\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000'
bad "labels that do not fit" "3 x 1 labels for 2 images" bad.h5 data import img3.npy --labels lab3.npy -o bad.h5
# a 2-D NPY keeps its meaning: a table of rows
npy flat.npy '|u1' '(2, 3)' '\000\001\002\003\004\005'
ok "a 2-D NPY is a table" data import flat.npy -o flat.h5
has "$T/out" "flat.h5: 2 x 3 from"

# ---- show and make: bad inputs ---------------------------------------------------------------------
nfrun data make moons -n 20 -o moons.h5 >/dev/null
bad "show a file without images" "no attribute image_shape" bad.png data show moons.h5 -o bad.png
bad "show --first beyond the file" "--first 300" bad.png data show s.h5 --first 300 -o bad.png
bad "show without -o" "-o" bad.png data show s.h5
bad "make shapes --size 24" "--size 24" bad.h5 data make shapes --size 24 -o bad.h5
bad "make shapes --from" "--from applies to digits" bad.h5 data make shapes --from x -o bad.h5
bad "make shapes into a missing folder" "nodir" nodir/x.h5 data make shapes -n 5 -o nodir/x.h5
check "no temporary files left" test -z "$(stray_tmp)$(find "$W" -name '*.tmp*' | head -1)"
finish
