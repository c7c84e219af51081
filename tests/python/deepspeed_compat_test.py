"""zrt.compat.deepspeed on 2 ranks (mpirun -np 2): a training script written against DeepSpeed's
API, in the shape of DeepSpeed's own examples (train_script below: deepspeed.initialize with
param groups that exempt biases and norms from weight decay, zero.Init around the model (each
parameter built into a file of its own, checked in /proc/self/maps),
zero.register_external_parameter for an LM head read in the top module, a parameter
initialised on rank 0 under zero.GatheredParameters(modifier_rank=0), the loss all-reduced with
deepspeed.comm for logging, a checkpoint with client state, a WarmupLR scheduler), run with
`deepspeed` bound to zrt.compat.deepspeed at ZeRO stages 0, 1, 2, 3 and 3 with NVMe, every
step's all-reduced loss within 1e-5 of plain torch AdamW in one process with the same groups,
schedule and initialisation. A resumed run (load_checkpoint) gets its client state back and
continues with the same bits. save_16bit_model writes a file transformers' from_pretrained
loads. deepspeed.comm's all_gather, broadcast (into a non-contiguous tensor), all_reduce of bf16
and of int32 with MAX, and get_local_rank give what each rank holds. Writes inside a
GatheredParameters block without modifier_rank are discarded (stages 0 and 3). A client torch AdamW with its own param groups and a LambdaLR
client scheduler trains as torch does too. Each refusal is checked: a config without an
optimizer, an optimizer ZRT cannot run, per-group betas, a trainable parameter in no group, a
process group, and DeepSpeed names not offered (module, engine, zero)."""
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

import zrt
import zrt.compat.deepspeed as deepspeed
import zrt.compat.deepspeed.comm as dist
from tiny_gpt2 import GPT2, batches
from torch_reference import expect_error, train_whole_batch

STEPS, SAVE_AT, BATCH, CONTEXT, VOCAB = 6, 3, 4, 16, 64
LR, WD, WARMUP = 1e-2, 0.1, 4
TOLERANCE = 1e-5
failures = []


def fail(what):
    failures.append(what)
    print(f"rank {dist.get_rank()}: FAILED: {what}", flush=True)


class LM(GPT2):
    """The LM head is the token embedding, read in the top module's forward."""

    def __init__(self, ds):
        super().__init__(vocab=VOCAB, context=CONTEXT)
        del self.head
        ds.zero.register_external_parameter(self, self.wte.weight)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, VOCAB), idx.roll(-1, dims=1).reshape(-1))


def mapped_from(t):
    """The file the memory of tensor t is mapped from (/proc/self/maps), or ""."""
    address = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5].strip() if len(fields) > 5 else ""
    return ""


def grouped_parameters(model):
    """No weight decay on biases and LayerNorm weights, as fine-tuning scripts group them."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or ".ln" in name or name.startswith("ln") else decay).append(p)
    return [{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}]


def ds_config(stage, nvme=None):
    z = {"stage": stage, "stage3_param_persistence_threshold": 0}
    if nvme:
        z["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme}
        z["offload_param"] = {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 0}
    return {"train_batch_size": BATCH, "train_micro_batch_size_per_gpu": BATCH // 2,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WD}},
            "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": LR,
                                                         "warmup_num_steps": WARMUP}},
            "zero_optimization": z}


def train_script(ds, dist_, config, data, ckpt, steps, resume=False):
    """A DeepSpeed training loop; returns the all-reduced losses and the client state loaded."""
    torch.manual_seed(0)
    with ds.zero.Init(config_dict_or_path=config):
        model = LM(ds)
    in_memory = [n for n, p in model.named_parameters() if "zrt-init-" not in mapped_from(p)]
    if in_memory:
        fail(f"zero.Init: {len(in_memory)} parameters are not in files while built (first: {in_memory[0]})")
    engine, optimizer, _, scheduler = ds.initialize(model=model, model_parameters=grouped_parameters(model),
                                                    config=config)
    loaded = None
    if resume:
        _, loaded = engine.load_checkpoint(ckpt)
    else:
        # Rank 0 sets the final norm's bias; every rank trains with it.
        with ds.zero.GatheredParameters(model.ln_f.bias, modifier_rank=0):
            if dist_.get_rank() == 0:
                model.ln_f.bias.data.fill_(0.25)
    rank, world = dist_.get_rank(), dist_.get_world_size()
    losses = []
    for step in steps:
        loss = engine(data[step].chunk(world)[rank])
        engine.backward(loss)
        engine.step()
        logged = loss.detach().clone()
        dist_.all_reduce(logged)
        losses.append(logged.item() / world)
        if step + 1 == SAVE_AT and not resume:
            engine.save_checkpoint(ckpt, client_state={"step": step + 1, "note": "warm", "seen": torch.arange(3)})
    return engine, losses, loaded


def warmup_lr(step):
    """DeepSpeed's WarmupLR (log warmup from 0 to LR over WARMUP steps) at optimizer step `step`
    (runtime/lr_schedule.h: step k runs at index k - 1)."""
    i = step - 1
    if i < 0:
        return 0.0
    return LR * (math.log(i + 1) / math.log(WARMUP) if i < WARMUP else 1.0)


def reference(data, world):
    torch.manual_seed(0)
    model = LM(deepspeed)
    with torch.no_grad():
        model.ln_f.bias.fill_(0.25)
    opt = torch.optim.AdamW(grouped_parameters(model), lr=LR)

    def schedule(step):
        for g in opt.param_groups:
            g["lr"] = warmup_lr(step)
    losses = train_whole_batch(model, opt, lambda m, x: m(x), data[:STEPS], world, before_step=schedule)
    return [sum(step) / world for step in losses]


def check_script(data, world, base):
    want = reference(data, world)
    for label, stage, nvme in (("stage 0", 0, False), ("stage 1", 1, False), ("stage 2", 2, False),
                               ("stage 3", 3, False), ("stage 3 + nvme", 3, True)):
        with tempfile.TemporaryDirectory(prefix=f"zrt-ds-nvme-{dist.get_rank()}-") as swap:
            config = ds_config(stage, swap if nvme else None)
            ckpt = os.path.join(base, f"ckpt-stage{stage}{'-nvme' if nvme else ''}")
            engine, losses, _ = train_script(deepspeed, dist, config, data, ckpt, range(STEPS))
            worst = max(abs(g - w) / w for g, w in zip(losses, want))
            if worst > TOLERANCE:
                fail(f"{label}: losses {losses}, torch's {want}")
            lrs = engine.get_lr()
            if any(abs(lr - warmup_lr(STEPS)) > 1e-12 for lr in lrs) or engine.global_steps != STEPS:
                fail(f"{label}: get_lr() {lrs} and global_steps {engine.global_steps} after {STEPS} steps "
                     f"(want {warmup_lr(STEPS)} and {STEPS})")
            engine.close()
            resumed, again, client = train_script(deepspeed, dist, config, data, ckpt, range(SAVE_AT, STEPS),
                                                  resume=True)
            if client is None or client.get("step") != SAVE_AT or client.get("note") != "warm" or \
                    not torch.equal(client.get("seen"), torch.arange(3)):
                fail(f"{label}: load_checkpoint's client state is {client}")
            if again != losses[SAVE_AT:]:
                fail(f"{label}: the resumed run's losses {again} are not the straight run's {losses[SAVE_AT:]}")
            resumed.close()
            print(f"rank {dist.get_rank()}: {label}: losses within {worst:.1e} of torch; resumed with the same "
                  "bits and its client state", flush=True)


def check_client_optimizer(data, world):
    """A torch AdamW with its own groups and a LambdaLR on it, stepped by the engine."""
    def build():
        torch.manual_seed(0)
        return LM(deepspeed)

    def schedule(step):
        return 1.0 / (1 + step)

    model = build()
    opt = torch.optim.AdamW(grouped_parameters(model), lr=LR, betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    want = [sum(step) / world for step in train_whole_batch(model, opt, lambda m, x: m(x), data[:STEPS], world,
                                                            after_step=lambda s: sched.step())]
    for stage in (0, 3):
        model = build()
        client = torch.optim.AdamW(grouped_parameters(model), lr=LR, betas=(0.8, 0.95))
        config = ds_config(stage)
        del config["optimizer"], config["scheduler"]
        engine, _, _, scheduler = deepspeed.initialize(model=model, optimizer=client, config=config,
                                                       lr_scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(o, schedule))
        losses = []
        for step in range(STEPS):
            loss = engine(data[step].chunk(world)[dist.get_rank()])
            engine.backward(loss)
            engine.step()
            logged = loss.detach().clone()
            dist.all_reduce(logged, op=dist.ReduceOp.AVG)
            losses.append(logged.item())
        worst = max(abs(g - w) / w for g, w in zip(losses, want))
        if worst > TOLERANCE:
            fail(f"client AdamW and LambdaLR, stage {stage}: losses {losses}, torch's {want}")
        if abs(engine.get_lr()[0] - LR * schedule(STEPS)) > 1e-12:
            fail(f"client scheduler, stage {stage}: get_lr() {engine.get_lr()}, want {LR * schedule(STEPS)}")
        engine.close()
        print(f"rank {dist.get_rank()}: client AdamW + LambdaLR at stage {stage}: losses within {worst:.1e} of torch",
              flush=True)


def check_engine_api(base):
    """save_16bit_model writes what transformers' from_pretrained loads (beside the model's
    config), at stage 3 with a tied LM head; module, train/eval, the accumulation boundary."""
    import transformers
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    config = ds_config(3)
    del config["scheduler"]
    engine, _, _, scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    if engine.module is not model or scheduler is not None or engine.zero_optimization_stage() != 3:
        fail(f"engine.module is not the model, or lr_scheduler {scheduler!r} without a scheduler section")
    data = batches(2, BATCH, CONTEXT, VOCAB)
    for step in range(2):
        x = data[step].chunk(2)[dist.get_rank()]
        engine.backward(engine(input_ids=x, labels=x).loss)
        if not engine.is_gradient_accumulation_boundary():
            fail("is_gradient_accumulation_boundary() is False with one micro-step a step")
        engine.step()
    saved = os.path.join(base, "hf16")
    engine.save_16bit_model(saved)
    values = engine.fp32_state_dict()
    engine.eval()
    dist.barrier()  # rank 0 wrote the file
    if dist.get_rank() == 0:
        model.config.save_pretrained(saved)
    dist.barrier()
    back = transformers.GPT2LMHeadModel.from_pretrained(saved)
    wrong = [k for k, v in back.state_dict().items() if k in values and not torch.equal(v, values[k])]
    if wrong or engine.module.training:
        fail(f"save_16bit_model -> from_pretrained: {wrong[:3]} differ (or eval() left the model training)")
    engine.close()
    print(f"rank {dist.get_rank()}: save_16bit_model loads with from_pretrained", flush=True)


def expect(what, error, fn, *words):
    expect_error(fail, what, error, fn, *words)


def check_discarded_writes(data):
    """GatheredParameters without modifier_rank: what the block wrote is gone afterwards (the
    training matches a run without the block), at stages 0 and 3."""
    for stage in (0, 3):
        values = []
        for scribble in (False, True):
            torch.manual_seed(0)
            model = LM(deepspeed)
            config = ds_config(stage)
            engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=grouped_parameters(model),
                                                   config=config)
            if scribble:
                with deepspeed.zero.GatheredParameters([model.ln_f.weight, model.wte.weight]):
                    with torch.no_grad():
                        model.ln_f.weight.data.fill_(7.0)
                        model.wte.weight.data.zero_()
            for step in range(2):
                engine.backward(engine(data[step].chunk(2)[dist.get_rank()]))
                engine.step()
            values.append(engine.fp32_state_dict())
            engine.close()
        changed = [k for k, v in values[0].items() if not torch.equal(v, values[1][k])]
        if changed:
            fail(f"stage {stage}: writes in a GatheredParameters block without modifier_rank changed {changed[:3]}")
    print(f"rank {dist.get_rank()}: GatheredParameters without modifier_rank discards its writes", flush=True)


def check_comm():
    """deepspeed.comm's collectives on CPU tensors, in place, against what each rank holds."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if dist.get_local_rank() != int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")):
        fail(f"get_local_rank() is {dist.get_local_rank()}")
    gathered = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, torch.arange(3, dtype=torch.int64) + 10 * rank)
    if any(not torch.equal(g, torch.arange(3) + 10 * r) for r, g in enumerate(gathered)):
        fail(f"all_gather gave {gathered}")
    sent = torch.full((2, 2), float(rank + 1)).t()  # not contiguous: written back in place
    dist.broadcast(sent, src=world - 1)
    if not torch.equal(sent, torch.full((2, 2), float(world))):
        fail(f"broadcast from rank {world - 1} gave {sent}")
    half = torch.tensor([rank + 0.5], dtype=torch.bfloat16)
    dist.all_reduce(half)
    most = torch.tensor([rank], dtype=torch.int32)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    if half.item() != sum(r + 0.5 for r in range(world)) or most.item() != world - 1:
        fail(f"all_reduce: bf16 sum {half.item()}, int32 max {most.item()}")
    dist.barrier()
    print(f"rank {rank}: comm's collectives checked", flush=True)


def check_refusals():
    def model():
        torch.manual_seed(0)
        return LM(deepspeed)

    no_optimizer = ds_config(0)
    del no_optimizer["optimizer"]
    bad = zrt.errors.InvalidArgument
    expect("a config without an optimizer", bad,
           lambda: deepspeed.initialize(model=model(), model_parameters=None, config=no_optimizer), "optimizer")
    m = model()
    expect("torch.optim.RMSprop", bad,
           lambda: deepspeed.initialize(model=m, optimizer=torch.optim.RMSprop(m.parameters()), config=no_optimizer),
           "RMSprop")
    m = model()
    groups = grouped_parameters(m)
    groups[1]["betas"] = (0.5, 0.5)
    expect("per-group betas", bad, lambda: deepspeed.initialize(model=m, model_parameters=groups, config=ds_config(0)),
           "betas")
    m = model()
    expect("a trainable parameter in no group", bad,
           lambda: deepspeed.initialize(model=m, model_parameters=grouped_parameters(m)[:1], config=ds_config(0)),
           "blocks.0.ln1.weight", "no param group")
    expect("deepspeed.init_inference", AttributeError, lambda: deepspeed.init_inference, "init_inference")
    expect("deepspeed.zero.Offload", AttributeError, lambda: deepspeed.zero.OffloadStateTypeEnum,
           "OffloadStateTypeEnum")
    expect("a process group", bad, lambda: dist.all_reduce(torch.ones(1), group="tp"), "group")
    m = model()
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=grouped_parameters(m), config=ds_config(0))
    expect("engine.train_batch", AttributeError, lambda: engine.train_batch, "train_batch")
    expect("optimizer.step()", bad, lambda: engine.optimizer.step(), "engine.step()")
    expect("the config's scheduler stepped by hand", bad, lambda: engine.lr_scheduler.step(), "engine.step()")
    engine.close()
    print(f"rank {dist.get_rank()}: refusals checked", flush=True)


def main():
    world = dist.get_world_size()
    data = batches(STEPS, BATCH, CONTEXT - 1, VOCAB)[:, :, :CONTEXT]
    shared = os.environ.get("ZRT_TEST_SHARED_DIR", tempfile.gettempdir())
    base = os.path.join(shared, f"zrt-ds-compat-{os.environ.get('OMPI_MCA_ess_base_jobid', os.getppid())}")
    try:
        check_script(data, world, base)
        check_client_optimizer(data, world)
        check_engine_api(base)
        check_comm()
        check_discarded_writes(data)
        check_refusals()
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            import shutil
            shutil.rmtree(base, ignore_errors=True)
    if failures:
        sys.exit(f"rank {dist.get_rank()}: {len(failures)} failures: " + "; ".join(failures))
    print(f"rank {dist.get_rank()}: ok")


main()
