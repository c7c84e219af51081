"""zrt.initialize on 2 ranks (mpirun -np 2) whose models were built from different seeds: every
rank trains rank 0's initial values, bit for bit, at stages 0 and 3 (they are broadcast in place
into the buffers each rank registered, with no copy of the model made at set-up); and at stage 3
the torch module keeps no parameter storage after set-up (each parameter is a placeholder until
a hook gathers it)."""
import os
import sys

import torch

import zrt
from tiny_gpt2 import GPT2


def storage_bytes(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().nbytes()
    return t.storage().size() * t.element_size()


def main():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.manual_seed(10)
    expected = {k: v.clone() for k, v in GPT2().state_dict().items()}
    failures = []
    for stage in (0, 3):
        torch.manual_seed(10 + rank)  # rank 0's model is `expected`; the others differ
        model = GPT2()
        if rank > 0 and all(torch.equal(v, expected[k]) for k, v in model.state_dict().items()):
            failures.append("the ranks' models do not differ before set-up: the test checks nothing")
        config = {"train_batch_size": world, "train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                  "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
        engine = zrt.initialize(model=model, config=config)
        got = engine.fp32_state_dict()
        wrong = sorted(k for k, v in expected.items() if not torch.equal(got[k], v))
        if wrong:
            failures.append(f"stage {stage}: {len(wrong)} parameters are not rank 0's initial values "
                            f"(first: {wrong[0]})")
        if stage == 3:
            # A placeholder is one fp32 element expanded to the parameter's shape. Reading p.data
            # at stage 3 outside a forward raises (its values are not here): the storage is
            # looked at past the parameter's __torch_function__.
            with torch._C.DisableTorchFunction():
                held = [(n, storage_bytes(p.data)) for n, p in model.named_parameters()
                        if storage_bytes(p.data) > 4]
            if held:
                failures.append(f"stage 3: {len(held)} parameters keep storage after set-up "
                                f"(first: {held[0][0]}, {held[0][1]} bytes)")
        engine.close()
        print(f"rank {rank}: stage {stage}: {len(expected) - len(wrong)} of {len(expected)} parameters are "
              "rank 0's initial values", flush=True)
    if failures:
        sys.exit(f"rank {rank}: " + "; ".join(failures))
    print(f"rank {rank}: ok")


main()
