#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [extra cmake args...]   (env ZRT_BUILD_TARGETS: only those targets)
# Configures and builds ZRT. With nvcc on PATH (or in /usr/local/cuda) CUDA is required
# (ZRT_CUDA=ON) so CUDA code always compiles where the toolkit exists; otherwise AUTO.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cuda=AUTO
if command -v nvcc >/dev/null; then cuda=ON; fi
jobs=$(nproc)
launcher=()
# A compiler cache, where one is installed, makes rebuilds in several build trees cheap.
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# RelWithDebInfo with -g1 instead of -g: line tables (backtraces and sanitizer reports keep
# file:line) without the variable and type info only a debugger reads, which makes objects three
# to four times larger and costs about a third of the compile time. Pass
# -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=... to override.
# A unity build (CMake compiles each target's sources in batches of 8, one translation unit a
# batch): a fresh build parses the shared headers (nlohmann-json, CLI11, doctest) once a batch
# instead of once a file, 756 s of CPU instead of 928 (docs/operations.md). Both README commands
# build fresh. A developer iterating on one file may pass -DCMAKE_UNITY_BUILD=OFF.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZRT_CUDA=$cuda -DCMAKE_UNITY_BUILD=ON \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  "${launcher[@]}" "$@"
# ZRT_BUILD_TARGETS (space-separated) builds only those targets, e.g. the extension for a
# second Python in scripts/gpu-bundle.sh.
targets=()
for t in ${ZRT_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
