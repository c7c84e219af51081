#!/usr/bin/env python3
"""zrt-train run as a user runs it, on a model small enough for a test (2 layers x 32 wide, T 32).

  check_trainer.py --mode equivalence --configs DIR -- MPIEXEC... ZRT_TRAIN
      Every config shipped in DIR (each stage, every stage-3 offload variant, the host-simulated
      device; NVMe paths moved under a temporary directory, a `cuda` device run on the host
      device), stage 2 with activation checkpointing (on the device and offloaded), and fp16 with
      the optimizer offloaded to the CPU, each on two ranks against its unsharded reference: the
      same config on one rank at stage 0 with nothing offloaded and the same global batch as
      micro-batches accumulated. Every step's loss and grad norm and the validation loss must
      agree within fp32 rounding (1e-5 relative; fp16: 2e-4): the global batch is the same bytes
      whatever the split, and the engine's ranks end each step with the parameters of one rank
      training on the whole batch.
  check_trainer.py --mode learns --configs DIR -- MPIEXEC... ZRT_TRAIN
      Two ranks, stage 2, 60 steps: the loss starts near ln 256 (a uniform guess over bytes) and
      falls well below it, on the training and the validation text. On a CPU with AVX2 or
      AVX-512 the banner's OpenBLAS kernels are not a pre-AVX fallback (zrt-train runs itself
      again with OPENBLAS_CORETYPE where OpenBLAS fell back), and a core type set by the user
      stays as set.
  check_trainer.py --mode errors --configs DIR -- MPIEXEC... ZRT_TRAIN
      Bad input exits 2 before training with a message naming the flag or file. A --json-log
      whose writes fail (/dev/full) warns once naming it, and the run exits 1 after training.
  check_trainer.py --mode checkpoints --configs DIR -- MPIEXEC... ZRT_TRAIN
      Two ranks. Exact resume at stages 2 and 3: 6 steps straight give the same losses, grad
      norms, learning rates and final validation loss, bit for bit, as 3 steps saved and a new
      process resuming for 3 more. --init-from (a checkpoint, and a safetensors file under Hugging
      Face's names written here from the checkpoint's raw files): on a text whose every step is
      the same batch, the first loss equals the saving run's loss in the step after the save
      (the same weights on the same batch), while the step counter starts again (warmup LR of
      step 1). A missing checkpoint exits 2; another --hidden, and another --heads (every weight's
      shape the same), exit 2 naming the field the checkpoint records; another model's safetensors
      file exits 2 with the engine's message.
  check_trainer.py --mode strict --configs DIR -- MPIEXEC... ZRT_TRAIN
      Two ranks on the strict simulated device (--device host-strict: device memory the host
      cannot touch, every stream task delayed 50 us) against the same run on `host`: the main job
      (stage 3, optimizer and parameters on NVMe), stage 0 with accumulation, stage 1 in fp16,
      stage 2 in bf16 with activation checkpointing offloaded to pinned memory, LoRA on every
      layer with activation checkpointing at stage 3 with the parameters on the CPU, and a
      stage-2 run saved on `host` and resumed on the strict device; on 2 layers x 48 wide, 3
      heads, T 40. Every step's loss, grad norm, loss scale and validation loss must be the same bits:
      the layers run the same code, as host kernels on the device's stream.
      With --device cuda, the same on a GPU (the layers' CUDA phases) within fp32's rounding, and
      the main job on one rank with --backend nccl (the model's data through NCCL); exit 77
      (skipped) before anything runs where no CUDA device answers.

  --cases ID,... (equivalence, checkpoints and strict): only the cases named, by the ids
      `--list-cases` prints (a shipped config's file name without .json, or the ids in the code
      below; checkpoints: resume-stage2, resume-stage3, init-from, the last with the refusals); an
      id that names no case fails the run. For the sanitizer build (tests/tools/trainer/CMakeLists.txt).

MPIEXEC... is the mpirun command line up to (not including) the rank count; the script adds
"-np N". Exit 0 pass, 1 fail.
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

TINY = ["--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "32"]


def run(mpiexec, ranks, trainer, args, timeout=120, env=None):
    cmd = mpiexec + ["-np", str(ranks), trainer] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout + p.stderr, cmd


def train(mpiexec, ranks, trainer, config, steps, extra, workdir, first=1, name=None):
    log = os.path.join(workdir, name or f"{os.path.basename(config)}.np{ranks}.jsonl")
    rc, out, cmd = run(mpiexec, ranks, trainer,
                       ["--config", config, "--steps", str(steps), "--json-log", log,
                        "--progress", "off"] + TINY + extra)
    if rc != 0:
        print(" ".join(cmd))
        print(out)
        raise SystemExit(f"FAIL: exit {rc}")
    with open(log) as f:
        rows = [json.loads(line) for line in f]
    # The last line is rank 0's memory ledger in bytes, every tag and place.
    memory = rows.pop() if rows else {}
    if "memory" not in memory or "total" not in memory:
        raise SystemExit(f"FAIL: {log}'s last line is not the memory ledger: {memory}")
    states = sum(memory["memory"][t][p]["current"] for t in ("parameters", "gradients", "optimizer state")
                 for p in ("device", "pinned host", "host", "nvme"))
    if states <= 0 or memory["total"]["device"]["peak"] < memory["memory"]["activations"]["device"]["peak"]:
        raise SystemExit(f"FAIL: {log}: implausible memory ledger {memory}")
    if [r["step"] for r in rows] != list(range(first, steps + 1)):
        raise SystemExit(f"FAIL: {log} has steps {[r['step'] for r in rows]}, want {first}..{steps}")
    for r in rows:
        for key in ("loss", "tokens_per_s", "skipped", "lr", "loss_scale", "grad_norm"):
            if key not in r:
                raise SystemExit(f"FAIL: {log} step {r['step']} lacks {key}")
    return rows, out


def banner_batch(out):
    """(global, micro, accumulation, precision) from the banner's "... ZeRO stage S, fp32, device
    ...; global batch 16 sequences (512 tokens) = micro-batch 4 x accumulation 2 x 2 ranks"."""
    m = re.search(r"ZeRO stage \d+, (\w+), device .*global batch (\d+) sequences .* = micro-batch (\d+) x "
                  r"accumulation (\d+) x", out)
    if not m:
        raise SystemExit(f"FAIL: no batch line in the banner:\n{out}")
    return int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(1)


def shipped(path, work):
    """A shipped config made runnable here: its nvme_path (one or a list, kept as many) under
    `work`; a `cuda` device run on the host device (no GPU here). Returns (config, flags, note)."""
    with open(path) as f:
        c = json.load(f)
    z = c.get("zero_optimization", {})
    for key in ("offload_optimizer", "offload_param"):
        o = z.get(key) or {}
        if "nvme_path" in o:
            n = len(o["nvme_path"]) if isinstance(o["nvme_path"], list) else 1
            dirs = [os.path.join(work, f"nvme{i}") for i in range(n)]
            for d in dirs:
                os.makedirs(d, exist_ok=True)
            o["nvme_path"] = dirs if isinstance(o["nvme_path"], list) else dirs[0]
    flags, note = [], ""
    if c.get("zrt", {}).get("device", "host") == "cuda":
        flags, note = ["--device", "host"], " (zrt.device cuda run on the host device)"
    return c, flags, note


def selected(a, ids):
    """The ids of `ids` (each case's, in order) that a.cases names, all of them without --cases;
    an id a.cases names that is not in `ids` ends the run (a renamed case is not silently not
    run)."""
    if a.list_cases:
        print("\n".join(ids))
        raise SystemExit(0)
    if a.cases is None:
        return list(ids)
    wanted = a.cases.split(",")
    unknown = [i for i in wanted if i not in ids]
    if unknown:
        raise SystemExit(f"FAIL: --cases names {unknown}, not among this mode's cases {list(ids)}")
    left = [i for i in ids if i not in wanted]
    print(f"== --cases: {len(wanted)} of {len(ids)} cases; not run here: {', '.join(left) or '(none)'}")
    return [i for i in ids if i in wanted]


def unsharded(c, batch):
    """The reference for config `c`: the same model, precision and optimizer on one rank at stage
    0 with nothing offloaded, and the global batch `batch` = (global, micro, accumulation) of the
    two-rank run as micro-batches accumulated on the one rank."""
    r = json.loads(json.dumps(c))
    r["zero_optimization"] = {"stage": 0}
    glob, micro, _ = batch
    r.update(train_batch_size=glob, train_micro_batch_size_per_gpu=micro,
             gradient_accumulation_steps=glob // micro)
    return r


def equivalence(a):
    """Every config shipped in configs/, and the extra cases below, on two ranks against the
    unsharded run of the same config on one rank."""
    steps = 10
    extra = ["--eval-every", "5", "--eval-batches", "2"]
    # fp16 with the optimizer's state and step on the CPU (ZeRO-Offload): the fp16 gradients of
    # the two ranks are summed in another order than one rank's accumulation, so the bound is
    # fp16's (measured: 2.7e-5 over 10 steps), not fp32's.
    fp16 = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
            "fp16": {"enabled": True, "initial_scale_power": 12},
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
            "zrt": {"device": "host", "host_device_memory": "4G"}}
    failures = []
    worst = {}
    references = {}
    with tempfile.TemporaryDirectory() as work:
        cases = []
        for name in sorted(f for f in os.listdir(a.configs) if f.endswith(".json")):
            d = os.path.join(work, name[:-5])
            os.makedirs(d)
            c, flags, note = shipped(os.path.join(a.configs, name), d)
            cases.append((name[:-5], name[:-5] + note, c, flags, flags, 1e-5, d))
        # Activation checkpointing recomputes each block in backward: the same arithmetic, so
        # the same losses (on device, and with the kept inputs offloaded to pinned host memory).
        with open(os.path.join(a.configs, "stage2.json")) as f:
            stage2 = json.load(f)
        for id, flags in (("stage2-ac", ["--activation-checkpointing"]),
                          ("stage2-ac-offload", ["--activation-checkpointing", "--checkpoint-offload"])):
            d = os.path.join(work, "stage2" + str(len(flags)))
            os.makedirs(d)
            cases.append((id, "stage2 " + " ".join(flags), stage2, flags, [], 1e-5, d))
        d = os.path.join(work, "fp16-offload")
        os.makedirs(d)
        cases.append(("fp16-offload", "fp16, stage 2, optimizer offloaded to cpu", fp16, [], [], 2e-4, d))
        # (id, label, config, flags, the reference's flags, bound, work folder)
        run_ids = selected(a, [c[0] for c in cases])
        for id, label, c, flags, ref_flags, bound, d in cases:
            if id not in run_ids:
                continue
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(c, f)
            rows, out = train(a.mpiexec, 2, a.trainer, path, steps, extra + flags, d, name="np2.jsonl")
            glob, micro, accum, precision = banner_batch(out)
            ref_config = json.dumps(unsharded(c, (glob, micro, accum)), sort_keys=True)
            if (ref_config, tuple(ref_flags)) not in references:
                rpath = os.path.join(d, "reference.json")
                with open(rpath, "w") as f:
                    f.write(ref_config)
                ref, rout = train(a.mpiexec, 1, a.trainer, rpath, steps, extra + ref_flags, d,
                                  name="np1.jsonl")
                if banner_batch(rout) != (glob, micro, accum * 2, precision):
                    failures.append(f"{label}: the reference's batch {banner_batch(rout)} is not "
                                    f"{(glob, micro, accum * 2, precision)}")
                if ref[0]["loss"] == ref[-1]["loss"]:
                    failures.append(f"{label}: the reference run's loss did not change: nothing compared")
                references[(ref_config, tuple(ref_flags))] = ref
            ref = references[(ref_config, tuple(ref_flags))]
            print(f"== {label}: 2 ranks, {precision}, global batch {glob} = {micro} x {accum} x 2; "
                  f"reference: 1 rank, stage 0, {micro} x {accum * 2}")
            worst[label] = 0.0
            for want, got in zip(ref, rows, strict=True):
                for key in ("loss", "val_loss", "grad_norm"):
                    if (key in want) != (key in got):
                        failures.append(f"{label} step {got['step']}: {key} present in one run only")
                        continue
                    if key not in want:
                        continue
                    rel = abs(got[key] - want[key]) / abs(want[key])
                    worst[label] = max(worst[label], rel)
                    print(f"   step {got['step']:2d} {key:9s} {got[key]:.8f} reference {want[key]:.8f} "
                          f"rel {rel:.1e}")
                    if rel > bound:
                        failures.append(f"{label} step {got['step']} {key}: {got[key]!r} vs reference "
                                        f"{want[key]!r} (rel {rel:.2e} > {bound:g})")
        print("largest relative difference per case:")
        for label, w in worst.items():
            print(f"   {w:.2e}  {label}")
        return failures


def learns(a):
    steps = 60
    with tempfile.TemporaryDirectory() as work:
        rows, out = train(a.mpiexec, 2, a.trainer, os.path.join(a.configs, "stage2.json"), steps,
                          ["--eval-every", "30", "--eval-batches", "4"], work)
    first, last = rows[0]["loss"], rows[-1]["loss"]
    val_first, val_last = rows[29]["val_loss"], rows[-1]["val_loss"]
    print(f"loss {first:.4f} -> {last:.4f}; validation at step 30 {val_first:.4f}, at step 60 {val_last:.4f}")
    failures = []
    # A GPT-2 at initialisation predicts close to uniform over the 256 bytes.
    if abs(first - math.log(256)) > 0.1:
        failures.append(f"first loss {first:.4f} is not near ln 256 = {math.log(256):.4f}")
    if last > first - 1.0:
        failures.append(f"the loss fell from {first:.4f} to {last:.4f}, less than 1.0")
    if not val_last < val_first:
        failures.append(f"the validation loss did not fall: {val_first:.4f} -> {val_last:.4f}")
    if "memory ledger" not in out:
        failures.append("no memory ledger printed at the end")
    return failures + blas_kernels(a, out)


FALLBACK_CORES = ("Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom")


def banner_kernels(out):
    m = re.search(r"^OpenBLAS: (\w+) kernels", out, re.M)
    return m.group(1) if m else None


def blas_kernels(a, out):
    """`out` is a run with OPENBLAS_CORETYPE as the test's environment has it."""
    failures = []
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    chosen = banner_kernels(out)
    print(f"OpenBLAS kernels: {chosen} (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}); "
          f"CPU {'AVX-512' if 'avx512f' in flags else 'AVX2' if 'avx2' in flags else 'no AVX2'}")
    if chosen is None:
        return ["the banner does not name OpenBLAS's kernels"]
    if "OPENBLAS_CORETYPE" not in os.environ and "avx2" in flags and chosen in FALLBACK_CORES:
        failures.append(f"ran on OpenBLAS's {chosen} kernels on a CPU with AVX2")
    # The user's choice stays, even an old one, and the model says what it costs.
    rc, told, cmd = run(a.mpiexec, 1, a.trainer, ["--config", os.path.join(a.configs, "stage0.json"),
                                                  "--steps", "1", "--progress", "off"] + TINY,
                        env=dict(os.environ, OPENBLAS_CORETYPE="Prescott"))
    if rc != 0 or banner_kernels(told) != "Prescott":
        failures.append(f"with OPENBLAS_CORETYPE=Prescott: exit {rc}, kernels {banner_kernels(told)}:\n{told}")
    elif "avx2" in flags and "OPENBLAS_CORETYPE=" not in told.split("OpenBLAS: Prescott kernels", 1)[1]:
        failures.append(f"with OPENBLAS_CORETYPE=Prescott on an AVX2 CPU, no warning:\n{told}")
    return failures


def errors(a):
    stage0 = os.path.join(a.configs, "stage0.json")
    failures = []
    with tempfile.TemporaryDirectory() as work:
        short = os.path.join(work, "short.txt")
        with open(short, "w") as f:
            f.write("x" * 300)  # 270 training, 30 validation bytes: too few for T 32 (needs 34)
        bad_json = os.path.join(work, "bad.json")
        with open(bad_json, "w") as f:
            f.write('{"train_batch_size": 16, "zero_optimization": {"stage": 9}}')
        # A GPU no machine has: refused by the device, naming it, with or without CUDA.
        with open(stage0) as f:
            no_gpu = json.load(f)
        no_gpu.setdefault("zrt", {})["device"] = "cuda:99"
        no_gpu_path = os.path.join(work, "no_gpu.json")
        with open(no_gpu_path, "w") as f:
            json.dump(no_gpu, f)
        cases = [
            (["--config", stage0, "--data", "/nonexistent/text.txt"] + TINY,
             "--data /nonexistent/text.txt: cannot open"),
            (["--config", stage0, "--data", short] + TINY,
             f"--data {short}: 300 bytes split into 270 training and 30 validation bytes"),
            (["--config", stage0, "--layers", "2", "--hidden", "30", "--heads", "4"],
             "--hidden 30 is not a multiple of --heads 4"),
            (["--config", stage0, "--layers", "0"], "--layers: Value 0 not in range"),
            (["--config", stage0, "--seq-len", "abc"], "--seq-len"),
            (["--config", "/nonexistent/config.json"], "--config: File does not exist"),
            (["--config", bad_json] + TINY, "zero_optimization.stage"),
            (["--config", stage0, "--no-such-flag"], "--no-such-flag"),
            (["--config", stage0, "--resume", os.path.join(work, "none")] + TINY,
             f"--resume {os.path.join(work, 'none')}: no such directory"),
            (["--config", stage0, "--save-every", "10"] + TINY, "--save-every 10 needs --save-dir"),
            (["--config", stage0, "--init-from", os.path.join(work, "m.safetensors")] + TINY,
             f"--init-from {os.path.join(work, 'm.safetensors')}: "),
            (["--config", stage0, "--checkpoint-offload"] + TINY,
             "--checkpoint-offload needs --activation-checkpointing"),
            (["--config", no_gpu_path] + TINY, "cuda:99"),
            # NCCL on a device that is not a GPU (or a build without NCCL): refused, naming why.
            (["--config", stage0, "--backend", "nccl"] + TINY, "--backend nccl"),
            (["--config", stage0, "--device-mem", "64K"] + TINY, "the model does not fit device host:65536"),
            (["--config", stage0, "--json-log", "/nonexistent/dir/log.jsonl"] + TINY,
             "--json-log /nonexistent/dir/log.jsonl: cannot open"),
            (["--config", stage0, "--data", work] + TINY, f"--data {work}: is a directory"),
        ]
        # Two ranks where they could disagree (each reads the file, rank 0 alone opens the log,
        # the engine agrees on its set-up); the flag checks are the same code on every rank.
        two_ranks = {0, 1, 13, 14}
        runs = [(i, ranks) for i in range(len(cases)) for ranks in ((1, 2) if i in two_ranks else (1,))]
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            results = pool.map(lambda ir: run(a.mpiexec, ir[1], a.trainer, cases[ir[0]][0], timeout=60), runs)
            for (i, ranks), (rc, out, cmd) in zip(runs, results):
                args, message = cases[i]
                ok = rc == 2 and message in out and "step 1/" not in out
                print(f"{'ok  ' if ok else 'FAIL'} np{ranks} exit {rc}: {' '.join(args[2:]) or args[1]}")
                if not ok:
                    failures.append(f"np{ranks} {' '.join(args)}: exit {rc}, want 2 and '{message}'; "
                                    f"output:\n{out}")
    return failures + unwritable_log(a)


def unwritable_log(a):
    """A log whose writes fail (/dev/full: every write is ENOSPC) is no bad input: the run trains,
    warns once naming the file, and exits 1 at the end so no script takes the log for complete."""
    if not os.path.exists("/dev/full"):
        return ["no /dev/full (every Linux has it): the unwritable log was not checked"]
    failures = []
    for ranks in (1, 2):
        rc, out, cmd = run(a.mpiexec, ranks, a.trainer,
                           ["--config", os.path.join(a.configs, "stage0.json"), "--steps", "3", "--progress", "off",
                            "--json-log", "/dev/full"] + TINY, timeout=60)
        warning = "warning: --json-log /dev/full: write failed after 0 records (No space left on device)"
        ok = rc == 1 and out.count(warning) == 1 and "trained 3 steps" in out and \
            "--json-log /dev/full: write failed after 0 records (No space left on device): the log is incomplete" in out
        print(f"{'ok  ' if ok else 'FAIL'} np{ranks} exit {rc}: --json-log /dev/full")
        if not ok:
            failures.append(f"np{ranks} {' '.join(cmd)}: exit {rc}, want 1, one warning '{warning}', all 3 steps "
                            f"trained and the incomplete log named at the end; output:\n{out}")
    return failures


# Hugging Face's name for each engine parameter: the trainer registers parameter p of module m
# under p's Hugging Face name, so the checkpoint's "<module>/<param>" drops the module.
def hf_safetensors_from_checkpoint(ckpt, out, prefix):
    """Writes the checkpoint's trained parameters as safetensors, read from its raw files by the
    manifest (docs/checkpoint.md) with json and struct only."""
    with open(os.path.join(ckpt, "manifest.json")) as f:
        m = json.load(f)
    assert m["training_dtype"] == "fp32"
    files = [x for x in m["files"] if x["state"] == "params"]
    header, blobs, offset = {}, [], 0
    for p in m["parameters"]:
        lo, hi = p["offset"], p["offset"] + p["numel"]
        data = bytearray(4 * p["numel"])
        for x in files:
            a, b = max(lo, x["begin"]), min(hi, x["begin"] + x["count"])
            if a < b:
                with open(os.path.join(ckpt, x["path"]), "rb") as f:
                    f.seek(4 * (a - x["begin"]))
                    data[4 * (a - lo):4 * (b - lo)] = f.read(4 * (b - a))
        header[prefix + p["name"]] = {"dtype": "F32", "shape": p["shape"],
                                      "data_offsets": [offset, offset + len(data)]}
        blobs.append(bytes(data))
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def checkpoints(a):
    failures = []
    keys = ("loss", "grad_norm", "lr", "loss_scale")

    def same(label, want, got, keys=keys):
        for k in keys:
            if (k in want) != (k in got) or want.get(k) != got.get(k):
                failures.append(f"{label} step {got['step']} {k}: {got.get(k)!r}, want {want.get(k)!r}")

    def expect_exit2(label, args, message):
        rc, out, cmd = run(a.mpiexec, 2, a.trainer, args, timeout=60)
        ok = rc == 2 and message in out and "step 1/" not in out
        print(f"{'ok  ' if ok else 'FAIL'} {label}: exit {rc}")
        if not ok:
            failures.append(f"{label}: {' '.join(cmd)}: exit {rc}, want 2 and '{message}'; output:\n{out}")

    run_ids = selected(a, ["resume-stage2", "resume-stage3", "init-from"])
    with tempfile.TemporaryDirectory() as work:
        for stage in (2, 3):
            if f"resume-stage{stage}" not in run_ids:
                continue
            config = os.path.join(a.configs, f"stage{stage}.json")
            d = os.path.join(work, f"s{stage}")
            os.makedirs(d)
            ckpt = os.path.join(d, "ckpt")
            flags = ["--eval-every", "0", "--eval-batches", "2"]
            straight, _ = train(a.mpiexec, 2, a.trainer, config, 6, flags, d, name="straight.jsonl")
            head, _ = train(a.mpiexec, 2, a.trainer, config, 3, flags + ["--save-dir", ckpt, "--save-every", "3"],
                            d, name="head.jsonl")
            # Stage 2 names the directory; stage 3 resumes from --save-dir, saving step6 beside it.
            resume = ["--resume", ckpt] if stage == 2 else ["--save-dir", ckpt, "--resume"]
            tail, out = train(a.mpiexec, 2, a.trainer, config, 6, flags + resume, d, first=4, name="tail.jsonl")
            for want, got in zip(straight, head + tail):
                print(f"stage {stage} step {got['step']} loss {got['loss']!r} straight {want['loss']!r}")
                same(f"stage {stage} resumed", want, got)
            same(f"stage {stage} resumed", straight[-1], tail[-1], ("val_loss",))
            if "resumed from" not in out:
                failures.append(f"stage {stage}: no 'resumed from' line")
            saved = sorted(os.listdir(ckpt))
            if stage == 3 and saved != ["latest", "step3", "step6"]:
                failures.append(f"stage 3: {ckpt} holds {saved}, want latest, step3, step6")
            if straight[0]["loss"] == straight[-1]["loss"]:
                failures.append(f"stage {stage}: the loss did not change: nothing was compared")
        if "init-from" not in run_ids:
            return failures

        # 606 bytes split into 545 training bytes: samples start at multiples of T = 32 modulo
        # 545 - 33 = 512 = G x T, so every step's global batch (G = 16) is step 0's.
        periodic = os.path.join(work, "periodic.txt")
        with open(periodic, "wb") as f:
            f.write(bytes((i * 7919 + (i * i) % 251) % 256 for i in range(606)))
        config = os.path.join(a.configs, "stage2.json")
        d = os.path.join(work, "init")
        os.makedirs(d)
        ckpt = os.path.join(d, "ckpt")
        data = ["--data", periodic, "--eval-batches", "1"]
        saving, _ = train(a.mpiexec, 2, a.trainer, config, 4, data + ["--save-dir", ckpt, "--save-every", "3"], d,
                          name="saving.jsonl")
        hf = os.path.join(d, "hf.safetensors")
        hf_safetensors_from_checkpoint(os.path.join(ckpt, "step3"), hf, "transformer.")
        for label, source in (("checkpoint", os.path.join(ckpt, "step3")), ("hf safetensors", hf)):
            rows, out = train(a.mpiexec, 2, a.trainer, config, 1, data + ["--init-from", source], d,
                              name=f"init-{len(source)}.jsonl")
            print(f"--init-from {label}: first loss {rows[0]['loss']!r}, saving run's step 4 "
                  f"{saving[3]['loss']!r}, its step 1 {saving[0]['loss']!r}")
            same(f"--init-from {label}", saving[3], rows[0], ("loss", "grad_norm"))
            # Weights only: the step counter starts again, so step 1's warmup learning rate.
            same(f"--init-from {label}", saving[0], rows[0], ("lr",))
        # The saved weights differ from the initial ones, so matching step 4 is not matching step 1.
        if saving[3]["loss"] == saving[0]["loss"]:
            failures.append(f"the saving run's loss did not change ({saving[0]['loss']}): nothing was compared")

        expect_exit2("--resume of a directory with no checkpoint", ["--config", config, "--resume", d] + TINY,
                     f"--resume {d}: no checkpoint there")
        wide = ["--layers", "2", "--hidden", "48", "--heads", "2", "--seq-len", "32"]
        # The recorded model names the flag before the engine would list the shapes.
        expect_exit2("--resume of another model's checkpoint",
                     ["--config", config, "--data", periodic, "--resume", ckpt] + wide,
                     f"--resume {ckpt}: the checkpoint {ckpt}/step4 is of another model: n_embd 32 recorded, "
                     "48 in this run (--hidden)")
        # Every weight has the same shape with 4 heads as with 2: only the recorded model tells.
        heads = ["--layers", "2", "--hidden", "32", "--heads", "4", "--seq-len", "32"]
        expect_exit2("--resume with another --heads",
                     ["--config", config, "--data", periodic, "--resume", ckpt, "--steps", "6"] + heads,
                     f"--resume {ckpt}: the checkpoint {ckpt}/step4 is of another model: n_head 2 recorded, "
                     "4 in this run (--heads)")
        expect_exit2("--init-from another --heads", ["--config", config, "--data", periodic, "--init-from",
                                                     os.path.join(ckpt, "step3")] + heads,
                     "n_head 2 recorded, 4 in this run (--heads)")
        expect_exit2("--init-from another model's safetensors", ["--config", config, "--init-from", hf] + wide,
                     "--init-from " + hf)
        expect_exit2("--save-dir already holding a tag this run saves",
                     ["--config", config, "--data", periodic, "--save-dir", ckpt, "--steps", "4"] + TINY,
                     f"--save-dir {ckpt} already holds step4")
    return failures


def cuda_devices(trainer):
    """How many CUDA devices answer, asked of the CUDA runtime zrt-train links (0 without one)."""
    ldd = subprocess.run(["ldd", trainer], capture_output=True, text=True).stdout
    m = re.search(r"(\S*libcudart\.so\S*) => (\S+)", ldd)
    if not m:
        return 0
    import ctypes
    try:
        cudart = ctypes.CDLL(m.group(2))
    except OSError:
        return 0
    count = ctypes.c_int(0)
    return count.value if cudart.cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0


def strict(a):
    """The same runs on `host` and on a.device, bit for bit on host-strict; on cuda within fp32's
    rounding (cuBLAS and the kernels sum in other orders than the host's)."""
    steps = 6
    extra = ["--eval-every", "3", "--eval-batches", "1"]
    keys = ("loss", "grad_norm", "loss_scale", "lr", "skipped", "val_loss")
    failures = []
    device = a.device
    # Relative bounds on cuda: fp32 runs, and 16-bit ones whose gradients round to fp16 or bf16.
    # Not yet measured on a GPU (none has been lent): set from the host's own spread between
    # summation orders (the equivalence mode's 1e-5 and 2e-4), with a margin.
    bound = {"fp32": 1e-4, "16-bit": 2e-3} if device == "cuda" else None
    # T, C and the head width neither equal nor multiples of a warp, so a mix-up of the three in
    # a stride or a row kernel's lanes shows.
    shape = ["--layers", "2", "--hidden", "48", "--heads", "3", "--seq-len", "40"]

    def config(name, **changes):
        with open(os.path.join(a.configs, name)) as f:
            c = json.load(f)
        c.update(changes)
        return c

    fp16 = config("stage1.json", fp16={"enabled": True, "initial_scale_power": 12})
    bf16 = config("stage2.json", bf16={"enabled": True})
    # (id, label, config, flags, NVMe, precision)
    cases = [
        ("main", "the main job: stage 3, optimizer and parameters on NVMe", config("stage3_nvme_offload.json"),
         [], True, "fp32"),
        ("stage0", "stage 0, accumulation 2", config("stage0.json"), [], False, "fp32"),
        ("stage1-fp16", "stage 1, fp16", fp16, [], False, "16-bit"),
        ("stage2-bf16-ac-offload", "stage 2, bf16, activation checkpoints offloaded", bf16,
         ["--activation-checkpointing", "--checkpoint-offload"], False, "16-bit"),
        ("stage3-lora", "stage 3, parameters on the CPU, LoRA on every layer, activation checkpointing",
         config("stage3_cpu_offload.json"),
         ["--lora-rank", "4", "--lora-targets", "all", "--activation-checkpointing"], False, "fp32"),
    ]
    # The resume case below is "resume".
    run_ids = selected(a, [c[0] for c in cases] + ["resume"])
    strict_env = dict(os.environ, ZRT_STRICT_STREAM_DELAY_US="50")
    with tempfile.TemporaryDirectory() as work:
        def runs(label, c, flags, nvme, precision, index, ranks=2, device_flags=()):
            d = os.path.join(work, f"case{index}")
            os.makedirs(d)
            z = c.get("zero_optimization", {})
            for key in ("offload_optimizer", "offload_param"):
                if nvme and "nvme_path" in (z.get(key) or {}):
                    z[key]["nvme_path"] = d
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(c, f)
            out = {}
            for dev in ("host", device):
                log = os.path.join(d, dev + ".jsonl")
                args = ["--config", path, "--steps", str(steps), "--json-log", log, "--progress", "off",
                        "--device", dev] + shape + extra + flags + (list(device_flags) if dev == device else [])
                rc, text, cmd = run(a.mpiexec, ranks, a.trainer, args,
                                    env=strict_env if dev == "host-strict" else None)
                if rc == 2 and "has no NCCL" in text:
                    print(f"== {label}: skipped, this build has no NCCL")
                    return []
                if rc != 0:
                    return [f"{label} on {dev}: exit {rc}: {' '.join(cmd)}\n{text}"]
                if f"device {dev}" not in text:
                    return [f"{label}: the banner does not name device {dev}:\n{text}"]
                with open(log) as f:
                    out[dev] = [json.loads(line) for line in f][:-1]
            return compare(label, out["host"], out[device], bound and bound[precision])

        def compare(label, want, got, rel=None):
            """Every step's keys the same bits (rel None), or within `rel` relative."""
            bad = []
            if [r["step"] for r in got] != [r["step"] for r in want] or not want:
                return [f"{label}: steps {[r['step'] for r in got]} on {device}, {[r['step'] for r in want]} on host"]
            if want[0]["loss"] == want[-1]["loss"]:
                bad.append(f"{label}: the loss did not change on host: nothing compared")
            worst = 0.0
            for w, g in zip(want, got):
                for key in keys:
                    x, y = w.get(key), g.get(key)
                    if rel is not None and isinstance(x, float) and isinstance(y, float) and x != 0:
                        worst = max(worst, abs(y - x) / abs(x))
                        same = abs(y - x) <= rel * abs(x)
                    else:
                        same = x == y
                    if not same:
                        bad.append(f"{label} step {w['step']} {key}: {y!r} on {device}, {x!r} on host")
            how = "==" if rel is None else f"within {rel:g} of (worst {worst:.1e})"
            print(f"== {label}: {len(want)} steps, {device} {how} host"
                  + ("" if bad else f" (last loss {want[-1]['loss']!r})"))
            return bad

        for i, (id, label, c, flags, nvme, precision) in enumerate(cases):
            if id in run_ids:
                failures += runs(label, c, flags, nvme, precision, i)
        if device == "cuda":
            # The model's data through NCCL beside MPI (one rank: NCCL takes one rank per GPU, and
            # one GPU is what gpu-check.sh has): the main job, its NVMe shards staged up to the GPU.
            failures += runs("the main job on one rank, data through NCCL", config("stage3_nvme_offload.json",
                             train_batch_size=4), [], True, "fp32", len(cases), ranks=1,
                             device_flags=["--backend", "nccl"])

        # Saved on host after 3 steps, resumed on host-strict for 3 more: the steps after the save
        # are those of the host run that never stopped.
        if "resume" not in run_ids:
            return failures
        d = os.path.join(work, "resume")
        os.makedirs(d)
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(config("stage2.json"), f)
        common = ["--config", path, "--progress", "off"] + shape
        logs = {}
        for name, device, args, env in (
                ("straight", "host", ["--steps", str(steps)], None),
                ("saved", "host", ["--steps", "3", "--save-dir", os.path.join(d, "ckpt")], None),
                ("resumed", device, ["--steps", str(steps), "--save-dir", os.path.join(d, "ckpt"),
                                     "--resume"], strict_env if device == "host-strict" else None)):
            log = os.path.join(d, name + ".jsonl")
            rc, text, cmd = run(a.mpiexec, 2, a.trainer, common + args + ["--device", device, "--json-log", log],
                                env=env)
            if rc != 0:
                failures.append(f"resume: {name} on {device}: exit {rc}: {' '.join(cmd)}\n{text}")
                return failures
            with open(log) as f:
                logs[name] = [json.loads(line) for line in f][:-1]
        failures += compare(f"saved on host at step 3, resumed on {device}", logs["straight"][3:], logs["resumed"],
                            bound and bound["fp32"])
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["equivalence", "learns", "errors", "checkpoints", "strict"], required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--device", choices=["host-strict", "cuda"], default="host-strict",
                    help="strict mode: the device compared with host")
    ap.add_argument("--cases", help="equivalence, checkpoints and strict modes: only these cases (ids, comma-separated)")
    ap.add_argument("--list-cases", action="store_true", help="print the mode's case ids and exit")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if (a.cases is not None or a.list_cases) and a.mode not in ("equivalence", "checkpoints", "strict"):
        ap.error(f"--cases and --list-cases are for the equivalence, checkpoints and strict modes, not {a.mode}")
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command and not a.list_cases:
        ap.error("no MPIEXEC... ZRT_TRAIN command after the options")
    a.mpiexec, a.trainer = command[:-1], command[-1] if command else None
    if a.mode == "strict" and a.device == "cuda" and not a.list_cases and cuda_devices(a.trainer) == 0:
        print("SKIP: no CUDA device answers (the cuda comparison needs a GPU)")
        return 77
    failures = {"equivalence": equivalence, "learns": learns, "errors": errors,
                "checkpoints": checkpoints, "strict": strict}[a.mode](a)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
