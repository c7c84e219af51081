"""What deepspeed.initialize's optimizer arguments become for ZRT's Engine: the config's
optimizer section and the parameter groups (a learning rate and a weight decay each, the
Engine's per-group hyperparameters), from either a torch optimizer the script made (Adam, AdamW,
SGD) or the config's optimizer with `model_parameters` (parameters, or param-group dicts as
torch.optim takes them). Anything the Engine cannot run is refused by name."""
import torch

from ...errors import InvalidArgument

# The torch optimizers the Engine runs, and the config section each becomes.
_TORCH_TYPES = {torch.optim.Adam: "Adam", torch.optim.AdamW: "AdamW", torch.optim.SGD: "SGD"}
# Group keys that hold no hyperparameter.
_LABELS = {"params", "name", "names", "param_names"}
# torch's flags that only choose an implementation (the result is the same).
_IMPLEMENTATION = {"foreach", "fused", "capturable", "differentiable"}


def _refuse(message):
    raise InvalidArgument(f"zrt.compat.deepspeed.initialize: {message}")


def from_client_optimizer(optimizer, config):
    """The config's optimizer section and the groups [(lr, weight_decay)] with their parameters,
    from a torch optimizer instance."""
    kind = _TORCH_TYPES.get(type(optimizer))
    if kind is None:
        _refuse(f"optimizer {type(optimizer).__module__}.{type(optimizer).__name__} cannot run in ZRT's C++ Engine, "
                "which runs torch.optim.Adam, AdamW and SGD (or the config's optimizer: Adam, AdamW, SGD)")
    if "optimizer" in config:
        _refuse("both the config's optimizer section and a client optimizer were given: keep one")
    groups = [g for g in optimizer.param_groups if len(g["params"])]
    first = groups[0]
    for flag in ("amsgrad", "maximize", "nesterov" if kind != "SGD" else None):
        if flag and first.get(flag):
            _refuse(f"the client {kind} has {flag}=True, which ZRT's Engine does not run")
    if kind == "SGD":
        params = {"lr": first["lr"], "momentum": first.get("momentum", 0.0), "dampening": first.get("dampening", 0.0),
                  "nesterov": bool(first.get("nesterov", False)), "weight_decay": first["weight_decay"]}
    else:
        params = {"lr": first["lr"], "betas": list(first["betas"]), "eps": first["eps"],
                  "weight_decay": first["weight_decay"]}
        if kind == "Adam":
            params["adam_w_mode"] = False  # torch's Adam adds the decay to the gradient (L2)
    shared = {k: v for k, v in first.items() if k not in _LABELS | _IMPLEMENTATION | {"lr", "weight_decay",
                                                                                       "initial_lr"}}
    out = []
    for i, g in enumerate(groups):
        for k, v in shared.items():
            if g.get(k) != v:
                _refuse(f"the client optimizer's param group {i} sets {k}={g.get(k)!r} and group 0 {v!r}: ZRT's "
                        "Engine takes a learning rate and a weight decay per group, the rest is shared")
        out.append(((float(g["lr"]), float(g["weight_decay"])), list(g["params"])))
    return {"type": kind, "params": params}, out


def from_model_parameters(model_parameters, model, config):
    """The groups [(lr, weight_decay)] with their parameters from model_parameters (None: every
    parameter of the model that requires grad), under the config's optimizer."""
    if "optimizer" not in config:
        _refuse("the config has no optimizer section and no client optimizer was given (DeepSpeed would "
                "fail too); add \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": ...}} to the config, or "
                "pass optimizer=torch.optim.AdamW(...)")
    if model_parameters is None:
        return [((-1.0, -1.0), [p for p in model.parameters() if p.requires_grad])]
    items = list(model_parameters)
    if not items:
        _refuse("model_parameters is empty")
    if all(isinstance(x, torch.Tensor) for x in items):
        items = [{"params": items}]
    elif not all(isinstance(x, dict) for x in items):
        _refuse("model_parameters mixes parameters and param-group dicts; give one or the other")
    base = config["optimizer"].get("params", {})
    out = []
    for i, g in enumerate(items):
        if "params" not in g:
            _refuse(f"param group {i} has no 'params'")
        params = g["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        for k, v in g.items():
            if k in _LABELS | _IMPLEMENTATION | {"lr", "weight_decay"}:
                continue
            if k not in base or _normal(base[k]) != _normal(v):
                _refuse(f"param group {i} sets {k}={v!r}: ZRT's Engine takes a learning rate and a weight decay per "
                        f"group; {k} comes from the config's optimizer ({base.get(k, 'its default')!r})")
        out.append(((float(g.get("lr", -1.0)), float(g.get("weight_decay", -1.0))), params))
    return out


def _normal(v):
    return list(v) if isinstance(v, (tuple, list)) else v


def assign(model, groups):
    """(the groups' hyperparameters, id(parameter) -> group index); refuses a parameter in two
    groups, one that is not the model's, and a parameter that trains but is in no group."""
    names = {id(p): n for n, p in model.named_parameters()}
    group_of = {}
    for i, (_, params) in enumerate(groups):
        for p in params:
            if id(p) not in names:
                _refuse(f"param group {i} holds a parameter of shape {tuple(p.shape)} that is not the model's")
            if id(p) in group_of and group_of[id(p)] != i:
                _refuse(f"parameter {names[id(p)]} is in param groups {group_of[id(p)]} and {i}")
            group_of[id(p)] = i
    for p in model.parameters():
        if p.requires_grad and id(p) not in group_of:
            _refuse(f"parameter {names[id(p)]} requires grad but is in no param group, so no optimizer would step "
                    "it: add it to a group, or set requires_grad=False")
    return [h for h, _ in groups], group_of
