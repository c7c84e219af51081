"""Benchmark: the GPT-2 of tiny_gpt2.py (larger settings) trained on N ranks by PyTorch DDP
(gloo) and by zrt.initialize at ZeRO stage 0, 3 and 3 with optimizer state and parameters on
NVMe, in one run. Prints tokens/s (all ranks together, the median of the timed steps) and each
rank's peak RSS during each phase (VmHWM, reset between phases through /proc/self/clear_refs,
after the heap's free pages from the phase before are handed back), the peak by the end of
set-up beside it, and zrt's tokens/s as a multiple of DDP's (targets: >= 1.0x at stage 0, 0.9x
at 3, 0.75x on NVMe). --ledger prints each zrt run's memory ledger (Engine.memory_summary).

  mpirun -np 2 python3 tests/python/bench_zrt_vs_ddp.py [--size large] [--layers 4 --d 256 --steps 10 --nvme DIR]

--size picks the model's shape (explicit --layers, --d... still win): `default`, where activations
and torch's own memory dominate RSS, and `large` (118 M parameters, one short sequence a rank,
zrt's buckets at DDP's 25 MB rather than DeepSpeed's defaults, which are as large as the model,
and the stage-3 gathered pool and the NVMe run's sub-groups bounded likewise),
where the parameters' memory does: there the RSS below DDP's, per parameter, is what the targets
are about (at least 6 bytes a parameter at stage 3, 12 with NVMe offload; DDP keeps 16 and more).

Not a ctest test (its length is a benchmark's); PYTHONPATH must reach the zrt package (an
installed one, or build/python) and this folder."""
import argparse
import ctypes
import gc
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from tiny_gpt2 import GPT2, batches, loss_of


def peak_rss_reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mib(field="VmHWM:"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def release_freed_memory():
    """Hands the heap's free pages back to the kernel (glibc's malloc_trim), so that memory an
    earlier phase freed but the allocator kept does not count in the next phase's RSS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def timed(step, steps, warmup=2):
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        step(s)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:])


# Shapes for --size. large: 8 layers of d=1024 (12 d^2 each) and 8192 x 1024 embeddings and head,
# 118 M parameters (1.9 GB of DDP's 16 bytes each), with one 32-token sequence a rank, so
# activations stay small beside them.
SIZES = {
    "default": dict(layers=4, d=256, heads=4, vocab=4096, context=128, micro=8),
    "large": dict(layers=8, d=1024, heads=8, vocab=8192, context=32, micro=1, steps=3, bucket=6_250_000),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--micro", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--nvme", default=None, help="directory for the NVMe run (default: a temporary one)")
    ap.add_argument("--bucket", type=int, default=None,
                    help="zrt's reduce, all-gather and stage-3 prefetch bucket sizes in elements (default: "
                         "DeepSpeed's, 5e8 and 5e7, buffers as large as the model); DDP's are 25 MB, 6.25 M fp32")
    ap.add_argument("--sub-group", type=int, default=1_000_000,
                    help="sub_group_size of the NVMe run in elements (DeepSpeed's default, 1e9, is a whole shard)")
    ap.add_argument("--runs", default=None,
                    help="the zrt runs to make after DDP, by index (0: stage 0, 1: stage 3, 2: stage 3 + NVMe), "
                         "e.g. 2: each zrt run in a process of its own then starts from what DDP left, not "
                         "from what the zrt runs before it left too (default: all three)")
    ap.add_argument("--ledger", action="store_true", help="print each zrt run's memory ledger (rank 0)")
    ap.add_argument("--size", choices=sorted(SIZES), default="default",
                    help="the model's shape; explicit --layers, --d, ... override it")
    ap.set_defaults(**SIZES[ap.parse_known_args()[0].size])
    a = ap.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    data = batches(a.steps + 2, a.micro * world, a.context, a.vocab)
    tokens = a.micro * world * a.context  # per step, all ranks

    def make():
        torch.manual_seed(0)
        return GPT2(vocab=a.vocab, context=a.context, d=a.d, layers=a.layers, heads=a.heads)

    def mine(s):
        return data[s][rank * a.micro:(rank + 1) * a.micro]

    rows = []

    def record(name, seconds, report, setup, start):
        rss = [None] * world
        dist.all_gather_object(rss, peak_rss_mib())
        # The peak by the end of set-up (model, engine or DDP wrapper and optimizer built).
        at_setup = [None] * world
        dist.all_gather_object(at_setup, setup)
        # The RSS the phase started from: what the process held before it (torch, MPI, gloo,
        # what earlier phases left).
        at_start = [None] * world
        dist.all_gather_object(at_start, start)
        # The RSS after the timed steps, beside the peak: a peak well above it is a transient
        # (the set-up's copies of the model), not what training holds.
        now = [None] * world
        dist.all_gather_object(now, peak_rss_mib("VmRSS:"))
        rows.append((name, tokens / seconds, rss, report, now, at_setup, at_start))

    # DDP with gloo, torch.optim.AdamW.
    peak_rss_reset()
    start = peak_rss_mib("VmRSS:")
    model = torch.nn.parallel.DistributedDataParallel(make())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    setup = peak_rss_mib()

    def ddp_step(s):
        opt.zero_grad()
        loss_of(model, mine(s)).backward()
        opt.step()
    record("DDP (gloo)", timed(ddp_step, a.steps), None, setup, start)
    del model, opt
    # Each phase's model goes before the next phase's peak is taken: DDP's and zrt's hooks hold
    # reference cycles (zrt's engine.close() gives a stage-0 model back its own 4 bytes a
    # parameter), which only the collector frees.
    gc.collect()

    import zrt
    scratch = None if a.nvme else tempfile.TemporaryDirectory(prefix=f"zrt-bench-{rank}-")
    nvme_dir = a.nvme or scratch.name
    base = {"train_batch_size": a.micro * world, "train_micro_batch_size_per_gpu": a.micro,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    # max_in_cpu 0: every parameter on NVMe (DeepSpeed's default, 10^9 elements, keeps a shard
    # this size in host memory); sub_group_size: the optimizer's swap buffers hold one sub-group
    # of master weights and moments each, a whole shard at DeepSpeed's default.
    runs = [("zrt stage 0", {"stage": 0}),
            ("zrt stage 3", {"stage": 3}),
            ("zrt stage 3 + NVMe", {"stage": 3, "sub_group_size": a.sub_group,
                                    "offload_optimizer": {"device": "nvme", "nvme_path": nvme_dir},
                                    "offload_param": {"device": "nvme", "nvme_path": nvme_dir, "max_in_cpu": 0}})]
    if a.runs:
        runs = [runs[int(k)] for k in a.runs.split(",")]
    for name, zero in runs:
        if a.bucket:
            zero = dict(zero, reduce_bucket_size=a.bucket, allgather_bucket_size=a.bucket,
                        stage3_prefetch_bucket_size=a.bucket)
            if zero["stage"] == 3:
                # DeepSpeed's defaults (10^9 each) keep every module gathered once used, a whole
                # fp32 copy of a model this size: the gathered pool gets the module in use, the
                # prefetch bucket and the module that overshoots it (3 buckets: at 2, half the
                # gathers found no room to be posted ahead and waited), and keeps a module only
                # for a reuse within a bucket.
                zero = dict(zero, stage3_max_live_parameters=3 * a.bucket, stage3_max_reuse_distance=a.bucket)
        release_freed_memory()
        peak_rss_reset()
        start = peak_rss_mib("VmRSS:")
        engine = zrt.initialize(model=make(), config=dict(base, zero_optimization=zero))
        setup = peak_rss_mib()

        def zrt_step(s):
            engine.backward(loss_of(engine, mine(s)))
            engine.step()
        record(name, timed(zrt_step, a.steps), engine.last_report, setup, start)
        if a.ledger and rank == 0:
            print(f"{name}: the Engine's memory ledger after the timed steps (rank 0)\n{engine.memory_summary()}")
        engine.close()
        del engine
        gc.collect()

    if rank == 0:
        params = sum(p.numel() for p in make().parameters())
        print(f"GPT-2: {a.layers} layers, d={a.d}, vocab {a.vocab}, context {a.context}: {params / 1e6:.2f} M "
              f"parameters; {world} ranks x {a.micro} sequences; median of {a.steps} steps; torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads per rank; zrt buckets {a.bucket or 'DeepSpeed default'} elements")
        ddp = rows[0][1]
        print(f"{'run':<20} {'tokens/s':>10} {'x DDP':>6}   {'RSS at start':<13} {'peak RSS per rank (MiB)':<24} "
              f"{'set-up peak':<13} {'RSS at end':<12} last step: compute / comm waited / optimizer s")
        for name, tps, rss, r, now, at_setup, at_start in rows:
            split = f"{r['compute_seconds']:.3f} / {r['comm_seconds']:.3f} / {r['optimizer_seconds']:.3f}" if r else ""
            print(f"{name:<20} {tps:>10.0f} {tps / ddp:>6.2f}   {' '.join(f'{x:.0f}' for x in at_start):<13} "
                  f"{' '.join(f'{x:.0f}' for x in rss):<24} {' '.join(f'{x:.0f}' for x in at_setup):<13} "
                  f"{' '.join(f'{x:.0f}' for x in now):<12} {split}")
        # Peak RSS below DDP's on the rank where it is least below, per parameter.
        ddp_rss = rows[0][2]
        for name, _, rss, _, _, _, _ in rows[1:]:
            below = min((d - z) * 2 ** 20 / params for d, z in zip(ddp_rss, rss))
            print(f"{name:<20} peak RSS below DDP's by {below:.1f} bytes per parameter (least over the ranks)")
    dist.barrier()
    dist.destroy_process_group()
    if scratch:
        scratch.cleanup()


main()
