#!/usr/bin/env bash
# Install the Debian packages nf needs to build and test, or say exactly how.
# Usage: scripts/deps.sh [bench]   (bench adds the PyTorch reference, ~630 MB, and GNU time for
#                                    the memory measurement)
set -u
pkgs="build-essential pkg-config libgsl-dev libopenblas-dev libfftw3-dev libhdf5-dev
      check libcairo2-dev fonts-dejavu-core libgif-dev zlib1g-dev libopenmpi-dev openmpi-bin
      clang libclang-rt-dev libomp-dev valgrind procps"
# (the last line is for the tests: clang's libFuzzer and ThreadSanitizer with OpenMP's Archer tool,
#  valgrind for hardening.sh, pgrep for mpi.sh; without them those checks are skipped, not run)
if [ "${1:-}" = bench ]; then
  pkgs="$pkgs python3-torch python3-numpy python3-h5py time"
fi
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "nf: installing missing packages:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || true
  apt-get install -y -qq --no-install-recommends $missing >&2 || {
    echo "nf: apt-get install failed for:$missing" >&2; exit 1; }
else
  echo "nf: missing Debian packages:$missing" >&2
  echo "nf: run as root:  apt-get update && apt-get install -y$missing" >&2
  exit 1
fi
