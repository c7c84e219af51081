"""engine.save_checkpoint / load_checkpoint on 2 ranks (mpirun -np 2), on a GPT-2 whose LM head
is tied to its token embedding: a run saved after 10 of 20 steps at ZeRO stage 3 and resumed by a new engine at stage 1 ends with the same bits as the
run that never stopped; the checkpoint is the C++ Engine's own, so zrt-ckpt (its path is the
first argument, required: the test is registered only where the tools are built) verifies it and exports the model to safetensors,
whose tensors, read by the safetensors package under the model's own names, are the saved values
and load into a new engine (engine.load_weights) as them. A forward-only evaluation through the
engine (no_grad, eval mode) gives the loss plain torch gives with the engine's values. Ranks that
build their models from different seeds train rank 0's initial values. The tied parameter is
stored once in the checkpoint (its manifest lists it under its owner only) and exported under
both of the model's names (the file's zrt_tied names the extra one), and load_weights reads it
back from that file."""
import json
import os
import subprocess
import sys
import tempfile

import torch

import zrt
from tiny_gpt2 import GPT2, batches, loss_of

STEPS, BATCH = 20, 8


def config(stage, world):
    return {"train_batch_size": BATCH, "train_micro_batch_size_per_gpu": BATCH // world,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}


def engine_for(stage, world):
    torch.manual_seed(0)
    return zrt.initialize(model=GPT2(tied=True), config=config(stage, world))


def train(engine, data, steps):
    r, w = engine.rank, engine.world_size
    for s in steps:
        mine = data[s][r * BATCH // w:(r + 1) * BATCH // w]
        engine.backward(loss_of(engine, mine))
        engine.step()


def wait_for(path, seconds=30):
    """Rank 0 writes the export; the other ranks wait for it (no torch.distributed here)."""
    import time
    end = time.monotonic() + seconds
    while not os.path.exists(path + ".done"):
        if time.monotonic() > end:
            sys.exit(f"{path} did not appear within {seconds} s")
        time.sleep(0.05)


def barrier(world):
    """Every rank waits for the others: zrt.initialize agrees on the model's size with an
    MPI_Allreduce over every rank (no torch.distributed or mpi4py here)."""
    engine_for(1, world).close()


def main():
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit(f"usage: {sys.argv[0]} ZRT_CKPT (the zrt-ckpt executable; got {sys.argv[1:]})")
    ckpt_tool = sys.argv[1]
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    data = batches(STEPS, BATCH, 16, 64)
    base = os.environ.get("ZRT_TEST_SHARED_DIR", tempfile.gettempdir())
    # Every rank writes into the same directory: its name comes from mpirun's job id.
    ckpt = os.path.join(base, f"zrt-py-ckpt-{os.environ.get('OMPI_MCA_ess_base_jobid', os.getppid())}")

    try:
        # The initial values are rank 0's, whatever the other ranks built.
        torch.manual_seed(100 + rank)
        differing = zrt.initialize(model=GPT2(tied=True), config=config(2, world))
        torch.manual_seed(100)
        rank0 = GPT2(tied=True).state_dict()
        for k, v in differing.fp32_state_dict().items():
            assert torch.equal(v, rank0[k]), f"rank {rank}: {k} is not rank 0's initial value"
        differing.close()

        straight = engine_for(3, world)
        train(straight, data, range(10))
        straight.save_checkpoint(ckpt, "step10")
        saved = straight.fp32_state_dict()
        assert "head.weight" in saved and saved["head.weight"] is saved["wte.weight"], \
            f"rank {rank}: fp32_state_dict does not give the tied head.weight as wte.weight"
        with open(os.path.join(ckpt, "step10", "manifest.json")) as f:
            manifest = json.load(f)
        names = [f"{p['module']}.{p['name']}" for p in manifest["parameters"]]
        assert "wte.weight" in names and "head.weight" not in names, f"the manifest's parameters: {names}"
        assert manifest["metadata"].get("tied") == {"head.weight": "wte.weight"}, manifest["metadata"]
        train(straight, data, range(10, 20))
        final = straight.fp32_state_dict()
        straight.close()

        resumed = engine_for(1, world)
        resumed.load_checkpoint(ckpt)  # the tag `latest` names
        loaded = resumed.fp32_state_dict()
        for k, v in saved.items():
            assert torch.equal(loaded[k], v), f"rank {rank}: {k} differs after load"
        train(resumed, data, range(10, 20))
        ended = resumed.fp32_state_dict()
        for k, v in final.items():
            assert torch.equal(ended[k], v), f"rank {rank}: {k}: the resumed run differs from the straight one"
        moved = max((final[k] - saved[k]).abs().max().item() for k in final)
        assert moved > 1e-3, "the second half of training changed nothing"
        # A forward-only evaluation (no gradients, outside a micro-step) gives what a plain torch
        # model with the engine's values gives.
        plain = GPT2(tied=True)
        plain.load_state_dict(ended)
        resumed.eval()
        with torch.no_grad():
            ours, theirs = loss_of(resumed, data[0]).item(), loss_of(plain, data[0]).item()
        assert abs(ours - theirs) <= 1e-6 * abs(theirs), f"evaluation: engine {ours}, plain torch {theirs}"
        resumed.train()
        resumed.close()
        print(f"rank {rank}: resumed at stage 1 from stage 3's checkpoint: same bits after 10 more steps")

        if rank == 0:
            subprocess.run([ckpt_tool, "verify", ckpt], check=True)
            out = os.path.join(ckpt, "model.safetensors")
            subprocess.run([ckpt_tool, "export", ckpt, "--out", out], check=True)
            from safetensors.torch import load_file
            exported = load_file(out)
            assert sorted(exported) == sorted(saved), f"exported names {sorted(exported)}"
            from safetensors import safe_open
            with safe_open(out, "pt") as f:
                assert json.loads(f.metadata()["zrt_tied"]) == {"head.weight": "wte.weight"}, f.metadata()
            for k, v in saved.items():
                assert torch.equal(exported[k].view(-1), v.view(-1)), f"exported {k} differs"
            open(out + ".done", "w").close()
            print("rank 0: zrt-ckpt verified and exported the checkpoint; safetensors reads the saved values")
        # The exported file loads into a new engine (another stage) by the model's own names.
        weights = os.path.join(ckpt, "model.safetensors")
        fresh = engine_for(2, world)
        wait_for(weights)
        fresh.load_weights(weights)
        for k, v in fresh.fp32_state_dict().items():
            assert torch.equal(v.view(-1), saved[k].view(-1)), f"rank {rank}: {k} differs after load_weights"
        fresh.close()
        print(f"rank {rank}: load_weights from zrt-ckpt's safetensors export gives the saved values")
        # Rank 0 removes the directory only once every rank has finished reading it.
        barrier(world)
    finally:
        if rank == 0:
            import shutil
            shutil.rmtree(ckpt, ignore_errors=True)
    print(f"rank {rank}: ok")


main()
