#!/usr/bin/env bash
# Two hosts for real: two network namespaces, each with its own host name, joined by a veth pair;
# Open MPI runs zrt-train across them over TCP (mpirun on host A starts host B's daemon through an
# rsh agent that enters B's namespace, standing in for ssh). The job must first train to its end
# across the two hosts; a second job then loses host B mid-run (its end of the link goes down, or
# its rank is SIGKILLed) and must end, with the lost peer named, and leave no process on either
# host. Only the loopback devices and the test's own namespaces are addressed.
#   two_host_test.sh MODE MPIEXEC [MPI FLAGS...] -- TRAINER CONFIG_DIR
# MODE watchdog: Open MPI's lifeline checks at their defaults, a short comm timeout: ZRT's
#   watchdog reports first, naming rank 1, its host and the operation. mpirun can then reach host
#   B's daemon neither to end rank 1 nor to learn it is gone, and waits until TCP gives up on
#   that connection: 15 retries (about 15 min) by default, so the test sets 5 (about 13 s) in
#   its two namespaces. (No Open MPI setting bounds that wait: its TCP keepalive only probes an
#   idle connection, and the abort has just queued data on it.)
# MODE launcher: Open MPI's keepalive on its daemons' connections (seconds) shorter than the comm
#   timeout: mpirun notices the lost daemon, names its node and ends the job; rank 0 says from
#   its SIGTERM handler which operation it waited in. This is the setting docs/operations.md
#   recommends.
# MODE kill: rank 1's process on host B is SIGKILLed; mpirun (its daemon on B sees the exit) ends
#   the job. Rank 0 watches rank 1 through a TCP connection (comm/mpi/peer_sockets.h), which B's
#   kernel closes at the kill: rank 0 must exit within 5 s naming rank 1, its pid and host B (and
#   mpirun within 10 s: it then ends host B's daemon).
# MODE kill_recovery: the same with mpirun told to keep the job (orte_enable_recovery, as a
#   launcher that does not end it would): rank 0's watchdog sees the exit itself and ends the job,
#   within 5 s of the kill, with the same names.
# Exits 77 (skipped) before anything runs where namespaces cannot be made (not root: no
# CAP_NET_ADMIN / CAP_SYS_ADMIN, or the tools are missing).
set -euo pipefail
mode=$1
shift
mpi=()
while [ "$1" != "--" ]; do mpi+=("$1"); shift; done
shift
trainer=$1
configs=$2
case "$mode" in
  watchdog | launcher | kill | kill_recovery) ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac

skip() {
  echo "skipped: $*"
  exit 77
}
for tool in ip unshare nsenter hostname; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (the test makes its two hosts with it)"
done
caps=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
# Bit 12: CAP_NET_ADMIN (namespaces, veth, addresses); bit 21: CAP_SYS_ADMIN (ip netns's mount,
# unshare --uts).
if (((16#$caps >> 12 & 1) == 0 || (16#$caps >> 21 & 1) == 0)); then
  skip "needs CAP_NET_ADMIN and CAP_SYS_ADMIN to make network namespaces (run as root)"
fi

# Names carry the pid, so runs in parallel do not clash; the addresses exist only inside the two
# namespaces, so another run's identical ones are never seen.
nsa=zrt-$$-a
nsb=zrt-$$-b
hosta=zrt-$$-a
hostb=zrt-$$-b
veth_a=zrt$$a
veth_b=zrt$$b
addr_a=10.250.0.1
addr_b=10.250.0.2
subnet=10.250.0.0/30
dir=$(mktemp -d "${TMPDIR:-/tmp}/zrt-twohost-XXXXXX")
log=$dir/job.log
job=
made=()

# What is still running in either namespace, as "pid command line (in namespace)": a process of
# the job that outlived mpirun is a failure, and the message should say which it was.
left_in_namespaces() {
  local ns p
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null || true) (in $ns)"
    done
  done
}
cleanup() {
  if [ -n "$job" ]; then
    { kill -KILL "$job" && wait "$job"; } 2>/dev/null || true
  fi
  local ns p
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    # Deleting a namespace deletes its end of the veth pair, and with it the other end.
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
# The job's output without its step lines (each ends in the step's io time). Open MPI's output
# forwarding now and then splits a step line in two; the tail that then stands alone goes too.
steps_left_out() { grep -Ev '^step [0-9]|io [0-9]+\.[0-9]+$' "$1" || true; }
fail() {
  if [ -s "$log" ]; then
    echo "---- job output"
    steps_left_out "$log"
  fi
  echo "FAIL: $*"
  exit 1
}

# Making the two hosts is the check for the privilege itself: where it fails, nothing has run.
setup_error=$dir/setup.err
setup() {
  ip netns add "$nsa" && made+=("$nsa") &&
    ip netns add "$nsb" && made+=("$nsb") &&
    ip link add "$veth_a" netns "$nsa" type veth peer name "$veth_b" netns "$nsb" &&
    ip -n "$nsa" addr add "$addr_a/30" dev "$veth_a" &&
    ip -n "$nsb" addr add "$addr_b/30" dev "$veth_b" &&
    ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
    ip -n "$nsa" link set "$veth_a" up && ip -n "$nsb" link set "$veth_b" up &&
    ip netns exec "$nsa" unshare --uts sh -c "hostname $hosta"
}
if ! setup 2>"$setup_error"; then
  skip "cannot make the two hosts' network namespaces: $(tr '\n' ' ' <"$setup_error")"
fi
if [ "$mode" = watchdog ]; then
  for ns in "$nsa" "$nsb"; do
    ip netns exec "$ns" sh -c 'echo 5 >/proc/sys/net/ipv4/tcp_retries2'
    [ "$(ip netns exec "$ns" cat /proc/sys/net/ipv4/tcp_retries2)" = 5 ] ||
      fail "could not set net.ipv4.tcp_retries2 in namespace $ns"
  done
fi

# The rsh agent, as Open MPI calls ssh: `agent [options] HOST COMMAND...`. Like ssh it starts the
# command in a fresh environment (only PATH), so host B's ranks see only what mpirun forwards.
agent=$dir/rsh-agent
cat >"$agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
[ \$# -ge 2 ] || { echo "rsh-agent: expected HOST COMMAND..., got: \$*" >&2; exit 255; }
host=\$1
shift
case "\$host" in
  $addr_a) ns=$nsa name=$hosta ;;
  $addr_b) ns=$nsb name=$hostb ;;
  *) echo "rsh-agent: no such host: \$host" >&2; exit 255 ;;
esac
exec env -i PATH="\$PATH" ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$1" && exec sh -c "\$2"' rsh-agent "\$name" "\$*"
EOF
chmod +x "$agent"
printf '%s slots=1\n%s slots=1\n' "$addr_a" "$addr_b" >"$dir/hostfile"

if [ "$mode" = watchdog ]; then
  timeout_s=3
  lifeline=()
elif [ "$mode" = launcher ]; then
  # Far beyond the job's end: here the launcher must notice first.
  timeout_s=60
  lifeline=(--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3)
else
  # Far beyond the job's end: the lost peer must be seen, not timed out.
  timeout_s=60
  lifeline=()
  if [ "$mode" = kill_recovery ]; then lifeline=(--mca orte_enable_recovery 1); fi
fi
forward=(-x OMP_NUM_THREADS=1 -x ZRT_LOG_LEVEL=info -x "ZRT_COMM_TIMEOUT_S=$timeout_s")
for v in LD_LIBRARY_PATH ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
  [ -n "${!v:-}" ] && forward+=(-x "$v")
done

# Starts the job in the background from host A (mpirun there, with A's host name): $1 the steps,
# $2 the JSON log.
start_job() {
  : >"$log"
  ip netns exec "$nsa" unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "$hosta" \
    "${mpi[@]}" -np 2 --map-by node --hostfile "$dir/hostfile" \
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    "${lifeline[@]}" "${forward[@]}" \
    "$trainer" --config "$configs/stage3.json" --steps "$1" --eval-every 0 \
    --layers 1 --hidden 32 --heads 2 --seq-len 16 --progress off --json-log "$2" >"$log" 2>&1 &
  job=$!
}
# Waits up to $1 tenths of a second for the job to end; its status is then in $status.
wait_job() {
  local _
  for _ in $(seq 1 "$1"); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$job" 2>/dev/null && return 1
  status=0
  wait "$job" || status=$?
  job=
}
# Waits up to 30 s for both namespaces to be empty: a rank or daemon may take a moment to see
# that the job is over (on host B, until TCP gives up on a dead connection).
check_nothing_left() {
  local _ left
  for _ in $(seq 1 300); do
    left=$(left_in_namespaces)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "$1: processes left 30 s after mpirun exited (killed on exit): $left"
}
steps_logged() {
  local n
  n=$(grep -c '"step":' "$1" 2>/dev/null) || true
  echo "${n:-0}"
}

# 1. A job across the two hosts that runs to its end: every collective of it crosses the veth.
start_job 3 "$dir/short.jsonl"
wait_job 600 || fail "a 3-step job across the two hosts was still running after 60 s"
[ "$status" = 0 ] || fail "a 3-step job across the two hosts exited with status $status"
[ "$(steps_logged "$dir/short.jsonl")" = 3 ] || fail "the 3-step job did not log 3 steps"
for r in 0 1; do
  grep -q "^\[zrt rank $r\] info: MPI communicator: 2 ranks, 2 node(s)" "$log" ||
    fail "rank $r did not see its two ranks on two nodes"
  # Rank 1's environment came only through mpirun (-x): the short timeout must have reached it.
  grep -q "^\[zrt rank $r\] info: comm options: .* timeout=$timeout_s s" "$log" ||
    fail "rank $r did not run with ZRT_COMM_TIMEOUT_S=$timeout_s"
done
# Each rank watches the other over a TCP connection: no rank may have warned it could not.
if grep -q "cannot watch" "$log"; then
  fail "a rank could not watch its peer on the other host: $(grep "cannot watch" "$log" | head -2)"
fi
check_nothing_left "after the 3-step job"
echo "ok: a 3-step job trained across hosts $hosta and $hostb (2 ranks on 2 nodes) and exited 0"

# 2. A long job, cut off from host B after some steps.
start_job 1000000 "$dir/long.jsonl"
for _ in $(seq 1 600); do
  [ "$(steps_logged "$dir/long.jsonl")" -ge 20 ] && break
  kill -0 "$job" 2>/dev/null || fail "the job ended before it logged 20 steps"
  sleep 0.1
done
[ "$(steps_logged "$dir/long.jsonl")" -ge 20 ] || fail "the job did not log 20 steps within 60 s"
# Each host runs one rank of the job, under its own host name.
for side in "$nsa:$hosta" "$nsb:$hostb"; do
  ns=${side%%:*}
  n=0
  for p in $(ip netns pids "$ns"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = zrt-train ] || continue
    n=$((n + 1))
    name=$(nsenter --target "$p" --uts hostname) || fail "cannot read the host name of pid $p"
    [ "$name" = "${side#*:}" ] || fail "zrt-train (pid $p) in $ns runs as host '$name', not ${side#*:}"
    if [ "$ns" = "$nsb" ]; then victim=$p; else survivor=$p; fi
  done
  [ "$n" = 1 ] || fail "expected one zrt-train process in namespace $ns, found $n"
done
rx=$(ip netns exec "$nsb" cat "/sys/class/net/$veth_b/statistics/rx_bytes")
tx=$(ip netns exec "$nsb" cat "/sys/class/net/$veth_b/statistics/tx_bytes")
[ "$rx" -gt 1000000 ] && [ "$tx" -gt 1000000 ] ||
  fail "host B's link carried only $rx bytes in and $tx out: the ranks did not talk over it"
before=$(steps_logged "$dir/long.jsonl")
if [ "$mode" = kill ] || [ "$mode" = kill_recovery ]; then
  kill -KILL "$victim"
  event="rank 1 (pid $victim) on host B was killed"
else
  ip -n "$nsb" link set "$veth_b" down
  event="the link was cut"
fi
cut=$(date +%s%N)
echo "ok: $before steps logged, one rank on each host, $rx bytes into host B and $tx out; $event"
# Rank 0's own exit, timed apart from mpirun's (which then tears down host B's daemon).
survivor_took=
for _ in $(seq 1 600); do
  if ! kill -0 "$survivor" 2>/dev/null || grep -q '^State:.*Z' "/proc/$survivor/status" 2>/dev/null; then
    survivor_took=$((($(date +%s%N) - cut) / 1000000))
    break
  fi
  sleep 0.05
done
wait_job 600 || fail "the job was still running 60 s after $event"
took=$((($(date +%s%N) - cut) / 1000000))
echo "---- job output (step lines left out)"
steps_left_out "$log"
echo "---- checks (rank 0 exited ${survivor_took:-?} ms and mpirun with status $status ${took} ms after $event)"
# With orte_enable_recovery, Open MPI 4.1 exits 0 even after MPI_Abort: only the messages tell.
if [ "$mode" != kill_recovery ] && [ "$status" = 0 ]; then fail "mpirun exited with status 0 after losing host B"; fi
op='[a-zA-Z]+ #[0-9]+ \([^()]*, path mpi\) \([0-9]+ bytes\)'
if [ "$mode" = kill ] || [ "$mode" = kill_recovery ]; then
  # Detection, not a timeout: B's kernel closes rank 1's connection to rank 0 at the kill. Rank 0
  # goes in about a second (the watchdog's grace, or mpirun's SIGTERM); mpirun then takes about
  # two more to end host B's daemon, its own teardown, hence the looser bound on the whole job.
  [ -n "$survivor_took" ] && [ "$survivor_took" -le 5000 ] ||
    fail "rank 0 (pid $survivor) exited ${survivor_took:-over 30000} ms after $event: over the 5000 ms allowed"
  [ "$took" -le 10000 ] || fail "mpirun exited ${took} ms after $event: over the 10000 ms allowed"
  # e.g. [zrt rank 0] error: peer lost: rank 1 (pid 4242 on host zrt-4241-b) exited while this
  #      rank waited 1.0 s in allReduce #93 (8 B fp32, path mpi) (8 bytes); ended by SIGTERM
  lost="^\[zrt rank 0\] error: peer lost: rank 1 \(pid $victim on host $hostb\) exited"
  if [ "$mode" = kill ]; then
    # mpirun's SIGTERM usually comes first (the report from rank 0's handler), or the watchdog.
    # In about 1 run in 10 on a loaded 2-core machine, rank 0 is gone 8-21 ms after the kill
    # and no line of ZRT's reaches the job's output: Open MPI's TCP transport ended it
    # ("An MPI communication peer process has unexpectedly disconnected"), or mpirun's teardown
    # did and the report written in rank 0's SIGTERM handler was not forwarded (not understood
    # yet; docs/operations.md). Then mpirun's own notice names the rank, its pid and its node,
    # and that is what the user reads.
    grep -Eq "$lost( while this rank waited [0-9.]+ s in $op|; this rank was not in a collective \([0-9]+ finished\))(; ended by SIGTERM|; ending the job)$" "$log" ||
      grep -Eq "process rank 1 with PID $victim on node [^ ]+ exited on signal 9" "$log" ||
      fail "rank 0 did not name rank 1, its pid $victim and host $hostb as lost (nor did mpirun)"
  else
    grep -Eq "$lost while this rank waited [0-9.]+ s in $op; ending the job$" "$log" ||
      fail "rank 0's watchdog did not report rank 1 (pid $victim on $hostb) lost in the operation it waited in"
  fi
  echo "ok: rank 0 named rank 1 (pid $victim) on $hostb as lost and exited ${survivor_took} ms after the kill"
elif [ "$mode" = watchdog ]; then
  # e.g. [zrt rank 0] error: collective timeout: allGather #510 (8 B fp32, path mpi) (8 bytes) has
  #      not completed after 6.0 s on rank 0 (timeout 3.0 s); ranks that had not arrived: 1
  #        rank 1: no answer within 3.0 s from host zrt-4242-b (exited, unreachable over ...)
  grep -Eq "^\[zrt rank 0\] error: collective timeout: $op has not completed after [0-9.]+ s on rank 0 \(timeout $timeout_s.0 s\); ranks that had not arrived: 1$" "$log" ||
    fail "rank 0 did not report a collective timeout in which rank 1 had not arrived"
  grep -Eq "^  rank 1: no answer within [0-9.]+ s from host $hostb \(exited, unreachable over the network, or stuck outside ZRT\)$" "$log" ||
    fail "rank 0 did not name rank 1 and its host as giving no answer"
  echo "ok: rank 0 reported the operation it waited in, and rank 1 on $hostb as not answering"
else
  grep -q "^ORTE has lost communication with a remote daemon" "$log" ||
    fail "mpirun did not report the lost daemon"
  grep -Eq "^  Remote daemon: .* on node $addr_b$" "$log" || fail "mpirun did not name host B ($addr_b)"
  grep -Eq "^\[zrt rank 0\] error: ended by SIGTERM while waiting [0-9.]+ s in $op; no exited peer among the 0 watched on this host and the 1 on other hosts$" "$log" ||
    fail "rank 0 did not report the operation it waited in when mpirun ended it"
  echo "ok: mpirun named host B's daemon as lost; rank 0 reported the operation it waited in"
fi
check_nothing_left "after the cut"
echo "ok: no process is left on either host"
