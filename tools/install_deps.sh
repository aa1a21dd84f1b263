#!/usr/bin/env bash
# Installs slowfast (editable) and its dependencies into the current Python.
#
# An installed torch (CPU or CUDA build) is kept as it is. Only when none is
# installed does this install the pinned CPU build, so that pip does not pull
# several GB of CUDA wheels on a CPU-only machine. GPU users: install the torch
# build for your CUDA first (see INSTALL.md), then run this script.
#
# Usage: bash tools/install_deps.sh [--dev]   (--dev adds pytest and ruff)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
TORCH_CPU_VERSION="${TORCH_CPU_VERSION:-2.13.0}"

if "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "keeping installed torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
else
  echo "no torch found: installing the CPU build torch==${TORCH_CPU_VERSION}"
  "$PYTHON" -m pip install --quiet "torch==${TORCH_CPU_VERSION}"
fi

extras=""
if [ "${1:-}" = "--dev" ]; then
  extras="[dev]"
fi
"$PYTHON" -m pip install --quiet -e ".${extras}"
"$PYTHON" -c "import slowfast, torch; print('slowfast', slowfast.__version__, 'with torch', torch.__version__)"
