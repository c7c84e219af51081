#!/usr/bin/env bash
# tools/trainer/ab_speed.sh OLD_ZRT_TRAIN NEW_ZRT_TRAIN [ROUNDS] [STEPS]
# Two zrt-train binaries (say, before and after a change to the Engine) on 2 ranks, interleaved
# run by run so both see the same machine: stages 2 and 3 and stage 3 with everything on NVMe,
# a 4-layer GPT-2 (hidden 128, T 64), STEPS (default 120) steps each, the two binaries in turns
# (the one that runs first alternates by round). Prints each run's median tokens/s over steps
# 4..STEPS (from --json-log), then per config the median of the runs for each binary and their
# ratio new/old. On a shared machine run several rounds: one run's spread is ±15%.
set -euo pipefail
old=$1 new=$2 rounds=${3:-3} steps=${4:-120}
configs=(stage2 stage3 stage3_nvme_offload)
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p /tmp/zrt-train-nvme  # the NVMe config's nvme_path
mpi=(mpirun -np 2 --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
declare -A runs
for ((r = 1; r <= rounds; ++r)); do
  for cfg in "${configs[@]}"; do
    order=(old new)
    ((r % 2)) || order=(new old)
    for which in "${order[@]}"; do
      bin=${!which}
      log=$work/$cfg-$which-$r.jsonl
      "${mpi[@]}" "$bin" --config "$root/configs/$cfg.json" --steps "$steps" --layers 4 --hidden 128 \
        --heads 4 --seq-len 64 --eval-every 0 --progress off --json-log "$log" >"$work/out" 2>&1 ||
        { cat "$work/out"; echo "ab_speed: $which ($bin) failed on $cfg" >&2; exit 1; }
      tps=$(/usr/bin/python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{') and '\"step\"' in l]
print(round(statistics.median(r['tokens_per_s'] for r in rows[3:])))" "$log")
      runs[$cfg.$which]+="$tps "
      echo "round $r  $cfg  $which  $tps tok/s  (load $(cut -d' ' -f1 /proc/loadavg))"
    done
  done
done
echo "config                 old median  new median  new/old"
for cfg in "${configs[@]}"; do
  /usr/bin/python3 -c "
import statistics, sys
o = statistics.median(map(float, sys.argv[2].split())); n = statistics.median(map(float, sys.argv[3].split()))
print(f'{sys.argv[1]:<22} {o:>10.0f}  {n:>10.0f}  {n / o:7.3f}')" "$cfg" "${runs[$cfg.old]}" "${runs[$cfg.new]}"
done
