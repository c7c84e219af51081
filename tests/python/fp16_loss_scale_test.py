"""fp16 with dynamic loss scaling from Python, on 2 ranks (run under mpirun -np 2), at ZeRO
stages 0 and 3, against plain torch doing the same mixed precision in one process
(reference()). The model is a small MLP written with elementwise products and sums (torch 1.13
has no fp16 addmm, LayerNorm, tanh or relu on CPU), with a squaring activation. In step
OVERFLOW_STEP rank 1's targets are multiplied by 1e4, so its scaled gradient overflows fp16:
the step must be skipped on every rank (StepReport taken False, parameters unchanged) and the
scale halve. The loss scale of every step is checked against DeepSpeed's rule computed here
(Scaler: window 3, so the scale also doubles twice), and the parameters bit for bit."""
import os
import sys

import torch

import zrt

STEPS, BATCH, IN, HIDDEN, OUT, LR, WD = 12, 4, 8, 16, 4, 1e-2, 0.01
OVERFLOW_STEP = 5
SCALE_POWER, WINDOW = 10, 3


class Dense(torch.nn.Module):
    """x @ weight + bias as a broadcast product and a sum (no addmm: it has no fp16 on CPU)."""

    def __init__(self, fan_in, fan_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(fan_in, fan_out) * 0.3)
        self.bias = torch.nn.Parameter(torch.randn(fan_out) * 0.1)

    def forward(self, x):
        return (x[:, :, None] * self.weight[None]).sum(1) + self.bias


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Dense(IN, HIDDEN)
        self.fc2 = Dense(HIDDEN, OUT)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h * h)


def loss_of(model, x, t):
    return ((model(x).float() - t) ** 2).mean()


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS, BATCH, IN, generator=g) * 0.5
    t = torch.randn(STEPS, BATCH, OUT, generator=g)
    t[OVERFLOW_STEP, BATCH // 2:] *= 1e4  # rank 1's half of the batch (the reference's piece 1)
    return x.half(), t


class Scaler:
    """DeepSpeed's DynamicLossScaler (hysteresis 1): an overflow halves the scale; WINDOW steps
    in a row without one double it."""

    def __init__(self):
        self.scale, self.iteration, self.last_overflow = 2.0 ** SCALE_POWER, 0, -1

    def update(self, overflow):
        if overflow:
            self.scale = max(self.scale / 2, 1.0)
            self.last_overflow = self.iteration
        elif (self.iteration - self.last_overflow) % WINDOW == 0:
            self.scale *= 2
        self.iteration += 1


def config(stage):
    return {"train_batch_size": BATCH, "train_micro_batch_size_per_gpu": BATCH // 2,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WD}},
            "fp16": {"enabled": True, "initial_scale_power": SCALE_POWER, "loss_scale_window": WINDOW,
                     "hysteresis": 1, "min_loss_scale": 1},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}


def reference(initial, xs, ts, world):
    """The Engine's fp16 step in plain torch: the fp32 masters start from the fp16-rounded
    initial values; each rank's piece is run in fp16 with its loss seeded by the scale; the
    pieces' fp16 gradients are summed in fp32 and rounded to fp16 once (the MPI sum), then divided
    by the world size (exactly: a power of two); a non-finite element anywhere skips the step
    (the scale halves, Adam's step count stays); else ZRT's Adam kernel (zrt.ops.CPUAdam, checked
    against torch.optim.AdamW by cpu_adam_test) steps the masters with gradient / scale (exact:
    the scale is a power of two) and the model gets them back rounded. Returns the parameters
    and each step's (scale, taken) and the scale after the last."""
    model = MLP()
    model.load_state_dict(initial)
    model.half()
    master = [p.detach().float() for p in model.parameters()]
    opt = zrt.ops.CPUAdam(master, lr=LR, weight_decay=WD)
    scaler, steps = Scaler(), []
    for s in range(STEPS):
        grads = None
        for x, t in zip(xs[s].chunk(world), ts[s].chunk(world)):
            model.zero_grad(set_to_none=True)
            (loss_of(model, x, t) * scaler.scale).backward()
            g = [p.grad.float() for p in model.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        grads = [(a.half().float() / world).half() for a in grads]
        overflow = not all(torch.isfinite(g).all() for g in grads)
        steps.append((scaler.scale, not overflow))
        if not overflow:
            for m, g in zip(master, grads):
                m.grad = g.float() / scaler.scale
            opt.step()
            with torch.no_grad():
                for m, p in zip(master, model.parameters()):
                    p.copy_(m)
        scaler.update(overflow)
    return {k: p.detach().float() for k, p in model.named_parameters()}, steps, scaler.scale


def train(stage, initial, xs, ts):
    model = MLP()
    model.load_state_dict(initial)
    engine = zrt.initialize(model=model, config=config(stage))
    rank, world = engine.rank, engine.world_size
    micro = BATCH // world
    steps, values_at = [], {}
    for s in range(STEPS):
        if s in (OVERFLOW_STEP, OVERFLOW_STEP + 1):
            values_at[s] = engine.fp32_state_dict()
        loss = loss_of(engine, xs[s][rank * micro:(rank + 1) * micro], ts[s][rank * micro:(rank + 1) * micro])
        engine.backward(loss)
        r = engine.step()
        steps.append((r["loss_scale"], r["taken"]))
    values = engine.fp32_state_dict()
    final_scale = engine.loss_scale()
    engine.close()
    unchanged = all(torch.equal(values_at[OVERFLOW_STEP][k], values_at[OVERFLOW_STEP + 1][k])
                    for k in values_at[OVERFLOW_STEP])
    return values, steps, final_scale, unchanged


def main():
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if world != 2:
        sys.exit("run under mpirun -np 2 (rank 1's half of the batch overflows)")
    torch.manual_seed(0)
    initial = MLP().state_dict()
    xs, ts = data()
    ref, ref_steps, ref_final = reference(initial, xs, ts, world)
    # The rule alone, as a check of the reference itself: 2^10 for three steps, doubled, halved
    # by the overflow in step 5, doubled again three clean steps later and once more after the
    # last step.
    expected = [1024.0] * 3 + [2048.0] * 3 + [1024.0] * 3 + [2048.0] * 3
    failures = []
    if [s for s, _ in ref_steps] != expected or [t for _, t in ref_steps].count(False) != 1 or \
            ref_steps[OVERFLOW_STEP][1] or ref_final != 4096.0:
        failures.append(f"the reference's steps {ref_steps} (final scale {ref_final}) are not the expected "
                        f"scales {expected} with only step {OVERFLOW_STEP} skipped, then 4096")
    for stage in (0, 3):
        ours, steps, final_scale, unchanged = train(stage, initial, xs, ts)
        worst = max(((ours[k] - v).abs().max() / v.abs().max()).item() for k, v in ref.items())
        print(f"rank {rank}: stage {stage}: steps (loss scale, taken) {steps}; final scale {final_scale}; "
              f"worst relative difference {worst:.3g} (tolerance 0)", flush=True)
        if steps != ref_steps:
            failures.append(f"stage {stage}: steps {steps} != reference {ref_steps}")
        if final_scale != ref_final:
            failures.append(f"stage {stage}: loss scale after training {final_scale} != reference {ref_final}")
        if not unchanged:
            failures.append(f"stage {stage}: the skipped step {OVERFLOW_STEP} changed the parameters")
        if not worst == 0:
            failures.append(f"stage {stage}: parameters differ from the reference by {worst:.3g}")
    if failures:
        sys.exit(f"rank {rank}: " + "; ".join(failures))
    print(f"rank {rank}: ok")


main()
