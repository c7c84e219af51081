#!/usr/bin/env python3
"""Runs torch.optim.Adam / AdamW / SGD on the data torch_reference_test.cpp wrote and saves the
final parameters and optimizer state, for the test to compare with ZRT's kernels.

usage: torch_reference.py META.json [META.json...]
Each META.json is one run (one interpreter and one torch import for them all: importing torch
takes about a second, the runs a few milliseconds): {"optimizer": "adam"|"adamw"|"sgd", "n": N, "steps": T, "foreach": bool,
            "data": path of float32 [p0 (N), grad step 1 (N), ..., grad step T (N)],
            "out": path to write float32 [param (N), state... (N each)],
            "version_out": path to write torch.__version__ to,
            "hyper": [per-step dicts of the param-group settings]}
Adam/AdamW write param, exp_avg, exp_avg_sq; SGD writes param and momentum_buffer (if any).
Exit 3 (with a message naming the fix) when torch or numpy cannot be imported.
"""
import json
import sys

try:
    import numpy as np
    import torch
except ImportError as err:  # the test turns this into a failure with this message
    print(f"torch_reference.py: cannot import torch/numpy ({err}); Debian's python3-torch and "
          "python3-numpy are needed: run scripts/install-deps.sh", file=sys.stderr)
    sys.exit(3)


def main():
    for path in sys.argv[1:]:
        run(path)


def run(path):
    with open(path) as f:
        meta = json.load(f)
    n, steps = meta["n"], meta["steps"]
    data = np.fromfile(meta["data"], dtype=np.float32)
    if data.size != n * (steps + 1):
        sys.exit(f"torch_reference.py: {meta['data']} holds {data.size} floats, "
                 f"expected {n * (steps + 1)}")
    with open(meta["version_out"], "w") as f:  # the test checks it is the torch it was tuned on
        f.write(torch.__version__)
    torch.set_num_threads(1)
    param = torch.nn.Parameter(torch.from_numpy(data[:n].copy()))
    grads = data[n:].reshape(steps, n)
    first = meta["hyper"][0]
    kind = meta["optimizer"]
    if kind == "adam":
        opt = torch.optim.Adam([param], lr=first["lr"], foreach=meta["foreach"])
    elif kind == "adamw":
        opt = torch.optim.AdamW([param], lr=first["lr"], foreach=meta["foreach"])
    elif kind == "sgd":
        opt = torch.optim.SGD([param], lr=first["lr"], momentum=first["momentum"],
                              nesterov=first["nesterov"], foreach=meta["foreach"])
    else:
        sys.exit(f"torch_reference.py: unknown optimizer {kind!r}")
    for t in range(steps):
        group = opt.param_groups[0]
        for key, value in meta["hyper"][t].items():  # hyperparameters change every step
            group[key] = tuple(value) if key == "betas" else value
        param.grad = torch.from_numpy(grads[t].copy())
        opt.step()
    state = opt.state[param]
    names = ["exp_avg", "exp_avg_sq"] if kind != "sgd" else ["momentum_buffer"]
    out = [param.detach().numpy()]
    out += [state[k].numpy() for k in names if state.get(k) is not None]
    np.concatenate(out).astype(np.float32).tofile(meta["out"])


if __name__ == "__main__":
    main()
