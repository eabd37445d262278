#!/usr/bin/env bash
# Runs every libFuzzer target of BUILD (default build-asan) for
# FUZZ_SECONDS (default 30) each, JOBS (default: the cores) at a time, on
# a scratch copy of its checked-in seed corpus fuzz/corpus/<target>/ (new
# inputs found during the run never touch the checked-in corpus). A crash,
# leak, sanitizer report, property failure, timeout (FUZZ_TIMEOUT s per
# input, default 10) or out-of-memory fails the run; the offending input
# is kept under $BUILD/fuzz-artifacts/<target>/ and its reproducer command
# is printed.
#
# Usage: scripts/fuzz.sh [BUILD] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-asan}
shift || true
SECONDS_EACH=${FUZZ_SECONDS:-30}
TIMEOUT=${FUZZ_TIMEOUT:-10}
PARALLEL=${JOBS:-$(nproc)}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # Every target the tree configured (fuzz/CMakeLists.txt writes the list).
  if [ ! -f "$BUILD/fuzz/targets.txt" ]; then
    echo "fuzz: $BUILD has no fuzz targets (configure with -DRESHARD_FUZZ=ON)" >&2
    exit 1
  fi
  mapfile -t targets <"$BUILD/fuzz/targets.txt"
  for d in fuzz/corpus/*/; do
    grep -qx "$(basename "$d")" "$BUILD/fuzz/targets.txt" ||
      echo "fuzz: corpus $d has no target in $BUILD; skipped"
  done
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/reshard-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: a libFuzzer run on its scratch corpus; its verdict goes to
# $scratch/<target>.rc (0: passed) and its report to stdout.
run_target() {
  local t=$1 bin="$BUILD/fuzz/$1" start rc runs
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin not built" >&2
    echo 1 >"$scratch/$t.rc"
    return
  fi
  if [ ! -d "fuzz/corpus/$t" ]; then
    echo "fuzz: $t has no seed corpus fuzz/corpus/$t" >&2
    echo 1 >"$scratch/$t.rc"
    return
  fi
  mkdir -p "$scratch/$t" "$BUILD/fuzz-artifacts/$t"
  cp fuzz/corpus/"$t"/* "$scratch/$t/"
  start=$(date +%s)
  # -rss_limit_mb: the decoders hold inputs of a few KB; 2 GB is generous
  # and keeps a runaway allocation a finding rather than a stuck machine.
  "$bin" -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT" \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$BUILD/fuzz-artifacts/$t/" \
    "$scratch/$t" >"$scratch/$t.log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" |
    grep -o '[0-9]*$')
  echo "fuzz: $t: ${runs:-0} inputs in $(($(date +%s) - start)) s, rc=$rc"
  if [ $rc -ne 0 ]; then
    tail -n 60 "$scratch/$t.log" >&2
    for a in "$BUILD/fuzz-artifacts/$t"/*; do
      [ -e "$a" ] && echo "fuzz: reproduce with: $bin $a" >&2
    done
  fi
  echo "$rc" >"$scratch/$t.rc"
}

# Targets run JOBS at a time (each fuzzer is one process on one core), so
# the pass takes about targets / JOBS x FUZZ_SECONDS.
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
  run_target "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  [ "$(cat "$scratch/$t.rc" 2>/dev/null)" = 0 ] || failed+=("$t")
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets passed"
