"""Runs zrt-offload-bench (the command after --) on a small shard in a scratch directory and
checks its output: the three rows are there, the GB/s columns are the bytes moved over the
seconds, the ratio is pipelined / max(I/O, optimizer), the disk's idle shares (--disk-idle) are
percentages, and the swap files are gone after."""
import argparse
import os
import re
import tempfile

import bench_check


def fail(message, output=""):
    bench_check.fail("check_offload_bench", message, output)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="+")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zrt-offload-bench-") as scratch:
        out = bench_check.run("check_offload_bench", a.command + [
            "--params", "1M", "--sub-group", "128K", "--buffers", "3", "--repeats", "2",
            "--nvme-path", scratch, "--disk-idle"])
        left = [os.path.join(d, f) for d, _, files in os.walk(scratch) for f in files]
        if left:
            fail(f"swap files left behind: {left}", out)
    moved = re.search(r"moved per step: .* \(12 bytes a parameter each way\)", out)
    if not moved:
        fail("the bytes moved are not stated", out)
    seconds = {}
    for name in ("I/O alone", "optimizer alone", "pipelined step"):
        m = re.search(re.escape(name) + r"\s+([0-9.]+)\s+(\S+)", out)
        if not m:
            fail(f"no '{name}' row", out)
        seconds[name] = float(m.group(1))
        if m.group(2) != "-":
            gbps = 2 * 12 * 1048576 / seconds[name] / 1e9  # --params 1M
            # seconds are printed to 5 decimals, GB/s to 2
            if abs(gbps - float(m.group(2))) > 0.006 + gbps * 0.00001 / seconds[name]:
                fail(f"'{name}': {m.group(2)} GB/s is not 24 MiB / {seconds[name]} s", out)
    idle = re.search(r"disk idle \(no transfer in flight\): ([0-9.]+)% of I/O alone, ([0-9.]+)% of the "
                     r"pipelined step", out)
    if not idle:
        fail("no 'disk idle' line with --disk-idle", out)
    if not all(0 <= float(x) <= 100 for x in idle.groups()):
        fail(f"disk idle shares {idle.groups()} are not percentages", out)
    ratio = float(re.search(r"max\(I/O, optimizer\) = ([0-9.]+)", out).group(1))
    want = seconds["pipelined step"] / max(seconds["I/O alone"], seconds["optimizer alone"])
    if abs(ratio - want) > 0.0006 + want * 0.00002 / min(seconds.values()):
        fail(f"ratio {ratio} is not pipelined / max(I/O, optimizer) = {want:.3f}", out)
    print("check_offload_bench: rows and ratio checked")


if __name__ == "__main__":
    main()
