"""Ranks of a zrt.initialize job that diverge: the job ends within 15 s with a non-zero status
and a report naming each rank's ZRT call (comm/mpi/watchdog.h's divergence probe; the package
raises zrt.errors.PeerError in the waits); with the probe off, a wait's TimeoutError ends it.
And a job that ends well ends quietly, even with a graph kept at exit.
Usage: divergence_test.py CASE[,CASE...] MPIEXEC [FLAGS...] (divergence_probe.py runs under it, 2
ranks, once per case)."""
import os
import re
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
chosen, launcher = sys.argv[1].split(","), sys.argv[2:]
CASES = {
    "fewer_batches": [r"rank 0 raised PeerError: .*ranks diverged",
                      r"rank 0 waits in engine\.(forward|backward)\(\) \(step 3\)",
                      r"rank 1 (is closing: engine\.close\(\) at the program's exit|has closed this communicator)"],
    "save_on_rank0": [r"ranks diverged", r"waits in engine\.save_checkpoint\(\) \(step 3\)",
                      r"rank 1 waits in engine\.(backward|step)\(\) \(step 3\)"],
    "state_dict_on_rank0": [r"rank 0 raised PeerError: .*ranks diverged",
                            r"rank 0 waits in engine\.fp32_state_dict\(\) \(step 3\)",
                            r"rank 1 (is closing: engine\.close\(\) at the program's exit|has closed this communicator)"],
    "interrupt": [r"rank 1 interrupted", r"rank 0 raised PeerError: .*ranks diverged",
                  r"rank 1 (is closing: engine\.close\(\) at the program's exit|has closed this communicator)"],
    "comm_elsewhere": [r"ranks diverged", r"rank 1 raised PeerError",
                       r"waits in zrt\.compat\.deepspeed\.comm\.all_reduce"],
    "timeout": [r"rank 0 raised TimeoutError"],
    # Not a divergence: the job ends well (exit 0) although a tensor at exit still holds a graph
    # viewing the second engine's parameters; no warning, MPI finalised.
    "graph_at_exit": [r"rank 0 finished its loop", r"rank 1 finished its loop"],
}
ENDS_WELL = {"graph_at_exit"}
env = dict(os.environ, ZRT_COMM_TIMEOUT_S="600", ZRT_UNWIND_GRACE_S="1")
failed = []
unknown = set(chosen) - set(CASES)
if unknown:
    sys.exit(f"divergence_test.py: no case {sorted(unknown)}; the cases: {', '.join(CASES)}")
for mode, patterns in ((m, CASES[m]) for m in chosen):
    extra = {"ZRT_DIVERGENCE_TIMEOUT_S": "0", "ZRT_WAIT_TIMEOUT_S": "2"} if mode == "timeout" else {}
    cmd = launcher[:1] + ["-np", "2"] + launcher[1:] + [sys.executable, os.path.join(here, "divergence_probe.py"), mode]
    start = time.monotonic()
    try:
        job = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
                             env=dict(env, **extra), start_new_session=True)
        out, code = job.stdout, job.returncode
    except subprocess.TimeoutExpired as e:
        out, code = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(), None
    took = time.monotonic() - start
    print(f"== {mode}: exit {code} after {took:.1f} s\n{out}", flush=True)
    if code is None or took > 15:
        failed.append(f"{mode}: the job took {took:.1f} s (limit 15 s)")
    elif (code == 0) != (mode in ENDS_WELL):
        failed.append(f"{mode}: the job exited {code}")
    if mode in ENDS_WELL:
        for bad in ("still referenced", "error", "warning", "finalize", "Traceback"):
            if bad in out:
                failed.append(f"{mode}: the output says {bad!r}")
    for p in patterns:
        if not re.search(p, out):
            failed.append(f"{mode}: the output lacks /{p}/")
    if "finished its loop" in out and mode not in ("fewer_batches", "state_dict_on_rank0", "interrupt") + tuple(ENDS_WELL):
        failed.append(f"{mode}: a rank finished its loop")
if failed:
    sys.exit("FAIL:\n  " + "\n  ".join(failed))
print(f"divergence_test: {', '.join(chosen)}: each job ended within 15 s as it should")
