#!/usr/bin/env python3
"""zrt-io against fio, side by side, on the same file system.

For each mode (sequential read, sequential write), queue depth and block size, runs zrt-io and
fio with the same block size, queue depth, file size and file, one thread each, alternating which
goes first, for several rounds. fio gets every advantage zrt-io uses and then some, so the
comparison is against fio at its best: --ioengine=io_uring --direct=1 --fixedbufs (registered
buffers, as zrt-io's pinned pool is) --registerfiles (a fixed-file table, which zrt-io does not
use) --hipri=0 (interrupt-driven completions, as zrt-io's rings; polling needs poll queues the
drive may not have), and its buffers in transparent huge pages, as zrt-io's pinned pool moves
its own into them (GLIBC_TUNABLES=glibc.malloc.hugetlb=1: fio's malloc'ed buffers are
madvise'd for THP; physically contiguous buffers take one DMA segment per huge page instead of
one per 4 KiB page, which on a virtio disk decides the read speed). --no-huge-pages gives
neither tool huge pages (zrt-io --huge-pages off); --fio-plain drops --fixedbufs and
--registerfiles (the figures before issue 10 had both off). Prints per-round figures and, per setting, the median GB/s of each tool with its spread
(min-max) and the median of the per-round ratios zrt-io / fio, against the target (0.95 by
default). Both tools work on the same file (the same extents on the same drive), laid out once
by fio (written and fsync'ed, not timed).

Usage: zrt-io-vs-fio.py --path DIR [--zrt-io BIN] [--size 1G] [--rounds 5]
                        [--block-sizes 1M,8M] [--queue-depth 8[,16,32]] [--modes read,write]
                        [--no-huge-pages] [--fio-plain] [--json OUT]
Exit status: 0 when every ratio meets the target, 1 when one does not, 2 on bad use.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def parse_bytes(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    suffix = t[-1] if t and t[-1] in units else ""
    return int(float(t[: len(t) - len(suffix)]) * units[suffix])


def zrt_command(args, mode, bs, qd, fname):
    # zrt-io's defaults otherwise: O_DIRECT, one ring, fixed buffers, requests of block x depth
    # with enough outstanding that the ring stays full (as fio keeps iodepth in flight).
    return [args.zrt_io, "--filename", fname, "--size", args.size, "--block-size", bs,
            "--queue-depth", str(qd), "--threads", "1", "--fixed-buffers", "on",
            "--huge-pages", "off" if args.no_huge_pages else "on",
            "--mode", mode, "--json", "--quiet"]


def fio_env(args):
    env = dict(os.environ)
    if not args.no_huge_pages:
        tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
        env["GLIBC_TUNABLES"] = ":".join(tunables + ["glibc.malloc.hugetlb=1"])
    return env


def fio_command(args, mode, bs, qd, fname):
    cmd = ["fio", "--name=zrt-io-vs-fio", "--filename=" + fname, "--rw=" + mode, "--bs=" + bs,
           "--iodepth=%s" % qd, "--ioengine=io_uring", "--direct=1", "--hipri=0",
           "--size=" + args.size, "--numjobs=1", "--output-format=json"]
    if not args.fio_plain:
        cmd += ["--fixedbufs=1", "--registerfiles=1"]
    return cmd


def run_zrt(args, mode, bs, qd, fname):
    out = subprocess.run(zrt_command(args, mode, bs, qd, fname), check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["gbps"]


def run_fio(args, mode, bs, qd, fname):
    out = subprocess.run(fio_command(args, mode, bs, qd, fname), check=True,
                         capture_output=True, text=True, env=fio_env(args)).stdout
    # fio may print warnings before the JSON document.
    doc = json.loads(out[out.index("{"):])
    return doc["jobs"][0][mode]["bw_bytes"] / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="directory on the file system to test")
    p.add_argument("--zrt-io", default=shutil.which("zrt-io") or "zrt-io")
    p.add_argument("--size", default="1G", help="file size for both tools")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block-sizes", default="1M,8M")
    p.add_argument("--queue-depth", default="8",
                   help="queue depth for both tools; a comma list runs each")
    p.add_argument("--fio-plain", action="store_true",
                   help="fio without --fixedbufs --registerfiles")
    p.add_argument("--no-huge-pages", action="store_true",
                   help="neither tool's buffers in transparent huge pages")
    p.add_argument("--modes", default="read,write")
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--json", help="also write every figure to this file")
    args = p.parse_args()
    if not os.path.isdir(args.path):
        print("zrt-io-vs-fio: --path %s is not a directory" % args.path, file=sys.stderr)
        return 2
    if shutil.which("fio") is None:
        print("zrt-io-vs-fio: fio is not installed", file=sys.stderr)
        return 2
    try:
        parse_bytes(args.size)
    except (ValueError, IndexError, KeyError):
        print("zrt-io-vs-fio: --size %r is not a size such as 1G or 512M" % args.size,
              file=sys.stderr)
        return 2
    try:
        depths = [int(q) for q in args.queue_depth.split(",")]
    except ValueError:
        depths = []
    if args.rounds < 1 or not depths or min(depths) < 1:
        print("zrt-io-vs-fio: --rounds and --queue-depth must be at least 1", file=sys.stderr)
        return 2

    workdir = tempfile.mkdtemp(prefix="zrt-io-vs-fio-", dir=args.path)
    fname = os.path.join(workdir, "shared.dat")
    results = []
    try:
        # Lays the file out (fio fsyncs it after creating).
        subprocess.run(fio_command(args, "write", "1M", depths[0], fname), check=True,
                       capture_output=True)
        print("zrt-io: " + " ".join(zrt_command(args, "MODE", "BS", "QD", fname)))
        tun = "" if args.no_huge_pages else "GLIBC_TUNABLES=%s " % fio_env(args)["GLIBC_TUNABLES"]
        print("fio:    " + tun + " ".join(fio_command(args, "MODE", "BS", "QD", fname)),
              flush=True)
        for mode in args.modes.split(","):
            for qd in depths:
                for bs in args.block_sizes.split(","):
                    rounds = []
                    for i in range(args.rounds):
                        # Alternate the order so drift in the disk's speed hits both alike.
                        if i % 2 == 0:
                            z = run_zrt(args, mode, bs, qd, fname)
                            f = run_fio(args, mode, bs, qd, fname)
                        else:
                            f = run_fio(args, mode, bs, qd, fname)
                            z = run_zrt(args, mode, bs, qd, fname)
                        rounds.append({"zrt_io": z, "fio": f, "ratio": z / f})
                        print("%-5s qd %-2d bs %-3s round %d: zrt-io %.3f GB/s  fio %.3f GB/s  "
                              "ratio %.3f" % (mode, qd, bs, i + 1, z, f, z / f), flush=True)
                    results.append({"mode": mode, "queue_depth": qd, "block_size": bs,
                                    "rounds": rounds})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print("zrt-io vs fio (--ioengine=io_uring --direct=1 --hipri=0%s%s), size %s, %d rounds; "
          "medians with min-max" % ("" if args.fio_plain else " --fixedbufs=1 --registerfiles=1",
                                    "" if args.no_huge_pages else ", both in huge pages",
                                    args.size, args.rounds))
    print("%-6s %-3s %-4s %-24s %-24s %-22s %s" % ("mode", "qd", "bs", "zrt-io GB/s", "fio GB/s",
                                                   "ratio zrt-io/fio", "target"))
    all_met = True
    for r in results:
        cols = []
        for key in ("zrt_io", "fio", "ratio"):
            v = [x[key] for x in r["rounds"]]
            cols.append("%.3f (%.3f-%.3f)" % (statistics.median(v), min(v), max(v)))
        med = statistics.median(x["ratio"] for x in r["rounds"])
        met = med >= args.target
        all_met &= met
        r["median_ratio"] = med
        print("%-6s %-3d %-4s %-24s %-24s %-22s %s" % (r["mode"], r["queue_depth"],
                                                       r["block_size"], cols[0], cols[1], cols[2],
                                                       "met" if met else "NOT met (< %.2f)"
                                                       % args.target))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"size": args.size, "queue_depths": depths, "rounds": args.rounds,
                       "fio_plain": args.fio_plain, "huge_pages": not args.no_huge_pages,
                       "results": results}, out, indent=2)
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main())
