#!/usr/bin/env bash
# The zrt package with a pip-installed torch 2.x, as a user who is not on Debian's torch 1.13 has
# it (issue 31). Not part of scripts/run-tests.sh: torch 2.x from PyPI is a 540 MB wheel that
# brings about 4 GB of CUDA libraries, minutes of CI's budget for one check; run it by hand after
# changing python/ (docs/python.md, "torch versions"; the last run is in docs/results.md).
#   bash scripts/check-torch2.sh [VENV] [TORCH_SPEC]
# VENV (default /tmp/zrt-torch2-venv) is a virtual environment without Debian's packages in view,
# made if missing; TORCH_SPEC (default "torch>=2") is what pip installs. Then:
# 1. `pip install .` from this clone into VENV (the user's command; pip builds with the newest
#    pybind11), and the CPUAdam and AsyncIO tests against that installed package;
# 2. a build tree (build-torch2) for VENV's Python, and every Python test through ctest there
#    (ctest -L python: 2-rank training at every stage against torch AdamW, checkpoints, dead
#    ranks, ...).
# Needs scripts/install-deps.sh's packages and the network to PyPI. Exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/zrt-torch2-venv}
spec=${2:-torch>=2}
if [ ! -x "$venv/bin/python3" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
py=$venv/bin/python3
"$py" -m pip install -q --upgrade pip
# numpy: the package's buffers cross as numpy arrays; safetensors: the checkpoint test reads
# zrt-ckpt's export with it; pybind11: the build tree's extension (2.12 reads numpy 2's arrays).
"$py" -m pip install -q "$spec" numpy safetensors "pybind11>=2.12"
"$py" -c 'import torch, numpy; print("check-torch2: torch", torch.__version__, "numpy", numpy.__version__)'

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
echo "check-torch2: pip install . into $venv"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install -q . "${launcher[@]}"
# The installed package, not the clone's python/: run from elsewhere, the tests' folder on the path.
tests=$PWD/tests/python
for t in cpu_adam_test async_io_test; do
  echo "check-torch2: $t against the installed package"
  (cd /tmp && OMP_NUM_THREADS=1 PYTHONPATH="$tests" "$py" "$tests/$t.py")
done

echo "check-torch2: the Python tests in build-torch2 (ctest -L python)"
bash scripts/build.sh build-torch2 -DZRT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" \
  -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)"
(cd build-torch2 && ctest -L python --output-on-failure --timeout 120 -j "$(nproc)")
echo "check-torch2: ok"
