"""deepspeed.zero over zrt: Init, GatheredParameters, register_external_parameter."""
import contextlib
import json
import os
import tempfile

import numpy
import torch

from ...engine import register_external_parameter
from ...gathered import GatheredParameters

__all__ = ["Init", "GatheredParameters", "register_external_parameter"]

# The parameter dtypes a file can hold through numpy (bf16 has no numpy type: kept in memory).
_NUMPY = {torch.float32: numpy.float32, torch.float16: numpy.float16, torch.float64: numpy.float64}


class Init(contextlib.ContextDecorator):
    """As deepspeed.zero.Init: the parameters of a model built inside it are not kept in memory
    while it is built. Each, as it is registered, moves into a file of its own (mapped, and
    unlinked at once, so nothing is left behind) in the config's NVMe path (offload_param's,
    else offload_optimizer's) or the temporary directory: its initialisation writes there, the
    kernel pages it out as memory fills, and zrt.initialize reads each parameter from there
    into the Engine (which keeps only this rank's shard at stage 3); the mapping goes when the
    parameter is handed over. So a model larger than a rank's memory can be built, with disk
    for its size. (ZRT does not split the parameters across ranks while they are built, as
    DeepSpeed does: each rank's disk holds the whole model until initialize.) The other
    arguments are accepted as DeepSpeed's; enabled=False builds the model in memory."""

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True, remote_device=None,
                 pin_memory=False, config_dict_or_path=None, config=None, enabled=True, dtype=None, mpu=None,
                 zero_param_parallel_group=None, zero_quantized_weights=False, zero_quantized_nontrainable_weights=False,
                 sequence_data_parallel_group=None, param_swapper=None):
        self.enabled = enabled
        self.folder = _folder_of(config_dict_or_path if config_dict_or_path is not None else config)
        self._original = None
        self.moved = 0  # parameters moved to files
        if enabled and module is not None:
            for sub in module.modules():
                for name, p in list(sub._parameters.items()):
                    if p is not None:
                        self._move(p)

    def __enter__(self):
        if not self.enabled:
            return self
        self._original = torch.nn.Module.register_parameter
        init = self

        def register_parameter(module, name, param):
            init._original(module, name, param)
            if param is not None:
                init._move(param)
        torch.nn.Module.register_parameter = register_parameter
        return self

    def __exit__(self, *exc):
        if self._original is not None:
            torch.nn.Module.register_parameter = self._original
            self._original = None
        return False

    def _move(self, p):
        kind = _NUMPY.get(p.dtype)
        if kind is None or p.device.type != "cpu" or p.numel() == 0 or getattr(p, "_zrt_mapped", False):
            return
        fd, path = tempfile.mkstemp(prefix="zrt-init-", suffix=".param", dir=self.folder)
        try:
            os.close(fd)
            mapped = numpy.memmap(path, dtype=kind, mode="w+", shape=tuple(p.shape))
        finally:
            os.unlink(path)  # the mapping keeps the pages; the name goes now
        values = torch.from_numpy(mapped)
        with torch.no_grad(), torch._C.DisableTorchFunction():
            values.copy_(p.data)
            p.data = values
        p._zrt_mapped = True
        self.moved += 1


def _folder_of(config):
    """The config's NVMe path (offload_param's, else offload_optimizer's), else the temporary
    directory."""
    if isinstance(config, (str, os.PathLike)):
        with open(os.fspath(config)) as f:
            config = json.load(f)
    z = (config or {}).get("zero_optimization", {}) if isinstance(config, dict) else {}
    for section in ("offload_param", "offload_optimizer"):
        path = z.get(section, {}).get("nvme_path")
        if isinstance(path, list):
            path = path[0] if path else None
        if path and os.path.isdir(path):
            return path
    return tempfile.gettempdir()


def __getattr__(name):
    raise AttributeError(f"zrt.compat.deepspeed does not offer deepspeed.zero.{name}; it offers Init, "
                         "GatheredParameters and register_external_parameter")
