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
Memory crosses as numpy views (the buffer protocol): no torch C++ ABI is linked."""
import atexit
import json
import os
import platform
import sys
import weakref

import torch

from . import _zrt
from ._tensors import DTYPES, as_buffer, from_array


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
    """Identity on a stage-3 module's output; its backward gathers the module again first."""

    @staticmethod
    def forward(ctx, engine, index, *outputs):
        ctx.engine, ctx.index = engine, index
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.engine._gather(ctx.index)
        return (None, None) + grads


class Engine:
    """What zrt.initialize returns. engine(inputs) runs the model; engine.backward(loss) and
    engine.step() train it (step() acts at the gradient accumulation boundary, as DeepSpeed's)."""

    def __init__(self, model, config):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"zrt.initialize: model must be a torch.nn.Module, not {type(model).__name__}")
        text, source = _config_text(config)
        _bound_heap_growth()
        self.module = model
        self._mods = []  # (name, torch module, [(param name, parameter)])
        owner = {}
        for name, mod in model.named_modules():
            own = []
            for pname, p in mod.named_parameters(recurse=False):
                if id(p) in owner:
                    self._shared = (owner[id(p)], f"{name}.{pname}")
                    continue
                owner[id(p)] = f"{name}.{pname}" if name else pname
                own.append((pname, p))
            if own:
                self._mods.append((name or "<root>", mod, own))
        # Each value is the parameter's own memory for an fp32 model (no copy): the Engine
        # broadcasts rank 0's values into it and reads its initial state from there.
        specs = []
        for name, _, own in self._mods:
            specs.append((name, [_zrt.ParamSpec(pname, list(p.shape), as_buffer(p.detach().float().contiguous(),
                                                                                 f"parameter {name}.{pname}"),
                                                p.requires_grad) for pname, p in own]))
        self._engine = _zrt.Engine(text, source, specs)
        del specs  # numpy views of the parameters' own memory, freed below
        _live.add(self)
        self.stage = self._engine.stage
        self.rank = self._engine.rank
        self.world_size = self._engine.world_size
        self.dtype = DTYPES[self._engine.precision]
        if self.stage == 3 and getattr(self, "_shared", None):
            a, b = self._shared
            raise _zrt_error("InvalidArgument", f"zrt.initialize: parameter {a} is also {b}: a parameter shared "
                             "by two modules is not supported at ZeRO stage 3 (untie it)")
        self._in_micro = False
        self._failed = None  # why an earlier backward left the engine unusable
        self._micro = 0
        self._pending = {}  # module index -> {param index: grad}
        self._reported = set()
        self._placeholder = torch.zeros(1, dtype=self.dtype)
        self._held = set()  # stage 3: modules whose parameters view the Engine's gathered copy
        self._views = [all(p.requires_grad for _, p in own) for _, _, own in self._mods]
        self._grads_to_drop = []
        for i, (_, mod, own) in enumerate(self._mods):
            mod.register_forward_pre_hook(self._pre_forward_hook(i))
            if self.stage == 3:
                mod.register_forward_hook(self._post_forward_hook(i))
            for k, (_, p) in enumerate(own):
                if p.requires_grad:
                    p.register_hook(self._grad_hook(i, k))
        self._expected = [sum(1 for _, p in own if p.requires_grad) for _, _, own in self._mods]
        self._param_ids = {id(p) for _, _, own in self._mods for _, p in own}
        for i in range(len(self._mods)):
            if self.stage == 3:
                self._free(i)
            else:
                self._bind_views(i)
        _return_freed_heap()

    # ---- parameters into torch ----
    def _bind_views(self, i):
        _, _, own = self._mods[i]
        for (_, p), a in zip(own, self._engine.parameters(i)):
            p.data = from_array(a, self.dtype, p.shape if p.numel() else a.shape)

    def _gather(self, i):
        """Stage 3: module i's parameters, gathered by the coordinator, until _release(i). A
        module whose parameters all train computes on views of the Engine's gathered copy (no
        copy into torch memory); it is released after its forward, and after its backward when
        its last gradient has been reported, so every tensor autograd saved of it (kept as the
        recipe to make it again from the parameter, _pack) is read while the module is gathered.
        A module with a frozen parameter gets a torch copy and is released at once: no gradient
        hook would say when its backward is over."""
        if i in self._held:
            return
        _, _, own = self._mods[i]
        arrays = self._engine.parameters(i)
        if not self._views[i]:
            try:
                for (_, p), a, shape in zip(own, arrays, self._shapes(i)):
                    p.data = from_array(a, self.dtype, shape).clone()
            finally:
                self._engine.release(i)
            return
        self._held.add(i)
        for (_, p), a, shape in zip(own, arrays, self._shapes(i)):
            p.data = from_array(a, self.dtype, shape)

    def _release(self, i):
        """Module i's parameters become placeholders again, and the Engine's gathered copy they
        viewed is released."""
        self._free(i)
        if i in self._held:
            self._held.discard(i)
            self._engine.release(i)

    def _release_all(self):
        for i in list(self._held):
            self._release(i)

    def _shapes(self, i):
        if not hasattr(self, "_shape_cache"):
            self._shape_cache = {}
        if i not in self._shape_cache:
            self._shape_cache[i] = [tuple(p.shape) for _, p in self._mods[i][2]]
        return self._shape_cache[i]

    def _free(self, i):
        # A stride-0 view of one element in the parameter's shape: no memory, yet autograd's
        # AccumulateGrad (which runs after the gradient hook that frees the module) still sees the
        # shape it recorded in forward.
        for (_, p), shape in zip(self._mods[i][2], self._shapes(i)):
            p.data = self._placeholder.expand(shape)

    def _pre_forward_hook(self, i):
        def hook(module, inputs):
            if self.stage == 3:
                self._gather(i)
            else:
                self._bind_views(i)
        return hook

    def _post_forward_hook(self, i):
        def hook(module, inputs, output):
            self._release(i)
            if not (torch.is_grad_enabled() and self._in_micro):
                return None
            if isinstance(output, torch.Tensor):
                return _GatherForBackward.apply(self, i, output) if output.requires_grad else None
            if isinstance(output, tuple) and all(isinstance(o, torch.Tensor) for o in output) and \
                    any(o.requires_grad for o in output):
                return _GatherForBackward.apply(self, i, *output)
            raise _zrt_error("InvalidArgument", f"zrt stage 3: module {self._mods[i][0]} returned "
                             f"{type(output).__name__}; a module with parameters must return a tensor or a "
                             "tuple of tensors")
        return hook

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
            grads.append(None if g is None else as_buffer(g, f"gradient of {self._mods[i][0]}"))
        self._engine.report_gradients(i, grads)
        self._reported.add(i)
        # The Engine has the gradients: torch's own copies (p.grad, accumulated after the hook
        # of the module reported before this one ran) go now rather than at the end of backward.
        for p in self._grads_to_drop:
            p.grad = None
        self._grads_to_drop = [p for _, p in own]
        if self.stage == 3:
            self._release(i)

    # ---- the training step, as DeepSpeed's engine ----
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def _check_usable(self, what):
        if self._failed is not None:
            raise _zrt_error("InvalidArgument", f"engine.{what}: this engine is unusable: an earlier "
                             f"engine.backward raised ({self._failed}) and left its micro-step open "
                             "in the C++ Engine; close() it and make a new one")

    def forward(self, *args, **kwargs):
        self._check_usable("forward")
        if self.module.training and torch.is_grad_enabled() and not self._in_micro:
            self._engine.begin_micro_step()
            self._in_micro = True
            self._reported = set()
            self._pending = {}
        if self.stage == 3 and self._in_micro and torch.is_grad_enabled():
            # Autograd would keep views of the parameters it saves (a Linear saves weight.t()),
            # and with them each module's gathered copy until its backward: the whole model,
            # which stage 3 exists to avoid. A view of a parameter is saved as the recipe to
            # make it again from the copy gathered for the module's backward.
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                return self._run(*args, **kwargs)
        return self._run(*args, **kwargs)

    def _run(self, *args, **kwargs):
        try:
            return self.module(*args, **kwargs)
        except BaseException:
            if self.stage == 3:  # a forward cut short left its module gathered
                self._release_all()
            raise

    def _pack(self, t):
        base = t._base
        if base is not None and id(base) in self._param_ids:
            return (_ParamView, base, t.size(), t.stride(), t.storage_offset())
        return t

    @staticmethod
    def _unpack(saved):
        if isinstance(saved, tuple) and saved and saved[0] is _ParamView:
            _, base, size, stride, offset = saved
            return base.data.as_strided(size, stride, offset)
        return saved

    def backward(self, loss):
        self._check_usable("backward")
        if not self._in_micro:
            raise _zrt_error("InvalidArgument", "engine.backward: no forward in training mode came first "
                             "(call engine(inputs) with model.train() and gradients enabled)")
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
        self.last_report = self._engine.step()
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
        if tag is None:
            tag = f"global_step{int(self.last_report['step']) if hasattr(self, 'last_report') else 0}"
        self._engine.save(os.fspath(save_dir), str(tag))
        return True

    def load_checkpoint(self, load_dir, tag=None):
        """Resumes from <load_dir>/<tag> (None: the tag <load_dir>/latest names). Collective.
        Returns (path, {}) as DeepSpeed's (no client state)."""
        self._engine.load(os.fspath(load_dir), "" if tag is None else str(tag))
        if self.stage != 3:
            for i in range(len(self._mods)):
                self._bind_views(i)
        return os.path.join(os.fspath(load_dir), "" if tag is None else str(tag)), {}

    def load_weights(self, path):
        """Parameters only (and the master weights), by name, from a checkpoint directory or a
        safetensors file whose names are "<module>.<param>", the model's own (zrt-ckpt export
        writes one); the optimizer state is kept. Collective."""
        self._engine.load_weights(os.fspath(path))
        if self.stage != 3:
            for i in range(len(self._mods)):
                self._bind_views(i)

    def fp32_state_dict(self):
        """Every parameter's current value widened to fp32, by the model's own names: the
        parameters the model computes with (under fp16 or bf16, the fp32 master weights rounded
        to that dtype). Collective at stage 3."""
        out = {}
        for i, (name, _, own) in enumerate(self._mods):
            for k, (pname, p) in enumerate(own):
                key = pname if name == "<root>" else f"{name}.{pname}"
                out[key] = torch.from_numpy(self._engine.parameter_values(i, k)).view(self._shapes(i)[k])
        return out

    def close(self):
        """Frees the Engine (and its files); the model's parameters keep no values after it
        at stage 3. Called at exit for engines still alive."""
        if self._engine is None:
            return
        if self.stage != 3:  # the parameters view the Engine's memory: give them their own
            for _, _, own in self._mods:
                for _, p in own:
                    p.data = p.data.clone()
        self._engine = None
        _live.discard(self)

    def _abandon(self):
        if self._engine is not None:
            self._engine.abandon()
            self._engine = None
        _live.discard(self)

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)


# MPI is finalised at exit, after the engines still alive are closed (their communicators
# must go first).
_live = weakref.WeakSet()


_failing = []  # set when the program ends on an unhandled exception


def _note_failure(hook):
    def excepthook(*info):
        _failing.append(info[0])
        hook(*info)
    return excepthook


sys.excepthook = _note_failure(sys.excepthook)


@atexit.register
def _finalize():
    for e in list(_live):
        if _failing:
            # The other ranks may be waiting in this step's collectives: leave them (no
            # collective teardown) so this rank ends within ZRT_UNWIND_GRACE_S with its error
            # printed, and the launcher and the peers' watchdogs end the job.
            e._abandon()
        else:
            e.close()
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
