#!/usr/bin/env bash
# The zrt package as a user installs it (issue 31): `pip install .` from this clone into the
# tests' virtual environment (scripts/install-deps.sh's .venv, which sees Debian's python3-torch),
# then tests run against that installed package, not the build tree's build/python: CPUAdam and
# AsyncIO alone, and 2-rank training at every ZeRO stage and offload setting against torch's
# AdamW. scripts/run-tests.sh runs it after the release suite (ZRT_SKIP_PIP=1 skips it).
#   bash scripts/check-pip-install.sh
# The build is scikit-build-core's (pyproject.toml), in build-pip/, without build isolation: its
# build requirements are the venv's, pinned in scripts/requirements-test.txt, so nothing is
# fetched here. Exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${ZRT_VENV:-$root/.venv}/bin/python3
launcher=()
if command -v ccache >/dev/null; then
  launcher=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
            --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# ZRT_PIP_REUSE_BUILD=DIR (run-tests.sh sets it to the release tree it has just built and tested):
# pip builds in that CMake tree instead of build-pip/, which compiles the same files with the same
# flags (pyproject.toml's), so nothing is compiled twice; what pip does is unchanged: it configures
# the tree with its own settings, builds, installs the `python` component into a wheel and installs
# the wheel. Its generator is the tree's, and the tree keeps its tests and tools (they are built
# already), so a later build of DIR is not reconfigured without them.
reuse=()
if [ -n "${ZRT_PIP_REUSE_BUILD:-}" ]; then
  dir=$(cd "$ZRT_PIP_REUSE_BUILD" && pwd)
  CMAKE_GENERATOR=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$dir/CMakeCache.txt")
  export CMAKE_GENERATOR
  reuse=(--config-settings=build-dir="$dir" --config-settings=cmake.define.ZRT_BUILD_TESTS=ON
         --config-settings=cmake.define.ZRT_BUILD_TOOLS=ON)
  echo "check-pip-install: building in $dir ($CMAKE_GENERATOR), already compiled by the release build"
fi
echo "check-pip-install: pip install . into $(dirname "$(dirname "$py")")"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install --quiet --disable-pip-version-check \
  --no-deps --no-build-isolation . "${launcher[@]}" "${reuse[@]}"
# Run from elsewhere, only the tests' folder on the path: `import zrt` must find the installed
# package, and this says where it found it.
tests=$root/tests/python
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
found=$(cd /tmp && "$py" -c 'import zrt, os; print(os.path.dirname(zrt.__file__))')
if [ "$found" != "$site/zrt" ]; then
  echo "check-pip-install: import zrt found $found, not the installed $site/zrt" >&2
  exit 1
fi
echo "check-pip-install: import zrt finds $found"
export OMP_NUM_THREADS=1 PYTHONPATH=$tests
for t in cpu_adam_test async_io_test; do
  echo "check-pip-install: $t against the installed package"
  (cd /tmp && timeout 120 "$py" "$tests/$t.py" > /dev/null)
done
mpi=(mpiexec -np 2 --oversubscribe --bind-to none)
[ "$(id -u)" != 0 ] || mpi+=(--allow-run-as-root)
echo "check-pip-install: engine_equivalence_test (2 ranks, every stage and offload) against the installed package"
(cd /tmp && timeout 120 "${mpi[@]}" "$py" "$tests/engine_equivalence_test.py" > /dev/null)
# The README's script imports zrt.compat.deepspeed: the installed package has its subpackages.
echo "check-pip-install: the README's script (zrt.compat.deepspeed, 2 ranks) against the installed package"
(cd /tmp && timeout 120 "${mpi[@]}" "$py" "$tests/readme_script_test.py" > /dev/null)
echo "check-pip-install: ok"
