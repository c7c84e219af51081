#!/usr/bin/env bash
# The README's second command: installs what is needed, builds, and runs every test through
# ctest. Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)"
