"""Torch tensors as buffers and back, through numpy (the buffer protocol), so that no torch C++
ABI is involved: any torch the user has works. bf16 has no numpy type: it crosses as int16 bits."""
import torch


def as_buffer(t, what):
    """A numpy view sharing `t`'s memory (CPU, contiguous)."""
    if t.device.type != "cpu":
        raise ValueError(f"{what}: a tensor on {t.device}; this zrt build works on CPU tensors")
    if not t.is_contiguous():
        raise ValueError(f"{what}: the tensor is not contiguous (pass t.contiguous())")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    return t.numpy()


def from_array(a, dtype, shape):
    """A torch tensor sharing the memory of numpy array `a` (from the extension), as `dtype`."""
    t = torch.from_numpy(a)
    if dtype == torch.bfloat16:
        t = t.view(torch.bfloat16)
    return t.view(shape)


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
