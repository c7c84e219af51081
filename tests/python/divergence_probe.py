"""Run by divergence_test.py under `mpirun -np 2`: trains a tiny GPT-2 under zrt.initialize until
the ranks diverge the way scripts make them diverge (MODE, below); the rank that leaves the
common path first prints "rank R diverges: ..." (the test times the job's end from there);
whatever zrt raises is printed as "rank R raised <type>: <message>" and ends the program, as in
a user's script."""
import os
import sys
import tempfile
import time

import torch

import zrt
from tiny_gpt2 import GPT2, batches, loss_of

mode = sys.argv[1]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
stage = 1 if mode == "save_on_rank0" else 3
torch.manual_seed(0)
engine = zrt.initialize(model=GPT2(), config={
    "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}})
data = batches(8, 4, 16, 64)


def diverges(what):
    print(f"rank {rank} diverges: {what}", flush=True)


def train(step):
    loss = loss_of(engine, data[step][rank * 2:(rank + 1) * 2])
    engine.backward(loss)
    engine.step()


try:
    if mode == "fewer_batches":  # rank 1's data has one batch fewer; it ends normally
        for s in range(3 if rank == 0 else 2):
            train(s)
        if rank == 1:
            diverges("its data ended; it leaves the loop")
    elif mode == "save_on_rank0":  # the "save on rank 0" habit, then training goes on
        for s in range(2):
            train(s)
        if rank == 0:
            diverges("saves alone")
            engine.save_checkpoint(tempfile.mkdtemp())
        for s in range(2, 4):
            train(s)
    elif mode == "state_dict_on_rank0":  # a collective state dict taken on rank 0 only
        for s in range(2):
            train(s)
        if rank == 0:
            diverges("takes the state dict alone")
            torch.save(engine.fp32_state_dict(), os.devnull)
    elif mode == "interrupt":  # one rank catches Ctrl-C and ends normally
        try:
            for s in range(4):
                if rank == 1 and s == 2:
                    raise KeyboardInterrupt
                train(s)
        except KeyboardInterrupt:
            diverges("interrupted; ending normally")
    elif mode == "comm_elsewhere":  # rank 1 all-reduces its loss while rank 0 steps
        from zrt.compat.deepspeed import comm as dist
        for s in range(2):
            train(s)
        if rank == 1:
            diverges("all-reduces alone")
            dist.all_reduce(torch.ones(4))
        train(2)
    elif mode == "graph_at_exit":  # a job that ends well, with two engines and a graph kept
        other = zrt.initialize(model=GPT2(), config={
            "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}})
        for s in range(2):
            train(s)
        kept = loss_of(other, data[0][rank * 2:(rank + 1) * 2])  # its graph views other's parameters
    elif mode == "timeout":  # no divergence check: the wait's own timeout ends the job
        for s in range(2):
            if rank == 1 and s == 1:
                diverges("sleeps a minute")
                time.sleep(60)
            train(s)
except zrt.errors.Error as e:
    print(f"rank {rank} raised {type(e).__name__}: {e}", flush=True)
    raise
print(f"rank {rank} finished its loop", flush=True)
