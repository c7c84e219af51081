"""zrt.ops.CPUAdam: a torch.optim.Optimizer with DeepSpeedCPUAdam's arguments, stepping with
ZRT's vectorised, threaded CPU Adam kernels (runtime/optim/adam.h), which follow PyTorch's
operation order: the result matches torch.optim.AdamW (adamw_mode=True) or torch.optim.Adam."""
import torch

from .. import _zrt
from .._tensors import as_buffer


class CPUAdam(torch.optim.Optimizer):
    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, amsgrad=False, adamw_mode=True, fp32_optimizer_states=True):
        if amsgrad:
            raise ValueError("CPUAdam: amsgrad is not supported (DeepSpeedCPUAdam lacks it too)")
        if not fp32_optimizer_states:
            raise ValueError("CPUAdam: optimizer states are fp32 only (fp32_optimizer_states=False is not supported)")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction)
        super().__init__(model_params, defaults)
        self.adamw_mode = adamw_mode

    def __setstate__(self, state):
        super().__setstate__(state)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype != torch.float32:
                    raise ValueError(f"CPUAdam: parameters must be float32 (one is {p.dtype}); "
                                     "gradients may be fp16 or bf16")
                if p.grad.is_sparse:
                    raise ValueError("CPUAdam: sparse gradients are not supported")
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                state["step"] += 1
                grad = p.grad if p.grad.is_contiguous() else p.grad.contiguous()
                _zrt.adam_step(as_buffer(p, "CPUAdam: parameter"), as_buffer(state["exp_avg"], "CPUAdam: exp_avg"),
                               as_buffer(state["exp_avg_sq"], "CPUAdam: exp_avg_sq"),
                               as_buffer(grad, "CPUAdam: gradient"), step=state["step"], lr=group["lr"],
                               beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                               adamw=self.adamw_mode, bias_correction=group["bias_correction"])
        return loss
