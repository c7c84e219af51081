#!/usr/bin/env bash
# scripts/demo.sh BUILD_DIR — the main job on an already built tree.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
echo "== the memory ledger and the host device =="
"$build/tests/runtime/runtime_host_device_test" --success=false
