"""Runs zrt-optim-bench (the command after --) on a small size and checks its output: "of roof"
is GB/s / roof GB/s of the same row (in the table and in JSON), the table says what the roofline
kernel moves, and torch's time comes from the same run. --python must have torch (Debian's
python3-torch, which scripts/install-deps.sh installs): without it the check fails rather than
passing on half the table."""
import argparse
import json
import math
import subprocess
import sys

import bench_check

ARGS = ["--params", "1M", "--threads", "1,2", "--steps", "3"]


def fail(message, output=""):
    bench_check.fail("check_optim_bench", message, output)


def run(cmd):
    return bench_check.run("check_optim_bench", cmd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", required=True)
    parser.add_argument("command", nargs="+")
    a = parser.parse_args()
    if subprocess.run([a.python, "-c", "import torch"], capture_output=True).returncode != 0:
        fail(f"{a.python} has no torch (scripts/install-deps.sh installs python3-torch)")
    torch_args = ["--python", a.python]

    table = run(a.command + ARGS + torch_args)
    if "roofline kernel" not in table or "= 16 B/param" not in table or "= 12 B/param" not in table:
        fail("the table does not say what the roofline kernel moves", table)
    rows = 0
    for line in table.splitlines():
        f = line.split()
        if len(f) != 10 or not f[1].isdigit():
            continue
        gbps, roof, of_roof = float(f[5]), float(f[6]), float(f[7])
        # The table rounds GB/s to 2 decimals and of roof to 3: allow that much.
        if abs(gbps / roof - of_roof) > 0.0005 + (0.005 / gbps + 0.005 / roof) * gbps / roof:
            fail(f"of roof {of_roof} is not GB/s {gbps} / roof GB/s {roof}", line)
        rows += 1
    if rows == 0:
        fail("no rows in the table", table)

    for line in run(a.command + ARGS + torch_args + ["--json"]).splitlines():
        r = json.loads(line)
        if not math.isclose(r["roofline_fraction"], r["gbps"] / r["roofline_gbps"], rel_tol=1e-9):
            fail(f"roofline_fraction is not gbps / roofline_gbps: {r}")
        if not (r["torch_seconds_per_step"] and r["torch_seconds_per_step"] > 0):
            fail(f"no torch time: {r}")
    print(f"check_optim_bench: {rows} table rows checked")


if __name__ == "__main__":
    main()
