"""A rank SIGKILLed in the middle of a zrt.initialize training step must not leave the other
waiting: the job must end within 10 s of the kill with ZRT's message naming the lost rank
("peer lost: rank 1 (pid ...) exited while this rank waited ... in <collective>").
Open MPI is told not to end the job itself when a rank dies (orte_enable_recovery), so what
ends the wait is ZRT's own detection (comm/mpi/watchdog). ZRT's watchdog ends the job
(MPI_Abort) rather than raising in Python: a thread blocked inside an MPI collective cannot be
unwound. Usage: dead_rank_test.py MPIEXEC [FLAGS...] (the probe runs under it with 2 ranks)."""
import os
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, OMPI_MCA_orte_enable_recovery="1", ZRT_COMM_TIMEOUT_S="600")
cmd = sys.argv[1:2] + ["-np", "2"] + sys.argv[2:] + [sys.executable, os.path.join(here, "dead_rank_probe.py")]
job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines, killed = [], None
for line in job.stdout:  # ends when every process holding the pipe has exited
    lines.append(line)
    if line.startswith("rank 1 kills itself") and killed is None:
        killed = time.monotonic()
job.wait()
ended = time.monotonic()
out = "".join(lines)
print(out)
if killed is None:
    sys.exit("FAIL: rank 1 never reached its kill")
took = ended - killed
print(f"the job ended {took:.1f} s after rank 1 was killed (exit status {job.returncode})")
if took > 10:
    sys.exit(f"FAIL: {took:.1f} s > 10 s")
# (The exit status is not checked: under orte_enable_recovery mpirun exits 0 even after
# MPI_Abort.)
if "training went on" in out:
    sys.exit("FAIL: rank 0 finished training without rank 1")
if "peer lost: rank 1" not in out and "rank 0 raised" not in out:
    sys.exit("FAIL: no message from rank 0 naming the lost rank 1")
print("ok")
