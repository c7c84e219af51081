#!/usr/bin/env python3
"""Runs zrt-ckpt as a user would on checkpoints a 2-rank run saved, and reads what it exports
with two independent safetensors readers: one here (json and struct only: an 8-byte
little-endian header length, the JSON header, raw little-endian data), and the safetensors
package's own (safetensors.torch.load_file and safe_open, under the interpreter of
scripts/install-deps.sh's venv), which must agree on every name, dtype, shape, bit and metadata
entry. Without the package the test fails, naming what to install.

usage: check_zrt_ckpt.py --tool ZRT_CKPT -- MPIRUN ... FIXTURE

For a bf16 run at stage 3 and an fp32 run at stage 2 it checks:
  inspect and verify succeed and say what was saved;
  export --dtype <training dtype> gives exactly the values the engine holds;
  export fp32 of the bf16 run gives the fp32 master weights, each of which rounds (to nearest
    even, done here) to the bf16 value the engine holds; frozen tensors are exact;
  export fp16 equals the fp32 export rounded by struct's IEEE half packing;
  --trainable-only writes PEFT's adapter directory: adapter_model.safetensors with only the
    trainable tensors and adapter_config.json in it, into an existing directory or one it
    creates with its missing parents (as PEFT's save_pretrained); an existing adapter file or
    config, a file or a link at --out, and an --out ending in .safetensors are refused (exit 2)
    and leave everything as it was; a full disk at any write fails it (exit 1) leaving nothing;
  a flipped byte in a copy makes verify exit 1 naming that file, and export refuse;
  a FIFO as latest, manifest.json or engine_state.json makes verify exit 1 at once naming it;
  a link planted at export's temporary name makes export fail naming it, leaving the link and
    its target as they were.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(cmd, expect=0):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    check(p.returncode == expect, f"{' '.join(cmd)} exited {p.returncode}, expected {expect}:\n{p.stdout}")
    return p.stdout


def run_bounded(cmd, expect, limit=20):
    """run() for a command that must end quickly: one that reads from a FIFO hangs, so a
    timeout is a failure of its own (the child is killed), not an exception that ends the test."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        check(False, f"{' '.join(cmd)} still running after {limit} s (blocked on a FIFO?)")
        return ""
    check(p.returncode == expect, f"{' '.join(cmd)} exited {p.returncode}, expected {expect}:\n{p.stdout}")
    return p.stdout


def load_safetensors_package():
    """The safetensors package's torch loaders; None (after a failure naming what to install)
    where this interpreter lacks it."""
    try:
        from safetensors import safe_open
        from safetensors.torch import load_file
        import torch
    except ImportError as e:
        check(False, f"{sys.executable} cannot import the safetensors package or torch ({e}): run "
                     "scripts/install-deps.sh, or configure with -DZRT_TEST_PYTHON=<a python that has them>")
        return None
    return safe_open, load_file, torch


def read_with_package(path):
    """read_safetensors()'s result, read by the safetensors package: {name: (dtype, shape, bit
    patterns)} and the metadata."""
    safe_open, load_file, torch = SAFETENSORS
    names = {torch.float32: ("F32", torch.int32, 0xFFFFFFFF), torch.float16: ("F16", torch.int16, 0xFFFF),
             torch.bfloat16: ("BF16", torch.int16, 0xFFFF)}
    tensors = {}
    for name, t in load_file(path).items():
        dtype, same_size_int, mask = names[t.dtype]
        tensors[name] = (dtype, list(t.shape), [v & mask for v in t.view(same_size_int).flatten().tolist()])
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        check(set(f.keys()) == set(tensors), f"{path}: safe_open and load_file list the same tensors")
    return tensors, meta


def read_safetensors(path):
    """Reads `path` here (json and struct) and, where the safetensors package is loaded, checks
    that the package reads the same names, dtypes, shapes, bits and metadata."""
    tensors, meta = read_safetensors_here(path)
    if SAFETENSORS is not None:
        theirs, their_meta = read_with_package(path)
        check(theirs == tensors, f"{path}: the safetensors package reads other tensors than json and struct do")
        check(their_meta == meta, f"{path}: the safetensors package reads metadata {their_meta}, not {meta}")
        READ_BY_PACKAGE.append(path)
    return tensors, meta


# Set by use_safetensors_package(): the package's loaders, and the files it has read.
SAFETENSORS = None
READ_BY_PACKAGE = []


def use_safetensors_package():
    global SAFETENSORS
    SAFETENSORS = load_safetensors_package()
    return SAFETENSORS is not None


def read_safetensors_here(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        raw = data[b:e]
        count = 1
        for d in t["shape"]:
            count *= d
        if t["dtype"] == "F32":
            vals = list(struct.unpack(f"<{count}I", raw))  # bit patterns
        elif t["dtype"] in ("F16", "BF16"):
            vals = list(struct.unpack(f"<{count}H", raw))
        else:
            raise ValueError(t["dtype"])
        tensors[name] = (t["dtype"], t["shape"], vals)
    return tensors, meta


def f32_to_bf16_bits(u):
    """Round an fp32 bit pattern to bf16, nearest even (finite values)."""
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def f32_bits_to_f16_bits(u):
    (x,) = struct.unpack("<f", struct.pack("<I", u))
    (h,) = struct.unpack("<H", struct.pack("<e", x))
    return h


def adapter_checks(tool, root, expected, t32):
    """--trainable-only: PEFT's adapter directory, into an existing directory and into one it
    creates; and what it refuses, leaving everything as it was."""
    trainable = {n for n, e in expected.items() if e["trainable"]}
    existing = os.path.join(root, "adapter")
    os.mkdir(existing)
    created = os.path.join(root, "new", "adapter")  # neither exists yet
    for adapter in (existing, created):
        run([tool, "export", root, "--out", adapter, "--trainable-only"])
        check(os.path.isdir(adapter), f"{adapter} is a directory")
        check(sorted(os.listdir(adapter)) == ["adapter_config.json", "adapter_model.safetensors"],
              f"{adapter} holds the adapter file and its config: {sorted(os.listdir(adapter))}")
        check(not os.path.exists(adapter + ".json") and not os.path.exists(os.path.join(root, "new", "adapter_config.json")),
              "nothing is written beside the adapter directory")
        ta, _ = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
        check(set(ta) == trainable, f"adapter names {sorted(ta)}")
        for name in ta:
            check(ta[name][2] == t32[name][2], f"{name}: adapter values")
        with open(os.path.join(adapter, "adapter_config.json")) as f:
            cfg = json.load(f)
        check(cfg["peft_type"] == "LORA" and cfg["target_modules"] == ["layer0", "layer1", "layer2"], f"adapter_config {cfg}")

    # Refusals (exit 2, naming the path), each leaving the directory as it was.
    before = sorted(os.listdir(root))
    out = run([tool, "export", root, "--out", created, "--trainable-only"], expect=2)
    check("adapter_model.safetensors exists; not overwritten" in out, "a second export into the directory says why:\n" + out)
    os.remove(os.path.join(created, "adapter_model.safetensors"))
    out = run([tool, "export", root, "--out", created, "--trainable-only"], expect=2)
    check("adapter_config.json exists; not overwritten" in out, "an existing adapter_config.json is refused:\n" + out)
    check(os.listdir(created) == ["adapter_config.json"], f"and nothing is written: {os.listdir(created)}")
    a_file = os.path.join(root, "a-file")
    with open(a_file, "w") as f:
        f.write("mine\n")
    out = run([tool, "export", root, "--out", a_file, "--trainable-only"], expect=2)
    check(a_file + " exists and is not a directory" in out, "a file at --out is refused:\n" + out)
    link = os.path.join(root, "a-link")
    os.symlink(existing, link)
    out = run([tool, "export", root, "--out", link, "--trainable-only"], expect=2)
    check(link + " exists and is not a directory (or is a link)" in out, "a link at --out is refused:\n" + out)
    named_file = os.path.join(root, "new2", "adapter.safetensors")
    out = run([tool, "export", root, "--out", named_file, "--trainable-only"], expect=2)
    check("names a file" in out and "give the directory" in out, "an --out ending in .safetensors is refused:\n" + out)
    with open(a_file) as f:
        check(f.read() == "mine\n", "the file at --out is untouched")
    check(os.path.islink(link) and sorted(os.listdir(existing)) == ["adapter_config.json", "adapter_model.safetensors"],
          "the link and its target are untouched")
    check(sorted(os.listdir(root)) == sorted(before + ["a-file", "a-link"]), f"nothing else is created: {sorted(os.listdir(root))}")
    os.remove(a_file)
    os.remove(link)

    # A full disk at each write in turn (ZRT_CHECKPOINT_FAULT=enospc:K, the K-th write fails):
    # exit 1, and what the export made (its files, the directories it created) is gone.
    full = os.path.join(root, "full", "adapter")
    for k in range(1, 100):
        p = subprocess.run([tool, "export", root, "--out", full, "--trainable-only"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60,
                           env=dict(os.environ, ZRT_CHECKPOINT_FAULT=f"enospc:{k}"))
        if p.returncode == 0:
            break
        check(p.returncode == 1 and "No space left on device" in p.stdout,
              f"a full disk at write {k} fails the export, exit 1, naming it:\n{p.stdout}")
        check(not os.path.exists(os.path.join(root, "full")), f"a full disk at write {k} leaves nothing behind")
    check(k > 2 and sorted(os.listdir(full)) == ["adapter_config.json", "adapter_model.safetensors"],
          f"with every write failed in turn ({k - 1}), the export then succeeds")


def scenario(tool, launcher, dtype, stage):
    print(f"--- {dtype} at stage {stage}")
    root = tempfile.mkdtemp(prefix="zrt-ckpt-tool-")
    try:
        run(launcher + [root, dtype, str(stage)])
        with open(os.path.join(root, "expected.json")) as f:
            expected = {e["name"]: e for e in json.load(f)}
        out = run([tool, "inspect", root])
        check(f"saved by 2 rank(s) at ZeRO stage {stage}, training dtype {dtype}" in out, "inspect summary:\n" + out)
        check("trained  (latest)" in out, "inspect lists the tag as latest:\n" + out)
        out = run([tool, "verify", root])
        check(out.startswith("ok"), "verify says ok:\n" + out)

        # The training dtype: exactly the engine's values.
        same = os.path.join(root, "same.safetensors")
        run([tool, "export", root, "--out", same, "--dtype", dtype])
        tensors, meta = read_safetensors(same)
        check(meta.get("format") == "pt", "metadata format pt")
        check(set(tensors) == set(expected), f"exported names {sorted(tensors)}")
        for name, e in expected.items():
            dt, shape, vals = tensors[name]
            check(shape == e["shape"], f"{name} shape {shape}")
            want = e["fp32_bits"] if dtype == "fp32" else [b >> 16 for b in e["fp32_bits"]]
            if dtype == "bf16":
                check(all(b & 0xFFFF == 0 for b in e["fp32_bits"]), f"{name}: engine values are bf16")
            check(vals == want, f"{name}: exported {dtype} values differ from the engine's")

        f32 = os.path.join(root, "f32.safetensors")
        run([tool, "export", root, "--out", f32])
        t32, _ = read_safetensors(f32)
        for name, e in expected.items():
            dt, _, vals = t32[name]
            check(dt == "F32", f"{name} dtype {dt}")
            if dtype == "fp32" or not e["trainable"]:
                check(vals == e["fp32_bits"], f"{name}: fp32 export differs")
            else:
                rounded = [f32_to_bf16_bits(u) for u in vals]
                check(rounded == [b >> 16 for b in e["fp32_bits"]], f"{name}: master does not round to the engine's bf16")
                check(vals != e["fp32_bits"], f"{name}: the fp32 export should be the finer master")

        f16 = os.path.join(root, "f16.safetensors")
        run([tool, "export", root, "--out", f16, "--dtype", "fp16"])
        t16, _ = read_safetensors(f16)
        for name in expected:
            check(t16[name][0] == "F16", f"{name} fp16 dtype")
            check(t16[name][2] == [f32_bits_to_f16_bits(u) for u in t32[name][2]], f"{name}: fp16 export is not the rounded fp32")

        adapter_checks(tool, root, expected, t32)
        run([tool, "export", root, "--out", f32], expect=2)  # never overwrites

        # A damaged copy: verify names the file and fails; export refuses.
        bad = os.path.join(root, "bad")
        shutil.copytree(os.path.join(root, "trained"), bad)
        victim = os.path.join(bad, "exp_avg_sq.rank00001.bin")
        with open(victim, "r+b") as f:
            f.seek(5)
            c = f.read(1)
            f.seek(5)
            f.write(bytes([c[0] ^ 1]))
        out = run([tool, "verify", bad], expect=1)
        check("BAD  " + victim in out and "checksum" in out, "verify names the damaged file:\n" + out)
        victim = os.path.join(bad, "params.rank00000.bin")
        with open(victim, "r+b") as f:
            f.truncate(6)
        out = run([tool, "export", bad, "--out", os.path.join(root, "x.safetensors")], expect=1)
        check(victim in out and "truncated" in out, "export names the damaged file:\n" + out)
        check(not os.path.exists(os.path.join(root, "x.safetensors")), "no export from a damaged checkpoint")

        # A FIFO where a file should be: refused at once, naming it (a plain open would wait
        # forever for a writer).
        for name in ("latest", "manifest.json", "engine_state.json"):
            where = os.path.join(root, "fifo-" + name.split(".")[0])
            shutil.copytree(os.path.join(root, "trained"), os.path.join(where, "trained"))
            with open(os.path.join(where, "latest"), "w") as f:
                f.write("trained\n")
            fifo = os.path.join(where, name) if name == "latest" else os.path.join(where, "trained", name)
            os.remove(fifo)
            os.mkfifo(fifo)
            out = run_bounded([tool, "verify", where], expect=1)
            said = fifo + " is a FIFO, not a regular file" if name != "engine_state.json" else fifo + ": not a regular file"
            check(said in out, f"verify names the FIFO {fifo}:\n" + out)

        # A link planted at export's temporary name is not followed, nor removed: the export
        # fails naming it and the link's target is untouched. The shell's pid is the tool's (exec).
        target = os.path.join(root, "target")
        with open(target, "w") as f:
            f.write("precious\n")
        planted = os.path.join(root, "planted.safetensors")
        p = subprocess.run(["sh", "-c", 'ln -s "$1" "$2.tmp-$$" && exec "$3" export "$4" --out "$2"', "sh",
                            target, planted, tool, root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        check(p.returncode == 1 and ".tmp-" in p.stdout and "File exists" in p.stdout,
              f"export onto a planted link exited {p.returncode}:\n{p.stdout}")
        links = [n for n in os.listdir(root) if n.startswith("planted.safetensors.tmp-")]
        check(len(links) == 1 and os.path.islink(os.path.join(root, links[0])), f"the planted link stays: {links}")
        with open(target) as f:
            check(f.read() == "precious\n", "the planted link's target is untouched")
        check(not os.path.exists(planted), "nothing exported past a planted link")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    args = ap.parse_args(argv[:split])
    launcher = argv[split + 1:]
    if not use_safetensors_package():
        return 1
    scenario(args.tool, launcher, "bf16", 3)
    scenario(args.tool, launcher, "fp32", 2)
    print(f"the safetensors package read {len(READ_BY_PACKAGE)} exported files the same as json and struct")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
