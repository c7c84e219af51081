"""zrt-gpu-bench (the command after --) as a user runs it.

    check_gpu_bench.py input -- zrt-gpu-bench     bad input exits 2 naming the flag, on any machine
    check_gpu_bench.py run -- zrt-gpu-bench       small sizes on the GPU: every figure present, in the
                                                  table and in JSON, with positive rates and ratios

`run` exits 77 (skipped) when the bench says no GPU is visible, which it decides before it
allocates or measures anything."""
import argparse
import json
import subprocess
import sys

import bench_check

SMALL = ["--copy-bytes", "64M", "--chunk", "8M", "--params", "4M", "--gemm", "512x768x256",
         "--gemm-repeats", "5", "--turns", "3"]
FIGURES = ("host to device", "device to host", "CUDA AdamW", "cuBLAS fp32 GEMM")


def fail(message, output=""):
    bench_check.fail("check_gpu_bench", message, output)


def bad_input(command):
    for args, named in [(["--params", "12Q"], "--params"), (["--copy-bytes", "lots"], "--copy-bytes"),
                        (["--gemm", "512x768"], "--gemm"), (["--parts", "copies,flops"], "--parts"),
                        (["--grad-dtype", "fp8"], "fp8")]:
        done = subprocess.run(command + args, capture_output=True, text=True, timeout=60)
        if done.returncode != 2 or named not in done.stderr:
            fail(f"{' '.join(args)}: expected exit 2 naming {named}, got {done.returncode}",
                 done.stdout + done.stderr)
    print("check_gpu_bench: 5 bad inputs refused, each naming its flag or value")


def on_gpu(command):
    probe = subprocess.run(command + SMALL + ["--json"], capture_output=True, text=True, timeout=300)
    if probe.returncode == 77:
        print(f"SKIP: {probe.stderr.strip()}")
        sys.exit(77)
    if probe.returncode != 0:
        fail(f"exited with {probe.returncode}", probe.stdout + probe.stderr)
    rows = [json.loads(line) for line in probe.stdout.splitlines()]
    for name in FIGURES:
        matching = [r for r in rows if r["figure"].startswith(name)]
        if len(matching) != 1:
            fail(f"{len(matching)} JSON rows for '{name}'", probe.stdout)
        r = matching[0]
        if not r["zrt"] > 0:
            fail(f"no rate for {name}", json.dumps(r))
        if name != "cuBLAS fp32 GEMM" and not (r["yardstick_rate"] > 0 and 0 < r["ratio"] < 100):
            fail(f"no yardstick or ratio for {name}", json.dumps(r))
    table = bench_check.run("check_gpu_bench", command + SMALL, timeout=300)
    for name in FIGURES:
        if not any(line.startswith(name) for line in table.splitlines()):
            fail(f"no table row for '{name}'", table)
    print(table)
    print("check_gpu_bench: every figure present in JSON and in the table")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["input", "run"])
    parser.add_argument("command", nargs="+")
    a = parser.parse_args()
    (bad_input if a.mode == "input" else on_gpu)(a.command)


if __name__ == "__main__":
    main()
