"""Parts of ZRT usable alone in plain PyTorch code, as DeepSpeed's ops."""
from .async_io import AsyncIO
from .cpu_adam import CPUAdam

__all__ = ["AsyncIO", "CPUAdam"]
