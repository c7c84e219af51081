#!/usr/bin/env bash
# The GPU check for issue 18, prepared to run in one go on a borrowed H100/H200 (the `device`
# tool's machine: root, nvcc on PATH, no network), within 8 minutes. Two ways:
#   bash scripts/gpu-check.sh --bundle DIR [--no-gpu] [--libraries-only] [OUT_DIR]
# runs what scripts/gpu-bundle.sh built here, unpacked in DIR: it needs only the driver and a
# python3 with torch (its CUDA wheels provide NCCL and cuBLAS). On a GPU it ends with the table
# of scripts/gpu_figures.py (pinned copies, CUDA AdamW, model FLOP rate, the largest GPT-2 on NVMe). --no-gpu runs the parts that need
# no GPU (scripts/check-gpu-bundle.sh does, in a minimal Debian root). Otherwise
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
bundle=
gpu=1
libraries_only=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --bundle) bundle=$(cd "${2:?--bundle DIR}" && pwd); shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    --libraries-only) libraries_only=1; shift ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done
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

if [ -n "$bundle" ]; then
  if [ "$gpu" = 1 ]; then
    part device 30 nvidia-smi
    # NCCL and cuBLAS come from torch's CUDA wheels (site-packages/nvidia/.../lib); ZRT opens
    # them at first use, so their folders go on the library path.
    ZRT_EXTRA_LIBRARY_PATH=$(python3 -c '
import glob, os, site, torch
roots = set(site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))])
names = ("libnccl.so.2", "libcublas.so.1[0-9]", "libcublasLt.so.1[0-9]")
print(":".join(sorted({os.path.dirname(f) for r in roots for n in names
                       for f in glob.glob(os.path.join(r, "**", n), recursive=True)})))')
    export ZRT_EXTRA_LIBRARY_PATH
  fi
  . "$bundle/env.sh"
  # Every program, extension and plugin in the bundle loads: a missing library is named.
  part libraries 120 bash -c 'bad=0
    while read -r f; do
      head -c 4 "$f" | grep -q ELF || continue
      for lib in $(ldd "$f" 2>&1 | awk "/not found/ {print \$1}"); do
        echo "${f#"$1"/} needs $lib, which is neither in the bundle nor on this machine"; bad=1
      done
    done < <(find "$1" -type f)
    exit $bad' _ "$bundle"
  [ "$libraries_only" = 1 ] && exit "$status"
  tests=(python3 "$bundle/src/scripts/gpu_bundle_tests.py" "$bundle")
  train=(mpirun --allow-run-as-root zrt-train --data "$bundle/share/train.txt" --layers 4 --hidden 128
         --heads 4 --seq-len 64 --steps 20 --eval-every 0 --progress off)
  mkdir -p /tmp/zrt-train-nvme
  if [ "$gpu" = 1 ]; then
    part cuda-libraries 30 python3 -c 'import ctypes; [ctypes.CDLL(n) for n in ("libnccl.so.2", "libcublas.so.13")]'
    part gpu-tests 300 "${tests[@]}" "$out/gpu-tests" --cuda --require-run
    for s in 0 1 2 3; do
      part "trainer-cuda-stage$s" 60 "${train[@]:0:2}" -np 1 "${train[@]:2}" --config "$bundle/src/configs/stage$s.json" --device cuda
    done
    part trainer-cuda-nvme 90 "${train[@]:0:2}" -np 1 "${train[@]:2}" --config "$bundle/src/configs/stage3_nvme_offload.json" --device cuda
    part optim-bench 60 zrt-optim-bench
    # Issue 46's figures side by side (scripts/gpu_figures.py): its table ends this script's output.
    part figures 330 python3 "$bundle/src/scripts/gpu_figures.py" --out "$out/figures" --budget-s 150
  else
    part trainer-host-strict 180 "${train[@]:0:2}" -np 2 "${train[@]:2}" --config "$bundle/src/configs/stage3_nvme_offload.json" --device host-strict
    # The figures script itself, on the host device with tiny sizes (no GPU figures).
    part figures-host-check 120 python3 "$bundle/src/scripts/gpu_figures.py" --host-check --out "$out/figures"
  fi
  # 3 min on the 2-core build machine; on the GPU machine's 16 cores it keeps within the 8.
  part host-tests "$([ "$gpu" = 1 ] && echo 240 || echo 900)" "${tests[@]}" "$out/host-tests" --host
  echo "logs in $out" | tee -a "$summary"
  column -t "$summary" 2>/dev/null || cat "$summary"
  [ -f "$out/figures.log" ] && sed -n '/^GPU figures on/,$p' "$out/figures.log"
  exit "$status"
fi

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
