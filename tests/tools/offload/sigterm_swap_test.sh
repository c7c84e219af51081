#!/usr/bin/env bash
# A training job with its optimizer state and its parameters on NVMe, ended by SIGTERM mid-run (what a scheduler's
# cancel sends, through mpirun to every rank): every rank exits, and the swap files and the
# ranks' private swap directories are gone.
#   sigterm_swap_test.sh MPIEXEC [MPI FLAGS...] -- ZRT_OFFLOAD_SCALE
set -euo pipefail
mpi=()
while [ "$1" != "--" ]; do mpi+=("$1"); shift; done
shift
scale=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/zrt-sigterm-XXXXXX")
log=$(mktemp)
trap 'rm -rf "$dir" "$log"' EXIT
"${mpi[@]}" -np 2 "$scale" --params 4e6 --modules 4 --steps 100000 --sub-group 1e6 \
  --param-nvme --nvme-path "$dir" --device host:1G >"$log" 2>&1 &
job=$!
# Training has started once step lines appear (the swap files exist from set-up on).
for _ in $(seq 1 600); do
  grep -q "^step " "$log" && break
  kill -0 "$job" 2>/dev/null || { cat "$log"; echo "FAIL: the job ended before training"; exit 1; }
  sleep 0.1
done
grep -q "^step " "$log" || { cat "$log"; echo "FAIL: no training step within 60 s"; exit 1; }
files=$(find "$dir" -type f | wc -l)
[ "$files" -ge 8 ] || { find "$dir"; echo "FAIL: expected the ranks' swap files (4 each), found $files"; exit 1; }
kill -TERM "$job"
for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  kill -KILL "$job"
  echo "FAIL: the job was still running 60 s after SIGTERM"
  exit 1
fi
wait "$job" || true
left=$(find "$dir" -mindepth 1 | wc -l)
if [ "$left" -ne 0 ]; then
  find "$dir"
  echo "FAIL: $left swap files or directories left behind after SIGTERM"
  exit 1
fi
if pgrep -f "$scale.*$dir" >/dev/null; then
  echo "FAIL: a rank outlived the job"
  exit 1
fi
echo "ok: $files swap files removed, every rank gone"
