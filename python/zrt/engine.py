"""zrt.initialize: a torch.nn.Module trained by ZRT's C++ Engine (runtime/engine.h) under the
same DeepSpeed JSON config, as deepspeed.initialize.

How a module maps onto the Engine: every torch submodule that owns parameters becomes one Engine
module (its qualified name), its parameters registered in order with the model's initial values.
The Engine then owns them: in the training dtype, sharded at stage 3, offloaded where the config
says. Forward pre-hooks hand each module its parameters (stages 0-2: views of the Engine's
memory, no copy; stage 3: views of the module's copy gathered by the C++ coordinator, which
prefetches the next ones in the recorded order, released after the module's forward; autograd
saves a parameter or a view of one as the recipe to make it again, so its saved tensors never
point into memory the Engine reuses). At stage 3 a module's outputs carry an autograd node that
gathers it again before its backward, released when its last gradient has been reported.
Gradient hooks collect a module's gradients and hand them to the Engine's buckets
(report_gradients = gradients + backwardDone) as soon as the module's last one arrives, so
reduction overlaps the rest of backward.
Memory crosses through DLPack, with no copy: no torch C++ ABI is linked."""
import atexit
import itertools
import json
import os
import platform
import sys
import weakref
from collections.abc import Mapping, MutableMapping

import torch

from . import _stage3, _zrt
from ._tensors import DTYPES, as_capsule, from_capsule, torch_stream


_heap_bounded = []


def _bound_heap_growth():
    """With ZRT_MALLOC_MMAP_THRESHOLD=<bytes> in the environment, has glibc's malloc serve
    allocations of that size and more from mmap, returned on free, instead of its heap (once per
    process; a MALLOC_MMAP_THRESHOLD_ in the environment is glibc's own and wins). Off by default:
    every gradient torch makes is then a fresh mapping whose pages fault in, each step (at 1 MiB,
    0.15 s more of system time a rank and step on the 118 M-parameter model of
    bench_zrt_vs_ddp.py), and since the stage-3 modules compute on views of the Engine's gathered
    copies and set-up hands the model's freed memory back (_return_freed_heap), the heap it would
    bound no longer holds copies of the model: there the peak RSS is the same either way
    (docs/results.md)."""
    if _heap_bounded or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    _heap_bounded.append(True)
    raw = os.environ.get("ZRT_MALLOC_MMAP_THRESHOLD", "0")
    try:
        threshold = int(raw)
    except ValueError:
        raise ValueError(f"zrt.initialize: environment variable ZRT_MALLOC_MMAP_THRESHOLD={raw!r} is not "
                         "a number of bytes") from None
    if threshold <= 0 or platform.libc_ver()[0] != "glibc":
        return
    import ctypes
    M_MMAP_THRESHOLD = -3  # malloc.h
    ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, threshold)


def _return_freed_heap():
    """Hands the heap's free pages back to the kernel (glibc's malloc_trim). The parameters'
    own memory, which set-up has just freed (stage 3: placeholders; stages 0-2: views of the
    Engine's memory), is heap memory when malloc's threshold had risen above the tensors' sizes
    before the model was built (glibc raises it to the largest freed block, up to 32 MiB): without
    this glibc kept it resident for the rest of the run (about 400 MiB a rank, most of the fp32
    model, on the 118 M-parameter model of bench_zrt_vs_ddp.py, docs/results.md)."""
    if platform.libc_ver()[0] != "glibc":
        return
    import ctypes
    ctypes.CDLL(None).malloc_trim(0)


def _config_text(config):
    if isinstance(config, dict):
        return json.dumps(config), "config"
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        with open(path) as f:
            return f.read(), path
    raise TypeError(f"zrt.initialize: config must be a dict or a path to a JSON file, not {type(config).__name__}")


class _ParamView:
    """Marks a saved tensor packed as (base parameter, size, stride, offset)."""


class _GatherForBackward(torch.autograd.Function):
    """Identity on a stage-3 module's outputs; its backward gathers the Engine modules the
    module read in forward (its own, the owners of tied parameters, external ones) first."""

    @staticmethod
    def forward(ctx, engine, needs, *outputs):
        ctx.engine, ctx.needs = engine, needs
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.engine._hold(ctx.needs)
        return (None, None) + grads


def _grad_tensors(obj, found, depth=0):
    """The tensors that require grad in a module's output, however nested (tensors, tuples,
    lists, dicts, ModelOutputs; anything else is left alone)."""
    if depth > 32:
        return found
    if isinstance(obj, torch.Tensor):
        if obj.requires_grad:
            found.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _grad_tensors(o, found, depth + 1)
    elif isinstance(obj, Mapping):
        for o in obj.values():
            _grad_tensors(o, found, depth + 1)
    return found


def _replaced(obj, new, depth=0):
    """`obj` with each tensor t whose id is in `new` replaced by new[id(t)], the containers'
    types kept (a namedtuple stays one; a ModelOutput, a dict subclass whose constructor takes
    no items, is updated in place)."""
    if depth > 32:
        return obj
    if isinstance(obj, torch.Tensor):
        return new.get(id(obj), obj)
    if isinstance(obj, tuple):
        items = [_replaced(o, new, depth + 1) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        return type(obj)(_replaced(o, new, depth + 1) for o in obj)
    if isinstance(obj, MutableMapping):
        for k in list(obj.keys()):
            v = obj[k]
            r = _replaced(v, new, depth + 1)
            if r is not v:
                obj[k] = r
        return obj
    return obj


class _Frame:
    """A module in its forward: what it gathered (released by its forward hook)."""
    __slots__ = ("module", "name", "acquired")

    def __init__(self, module, name, acquired):
        self.module, self.name, self.acquired = module, name, acquired


def _named_parameter_entries(model):
    """(module name, module, parameter name, parameter) for every place a parameter is
    registered, tied places included (a module registered twice, T5's shared embedding as its
    encoder's and decoder's embed_tokens, is listed under each name), as state_dict lists them."""
    for name, mod in model.named_modules(remove_duplicate=False):
        for pname, p in mod._parameters.items():
            if p is not None:
                yield name, mod, pname, p


def _qualified(module, pname):
    return f"{module}.{pname}" if module else pname


class Engine:
    """What zrt.initialize returns. engine(inputs) runs the model; engine.backward(loss) and
    engine.step() train it (step() acts at the gradient accumulation boundary, as DeepSpeed's)."""

    def __init__(self, model, config, param_groups=None):
        """param_groups: None (one group, the config's optimizer settings), or (groups, group_of):
        groups a list of (lr, weight_decay), negative for the config's; group_of maps id(parameter)
        to its group's index (zrt.compat.deepspeed builds it from torch's param_groups)."""
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"zrt.initialize: model must be a torch.nn.Module, not {type(model).__name__}")
        text, source = _config_text(config)
        self.module = model
        self._engine = None
        self._hooks = []
        self._mods, self._untouched, self._entries = self._engine_modules(model)
        self._device, device_of = self._model_device()
        _bound_heap_growth()
        # Each value is the parameter's own memory for an fp32 CPU model (no copy): the Engine
        # broadcasts rank 0's values into it and reads its initial state from there. A CUDA
        # model's values are copied to the host for the set-up (MPI broadcasts them there); the
        # parameters then view the Engine's GPU memory.
        groups, group_of = param_groups if param_groups is not None else ([], {})
        specs = []
        for name, _, own in self._mods:
            specs.append((name, [_zrt.ParamSpec(pname, list(p.shape), as_capsule(p.detach().float().contiguous().cpu()),
                                                p.requires_grad, group_of.get(id(p), 0)) for pname, p in own]))
        self._engine = _zrt.Engine(text, source, specs, list(groups), device=str(self._device), device_of=device_of)
        del specs  # DLPack capsules of the parameters' own memory, freed below
        _live.add(self)
        self._order = next(_created)
        self.stage = self._engine.stage
        self.rank = self._engine.rank
        self.world_size = self._engine.world_size
        self.dtype = DTYPES[self._engine.precision]
        self._in_micro = False
        self._failed = None  # why an earlier backward left the engine unusable
        self._micro = 0
        self._steps = 0  # optimizer steps taken through step(), for the call labels
        self._pending = {}  # module index -> {param index: grad}
        self._reported = set()
        self._grads_to_drop = []
        self._views = [all(p.requires_grad for _, p in own) for _, _, own in self._mods]
        self._trainable = [[p.requires_grad for _, p in own] for _, _, own in self._mods]
        self._expected = [sum(self._trainable[i]) for i in range(len(self._mods))]
        self._param_ids = {id(p) for _, _, own in self._mods for _, p in own}
        me = weakref.ref(self)
        for _, _, own in self._mods:
            for _, p in own:
                p._zrt_owner = me
        for i, (_, mod, own) in enumerate(self._mods):
            for k, (_, p) in enumerate(own):
                if p.requires_grad:
                    self._hooks.append(p.register_hook(self._grad_hook(i, k)))
        if self.stage == 3:
            self._set_up_stage3(model)
        else:
            for i, (_, mod, _) in enumerate(self._mods):
                self._hooks.append(mod.register_forward_pre_hook(self._bind_hook(i)))
                self._bind_views(i)
        _return_freed_heap()

    def _engine_modules(self, model):
        """The Engine's modules: every torch module that owns a floating-point parameter not
        registered before (a tied parameter belongs to the first module that has it, in
        named_modules order), with those parameters. Refuses, before anything is built, a model
        ZRT cannot train as it is."""
        mods, untouched, seen, entries = [], [], {}, []
        for name, mod, pname, p in _named_parameter_entries(model):
            qual = _qualified(name, pname)
            entries.append((qual, p))
            if id(p) in seen:
                continue
            seen[id(p)] = qual
            owner = getattr(p, "_zrt_owner", None)
            engine = owner() if owner is not None else None
            if engine is not None and engine._engine is not None and id(p) in engine._param_ids:
                raise _zrt_error("InvalidArgument", f"zrt.initialize: parameter {qual} belongs to a live zrt engine "
                                 "already (a second zrt.initialize of the same model): close() that engine first, or "
                                 "build a new model")
            if isinstance(p, _stage3.PartitionedParameter):
                raise _zrt_error("InvalidArgument", f"zrt.initialize: parameter {qual} holds no values: a ZeRO stage-3 "
                                 "engine that partitioned it was closed, and the model keeps no values after that at "
                                 "stage 3; load the values into a new model (engine.fp32_state_dict() before close())")
            if not p.is_floating_point():
                # Integer parameters cannot have gradients: they stay the model's own, untouched
                # and untrained, as buffers would.
                untouched.append(qual)
                continue
            if p.dtype == torch.float64:
                raise _zrt_error("InvalidArgument", f"zrt.initialize: parameter {qual} is float64; ZRT trains in "
                                 "fp32, or bf16/fp16 where the config enables it: convert the model first "
                                 "(model.float())")
            if p.device.type not in ("cpu", "cuda"):
                raise _zrt_error("InvalidArgument", f"zrt.initialize: parameter {qual} is on {p.device}; zrt trains "
                                 "models on cpu or cuda")
            if mods and mods[-1][1] is mod:
                mods[-1][2].append((pname, p))
            else:
                mods.append((name or "<root>", mod, [(pname, p)]))
        return mods, untouched, entries

    def _model_device(self):
        """The one device every trained parameter is on (the Engine's place: cpu, or the GPU the
        binding checks is this rank's), and the first parameter on it, for the messages."""
        device, first = None, ""
        for name, _, own in self._mods:
            for pname, p in own:
                qual = _qualified(name if name != "<root>" else "", pname)
                if device is None:
                    device, first = p.device, qual
                elif p.device != device:
                    raise _zrt_error("InvalidArgument", f"zrt.initialize: parameter {qual} is on {p.device} and "
                                     f"parameter {first} on {device}: move the model to one device first")
        if device is not None and device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return (device if device is not None else torch.device("cpu")), first

    def _stream(self):
        """torch's current stream on the model's GPU, as the int the binding orders its own streams
        against (0 for a CPU model)."""
        return torch_stream(self._device)

    # ---- stages 0-2: the parameters view the Engine's memory ----
    def _bind_hook(self, i):
        def hook(module, inputs):
            self._check_requires_grad(i)
            self._bind_views(i)
        return hook

    def _bind_views(self, i):
        _, _, own = self._mods[i]
        for (_, p), a in zip(own, self._engine.parameters(i, self._stream())):
            p.data = from_capsule(a, p.shape if p.numel() else None)

    def _check_requires_grad(self, i):
        name, _, own = self._mods[i]
        for (pname, p), was in zip(own, self._trainable[i]):
            if p.requires_grad != was:
                raise _zrt_error("InvalidArgument", f"zrt: parameter {_qualified(name if name != '<root>' else '', pname)}"
                                 f" has requires_grad={p.requires_grad} now and had {was} at zrt.initialize: the "
                                 "engine's trainable parameters are fixed when it is built; set requires_grad before "
                                 "zrt.initialize (or build a new engine)")

    # ---- stage 3: parameters gathered for each use ----
    def _set_up_stage3(self, model):
        """Every parameter becomes a PartitionedParameter (its values read only while gathered);
        every module whose subtree holds parameters gets hooks that gather what it reads (its own
        parameters, tied ones owned elsewhere, those registered or found external) and release
        them after its forward."""
        me = weakref.ref(self)
        self._owner_of = {}  # id(parameter) -> Engine module index
        for i, (name, _, own) in enumerate(self._mods):
            for pname, p in own:
                self._owner_of[id(p)] = i
                _stage3.partition(p, _stage3.Slot(me, i, _qualified(name if name != "<root>" else "", pname), name))
        self._refs = [0] * len(self._mods)  # module forwards holding each Engine module
        self._bwd = set()  # Engine modules held for the backward (until their gradients are reported)
        self._gathered = {}  # Engine module -> "view" (of the Engine's gathered copy) or "copy"
        self._frames = []  # modules in their forward, innermost last
        self._copying = 0  # depth of state_dict calls: gathers are torch copies until it returns
        self._copies = []
        self._user_held = {}  # Engine module -> open zrt.GatheredParameters holding it
        self._placeholder = torch.full((1,), float("nan"), dtype=self.dtype, device=self._device)
        self._needs = {}  # id(torch module) -> Engine modules its forward reads
        for _, mod, _, p in _named_parameter_entries(model):
            j = self._owner_of.get(id(p))
            if j is None:
                continue
            needs = self._needs.setdefault(id(mod), [])
            if j not in needs:
                needs.append(j)
        for mod in model.modules():
            for p in mod.__dict__.get("_zrt_external_parameters", ()):
                self._register_external(mod, p)
        self._hooked = set()
        for name, mod in model.named_modules():
            if any(True for _ in mod.parameters()) or id(mod) in self._needs:
                self._hook_module(name or "<root>", mod)
        self._wrap_state_dicts(model)
        for i in range(len(self._mods)):
            self._free(i)

    def _hook_module(self, name, mod):
        if id(mod) in self._hooked:
            return
        self._hooked.add(id(mod))
        self._hooks.append(mod.register_forward_pre_hook(self._pre_forward_hook(name, mod)))
        self._hooks.append(mod.register_forward_hook(self._post_forward_hook(mod)))

    def _register_external(self, mod, p):
        j = self._owner_of.get(id(p))
        if j is None:
            raise _zrt_error("InvalidArgument", "zrt.register_external_parameter: the parameter is not one of this "
                             "engine's model")
        needs = self._needs.setdefault(id(mod), [])
        if j not in needs:
            needs.append(j)
        if hasattr(self, "_hooked"):
            name = next((n for n, m in self.module.named_modules() if m is mod), type(mod).__name__)
            self._hook_module(name or "<root>", mod)

    def _pre_forward_hook(self, name, mod):
        i = next((k for k, (_, m, _) in enumerate(self._mods) if m is mod), None)

        def hook(module, inputs):
            if self._engine is None:
                raise _closed("forward")
            if i is not None:
                self._check_requires_grad(i)
            needs = self._needs.get(id(mod), ())
            frame = _Frame(mod, name, list(needs))
            self._frames.append(frame)
            for j in needs:
                self._acquire(j)
        return hook

    def _post_forward_hook(self, mod):
        def hook(module, inputs, output):
            if not self._frames or self._frames[-1].module is not mod:
                return None  # a forward cut short reset the frames
            frame = self._frames.pop()
            for j in frame.acquired:
                self._unacquire(j)
            if not (frame.acquired and torch.is_grad_enabled() and self._in_micro):
                return None
            tensors = _grad_tensors(output, [])
            if not tensors:
                return None
            out = _GatherForBackward.apply(self, tuple(dict.fromkeys(frame.acquired)), *tensors)
            if len(tensors) == 1:
                out = (out,)
            if isinstance(output, torch.Tensor):
                return out[0]
            return _replaced(output, {id(t): o for t, o in zip(tensors, out)})
        return hook

    def _need(self, p, op):
        """Stage 3: parameter p, not gathered, is read by torch operation `op`. Inside a
        module's forward it is gathered for that module (and from then on before each of its
        forwards, as DeepSpeed's register_external_parameter would); between forward and
        backward (a loss term) it is held until its gradient is reported; inside state_dict() it
        is copied; anywhere else nothing says when every rank would gather it, so it raises."""
        j = p._zrt.index
        if self._frames:
            frame = self._frames[-1]
            self._acquire(j)
            frame.acquired.append(j)
            needs = self._needs.setdefault(id(frame.module), [])
            if j not in needs:
                needs.append(j)
        elif self._copying:
            self._gather(j, copy=True)
            self._copies.append(j)
        elif self._in_micro:
            self._hold((j,))
        else:
            raise _zrt_error(
                "InvalidArgument",
                f"zrt: parameter {p._zrt.name} (module {p._zrt.module}) is partitioned at ZeRO stage 3 and "
                f"{op} read it outside the model's forward (no module of it is running): its values are not on "
                "this rank. Read them with engine.fp32_state_dict() or model.state_dict() (collective: every "
                "rank calls it), or use it inside a module's forward")

    def _acquire(self, j):
        if self._refs[j] == 0 and j not in self._bwd and j not in self._gathered:
            self._gather(j)
        self._refs[j] += 1

    def _unacquire(self, j):
        self._refs[j] -= 1
        if self._idle(j):
            self._release(j)

    def _idle(self, j):
        """No forward, backward, state_dict() or GatheredParameters holds Engine module j."""
        return self._refs[j] == 0 and j not in self._bwd and j not in self._user_held

    def _hold(self, needs):
        """Keeps Engine modules gathered for the backward, until their gradients are reported."""
        for j in needs:
            if j in self._bwd:
                continue
            if j not in self._gathered:
                self._gather(j)
            self._bwd.add(j)

    def _gather(self, i, copy=False):
        """Module i's parameters, gathered by the coordinator, until _release(i). A module whose
        parameters all train computes on views of the Engine's gathered copy (no copy into torch
        memory); every tensor autograd saved of it is kept as the recipe to make it again
        (_pack), read while the module is gathered again for its backward. A module with a
        frozen parameter gets a torch copy (no gradient hook would say when its backward is
        over), and so does a gather for state_dict()."""
        if i in self._gathered:
            return
        _, _, own = self._mods[i]
        arrays = self._engine.parameters(i, self._stream())
        if copy or not self._views[i]:
            try:
                for (_, p), a, shape in zip(own, arrays, self._shapes(i)):
                    _stage3.set_data(p, from_capsule(a, shape).clone())
            finally:
                self._engine.release(i, self._stream())
            self._gathered[i] = "copy"
        else:
            for (_, p), a, shape in zip(own, arrays, self._shapes(i)):
                _stage3.set_data(p, from_capsule(a, shape))
            self._gathered[i] = "view"
        for _, p in own:
            p._zrt.ready = True

    def _release(self, i):
        """Module i's parameters become placeholders again, and the Engine's gathered copy they
        viewed is released."""
        self._free(i)
        if self._gathered.pop(i, None) == "view":
            self._engine.release(i, self._stream())

    def _release_all(self):
        for i in list(self._gathered):
            if i not in self._user_held:
                self._release(i)
        self._refs = [0] * len(self._mods)
        self._bwd.clear()
        self._frames.clear()

    # ---- zrt.GatheredParameters ----
    def _owners(self, params):
        """The Engine modules owning `params` (this engine's), in registration order."""
        index = {}
        for i, (_, _, own) in enumerate(self._mods):
            for _, p in own:
                index[id(p)] = i
        missing = [p for p in params if id(p) not in index]
        if missing:
            raise _zrt_error("InvalidArgument", f"GatheredParameters: {len(missing)} of the parameters given are not "
                             "this engine's (or are integer parameters, which it leaves alone)")
        return sorted({index[id(p)] for p in params})

    def _hold_for_user(self, owners):
        """Stage 3: the owners gathered as torch copies until _drop_for_user (collective)."""
        if self.stage != 3:
            return
        for j in owners:
            if j not in self._gathered:
                self._gather(j, copy=True)
            self._user_held[j] = self._user_held.get(j, 0) + 1

    def _drop_for_user(self, owners):
        if self.stage != 3:
            return
        for j in owners:
            self._user_held[j] -= 1
            if not self._user_held[j]:
                del self._user_held[j]
                if self._idle(j) and j in self._gathered:
                    self._release(j)

    def _write_parameters(self, params, source_rank):
        """Rank source_rank's values of `params` (what a GatheredParameters block wrote there) into
        every rank's Engine: parameters, shards and fp32 master weights. Collective; between
        steps."""
        from . import _weights_file
        names, values = [], []
        index = {}
        for name, _, own in self._mods:
            for pname, p in own:
                index[id(p)] = f"{name}.{pname}"
        for p in params:
            with torch._C.DisableTorchFunction():
                v = p.data.detach().float().contiguous().clone().cpu()
            _zrt.comm_broadcast(v.numpy(), source_rank)
            names.append(index[id(p)])
            values.append(v)
        keep = [f"{name}/{pname}" for name, _, own in self._mods for pname, _ in own
                if f"{name}.{pname}" not in set(names)]
        with _weights_file.written(dict(zip(names, values))) as path:
            self._engine.load_weights(path, keep)
        if self.stage != 3:
            for i in range(len(self._mods)):
                self._bind_views(i)

    def _shapes(self, i):
        if not hasattr(self, "_shape_cache"):
            self._shape_cache = {}
        if i not in self._shape_cache:
            self._shape_cache[i] = [tuple(p.shape) for _, p in self._mods[i][2]]
        return self._shape_cache[i]

    def _free(self, i):
        # A stride-0 view of one NaN in the parameter's shape: no memory, yet autograd's
        # AccumulateGrad (which runs after the gradient hook that frees the module) still sees the
        # shape it recorded in forward; any read __torch_function__ did not catch shows as NaN.
        for (_, p), shape in zip(self._mods[i][2], self._shapes(i)):
            _stage3.set_data(p, self._placeholder.expand(shape))
            p._zrt.ready = False

    def _wrap_state_dicts(self, model):
        """model.state_dict() (and a submodule's) at stage 3: the true values, gathered as torch
        copies module by module while it runs. Collective: every rank calls it."""
        self._wrapped = []
        for mod in model.modules():
            original = mod.state_dict

            def state_dict(*args, _original=original, **kwargs):
                if self._engine is None:
                    return _original(*args, **kwargs)
                self._copying += 1
                try:
                    return _original(*args, **kwargs)
                finally:
                    self._copying -= 1
                    if not self._copying:
                        for j in self._copies:
                            if self._gathered.get(j) == "copy" and self._idle(j):
                                self._release(j)
                        self._copies = []
            object.__setattr__(mod, "state_dict", state_dict)
            self._wrapped.append(mod)

    # ---- gradients into the Engine ----
    def _grad_hook(self, i, k):
        def hook(grad):
            if not self._in_micro:
                return None
            got = self._pending.setdefault(i, {})
            got[k] = grad
            if len(got) == self._expected[i]:
                self._report(i)
            return None
        return hook

    def _report(self, i):
        got = self._pending.pop(i, {})
        own = self._mods[i][2]
        grads = []
        for k, (_, p) in enumerate(own):
            g = got.get(k)
            if g is not None:
                g = g.to(self.dtype).contiguous()
            grads.append(None if g is None else as_capsule(g))
        self._engine.report_gradients(i, grads, self._stream())
        self._reported.add(i)
        # The Engine has the gradients: torch's own copies (p.grad, accumulated after the hook
        # of the module reported before this one ran) go now rather than at the end of backward.
        for p in self._grads_to_drop:
            p.grad = None
        self._grads_to_drop = [p for _, p in own]
        if self.stage == 3 and i in self._bwd:
            self._bwd.discard(i)
            if self._idle(i):
                self._release(i)

    # ---- the training step, as DeepSpeed's engine ----
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def __getattr__(self, name):
        # As DeepSpeed's engine: the model's attributes through the engine (engine.config,
        # engine.wte), the engine's own first.
        module = self.__dict__.get("module")
        if module is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(module, name)

    def _call(self, what, closing=False):
        # What this rank is doing, for a peer whose collective waits for it: the watchdog names
        # each rank's call when the ranks diverge (comm/caller_label.h).
        return _zrt.CallLabel(f"engine.{what} (step {self._steps + 1})", closing)

    def _check_usable(self, what):
        if self._engine is None:
            raise _closed(what)
        if self._failed is not None:
            raise _zrt_error("InvalidArgument", f"engine.{what}: this engine is unusable: an earlier "
                             f"engine.backward raised ({self._failed}) and left its micro-step open "
                             "in the C++ Engine; close() it and make a new one")

    def forward(self, *args, **kwargs):
        self._check_usable("forward")
        with self._call("forward()"):
            return self._forward(*args, **kwargs)

    def _forward(self, *args, **kwargs):
        if self.stage == 3 and self._frames:
            self._release_all()  # a direct model call cut short before
        if self.module.training and torch.is_grad_enabled() and not self._in_micro:
            self._engine.begin_micro_step()
            self._in_micro = True
            self._reported = set()
            self._pending = {}
        if self.stage == 3 and self._in_micro and torch.is_grad_enabled():
            # Autograd would keep views of the parameters it saves (a Linear saves weight.t()),
            # and with them each module's gathered copy until its backward: the whole model,
            # which stage 3 exists to avoid. A parameter or a view of one is saved as the recipe
            # to make it again from the copy gathered for the module's backward.
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                return self._run(*args, **kwargs)
        return self._run(*args, **kwargs)

    def _run(self, *args, **kwargs):
        try:
            return self.module(*args, **kwargs)
        except BaseException:
            if self.stage == 3:  # a forward cut short left its modules gathered
                self._release_all()
            raise

    def _pack(self, t):
        base = t if id(t) in self._param_ids else t._base
        if base is not None and id(base) in self._param_ids:
            with torch._C.DisableTorchFunction():
                return (_ParamView, base, t.size(), t.stride(), t.storage_offset())
        return t

    def _unpack(self, saved):
        if isinstance(saved, tuple) and saved and saved[0] is _ParamView:
            _, base, size, stride, offset = saved
            if not base._zrt.ready:
                _stage3.need(base, "the backward")
            return _stage3.data_of(base).as_strided(size, stride, offset)
        return saved

    def backward(self, loss):
        self._check_usable("backward")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.grad_fn is None:
            what = (f"a {type(loss).__name__}" if not isinstance(loss, torch.Tensor) else
                    f"a tensor of {loss.numel()} elements" if loss.numel() != 1 else "a tensor with no graph")
            raise _zrt_error("InvalidArgument", f"engine.backward(loss): loss is {what}; pass the one-element loss "
                             "tensor the forward computed (not loss.item(), not a detached copy)")
        if not self._in_micro:
            raise _zrt_error("InvalidArgument", "engine.backward: no forward in training mode came first "
                             "(call engine(inputs) with model.train() and gradients enabled)")
        with self._call("backward()"):
            return self._backward(loss)

    def _backward(self, loss):
        try:
            (loss.float() * self._engine.gradient_seed()).backward()
            # Modules whose parameters got no gradient this micro-step report zeros.
            for i in range(len(self._mods)):
                if i not in self._reported and self._expected[i] > 0:
                    self._report(i)
        except BaseException as e:
            # The C++ micro-step cannot be finished (some gradients were reported, others not):
            # every later forward/backward/step raises this instead of a misleading protocol
            # error ("beginMicroStep twice").
            self._failed = f"{type(e).__name__}: {e}"
            raise
        finally:
            for _, _, own in self._mods:
                for _, p in own:
                    p.grad = None
            if self.stage == 3:
                self._release_all()
            self._in_micro = False
        self._engine.end_micro_step()
        self._micro += 1
        return loss

    def is_gradient_accumulation_boundary(self):
        return self._micro % self._engine.accumulation_steps == 0

    def step(self):
        """Steps the optimizer when the micro-steps since the last step make a whole batch
        (gradient_accumulation_steps); returns the step's report then, else None."""
        self._check_usable("step")
        if self._micro == 0 or not self.is_gradient_accumulation_boundary():
            return None
        self._micro = 0
        with self._call("step()"):
            self.last_report = self._engine.step(self._stream())
        self._steps += 1
        return self.last_report

    @property
    def gradient_accumulation_steps(self):
        return self._engine.accumulation_steps

    def loss_scale(self):
        return self._engine.loss_scale()

    def memory_summary(self):
        return self._engine.memory_summary()

    def save_checkpoint(self, save_dir, tag=None):
        """The C++ Engine's checkpoint (docs/checkpoint.md: zrt-ckpt reads it, the C++ Engine
        loads it). Collective."""
        self._check_usable("save_checkpoint")
        if tag is None:
            tag = f"global_step{int(self.last_report['step']) if hasattr(self, 'last_report') else 0}"
        metadata = {"tied": self._ties()} if self._ties() else {}
        with self._call("save_checkpoint()"):
            self._engine.save(os.fspath(save_dir), str(tag), json.dumps(metadata))
        return True

    def _ties(self):
        """A tied parameter's other names -> the Engine's name for it ("<module>.<param>"): the
        checkpoint stores it once and zrt-ckpt export writes it under every name."""
        owner = {}
        for name, _, own in self._mods:
            for pname, p in own:
                owner[id(p)] = f"{name}.{pname}"
        ties = {}
        for qual, p in self._entries:
            if id(p) in owner and owner[id(p)] != qual and not (owner[id(p)] == f"<root>.{qual}"):
                ties[qual] = owner[id(p)]
        return ties

    def load_checkpoint(self, load_dir, tag=None):
        """Resumes from <load_dir>/<tag> (None: the tag <load_dir>/latest names). Collective.
        Returns (path, {}) as DeepSpeed's (no client state)."""
        self._check_usable("load_checkpoint")
        with self._call("load_checkpoint()"):
            self._engine.load(os.fspath(load_dir), "" if tag is None else str(tag))
        if self.stage != 3:
            for i in range(len(self._mods)):
                self._bind_views(i)
        return os.path.join(os.fspath(load_dir), "" if tag is None else str(tag)), {}

    def load_weights(self, path):
        """Parameters only (and the master weights), by name, from a checkpoint directory or a
        safetensors file whose names are "<module>.<param>", the model's own (zrt-ckpt export
        writes one); the optimizer state is kept. Collective."""
        self._check_usable("load_weights")
        with self._call("load_weights()"):
            self._engine.load_weights(os.fspath(path))
        if self.stage != 3:
            for i in range(len(self._mods)):
                self._bind_views(i)

    def fp32_state_dict(self):
        """Every parameter's current value widened to fp32, by the model's own names, tied names
        included (one tensor under each of a tied parameter's names, as torch's state_dict): the
        parameters the model computes with (under fp16 or bf16, the fp32 master weights rounded
        to that dtype). Collective at stage 3."""
        self._check_usable("fp32_state_dict")
        values = {}
        with self._call("fp32_state_dict()"):
            for i, (name, _, own) in enumerate(self._mods):
                for k, (pname, p) in enumerate(own):
                    values[id(p)] = torch.from_numpy(self._engine.parameter_values(i, k)).view(self._shapes(i)[k])
        return {qual: values[id(p)] for qual, p in self._entries if id(p) in values}

    def close(self, at_exit=False):
        """Frees the Engine (and its files) and takes its hooks off the model. Stages 0-2: the
        parameters keep their values (a copy of their own). Stage 3: the model keeps no values
        (take them first with fp32_state_dict() or model.state_dict()); a read of a parameter
        after it raises saying so. Called at exit for engines still alive."""
        if self._engine is None:
            return
        with self._call("close() at the program's exit" if at_exit else "close()", closing=True):
            self._close()

    def _close(self):
        self._detach_from_model()
        if self.stage != 3:  # the parameters view the Engine's memory: give them their own
            for _, _, own in self._mods:
                for _, p in own:
                    p.data = p.data.clone()
        self._engine = None
        _live.discard(self)

    def _detach_from_model(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.stage == 3:
            self._release_all()
            for mod in self._wrapped:
                mod.__dict__.pop("state_dict", None)
            for _, _, own in self._mods:
                for _, p in own:
                    p._zrt.closed = True

    def _abandon(self):
        if self._engine is not None:
            try:
                self._detach_from_model()
            except BaseException:  # leaving: the engine's collectives may not be answered
                pass
            self._engine.abandon()
            self._engine = None
        _live.discard(self)

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)


def _closed(what):
    return _zrt_error("InvalidArgument", f"engine.{what}: this engine is closed (engine.close(), or the program's "
                      "exit); make a new one with zrt.initialize")


def register_external_parameter(module, parameter):
    """As DeepSpeed's: `module`'s forward reads `parameter`, which another module owns, so at
    ZeRO stage 3 it is gathered before that forward (and its backward). ZRT finds such uses by
    itself (the first one gathers it and registers it); registering saves that first on-demand
    gather. Callable before or after zrt.initialize; nothing to do at stages 0-2."""
    if not isinstance(module, torch.nn.Module) or not isinstance(parameter, torch.nn.Parameter):
        raise TypeError("zrt.register_external_parameter(module, parameter): a torch.nn.Module and a "
                        f"torch.nn.Parameter, not {type(module).__name__} and {type(parameter).__name__}")
    if isinstance(parameter, _stage3.PartitionedParameter):
        engine = parameter._zrt.engine()
        if engine is not None and engine._engine is not None:
            engine._register_external(module, parameter)
            return
    registered = module.__dict__.setdefault("_zrt_external_parameters", [])
    if not any(p is parameter for p in registered):
        registered.append(parameter)


# MPI is finalised at exit, after the engines still alive are closed (their communicators
# must go first).
_live = weakref.WeakSet()
_created = itertools.count()  # engines close at exit in the order they were made, on every rank


_failing = []  # set when the program ends on an unhandled exception


def _note_failure(hook):
    def excepthook(*info):
        _failing.append(info[0])
        hook(*info)
    return excepthook


sys.excepthook = _note_failure(sys.excepthook)


@atexit.register
def _finalize():
    for e in sorted(_live, key=lambda e: e._order):
        if _failing:
            # The other ranks may be waiting in this step's collectives: leave them (no
            # collective teardown) so this rank ends within ZRT_UNWIND_GRACE_S with its error
            # printed, and the launcher and the peers' watchdogs end the job.
            e._abandon()
        else:
            e.close(at_exit=True)
    import gc
    gc.collect()  # an Engine in a reference cycle (hooks refer to it) goes before MPI does
    # Failing with no engine left to abandon, the peers may still wait for this rank (in the
    # creation of their next engine, say): MPI_Finalize must not wait for them forever either.
    _zrt.finalize(bool(_failing))


def _zrt_error(cls, message):
    from . import errors
    return getattr(errors, cls)(message)


def initialize(model=None, config=None, model_parameters=None, **kwargs):
    """A ZRT engine training `model` by the DeepSpeed JSON `config` (a dict or a path), as
    deepspeed.initialize, with the config's optimizer (it returns the engine alone). Run under
    `mpirun -np N python3 train.py`: every process is one data-parallel rank; no
    torch.distributed set-up is needed. Every rank builds the same model (names and shapes); the
    initial values are rank 0's, broadcast into the other ranks' parameters, as DeepSpeed does."""
    if kwargs:
        raise TypeError(f"zrt.initialize: unsupported arguments {sorted(kwargs)}")
    if model_parameters is not None:
        raise TypeError("zrt.initialize: model_parameters is not supported (every parameter of the model trains; "
                        "set requires_grad=False to freeze one)")
    return Engine(model, config)
