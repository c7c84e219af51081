"""zrt.initialize on a model on cuda:0 (one rank, NCCL carrying the data, MPI the agreements)
against plain torch.optim.AdamW on the same GPU: the tiny GPT-2 trained 20 steps at ZeRO stage
3, with everything on the GPU and with the optimizer and the parameters offloaded to NVMe
(through pinned host memory), ends with every parameter within the CPU equivalence test's
tolerance of the reference, and the per-step losses agree too. The tensors cross through DLPack
as kDLCUDA with no copy; torch's stream and the Engine's are ordered with events.
Skips (exit 77, SKIP_RETURN_CODE in CMake) before it builds anything where torch sees no GPU."""
import sys

import torch

if not torch.cuda.is_available():
    print("SKIP: torch.cuda.is_available() is false: no GPU (or a CPU-only torch) here")
    sys.exit(77)

import tempfile  # noqa: E402 (after the skip: nothing is set up on a machine that skips)

import zrt  # noqa: E402
from engine_equivalence_test import BATCH, CONTEXT, LR, STEPS, VOCAB, WD, config, worst  # noqa: E402
from tiny_gpt2 import GPT2, batches, loss_of  # noqa: E402
from torch_reference import train_engine  # noqa: E402

DEVICE = torch.device("cuda", 0)
# The CPU test's tolerance (engine_equivalence_test.py), relative to each parameter's largest
# element; losses are compared the same way, step by step.
TOLERANCE = 1e-5


def reference(initial, data):
    """Plain torch AdamW on cuda:0 on the whole batch, one micro-batch a step (as the Engine's
    single rank sees it)."""
    torch.manual_seed(0)
    model = GPT2().to(DEVICE)
    model.load_state_dict(initial)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = loss_of(model, data[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {k: v.detach().float().cpu() for k, v in model.state_dict().items()}, losses


def train(cfg, initial, data):
    torch.manual_seed(0)
    model = GPT2().to(DEVICE)
    model.load_state_dict(initial)
    losses, values = train_engine(zrt.initialize(model=model, config=cfg), loss_of, data)
    return values, losses


def main():
    # The Engine runs on cuda:<local rank>: this single rank's is 0, and so is torch's.
    torch.cuda.set_device(DEVICE)
    torch.manual_seed(0)
    initial = GPT2().state_dict()
    data = batches(STEPS, BATCH, CONTEXT, VOCAB).to(DEVICE)
    ref, ref_losses = reference(initial, data)
    failures = []
    with tempfile.TemporaryDirectory(prefix="zrt-py-cuda-") as nvme:
        settings = [
            ("stage 3 on cuda:0", dict(stage=3)),
            ("stage 3 on cuda:0, optimizer and parameters on nvme",
             dict(stage=3, optimizer="nvme", param="nvme", nvme=nvme)),
        ]
        for name, s in settings:
            ours, losses = train(config(world=1, **s), initial, data)
            w = worst(ours, ref)
            wl = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
            print(f"{name}: worst relative parameter difference {w:.3g}, loss difference {wl:.3g} "
                  f"(tolerance {TOLERANCE:g}); losses {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
            if not (w <= TOLERANCE and wl <= TOLERANCE):
                failures.append(f"{name}: parameters {w:.3g}, losses {wl:.3g} > {TOLERANCE:g}")
    if failures:
        sys.exit("; ".join(failures))
    print("ok")


if __name__ == "__main__":
    main()
