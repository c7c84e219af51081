"""2 ranks (mpirun -np 2): only rank 1 gets a bad config. Every rank agrees that its set-up
(config, device, model) succeeded before the first collective, so both raise within seconds
instead of rank 0 waiting for rank 1 in the initial broadcast: rank 1 its own InvalidArgument
naming itself and the key, rank 0 an InvalidArgument too (the class rank 1 raised) "rank 1
failed to set up: <rank 1's message>". A bad nvme_path on rank 1 only, found while the Engine
is built, raises rank 1's class (InvalidArgument: the directory does not exist) on both ranks."""
import os
import sys
import time

import torch

import zrt
from tiny_gpt2 import GPT2

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
assert world == 2, f"run under mpirun -np 2 (world size {world})"
config = {"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 7 if rank == 1 else 1}}
torch.manual_seed(0)
start = time.monotonic()
expected = zrt.errors.InvalidArgument
try:
    zrt.initialize(model=GPT2(), config=config)
except expected as e:
    took = time.monotonic() - start
    msg = str(e)
    print(f"rank {rank}: {type(e).__name__} after {took:.2f} s: {msg}")
    assert "[rank 1]" in msg and "zero_optimization.stage" in msg, f"rank {rank}: {msg}"
    if rank == 0:
        assert "rank 1 failed to set up" in msg, msg
    assert took < 5, f"rank {rank}: raised only after {took:.1f} s"
else:
    sys.exit(f"rank {rank}: zrt.initialize raised no {expected.__name__}")
nvme = {"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
                                                                "nvme_path": "/nonexistent/zrt" if rank == 1 else "/tmp"}}}
try:
    zrt.initialize(model=GPT2(), config=nvme)
except zrt.errors.InvalidArgument as e:
    print(f"rank {rank}: InvalidArgument: {e}")
    assert "rank 1" in str(e) and "/nonexistent/zrt" in str(e), f"rank {rank}: {e}"
else:
    sys.exit(f"rank {rank}: a bad nvme_path on rank 1 raised no InvalidArgument here")
# Both ranks still work together afterwards: a good engine on both.
engine = zrt.initialize(model=GPT2(), config=dict(config, zero_optimization={"stage": 1}))
engine.close()
print(f"rank {rank}: ok")
