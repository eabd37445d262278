#!/usr/bin/env bash
# `pip install .` as a user runs it, from a fresh clone of HEAD into a new
# venv that sees Debian's packages (numpy, torch, pybind11 come from
# Debian; pip downloads only the build backend, scikit-build-core), then
# `import reshard`, a plan through it and `python3 -m reshard`.
#
#   scripts/pip_check.sh [WORK_DIR]      (default: a temporary directory)
#
# Builds only the extension and the CLI (pyproject.toml) with
# CMAKE_BUILD_PARALLEL_LEVEL jobs (default 2). Run by .ci/run after make
# check.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
rm -rf "$work/clone" "$work/venv"
git clone -q "$root" "$work/clone"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
start=$(date +%s)
"$work/venv/bin/pip" install --quiet --no-cache-dir "$work/clone"
echo "pip_check: pip install . took $(( $(date +%s) - start )) s"
cd "$work"  # not the source tree: the installed package is imported
"$work/venv/bin/python" - "$root/tests/data/scenarios" <<'PY'
import os, sys
import reshard
assert os.path.dirname(reshard.__file__).startswith(sys.prefix), reshard.__file__
d = sys.argv[1]
load = lambda n: reshard.Placement.from_json(open(os.path.join(d, n + ".json")).read())
src = load("tp_split_4_to_8_source")
assert src.placement_id and len(src.fragments) > 0
print("pip_check: import reshard from", os.path.dirname(reshard.__file__))
PY
"$work/venv/bin/python" -m reshard validate \
  "$root/tests/data/scenarios/tp_split_4_to_8_source.json" >/dev/null
"$work/venv/bin/reshard" --help >/dev/null
echo "pip_check: installed, imported and ran from the venv"
