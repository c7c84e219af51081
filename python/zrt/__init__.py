"""ZRT from PyTorch: DeepSpeed's ZeRO (stages 0-3, offload to CPU and NVMe) run by ZRT's C++
runtime, embedded in a PyTorch training script (docs/python.md).

    engine = zrt.initialize(model=model, config="ds_config.json")
    loss = loss_fn(engine(inputs), targets)
    engine.backward(loss)
    engine.step()

zrt.ops.CPUAdam and zrt.ops.AsyncIO work alone in plain PyTorch code.
"""
import os
import sys

# Open MPI loads its components with dlopen; they find libmpi's symbols only when it was loaded
# with RTLD_GLOBAL (mpi4py does the same).
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from . import _zrt  # noqa: E402
finally:
    sys.setdlopenflags(_flags)

from . import errors, ops  # noqa: E402
from .engine import Engine, initialize  # noqa: E402
from .errors import Error  # noqa: E402

__all__ = ["initialize", "Engine", "Error", "errors", "ops"]
