#!/bin/sh
# make conformance: reshard against vLLM's own loader and transformers'
# own checkpoints (docs/engines.md, "Conformance against vLLM").
#
# Usage: tests/conformance/run.sh BUILD_DIR [driver flags...]
# Creates (or reuses) the venv $CONFORMANCE_DIR/venv from Debian's
# /usr/bin/python3 with vLLM and transformers from PyPI (several GB), then
# runs tests/conformance/conformance.py against BUILD_DIR/reshard. Results:
# $CONFORMANCE_DIR/results/{summary.md,cases.json,declared/}.
set -eu
build=${1:?usage: run.sh BUILD_DIR [flags]}
shift
dir=${CONFORMANCE_DIR:-build-conformance}
vllm=${CONFORMANCE_VLLM:-0.33.0}
transformers=${CONFORMANCE_TRANSFORMERS:-5.20.0}
py=$dir/venv/bin/python
mkdir -p "$dir"
if [ ! -x "$py" ]; then
  /usr/bin/python3 -m venv "$dir/venv"
fi
if ! "$py" -c "
import importlib.metadata as m, sys
sys.exit(m.version('vllm') != '$vllm' or m.version('transformers') != '$transformers')
" 2>/dev/null; then
  echo "conformance: installing vllm==$vllm transformers==$transformers into $dir/venv (log: $dir/pip.log)"
  "$py" -m pip install "vllm==$vllm" "transformers==$transformers" >"$dir/pip.log" 2>&1 \
    || { tail -20 "$dir/pip.log"; exit 2; }
fi
export VLLM_TARGET_DEVICE=cpu
exec "$py" tests/conformance/conformance.py --reshard "$build/reshard" \
  --work "$dir/work" --results "$dir/results" "$@"
