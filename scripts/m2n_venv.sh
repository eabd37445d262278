#!/usr/bin/env bash
# The NCCL M2N backend's build-only venv (cmake/m2n.cmake, docs/gpu.md):
# NVIDIA's nccl-extensions wheel (nccl_m2n.h, libnccl_m2n.so) and the
# nvidia-nccl-cu13 wheel (NCCL headers and library new enough for it) in a
# venv over Debian's python3, without their Python dependencies: the build
# reads only their headers and libraries. Nothing here runs on a GPU.
#
#   scripts/m2n_venv.sh [VENV]    (default build/m2n-venv)
#
# PIP_FIND_LINKS and the other pip variables pass through (a folder of the
# wheels already downloaded, for example).
set -euo pipefail
venv="${1:-build/m2n-venv}"
python="${RESHARD_PYTHON:-/usr/bin/python3}"
if [[ -f "$venv/.m2n-installed" ]]; then
  echo "m2n venv: $venv is ready"
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
  nccl-extensions==0.1.0 nvidia-nccl-cu13==2.32.6
touch "$venv/.m2n-installed"
echo "m2n venv: nccl-extensions and nvidia-nccl-cu13 in $venv" \
  "(configure again to build the NCCL M2N backend)"
