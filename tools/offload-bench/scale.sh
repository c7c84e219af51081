#!/usr/bin/env bash
# tools/offload-bench/scale.sh BUILD_DIR NVME_DIR [PARAMS] [STEPS] [zrt-offload-scale flags, e.g. --param-nvme]
# Trains a model whose full training state (16 bytes a parameter) exceeds this machine's memory,
# 2 ranks on the host device, optimizer state on NVMe, and reports each step and the peak RSS of
# each rank (/usr/bin/time -v). A measurement, not a CI test: figures go in docs/results.md.
set -euo pipefail
build=${1:?build directory}
nvme=${2:?directory on the drive for the swap files}
params=${3:-2e9}
steps=${4:-4}
shift $(( $# < 4 ? $# : 4 ))
[ -x /usr/bin/time ] || { echo "scale.sh: needs GNU time (apt-get install time)" >&2; exit 2; }
mkdir -p "$nvme"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM; free on $nvme: $(df -h --output=avail "$nvme" | tail -1)"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  /usr/bin/time -f "rank peak RSS: %M KiB, wall %e s" \
  "$build/tools/offload-bench/zrt-offload-scale" --params "$params" --steps "$steps" --nvme-path "$nvme" "$@"
