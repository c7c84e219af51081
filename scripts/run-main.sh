#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs the main job, the best
# demonstration the project has so far (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
bash scripts/demo.sh build
