#!/usr/bin/env bash
# The main job on the embedded defaults: lay a small MoE out as a trainer
# (TP4/PP2/EP8/DP2) and as a rollout engine (TP8/PP4/EP2/DP4), validate both
# layouts, plan the reshard, then reshard real host buffers in memory and
# check every target byte, next to this machine's memcpy bandwidth; then the
# same reshard live between 4 processes over UCX (2 trainer ranks, 2 rollout
# ranks), over shared memory and over TCP on loopback; then through the
# weight store (upload, commit, load into the other layout, verify).
set -euo pipefail
BUILD=${1:-build}
R="$BUILD/reshard"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
MODEL=examples/models/small-moe.json
THREADS=$(nproc)
echo "== reshard gen: $MODEL as TP4/PP2/EP8/DP2 and TP8/PP4/EP2/DP4"
"$R" gen --model "$MODEL" --tp 4 --pp 2 --ep 8 --dp 2 -o "$out/train.json"
"$R" gen --model "$MODEL" --tp 8 --pp 4 --ep 2 --dp 4 -o "$out/rollout.json"
for f in "$out/train.json" "$out/rollout.json"; do
  echo "== reshard validate $(basename "$f")"
  "$R" validate "$f"
done
echo "== reshard plan train.json rollout.json"
"$R" plan "$out/train.json" "$out/rollout.json"
echo "== reshard selftest train.json rollout.json --threads $THREADS"
"$R" selftest --threads "$THREADS" "$out/train.json" "$out/rollout.json"
echo "== reshard selftest --transport ucx --procs 4 (shared memory)"
"$R" selftest --transport ucx --procs 4 "$out/train.json" "$out/rollout.json"
echo "== reshard selftest --transport ucx --procs 4 --ucx-tls tcp (loopback)"
"$R" selftest --transport ucx --procs 4 --ucx-tls tcp --ucx-net-devices lo \
  "$out/train.json" "$out/rollout.json"
echo "== reshard selftest --via-store: upload the trainer layout, commit, load as rollout"
"$R" selftest --via-store "fs://$out/store" --keep-revision "$out/train.json" "$out/rollout.json"
echo "== reshard store ls / verify"
"$R" store ls "fs://$out/store"
"$R" store verify "fs://$out/store"
echo "== a flipped payload byte fails verification"
payload=$(find "$out/store" -path '*/payload/*' -type f -print -quit)
printf '\x5a' | dd of="$payload" bs=1 seek=7 count=1 conv=notrunc status=none
if "$R" store verify "fs://$out/store"; then
  echo "demo: corrupted payload was accepted" >&2
  exit 1
fi
echo "== a tampered placement fails closed"
sed "0,/\"nbytes\":[0-9]*/s//\"nbytes\":1/" "$out/rollout.json" > "$out/bad.json"
if "$R" validate "$out/bad.json"; then
  echo "demo: tampered placement was accepted" >&2
  exit 1
fi
echo "== reshard demo: the same three paths from the binary alone"
"$R" demo
echo "demo: ok"
