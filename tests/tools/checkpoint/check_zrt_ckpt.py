#!/usr/bin/env python3
"""Runs zrt-ckpt as a user would on checkpoints a 2-rank run saved, and reads what it exports
with an independent safetensors reader (json and struct only): an 8-byte little-endian header
length, the JSON header, raw little-endian data.

usage: check_zrt_ckpt.py --tool ZRT_CKPT -- MPIRUN ... FIXTURE

For a bf16 run at stage 3 and an fp32 run at stage 2 it checks:
  inspect and verify succeed and say what was saved;
  export --dtype <training dtype> gives exactly the values the engine holds;
  export fp32 of the bf16 run gives the fp32 master weights, each of which rounds (to nearest
    even, done here) to the bf16 value the engine holds; frozen tensors are exact;
  export fp16 equals the fp32 export rounded by struct's IEEE half packing;
  --trainable-only writes adapter_model.safetensors with only the trainable tensors and an
    adapter_config.json beside it;
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


def read_safetensors(path):
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

        adapter = os.path.join(root, "adapter")
        os.mkdir(adapter)
        run([tool, "export", root, "--out", adapter, "--trainable-only"])
        ta, _ = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
        check(set(ta) == {n for n, e in expected.items() if e["trainable"]}, f"adapter names {sorted(ta)}")
        for name in ta:
            check(ta[name][2] == t32[name][2], f"{name}: adapter values")
        with open(os.path.join(adapter, "adapter_config.json")) as f:
            cfg = json.load(f)
        check(cfg["peft_type"] == "LORA" and cfg["target_modules"] == ["layer0", "layer1", "layer2"], f"adapter_config {cfg}")
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
    scenario(args.tool, launcher, "bf16", 3)
    scenario(args.tool, launcher, "fp32", 2)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
