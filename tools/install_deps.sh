#!/usr/bin/env bash
# Installs slowfast (editable) and its dependencies into the current Python.
#
# An installed torch (CPU or CUDA build) is kept as it is. Only when none is
# installed does this install torch==TORCH_VERSION (2.13.0), from your pip index
# or from TORCH_INDEX_URL when set: on Linux x86_64, PyPI's torch wheel is the
# CUDA build (several GB); for a CPU-only machine set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu. GPU users: install the
# torch build for your CUDA first (see INSTALL.md), then run this script.
#
# Usage: [TORCH_INDEX_URL=URL] bash tools/install_deps.sh [--dev]
#        (--dev adds pytest, ruff, mypy, submitit and, on Linux x86_64, triton)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-}"

if "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "keeping installed torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
elif [ -n "$TORCH_INDEX_URL" ]; then
  echo "no torch found: installing torch==${TORCH_VERSION} from ${TORCH_INDEX_URL}"
  "$PYTHON" -m pip install --quiet "torch==${TORCH_VERSION}" --index-url "$TORCH_INDEX_URL"
else
  echo "no torch found: installing torch==${TORCH_VERSION} from the pip index"
  "$PYTHON" -m pip install --quiet "torch==${TORCH_VERSION}"
fi

extras=""
if [ "${1:-}" = "--dev" ]; then
  extras="[dev]"
fi
"$PYTHON" -m pip install --quiet -e ".${extras}"
"$PYTHON" -c "import slowfast, torch; print('slowfast', slowfast.__version__, 'with torch', torch.__version__)"
