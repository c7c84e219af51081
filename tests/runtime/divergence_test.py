"""Ranks of a C++ Engine job that diverge end the job within 15 s of the divergence (the first
"rank R diverges" line), the report naming each rank's ZRT call (comm/mpi/watchdog.h's divergence
probe, default handlers: MPI_Abort).
Usage: divergence_test.py PROBE MPIEXEC [FLAGS...]; runs divergence_probe (2 ranks) once per mode."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from timed_job import TimedJob  # noqa: E402

probe, launcher = sys.argv[1], sys.argv[2:]
EXPECT = {
    # rank 0 saves alone; rank 1 trains on: each blocked on an operation the other never posts
    "save": [r"rank 0 waits in Engine::save\(\), step 4", r"rank 1 waits in Engine::(parameters|beginMicroStep)"],
    # rank 1 left after 3 steps: its Engine closed, or its communicator said farewell
    "fewer": [r"rank 0 waits in .*step 4",
              r"rank 1 (is closing: .*Engine::~Engine\(\)|has closed this communicator)"],
    "idle": [r"rank 0 waits in .*step 4", r"rank 1 has been in no ZRT call for [0-9.]+ s \(the last: Engine::step\(\), step 3\)",
             r"more than zrt.divergence_timeout_s \(2.0 s\)"],
}
# The idle case with a bound of 2 s (ZRT_DIVERGENCE_TIMEOUT_S, as a config's key would set it)
# instead of the default 6: the same rule, 4 s sooner.
ENV = {"idle": {"ZRT_DIVERGENCE_TIMEOUT_S": "2"}}
failed = []
for mode, patterns in EXPECT.items():
    with tempfile.TemporaryDirectory() as d:
        cmd = launcher[:1] + ["-np", "2"] + launcher[1:] + [probe, mode, d]
        job = TimedJob(cmd, dict(os.environ, ZRT_COMM_TIMEOUT_S="600", **ENV.get(mode, {})), 50)
    code, out, mark = job.code, job.out, job.first(" diverges: ")
    took = job.ended - mark if mark is not None else None
    print(f"== {mode}: exit {code}, {'%.1f s after the divergence' % took if took is not None else 'no divergence line'}\n{out}")
    if took is None:
        failed.append(f"{mode}: no rank said it diverges")
    elif job.killed or took > 15:
        failed.append(f"{mode}: the job ended {took:.1f} s after the divergence (limit 15 s)")
    if code == 0:
        failed.append(f"{mode}: the job exited 0")
    if "ranks diverged" not in out:
        failed.append(f"{mode}: no 'ranks diverged' report")
    for p in patterns:
        if not re.search(p, out):
            failed.append(f"{mode}: the report lacks /{p}/")
if failed:
    sys.exit("FAIL:\n  " + "\n  ".join(failed))
print("divergence_test: every mode ended within 15 s naming both ranks' calls")
