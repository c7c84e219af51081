"""deepspeed.zero over zrt: Init, GatheredParameters, register_external_parameter."""
import contextlib

from ...engine import register_external_parameter
from ...gathered import GatheredParameters

__all__ = ["Init", "GatheredParameters", "register_external_parameter"]


class Init(contextlib.ContextDecorator):
    """As deepspeed.zero.Init, the arguments accepted: a model built inside it trains at ZeRO
    stage 3 as one built outside. ZRT does not partition the parameters while they are built:
    each rank builds the model whole and zrt.initialize partitions it (each rank keeps its shard
    and frees the rest), so building needs the whole model's memory on every rank once."""

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True, remote_device=None,
                 pin_memory=False, config_dict_or_path=None, config=None, enabled=True, dtype=None, mpu=None,
                 zero_param_parallel_group=None, zero_quantized_weights=False, zero_quantized_nontrainable_weights=False,
                 sequence_data_parallel_group=None, param_swapper=None):
        self.module = module

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def __getattr__(name):
    raise AttributeError(f"zrt.compat.deepspeed does not offer deepspeed.zero.{name}; it offers Init, "
                         "GatheredParameters and register_external_parameter")
