"""deepspeed.comm over ZRT's MPI (`import zrt.compat.deepspeed.comm as dist`): ranks, barrier
and the collectives training scripts use (all_reduce, all_gather, broadcast) on CPU tensors, in
place as torch.distributed's. Each collective runs on a communicator of its own (never matched
with an engine's) and waits at most ZRT_WAIT_TIMEOUT_S, then raises zrt.errors.TimeoutError
naming it. Only the world group exists: a `group` other than None is refused."""
import os

import torch

from ... import _zrt
from ...errors import InvalidArgument


class ReduceOp:
    """As deepspeed.comm.ReduceOp (and torch.distributed's)."""
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


class _Done:
    """The handle of an async_op=True call: the collective has completed already."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


def init_distributed(dist_backend=None, auto_mpi_discovery=True, distributed_port=None, verbose=True,
                     timeout=None, init_method=None, dist_init_required=None, config=None, rank=-1,
                     world_size=-1):
    """Nothing to do: under mpirun every process is a rank and zrt talks MPI itself."""
    return None


def is_initialized():
    return True


def is_available():
    return True


def get_rank(group=None):
    _world_only(group, "get_rank")
    return _zrt.comm_rank()


def get_world_size(group=None):
    _world_only(group, "get_world_size")
    return _zrt.comm_size()


def get_local_rank():
    """This rank's index on its node, as the launcher says (Open MPI's, else LOCAL_RANK)."""
    return int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))


def barrier(group=None, async_op=False, device_ids=None):
    _world_only(group, "barrier")
    _zrt.comm_barrier()
    return _Done() if async_op else None


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    _world_only(group, "all_reduce")
    op = _op_name(op)
    if op == "avg" and not tensor.is_floating_point():
        raise InvalidArgument(f"all_reduce: ReduceOp.AVG of a {tensor.dtype} tensor (AVG takes floating point)")
    with _in_place(tensor, "all_reduce") as a:
        _zrt.comm_all_reduce(a, "sum" if op == "avg" else op)
    if op == "avg":
        with torch.no_grad():
            tensor.div_(get_world_size())
    return _Done() if async_op else None


def broadcast(tensor, src, group=None, async_op=False):
    _world_only(group, "broadcast")
    with _in_place(tensor, "broadcast") as a:
        _zrt.comm_broadcast(a, int(src))
    return _Done() if async_op else None


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Every rank's `tensor`, in rank order, into `tensor_list` (one tensor of its shape a rank)."""
    _world_only(group, "all_gather")
    world = get_world_size()
    if len(tensor_list) != world:
        raise InvalidArgument(f"all_gather: tensor_list has {len(tensor_list)} tensors for {world} ranks")
    for t in tensor_list:
        if t.shape != tensor.shape or t.dtype != tensor.dtype:
            raise InvalidArgument(f"all_gather: an output tensor is {tuple(t.shape)} {t.dtype}; the input is "
                                  f"{tuple(tensor.shape)} {tensor.dtype}")
    send = _wire(tensor.detach(), "all_gather").contiguous()
    recv = torch.empty((world,) + tuple(send.shape), dtype=send.dtype)
    _zrt.comm_all_gather(send.numpy(), recv.numpy())
    with torch.no_grad():
        for t, part in zip(tensor_list, recv):
            t.copy_(part)
    return _Done() if async_op else None


def _world_only(group, what):
    if group is not None:
        raise InvalidArgument(f"zrt.compat.deepspeed.comm.{what}: process groups other than the world are not offered "
                              "(ZRT's ranks are one data-parallel group); pass group=None")


def _op_name(op):
    name = getattr(op, "name", op)  # torch.distributed.ReduceOp members have .name in torch 2
    name = str(name).lower().rsplit(".", 1)[-1]
    if name == "prod":
        name = "product"
    if name not in ("sum", "avg", "product", "min", "max", "band", "bor", "bxor"):
        raise InvalidArgument(f"all_reduce: reduce op {op!r} is not offered (SUM, AVG, PRODUCT, MIN, MAX, BAND, "
                              "BOR, BXOR)")
    return name


def _wire(t, what):
    """t as MPI carries it: fp16 and bf16 (no MPI type) widened to fp32."""
    if t.device.type != "cpu":
        raise InvalidArgument(f"{what}: a tensor on {t.device}; zrt.compat.deepspeed.comm takes CPU tensors")
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.float()
    return t


class _in_place:
    """A contiguous tensor MPI can write (the tensor itself where it is one), copied back after."""

    def __init__(self, tensor, what):
        self.tensor = tensor
        self.work = _wire(tensor.detach(), what).contiguous()

    def __enter__(self):
        return self.work.numpy()

    def __exit__(self, *exc):
        if exc[0] is None and self.work.data_ptr() != self.tensor.data_ptr():
            with torch.no_grad():
                self.tensor.copy_(self.work)
        return False
