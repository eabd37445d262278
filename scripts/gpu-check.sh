#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, builds reshard with the
# CUDA backend, runs every `gpu` test (ctest -L gpu), the CUDA benchmark
# (reshard_bench_cuda: ratios against contiguous copies measured in the
# same run), the executor's emulation tests, and prints a summary to paste
# into docs/gpu.md (which paths ran on a GPU, with the date, and the
# benchmark's table). A benchmark goal not met is reported, not a
# failure; the benchmark failing to run is one. Meant to finish
# in well under 8 minutes on one GPU; needs the Debian packages of
# `make bootstrap` and the CUDA toolkit (nvcc on PATH).
#
#   scripts/gpu-check.sh [BUILD_DIR]     (default build-gpu)
set -uo pipefail
BUILD=${1:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
started=$(date +%s)
log() { printf '== %s\n' "$*"; }

log "machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  2>/dev/null || echo "nvidia-smi: not found"
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc: not found"

log "build (RESHARD_CUDA=ON)"
if ! cmake -S . -B "$BUILD" -DRESHARD_CUDA=ON -DRESHARD_BUILD_PYTHON=OFF \
  -DRESHARD_BUILD_BENCH=ON >"$BUILD.configure.log" 2>&1; then
  tail -30 "$BUILD.configure.log"
  echo "SUMMARY: configure failed"
  exit 1
fi
if ! cmake --build "$BUILD" -j"$JOBS" --target reshard_cli reshard_tests \
  reshard_gpu_tests reshard_bench_cuda >"$BUILD.build.log" 2>&1; then
  grep -E "error|Error" "$BUILD.build.log" | head -30
  echo "SUMMARY: build failed"
  exit 1
fi

log "reshard info --json"
"$BUILD/reshard" info --json

log "gpu tests (ctest -L gpu)"
ctest --test-dir "$BUILD" -L gpu --output-on-failure 2>&1 | tail -40
gpu_status=${PIPESTATUS[0]}
skipped=$(ctest --test-dir "$BUILD" -L gpu -N 2>/dev/null | grep -c "Test *#")

log "benchmark (reshard_bench_cuda --json)"
timeout 240 "$BUILD/reshard_bench_cuda" --json 2>&1 | tee "$BUILD.bench.log"
bench_status=${PIPESTATUS[0]}

log "the executor over the host emulation (no GPU needed)"
"$BUILD/reshard_tests" \
  --gtest_filter='CudaTransport*:CopyLowering*:HostDeviceApi*:CudaUnavailable*' \
  --gtest_brief=1 2>&1 | tail -5
emulation_status=${PIPESTATUS[0]}

log "summary"
echo "gpu tests: $skipped registered, ctest exit $gpu_status"
echo "emulation tests: exit $emulation_status"
echo "benchmark: exit $bench_status"
grep -E '^\|' "$BUILD.bench.log" || tail -1 "$BUILD.bench.log"
echo "seconds: $(( $(date +%s) - started ))"
if [[ $gpu_status -ne 0 || $emulation_status -ne 0 || $bench_status -ne 0 ]]
then
  echo "SUMMARY: FAILED"
  exit 1
fi
echo "SUMMARY: passed"
