"""DeepSpeed's training API over ZRT: a DeepSpeed training script runs with its imports changed,

    import zrt.compat.deepspeed as deepspeed        # was: import deepspeed
    import zrt.compat.deepspeed.comm as dist        # was: import deepspeed.comm as dist

launched with `mpirun -np N python3 train.py`. initialize takes DeepSpeed's arguments (the
model's parameters or param groups, a torch Adam/AdamW/SGD, a client LR scheduler, the config)
and returns DeepSpeed's four values; zero, comm and the engine offer what docs/python.md lists. A
DeepSpeed name it does not offer raises AttributeError saying so and what to use instead."""
import json
import os

from . import comm, zero
from .comm import init_distributed
from .engine import DeepSpeedEngine
from .optimizer_groups import assign, from_client_optimizer, from_model_parameters
from ...errors import InvalidArgument

__all__ = ["initialize", "init_distributed", "add_config_arguments", "comm", "zero", "DeepSpeedEngine"]

_NOT_OFFERED = {
    "init_inference": "DeepSpeed-Inference: evaluate with engine.eval() and torch.no_grad(), or plain torch",
    "PipelineModule": "pipeline parallelism: ZRT is data parallel with ZeRO sharding",
    "pipe": "pipeline parallelism: ZRT is data parallel with ZeRO sharding",
    "moe": "mixture of experts layers",
    "checkpointing": "DeepSpeed's activation checkpointing: torch.utils.checkpoint or "
                     "model.gradient_checkpointing_enable()",
    "ops": "DeepSpeed's ops: zrt.ops.CPUAdam and zrt.ops.AsyncIO",
    "DeepSpeedConfig": "the config as a dict or a JSON file given to initialize",
    "launcher": "the deepspeed launcher: mpirun -np N python3 train.py",
    "profiling": "zrt-train's FLOP rate and the step report's time split",
}


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    hint = _NOT_OFFERED.get(name)
    raise AttributeError(f"zrt.compat.deepspeed does not offer deepspeed.{name}" +
                         (f" ({hint})" if hint else "") + "; docs/python.md lists what it offers")


def add_config_arguments(parser):
    """As DeepSpeed's: --deepspeed and --deepspeed_config on an argparse parser."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations (zrt.compat.deepspeed)")
    group.add_argument("--deepspeed", default=False, action="store_true", help="accepted; ZRT is always on")
    group.add_argument("--deepspeed_config", default=None, type=str, help="DeepSpeed json configuration file")
    return parser


def _config_of(args, config, config_params):
    if config is None:
        config = config_params
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config_dict", None) or getattr(args, "deepspeed_config", None)
    if config is None:
        raise InvalidArgument("zrt.compat.deepspeed.initialize: no config (pass config=, or args with "
                              "--deepspeed_config)")
    if isinstance(config, (str, os.PathLike)):
        with open(os.fspath(config)) as f:
            return json.load(f)
    if not isinstance(config, dict):
        raise InvalidArgument(f"zrt.compat.deepspeed.initialize: config must be a dict or a path, not "
                              f"{type(config).__name__}")
    return json.loads(json.dumps(config))  # a copy: the caller's dict stays as it was


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, lr_scheduler=None,
               distributed_port=None, mpu=None, dist_init_required=None, collate_fn=None, config=None,
               mesh_param=None, config_params=None):
    """As deepspeed.initialize: returns (engine, optimizer, None, lr_scheduler). The optimizer is
    the config's, or `optimizer` (a torch Adam, AdamW or SGD, or a callable making one from the
    parameters), with its param groups' learning rates and weight decays; `model_parameters` may
    be param-group dicts with their own lr and weight_decay. `lr_scheduler` (a torch scheduler
    on the client optimizer, or a callable making one from the optimizer) is stepped after each
    optimizer step that is not skipped; the config's scheduler section wins over it, as in
    DeepSpeed. No training_data (no DeepSpeed data loader: the third value is None)."""
    for name, value in (("training_data", training_data), ("mpu", mpu), ("collate_fn", collate_fn),
                        ("mesh_param", mesh_param)):
        if value is not None:
            raise InvalidArgument(f"zrt.compat.deepspeed.initialize: {name} is not offered (no DeepSpeed data loader "
                                  "or model parallelism: build a torch DataLoader over each rank's share)")
    if model is None:
        raise InvalidArgument("zrt.compat.deepspeed.initialize: model is required")
    cfg = _config_of(args, config, config_params)
    client_optimizer = optimizer
    if callable(optimizer) and not hasattr(optimizer, "param_groups"):
        client_optimizer = optimizer(model_parameters if model_parameters is not None else model.parameters())
    if client_optimizer is not None:
        optimizer_section, groups = from_client_optimizer(client_optimizer, cfg)
        cfg["optimizer"] = optimizer_section
    else:
        groups = from_model_parameters(model_parameters, model, cfg)
    hyper, group_of = assign(model, groups)
    if cfg.get("scheduler", {}).get("type") in ("WarmupLR", "WarmupDecayLR"):
        # DeepSpeed's WarmupLR and WarmupDecayLR write their one learning rate into every group.
        hyper = [(-1.0, wd) for _, wd in hyper]
    scheduler = lr_scheduler
    if scheduler is not None and "scheduler" in cfg:
        if comm.get_rank() == 0:
            print("zrt.compat.deepspeed: the config's scheduler section is used; the client lr_scheduler is not "
                  "(as DeepSpeed does)", flush=True)
        scheduler = None
    if scheduler is not None and callable(scheduler) and not hasattr(scheduler, "step"):
        if client_optimizer is None:
            raise InvalidArgument("zrt.compat.deepspeed.initialize: a callable lr_scheduler needs a client optimizer "
                                  "to schedule (ZRT's own optimizer is not a torch optimizer)")
        scheduler = scheduler(client_optimizer)
    if scheduler is not None and getattr(scheduler, "optimizer", None) is None:
        raise InvalidArgument("zrt.compat.deepspeed.initialize: lr_scheduler must be a torch LR scheduler on the "
                              "client optimizer (its learning rates are read from that optimizer's param groups)")
    engine = DeepSpeedEngine(model, cfg, hyper, group_of, client_optimizer=client_optimizer, lr_scheduler=scheduler)
    return engine, engine.optimizer, None, engine.lr_scheduler
