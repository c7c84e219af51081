"""A safetensors file of fp32 tensors, written for the Engine's loadWeights to read (the way
values a script set in Python reach every rank's shards and master weights): the format's
8-byte header length, its JSON header, the raw little-endian data. Written in a private
temporary directory, removed on exit."""
import contextlib
import json
import os
import shutil
import struct
import tempfile

import torch


@contextlib.contextmanager
def written(tensors):
    """Yields the path of a file holding `tensors` ({name: fp32 CPU tensor})."""
    header, offset = {}, 0
    for name, t in tensors.items():
        if t.dtype != torch.float32:
            raise ValueError(f"{name}: {t.dtype}; the file holds fp32")
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    folder = tempfile.mkdtemp(prefix="zrt-weights-")
    try:
        path = os.path.join(folder, "weights.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for t in tensors.values():
                f.write(t.contiguous().numpy().tobytes())
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
