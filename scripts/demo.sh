#!/usr/bin/env bash
# The main job on the embedded defaults: validate a trainer layout and a
# rollout layout of the same MoE model and print their identities.
set -euo pipefail
BUILD=${1:-build}
R="$BUILD/reshard"
SRC=examples/placements/moe_tp4_pp2_ep8_dp2.json
DST=examples/placements/moe_tp8_pp4_ep2_dp4.json
for f in "$SRC" "$DST"; do
  echo "== reshard validate $f"
  "$R" validate "$f"
  # The example files are canonical: canonicalize must reproduce them.
  if ! cmp -s <("$R" canonicalize "$f" | head -c -1) "$f"; then
    echo "demo: $f is not byte-identical after canonicalize" >&2
    exit 1
  fi
done
echo "== a tampered copy fails closed"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
sed "0,/\"nbytes\":16/s//\"nbytes\":15/" "$DST" > "$tmp"
if "$R" validate "$tmp"; then
  echo "demo: tampered placement was accepted" >&2
  exit 1
fi
echo "demo: ok"
