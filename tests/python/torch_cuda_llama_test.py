"""zrt.initialize on a `transformers` Llama on cuda:0 (one rank, NCCL carrying the data, MPI the
agreements) against plain torch.optim.AdamW on the same GPU: transformers_matrix_test.py's tiny
Llama (2 layers, hidden 32, vocabulary 96; eager attention) trained 3 steps at ZeRO stage 3 with
the optimizer and the parameters offloaded to NVMe (through pinned host memory). Every step's
loss is within 1e-5 (relative) of torch's, and every parameter after the last step within 1e-5
of torch's, relative to its largest element; the batches, the ZRT config and the tolerance are
transformers_matrix_test.py's. Skips (exit 77, SKIP_RETURN_CODE in CMake) before it imports zrt
or builds anything where torch sees no GPU.

    ZRT_TEST_CUDA_LLAMA_DEVICE=cpu python3 torch_cuda_llama_test.py

runs the same comparison on CPU tensors (the Engine's host device) instead of skipping: a check
of the test itself where no GPU is, not of ZRT on a GPU."""
import os
import sys

import torch

OVERRIDE = os.environ.get("ZRT_TEST_CUDA_LLAMA_DEVICE")
if OVERRIDE not in (None, "", "cpu"):
    sys.exit(f"ZRT_TEST_CUDA_LLAMA_DEVICE={OVERRIDE}: only cpu is understood (or leave it unset for cuda:0)")
ON_CPU = OVERRIDE == "cpu"
if not ON_CPU and not torch.cuda.is_available():
    print("SKIP: torch.cuda.is_available() is false: no GPU (or a CPU-only torch) here "
          "(ZRT_TEST_CUDA_LLAMA_DEVICE=cpu checks the test itself on the CPU)")
    sys.exit(77)

# After the skip: nothing is set up on a machine that skips. The bundle's runner
# (scripts/gpu_bundle_tests.py) reads this file's imports: naming transformers here is what
# makes it report the test as not run, rather than failed, where the interpreter lacks it.
import tempfile  # noqa: E402
import time  # noqa: E402

import transformers  # noqa: E402

import zrt  # noqa: E402
from torch_reference import state_of, train_engine, train_whole_batch  # noqa: E402
from transformers_matrix_test import BATCH, CONTEXT, LR, STEPS, TOLERANCE, VOCAB, WD, config, llama  # noqa: E402

DEVICE = torch.device("cpu") if ON_CPU else torch.device("cuda", 0)


def build():
    """The same initial values every time (seeded, made on the CPU, then moved). Eager attention:
    torch 2.x's SDPA picks its kernel by device and its memory-efficient backward on a GPU is not
    deterministic, so the reference and the Engine could differ by what SDPA did, not by ZRT."""
    torch.manual_seed(0)
    model, loss_fn = llama(attn_implementation="eager")
    return model.to(DEVICE), lambda m, x: loss_fn(m, x).loss


def reference(data):
    """Plain torch AdamW on DEVICE on the whole batch, one micro-batch a step (as the Engine's
    single rank sees it); each step's loss and the final parameters (on the CPU, by name)."""
    model, loss_of = build()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses = [step[0] for step in train_whole_batch(model, opt, loss_of, data, 1)]
    return losses, {k: v.float().cpu() for k, v in state_of(model).items()}


def train(cfg, data):
    model, loss_of = build()
    return train_engine(zrt.initialize(model=model, config=cfg), loss_of, data)


def farthest(ours, ref):
    """The parameter farthest from the reference, relative to the reference's largest element."""
    return max(((k, ((ours[k] - v).abs().max() / v.abs().max()).item()) for k, v in ref.items()),
               key=lambda kv: kv[1])


def main():
    start = time.monotonic()
    if not ON_CPU:
        # The Engine runs on cuda:<local rank>: this single rank's is 0, and so is torch's.
        torch.cuda.set_device(DEVICE)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, on {DEVICE}"
          + (" (ZRT_TEST_CUDA_LLAMA_DEVICE=cpu: checks the test, not the GPU)" if ON_CPU else ""), flush=True)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(1, VOCAB, (STEPS, BATCH, CONTEXT), generator=g).to(DEVICE)
    ref_losses, ref = reference(data)
    initial = {k: v.float().cpu() for k, v in build()[0].state_dict().items()}
    moved = max((ref[k] - v).abs().max().item() for k, v in initial.items())
    if moved < 100 * TOLERANCE:
        sys.exit(f"the reference's parameters moved {moved:.1e} in {STEPS} steps: "
                 "the comparison would not see an engine that did not train")
    failures = []
    with tempfile.TemporaryDirectory(prefix="zrt-py-cuda-llama-") as nvme:
        name = f"stage 3 on {DEVICE}, optimizer and parameters on nvme"
        losses, ours = train(config(stage=3, world=1, offload="nvme", nvme=nvme), data)
        if sorted(ours) != sorted(ref):
            failures.append(f"{name}: fp32_state_dict names {sorted(set(ours) ^ set(ref))[:4]} differ from "
                            "the model's state_dict")
        else:
            param, w = farthest(ours, ref)
            wl = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
            where = f" ({param})" if w else ""
            print(f"{name}: worst relative parameter difference {w:.3g}{where}, loss difference {wl:.3g} "
                  f"(tolerance {TOLERANCE:g}); losses {losses[0]:.4f} -> {losses[-1]:.4f} "
                  f"(torch {ref_losses[0]:.4f} -> {ref_losses[-1]:.4f}); training moved parameters by up to "
                  f"{moved:.3g}", flush=True)
            if not w <= TOLERANCE:
                failures.append(f"{name}: parameter {param} is {w:.3g} from torch's > {TOLERANCE:g}")
            if not wl <= TOLERANCE:
                failures.append(f"{name}: a step's loss is {wl:.3g} (relative) from torch's > {TOLERANCE:g} "
                                f"(ours {[round(x, 6) for x in losses]}, torch's {[round(x, 6) for x in ref_losses]})")
    if failures:
        sys.exit("; ".join(failures))
    print(f"ok ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
