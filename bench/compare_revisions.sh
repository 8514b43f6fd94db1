#!/usr/bin/env bash
# bench/compare_revisions.sh - the same nf fit runs with two builds of nf, side by side:
#   1. parameters: every run's model (parameters, state, Adam moments, best parameters, validation
#      history) must be bit-identical between the two builds (same seed, same thread count);
#   2. speed: training steps per second of each build, alternated run by run, and their ratio.
#
# usage: bench/compare_revisions.sh [REV]      (REV: a git revision to compare with; default HEAD~1)
#        NF_OLD=/path/to/old/nf NF_NEW=/path/to/new/nf bench/compare_revisions.sh
#        CMP_THREADS=2 ...     (threads of every fit; default 1)
# The previous revision is built in a temporary git worktree.  Needs /usr/bin/python3 with h5py and
# numpy (make bench installs them).  Prints one line per configuration; exits 1 if any differ.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-HEAD~1}
THREADS=${CMP_THREADS:-1}
WORK=$(mktemp -d /tmp/nf_cmp.XXXXXX)
trap 'rm -rf "$WORK"; git worktree remove --force "$WORK/old-tree" 2>/dev/null || true' EXIT
NEW=${NF_NEW:-build/float/nf}
if [ -z "${NF_OLD:-}" ]; then
    git worktree add --detach "$WORK/old-tree" "$REV" > /dev/null 2>&1
    make -C "$WORK/old-tree" -j2 all > "$WORK/old-build.log" 2>&1 || { echo "building $REV failed: $WORK/old-build.log"; exit 1; }
    OLD=$WORK/old-tree/build/float/nf
else
    OLD=$NF_OLD
fi
[ -x "$NEW" ] || make -j2 all > /dev/null
NEW=$(realpath "$NEW")
PY=/usr/bin/python3
echo "old: $OLD ($REV)"
echo "new: $NEW ($(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'))"
cd "$WORK"
"$NEW" data make checkerboard -n 100000 --seed 1 -o cb.h5 > /dev/null
"$NEW" data make gmm --dim 8 -n 20000 --seed 1 -o g8.h5 > /dev/null
"$NEW" data make moons -n 5000 --seed 4 -o moons.h5 > /dev/null
$PY - <<'EOF'
import h5py, numpy as np
r = np.random.default_rng(3)
c = r.normal(size=(6000, 2))
x = np.stack([c[:, 0] * 0.7 + r.normal(size=6000) * 0.3, np.sin(c[:, 1]) + 0.2 * r.normal(size=6000), r.normal(size=6000)], 1)
with h5py.File("cond.h5", "w") as f:
    f["x"] = x; f["context"] = c
with h5py.File("condval.h5", "w") as f:
    f["x"] = x[:500] + 0.01; f["context"] = c[:500]
EOF
# name | data | flags (the demo's default flow; the bench's presets; validation, early stopping, epochs, context)
CONFIGS=(
  "demo|cb.h5|--steps 600"
  "maf|g8.h5|--flow maf --steps 300 --batch 256"
  "realnvp|g8.h5|--flow realnvp --steps 300 --val-frac 0.2 --patience 3 --eval-every 50"
  "nsf-ar|moons.h5|--flow nsf-ar --steps 200 --epochs 3"
  "maf-context|cond.h5|--flow maf --steps 300 --val condval.h5"
  "nsf-context|cond.h5|--flow nsf-coupling --layers 3 --steps 200"
)
fail=0
for cfg in "${CONFIGS[@]}"; do
    IFS='|' read -r name data flags <<< "$cfg"
    rates=()
    for rep in 1 2; do
        for which in old new; do
            bin=$OLD; [ $which = new ] && bin=$NEW
            rm -f "${which}_$name.h5" # (nf fit refuses to replace a model without --force, which old builds lack)
            # shellcheck disable=SC2086
            "$bin" fit "$data" $flags -o "${which}_$name.h5" --threads "$THREADS" --checkpoint-every 0 --quiet
            rates+=("$($PY -c "import h5py; f = h5py.File('${which}_$name.h5'); c = f['/training/checkpoint']; print(c.attrs['step'] / c.attrs['seconds'])")")
        done
    done
    $PY - "$name" "${rates[@]}" <<'EOF' || fail=1
import sys, h5py, numpy as np
name = sys.argv[1]
r = [float(v) for v in sys.argv[2:]]
old, new = (r[0] + r[2]) / 2, (r[1] + r[3]) / 2
a, b = h5py.File(f"old_{name}.h5", "r"), h5py.File(f"new_{name}.h5", "r")
same = True
for g in ["/model/params/value", "/model/state/value", "/training/checkpoint/current/m",
          "/training/checkpoint/current/v", "/training/checkpoint/best/value"]:
    same &= a[g].shape == b[g].shape and np.array_equal(a[g][...], b[g][...])
h = "/training/checkpoint/history/val_log_likelihood"
same &= np.array_equal(a[h][...], b[h][...], equal_nan=True)
print(f"{name:12s} parameters {'identical' if same else 'DIFFER':9s} ({a['/model/params/value'].size} values)  "
      f"steps/s old {old:8.1f}  new {new:8.1f}  new/old {new / old:.3f}")
sys.exit(0 if same else 1)
EOF
done
exit $fail
