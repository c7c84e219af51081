#!/usr/bin/env bash
# The README's second command: installs what is needed, builds, and runs every test through
# ctest; then builds again with AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite
# there too (ZRT_SKIP_SANITIZE=1 skips that second pass). Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)

bash scripts/build.sh build
(cd build && ctest --output-on-failure --timeout 900 -j "$jobs")

if [ "${ZRT_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== the same suite under ASan + UBSan (CUDA off: the sanitizers do not see GPU code)"
  cmake -S . -B build-sanitize -DZRT_SANITIZE=ON -DZRT_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
  cmake --build build-sanitize -j "$jobs"
  (cd build-sanitize && ctest --output-on-failure --timeout 900 -j "$jobs")
fi
