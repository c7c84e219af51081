#!/usr/bin/env bash
# Installs every Debian 12 package ZRT's build, tests, tools and benchmarks need. The CUDA
# Toolkit (nvcc, cudart, NCCL) is not a Debian package: where it is installed (/usr/local/cuda)
# the build uses it, else it builds without CUDA.
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
  fio                                 # offload benchmark reference
  clang libclang-rt-dev libomp-dev    # fuzz targets: libFuzzer (clang's runtime), OpenMP for clang
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
