#!/usr/bin/env bash
# `make check`: the sanitizer and fuzzing passes of CI (docs/reliability.md).
#
#   1. build-asan (clang, AddressSanitizer + UndefinedBehaviorSanitizer,
#      LeakSanitizer, libFuzzer coverage): the whole unit-test binary, then
#   2. build-tsan (clang, ThreadSanitizer): the concurrency suites, then
#   3. every fuzz target for FUZZ_SECONDS each (scripts/fuzz.sh).
#
# Any sanitizer report aborts the process under test (no recovery), so it
# fails the pass. Environment: JOBS (build parallelism), FUZZ_SECONDS,
# CHECK_PASSES (default "asan tsan fuzz"), TSAN_TESTS (gtest filter).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PASSES=${CHECK_PASSES:-asan tsan fuzz}
# The suites with threads or processes sharing memory, records or files:
# local transport, the self-test (local transport, parallel memcpy), live
# sessions, store races and crashes, the fs backend, multi-process uploads,
# and the placement suites (large documents decode on two threads, large
# placements hash their identity on a second thread), and checkpoint loads
# and writes (the ranged loader copies out on a helper thread; writers in
# several processes).
TSAN_TESTS=${TSAN_TESTS:-'LocalTransportTest.*:ReshardTest.*:CopyRegionTest.*:SelfTestTest.*:LiveSessionTest.*:LiveFaultTest.*:StandingSessionTest.*:LiveRecoveryTest.Flipped*:LiveRecoveryTest.AFailed*:LiveRecoveryTest.VersionTags*:StoreCrash*:FsObjectStore*:DirectoryRecordStore*:*ObjectStoreConformance*:WeightStoreMultiProcessTest.*:PlacementWireTest.*:PlacementManifestTest.*:HfCheckpointTest.*:HfStoreBridgeTest.*:CheckpointWriterTest.*:CanonicalPartsTest.*:*StagedWindowsSharedByTwoThreads*:*DirectReadGroupsSharedByTwoThreads*:ClaimedRunsTest.*:PlannerOracleTest.*:StoredPlanTest.*:*Race*:*Concurren*'}
SUPP=$PWD/scripts/sanitizers
# -O1 with line tables: sanitizer reports with file:line, at less
# compile time than the default -O2 -g.
FLAGS="-O1 -gline-tables-only"

# Runs the unit-test binary $1 as JOBS gtest shards at once (every test
# runs in exactly one shard; the tests already run side by side under
# ctest, so they share no fixed ports, files or servers), further gtest
# flags after it. Fails if any shard fails, printing that shard's output.
run_shards() {
  local bin=$1 logs pids=() rc=0 i
  shift
  logs=$(mktemp -d "${TMPDIR:-/tmp}/reshard-check.XXXXXX")
  for ((i = 0; i < JOBS; i++)); do
    GTEST_TOTAL_SHARDS=$JOBS GTEST_SHARD_INDEX=$i "$bin" --gtest_brief=1 \
      "$@" >"$logs/$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      grep -E '^\[  (PASSED|SKIPPED) ' "$logs/$i.log" | sed "s/^/shard $i: /"
    else
      rc=1
      echo "check: shard $i of $bin failed:" >&2
      cat "$logs/$i.log" >&2
    fi
  done
  rm -rf "$logs"
  return $rc
}

timings=()
stamp() { timings+=("$1: $(($(date +%s) - $2)) s"); }

configure() {  # tree, extra cmake args...
  local tree=$1
  shift
  [ -f "$tree/build.ninja" ] && return 0
  cmake -S . -B "$tree" -G Ninja -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DRESHARD_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$FLAGS" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$FLAGS" "$@" >/dev/null
}

# UCX's memory hooks patch malloc/mmap; under a sanitizer the sanitizer
# owns the allocator, so the hooks stay off (UCX falls back to its
# non-hooked registration cache).
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none

for pass in $PASSES; do
  case $pass in
    asan)
      t0=$(date +%s)
      configure build-asan -DRESHARD_SANITIZE=address,undefined \
        -DRESHARD_FUZZ=ON
      cmake --build build-asan -j "$JOBS" --target reshard_tests \
        reshard_fuzzers
      stamp "asan build (unit tests + fuzz targets)" "$t0"
      t0=$(date +%s)
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
        LSAN_OPTIONS=suppressions=$SUPP/lsan.supp:print_suppressions=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$SUPP/ubsan.supp \
        run_shards build-asan/reshard_tests
      stamp "asan+ubsan unit tests" "$t0"
      ;;
    tsan)
      t0=$(date +%s)
      configure build-tsan -DRESHARD_SANITIZE=thread
      cmake --build build-tsan -j "$JOBS" --target reshard_tests
      stamp "tsan build (unit tests)" "$t0"
      t0=$(date +%s)
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPP/tsan.supp \
        run_shards build-tsan/reshard_tests --gtest_filter="$TSAN_TESTS"
      stamp "tsan concurrency tests" "$t0"
      ;;
    fuzz)
      t0=$(date +%s)
      configure build-asan -DRESHARD_SANITIZE=address,undefined \
        -DRESHARD_FUZZ=ON
      cmake --build build-asan -j "$JOBS" --target reshard_fuzzers
      scripts/fuzz.sh build-asan
      stamp "fuzz (${FUZZ_SECONDS:-30} s per target)" "$t0"
      ;;
    *)
      echo "check: unknown pass $pass" >&2
      exit 2
      ;;
  esac
done
printf 'check: %s\n' "${timings[@]}"
