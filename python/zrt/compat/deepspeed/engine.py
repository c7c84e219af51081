"""The engine zrt.compat.deepspeed.initialize returns: zrt's Engine with DeepSpeed's engine API
(checkpoints with client state, get_lr, global_steps, save_16bit_model, a client LR scheduler
stepped as DeepSpeed steps it, the model's attributes through the engine). A DeepSpeed engine
attribute it does not offer raises AttributeError naming it and what to use instead."""
import base64
import io
import json
import os

import torch

from ...engine import Engine
from ...errors import InvalidArgument

# DeepSpeed engine features not offered here, with what to use instead.
_NOT_OFFERED = {
    "module_state_dict": "engine.fp32_state_dict() (collective) or model.state_dict()",
    "load_module_state_dict": "engine.load_checkpoint(dir, tag, load_module_only=True)",
    "save_fp16_model": "engine.save_16bit_model(dir)",
    "get_fp32_grad_for_param": "ZRT reduces gradients into its own buckets; read the step report's grad_norm",
    "set_gradient_accumulation_boundary": "gradient_accumulation_steps in the config",
    "pipeline_parallelism": "ZRT is data parallel with ZeRO sharding; no pipeline engine",
    "train_batch": "the loop itself: engine(batch), engine.backward(loss), engine.step() (no pipeline engine)",
    "eval_batch": "engine.eval() and engine(batch) under torch.no_grad()",
    "monitor": "the step report (engine.last_report) and zrt's live metrics (docs/metrics.md)",
    "flops_profiler": "zrt-train's FLOP rate (docs/trainer.md)",
    "compression_training": "nothing: DeepSpeed Compression is not offered",
    "get_mom": "the config's optimizer betas (ZRT's Adam keeps them fixed)",
    "set_lr": "a client lr_scheduler, or optimizer.param_groups[i]['lr'] of the client optimizer",
}


def _pickled(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _unpickled(text):
    return torch.load(io.BytesIO(base64.b64decode(text)))


class _Optimizer:
    """What DeepSpeed's initialize returns as the optimizer: ZRT's C++ optimizer behind the
    engine. param_groups shows each group's parameters and current learning rate;
    engine.step() steps it (step() here refuses, zero_grad() does nothing, as the engine keeps
    no torch gradients)."""

    def __init__(self, engine, groups):
        self._engine = engine
        self.param_groups = [{"params": list(params), "lr": lr, "weight_decay": wd} for (lr, wd), params in groups]

    def zero_grad(self, set_to_none=True):
        return None

    def step(self, closure=None):
        raise InvalidArgument("zrt.compat.deepspeed: optimizer.step() is not how ZRT steps: call engine.step(), "
                              "as DeepSpeed scripts do")

    def state_dict(self):
        raise InvalidArgument("zrt.compat.deepspeed: the optimizer state lives in ZRT's C++ Engine: save it with "
                              "engine.save_checkpoint(dir, tag)")

    def _refresh(self):
        for g, lr in zip(self.param_groups, self._engine.get_lr()):
            g["lr"] = lr


class _ConfigScheduler:
    """The config's scheduler section as DeepSpeed returns it: ZRT's C++ Engine applies it at
    every step; this reports its learning rates."""

    def __init__(self, engine):
        self._engine = engine

    def get_lr(self):
        return self._engine.get_lr()

    def get_last_lr(self):
        return self._engine.get_lr()

    def step(self, *args, **kwargs):
        raise InvalidArgument("zrt.compat.deepspeed: the config's scheduler is stepped by engine.step(), as "
                              "DeepSpeed's is; do not step it yourself")

    def state_dict(self):
        return {"last_batch_iteration": self._engine.global_steps - 1}

    def load_state_dict(self, state):
        return None


class DeepSpeedEngine(Engine):
    def __init__(self, model, config, groups, group_of, client_optimizer=None, lr_scheduler=None):
        self._config_dict = config
        super().__init__(model, config, param_groups=(groups, group_of))
        self.global_steps = 0
        self.global_samples = 0
        self.client_optimizer = client_optimizer
        self.client_lr_scheduler = lr_scheduler
        by_group = [[] for _ in groups]
        for p in model.parameters():
            if id(p) in group_of:
                by_group[group_of[id(p)]].append(p)
        self.optimizer = _Optimizer(self, list(zip(groups, by_group)))
        if lr_scheduler is not None:
            self.lr_scheduler = lr_scheduler
        elif "scheduler" in config:
            self.lr_scheduler = _ConfigScheduler(self)
        else:
            self.lr_scheduler = None
        self._lr_source = None  # the torch optimizer whose param_groups hold the learning rates
        if lr_scheduler is not None:
            self._lr_source = getattr(lr_scheduler, "optimizer", None)
        elif client_optimizer is not None:
            self._lr_source = client_optimizer
        self.optimizer._refresh()

    # ---- DeepSpeed's engine attributes ----
    @property
    def local_rank(self):
        return int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))

    @property
    def global_rank(self):
        return self.rank

    @property
    def device(self):
        # The model's device, as DeepSpeed's engine.device: cpu, or this rank's GPU.
        return self._device

    def gradient_accumulation_steps(self):
        return self._engine.accumulation_steps

    def train_micro_batch_size_per_gpu(self):
        return self._config_dict.get("train_micro_batch_size_per_gpu")

    def train_batch_size(self):
        return self._config_dict.get("train_batch_size")

    def zero_optimization_stage(self):
        return self.stage

    def zero_grad(self):
        return None

    def get_lr(self):
        """Each group's learning rate for the next step."""
        if self._lr_source is not None:
            return [float(g["lr"]) for g in self._lr_source.param_groups]
        return list(self._engine.learning_rates())

    def get_global_grad_norm(self):
        return self.last_report["grad_norm"] if hasattr(self, "last_report") else None

    def was_step_applied(self):
        return bool(self.last_report["taken"]) if hasattr(self, "last_report") else False

    def forward(self, *args, **kwargs):
        if self.module.training and torch.is_grad_enabled():
            self.global_samples += self._config_dict.get("train_micro_batch_size_per_gpu", 0) * self.world_size
        return super().forward(*args, **kwargs)

    def step(self, lr_kwargs=None):
        """At the accumulation boundary: the optimizer step at the client scheduler's (or client
        optimizer's) learning rates, then the client scheduler stepped unless the step was
        skipped for overflow, as DeepSpeed does."""
        boundary = self._micro and self.is_gradient_accumulation_boundary()
        if boundary and self._lr_source is not None:
            self._engine.set_learning_rates(self.get_lr())
        report = super().step()
        if report is None:
            return None
        self.global_steps += 1
        if report["taken"] and self.client_lr_scheduler is not None:
            # torch counts its optimizer's steps (the scheduler warns when it is stepped before
            # its optimizer); ZRT stepped in its place.
            if hasattr(self._lr_source, "_step_count"):
                self._lr_source._step_count += 1
            self.client_lr_scheduler.step(**(lr_kwargs or {}))
        self.optimizer._refresh()
        return report

    # ---- checkpoints ----
    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """The C++ Engine's checkpoint (zrt-ckpt reads it) with the client state and the client
        scheduler's state in its manifest's metadata. Collective."""
        self._check_usable("save_checkpoint")
        if not save_latest or exclude_frozen_parameters:
            raise InvalidArgument("zrt.compat.deepspeed: save_checkpoint always points `latest` at the new tag and "
                                  "saves every parameter (save_latest=False and exclude_frozen_parameters are not "
                                  "offered)")
        if tag is None:
            tag = f"global_step{self.global_steps}"
        metadata = {"deepspeed": {"client_state": _pickled(dict(client_state or {})),
                                  "global_steps": self.global_steps, "global_samples": self.global_samples}}
        if self.client_lr_scheduler is not None:
            metadata["deepspeed"]["lr_scheduler"] = _pickled(self.client_lr_scheduler.state_dict())
        if self._ties():
            metadata["tied"] = self._ties()
        if self.rank == 0:  # as DeepSpeed, the missing parents are made (rank 0 writes the directory)
            os.makedirs(os.path.dirname(os.path.abspath(os.fspath(save_dir))), exist_ok=True)
        self._engine.save(os.fspath(save_dir), str(tag), json.dumps(metadata))
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True, load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False, custom_load_fn=None):
        """Returns (the loaded tag's path, client_state), or (None, None) with a warning when
        load_dir has no checkpoint to load (no `latest` and no tag), as DeepSpeed does.
        load_module_only or load_optimizer_states=False load the parameters (and master weights)
        only. Collective."""
        self._check_usable("load_checkpoint")
        if custom_load_fn is not None or not load_module_strict:
            raise InvalidArgument("zrt.compat.deepspeed: load_checkpoint's custom_load_fn and load_module_strict=False "
                                  "are not offered (the model must match the checkpoint)")
        load_dir = os.fspath(load_dir)
        if tag is None:
            latest = os.path.join(load_dir, "latest")
            if not os.path.isfile(latest):
                if self.rank == 0:
                    print(f"zrt.compat.deepspeed: no checkpoint to load: {latest} does not exist", flush=True)
                return None, None
            with open(latest) as f:
                tag = f.read().strip()
        path = os.path.join(load_dir, str(tag))
        if load_module_only or not load_optimizer_states:
            self.load_weights(path)
        else:
            Engine.load_checkpoint(self, load_dir, tag)
        with open(os.path.join(path, "manifest.json")) as f:
            saved = json.load(f).get("metadata", {}).get("deepspeed", {})
        if not load_module_only:
            self.global_steps = int(saved.get("global_steps", 0))
            self.global_samples = int(saved.get("global_samples", 0))
            if load_lr_scheduler_states and self.client_lr_scheduler is not None and "lr_scheduler" in saved:
                self.client_lr_scheduler.load_state_dict(_unpickled(saved["lr_scheduler"]))
            self.optimizer._refresh()
        client_state = _unpickled(saved["client_state"]) if "client_state" in saved else {}
        return path, client_state

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin", exclude_frozen_parameters=False):
        """The model's parameters in the training dtype (fp32 without fp16/bf16), by the model's
        names, tied ones included, written by rank 0 as torch.save's state dict
        (`from_pretrained` loads it beside the model's config.json). Collective."""
        state = self.fp32_state_dict()
        if exclude_frozen_parameters:
            trainable = {n for n, p in self.module.named_parameters() if p.requires_grad}
            state = {k: v for k, v in state.items() if k in trainable}
        values = {}
        state = {k: values.setdefault(id(v), v.to(self.dtype)) for k, v in state.items()}
        if self.rank == 0:
            os.makedirs(save_dir, exist_ok=True)
            torch.save(state, os.path.join(os.fspath(save_dir), save_filename))
        return True

    def __getattr__(self, name):
        module = self.__dict__.get("module")
        if module is not None and not name.startswith("_"):
            try:
                return getattr(module, name)
            except AttributeError:
                pass
        if name in _NOT_OFFERED:
            raise AttributeError(f"zrt.compat.deepspeed does not offer DeepSpeed's engine.{name}: use "
                                 f"{_NOT_OFFERED[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r} (nor has the model); "
                             "zrt.compat.deepspeed offers what docs/python.md lists")
