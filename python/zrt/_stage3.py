"""The stage-3 parameter: a torch parameter whose values live in the Engine's shards and are in
torch only while gathered. Every torch operation that reads one of its values goes through
__torch_function__ first, so none reads a placeholder: an ungathered parameter is gathered for it
by its engine (Engine._need) or the operation raises, naming the parameter, its module and the
module running. Metadata (shape, dtype, requires_grad, grad, hooks) never needs the values.

The class is swapped into the model's own parameter objects (p.__class__), so the model, its ties
and any reference a script holds keep the same objects."""
import torch
from torch._C import DisableTorchFunction

# Properties whose getter hands out the values (a view or the tensor itself); every other
# property is metadata.
_VALUE_PROPERTIES = frozenset({"data", "T", "mT", "H", "mH", "real", "imag"})
# Methods that read no element.
_METADATA_METHODS = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "is_contiguous",
    "element_size", "is_floating_point", "is_complex", "is_signed", "get_device", "register_hook",
    "requires_grad_", "retain_grad", "__hash__", "__len__", "__dir__", "_is_view", "has_names"})

_reads_values = {}  # func -> bool, classified on first sight


def _classify(func):
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__", "__delete__"):
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        return name == "__get__" and prop in _VALUE_PROPERTIES
    return name not in _METADATA_METHODS


class Slot:
    """Where a stage-3 parameter's values are: `ready` while torch holds them (a view of the
    Engine's gathered copy, or a copy of its own)."""
    __slots__ = ("engine", "index", "name", "module", "ready", "closed")

    def __init__(self, engine, index, name, module):
        self.engine = engine  # weakref.ref to the python Engine
        self.index = index    # the Engine module that owns it
        self.name = name      # its qualified name in the model
        self.module = module  # the name of the module that owns it
        self.ready = False
        self.closed = False


def _unready(args, kwargs, found):
    for a in args:
        if isinstance(a, PartitionedParameter):
            if not a._zrt.ready:
                found.append(a)
        elif isinstance(a, (list, tuple)):
            _unready(a, (), found)
    if kwargs:
        _unready(kwargs.values(), None, found)
    return found


class PartitionedParameter(torch.nn.Parameter):
    """A ZeRO stage-3 parameter (see the module's doc)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        reads = _reads_values.get(func)
        if reads is None:
            reads = _reads_values[func] = _classify(func)
        if reads:
            if getattr(func, "__name__", "") in ("__repr__", "__format__") and _unready(args, kwargs, []):
                return describe(args[0])
            for p in _unready(args, kwargs, []):
                need(p, getattr(func, "__name__", str(func)))
        with DisableTorchFunction():
            return func(*args, **kwargs)


def describe(p):
    s = p._zrt
    with DisableTorchFunction():
        shape, dtype = tuple(p.shape), p.dtype
    state = "its engine is closed" if s.closed else "partitioned, not gathered"
    return f"zrt stage-3 parameter {s.name} (shape {shape}, {dtype}; {state})"


def need(p, op):
    """Makes p's values available to torch operation `op`, or raises saying why it cannot."""
    from . import errors
    s = p._zrt
    engine = s.engine() if s.engine is not None else None
    if s.closed or engine is None:
        raise errors.InvalidArgument(
            f"zrt: parameter {s.name} (module {s.module}) read by {op} after its engine was closed: at ZeRO "
            "stage 3 the model keeps no values after engine.close(); take them first with "
            "engine.fp32_state_dict() or model.state_dict() (collective)")
    engine._need(p, op)


def partition(p, slot):
    """Makes torch parameter p a PartitionedParameter kept by `slot`."""
    if type(p) is not torch.nn.Parameter:
        from . import errors
        raise errors.InvalidArgument(
            f"zrt.initialize: parameter {slot.name} is a {type(p).__module__}.{type(p).__name__}; ZeRO stage 3 "
            "partitions plain torch.nn.Parameter objects only")
    p.__class__ = PartitionedParameter
    p._zrt = slot


def unpartition(p):
    """Back to a plain torch.nn.Parameter (its values stay what they are)."""
    p.__class__ = torch.nn.Parameter
    del p._zrt


def set_data(p, t):
    with DisableTorchFunction():
        p.data = t


def data_of(p):
    with DisableTorchFunction():
        return p.data
