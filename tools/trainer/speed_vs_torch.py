#!/usr/bin/python3
"""zrt-train against PyTorch eager on the same GPT-2 shape, batch and threads, in one run.

  /usr/bin/python3 tools/trainer/speed_vs_torch.py --trainer build/tools/trainer/zrt-train
  ... --sharding    also stage 3 on 2 ranks against stage 0 on 1 rank (the cost of sharding)

For each shape it prints tokens/s of a full training step (forward, backward, AdamW) of PyTorch
and of zrt-train twice: with its matrix products through oneDNN's sgemm (its default) and through
OpenBLAS's (ZRT_GPT2_GEMM=openblas), the library PyTorch's products run on here. So three ratios:
  zrt/torch      zrt-train as shipped against PyTorch: the code and the GEMM library together;
  zrtOB/torch    both on the same OpenBLAS: the code's share (kernels, threading, optimizer);
  zrt/zrtOB      the same code on two libraries: oneDNN's share.
Tokens/s are measured, so these ratios do not depend on any FLOP count.

FLOPs per token are counted for both sides by one formula, PaLM's (Chowdhery et al. 2022,
appendix B), as nanoGPT's estimate_mfu computes it: 6 N + 12 L H Q T, N every parameter but the
position embeddings (the tied head once), L layers, H heads of Q dimensions, T the sequence
length (attention's whole T x T, as PyTorch's masked attention computes it; zrt-train's banner
counts only the causal half, and its figure is printed for reference, not used). Each side's model
FLOP rate is that count times its tokens/s, as a fraction of the SGEMM rate measured here, in this
run, with the same threads (a 2048^3 product, the better of torch.mm, on PyTorch's BLAS, and
oneDNN's sgemm; measured right before and right after each shape's runs, and the higher of the two
divides that shape's figures: this VM has slow and fast spells of tens of seconds, which a
measurement minutes away misses, and a busy moment still cannot flatter).

It names each side's GEMM library and refuses to measure (exit 2) where either runs on a slow
BLAS: PyTorch on Debian's reference libblas.so.3 (not OpenBLAS: products ~10x slower; select
OpenBLAS with update-alternatives), or OpenBLAS on its pre-AVX kernels on a CPU with AVX2 or
AVX-512 (in PyTorch's process or in zrt-train's banner). Where OpenBLAS 0.3.21 falls back to its
SSE3 kernels on a CPU it does not know (an Emerald Rapids Xeon, say), zrt-train runs itself again
with OPENBLAS_CORETYPE set to the CPU's own; the script first does the same to itself, so PyTorch
and the SGEMM measurement run on those kernels too. It also prints zrt-train's step split (median
seconds of compute, i.e. forward and backward, and of the optimizer) and the load average.

Each side's figure is the best of --repeats runs (3), zrt-train's and PyTorch's alternating, so
a slow spell of this VM (its SGEMM rate swings from 95 to 189 GFLOP/s within one run) that falls
on one side's only run does not decide the ratio; timeit takes the best of repeats for the same
reason. Each runs under each OpenMP wait policy in --wait-policies (default: OpenMP's own, i.e. the
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
VOCAB = 256

FLOP_FORMULA = ("PaLM's 6N + 12·L·H·Q·T per token (Chowdhery et al. 2022, app. B; nanoGPT's "
                "estimate_mfu): N = parameters but position embeddings, attention's full T x T")


def gpt2_parameters(layers, c, t, vocab=VOCAB):
    """Parameters of the GPT-2 both sides train, position embeddings (t x c) included: per block
    c_attn c x 3c + 3c, attn c_proj c x c + c, c_fc c x 4c + 4c, mlp c_proj 4c x c + c, two
    LayerNorms 2c each (12 c^2 + 13 c); wte vocab x c (the head is tied to it); ln_f 2c."""
    return layers * (12 * c * c + 13 * c) + vocab * c + t * c + 2 * c


def flops_per_token(layers, c, heads, t, vocab=VOCAB):
    """Model FLOPs per token of forward + backward by FLOP_FORMULA, the same for both sides:
    6 N (2 forward, 4 backward per parameter) with N all parameters but the position embeddings,
    plus 12 L H Q T for attention's QK^T and PV over the whole T x T (H Q = c)."""
    n = gpt2_parameters(layers, c, t, vocab) - t * c
    return 6 * n + 12 * layers * heads * (c // heads) * t



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


def sgemm_rates(threads, n=2048, reps=5):
    """The machine's SGEMM rates (FLOP/s) on `threads` threads, a 2048^3 product each: torch.mm
    (PyTorch's BLAS) and oneDNN's sgemm (zrt-train's default for its products)."""
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
    return blas, 2 * n**3 / min(timed(onednn) for _ in range(reps))


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


# OpenBLAS's x86-64 kernel sets below Sandy Bridge: on a CPU with AVX2 or AVX-512 a fallback (it
# does not know the CPU model), never its choice (zrt-train's rule, tools/trainer/model/blas_core.h).
FALLBACK_CORES = ("Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        return set(next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), []))


def core_for(flags):
    """The OpenBLAS kernel set for a CPU with these flags, or None where no wider set applies."""
    return "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None


def blas_problem(who, library, corename, flags):
    """Why `who`'s BLAS makes a speed figure meaningless, or None. `corename` is what OpenBLAS's
    openblas_get_corename() returned in that process, None where `library` is not OpenBLAS."""
    if corename is None:
        return (f"{who} runs on {library}, which is not OpenBLAS: Debian's reference BLAS, whose "
                f"products run about 10x slower, so any figure would measure it, not the code. Select "
                f"OpenBLAS (apt-get install libopenblas0-pthread; update-alternatives --set "
                f"libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3)")
    better = core_for(flags)
    if corename in FALLBACK_CORES and better:
        return (f"{who}'s OpenBLAS ({library}) runs its {corename} kernels, a pre-AVX fallback, on a "
                f"CPU with {'AVX-512' if better == 'SkylakeX' else 'AVX2'}: its products run several "
                f"times slower than they could. Unset OPENBLAS_CORETYPE, or set it to {better}")
    return None


def openblas_info(path):
    """(corename, config) of the OpenBLAS at `path` as loaded in this process, or (None, None) where
    the library there is not OpenBLAS."""
    import ctypes
    lib = ctypes.CDLL(path)
    if not hasattr(lib, "openblas_get_corename"):
        return None, None
    lib.openblas_get_corename.restype = lib.openblas_get_config.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode(), lib.openblas_get_config().decode()


def loaded_libraries(*names):
    """Paths (resolved) of the shared libraries of this process whose file names start with one of
    `names`, in the order they were mapped."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith(names) and os.path.realpath(path) not in out:
                out.append(os.path.realpath(path))
    return out


def torch_gemm():
    """(a description of PyTorch's GEMM library, the problem with it or None). Its fp32 products
    (nn.Linear, matmul) call BLAS's sgemm_: which one is BLAS_INFO in torch.__config__.show()
    ("generic" for Debian's build: whatever libblas.so.3 points at)."""
    config = torch.__config__.show()
    info = re.search(r"BLAS_INFO=(\w+)", config)
    info = info.group(1) if info else "unknown"
    mkldnn = re.search(r"MKL-DNN (v[\w.]+)", config)
    note = (f"; MKL-DNN {mkldnn.group(1)} built in, not used by fp32 eager products"
            if mkldnn and torch.backends.mkldnn.is_available() else "")
    if info == "mkl":
        return f"torch {torch.__version__}: BLAS_INFO=mkl, Intel MKL's sgemm{note}", None
    # libblas.so.3 where torch links it (Debian's), else an OpenBLAS it links directly.
    libs = loaded_libraries("libblas.so") or loaded_libraries("libopenblas")
    if not libs:
        return f"torch {torch.__version__}: BLAS_INFO={info}, no BLAS library found loaded{note}", None
    corename, cfg = openblas_info(libs[0])
    if corename is None:
        desc = f"{libs[0]} (not OpenBLAS)"
    else:
        backend = next((l for l in loaded_libraries("libopenblas") if l != libs[0]), None)
        desc = (f"{libs[0]}{f' -> {backend}' if backend else ''} "
                f"({' '.join(cfg.split()[:2])}, {corename} kernels)")
    return (f"torch {torch.__version__}: BLAS_INFO={info}, sgemm_ from {desc}{note}",
            blas_problem("PyTorch", libs[0], corename, cpu_flags()))


def zrt_libraries(trainer):
    """Where zrt-train's libdnnl.so.2 and libopenblas.so.0 resolve ({soname: path}), from ldd."""
    p = subprocess.run(["ldd", trainer], capture_output=True, text=True)
    libs = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\s*(libdnnl\.so\S*|libopenblas\.so\S*|libblas\.so\S*) => (\S+)", line)
        if m:
            libs[m.group(1)] = os.path.realpath(m.group(2))
    return libs


def onednn_version(path):
    import ctypes

    class Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                    ("hash", ctypes.c_char_p)]
    lib = ctypes.CDLL(path)
    lib.dnnl_version.restype = ctypes.POINTER(Version)
    v = lib.dnnl_version().contents
    return f"{v.major}.{v.minor}.{v.patch}"


GEMMS = {"onednn": "oneDNN's dnnl_sgemm", "openblas": "OpenBLAS's cblas_sgemm"}


def zrt_gemm_names(trainer):
    """{ZRT_GPT2_GEMM value: what zrt-train's products run on under it}, naming the files."""
    libs = zrt_libraries(trainer)
    dnnl = next((v for k, v in libs.items() if k.startswith("libdnnl")), None)
    ob = next((v for k, v in libs.items() if k.startswith("libopenblas")), None)
    if dnnl is None or ob is None:
        raise SystemExit(f"{trainer}: ldd finds no libdnnl.so or libopenblas.so: {libs}")
    cfg = openblas_info(ob)[1] or "not OpenBLAS"
    return {"onednn": f"oneDNN {onednn_version(dnnl)}'s dnnl_sgemm ({dnnl})",
            "openblas": f"OpenBLAS's cblas_sgemm ({ob}, {' '.join(cfg.split()[:2])})"}


def parse_banner(stdout):
    """From zrt-train's banner: (parameters, its own FLOPs per token, OpenBLAS's kernel set)."""
    m = re.search(r"([0-9.]+)M parameters, ([0-9.e+]+) model FLOPs per token", stdout)
    k = re.search(r"^OpenBLAS: (\S+) kernels", stdout, re.M)
    if not m or not k:
        raise SystemExit(f"zrt-train's banner lacks its parameters or OpenBLAS line:\n{stdout[:2000]}")
    return float(m.group(1)) * 1e6, float(m.group(2)), k.group(1)


def better_blas_core():
    """The OpenBLAS kernel set to ask for instead of the one it chose as this process loaded, or
    None: zrt-train's rule (tools/trainer/model/blas_core.h). OpenBLAS 0.3.21 falls back to its
    SSE3 kernels on CPUs it does not know; zrt-train then runs itself again with the CPU's own,
    so PyTorch, on the same library, gets the same here, as a user who tuned it would run it."""
    libs = loaded_libraries("libblas.so", "libopenblas")
    corename = openblas_info(libs[0])[0] if libs else None
    return core_for(cpu_flags()) if corename in FALLBACK_CORES else None


def refuse(message):
    print(f"speed_vs_torch.py: refusing to measure: {message}", file=sys.stderr)
    sys.exit(2)


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


def zrt_run(a, shape, stage, ranks, batch, threads, work, policy, gemm="onednn"):
    """One zrt-train run with its products through `gemm` (ZRT_GPT2_GEMM): {"tok_s": median over
    the timed steps, "split": medians (s), "banner": parse_banner's}, or {"error": message}."""
    layers, c, heads, t = shape
    config = os.path.join(work, f"stage{stage}_np{ranks}.json")
    write_config(config, stage, batch, batch // ranks)
    log = os.path.join(work, f"log_stage{stage}_np{ranks}_{policy}_{gemm}.jsonl")
    cmd = a.mpirun + ["-np", str(ranks), "-x", f"OMP_NUM_THREADS={threads}", "-x", "ZRT_GPT2_GEMM",
                      "-x", "ZRT_LOG_LEVEL", a.trainer,
                      "--config", config, "--steps", str(a.steps + 2), "--layers", str(layers),
                      "--hidden", str(c), "--heads", str(heads), "--seq-len", str(t),
                      "--eval-every", "0", "--eval-batches", "1", "--json-log", log,
                      "--progress", "off", "--data", a.data]
    # At info level the model names the library it was given (a build that ignores the variable
    # would not), and nothing else per step.
    env = dict(policy_env(policy), ZRT_GPT2_GEMM=gemm, ZRT_LOG_LEVEL="info")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        lines = [l for l in (p.stdout + p.stderr).splitlines() if "zrt-train" in l or "gpt2:" in l]
        return {"error": lines[0] if lines else f"exit {p.returncode}"}
    if f"matrix products through {GEMMS[gemm]}" not in p.stderr:
        raise SystemExit(f"{a.trainer} did not say its products went through {GEMMS[gemm]} with "
                         f"ZRT_GPT2_GEMM={gemm} (a build from before the variable?):\n{p.stderr[:2000]}")
    banner = parse_banner(p.stdout)
    if problem := blas_problem("zrt-train", "libopenblas.so.0", banner[2], cpu_flags()):
        refuse(problem)
    if abs(banner[0] - gpt2_parameters(layers, c, t)) > 500:  # the banner's %.3fM
        refuse(f"zrt-train's {banner[0]:.0f} parameters are not the PyTorch model's "
               f"{gpt2_parameters(layers, c, t)}: the two sides would not train the same model")
    with open(log) as f:
        # The last line is the memory ledger; the first two steps are warm-up.
        rows = [r for r in map(json.loads, f) if "step" in r][2:]
    split = {k: statistics.median(r[k] for r in rows) for k in ("step_s", "compute_s", "optimizer_s")}
    return {"tok_s": statistics.median(r["tokens_per_s"] for r in rows), "split": split, "banner": banner}


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
    ap.add_argument("--zrt-gemm", default="onednn,openblas",
                    help="ZRT_GPT2_GEMM values zrt-train runs under (its products' library)")
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
    gemms = a.zrt_gemm.split(",")
    if not gemms or any(g not in GEMMS for g in gemms):
        raise SystemExit(f"--zrt-gemm takes a list of {', '.join(GEMMS)}, got {a.zrt_gemm}")
    torch_desc, problem = torch_gemm()
    if problem:
        refuse(problem)
    zrt_names = zrt_gemm_names(a.trainer)
    a.mpirun = a.mpirun.split()
    policies = a.wait_policies.split(",")
    col = {"onednn": "zrt", "openblas": "zrtOB"}
    print(f"FLOPs per token, both sides: {FLOP_FORMULA}")
    print("GEMM libraries (matrix products):")
    print(f"  torch  PyTorch eager, {torch_desc}")
    for g in gemms:
        print(f"  {col[g]:<6} zrt-train, ZRT_GPT2_GEMM={g}: {zrt_names[g]}"
              f"{' (its default)' if g == 'onednn' else ''}; column sums on OpenBLAS's sgemv")
    print(f"threads {a.threads}, batch {a.batch} sequences, median of {a.steps} steps after 2 warm-up; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"OMP_WAIT_POLICY {', '.join(policies)}, {a.repeats} runs each, alternating; "
          f"the best of each side compared")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"SGEMM: 2048^3 on {a.threads} threads through torch.mm and through oneDNN's sgemm, before and "
          f"after each shape; the best of the four divides the shape's FLOP rates")
    print(f"{'shape':<14} {'policy':<8} {'torch tok/s':>12} " +
          " ".join(f"{col[g] + ' tok/s':>11}" for g in gemms) + "   zrt-train step: compute + optimizer (s)")
    results = []
    failed = False
    with tempfile.TemporaryDirectory() as work:
        for name in a.shapes.split(","):
            shape = SHAPES[name]
            label = f"{name} T{shape[3]}"
            runs = []  # (policy, torch tok/s, {gemm: zrt run})
            before = sgemm_rates(a.threads)
            for rep in range(a.repeats):
                for policy in policies:
                    zrt = {g: zrt_run(a, shape, 0, 1, a.batch, a.threads, work, policy, g) for g in gemms}
                    bad = [g for g, r in zrt.items() if "error" in r]
                    for g in bad:
                        print(f"{label:<14} {policy:<8} zrt-train ({g}) failed: {zrt[g]['error']}")
                    if bad:
                        failed = True
                        continue
                    th = torch_child(a, name, policy)
                    runs.append((policy, th, zrt))
                    print(f"{label:<14} {policy:<8} {th:12.0f} " +
                          " ".join(f"{zrt[g]['tok_s']:11.0f}" for g in gemms) + "   " +
                          ", ".join(f"{col[g]} {zrt[g]['split']['step_s']:.4f}: {zrt[g]['split']['compute_s']:.4f}"
                                    f" + {zrt[g]['split']['optimizer_s']:.4f}" for g in gemms) +
                          f"   (repeat {rep + 1})")
            if not runs:
                continue
            after = sgemm_rates(a.threads)
            print(f"{label:<14} SGEMM GFLOP/s torch.mm {before[0] / 1e9:.1f} before, {after[0] / 1e9:.1f} after; "
                  f"oneDNN {before[1] / 1e9:.1f} before, {after[1] / 1e9:.1f} after")
            best_torch = max(runs, key=lambda r: r[1])
            best = {g: max(((r[2][g]["tok_s"], r[0]) for r in runs)) for g in gemms}
            banner_flops = runs[0][2][gemms[0]]["banner"][1]
            results.append((label, flops_per_token(*shape), banner_flops, (best_torch[1], best_torch[0]),
                            best, max(before[0], after[0]), max(before[1], after[1])))
            if a.sharding:
                # Each of 2 ranks gets half the threads, so the node's cores are the same.
                # As many runs as stage 0 had, so both are a best of the same number.
                z3 = [(zrt_run(a, shape, 3, 2, a.batch, max(1, a.threads // 2), work, p), p)
                      for _ in range(a.repeats) for p in policies]
                z3 = [(r["tok_s"], p) for r, p in z3 if "error" not in r]
                if not z3:
                    print(f"{label:<14} stage 3 on 2 ranks: failed")
                    failed = True
                elif "onednn" in best:
                    z, p = max(z3)
                    print(f"{label:<14} stage 3 on 2 ranks {z:.0f} tok/s ({p}) = "
                          f"{z / best['onednn'][0]:.2f} x stage 0 on 1 rank ({best['onednn'][1]}), both oneDNN")
    print()
    print("Each side's best tokens/s (its wait policy); ratios of tokens/s, which no FLOP count enters:")
    print("  zrt/torch: zrt-train as shipped (oneDNN) against PyTorch; zrtOB/torch: both on OpenBLAS,")
    print("  the code's share; zrt/zrtOB: the same code on oneDNN against OpenBLAS, the library's share.")
    print(f"FLOP rate = FLOPs/token ({FLOP_FORMULA.split(' per token')[0]}) x tokens/s, as a fraction "
          f"of the better SGEMM (torch.mm, oneDNN).")
    has = {g: g in gemms for g in GEMMS}
    print(f"{'shape':<14} {'FLOPs/token':>11} {'torch tok/s':>19} " +
          " ".join(f"{col[g] + ' tok/s':>19}" for g in gemms) +
          (f" {'zrt/torch':>9}" if has["onednn"] else "") + (f" {'zrtOB/torch':>11}" if has["openblas"] else "") +
          (f" {'zrt/zrtOB':>9}" if len(gemms) == 2 else "") +
          f" {'SGEMM torch.mm, oneDNN':>22} {'torch/SGEMM':>11} " + " ".join(f"{col[g] + '/SGEMM':>11}" for g in gemms))
    for label, flops, banner_flops, (th, tp), best, blas, dnnl in results:
        rate = max(blas, dnnl)
        row = f"{label:<14} {flops:11.4g} {th:9.0f} ({tp:>7}) " + " ".join(
            f"{best[g][0]:9.0f} ({best[g][1]:>7})" for g in gemms)
        if has["onednn"]:
            row += f" {best['onednn'][0] / th:9.2f}"
        if has["openblas"]:
            row += f" {best['openblas'][0] / th:11.2f}"
        if len(gemms) == 2:
            row += f" {best['onednn'][0] / best['openblas'][0]:9.2f}"
        row += f" {blas / 1e9:11.1f}, {dnnl / 1e9:8.1f} {th * flops / rate:11.2f} " + " ".join(
            f"{best[g][0] * flops / rate:11.2f}" for g in gemms)
        print(row)
    for label, flops, banner_flops, *_ in results:
        print(f"{label}: {flops:.6g} FLOPs per token by {FLOP_FORMULA.split(' per token')[0]}; zrt-train's "
              f"banner counts causal attention only, {banner_flops:.3g} (about {flops / banner_flops - 1:+.0%}; not used)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
