#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, builds reshard with the
# CUDA backend (and the NCCL M2N plugin where its wheels are at hand),
# runs every `gpu` test (ctest -L gpu), the GPU benchmarks (ratios
# against baselines measured in the same run: reshard_bench_cuda,
# reshard_bench_cuda_ipc, reshard_bench_m2n), the executor's emulation
# tests, and prints a summary to paste into docs/gpu.md (which paths ran
# on a GPU, with the date, and the benchmarks' tables). A benchmark goal
# not met is reported, not a failure; a benchmark failing to run is one.
# Every step has a timeout and all of them share one budget (GPU_CHECK_
# SECONDS, default 440), so the check ends within 8 minutes on one GPU:
# the GPU steps first, then reshard_tests' build and the emulation tests
# in what is left (reported as not run when the time ran out).
# Needs the Debian packages of `make bootstrap` and the CUDA toolkit (nvcc
# on PATH); no network. Without a GPU it still builds and runs: the gpu
# tests report Skipped and each benchmark prints its no-device line.
#
#   scripts/gpu-check.sh [BUILD_DIR] [M2N_PATH]    (default build-gpu)
#
# M2N_PATH (or RESHARD_M2N_PATH): the NCCL M2N wheels for the plugin,
# either a venv or site-packages folder holding them installed (`make
# m2n-venv` makes build/m2n-venv), or a folder of the two .whl files
# (nccl-extensions, nvidia-nccl-cu13), installed offline into
# BUILD_DIR/m2n-venv. Without it BUILD_DIR/m2n-venv, then build/m2n-venv,
# are used where they exist; otherwise the plugin is not built and the
# M2N benchmark says so. JOBS sets the build's parallelism (default nproc).
# Each step's full output is kept in BUILD_DIR/gpu-check/.
set -uo pipefail
BUILD=${1:-build-gpu}
M2N_PATH=${2:-${RESHARD_M2N_PATH:-}}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
LOGS="$BUILD/gpu-check"  # every step's output, inside the build tree
mkdir -p "$LOGS"
started=$(date +%s)
deadline=$((started + ${GPU_CHECK_SECONDS:-440}))
log() { printf '== %s\n' "$*"; }
# Seconds for a step: at most CAP, leaving RESERVE for the steps after it
# (at least 5).
budget() {
  local left=$((deadline - $(date +%s) - $2))
  ((left > $1)) && left=$1
  ((left < 5)) && left=5
  echo "$left"
}
# What a step's output says it did: "ran", "not run (...)" or "FAILED".
outcome() {  # exit status, log file
  if [[ $1 -eq 124 ]]; then echo "FAILED (timed out)"
  elif [[ $1 -ne 0 ]]; then echo "FAILED (exit $1)"
  elif grep -q 'nothing measured' "$2"; then
    echo "not run ($(grep -o 'no CUDA device[^;]*\|this build has no [^(;]*' \
      "$2" | head -1 | sed 's/ *$//'))"
  else echo "ran"
  fi
}

log "machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  2>/dev/null || echo "nvidia-smi: not found"
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc: not found"

log "NCCL M2N wheels"
m2n_root="$BUILD/m2n-venv"
if [[ -n "$M2N_PATH" ]] && compgen -G "$M2N_PATH/*.whl" >/dev/null; then
  PIP_NO_INDEX=1 PIP_FIND_LINKS="$M2N_PATH" timeout "$(budget 120 400)" \
    scripts/m2n_venv.sh "$m2n_root" || echo "m2n venv from $M2N_PATH failed"
elif [[ -n "$M2N_PATH" ]]; then
  m2n_root="$M2N_PATH"
elif [[ ! -d "$m2n_root" && -d build/m2n-venv ]]; then
  m2n_root=build/m2n-venv
fi
m2n_root=$(realpath -m "$m2n_root")
echo "RESHARD_M2N_ROOT=$m2n_root"

log "build (RESHARD_CUDA=ON, -j$JOBS)"
if ! timeout "$(budget 120 350)" cmake -S . -B "$BUILD" -DRESHARD_CUDA=ON \
  -DRESHARD_BUILD_PYTHON=OFF -DRESHARD_BUILD_BENCH=ON \
  -DRESHARD_M2N_ROOT="$m2n_root" >"$LOGS/configure.log" 2>&1; then
  tail -30 "$LOGS/configure.log"
  echo "SUMMARY: configure failed"
  exit 1
fi
m2n_line=$(grep -o 'NCCL M2N backend .*' "$LOGS/configure.log" | tail -1)
echo "$m2n_line"
# What runs on the GPU first; reshard_tests (the largest target, needed
# only for the emulation step) after the GPU steps, in the time left.
if ! timeout "$(budget 330 120)" cmake --build "$BUILD" -j"$JOBS" --target \
  reshard_cli reshard_gpu_tests reshard_bench_cuda reshard_bench_cuda_ipc \
  reshard_bench_m2n >"$LOGS/build.log" 2>&1; then
  grep -E "error|Error" "$LOGS/build.log" | head -30
  tail -3 "$LOGS/build.log"
  echo "SUMMARY: build failed (or ran out of its time)"
  exit 1
fi
# NCCL M2N needs NCCL 2.30.5 or newer, which the toolkit's libnccl.so.2
# may not be: the M2N test and benchmark load the wheel's first.
m2n_env=()
nccl_lib=$(ls -d "$m2n_root"/lib/python3*/site-packages/nvidia/nccl/lib \
  "$m2n_root"/nvidia/nccl/lib 2>/dev/null | head -1)
[[ -n "$nccl_lib" ]] &&
  m2n_env=(env "LD_LIBRARY_PATH=$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

log "reshard info --json"
"$BUILD/reshard" info --json

log "gpu tests (ctest -L gpu; M2nGpuTest with the wheel's NCCL)"
timeout "$(budget 120 90)" ctest --test-dir "$BUILD" -L gpu -E M2nGpuTest \
  --timeout 60 --output-on-failure >"$LOGS/gpu-tests.log" 2>&1
gpu_status=$?
timeout "$(budget 60 80)" "${m2n_env[@]}" ctest --test-dir "$BUILD" \
  -R M2nGpuTest --timeout 50 --output-on-failure >>"$LOGS/gpu-tests.log" 2>&1
m2n_test_status=$?
grep -E 'Test +#|tests passed|No tests' "$LOGS/gpu-tests.log" | tail -40

benches=(reshard_bench_cuda reshard_bench_cuda_ipc reshard_bench_m2n)
declare -A bench_status
for b in "${benches[@]}"; do
  log "benchmark ($b --json)"
  prefix=()
  reserve=30
  [[ $b == reshard_bench_cuda ]] && reserve=50
  if [[ $b == reshard_bench_m2n ]]; then
    prefix=("${m2n_env[@]}")
    reserve=15
  fi
  timeout "$(budget 90 "$reserve")" \
    "${prefix[@]}" "$BUILD/$b" --json >"$LOGS/$b.log" 2>&1
  bench_status[$b]=$?
  cat "$LOGS/$b.log"
done

log "the executor over the host emulation (no GPU needed)"
emulation="not run (reshard_tests not built in the time left)"
emulation_status=0
if timeout "$(budget 300 15)" cmake --build "$BUILD" -j"$JOBS" --target \
  reshard_tests >>"$LOGS/build.log" 2>&1; then
  timeout "$(budget 60 0)" "$BUILD/reshard_tests" \
    --gtest_filter='CudaTransport*:CopyLowering*:HostDeviceApi*:CudaUnavailable*' \
    --gtest_brief=1 2>&1 | tail -5
  emulation_status=${PIPESTATUS[0]}
  emulation="exit $emulation_status"
else
  echo "$emulation"
fi

log "summary"
gpu_ran=$(grep -hc ' Passed ' "$LOGS/gpu-tests.log")
gpu_skipped=$(grep -hc '\*\*\*Skipped' "$LOGS/gpu-tests.log")
gpu_failed=$(grep -hcE '\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception' \
  "$LOGS/gpu-tests.log")
echo "gpu tests: $gpu_ran passed, $gpu_skipped skipped, $gpu_failed failed" \
  "(ctest exit $gpu_status, M2nGpuTest exit $m2n_test_status)"
echo "NCCL M2N plugin: ${m2n_line:-unknown}" \
  "${nccl_lib:+(wheel NCCL for M2N: $nccl_lib)}"
for b in "${benches[@]}"; do
  echo "$b: $(outcome "${bench_status[$b]}" "$LOGS/$b.log")"
  grep -E '^\|' "$LOGS/$b.log"
done
echo "emulation tests: $emulation"
echo "seconds: $(($(date +%s) - started))"
failed=$((gpu_status || m2n_test_status || emulation_status))
for b in "${benches[@]}"; do ((bench_status[$b])) && failed=1; done
if ((failed)); then
  echo "SUMMARY: FAILED"
  exit 1
fi
echo "SUMMARY: passed"
