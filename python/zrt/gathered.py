"""zrt.GatheredParameters, as DeepSpeed's zero.GatheredParameters: inside the block the given
parameters hold their whole values on every rank (at ZeRO stage 3 a torch copy of each, gathered
collectively; at stages 0-2 they always do); with modifier_rank=r, what the block wrote into
them on rank r becomes every rank's value when the block ends (parameters, shards and fp32
master weights alike); without it, what the block wrote is discarded, as DeepSpeed discards it
(at stages 0-2, where the parameters are the Engine's own memory, their values are put back).
Collective: every rank enters the block with the same parameters.
Outside an engine (before zrt.initialize) the block does nothing: initialize takes rank 0's
values then."""
import torch


class GatheredParameters:
    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        if isinstance(params, torch.Tensor):
            params = [params]
        self.params = [p for p in params if p is not None]
        self.modifier_rank = modifier_rank
        self.enabled = enabled
        self.engine = None
        self.owners = []
        self.saved = None  # stages 0-2 without a modifier: the values to put back
        if enabled:
            engines = {id(e): e for e in (_engine_of(p) for p in self.params) if e is not None}
            if len(engines) > 1:
                from .errors import InvalidArgument
                raise InvalidArgument("GatheredParameters: the parameters belong to different engines")
            self.engine = next(iter(engines.values()), None)

    def __enter__(self):
        if self.engine is not None:
            self.owners = self.engine._owners(self.params)
            self.engine._hold_for_user(self.owners)
            if self.modifier_rank is None and self.engine.stage != 3:
                with torch.no_grad():
                    self.saved = [p.detach().clone() for p in self.params]
        return self

    def __exit__(self, kind, value, traceback):
        if self.engine is None:
            return False
        try:
            if kind is None and self.modifier_rank is not None:
                self.engine._write_parameters(self.params, int(self.modifier_rank))
            elif self.saved is not None:
                with torch.no_grad():
                    for p, v in zip(self.params, self.saved):
                        p.copy_(v)
        finally:
            self.engine._drop_for_user(self.owners)
        return False


def _engine_of(p):
    owner = getattr(p, "_zrt_owner", None)
    engine = owner() if owner is not None else None
    if engine is None or engine._engine is None:
        return None
    return engine
