#!/usr/bin/env bash
# tests/cli/videos.sh - video data from the command line: nf data make video-sprites|video-balls
# (listed, reproducible, the summary line, the attributes), nf data import of video NPY arrays,
# nf data show of a video file as a PNG filmstrip and an animated GIF; and the bad inputs: one
# line, exit 2 for usage, no file left, no temporary files.
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
# bad WHAT CODE WORD OUTPUT CMD...: exit CODE, one line on stderr naming WORD, OUTPUT not created
bad() {
    local what=$1 code=$2 word=$3 out=$4 st
    shift 4
    nfrun "$@" >"$T/out" 2>"$T/err"
    st=$?
    if [ "$st" -ne "$code" ]; then fail "$what: exit $st, expected $code ($(head -c 300 "$T/err"))"
    elif [ "$(wc -l <"$T/err")" -ne 1 ]; then fail "$what: expected one line on stderr, got: $(cat "$T/err")"
    elif ! grep -q -- "$word" "$T/err"; then fail "$what: stderr does not name '$word': $(cat "$T/err")"
    elif [ -e "$out" ]; then fail "$what: $out was created"
    else pass "$what"; fi
}
has() { grep -q -- "$2" "$1" || { fail "expected '$2' in: $(head -c 400 "$1")"; return 1; }; }
# a GIF: the GIF89a signature first and the trailer byte 0x3b last
is_gif() { [ "$(head -c 6 "$1")" = "GIF89a" ] && [ "$(tail -c 1 "$1" | od -An -tx1 | tr -d ' ')" = "3b" ]; }

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
ok "data make --list" data make --list
grep -q '^video-sprites ' "$T/out" && grep -q '^video-balls ' "$T/out" && pass "make --list: video-sprites and video-balls"
ok "data make --help names the video sets" data make --help
has "$T/out" "video-sprites|video-balls" && pass "make --help: video-sprites|video-balls"
ok "data make video-balls --help" data make video-balls --help
has "$T/out" "--frames" && has "$T/out" "\[1000\]" && has "$T/out" "example" && pass "make video-balls --help: flags, defaults"

# ---- make ---------------------------------------------------------------------------------------
ok "make video-balls" data make video-balls -n 40 --frames 8 --size 24 --seed 3 -o b.h5
has "$T/out" "b.h5: video-balls, 40 videos of 8 frames of 24 x 24, 256 levels, 2 classes (1 " && pass "balls: summary"
ok "make video-balls again, 1 thread" data make video-balls -n 40 --frames 8 --size 24 --seed 3 --threads 1 -o b2.h5
ok "show balls" data show b.h5 --n 40 -o b.png
ok "show balls again" data show b2.h5 --n 40 -o b2.png
check "same seed, same videos (any threads)" cmp -s b.png b2.png
check "b.h5 has video_shape" grep -q -a video_shape b.h5
check "b.h5 has no image_shape" test "$(grep -c -a image_shape b.h5)" = 0
ok "make video-sprites" data make video-sprites -n 30 --seed 2 -o s.h5
has "$T/out" "s.h5: video-sprites, 30 videos of 16 frames of 32 x 32, 17 levels, 10 classes (0 " && pass "sprites: summary"

# ---- show ---------------------------------------------------------------------------------------
ok "show sprites as a filmstrip" data show s.h5 --n 3 --scale 2 -o strip.png
has "$T/out" "strip.png: videos 0..2 of s.h5 (16 frames of 32 x 32, 17 levels, 10 classes), filmstrip"
check "filmstrip: 16 frames x 3 videos at scale 2 with 2 px gaps" test "$("$PNGSTAT" strip.png)" = "1058 200"
ok "show sprites as a GIF" data show s.h5 -o anim.gif
check "anim.gif is a GIF" is_gif anim.gif
ok "show 4 balls as a GIF grid" data show b.h5 --n 4 --scale 1 --delay 5 -o grid.gif
check "grid.gif is a GIF" is_gif grid.gif
w=$(od -An -tu2 -j6 -N4 grid.gif | tr -s ' ' | sed 's/^ //')
check "grid.gif: 2 x 2 videos of 24 px with 2 px gaps (54 x 54)" test "$w" = "54 54"
ok "show --help with a video file" data show b.h5 --help
has "$T/out" "OUT.png|OUT.gif"

# ---- split --------------------------------------------------------------------------------------
ok "split a video file" data split b.h5 --val 0.25 --test 0 --seed 1 -o parts
check "the parts keep video_shape" grep -q -a video_shape parts.val.h5
ok "show a part" data show parts.val.h5 --n 10 -o part.gif
has "$T/out" "videos 0..9 of parts.val.h5 (8 frames of 24 x 24, 256 levels, 2 classes)"

# ---- import -------------------------------------------------------------------------------------
# (2, 2, 1, 2, 1) uint8: 2 videos of 2 frames of 1 x 2 pixels, 1 channel
npy v5.npy '|u1' '(2, 2, 1, 2, 1)' '\000\001\002\003\004\005\006\007'
ok "import a 5-D NPY" data import v5.npy --levels 8 -o v5.h5
has "$T/out" "v5.h5: 2 videos of 2 frames of 1 x 2, 8 levels" && pass "import 5-D: summary"
npy v4.npy '|u1' '(1, 2, 2, 2)' '\000\001\002\003\004\005\006\007'
ok "import a 4-D NPY with --video" data import v4.npy --video -o v4.h5
has "$T/out" "v4.h5: 1 video of 2 frames of 2 x 2, 256 levels" && pass "import 4-D --video: summary"
ok "a 4-D NPY without --video is images" data import v4.npy -o i4.h5
has "$T/out" "i4.h5: 1 image of 2 x 2 x 2"
ok "show the imported videos" data show v5.h5 -o v5.gif
check "v5.gif is a GIF" is_gif v5.gif
bad "values beyond --levels" 1 "video 1, frame 1, pixel (0, 1) channel 0 is 7 (expected an integer grey level 0..6)" \
    bad.h5 data import v5.npy --levels 7 -o bad.h5
npy v3.npy '|u1' '(2, 2, 2)' '\000\001\002\003\004\005\006\007'
bad "--video with a 3-D NPY" 1 "a 3-D array (expected videos" bad.h5 data import v3.npy --video -o bad.h5
npy v8.npy '|u1' '(1, 2, 1, 8)' '\000\001\002\003\004\005\006\007\000\001\002\003\004\005\006\007'
bad "a 4-D NPY of 8 'channels' without --video suggests it" 1 "for videos (n, frames, height, width) give --video" \
    bad.h5 data import v8.npy -o bad.h5

# ---- bad inputs ---------------------------------------------------------------------------------
bad "make video-balls --frames 0" 2 "--frames" bad.h5 data make video-balls --frames 0 -o bad.h5
bad "make video-balls --size 8" 2 "--size" bad.h5 data make video-balls --size 8 -o bad.h5
bad "make video-sprites --size 18" 2 "--size 18" bad.h5 data make video-sprites --size 18 -o bad.h5
bad "make video-balls --from" 2 "--from applies to video-sprites" bad.h5 data make video-balls --from x -o bad.h5
bad "make video-balls --bogus" 2 "--bogus" bad.h5 data make video-balls --bogus -o bad.h5
bad "make video-balls without -o" 2 "-o" bad.h5 data make video-balls
bad "make video-balls, too big" 2 "GB" bad.h5 data make video-balls -n 10000000 --frames 256 -o bad.h5
bad "make into a missing folder" 1 "nodir" nodir/x.h5 data make video-balls -n 5 -o nodir/x.h5
bad "make video-sprites from a missing digits file" 1 "nothere.csv.gz" bad.h5 \
    data make video-sprites -n 5 --from nothere.csv.gz -o bad.h5
bad "show a video to .jpg" 2 ".png (filmstrip) or .gif" bad.jpg data show b.h5 -o bad.jpg
bad "show --first beyond the file" 1 "--first 40" bad.gif data show b.h5 --first 40 -o bad.gif
bad "show --delay 0" 2 "--delay" bad.gif data show b.h5 --delay 0 -o bad.gif
bad "show a video GIF into a missing folder" 1 "nodir" nodir/x.gif data show b.h5 -o nodir/x.gif
check "no temporary files left" test -z "$(stray_tmp)$(find "$W" -name '*.tmp*' | head -1)"
finish
