#!/usr/bin/env bash
# scripts/demo.sh [BUILD_DIR] — the main job on an already built tree: zrt-train, the reference
# trainer, teaches a GPT-2 the GPL's text on 2 ranks under ZeRO stage 3 with the optimizer state
# and every parameter on NVMe (configs/stage3_nvme_offload.json: offload_optimizer and
# offload_param on nvme, max_in_cpu 0; swap files under /tmp/zrt-train-nvme) and the loss
# falls from ln 256 = 5.5 to below 3; then each tool on small sizes. Sized to finish in a few
# minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/zrt-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpi_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
# Under mpirun every rank's stdout is a pseudo-terminal, so the trainer cannot tell a terminal
# from a log; this script can.
progress=off
[ -t 1 ] && progress=on

step() { printf '\n==== %s\n' "$*"; }

step "zrt-train: GPT-2 (4 layers x 128, T 64) on /usr/share/common-licenses/GPL-3, 2 ranks, ZeRO stage 3, optimizer state and parameters on NVMe"
mkdir -p /tmp/zrt-train-nvme  # the config's nvme_path; each rank's swap directory goes inside and is removed at exit
mpirun -np 2 "${mpi_flags[@]}" "$build/tools/trainer/zrt-train" --config configs/stage3_nvme_offload.json \
  --steps 300 --layers 4 --hidden 128 --heads 4 --seq-len 64 --eval-every 50 --progress "$progress"

step "zrt-engine-bench: one Engine step per ZeRO stage on 2 ranks, with and without communication"
mpirun -np 2 "${mpi_flags[@]}" "$build/tools/engine-bench/zrt-engine-bench" --params 2e7 --steps 2 --max-live 5e6

step "zrt-offload-bench: the NVMe optimizer step against its I/O alone and CPU Adam alone"
"$build/tools/offload-bench/zrt-offload-bench" --params 16M --sub-group 2M --nvme-path "$work"

step "zrt-config: DeepSpeed's ZeRO-3 NVMe example, resolved for 2 ranks"
"$build/tools/config/zrt-config" configs/zero3-nvme.json --world-size 2 | sed -n '/^ZRT config/,$p'

step "zrt-plan: where the memory of a 7B model goes on 8 x 80 GB, and what to do about it"
"$build/tools/plan/zrt-plan" --layers 32 --hidden 4096 --heads 32 --vocab 32000 --seq-len 2048 \
  --micro-batch 4 --world-size 8 --device-mem 80G --host-mem 1T --nvme 4T

step "zrt-plan: the model states of a small model, allocated on 2 ranks and checked against the ledger"
mpirun -np 2 "${mpi_flags[@]}" "$build/tests/plan/plan_model_states_mpi_test" --success=false

if [ -x "$build/tools/comm-bench/zrt-comm-bench" ]; then
  step "zrt-comm-bench: collectives on 2 ranks, ZRT's paths against raw MPI"
  mpirun -np 2 "${mpi_flags[@]}" "$build/tools/comm-bench/zrt-comm-bench" --min-bytes 1M \
    --max-bytes 64M --iters 5
fi

step "zrt-io: an offloaded optimizer step's I/O pattern on this disk, every byte verified"
"$build/tools/io/zrt-io" --path "$work" --size 256M --pattern swap --ranks 2 --tile-size 8M
"$build/tools/io/zrt-io" --path "$work" --size 64M --verify

step "zrt-optim-bench: CPU AdamW per SIMD path against the roofline and torch.optim.AdamW"
"$build/tools/optim-bench/zrt-optim-bench" --params 16M --threads 1 2 --steps 5
