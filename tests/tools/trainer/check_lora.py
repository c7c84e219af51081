#!/usr/bin/env python3
"""LoRA fine-tuning with zrt-train and zrt-ckpt as a user runs them, on a 2 x 32 GPT-2 (T 32).

  check_lora.py --configs DIR --ckpt-tool ZRT_CKPT -- MPIEXEC... ZRT_TRAIN

The flow: pre-train on the GPL text (2 ranks, stage 2), then fine-tune adapters (rank 4, alpha
8, all four target layers) from that checkpoint on another text, the Apache licence. It checks:
  - stage 3 on 2 ranks gives stage 0 on 1 rank's loss, validation loss and grad norm at each of
    10 steps within fp32 rounding (1e-5 relative, as trainer_equivalence, with the same configs);
  - fresh adapters give the base model's loss: the fine-tune's first loss equals, bit for bit,
    the loss of a run without LoRA from the same checkpoint;
Then it fine-tunes at stage 3 on 2 ranks with a constant learning rate of 1e-2 on the first 606
bytes of the Apache licence, on which every step's global batch is the same (sample starts
repeat with period G x T = 512 in its 545 training bytes), so a step's loss is the loss of the
weights before it on that one batch, and checks:
  - adapter training lowers the loss (by more than 0.1 nats in 30 steps);
  - the ledger rank 0 prints holds gradients and optimizer state for the adapters alone;
  - the base is frozen: every base tensor exported from the fine-tuned checkpoint is
    byte-identical to the pre-trained checkpoint's export;
  - export --trainable-only creates PEFT's adapter directory (and its missing parents) and
    writes the adapters under PEFT's names and shapes with the values the checkpoint holds;
    adapter_config.json carries r, lora_alpha, target_modules, fan_in_fan_out... and only keys
    PEFT's LoraConfig has; the file's metadata describes the base model;
  - PEFT loads it: PeftModel.from_pretrained onto a transformers GPT2LMHeadModel built from that
    description (nothing downloaded) and holding the checkpoint's base weights gives LoRA
    tensors equal to the checkpoint's, scaling alpha/r, and the merged export's logits;
  - export --merge writes every base tensor under its Hugging Face name, the adapted ones equal to
    W + alpha/r (B A)^T computed here in float64 (W stored [in, out]) within one fp32 ulp;
  - the merged file, loaded by a run without LoRA, gives the adapted model's loss (the fine-tune's
    step 30 loss, its weights after step 29) within fp32 rounding;
  - a checkpoint's adapters with another alpha, a LoRA checkpoint without --lora-rank, and a rank
    above the width exit 2 naming the difference or the flag.
Every safetensors file is read both with json and struct and with the safetensors package
(check_zrt_ckpt.read_safetensors), which must agree. It runs under the Python of
scripts/install-deps.sh's venv (ZRT_TEST_PYTHON), which has safetensors, peft and transformers;
without them it fails, naming what to install.
Exit 0 pass, 1 fail.
"""
import argparse
import dataclasses
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "checkpoint"))
import check_zrt_ckpt  # noqa: E402
from check_trainer import TINY, run, train  # noqa: E402
from check_zrt_ckpt import read_safetensors  # noqa: E402

# PEFT and transformers never reach the network here: the base model is built from a config.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

RANK, ALPHA = 4, 8.0
LORA = ["--lora-rank", str(RANK), "--lora-alpha", "8", "--lora-targets", "qkv,proj,fc,mlp_proj"]
LAYERS, C = 2, 32
# Adapted layer: (its input width, its output width).
TARGETS = {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C), "mlp.c_proj": (4 * C, C)}
PEFT_NAMES = ["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"]

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def constant_lr_config(configs, stage, work):
    """configs/stage<N>.json with a constant learning rate of 1e-2: the shipped configs warm up
    over 20 steps from 1e-4, too slowly for a run this short to show anything."""
    with open(os.path.join(configs, f"stage{stage}.json")) as f:
        c = json.load(f)
    c["optimizer"]["params"]["lr"] = 1e-2
    c.pop("scheduler", None)
    path = os.path.join(work, f"stage{stage}_lr1e-2.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def ulps_apart(a, b):
    """Distance in fp32 ulps between two fp32 bit patterns of the same sign."""
    return abs(a - b) if (a >> 31) == (b >> 31) else abs(a & 0x7FFFFFFF) + abs(b & 0x7FFFFFFF)


def ledger_bytes(out, tag):
    """Rank 0's device figure (current) for `tag` in the printed ledger."""
    m = re.search(r"^\| " + re.escape(tag) + r" +\| +([0-9.]+) (B|KiB|MiB|GiB) /", out, re.M)
    if not m:
        return None
    return float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[m.group(2)]


def zrt_ckpt(tool, args, expect=0):
    p = subprocess.run([tool] + args, capture_output=True, text=True, timeout=60)
    ok = p.returncode == expect
    check(ok, f"zrt-ckpt {' '.join(args[:2])} ... exits {expect}" + ("" if ok else f" (got {p.returncode}: {p.stdout}{p.stderr})"))
    return p.stdout + p.stderr


def peft_checks(adapter, whole_file, merged_file, hf, whole, text):
    """PeftModel.from_pretrained(GPT2LMHeadModel, adapter) as a PEFT user loads ZRT's adapter:
    onto a GPT-2 built from the adapter file's description of its base and holding the base
    weights of `whole_file` (ZRT's export, <module>.<param> names mapped to Hugging Face's by
    `hf`). Its LoRA tensors must be the checkpoint's (`whole`, bit patterns), and its logits
    those of the merged export (`merged_file`) loaded into a plain GPT2LMHeadModel."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(os.path.join(adapter, "adapter_model.safetensors"), framework="pt") as f:
        described = json.loads(f.metadata()["zrt_model"])
    fields = transformers.GPT2Config().to_dict()
    config = transformers.GPT2Config(**{k: v for k, v in described.items() if k in fields})

    def gpt2(weights):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config).eval()
        result = model.load_state_dict(weights, strict=False)
        check(not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"},
              f"a GPT2LMHeadModel takes the weights (unexpected {result.unexpected_keys}, missing "
              f"{result.missing_keys}; lm_head is tied to wte)")
        return model

    base_weights = {"transformer." + hf[n]: t for n, t in load_file(whole_file).items() if n in hf}
    model = peft_lib.PeftModel.from_pretrained(gpt2(base_weights), adapter).eval()
    loaded = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    check(len(loaded) == 2 * 4 * LAYERS, f"PEFT made {len(loaded)} LoRA tensors, want {2 * 4 * LAYERS}")
    same = 0
    for name, p in loaded.items():
        # PEFT's "<prefix>.<layer>.lora_A.default.weight" is ZRT's "h.<i>.<layer>.lora_A.weight".
        stem = name[len("base_model.model.transformer."):].replace(".default.", ".")
        ours = stem.split(".", 2)[0] + "." + stem.split(".", 2)[1] + "." + stem
        bits = [v & 0xFFFFFFFF for v in p.detach().view(torch.int32).flatten().tolist()]
        same += ours in whole and whole[ours][1] == list(p.shape) and whole[ours][2] == bits
    check(same == len(loaded), f"PEFT loaded every LoRA tensor with the checkpoint's shape and values ({same} of {len(loaded)})")
    layer = model.base_model.model.transformer.h[0].attn.c_attn
    check(layer.scaling.get("default") == ALPHA / RANK and layer.fan_in_fan_out,
          f"PEFT's scaling is alpha/r = {ALPHA / RANK} with fan_in_fan_out: {layer.scaling}, {layer.fan_in_fan_out}")

    merged = gpt2({"transformer." + n: t for n, t in load_file(merged_file).items()})
    base = gpt2(base_weights)
    ids = torch.tensor([list(text[:32])])
    with torch.no_grad():
        got, want, plain = model(ids).logits, merged(ids).logits, base(ids).logits
    err, effect = (got - want).abs().max().item(), (want - plain).abs().max().item()
    # fp32 logits of the same weights grouped differently (the merge rounded once): ~1e-6 here; a
    # wrong name (the adapter left at zero), transpose or scaling differs by the whole effect.
    check(err <= 1e-4 and effect > 100 * err,
          f"PEFT's adapted GPT-2 gives the merged export's logits within 1e-4: {err:.1e} (the adapters move them "
          f"by {effect:.2f})")


def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", required=True)
    ap.add_argument("--ckpt-tool", required=True)
    a = ap.parse_args(argv[:split])
    command = argv[split + 1:]
    mpiexec, trainer, tool = command[:-1], command[-1], a.ckpt_tool
    global torch, transformers, peft_lib
    try:
        import peft as peft_lib
        import torch
        import transformers
    except ImportError as e:
        print(f"FAIL {sys.executable} cannot import peft, transformers or torch ({e}): run scripts/install-deps.sh, "
              "or configure with -DZRT_TEST_PYTHON=<a python that has them>")
        return 1
    if not check_zrt_ckpt.use_safetensors_package():
        return 1

    with tempfile.TemporaryDirectory() as work:
        stage0, stage2, stage3 = (constant_lr_config(a.configs, s, work) for s in (0, 2, 3))
        text = os.path.join(work, "apache606.txt")
        with open("/usr/share/common-licenses/Apache-2.0", "rb") as f:
            head = f.read(606)
        assert len(head) == 606
        with open(text, "wb") as f:
            f.write(head)
        fine = ["--data", text, "--eval-every", "10", "--eval-batches", "1"]

        # Pre-training on the GPL text.
        pre = os.path.join(work, "pre")
        rows, _ = train(mpiexec, 2, trainer, stage2, 150, ["--eval-every", "0", "--save-dir", pre], work,
                        name="pre.jsonl")
        print(f"pre-training: loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
        base_ckpt = os.path.join(pre, "step150")

        # Stage 3 on 2 ranks against stage 0 on 1 rank, with the shipped configs.
        apache = ["--data", "/usr/share/common-licenses/Apache-2.0", "--eval-every", "5", "--eval-batches", "2",
                  "--init-from", base_ckpt]
        ref, out0 = train(mpiexec, 1, trainer, os.path.join(a.configs, "stage0.json"), 10, apache + LORA, work,
                          name="eq0.jsonl")
        got, _ = train(mpiexec, 2, trainer, os.path.join(a.configs, "stage3.json"), 10, apache + LORA, work,
                       name="eq3.jsonl")
        check("LoRA: rank 4, alpha 8 (scaling 2) on qkv,proj,fc,mlp_proj; base frozen" in out0,
              "the banner states the adapters")
        worst = 0.0
        for want, row in zip(ref, got):
            for key in ("loss", "val_loss", "grad_norm"):
                if (key in want) != (key in row):
                    check(False, f"step {row['step']}: {key} in one run only")
                    continue
                if key in want:
                    rel = abs(row[key] - want[key]) / abs(want[key])
                    worst = max(worst, rel)
        print(f"stage 3 on 2 ranks against stage 0 on 1 rank: largest relative difference {worst:.2e}")
        check(worst <= 1e-5, f"stage 3 with LoRA on 2 ranks equals stage 0 on 1 rank within 1e-5 (worst {worst:.2e})")

        # Fresh adapters: the base's loss exactly.
        plain, _ = train(mpiexec, 1, trainer, os.path.join(a.configs, "stage0.json"), 1, apache, work,
                         name="plain.jsonl")
        check(ref[0]["loss"] == plain[0]["loss"],
              f"fresh adapters give the base model's first loss bit for bit ({ref[0]['loss']!r} vs {plain[0]['loss']!r})")

        # The ledger: gradients and optimizer state (two Adam moments) for the adapters alone.
        adapter_elems = LAYERS * sum(RANK * (i + o) for i, o in TARGETS.values())
        grads, optim = ledger_bytes(out0, "gradients"), ledger_bytes(out0, "optimizer state")
        check(grads == 4 * adapter_elems, f"the ledger's gradients are the adapters' {4 * adapter_elems} bytes: {grads}")
        check(optim == 8 * adapter_elems, f"the ledger's optimizer state is 2 moments of them: {optim}")

        # Fine-tuning on the one repeated batch, saving after steps 29 and 30.
        ft3 = os.path.join(work, "ft3")
        tuned_rows, _ = train(mpiexec, 2, trainer, stage3, 30,
                              fine + LORA + ["--init-from", base_ckpt, "--save-dir", ft3, "--save-every", "29"], work,
                              name="ft3.jsonl")
        print("fine-tuning losses: " + " ".join(f"{r['loss']:.4f}" for r in tuned_rows))
        # Measured: 3.36 -> 3.06 (optimised build), 3.36 -> 3.18 (the sanitizer build, whose fp32
        # sums round differently, so its pre-training ends at other weights): a clear fall either
        # way, while the base alone does not move (every base tensor is checked unchanged below).
        check(tuned_rows[-1]["loss"] < tuned_rows[0]["loss"] - 0.1,
              f"adapter training lowers the loss by more than 0.1: {tuned_rows[0]['loss']:.4f} -> "
              f"{tuned_rows[-1]['loss']:.4f}")

        # Exports: the base before and after, whole.
        pre_st, ft_st = os.path.join(work, "pre.safetensors"), os.path.join(work, "ft.safetensors")
        zrt_ckpt(tool, ["export", pre, "--out", pre_st])
        zrt_ckpt(tool, ["export", ft3, "--out", ft_st])
        base, _ = read_safetensors(pre_st)
        tuned, _ = read_safetensors(ft_st)
        lora_names = {n for n in tuned if ".lora_" in n}
        check(set(tuned) - lora_names == set(base), "the fine-tuned checkpoint holds the base's tensors and adapters")
        check(len(lora_names) == 2 * 4 * LAYERS, f"{len(lora_names)} adapter tensors, want {2 * 4 * LAYERS}")
        check(all(tuned[n] == base[n] for n in base), "every base tensor is unchanged, bit for bit, after fine-tuning")

        # The adapter in PEFT's layout, in a directory the export creates (as save_pretrained).
        adapter = os.path.join(work, "adapters", "step30")
        zrt_ckpt(tool, ["export", ft3, "--out", adapter, "--trainable-only"])
        check(os.path.isdir(adapter), f"export --trainable-only creates the adapter directory {adapter}")
        peft, meta = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
        want_names = set()
        for i in range(LAYERS):
            for layer, (fin, fout) in TARGETS.items():
                stem = f"h.{i}.{layer}"
                for part, shape in (("lora_A", [RANK, fin]), ("lora_B", [fout, RANK])):
                    name = f"base_model.model.transformer.{stem}.{part}.weight"
                    want_names.add(name)
                    ours = f"h.{i}.{stem}.{part}.weight"  # "<module>.<param>" in the whole export
                    ok = name in peft and peft[name][1] == shape and peft[name][2] == tuned[ours][2]
                    check(ok, f"{name} {shape} holds the checkpoint's values")
        check(set(peft) == want_names, "the adapter file holds the adapters alone")
        check(meta.get("format") == "pt", "adapter file metadata format pt")
        with open(os.path.join(adapter, "adapter_config.json")) as f:
            cfg = json.load(f)
        for key, want in (("peft_type", "LORA"), ("task_type", "CAUSAL_LM"), ("r", RANK), ("lora_alpha", ALPHA),
                          ("target_modules", PEFT_NAMES), ("fan_in_fan_out", True), ("bias", "none"),
                          ("lora_dropout", 0.0), ("base_model_name_or_path", base_ckpt), ("inference_mode", True),
                          ("modules_to_save", None)):
            check(cfg.get(key) == want, f"adapter_config.json {key} = {want!r} (got {cfg.get(key)!r})")
        check(type(cfg.get("lora_alpha")) is int, f"lora_alpha is an int, as LoraConfig's: {cfg.get('lora_alpha')!r}")
        lora_keys = {f.name for f in dataclasses.fields(peft_lib.LoraConfig)}
        check(set(cfg) <= lora_keys, f"adapter_config.json has only LoraConfig's keys (others: {set(cfg) - lora_keys})")
        described = json.loads(meta.get("zrt_model", "{}"))
        check(described.get("model_type") == "gpt2" and described.get("n_layer") == LAYERS
              and described.get("n_embd") == C and described.get("vocab_size") == 256,
              f"the adapter file's metadata describes the base model: {described}")

        # Merged: W + alpha/r (B A)^T, W stored [in, out] (Conv1D); from the checkpoint after step 29.
        merged = os.path.join(work, "merged.safetensors")
        zrt_ckpt(tool, ["export", ft3, "--tag", "step29", "--out", merged, "--merge"])
        at29 = os.path.join(work, "ft29.safetensors")
        zrt_ckpt(tool, ["export", ft3, "--tag", "step29", "--out", at29])
        whole29, _ = read_safetensors(at29)
        folded, meta = read_safetensors(merged)
        hf = {}
        for n in base:  # "<module>.<param>" -> the Hugging Face name
            hf[n] = n.split(".", 1)[1] if n.startswith(("embed.", "ln_f.")) else n.split(".", 2)[2]
        check(set(folded) == set(hf.values()), f"the merged file holds the base's tensors under Hugging Face's names")
        check("zrt_merged_lora" in meta, "the merged file's metadata records the merge")
        scaling = ALPHA / RANK
        worst_ulps, adapted = 0, 0
        for ours, name in hf.items():
            if name not in folded:
                continue
            stem = name[: -len(".weight")]
            prefix = ours[: -len(name)]
            if not name.endswith(".weight") or (prefix + stem + ".lora_A.weight") not in whole29:
                check(folded[name][2] == base[ours][2], f"{name}: not adapted, the base's values")
                continue
            adapted += 1
            fin, fout = TARGETS[stem.split(".", 2)[2]]
            w = base[ours][2]
            A = [f32(u) for u in whole29[prefix + stem + ".lora_A.weight"][2]]
            B = [f32(u) for u in whole29[prefix + stem + ".lora_B.weight"][2]]
            for i in range(fin):
                for o in range(fout):
                    d = 0.0
                    for k in range(RANK):
                        d += B[o * RANK + k] * A[k * fin + i]
                    want = struct.unpack("<I", struct.pack("<f", f32(w[i * fout + o]) + scaling * d))[0]
                    worst_ulps = max(worst_ulps, ulps_apart(want, folded[name][2][i * fout + o]))
        check(adapted == 4 * LAYERS, f"{adapted} weights have adapters folded in, want {4 * LAYERS}")
        check(worst_ulps <= 1, f"merged weights equal W + alpha/r (B A)^T in float64 within 1 ulp (worst {worst_ulps})")

        # PEFT itself: the step-29 adapter onto the step-29 base, against the merged export.
        adapter29 = os.path.join(work, "adapters", "step29")
        zrt_ckpt(tool, ["export", ft3, "--tag", "step29", "--out", adapter29, "--trainable-only"])
        peft_checks(adapter29, at29, merged, hf, whole29, head)

        # The merged model's outputs: its loss on the batch equals the adapted model's.
        merged_run, _ = train(mpiexec, 2, trainer, stage3, 1, fine + ["--init-from", merged], work, name="merged.jsonl")
        want, have = tuned_rows[29]["loss"], merged_run[0]["loss"]
        rel = abs(have - want) / want
        # Both are fp32 models of the same weights grouped differently (the merged weight rounded
        # once, base + adapters' three products rounded apart): a few 1e-7 of the loss; a wrong
        # transpose or scaling moves it by the adapters' whole effect, ~0.3 here.
        check(rel <= 1e-5, f"the merged weights give the adapted model's loss: {have!r} vs {want!r} (rel {rel:.1e})")
        check(abs(want - tuned_rows[0]["loss"]) > 0.1, "and that loss is far from the base's, so the check means something")

        # Refusals.
        def exit2(args, message, ranks=1):
            rc, out, _ = run(mpiexec, ranks, trainer, args, timeout=60)
            ok = rc == 2 and message in out and "step 1/" not in out
            check(ok, f"exit 2 with '{message}'" + ("" if ok else f" (got {rc}: {out[-2000:]})"))

        exit2(["--config", stage3, "--resume", ft3, "--lora-rank", "4", "--lora-alpha", "16"] + TINY + fine,
              f"--resume {ft3}: its adapters were trained with r 4, alpha 8", ranks=2)
        exit2(["--config", stage0, "--init-from", os.path.join(ft3, "step30")] + TINY + fine,
              "'h.0/h.0.attn.c_attn.lora_A.weight' [4,32]: in the checkpoint, not in this model")
        # (The flags' own refusals are trainer_driver_test's; one here shows they reach the user.)
        exit2(["--config", stage0, "--lora-rank", "64"] + TINY, "--lora-rank 64 exceeds the model's width --hidden 32")
        out = zrt_ckpt(tool, ["export", pre, "--out", os.path.join(work, "x.safetensors"), "--merge"], expect=2)
        check("has no LoRA adapters to merge" in out, "export --merge of a checkpoint without adapters says so")

    failures.extend(check_zrt_ckpt.failures)  # the two readers' disagreements, if any
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
