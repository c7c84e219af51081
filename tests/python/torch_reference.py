"""The reference the zrt package's tests compare against: plain torch in one process, training on
the whole global batch, its gradient accumulated over the ranks' micro-batches (each loss
weighted 1/world, so the sum is the mean gradient the ranks' average gives), and the checks the
tests share."""
import torch


def train_whole_batch(model, opt, loss_of, data, world, before_step=None, after_step=None):
    """Steps `opt` once per data[s]; returns each step's losses, one per rank's micro-batch
    (data[s].chunk(world)). before_step(s) runs before a step's gradients (to set its learning
    rate), after_step(s) after opt.step() (a scheduler's step)."""
    losses = []
    for s in range(len(data)):
        if before_step:
            before_step(s)
        opt.zero_grad()
        step = []
        for piece in data[s].chunk(world):
            loss = loss_of(model, piece)
            (loss / world).backward()
            step.append(loss.item())
        opt.step()
        if after_step:
            after_step(s)
        losses.append(step)
    return losses


def train_engine(engine, loss_of, data):
    """The Engine's side for one rank holding the whole batch: one step per data[s]; returns each
    step's loss and the fp32 state dict on the CPU, by name, and closes the engine."""
    losses = []
    for s in range(len(data)):
        loss = loss_of(engine, data[s])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    values = {k: v.cpu() for k, v in engine.fp32_state_dict().items()}
    engine.close()
    return losses, values


def state_of(model):
    """The model's state_dict, detached copies (tied names included, as state_dict lists them)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def expect_error(fail, what, error, fn, *words):
    """fn() must raise `error` whose message holds every one of `words`; fail(message) otherwise."""
    try:
        fn()
    except error as e:
        missing = [w for w in words if w not in str(e)]
        if missing:
            fail(f"{what}: the error does not name {missing}: {e}")
        return
    except Exception as e:  # noqa: BLE001 (the wrong class is the finding)
        fail(f"{what}: raised {type(e).__name__} ({e}), not {error.__name__}")
        return
    fail(f"{what}: no error")
