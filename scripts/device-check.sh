#!/usr/bin/env bash
# On a GPU machine: build for sm_90a, run every CUDA test and the benchmarks. Logs go to $OUT when
# it is set (the device tool brings them back), else to ./device-check-logs.
#   scripts/device-check.sh [hybrid-ops -o selection for perf]
# Environment: SANITIZE_OPS (a -o selection for compute-sanitizer; default all CUDA cases),
# SKIP_SANITIZE=1, PEERS (compare_peers.py --only selection), TEST_OPS (a -o selection for the
# CUDA correctness cases; default all), SKIP_PERF=1, MAMBA_SRC (a state-spaces/mamba source folder
# for the ssm_prefill / ssm_decode comparisons; its imports einops and packaging go in .whl/).
# CARRIED=1: no build; use the binaries that scripts/device-carry.sh packed into .carry/ (the
# device tool's carry: [".carry"]); the unit tests run from build/ as ctest would run them.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=${OUT:-$PWD/device-check-logs}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$LOGS/gpu.txt"
status=0
if [ -n "${CARRIED:-}" ]; then
  tar xJf .carry/bin.tar.xz -C .carry || exit 1
  OPS=$PWD/.carry/hybrid-ops
  LIB=$PWD/.carry/libhybrid_c.so
  mkdir -p build
  (cd build && HYBRID_CLI=$PWD/../.carry/hybrid ../.carry/hybrid_unit_tests ${UNIT_FILTER:+--gtest_filter="$UNIT_FILTER"}) 2>&1 |
    tee "$LOGS/unit.txt" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests ran" || true
  grep -q "FAILED" "$LOGS/unit.txt" && status=1
else
  if [ ! -f build-cuda/build.ninja ]; then
    cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a 2>&1 | tail -3
  fi
  if ! cmake --build build-cuda --parallel "$(nproc)" > "$LOGS/build.txt" 2>&1; then
    grep -E "error" -A3 "$LOGS/build.txt" | head -40
    echo "device-check: the build failed (full log: build.txt)"
    exit 1
  fi
  OPS=$PWD/build-cuda/tools/hybrid-ops/hybrid-ops
  LIB=$PWD/build-cuda/libhybrid_c.so
  ctest --test-dir build-cuda --output-on-failure 2>&1 | tee "$LOGS/ctest.txt" || status=1
fi
test_sel=()
if [ -n "${TEST_OPS:-}" ]; then test_sel=(-o "$TEST_OPS"); fi
"$OPS" test -b cuda -v "${test_sel[@]}" > "$LOGS/ops-cuda.txt" 2>&1 || status=1
grep -E "^  (FAIL|SKIP)|passed, " "$LOGS/ops-cuda.txt" | tail -40
# compute-sanitizer over the CUDA cases (memcheck: out-of-bounds and misaligned accesses; racecheck:
# shared-memory races). SANITIZE_OPS narrows the cases (a hybrid-ops -o selection).
if [ -z "${SKIP_SANITIZE:-}" ] && command -v compute-sanitizer >/dev/null; then
  sel=()
  if [ -n "${SANITIZE_OPS:-}" ]; then sel=(-o "$SANITIZE_OPS"); fi
  for tool in memcheck racecheck; do
    timeout "${SANITIZE_TIMEOUT:-600}" compute-sanitizer --tool $tool --error-exitcode 3 \
      "$OPS" test -b cuda "${sel[@]}" 2>&1 | tail -4 | tee "$LOGS/sanitizer-$tool.txt" || status=1
  done
fi
perf_args=()
if [ $# -gt 0 ]; then perf_args=(-o "$1"); fi
if [ -z "${SKIP_PERF:-}" ]; then
  "$OPS" perf -b cuda "${perf_args[@]}" 2>&1 | tee "$LOGS/perf-cuda.txt" || status=1
fi
# Peers beside hybrid in one process (scripts/compare_peers.py), when their wheels were carried in
# .whl/ (see the device README: pip download on the development machine, `carry: [".whl"]`).
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  PYTHONUNBUFFERED=1 python3 scripts/compare_peers.py --lib "$LIB" \
    ${PEERS:+--only "$PEERS"} ${MAMBA_SRC:+--mamba-src "$MAMBA_SRC"} 2>&1 | tee "$LOGS/peers.txt" || status=1
fi
exit $status
