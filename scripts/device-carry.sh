#!/usr/bin/env bash
# Prepares .carry/ for a quick GPU run without building there: the CUDA build of this machine
# (build/, sm_90a; glibc 2.36 binaries run on the GPU machine's 2.39) with its test binaries
# stripped, small enough to travel with the working tree (the device tool's `carry: [".carry"]`).
# The GPU machine's checkout sits at the same path, so the tests find tests/data as here.
# The binaries travel xz-compressed (the three together are ~75 MB raw, over the tree's 64 MiB):
#   scripts/device-carry.sh
#   (on the GPU machine) tar xJf .carry/bin.tar.xz -C .carry && .carry/hybrid-ops test -b cuda
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build build --parallel "$(nproc)"
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
rm -rf .carry && mkdir -p .carry
strip -o .carry/hybrid_unit_tests build/tests/hybrid_unit_tests
strip -o .carry/hybrid-ops build/tools/hybrid-ops/hybrid-ops
strip -o .carry/libhybrid_c.so build/libhybrid_c.so
strip -o .carry/hybrid build/tools/hybrid/hybrid
(cd .carry && tar cf - hybrid_unit_tests hybrid-ops libhybrid_c.so hybrid | xz -5 -T0 > bin.tar.xz)
rm -f .carry/hybrid_unit_tests .carry/hybrid-ops .carry/libhybrid_c.so .carry/hybrid
du -sh .carry
