"""Torch memory across to the extension with no copy and no torch C++ ABI involved, so any torch
the user has works. The Engine's tensors cross through DLPack both ways (bf16 as bf16); the
DeepSpeed-style operators (ops/) take numpy views (the buffer protocol; bf16 as int16 bits)."""
import torch
import torch.utils.dlpack


def as_capsule(t):
    """A DLPack capsule sharing `t`'s memory. The extension checks what it holds (a tensor on the
    engine's device, cpu or its cuda:<local rank>, contiguous, float32/float16/bfloat16) and
    names the parameter it refused."""
    return torch.utils.dlpack.to_dlpack(t.detach())


def from_capsule(capsule, shape=None):
    """A torch tensor over the Engine's memory that `capsule` (from the extension) describes,
    viewed as `shape` where one is given."""
    t = torch.utils.dlpack.from_dlpack(capsule)
    return t if shape is None else t.view(shape)


def torch_stream(device):
    """The handle of torch's current stream on `device` (an int, cudaStream_t's value), which the
    extension orders its own streams against through events; 0 for the CPU."""
    if device.type != "cuda":
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def as_buffer(t, what):
    """A numpy view sharing `t`'s memory (CPU, contiguous), for the operators."""
    if t.device.type != "cpu":
        raise ValueError(f"{what}: a tensor on {t.device}; the operators (numpy views) take CPU tensors")
    if not t.is_contiguous():
        raise ValueError(f"{what}: the tensor is not contiguous (pass t.contiguous())")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    return t.numpy()


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
