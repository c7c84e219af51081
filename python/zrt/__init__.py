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

# torch first: its libraries (a pip torch 2.x brings its own NCCL and CUDA runtime) must be the
# ones loaded when the extension below, which is loaded RTLD_GLOBAL, comes in. The extension
# opens libnccl.so.2 only at its first NCCL call (comm/nccl/nccl_api.h) and then gets torch's;
# when it linked NCCL, the other order gave torch an older libnccl without the symbols it needs
# ("libtorch_cuda.so: undefined symbol: ncclCommResume").
import torch  # noqa: F401

# Open MPI loads its components with dlopen; they find libmpi's symbols only when it was loaded
# with RTLD_GLOBAL (mpi4py does the same).
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from . import _zrt  # noqa: E402
finally:
    sys.setdlopenflags(_flags)


def _check_numpy():
    import numpy
    if int(numpy.__version__.split(".")[0]) >= 2 and _zrt.pybind11_version < 212:
        major, minor = divmod(_zrt.pybind11_version, 100)
        raise ImportError(
            f"zrt: this build of the extension ({_zrt.__file__}) uses pybind11 {major}.{minor}, which "
            f"cannot read numpy {numpy.__version__}'s arrays (pybind11 2.12 or later can): rebuild "
            "with a newer pybind11 (`pip install .` fetches one), or use numpy < 2")


_check_numpy()

from . import errors, ops  # noqa: E402
from .engine import Engine, initialize, register_external_parameter  # noqa: E402
from .errors import Error  # noqa: E402
from .gathered import GatheredParameters  # noqa: E402

__all__ = ["initialize", "register_external_parameter", "GatheredParameters", "Engine", "Error", "errors", "ops"]
