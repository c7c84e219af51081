#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs the main job: zrt-train
# on 2 ranks, then each tool on small sizes (scripts/demo.sh, README).
#
# The installs and the build print about 1,500 lines (apt, cmake, the compiler) that say nothing
# about ZRT; they go to a log file, named on screen ($ZRT_SETUP_LOG, default
# ${TMPDIR:-/tmp}/zrt-run-main.log) and printed in full if a step fails. The screen shows one
# line per step, so the first thing that scrolls is the training run.
set -euo pipefail
cd "$(dirname "$0")/.."
log=${ZRT_SETUP_LOG:-${TMPDIR:-/tmp}/zrt-run-main.log}
: >"$log"
echo "run-main: the output of the installs and the build goes to $log"

# step WHAT CMD...: runs CMD with its output in the log and one line on screen.
step() {
  local what=$1 start=$SECONDS rc=0
  shift
  printf 'run-main: %s ... ' "$what"
  echo "==== run-main: $what: $*" >>"$log"
  "$@" >>"$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    printf 'done (%d s)\n' $((SECONDS - start))
    return 0
  fi
  printf 'FAILED (exit %d after %d s)\n' "$rc" $((SECONDS - start))
  echo "run-main: ---- $log, in full ----"
  cat "$log"
  echo "run-main: ---- end of $log ----"
  echo "run-main: $what failed (exit $rc); its output is above and stays in $log" >&2
  exit "$rc"
}

step "installing packages (scripts/install-deps.sh)" bash scripts/install-deps.sh
step "building into build/ (scripts/build.sh; several minutes)" bash scripts/build.sh build
echo "run-main: the main job (scripts/demo.sh build)"
bash scripts/demo.sh build
