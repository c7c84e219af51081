"""Run by dead_rank_test.py under `mpirun -np 2`: trains at stage 3; in step 3 rank 1 prints
"rank 1 leaves" and then SIGKILLs itself (mode kill) or raises a Python exception that ends its
program (mode throw), while rank 0 goes on into the backward's collectives; or (mode closed)
closes its engine before raising, while rank 0 closes its own and creates a new one. When rank 0 gets
an exception out of the Engine it prints "rank 0 raised <type>: <message>" and lets it end the
program (the path a user's script takes: zrt's exit handler, then the interpreter's exit)."""
import os
import signal
import sys
import time

import torch

import zrt
from tiny_gpt2 import GPT2, batches, loss_of

mode = sys.argv[1]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
torch.manual_seed(0)
engine = zrt.initialize(model=GPT2(), config={
    "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
data = batches(10, 4, 16, 64)
try:
    for s in range(10):
        loss = loss_of(engine, data[s][rank * 2:(rank + 1) * 2])
        if s == 3:
            if rank == 1:
                print("rank 1 leaves", flush=True)
                if mode == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if mode == "closed":
                    engine.close()
                raise RuntimeError("the caller's own error on rank 1")
            if mode == "closed":
                # Rank 0 starts over with a new engine, whose communicator's creation is a
                # collective that waits for rank 1.
                engine.close()
                engine = zrt.initialize(model=GPT2(), config={
                    "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
                continue
            time.sleep(1)  # rank 1 is dead by now: the backward's collectives wait for it
        engine.backward(loss)
        engine.step()
except zrt.errors.Error as e:
    if rank == 1:
        raise
    print(f"rank {rank} raised {type(e).__name__}: {e}", flush=True)
    raise
sys.exit(f"rank {rank}: training went on although rank 1 was killed")
