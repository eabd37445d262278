#!/usr/bin/env bash
# Runs the benchmarks; each reports a ratio against a baseline measured in
# the same run (the bare JSON parse of the same bytes, or memcpy).
set -euo pipefail
BUILD=${1:-build}
# A build of an earlier commit: the planner cases are also run against it,
# interleaved, with ratios and a check that the plans are identical.
BASELINE=${2:-}
# The scale figures (contract, planner, fs store, engine reshard,
# conversions) are collected as JSON lines here; bench/bench_report.py
# turns them into the README's generated table (BENCH_README=FILE, default
# README.md; empty: print only).
BENCH_README=${BENCH_README-README.md}
PY=${RESHARD_PYTHON:-/usr/bin/python3}
RESULTS="$BUILD/bench-results"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
echo "== contract: decode + validate + identify vs bare JSON parse"
"$BUILD/reshard_bench_contract" --json | tee "$RESULTS/contract.json"
echo
echo "== planner: real-model layouts (validate = both sides from the wire)"
"$BUILD/reshard_bench_plan" --models examples/models --json |
  tee "$RESULTS/plan.jsonl"
echo
if [[ -n "$BASELINE" ]]; then
  echo "== planner against the baseline build $BASELINE (interleaved)"
  "$PY" bench/plan_ab.py "$BASELINE" "$BUILD" --models examples/models \
    --rounds 3 --json | tee "$RESULTS/plan_ab.jsonl"
  echo
fi
echo "== whole commands: reshard plan / validate on the Kimi-K2 pair vs a bare simdjson read + parse process (wall, peak RSS; 5 interleaved rounds)"
"$PY" bench/cli_bench.py --cli "$BUILD/reshard" --parse "$BUILD/reshard_bench_plan" \
  --models examples/models --rounds 5 --json | tee "$RESULTS/cli.jsonl"
echo
echo "== weight store (fs) vs sequential file write/read of the same bytes"
"$BUILD/reshard_bench_store" --runs 5 --json | tee "$RESULTS/store.jsonl"
echo
echo "== engine reshard Megatron TP2/EP2 -> vLLM TP4 (fused parameters) vs hf reshard of the same checkpoint (canonical TP4)"
"$PY" bench/engine_bench.py --cli "$BUILD/reshard" --rounds 5 --json |
  tee "$RESULTS/engine.jsonl"
echo
echo "== conversions: hf reshard --convert BF16 -> FP8 vs the same reshard without conversion; conversion kernels (one core) vs memcpy"
PYTHONPATH="$BUILD/python" "$PY" bench/convert_bench.py --cli "$BUILD/reshard" \
  --rounds 3 --json | tee "$RESULTS/convert.jsonl"
echo
echo "== scale figures (ratios to same-run baselines)"
"$PY" bench/bench_report.py "$RESULTS" ${BENCH_README:+--readme "$BENCH_README"}
echo
echo "== local executor vs memcpy"
"$BUILD/reshard_bench_local" --threads "$(nproc)"
echo
echo "== live executor over UCX vs ucx_perftest (same transport, same message size)"
"$BUILD/reshard_bench_live"
echo
echo "== Hugging Face checkpoint (4 GiB, generated) into TP4 vs sequential read of the same files"
"$BUILD/reshard_bench_hf"
echo
echo "== Python package vs the C++ CLI (plan time; 1 GiB local reshard between torch tensors vs reshard selftest)"
PYTHONPATH="$BUILD/python" "${RESHARD_PYTHON:-/usr/bin/python3}" bench/python_bench.py \
  --cli "$BUILD/reshard" --models examples/models
echo
echo "== standing live sessions (2 processes): fixed cost per update, bandwidth vs one contiguous region"
PYTHONPATH="$BUILD/python" "${RESHARD_PYTHON:-/usr/bin/python3}" bench/standing_bench.py \
  --cli "$BUILD/reshard"
echo
echo "== plan report: Kimi-K2 HTML size, write time vs plan --json, headless Chromium load vs the same bytes without script"
"${RESHARD_PYTHON:-/usr/bin/python3}" bench/plan_report_bench.py --cli "$BUILD/reshard" \
  --models examples/models
echo
echo "== weight store on Redis (1 GiB upload and load) vs a raw RESP client's SET/GET, same server, same value size"
PYTHONPATH="$BUILD/python" "${RESHARD_PYTHON:-/usr/bin/python3}" bench/redis_bench.py
