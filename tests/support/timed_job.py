"""A job run for a test that times how it ends (the divergence tests of tests/runtime and
tests/python): in a process session of its own, every output line stamped with the time it
arrived, and the whole session killed if it outlives the bound, so a hang fails the test rather
than the suite."""
import os
import signal
import subprocess
import threading
import time


class TimedJob:
    """The finished job: exit code, output, when it started and ended, whether it was killed."""

    def __init__(self, cmd, env, bound_s):
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
        self.start = time.monotonic()
        self.lines = []  # (arrival time, line)
        reader = threading.Thread(target=lambda: [self.lines.append((time.monotonic(), line)) for line in job.stdout],
                                  daemon=True)
        reader.start()
        reader.join(bound_s)
        self.killed = reader.is_alive()
        if self.killed:
            os.killpg(job.pid, signal.SIGKILL)
        self.code = job.wait()
        self.ended = time.monotonic()
        self.out = "".join(line for _, line in self.lines)

    def first(self, text):
        """When the first line holding `text` arrived, or None."""
        return next((t for t, line in self.lines if text in line), None)
