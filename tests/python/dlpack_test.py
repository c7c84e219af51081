"""How tensors cross between torch and the Engine (python/bindings/dlpack_tensor.h): through
DLPack, with no copy either way. At stages 0-2 a module's parameters are tensors over the Engine's
own memory, in its precision (bf16 as bf16, which numpy could not carry); the capsules the Engine
hands out hold it alive until torch is done with them, and only then let it go; and what the
Engine refuses to read (not a capsule, one already consumed, a strided tensor, integers) raises
zrt's InvalidArgument naming the parameter, as does a model on a device the Engine does not run
on. One process: MPI starts as a singleton."""
import sys

import torch
import torch.utils.dlpack

import zrt
from tiny_gpt2 import GPT2

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def config(precision):
    c = {"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": {"stage": 2}}
    if precision != "fp32":
        c[precision] = {"enabled": True}
    return c


for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
    torch.manual_seed(0)
    model = GPT2()
    engine = zrt.initialize(model=model, config=config(precision))
    inner = engine._engine
    shared = total = 0
    for i, (name, _, own) in enumerate(engine._mods):
        for (pname, p), cap in zip(own, inner.parameters(i)):
            t = torch.utils.dlpack.from_dlpack(cap)
            total += 1
            shared += t.data_ptr() == p.data_ptr() and t.dtype == dtype == p.dtype
            check(t.numel() == p.numel(), f"{precision}: {name}.{pname}: {t.numel()} elements, {p.numel()} in torch")
    check(total > 0 and shared == total, f"{precision}: {shared} of {total} parameters are the Engine's memory in {dtype}")
    print(f"{precision}: {shared} of {total} parameters are tensors over the Engine's memory, {dtype}")

    # The owner: a capsule (taken or not) holds the Engine alive until it, or the tensor made
    # from it, is gone.
    before = sys.getrefcount(inner)
    caps = inner.parameters(0)
    check(sys.getrefcount(inner) == before + len(caps), f"{precision}: {len(caps)} capsules hold the Engine "
          f"{sys.getrefcount(inner) - before} times")
    tensors = [torch.utils.dlpack.from_dlpack(c) for c in caps[:1]]
    del caps
    check(sys.getrefcount(inner) == before + 1, f"{precision}: after the untaken capsules went, the Engine is held "
          f"{sys.getrefcount(inner) - before} times (1 tensor left)")
    del tensors
    check(sys.getrefcount(inner) == before, f"{precision}: the Engine is held {sys.getrefcount(inner) - before} "
          "times after every capsule and tensor went")

    # What report_gradients refuses, before it reads anything.
    name, _, own = engine._mods[0]
    pname, p = own[0]
    n = len(own)
    good = [torch.utils.dlpack.to_dlpack(torch.zeros(q.shape, dtype=dtype)) for _, q in own]
    rows, cols = (p.shape[0], p.numel() // p.shape[0]) if p.dim() > 1 else (1, p.numel())
    consumed = torch.utils.dlpack.to_dlpack(torch.zeros(p.shape, dtype=dtype))
    torch.utils.dlpack.from_dlpack(consumed)
    bad = {
        "not a capsule": (torch.zeros(p.shape, dtype=dtype).numpy() if dtype != torch.bfloat16 else [0.0],
                          "expected a DLPack capsule"),
        "consumed": (consumed, "already consumed"),
        "strided": (torch.utils.dlpack.to_dlpack(torch.zeros(cols, rows, dtype=dtype).t()) if rows > 1
                    else torch.utils.dlpack.to_dlpack(torch.zeros(2 * p.numel(), dtype=dtype)[::2]),
                    "not contiguous"),
        "int32": (torch.utils.dlpack.to_dlpack(torch.zeros(p.shape, dtype=torch.int32)), "elements of int32;"),
    }
    inner.begin_micro_step()
    for what, (g, needle) in bad.items():
        try:
            inner.report_gradients(0, [g] + good[1:n])
            failures.append(f"{precision}: a gradient {what} was taken")
        except zrt.errors.InvalidArgument as e:
            msg = str(e)
            check(needle in msg and f"gradient of {name}.{pname}:" in msg,
                  f"{precision}: a gradient {what}: '{msg}' lacks '{needle}' or the parameter's name")
            print(f"{precision}: a gradient {what}: {msg}")
    engine.close()

# Devices, refused before anything is built, naming the parameter: a model on a device zrt does
# not train on (meta here; mps alike), and, in the binding, a GPU other than this rank's (cuda:0
# for the one rank here) or, in a build without CUDA, any GPU. (A model on cuda is
# python_torch_cuda_test's, on a GPU.)
meta = GPT2().to("meta")
try:
    zrt.initialize(model=meta, config=config("fp32"))
    failures.append("a model on meta was taken")
except zrt.errors.InvalidArgument as e:
    check("is on meta" in str(e) and "wte.weight" in str(e), f"a model on meta: '{e}'")
    print(f"a model on meta: {e}")
text, source = zrt.engine._config_text(config("fp32"))
for device, needle in (("cuda:3", "parameter wte.weight is on cuda:3"), ("mps", "parameter wte.weight is on mps")):
    try:
        zrt._zrt.Engine(text, source, [], device=device, device_of="wte.weight")
        failures.append(f"a model on {device} was taken")
    except zrt.errors.InvalidArgument as e:
        check(needle in str(e), f"a model on {device}: '{e}' lacks '{needle}'")
        print(f"a model on {device}: {e}")

if failures:
    sys.exit("; ".join(failures))
print("ok")
