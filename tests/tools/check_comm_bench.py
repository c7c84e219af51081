"""Runs zrt-comm-bench (the command after --) on small sizes and checks its output: the table's
header names the single-copy mechanism and the caches; in JSON, every operation and size has a
memcpy row, a raw MPI row and a blocking and an async row per ZRT path, every ZRT row is correct,
and bound_us / of_bound follow from the memcpy row and the traffic each operation must move."""
import argparse
import json
import math
import subprocess
import sys

import bench_check

ARGS = ["--min-bytes", "64K", "--max-bytes", "256K", "--step-factor", "4", "--iters", "2",
        "--warmup", "1"]


def fail(message, output=""):
    bench_check.fail("check_comm_bench", message, output)


def run(cmd):
    return bench_check.run("check_comm_bench", cmd)


def traffic(op, nbytes, n):
    if op == "all_reduce":
        return 2 * nbytes
    if op == "reduce_scatter":
        return nbytes + nbytes / n
    return nbytes / n + nbytes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("command", nargs="+")
    a = parser.parse_args()

    table = run(a.command + ARGS)
    for needle in ("# single-copy: ", "# caches: L2 ", "of_bound", "mpi-async", "shm+reg-async",
                   " memcpy ", " raw "):
        if needle not in table:
            fail(f"the table lacks '{needle}'", table)

    rows = [json.loads(line) for line in run(a.command + ARGS + ["--json"]).splitlines()
            if line.startswith("{")]
    groups = {}
    for r in rows:
        groups.setdefault((r["op"], r["bytes"]), []).append(r)
    if len(groups) != 6:
        fail(f"expected 3 operations x 2 sizes, got {sorted(groups)}")
    for (op, nbytes), group in groups.items():
        names = [r["path"] + ("+reg" if r["registered"] else "") + ("-async" if r["async"] else "")
                 for r in group]
        for want in ("memcpy", "raw", "mpi", "mpi-async", "shm", "shm-async", "shm+reg",
                     "shm+reg-async"):
            if want not in names:
                fail(f"{op} {nbytes}: no '{want}' row among {names}")
        copy = next(r for r in group if r["path"] == "memcpy")
        bound = traffic(op, nbytes, a.ranks) / (2 * nbytes) * copy["time_us"]
        for r in group:
            if r["ranks"] != a.ranks or not r["single_copy"] or r["cache"] not in ("L2", "L3", "mem"):
                fail(f"{op} {nbytes}: bad ranks, single_copy or cache in {r}")
            if r["path"] == "memcpy":
                continue
            if not math.isclose(r["bound_us"], bound, rel_tol=1e-9):
                fail(f"{op} {nbytes} {r['path']}: bound_us {r['bound_us']}, expected {bound}")
            if not math.isclose(r["of_bound"], r["bound_us"] / r["time_us"], rel_tol=1e-9):
                fail(f"{op} {nbytes} {r['path']}: of_bound {r['of_bound']} is not bound/time")
            if r["path"] != "raw" and r["correct"] is not True:
                fail(f"{op} {nbytes} {r['path']}: result not correct: {r}")
    print(f"check_comm_bench: {len(rows)} rows checked")


if __name__ == "__main__":
    main()
