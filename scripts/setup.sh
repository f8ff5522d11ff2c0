#!/usr/bin/env bash
# From a fresh clone to a built tree: installs the Debian packages, configures and builds into
# build/ (the CUDA backend too when nvcc is found: HYBRID_CUDA=AUTO; override with e.g.
# HYBRID_CUDA=OFF scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA="${HYBRID_CUDA:-AUTO}"
cmake --build build --parallel "$(nproc)"
