"""The config's Adam (adam_w_mode false: L2 weight decay; by default: AdamW) and SGD (momentum, weight decay) through zrt.initialize
(one process, stage 0 and 1) against torch.optim.Adam, AdamW and SGD over 10 steps of the
tiny GPT-2: every parameter within 1e-5 of torch's (relative to its largest element), and the
parameters moved by more than lr. One process: MPI starts as a singleton."""
import torch

import zrt
from tiny_gpt2 import GPT2, batches, loss_of

STEPS, LR = 10, 1e-2
CASES = (("Adam", {"lr": LR, "weight_decay": 0.05, "adam_w_mode": False},
          lambda p: torch.optim.Adam(p, lr=LR, weight_decay=0.05)),
         # DeepSpeed's Adam is AdamW unless adam_w_mode is false.
         ("Adam", {"lr": LR, "weight_decay": 0.05}, lambda p: torch.optim.AdamW(p, lr=LR, weight_decay=0.05)),
         ("SGD", {"lr": LR, "momentum": 0.9, "weight_decay": 0.01},
          lambda p: torch.optim.SGD(p, lr=LR, momentum=0.9, weight_decay=0.01)))
data = batches(STEPS, 4, 16, 64)
for name, params, make_ref in CASES:
    for stage in (0, 1):
        torch.manual_seed(0)
        model = GPT2()
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        engine = zrt.initialize(model=model, config={"train_batch_size": 4, "optimizer": {"type": name, "params": params},
                                                     "zero_optimization": {"stage": stage}})
        ref = GPT2()
        ref.load_state_dict(initial)
        opt = make_ref(ref.parameters())
        for s in range(STEPS):
            engine.backward(loss_of(engine, data[s]))
            engine.step()
            opt.zero_grad()
            loss_of(ref, data[s]).backward()
            opt.step()
        ours, theirs = engine.fp32_state_dict(), ref.state_dict()
        worst = max(((ours[k] - v).abs().max() / v.abs().max()).item() for k, v in theirs.items())
        moved = max((ours[k] - initial[k]).abs().max().item() for k in theirs)
        what = f"{name} {params}"
        print(f"{what} stage {stage}: worst relative difference {worst:.3g}, largest move {moved:.3g}")
        assert worst <= 1e-5, f"{what} stage {stage}: {worst} > 1e-5 from torch"
        assert moved > LR, f"{what} stage {stage}: parameters moved at most {moved}"
        engine.close()
print("ok")
