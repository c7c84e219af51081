#!/usr/bin/env bash
# consumer_test.sh BUILD_DIR CONSUMER_SRC SCRATCH CMAKE [BUILD_TYPE]
set -euo pipefail
build=$1 src=$2 scratch=$3 cmake=$4 type=${5:-RelWithDebInfo}
rm -rf "$scratch"
mkdir -p "$scratch"
"$cmake" --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log"
test -f "$scratch/prefix/lib/cmake/zrt/zrtConfig.cmake" || { echo "no zrtConfig.cmake installed"; exit 1; }
"$cmake" -S "$src" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE="$type" >"$scratch/configure.log" || { cat "$scratch/configure.log"; exit 1; }
"$cmake" --build "$scratch/build" -j2 >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
out=$("$scratch/build/zrt_consumer")
echo "$out"
grep -q "consumer ok" <<<"$out"

# The engine example trains on 2 ranks and must at least halve its loss: with its built-in
# config (stage 2, bf16), and at stage 3 with the optimizer state and every parameter on NVMe,
# where a module fetched and never released is an error.
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
out=$(mpirun -np 2 "${flags[@]}" "$scratch/build/zrt_train_example")
echo "$out"
grep -q "example ok" <<<"$out"
mkdir -p "$scratch/nvme"
cat >"$scratch/stage3-nvme.json" <<EOF
{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$scratch/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$scratch/nvme", "max_in_cpu": 0}}}
EOF
out=$(mpirun -np 2 "${flags[@]}" "$scratch/build/zrt_train_example" "$scratch/stage3-nvme.json")
echo "$out"
grep -q "example ok" <<<"$out"
grep -q "state dict: hidden.weight (64) hidden.bias (16) head.weight (16) head.bias (1)" <<<"$out"
