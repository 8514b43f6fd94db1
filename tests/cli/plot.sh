#!/usr/bin/env bash
# nf plot: the pictures are written, have the expected size, are deterministic, and the heat map
# follows the model (block by block, against the data it was fit to); history and pair plots;
# errors leave no file.
. "$(dirname "$0")/lib.bash"

PNGSTAT=$T/pngstat
if ! gcc -O1 "$ROOT/tests/cli/pngstat.c" -o "$PNGSTAT" $(pkg-config --cflags --libs cairo) -lm 2>"$T/png.log"; then
    fail "build the PNG reader"; cat "$T/png.log"; finish
fi

nfrun data make moons -n 3000 --seed 4 -o moons.h5 >/dev/null 2>&1
FIT="--flow realnvp --layers 2 --hidden 16 --batch 256 --quiet --checkpoint-every 0"
nfrun fit moons.h5 $FIT --steps 60 --seed 1 -o a.h5 2>/dev/null
nfrun fit moons.h5 $FIT --steps 200 --seed 2 -o b.h5 2>/dev/null

nfrun plot a.h5 --data moons.h5 -o a.png 2>/dev/null
check "2-D plot: PNG of 1500 x 500 (three panels)" test "$("$PNGSTAT" a.png 2>/dev/null)" = "1500 500"
nfrun plot a.h5 --data moons.h5 -o a2.png 2>/dev/null
check "the same model and seed give the same picture, byte for byte" cmp -s a.png a2.png
nfrun plot b.h5 --data moons.h5 -o b.png 2>/dev/null
# panels are 500 pixels wide: the data histogram, the density heat map, the samples
hist=$("$PNGSTAT" a.png b.png 60 40 440 440)
heat=$("$PNGSTAT" a.png b.png 560 40 900 440)
check "another model changes the heat-map panel ($heat of its pixels differ)" awk -v f="$heat" 'BEGIN { exit !(f > 0.2) }'
check "the data histogram panel stays the same ($hist differ)" awk -v f="$hist" 'BEGIN { exit !(f == 0) }'
# The heat map is the model's density, where the model puts it: two blobs, 3:1, at (-2, 1) and
# (2, -1).  Its 10 x 10 block luminance correlates with the data histogram's drawn beside it
# (a flipped, transposed, shifted or constant map would not), and the map of a model of the
# data mirrored left to right, drawn next to the same data, does not.
awk 'BEGIN { srand(3); pi = 3.14159265358979; print "x0,x1"
    for (i = 0; i < 4000; i++) {
        a = rand() < 0.75
        z1 = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand()); z2 = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand())
        printf "%.5f,%.5f\n", (a ? -2 : 2) + 0.4 * z1, (a ? 1 : -1) + 0.4 * z2
        printf "%.5f,%.5f\n", (a ? 2 : -2) - 0.4 * z1, (a ? 1 : -1) + 0.4 * z2 > "mirror.csv"
    } }' >blobs.csv
sed -i '1i x0,x1' mirror.csv
nfrun data import blobs.csv -o blobs.h5 >/dev/null 2>&1
nfrun data import mirror.csv -o mirror.h5 >/dev/null 2>&1
nfrun fit blobs.h5 $FIT --steps 600 --lr 3e-3 --seed 1 -o blobs_m.h5 2>/dev/null
nfrun fit mirror.h5 $FIT --steps 600 --lr 3e-3 --seed 1 -o mirror_m.h5 2>/dev/null
nfrun plot blobs_m.h5 --data blobs.h5 -o blobs.png 2>/dev/null
nfrun plot mirror_m.h5 --data blobs.h5 -o mirror.png 2>/dev/null
cb=$("$PNGSTAT" corr blobs.png 0 0 500 500 500 0 1000 500 2>&1)
cm=$("$PNGSTAT" corr mirror.png 0 0 500 500 500 0 1000 500 2>&1)
check "the heat map follows the model: it correlates with the data histogram beside it ($cb > 0.8)" \
    awk -v c="$cb" 'BEGIN { exit !(c > 0.8) }'
check "a model of the data mirrored left to right, drawn next to the same data, does not ($cm < 0.2)" \
    awk -v c="$cm" 'BEGIN { exit !(c < 0.2) }'

nfrun plot a.h5 --data moons.h5 --log -o alog.png 2>/dev/null
logd=$("$PNGSTAT" a.png alog.png 560 40 900 440)
check "--log draws the log-density ($logd of the heat map differs)" awk -v f="$logd" 'BEGIN { exit !(f > 0.2) }'

nfrun plot --history b.h5 -o h.png 2>/dev/null
check "--history: PNG of 900 x 560" test "$("$PNGSTAT" h.png 2>/dev/null)" = "900 560"
nfrun fit moons.h5 $FIT --steps 20 --val-frac 0 --eval-every 5 -o nv.h5 2>/dev/null
nfrun plot --history nv.h5 -o hnv.png 2>/dev/null
check "--history of a fit without validation: the training curve alone (PNG of 900 x 560)" \
    test "$("$PNGSTAT" hnv.png 2>/dev/null)" = "900 560"

nfrun data make gmm --dim 4 -n 2000 --seed 3 -o g.h5 >/dev/null 2>&1
nfrun fit g.h5 $FIT --steps 30 -o g4.h5 2>/dev/null
nfrun plot g4.h5 --data g.h5 --dims 0,1,3 -o pair.png 2>/dev/null
check "pair plot of 3 chosen dimensions: PNG of 730 x 730" test "$("$PNGSTAT" pair.png 2>/dev/null)" = "730 730"

# errors: one line, non-zero exit, no file
nfrun plot moons.h5 -o bad.png 2>err.txt
st=$?
check "plotting a data file as a model: exit 1, one line naming the file, no PNG" \
    test $st -eq 1 -a "$(wc -l <err.txt)" -eq 1 -a ! -e bad.png -a -n "$(grep moons.h5 err.txt)"
nfrun plot a.h5 -o nodir/x.png 2>err.txt
st=$?
check "an output in a missing directory: exit 1, one line, no file" test $st -eq 1 -a "$(wc -l <err.txt)" -eq 1
nfrun plot g4.h5 --dims 0,9 -o bad.png 2>err.txt
st=$?
check "--dims out of range: refused, no file" test $st -ne 0 -a ! -e bad.png -a "$(wc -l <err.txt)" -eq 1
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
