#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs the main job: zrt-train
# on 2 ranks, then each tool on small sizes (scripts/demo.sh, README).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
bash scripts/demo.sh build
