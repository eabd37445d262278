#!/usr/bin/env bash
# Installs the Debian packages reshard needs. As root it installs what is
# missing; otherwise it prints the exact apt-get line and fails.
set -euo pipefail
PACKAGES=(cmake ninja-build g++ python3 libssl-dev libsimdjson-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev pkg-config
  libucx-dev ucx-utils libxxhash-dev
  # RE2: config.json's `ignore` expressions, matched in linear time.
  libre2-dev
  # The Redis backend (hiredis), and the private servers its tests start.
  libhiredis-dev redis-server redis-tools
  # The Python package: built against Debian's interpreter.
  python3-dev pybind11-dev libdlpack-dev python3-numpy python3-torch python3-pytest
  # tqdm over progress callbacks (python/tests/test_progress.py); venv for
  # `pip install .` into a venv that sees Debian's packages (.ci/run).
  python3-tqdm python3-venv
  # make check: clang with its sanitizer and libFuzzer runtimes, and
  # llvm-symbolizer for readable sanitizer reports.
  clang libclang-rt-14-dev llvm)
# The plan report's browser test (ctest plan_report_browser) and benchmark:
# headless Chromium driven over the DevTools protocol. Needed by `make test`
# and `make bench`; RESHARD_NO_BROWSER=1 leaves them out (the test then
# reports itself skipped).
if [ "${RESHARD_NO_BROWSER:-0}" != 1 ]; then
  PACKAGES+=(chromium python3-websocket)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "bootstrap: missing Debian packages; run:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
