#!/usr/bin/env bash
# The GPU bundle's parts that need no GPU, under the GPU machine's Python stack rather than
# Debian's: CPython 3.12 (pyenv's) with torch 2.x, transformers 5.x and PEFT from PyPI, so the
# bundle's 3.12 extension and the tests meet the versions they will meet there (the minimal
# root, scripts/check-gpu-bundle.sh, has 3.11 and Debian's torch 1.13). Not in CI: the wheels
# are about 5.6 GB.
#   bash scripts/check-gpu-bundle-torch2.sh BUNDLE_DIR [VENV] [OUT_DIR]
# BUNDLE_DIR: an unpacked bundle (scripts/gpu-bundle.sh leaves one beside its tarball); VENV
# (default /work/venv-gpu312) is made when missing. Exits non-zero when a part fails.
set -euo pipefail
bundle=$(cd "${1:?usage: check-gpu-bundle-torch2.sh BUNDLE_DIR [VENV] [OUT_DIR]}" && pwd)
venv=${2:-/work/venv-gpu312}
out=${3:-/tmp/gpu-bundle-torch2-out}
if [ ! -x "$venv/bin/python3" ]; then
  python=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3 2>/dev/null | tail -1)
  [ -n "$python" ] || { echo "check-gpu-bundle-torch2: no CPython 3.12 under pyenv" >&2; exit 2; }
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --no-cache-dir -q torch transformers numpy peft
fi
"$venv/bin/python3" -c 'import sys, torch, transformers, peft
print("check-gpu-bundle-torch2: python", sys.version.split()[0], "torch", torch.__version__,
      "transformers", transformers.__version__, "peft", peft.__version__)'
rm -rf "$out"
PATH="$venv/bin:$PATH" bash "$bundle/src/scripts/gpu-check.sh" --bundle "$bundle" --no-gpu "$out"
