"""ZeRO stage 3 on models as people write them, on 2 ranks (mpirun -np 2), each case against
plain torch in one process; every one of these trained on zeros, saved zeros or was silently
changed before zrt's stage-3 parameters (python/zrt/_stage3.py):

- an LM head written in the top module (`h @ self.wte.weight.t()`, no Linear), a parent module
  reading its child's weight, a loss term on a parameter, a module returning a dict with None
  and a string in it, and register_external_parameter: each trains as torch does (every step's
  loss and the final parameters within 1e-5);
- model.state_dict(), torch.save of it and a submodule's state_dict() hold the trained values; a
  read of a parameter outside the forward (p.norm()) raises naming the parameter and its
  module, and so do reads after engine.close();
- a second zrt.initialize of a model a live engine owns is refused, and so is one after a
  stage-3 close() (no values left); after a stage-0 close() the second engine starts from the
  values the first trained;
- an integer parameter stays the model's, untouched; a float64 parameter is refused by name;
- requires_grad_(True) on a parameter frozen at initialize is refused at the next forward."""
import io
import os
import sys

import torch
import torch.nn.functional as F

import zrt
from tiny_gpt2 import GPT2, batches, loss_of
from torch_reference import expect_error as expect, state_of, train_whole_batch

STEPS, BATCH, CONTEXT, VOCAB, LR, WD = 6, 4, 16, 64, 1e-2, 0.01
TOLERANCE = 1e-5
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
failures = []


def fail(what):
    failures.append(what)
    print(f"rank {rank}: FAILED: {what}", flush=True)


class ExternalHead(GPT2):
    """The LM head is the token embedding, read in the top module's forward."""

    def __init__(self):
        super().__init__()
        del self.head

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


class ParentReadsChild(torch.nn.Module):
    """The parent owns a scale and reads its child's weight and bias in its own forward."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 32)
        self.child = torch.nn.Linear(32, 32)
        self.scale = torch.nn.Parameter(torch.ones(32))
        self.out = torch.nn.Linear(32, VOCAB)

    def forward(self, idx):
        h = self.emb(idx)
        h = torch.tanh(self.child(h)) + F.linear(h, self.child.weight, self.child.bias) * self.scale
        return self.out(h)


class DictOutput(GPT2):
    """A module with parameters returning a dict holding tensors, a nested tuple, None and a
    string (a ModelOutput-like output)."""

    def __init__(self):
        super().__init__()
        self.head = HeadReturningDict(self.head)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        out = self.head(self.ln_f(x))
        assert out["nothing"] is None and out["kind"] == "logits"
        return out["pair"][1][0]


class HeadReturningDict(torch.nn.Module):
    def __init__(self, linear):
        super().__init__()
        self.weight = linear.weight

    def forward(self, x):
        logits = x @ self.weight.t()
        return {"pair": (x, [logits]), "nothing": None, "kind": "logits"}


class Registered(ExternalHead):
    """The external head registered as DeepSpeed asks (before zrt.initialize)."""

    def __init__(self):
        super().__init__()
        zrt.register_external_parameter(self, self.wte.weight)


def penalised_loss(model, idx):
    """A loss term on a parameter, read between forward and backward."""
    return loss_of(model, idx) + 1e-2 * model.wpe.weight.pow(2).sum()


def plain_model():
    return GPT2()


CASES = [("external LM head", ExternalHead, loss_of), ("parent reading its child's weight", ParentReadsChild, loss_of),
         ("loss term on a parameter", plain_model, penalised_loss), ("dict output", DictOutput, loss_of),
         ("register_external_parameter", Registered, loss_of)]


def config(stage, offload=None, nvme=None):
    z = {"stage": stage, "stage3_param_persistence_threshold": 0}
    if offload:
        z["offload_param"] = {"device": offload, "nvme_path": nvme}
        z["offload_optimizer"] = {"device": offload, "nvme_path": nvme}
    return {"train_batch_size": BATCH, "train_micro_batch_size_per_gpu": BATCH // world,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WD}}, "zero_optimization": z}


def build(make):
    torch.manual_seed(0)
    return make()


def reference(make, loss_fn, data):
    model = build(make)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    return train_whole_batch(model, opt, loss_fn, data, world), state_of(model)


def train(engine, loss_fn, data):
    losses = []
    for s in range(STEPS):
        loss = loss_fn(engine, data[s].chunk(world)[rank])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def far(got, want):
    """The name and relative distance of the parameter furthest from `want`."""
    return max(((k, (got[k].float() - v).abs().max().item() / max(v.abs().max().item(), 1e-12))
                for k, v in want.items()), key=lambda kv: kv[1])


def expect_error(what, fn, *words):
    expect(fail, what, zrt.errors.InvalidArgument, fn, *words)


def check_trains_as_torch(data):
    for label, make, loss_fn in CASES:
        want_losses, want_params = reference(make, loss_fn, data)
        engine = zrt.initialize(model=build(make), config=config(3))
        losses = train(engine, loss_fn, data)
        worst = max(abs(g - w[rank]) / abs(w[rank]) for g, w in zip(losses, want_losses))
        name, dist = far(engine.fp32_state_dict(), want_params)
        if worst > TOLERANCE or dist > TOLERANCE:
            fail(f"{label}: losses {losses} against torch's {[w[rank] for w in want_losses]} "
                 f"(worst {worst:.1e}); parameter {name} {dist:.1e} from torch's")
        engine.close()
        print(f"rank {rank}: {label}: loss within {worst:.1e}, parameters within {dist:.1e} of torch", flush=True)


def check_state_dict(data, nvme):
    want_losses, want_params = reference(plain_model, loss_of, data)
    model = build(plain_model)
    engine = zrt.initialize(model=model, config=config(3, "nvme", nvme))
    train(engine, loss_of, data)
    sd = model.state_dict()  # collective
    name, dist = far(sd, want_params)
    if dist > TOLERANCE:
        fail(f"model.state_dict() after training: {name} is {dist:.1e} from torch's trained value")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    name, dist = far(torch.load(buffer), want_params)
    if dist > TOLERANCE:
        fail(f"torch.save(model.state_dict()): {name} is {dist:.1e} from torch's trained value")
    block = model.blocks[1].state_dict()
    name, dist = far(block, {k[len("blocks.1."):]: v for k, v in want_params.items() if k.startswith("blocks.1.")})
    if dist > TOLERANCE:
        fail(f"a submodule's state_dict(): {name} is {dist:.1e} from torch's")
    expect_error("p.norm() outside the forward at stage 3", lambda: model.ln_f.weight.norm(), "ln_f.weight", "ln_f")
    expect_error("p.data outside the forward at stage 3", lambda: model.wte.weight.data + 0, "wte.weight")
    # Reads inside the forward are gathered: eval, no grad, and the loss is torch's.
    engine.eval()
    with torch.no_grad():
        got = loss_of(engine, data[0].chunk(world)[rank]).item()
    reference_model = build(plain_model)
    reference_model.load_state_dict(want_params)
    with torch.no_grad():
        want = loss_of(reference_model, data[0].chunk(world)[rank]).item()
    if abs(got - want) / want > TOLERANCE:
        fail(f"evaluation after training: loss {got} against torch's {want}")
    engine.close()
    expect_error("model.state_dict() after a stage-3 close()", lambda: model.state_dict(), "closed", "wte.weight")
    expect_error("p.norm() after a stage-3 close()", lambda: model.wte.weight.norm(), "closed", "wte.weight")
    expect_error("a second zrt.initialize after a stage-3 close()",
                 lambda: zrt.initialize(model=model, config=config(3)), "wte.weight", "closed")
    print(f"rank {rank}: state_dict, torch.save and reads outside the forward checked", flush=True)


def check_refusals(data):
    model = build(plain_model)
    engine = zrt.initialize(model=model, config=config(0))
    expect_error("a second zrt.initialize of a model a live engine owns",
                 lambda: zrt.initialize(model=model, config=config(3)), "wte.weight", "live")
    train(engine, loss_of, data)
    trained = {k: v.clone() for k, v in engine.fp32_state_dict().items()}
    engine.close()
    second = zrt.initialize(model=model, config=config(3))
    name, dist = far(second.fp32_state_dict(), trained)
    if dist != 0:
        fail(f"a second zrt.initialize after a stage-0 close(): {name} is {dist:.1e} from the values trained")
    second.close()

    class WithInteger(GPT2):
        def __init__(self):
            super().__init__()
            self.count = torch.nn.Parameter(torch.tensor([16777217], dtype=torch.int64), requires_grad=False)

    for stage in (0, 3):
        model = build(WithInteger)
        engine = zrt.initialize(model=model, config=config(stage))
        train(engine, loss_of, data)
        if model.count.dtype != torch.int64 or model.count.item() != 16777217:
            fail(f"stage {stage}: the integer parameter is {model.count!r} after training, not 16777217 (int64)")
        if "count" in engine.fp32_state_dict():
            fail(f"stage {stage}: the integer parameter is in the engine's state (it cannot train)")
        engine.close()

    double = build(plain_model).double()
    expect_error("a float64 model", lambda: zrt.initialize(model=double, config=config(3)), "wte.weight", "float64")

    for stage in (0, 3):
        model = build(plain_model)
        model.ln_f.bias.requires_grad_(False)
        engine = zrt.initialize(model=model, config=config(stage))
        train(engine, loss_of, data)
        model.ln_f.bias.requires_grad_(True)
        expect_error(f"stage {stage}: requires_grad_(True) after zrt.initialize",
                     lambda: loss_of(engine, data[0].chunk(world)[rank]), "ln_f.bias", "requires_grad")
        engine.close()
    print(f"rank {rank}: refusals checked", flush=True)


def main():
    import tempfile
    data = batches(STEPS, BATCH, CONTEXT, VOCAB)
    check_trains_as_torch(data)
    with tempfile.TemporaryDirectory(prefix=f"zrt-stage3-models-{rank}-") as nvme:
        check_state_dict(data, nvme)
    check_refusals(data)
    if failures:
        sys.exit(f"rank {rank}: {len(failures)} failures: " + "; ".join(failures))
    print(f"rank {rank}: ok")


main()
