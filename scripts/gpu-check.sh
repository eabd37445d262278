#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, builds reshard with the
# CUDA backend, runs every `gpu` test (ctest -L gpu), the executor's
# emulation tests beside them, and prints a summary to paste into
# docs/gpu.md (which paths ran on a GPU, with the date). Meant to finish
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
  -DRESHARD_BUILD_BENCH=OFF >"$BUILD.configure.log" 2>&1; then
  tail -30 "$BUILD.configure.log"
  echo "SUMMARY: configure failed"
  exit 1
fi
if ! cmake --build "$BUILD" -j"$JOBS" --target reshard_cli reshard_tests \
  reshard_gpu_tests >"$BUILD.build.log" 2>&1; then
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

log "the executor over the host emulation (no GPU needed)"
"$BUILD/reshard_tests" \
  --gtest_filter='CudaTransport*:CopyLowering*:HostDeviceApi*:CudaUnavailable*' \
  --gtest_brief=1 2>&1 | tail -5
emulation_status=${PIPESTATUS[0]}

log "summary"
echo "gpu tests: $skipped registered, ctest exit $gpu_status"
echo "emulation tests: exit $emulation_status"
echo "seconds: $(( $(date +%s) - started ))"
if [[ $gpu_status -ne 0 || $emulation_status -ne 0 ]]; then
  echo "SUMMARY: FAILED"
  exit 1
fi
echo "SUMMARY: passed"
