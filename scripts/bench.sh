#!/usr/bin/env bash
# Runs the benchmarks; each reports a ratio against a baseline measured in
# the same run.
set -euo pipefail
BUILD=${1:-build}
echo "== contract: decode + validate + identify vs bare JSON parse"
"$BUILD/reshard_bench_contract" "${@:2}"
