"""Ranks of a zrt.initialize job that diverge: the job ends within 15 s of the divergence (the
first "rank R diverges" line) with a non-zero status
and a report naming each rank's ZRT call (comm/mpi/watchdog.h's divergence probe; the package
raises zrt.errors.PeerError in the waits); with the probe off, a wait's TimeoutError ends it.
And a job that ends well ends quietly, even with a graph kept at exit.
Usage: divergence_test.py CASE[,CASE...] MPIEXEC [FLAGS...] (divergence_probe.py runs under it, 2
ranks, once per case)."""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "support"))
from timed_job import TimedJob  # noqa: E402

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
    "interrupt": [r"rank 1 diverges: interrupted", r"rank 0 raised PeerError: .*ranks diverged",
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
LIMIT_S = 15  # from the first "rank R diverges" line (or the job's start) to the job's end
failed = []
unknown = set(chosen) - set(CASES)
if unknown:
    sys.exit(f"divergence_test.py: no case {sorted(unknown)}; the cases: {', '.join(CASES)}")
for mode in chosen:
    patterns = CASES[mode]
    extra = {"ZRT_DIVERGENCE_TIMEOUT_S": "0", "ZRT_WAIT_TIMEOUT_S": "2"} if mode == "timeout" else {}
    cmd = launcher[:1] + ["-np", "2"] + launcher[1:] + [sys.executable, os.path.join(here, "divergence_probe.py"), mode]
    # Timed from the moment a rank leaves the common path, not from the start: on a loaded
    # machine the two interpreters' start (torch's import) alone can take seconds.
    job = TimedJob(cmd, dict(env, **extra), 90)
    code, out, mark = job.code, job.out, job.first(" diverges: ")
    marks = [mark] if mark is not None else []
    took = job.ended - (mark if mark is not None else job.start)
    print(f"== {mode}: exit {code}, {took:.1f} s after {'the divergence' if marks else 'the start'}\n{out}",
          flush=True)
    # A job that ends well has no divergence to time: it must end, not hang (the reader's 90 s).
    limit = LIMIT_S if mode not in ENDS_WELL else 90
    if job.killed or took > limit:
        failed.append(f"{mode}: the job ended {took:.1f} s after {'the divergence' if marks else 'its start'} "
                      f"(limit {limit} s)")
    elif (code == 0) != (mode in ENDS_WELL):
        failed.append(f"{mode}: the job exited {code}")
    if mode not in ENDS_WELL and not marks:
        failed.append(f"{mode}: no rank said it diverges")
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
