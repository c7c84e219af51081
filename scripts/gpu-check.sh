#!/usr/bin/env bash
# The GPU check for issue 18, prepared to run in one go on a borrowed H200 (the `device` tool's
# machine: root, nvcc on PATH, no network), within 8 minutes:
#   bash scripts/gpu-check.sh [OUT_DIR]
# 1. builds with CUDA (ZRT_CUDA=ON, Hopper sm_90) in build-gpu;
# 2. runs the GPU tests (ctest label `cuda`: the cuda Device, the CUDA Adam kernel against the
#    CPU result, NCCL, and the Engine's matrix of runtime_engine_strict_test on `cuda:0`, 2 and 4
#    ranks sharing the GPU through the MPI backend's pinned staging, stages 0-3 with every
#    offload and checkpoints, bit-identical to host, and on one rank with NCCL itself as the
#    Engine's data communicator (runtime_engine_nccl_test_np1); trainer_cuda: zrt-train's layers
#    on the GPU against host, within fp32 rounding, for the main job, stages 0-3, fp16, bf16,
#    offloaded activation checkpoints, LoRA, a resume and the main job on one rank with
#    --backend nccl), which skip on a machine without a GPU but must pass here;
# 3. runs the rest of the suite on the host device, to show the CUDA build changes nothing else;
# 4. prints the device and driver, and the benchmarks that exist today on the host device
#    (zrt-optim-bench, zrt-io against fio) for the record beside the GPU figures.
# Every log goes to OUT_DIR (default $OUT, else ./gpu-check-out), one file per part, and a
# summary line per part to OUT_DIR/summary.txt. Exits non-zero when a part fails.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
status=0
part() {  # part NAME TIMEOUT_S COMMAND...: runs it, logs it, records pass/fail and seconds
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$summary"
  [ "$rc" = 0 ] || status=1
  return "$rc"
}

part device 30 bash -c 'nvidia-smi; nvcc --version'
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! part build 300 bash scripts/build.sh build-gpu -DZRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90; then
  tail -40 "$out/build.log"
  exit 1
fi
# The GPU tests must run, not skip: ctest's skip count is checked in the log.
part gpu-tests 180 bash -c 'cd build-gpu && ctest -L "^cuda$" --output-on-failure --timeout 120'
if grep -q "(Skipped)" "$out/gpu-tests.log"; then
  echo "gpu-tests: a GPU test skipped on the GPU machine" | tee -a "$summary"
  status=1
fi
part host-suite 240 bash -c "cd build-gpu && ctest -LE '^cuda$' -j $(nproc) --timeout 200"
part optim-bench 60 build-gpu/tools/optim-bench/zrt-optim-bench
echo "logs in $out" | tee -a "$summary"
exit "$status"
