"""zrt.ops.AsyncIO: tensors written (their files hold the tensors' bytes, read with plain
open()/numpy.fromfile at the expected offsets) and read back bit for bit (aligned and unaligned tensors,
fp32/fp16/bf16/int64, several requests in flight, odd lengths, file offsets), and an injected
EIO on one transfer raised from wait() as zrt.errors.IoError (an OSError) naming the file and
the failed transfer's offset, after which the same handle still works."""
import os
import sys
import tempfile

import numpy
import torch

import zrt


def raw(t):
    """A tensor's bytes as torch holds them (bf16 through an int16 view: numpy has no bf16)."""
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.contiguous().numpy().tobytes()


def file_bytes(path, offset, n):
    """n bytes of the file from offset, read with plain Python (not through the engine)."""
    with open(path, "rb") as f:
        f.seek(offset)
        got = f.read(n)
    assert len(got) == n, f"{path}: {len(got)} bytes at offset {offset}, expected {n}"
    return got

torch.manual_seed(0)
with tempfile.TemporaryDirectory(prefix="zrt-aio-") as d:
    io = zrt.ops.AsyncIO(block_size=16384, queue_depth=4)
    print(io.describe())
    tensors = [torch.randn(100000), torch.randn(5001).half(), torch.randn(333).bfloat16(),
               torch.randint(-2**40, 2**40, (777,)), torch.randn(10)[1:]]  # the last one unaligned
    paths = [os.path.join(d, f"t{i}.bin") for i in range(len(tensors))]
    for t, p in zip(tensors, paths):
        io.async_pwrite(t, p)
    assert io.wait() == len(tensors)
    # The files hold the tensors' bytes, read independently of AsyncIO.
    for t, p in zip(tensors, paths):
        want = raw(t)
        assert os.path.getsize(p) >= len(want), f"{p}: {os.path.getsize(p)} bytes, expected {len(want)}"
        assert file_bytes(p, 0, len(want)) == want, f"{p}: the file's bytes are not the {t.dtype} tensor's"
    back = [torch.empty_like(t) for t in tensors]
    for b, p in zip(back, paths):
        io.async_pread(b, p)
    assert io.wait() == len(tensors)
    for t, b in zip(tensors, back):
        assert torch.equal(t, b), f"{t.dtype} {t.numel()}: read back differs"

    # Offsets into one file, into an aligned tensor (no bounce buffer).
    big = zrt.ops.AsyncIO.new_cpu_locked_tensor(3 * 4096, torch.zeros(1))
    assert big.data_ptr() % 4096 == 0 and big.numel() == 3 * 4096
    big.copy_(torch.arange(3 * 4096, dtype=torch.float32))
    shared = os.path.join(d, "shared.bin")
    for k in range(3):
        io.async_pwrite(big[k * 4096:(k + 1) * 4096], shared, file_offset=k * 16384)
    assert io.wait() == 3
    for k in range(3):
        got = numpy.fromfile(shared, dtype=numpy.float32, count=4096, offset=k * 16384)
        assert numpy.array_equal(got, big[k * 4096:(k + 1) * 4096].numpy()), f"{shared}: block {k} at offset {k * 16384}"
    part = torch.empty(4096)
    io.sync_pread(part, shared, file_offset=16384)
    assert torch.equal(part, big[4096:8192])
    assert os.path.getsize(shared) == 3 * 16384

    # Transfer 2 (the third 16 KiB block of the request) fails with EIO.
    faulty = zrt.ops.AsyncIO(block_size=16384, queue_depth=4, _fault_transfer=2)
    failing = os.path.join(d, "failing.bin")
    faulty.async_pwrite(tensors[0], failing)
    try:
        faulty.wait()
    except zrt.errors.IoError as e:
        msg = str(e)
        print("injected fault:", msg)
        assert isinstance(e, OSError)
        assert failing in msg and "offset 32768" in msg and "Input/output error" in msg, msg
    else:
        sys.exit("the injected EIO was not raised")
    # The handle goes on: the next request (no fault left) succeeds.
    faulty.sync_pwrite(tensors[0], failing)
    assert file_bytes(failing, 0, len(raw(tensors[0]))) == raw(tensors[0]), f"{failing}: rewrite differs"
    again = torch.empty_like(tensors[0])
    faulty.sync_pread(again, failing)
    assert torch.equal(again, tensors[0])

    # A read past the end of a file, and a missing file, are errors naming the file.
    for action, needle in ((lambda: io.sync_pread(torch.empty(100000), paths[2]), paths[2]),
                           (lambda: io.async_pread(torch.empty(4), os.path.join(d, "missing.bin")), "missing.bin")):
        try:
            action()
            io.wait()
        except zrt.errors.Error as e:
            print("refused:", e)
            assert needle in str(e), e
        else:
            sys.exit(f"no error for {needle}")
print("ok")
