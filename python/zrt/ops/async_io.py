"""zrt.ops.AsyncIO: asynchronous reads and writes of tensors to files, O_DIRECT where the file
system takes it, on ZRT's io_uring offload engine (offload/offload_engine.h); DeepSpeed's aio
handle's calls. A failed transfer raises zrt.errors.IoError naming the file, offset, length and
the errno's text, from wait() (or from the sync_ calls)."""
import torch

from .. import _zrt
from .._tensors import as_buffer


class AsyncIO:
    def __init__(self, block_size=1 << 20, queue_depth=8, single_submit=False, overlap_events=True,
                 intra_op_parallelism=1, engine="auto", direct="auto", _fault_transfer=-1):
        # _fault_transfer (tests): transfer n (from 0) of the first ring fails with EIO.
        self._io = _zrt.AsyncIO(block_size=block_size, queue_depth=queue_depth, single_submit=single_submit,
                                overlap_events=overlap_events, intra_op_parallelism=intra_op_parallelism,
                                engine=engine, direct=direct, fault_transfer=_fault_transfer)
        self.block_size = block_size
        self.queue_depth = queue_depth

    def async_pwrite(self, tensor, filename, file_offset=0):
        """Starts writing `tensor`'s bytes to `filename` at `file_offset` (the file is created
        if missing). The tensor must not change until wait() returns."""
        self._io.pwrite(as_buffer(tensor, f"write of {filename}"), str(filename), file_offset)

    def async_pread(self, tensor, filename, file_offset=0):
        """Starts reading `tensor.nbytes` bytes of `filename` at `file_offset` into `tensor`."""
        self._io.pread(as_buffer(tensor, f"read of {filename}"), str(filename), file_offset)

    def wait(self):
        """Waits for every request started; returns how many. Raises the first failure, after
        every request has finished."""
        return self._io.wait()

    def sync_pwrite(self, tensor, filename, file_offset=0):
        self.async_pwrite(tensor, filename, file_offset)
        return self.wait()

    def sync_pread(self, tensor, filename, file_offset=0):
        self.async_pread(tensor, filename, file_offset)
        return self.wait()

    def pending(self):
        return self._io.pending()

    def describe(self):
        """The engine in use after fallbacks, e.g. "io_uring: 1 rings x queue depth 8, ..."."""
        return self._io.describe()

    @staticmethod
    def new_cpu_locked_tensor(num_elem, example_tensor):
        """A zeroed 1-D tensor of `num_elem` elements of example_tensor's dtype, 4096-byte
        aligned, so O_DIRECT needs no bounce buffer for it."""
        dtype = example_tensor.dtype
        itemsize = torch.tensor([], dtype=dtype).element_size()
        raw = torch.from_numpy(_zrt.new_aligned(num_elem * itemsize))
        return raw.view(dtype)[:num_elem]
