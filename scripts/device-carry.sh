#!/usr/bin/env bash
# Prepares .carry/ for a quick GPU run without building there: the CUDA build of this machine
# (build/, sm_90a; glibc 2.36 binaries run on the GPU machine's 2.39) with its test binaries
# stripped, small enough to travel with the working tree (the device tool's `carry: [".carry"]`).
# The GPU machine's checkout sits at the same path, so the tests find tests/data as here.
# The binaries travel xz-compressed:
#   scripts/device-carry.sh
#   (on the GPU machine) tar xJf .carry/bin.tar.xz -C .carry && .carry/hybrid-ops test -b cuda
# CARRY_DIR (default .carry) names the folder: `CARRY_DIR=.carry-base scripts/device-carry.sh` on
# one commit, then `scripts/device-carry.sh` on another, carries both builds for device-quick's
# `ab` section (the same-run comparison of a change that has no switch).
# CUDNN=1 builds with -DHYBRID_CUDNN=ON (attn_prefill.cudnn; fetches the frontend headers when
# they are missing) into build-cudnn instead; the binaries then need libcudnn.so.9 on the GPU
# machine's loader path (scripts/device-quick.sh finds torch's nvidia-cudnn-cu13 when the CUDA
# install has none).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
cudnn_flag=-DHYBRID_CUDNN=OFF
if [ "${CUDNN:-0}" = 1 ]; then
  build=build-cudnn
  cudnn_flag=-DHYBRID_CUDNN=ON
  [ -e third_party/cudnn-frontend/include/cudnn_frontend.h ] || scripts/fetch-cudnn-frontend.sh
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  "$cudnn_flag" >/dev/null
cmake --build "$build" --parallel "$(nproc)"
dir=${CARRY_DIR:-.carry}
dir=${dir%/}
exclude=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$exclude")"
grep -qx "/$dir/" "$exclude" 2>/dev/null || echo "/$dir/" >> "$exclude"
rm -rf "$dir" && mkdir -p "$dir"
# The working tree travels with .carry and must stay under 64 MiB: the tracked files are ~23 MB, so
# the binaries get ~40 MB. CARRY_BINS picks them (default: the ops tool,
# the unit tests and the C library for compare_peers.py; add `hybrid` for the CLI when one of the
# others can stay behind).
declare -A path=([hybrid-ops]=$build/tools/hybrid-ops/hybrid-ops [hybrid_unit_tests]=$build/tests/hybrid_unit_tests
                 [libhybrid_c.so]=$build/libhybrid_c.so [hybrid]=$build/tools/hybrid/hybrid)
bins=(${CARRY_BINS:-hybrid-ops hybrid_unit_tests libhybrid_c.so})
for b in "${bins[@]}"; do strip -o "$dir/$b" "${path[$b]}"; done
# xz -9e with a 256 MiB dictionary spans the binaries (64 MiB spans three; four gave 61 MB), which share most of their device code (session
# 5's three: 47 MB at -5, 17 MB at -9e; ~2 min on 2 cores).
(cd "$dir" && tar cf - "${bins[@]}" | xz --lzma2=preset=9e,dict=256MiB -T0 > bin.tar.xz)
(cd "$dir" && rm -f "${bins[@]}")
du -sh "$dir"
