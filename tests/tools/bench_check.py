"""What the benchmark checks share: failing with the tool's output, and running a command that
must succeed."""
import subprocess
import sys


def fail(name, message, output=""):
    sys.exit(f"{name}: {message}\n{output}")


def run(name, cmd, timeout=150):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        fail(name, f"`{' '.join(cmd)}` exited with {done.returncode}", done.stdout + done.stderr)
    return done.stdout
