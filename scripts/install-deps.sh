#!/usr/bin/env bash
# Installs every Debian 12 package ZRT's build, tests, tools and benchmarks need. The CUDA
# Toolkit (nvcc, cudart, NCCL) is not a Debian package: where it is installed (/usr/local/cuda)
# the build uses it, else it builds without CUDA.
# Then the Python packages the tests need that Debian 12 lacks (safetensors, peft, transformers:
# scripts/requirements-test.txt), with pip into a virtual environment at .venv in the repository
# (ZRT_VENV=DIR puts it elsewhere; CMake's ZRT_TEST_PYTHON names its python3). It is created with
# --system-site-packages, so Debian's python3-torch stays the torch it uses.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
packages=(
  build-essential cmake git pkg-config
  libopenmpi-dev openmpi-bin          # MPI backend, mpirun for multi-rank tests
  liburing-dev                        # offload engine
  nlohmann-json3-dev                  # config, JSON output
  doctest-dev                         # unit tests
  libcli11-dev                        # tools' command lines
  libxxhash-dev                       # checksums
  libboost-dev                        # Boost.Asio thread pool
  libopenblas-dev                     # the reference trainer's GPT-2 (sgemv), PyTorch's BLAS
  libdnnl-dev                         # the reference trainer's GPT-2 (oneDNN's sgemm)
  ocl-icd-opencl-dev opencl-c-headers # oneDNN's CMake config looks for OpenCL
  libexpat1-dev                       # zrt-ladder's SVG test parses the chart as XML
  python3 python3-torch python3-numpy # test oracle (torch.optim)
  python3-dev pybind11-dev            # the zrt Python package (python/): headers, pybind11
  libdlpack-dev                       # the zrt Python package: DLPack, how torch tensors cross
  python3-venv python3-yaml python3-requests python3-psutil  # the tests' venv (below)
  fio                                 # offload benchmark reference
  clang libclang-rt-dev libomp-dev    # fuzz targets: libFuzzer (clang's runtime), OpenMP for clang
  lld                                 # the linker (cmake/ZrtLinker.cmake): links in a quarter of ld.bfd's time
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

# The tests' Python packages, pinned, with --no-deps (requirements-test.txt says why). pip skips
# what is already installed at the pinned version, without asking PyPI.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ZRT_VENV:-$root/.venv}
if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
  echo "install-deps: $venv exists and is not a virtual environment (no pyvenv.cfg); left as it is:" \
       "move it, or set ZRT_VENV to another directory" >&2
  exit 1
fi
# A venv without Debian's packages in view, or whose interpreter is gone, is made anew.
if ! grep -qx 'include-system-site-packages = true' "$venv/pyvenv.cfg" 2>/dev/null ||
   ! "$venv/bin/python3" -c '' 2>/dev/null; then
  echo "install-deps: creating the tests' virtual environment $venv"
  /usr/bin/python3 -m venv --clear --system-site-packages "$venv"
fi
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --no-deps \
  -r "$root/scripts/requirements-test.txt"
"$venv/bin/python3" -c 'import torch, safetensors.torch, peft, transformers' ||
  { echo "install-deps: $venv cannot import torch, safetensors, peft and transformers" >&2; exit 1; }
echo "install-deps: $venv has the tests' Python packages"
