"""GPT-2 written out in plain PyTorch (float64), the oracle for gpt2_torch_test.cpp.

Usage: gpt2_torch_reference.py DIR. DIR/meta.json gives the shape, batch and seed; weights.bin
holds every parameter in float32 in the model's registration order (wte, wpe, then per block
ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj weight and bias, then ln_f);
inputs.bin and targets.bin hold batch x T bytes. Writes DIR/out.bin in float64: the mean loss,
the logits [batch, T, vocab], then d(mean loss x seed)/d(parameter) for every parameter in the
same order. The model is HF's GPT2LMHeadModel spelled out: Conv1D weights [in, out], pre-LN
blocks, causal attention with q, k, v in that order from c_attn, gelu (tanh), LM head tied to
wte. Computing in float64 from the float32 weights makes torch's own rounding negligible, so a
difference is the C++ model's fp32 error (or a bug).

With "lora" in meta.json ({"rank": r, "scaling": alpha / r, "targets": ["attn.c_attn", ...]}),
each block's weights are followed by lora_A [r, in] and lora_B [out, r] for each target in that
order, and a target layer computes x W + b + scaling (x A^T) B^T, as PEFT's LoRA on a Conv1D.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


LAYER_WIDTHS = {"attn.c_attn": (1, 3), "attn.c_proj": (1, 1), "mlp.c_fc": (1, 4), "mlp.c_proj": (4, 1)}


def parameter_shapes(L, C, T, V, lora=None):
    shapes = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for i in range(L):
        p = f"h.{i}."
        shapes += [
            (p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
            (p + "attn.c_attn.weight", (C, 3 * C)), (p + "attn.c_attn.bias", (3 * C,)),
            (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
            (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
            (p + "mlp.c_fc.weight", (C, 4 * C)), (p + "mlp.c_fc.bias", (4 * C,)),
            (p + "mlp.c_proj.weight", (4 * C, C)), (p + "mlp.c_proj.bias", (C,)),
        ]
        for layer in (lora["targets"] if lora else []):
            fin, fout = LAYER_WIDTHS[layer]
            shapes += [(p + layer + ".lora_A.weight", (lora["rank"], fin * C)),
                       (p + layer + ".lora_B.weight", (fout * C, lora["rank"]))]
    shapes += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return shapes


def main():
    d = sys.argv[1]
    meta = json.load(open(os.path.join(d, "meta.json")))
    L, C, H, T, V = meta["layers"], meta["hidden"], meta["heads"], meta["seqLen"], meta["vocab"]
    B, seed = meta["batch"], meta["seed"]
    lora = meta.get("lora")
    D = C // H
    flat = np.fromfile(os.path.join(d, "weights.bin"), dtype=np.float32)
    params, offset = {}, 0
    shapes = parameter_shapes(L, C, T, V, lora)
    for name, shape in shapes:
        count = int(np.prod(shape))
        t = torch.from_numpy(flat[offset:offset + count].astype(np.float64)).reshape(shape)
        params[name] = t.requires_grad_()
        offset += count
    assert offset == flat.size, f"weights.bin has {flat.size} floats, expected {offset}"
    inp = torch.from_numpy(np.fromfile(os.path.join(d, "inputs.bin"), dtype=np.uint8).astype(np.int64)).view(B, T)
    tgt = torch.from_numpy(np.fromfile(os.path.join(d, "targets.bin"), dtype=np.uint8).astype(np.int64)).view(B, T)

    P = params

    def linear(h, name):
        y = h @ P[name + ".weight"] + P[name + ".bias"]
        if lora and name + ".lora_A.weight" in P:
            y = y + lora["scaling"] * ((h @ P[name + ".lora_A.weight"].t()) @ P[name + ".lora_B.weight"].t())
        return y

    x = P["wte.weight"][inp] + P["wpe.weight"][torch.arange(T)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps=1e-5)
        qkv = linear(h, p + "attn.c_attn")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p + "attn.c_proj")
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps=1e-5)
        h = F.gelu(linear(h, p + "mlp.c_fc"), approximate="tanh")
        x = x + linear(h, p + "mlp.c_proj")
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], eps=1e-5)
    logits = x @ P["wte.weight"].t()
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    (loss * seed).backward()

    out = [np.array([loss.item()]), logits.detach().numpy().ravel()]
    out += [P[name].grad.numpy().ravel() for name, _ in shapes]
    np.concatenate(out).astype(np.float64).tofile(os.path.join(d, "out.bin"))


if __name__ == "__main__":
    main()
