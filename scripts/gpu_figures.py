"""The GPU figures of issue 46, measured side by side in one run, ending with a short table:

  pinned copies     ZRT's pinned transfers against one cudaMemcpyAsync, each way     bar >= 0.9
  CUDA AdamW        against a device-to-device copy of the bytes it moves            bar >= 0.8
  model FLOP rate   zrt-train's (tokens/s x model FLOPs per token) against cuBLAS's
                    fp32 GEMM rate at the model's widest product                     bar >= 0.4
  largest GPT-2     the largest of a ladder of sizes that trains with parameters and
                    optimizer on NVMe (ZeRO-3, 2 steps), within the time budget

    gpu_figures.py [--device cuda:0] [--out DIR] [--budget-s 300]
    gpu_figures.py --host-check [--out DIR]

zrt-gpu-bench, zrt-train and mpirun come from PATH (the bundle's env.sh puts them there). The
copies, the Adam step and the GEMM are zrt-gpu-bench's paired turns; the FLOP rate is the median
tokens/s of zrt-train's steps after the second. The ladder climbs while the next size's
predicted time (the last one's, scaled by parameters) fits what is left of --budget-s: the
largest that trained is reported with the reason the next was not (failed, naming its last
error line; or not tried, for time). Writes figures.json and one log per run to --out.
--host-check runs the trainer's parts on the host device with tiny sizes and no GPU figures: a
check of this script where no GPU is (tests/tools: tools_gpu_figures_host_check), not a
measurement.
Exit status: 0 every part ran and met its bar; 1 otherwise; 2 bad input."""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BARS = {"copies": 0.9, "adam": 0.8, "flops": 0.4}


class Sizes:
    """A GPT-2 shape for zrt-train: layers, width, heads, sequence length, micro-batch."""

    def __init__(self, layers, hidden, heads, seq, micro):
        self.layers, self.hidden, self.heads, self.seq, self.micro = layers, hidden, heads, seq, micro

    def args(self):
        return ["--layers", str(self.layers), "--hidden", str(self.hidden), "--heads", str(self.heads),
                "--seq-len", str(self.seq)]

    def __str__(self):
        return f"{self.layers}x{self.hidden}"

    def params(self):
        """About zrt-train's count: 12 L H^2 in the blocks, the byte vocabulary and positions."""
        return 12 * self.layers * self.hidden ** 2 + (256 + self.seq) * self.hidden


def config(template, micro, out, nvme=None):
    """A DeepSpeed config from one of configs/, for one rank and `micro` sequences a step."""
    with open(os.path.join(ROOT, "configs", template)) as f:
        c = json.load(f)
    c["train_batch_size"] = c["train_micro_batch_size_per_gpu"] = micro
    c.pop("gradient_accumulation_steps", None)
    for part in ("offload_optimizer", "offload_param"):
        if nvme and part in c.get("zero_optimization", {}):
            c["zero_optimization"][part]["nvme_path"] = nvme
    path = os.path.join(out, f"{os.path.splitext(template)[0]}-mb{micro}.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


class Trained:
    """One zrt-train run: its exit status, parameter count, FLOPs per token and step records."""

    def __init__(self, rc, output, steps, seconds):
        self.rc, self.output, self.steps, self.seconds = rc, output, steps, seconds
        m = re.search(r"([\d.]+)M parameters, ([\d.e+]+) model FLOPs per token", output)
        self.params = float(m.group(1)) * 1e6 if m else None
        self.flops_per_token = float(m.group(2)) if m else None

    def ok(self):
        return self.rc == 0 and self.steps and all(math.isfinite(s["loss"]) for s in self.steps)

    def why_not(self):
        if self.rc == 124:
            return f"timed out after {self.seconds:.0f} s"
        if self.rc != 0:
            # zrt-train's own last error line, not mpirun's report that a rank failed.
            ours = [ln for ln in self.output.splitlines() if ln.startswith("zrt-train")]
            return f"exit {self.rc}: {ours[-1][:200] if ours else 'no error line from zrt-train'}"
        return "a loss is not finite" if self.steps else "no step logged"


def train(a, sizes, cfg, steps, name, timeout):
    log = os.path.join(a.out, f"{name}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = ["mpirun", "--allow-run-as-root", "-np", "1", "zrt-train", "--data", a.data, *sizes.args(),
           "--steps", str(steps), "--eval-every", "0", "--progress", "off", "--config", cfg,
           "--device", a.device, "--json-log", log]
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = 124, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    seconds = time.monotonic() - t0
    with open(os.path.join(a.out, f"{name}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + output)
    steps = []
    if os.path.exists(log):
        with open(log) as f:
            steps = [r for r in map(json.loads, f) if "step" in r]
    return Trained(rc, output, steps, seconds)


def bench(a, gemm):
    cmd = ["zrt-gpu-bench", "--device", a.device, "--gemm", gemm, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    with open(os.path.join(a.out, "gpu-bench.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"zrt-gpu-bench exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-figures-out"))
    p.add_argument("--budget-s", type=float, default=300, help="time the largest-GPT-2 ladder may take")
    p.add_argument("--data", default=None, help="text to train on (default: the bundle's share/train.txt, "
                                                   "else the GPL-3 text)")
    p.add_argument("--host-check", action="store_true")
    a = p.parse_args()
    if a.host_check:
        a.device = "host"
    os.makedirs(a.out, exist_ok=True)
    if a.data is None:
        shared = os.path.join(ROOT, "..", "share", "train.txt")
        a.data = shared if os.path.exists(shared) else "/usr/share/common-licenses/GPL-3"
    if a.host_check:
        flop_model = Sizes(2, 64, 2, 64, 2)
        ladder = [Sizes(1, 32, 2, 32, 1), Sizes(2, 64, 2, 32, 1), Sizes(2, 128, 2, 32, 1)]
    else:
        # GPT-2 small's shape (vocabulary 256); the ladder is GPT-2 medium, large and XL's shapes
        # and two past them.
        flop_model = Sizes(12, 768, 12, 1024, 8)
        ladder = [Sizes(24, 1024, 16, 1024, 1), Sizes(36, 1280, 20, 1024, 1), Sizes(48, 1600, 25, 1024, 1),
                  Sizes(40, 2560, 32, 1024, 1), Sizes(48, 3072, 32, 1024, 1)]
    rows, failed = [], False

    def row(figure, zrt, yardstick, ratio, bar, part_failed=False):
        nonlocal failed
        if part_failed:
            verdict = "FAILED"
        else:
            verdict = "-" if bar is None else ("ok" if ratio >= bar else "BELOW")
        failed |= verdict in ("FAILED", "BELOW")
        rows.append({"figure": figure, "zrt": zrt, "yardstick": yardstick, "ratio": ratio, "bar": bar,
                     "verdict": verdict})

    tokens = flop_model.micro * flop_model.seq
    gemm_shape = f"{tokens}x{4 * flop_model.hidden}x{flop_model.hidden}"
    gemm_rate = None
    if not a.host_check:
        try:
            for r in bench(a, gemm_shape):
                if r["figure"].startswith("cuBLAS"):
                    gemm_rate = r["zrt"]
                    continue
                bar = BARS["adam"] if r["figure"].startswith("CUDA AdamW") else BARS["copies"]
                row(r["figure"], f"{r['zrt']:.1f} {r['unit']}", f"{r['yardstick_rate']:.1f} {r['unit']} "
                    f"({r['yardstick']})", r["ratio"], bar)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
            row(f"zrt-gpu-bench: {e}", "-", "-", None, None, part_failed=True)

    cfg = config("stage0.json", flop_model.micro, a.out)
    t = train(a, flop_model, cfg, 8, "flop-rate", 300)
    name = f"zrt-train FLOP rate, {flop_model} T{flop_model.seq} mb{flop_model.micro}, stage 0"
    if t.ok() and len(t.steps) >= 3 and t.flops_per_token:
        rate = statistics.median(s["tokens_per_s"] for s in t.steps[2:]) * t.flops_per_token / 1e12
        if gemm_rate:
            row(name, f"{rate:.2f} TFLOP/s", f"{gemm_rate:.2f} TFLOP/s (cuBLAS fp32 GEMM {gemm_shape})",
                rate / gemm_rate, BARS["flops"])
        elif a.host_check:
            row(name, f"{rate:.4f} TFLOP/s", "- (no GPU: --host-check)", None, None)
        else:
            row(name, f"{rate:.2f} TFLOP/s", "- (no GEMM rate: zrt-gpu-bench failed)", None, None, part_failed=True)
    else:
        why = (t.why_not() if not t.ok() else
               f"{len(t.steps)} steps logged, 3 needed" if len(t.steps) < 3 else
               "no 'model FLOPs per token' in zrt-train's banner")
        row(f"{name}: {why}", "-", "-", None, BARS["flops"], part_failed=True)

    # The swap files go to a folder of their own under $TMPDIR, removed after the ladder: --out
    # (the device machine's $OUT) is copied back, and these are gigabytes.
    nvme_dir = tempfile.TemporaryDirectory(prefix="zrt-figures-nvme-")
    nvme = nvme_dir.name
    start, largest, stopped, last = time.monotonic(), None, "every size trained", None
    for sizes in ladder:
        left = a.budget_s - (time.monotonic() - start)
        if last is not None:
            # Time grows about with the parameters: the next size's, scaled from the last one's.
            guess = last.seconds * (sizes.layers * sizes.hidden ** 2) / (prev.layers * prev.hidden ** 2)
            if guess > left:
                stopped = f"{sizes} not tried: about {guess:.0f} s, {left:.0f} s of the budget left"
                break
        # fp32 parameters, gradients, both moments and the swap's slack: about 20 bytes a
        # parameter on the drive. A full drive would take figures.json and the logs with it.
        need, free = 20 * sizes.params(), shutil.disk_usage(nvme).free
        if need > 0.8 * free:
            stopped = f"{sizes} not tried: needs about {need / 1e9:.0f} GB on NVMe, {free / 1e9:.0f} GB free"
            break
        cfg = config("stage3_nvme_offload.json", sizes.micro, a.out, nvme)
        t = train(a, sizes, cfg, 2, f"nvme-{sizes}", max(left, 30))
        if not t.ok():
            stopped = f"{sizes} failed: {t.why_not()}"
            break
        largest, last, prev = (sizes, t), t, sizes
    nvme_dir.cleanup()
    if largest:
        s, t = largest
        params = f"{t.params / 1e6:.4g}M" if t.params else "? (no count in zrt-train's banner)"
        row(f"largest GPT-2 on NVMe (ZeRO-3, params+optimizer): {s}, {params} params",
            f"trained, {t.steps[-1]['step_s']:.3g} s/step", stopped, None, None)
    else:
        row(f"largest GPT-2 on NVMe: none trained ({stopped})", "-", "-", None, None, part_failed=True)

    with open(os.path.join(a.out, "figures.json"), "w") as f:
        json.dump({"device": a.device, "rows": rows}, f, indent=1)
    print(f"\nGPU figures on {a.device} (logs in {a.out})")
    print(f"{'figure':<70} {'ZRT':>22}  {'yardstick':<52} {'ratio':>6} {'bar':>5}")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        bar = "-" if r["bar"] is None else f">={r['bar']}"
        print(f"{r['figure']:<70} {r['zrt']:>22}  {r['yardstick']:<52} {ratio:>6} {bar:>5} {r['verdict']}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
