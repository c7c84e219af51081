#!/usr/bin/python3
"""zrt-train against PyTorch eager on the same GPT-2 shape, batch and threads, in one run.

  /usr/bin/python3 tools/trainer/speed_vs_torch.py --trainer build/tools/trainer/zrt-train
  ... --sharding    also stage 3 on 2 ranks against stage 0 on 1 rank (the cost of sharding)

For each shape it prints tokens/s of a full training step (forward, backward, AdamW) of both,
the model FLOPs per token (zrt-train's figure: 6 x matmul parameters + causal attention's
6 L C (T + 1), no recomputation) and each one's model FLOP rate as a fraction of the SGEMM rate
measured here, in this run, with the same threads (a 2048^3 product, the better of torch.mm, whose
BLAS is Debian's libblas.so.3 alternative, and oneDNN's sgemm, which zrt-train's products go
through; measured right before and right after each shape's runs, and the
higher of the two divides that shape's figures: this VM has slow and fast spells of tens of
seconds, which a measurement minutes away misses, and a busy moment still cannot flatter). It
also prints zrt-train's step split (median seconds of compute, i.e. forward and backward, and of
the optimizer) and the load average.
Debian's python3-torch calls the generic libblas.so.3: with the reference BLAS selected its
products run ~10x slower, so the script prints which one is selected and PyTorch is compared on
OpenBLAS, as a user would run it (`update-alternatives --display libblas.so.3-x86_64-linux-gnu`).
zrt-train links OpenBLAS directly. Where OpenBLAS 0.3.21 falls back to its SSE3 kernels on a
CPU it does not know (an Emerald Rapids Xeon, say), zrt-train runs itself again with
OPENBLAS_CORETYPE set to the CPU's own; the script then does the same to itself, so PyTorch and
the SGEMM measurement run on those kernels too.

Each side's figure is the best of --repeats runs (3), zrt-train's and PyTorch's alternating, so
a slow spell of this VM (its SGEMM rate swings from 95 to 189 GFLOP/s within one run) that falls
on one side's only run does not decide the ratio; timeit takes the best of repeats for the same
reason. Both run under each OpenMP wait policy in --wait-policies (default: OpenMP's own, i.e. the
variable unset, and passive), each in a process of its own, since OpenMP reads OMP_WAIT_POLICY at
start-up. The table compares each one's best, so neither is held to the setting that suits the
other: PyTorch's OpenMP threads spinning beside OpenBLAS's own pool halve its speed on 2 cores,
while for zrt-train either may be the faster. Every policy's figures are printed too.

The PyTorch model below is GPT-2 written plainly (Hugging Face's layout: c_attn split q, k, v,
GELU tanh, LayerNorm eps 1e-5, tied head), trained with torch.optim.AdamW as the config's.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

SHAPES = {"4x256": (4, 256, 4, 128), "6x384": (6, 384, 6, 256)}  # layers, hidden, heads, T


class Block(torch.nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(c, eps=1e-5)
        self.c_attn = torch.nn.Linear(c, 3 * c)
        self.c_proj = torch.nn.Linear(c, c)
        self.ln_2 = torch.nn.LayerNorm(c, eps=1e-5)
        self.c_fc = torch.nn.Linear(c, 4 * c)
        self.mlp_proj = torch.nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, t, c = x.shape
        h = self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, h, c // h).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(torch.nn.Module):
    def __init__(self, layers, c, heads, t):
        super().__init__()
        self.wte = torch.nn.Embedding(256, c)
        self.wpe = torch.nn.Embedding(t, c)
        self.h = torch.nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(c, eps=1e-5)
        self.register_buffer("mask", torch.triu(torch.ones(t, t, dtype=torch.bool), 1))
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0, 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, 256), targets.reshape(-1))


def sgemm_rate(threads, n=2048, reps=5):
    """The machine's SGEMM rate: the better of torch.mm (libblas.so.3) and oneDNN's sgemm, which
    zrt-train's products go through, each a 2048^3 product on `threads` threads."""
    torch.set_num_threads(threads)
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    torch.mm(a, b)
    blas = 2 * n**3 / min(timed(lambda: torch.mm(a, b)) for _ in range(reps))
    dnnl = dnnl_sgemm()

    def onednn():
        st = dnnl(b"N", b"N", n, n, n, 1.0, a.data_ptr(), n, b.data_ptr(), n, 0.0, c.data_ptr(), n)
        if st != 0:
            raise SystemExit(f"dnnl_sgemm failed with dnnl_status_t {st}")
    onednn()
    return max(blas, 2 * n**3 / min(timed(onednn) for _ in range(reps)))


def dnnl_sgemm():
    """oneDNN's dnnl_sgemm (row-major, as cblas with CblasRowMajor), from Debian's libdnnl2. It
    runs on the OpenMP runtime PyTorch set to `threads` above."""
    import ctypes
    lib = ctypes.CDLL("libdnnl.so.2")
    f = lib.dnnl_sgemm
    i64, fl, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, fl, ptr, i64, ptr, i64, fl, ptr, i64]
    f.restype = ctypes.c_int
    return f


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def torch_tokens_per_s(shape, batch, threads, steps, data):
    layers, c, heads, t = shape
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Gpt2(layers, c, heads, t)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
    times = []
    for s in range(steps + 2):  # two warm-up steps, not counted
        starts = [((s * batch + j) * t) % (len(data) - t - 1) for j in range(batch)]
        x = torch.tensor([list(data[i:i + t]) for i in starts])
        y = torch.tensor([list(data[i + 1:i + t + 1]) for i in starts])

        def step():
            opt.zero_grad(set_to_none=True)
            model(x, y).backward()
            opt.step()
        dt = timed(step)
        if s >= 2:
            times.append(dt)
    return batch * t / statistics.median(times)


FALLBACK_CORES = ("Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom")


def better_blas_core():
    """The OpenBLAS kernel set to ask for instead of the one it chose as this process loaded, or
    None: zrt-train's rule (tools/trainer/model/blas_core.h). OpenBLAS 0.3.21 falls back to its
    SSE3 kernels on CPUs it does not know; zrt-train then runs itself again with the CPU's own,
    so PyTorch, on the same library, gets the same here, as a user who tuned it would run it."""
    import ctypes
    lib = ctypes.CDLL("libblas.so.3")
    if not hasattr(lib, "openblas_get_corename"):
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    if lib.openblas_get_corename().decode() not in FALLBACK_CORES:
        return None
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    return "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None


def policy_env(policy):
    """The environment for a child under one OpenMP wait policy ("default": the variable unset)."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    return env


def torch_child(a, name, policy):
    """PyTorch's tokens/s on one shape, measured in a process of its own under `policy`."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", name, "--batch", str(a.batch),
           "--threads", str(a.threads), "--steps", str(a.steps), "--data", a.data, "--trainer", a.trainer]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=policy_env(policy))
    if p.returncode != 0:
        raise SystemExit(f"PyTorch on {name} under OMP_WAIT_POLICY={policy} failed:\n{p.stderr}")
    return float(p.stdout.split()[-1])


def write_config(path, stage, batch, micro):
    cfg = {
        "train_batch_size": batch,
        "train_micro_batch_size_per_gpu": micro,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}},
        "zero_optimization": {"stage": stage},
        "zrt": {"device": "host", "host_device_memory": "8G"},
    }
    with open(path, "w") as f:
        json.dump(cfg, f)


def zrt_run(a, shape, stage, ranks, batch, threads, work, policy):
    """tokens/s (median over timed steps), FLOPs per token and the step split (medians, s), or
    None, None and an error message."""
    layers, c, heads, t = shape
    config = os.path.join(work, f"stage{stage}_np{ranks}.json")
    write_config(config, stage, batch, batch // ranks)
    log = os.path.join(work, f"log_stage{stage}_np{ranks}_{policy}.jsonl")
    cmd = a.mpirun + ["-np", str(ranks), "-x", f"OMP_NUM_THREADS={threads}", a.trainer,
                      "--config", config, "--steps", str(a.steps + 2), "--layers", str(layers),
                      "--hidden", str(c), "--heads", str(heads), "--seq-len", str(t),
                      "--eval-every", "0", "--eval-batches", "1", "--json-log", log,
                      "--progress", "off", "--data", a.data]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=policy_env(policy))
    if p.returncode != 0:
        lines = [l for l in (p.stdout + p.stderr).splitlines() if "zrt-train" in l]
        return None, None, (lines[0] if lines else f"exit {p.returncode}")
    flops = float(re.search(r"([0-9.e+]+) model FLOPs per token", p.stdout).group(1))
    with open(log) as f:
        # The last line is the memory ledger; the first two steps are warm-up.
        rows = [r for r in map(json.loads, f) if "step" in r][2:]
    split = {k: statistics.median(r[k] for r in rows) for k in ("step_s", "compute_s", "optimizer_s")}
    return statistics.median(r["tokens_per_s"] for r in rows), flops, split


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--shapes", default="4x256,6x384")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each side under each policy, alternating; each side's best counts")
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--wait-policies", default="default,passive",
                    help="OMP_WAIT_POLICY values to run both under (default: the variable unset)")
    ap.add_argument("--sharding", action="store_true",
                    help="also stage 3 on 2 ranks against stage 0 on 1 rank")
    ap.add_argument("--mpirun", default="mpirun --oversubscribe --bind-to none" +
                    (" --allow-run-as-root" if os.getuid() == 0 else ""))
    ap.add_argument("--torch-child", metavar="SHAPE", help=argparse.SUPPRESS)
    a = ap.parse_args()
    with open(a.data, "rb") as f:
        data = f.read()
    data = data[:len(data) * 9 // 10]
    if a.torch_child:
        print(torch_tokens_per_s(SHAPES[a.torch_child], a.batch, a.threads, a.steps, data))
        return 0
    if "OPENBLAS_CORETYPE" not in os.environ and (better := better_blas_core()):
        # OpenBLAS reads the variable only as it loads: run this script again with it set.
        print(f"OpenBLAS chose its SSE3 kernels on this CPU: running again with OPENBLAS_CORETYPE={better}",
              flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OPENBLAS_CORETYPE=better))
    a.mpirun = a.mpirun.split()
    policies = a.wait_policies.split(",")
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    print(f"torch {torch.__version__} eager, libblas.so.3 -> {blas}"
          f"{'' if 'openblas' in blas else '  (NOT OpenBLAS: torch products run on the reference BLAS)'}")
    print(f"threads {a.threads}, batch {a.batch} sequences, median of {a.steps} steps after 2 warm-up; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"OMP_WAIT_POLICY {', '.join(policies)}, {a.repeats} runs each, alternating; "
          f"the best of each side compared")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"SGEMM: the better of torch.mm and oneDNN's sgemm, 2048^3, {a.threads} threads, before and after each shape")
    print(f"{'shape':<14} {'policy':<8} {'torch tok/s':>12} {'zrt tok/s':>10}   zrt step: compute + optimizer (s)")
    results = []
    failed = False
    with tempfile.TemporaryDirectory() as work:
        for name in a.shapes.split(","):
            shape = SHAPES[name]
            label = f"{name} T{shape[3]}"
            runs = []  # (policy, torch tok/s, zrt tok/s, flops, split)
            before = sgemm_rate(a.threads)
            for rep in range(a.repeats):
                for policy in policies:
                    zrt, flops, split = zrt_run(a, shape, 0, 1, a.batch, a.threads, work, policy)
                    if zrt is None:
                        print(f"{label:<14} {policy:<8} zrt-train failed: {split}")
                        failed = True
                        continue
                    th = torch_child(a, name, policy)
                    runs.append((policy, th, zrt, flops, split))
                    print(f"{label:<14} {policy:<8} {th:12.0f} {zrt:10.0f}   {split['step_s']:.4f}: "
                          f"{split['compute_s']:.4f} + {split['optimizer_s']:.4f}   (repeat {rep + 1})")
            if not runs:
                continue
            after = sgemm_rate(a.threads)
            print(f"{label:<14} SGEMM {before / 1e9:.1f} GFLOP/s before, {after / 1e9:.1f} after")
            best_torch = max(runs, key=lambda r: r[1])
            best_zrt = max(runs, key=lambda r: r[2])
            results.append((label, best_zrt[3], best_torch[1], best_torch[0], best_zrt[2], best_zrt[0],
                            max(before, after)))
            if a.sharding:
                # Each of 2 ranks gets half the threads, so the node's cores are the same.
                # As many runs as stage 0 had, so both are a best of the same number.
                z3 = [(zrt_run(a, shape, 3, 2, a.batch, max(1, a.threads // 2), work, p)[0], p)
                      for _ in range(a.repeats) for p in policies]
                z3 = [(z, p) for z, p in z3 if z is not None]
                if not z3:
                    print(f"{label:<14} stage 3 on 2 ranks: failed")
                    failed = True
                else:
                    z, p = max(z3)
                    print(f"{label:<14} stage 3 on 2 ranks {z:.0f} tok/s ({p}) = "
                          f"{z / best_zrt[2]:.2f} x stage 0 on 1 rank ({best_zrt[0]})")
    print(f"{'shape':<14} {'FLOPs/token':>12} {'torch tok/s':>20} {'zrt tok/s':>18} {'zrt/torch':>9} "
          f"{'SGEMM GFLOP/s':>13} {'torch/SGEMM':>11} {'zrt/SGEMM':>9}")
    for label, flops, th, tp, zrt, zp, rate in results:
        print(f"{label:<14} {flops:12.3g} {th:10.0f} ({tp:>7}) {zrt:8.0f} ({zp:>7}) {zrt / th:9.2f} "
              f"{rate / 1e9:13.1f} {th * flops / rate:11.2f} {zrt * flops / rate:9.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
