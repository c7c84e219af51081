"""A hook that raises inside engine.backward leaves the C++ micro-step open: the exception
reaches the caller, and every later forward/backward/step raises a zrt.errors.InvalidArgument
saying the earlier backward failed (with its error), not a micro-step protocol error. Before
that, a wrong argument (backward(loss.item())) is refused in zrt's words and leaves the engine
usable; after close(), every call says the engine is closed. One process: MPI starts as a
singleton."""
import sys

import torch

import zrt
from tiny_gpt2 import GPT2, batches, loss_of

torch.manual_seed(0)
engine = zrt.initialize(model=GPT2(), config={"train_batch_size": 4,
                                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
data = batches(2, 4, 16, 64)
loss = loss_of(engine, data[0])
for wrong in (loss.item(), loss.detach()):
    try:
        engine.backward(wrong)
    except zrt.errors.InvalidArgument as e:
        assert "engine.backward(loss)" in str(e) and "loss.item()" in str(e), e
    else:
        sys.exit(f"engine.backward({type(wrong).__name__}) raised nothing")
engine.backward(loss)  # still usable
engine.step()
loss = loss_of(engine, data[0])
loss.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError("the caller's hook failed")))
try:
    engine.backward(loss)
except RuntimeError as e:
    assert "the caller's hook failed" in str(e), e
else:
    sys.exit("the hook's error did not reach the caller")
for what, call in (("forward", lambda: loss_of(engine, data[1])), ("backward", lambda: engine.backward(loss)),
                   ("step", engine.step)):
    try:
        call()
    except zrt.errors.InvalidArgument as e:
        msg = str(e)
        print(f"{what}: {msg}")
        assert f"engine.{what}" in msg and "earlier engine.backward raised" in msg, msg
        assert "the caller's hook failed" in msg and "beginMicroStep" not in msg, msg
    else:
        sys.exit(f"engine.{what} after the failed backward raised nothing")
del loss  # its graph holds the engine through the hooks
engine.close()
closed = zrt.initialize(model=GPT2(), config={"train_batch_size": 4,
                                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
closed.close()
for what, call in (("forward", lambda: loss_of(closed, data[1])), ("step", closed.step),
                   ("save_checkpoint", lambda: closed.save_checkpoint("/nonexistent"))):
    try:
        call()
    except zrt.errors.InvalidArgument as e:
        assert "closed" in str(e) and what in str(e), e
    else:
        sys.exit(f"engine.{what} after close() raised nothing")
print("ok")
