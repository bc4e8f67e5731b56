"""The emulated optimizer step: megatron's optimizer interface over the emulated chunks' real
parameters, a real all-reduce of the gradient norm and a timed wait for the step."""
from __future__ import annotations

import time


class EmulatedOptimizer:
    """megatron's optimizer interface, as its training loop and `PostValidationOptimizer` use it, over
    the emulated chunks' real parameters: a torch SGD step that also waits `step_s` (the emulated
    optimizer time). `step()` is megatron's synchronous path: the global all-reduce of the gradient
    norm's square (every rank waits for the slowest: the synchronisation post-validation removes),
    then clipping and the step. `clip_grad` > 0 makes post-validation snapshot and check every step."""

    is_stub_optimizer = False

    def __init__(self, params, *, step_s: float, clip_grad: float = 1.0e6, lr: float = 1.0e-3) -> None:
        import types

        import torch

        self.optimizer = torch.optim.SGD(list(params), lr=lr)
        self.config = types.SimpleNamespace(clip_grad=clip_grad, use_precision_aware_optimizer_no_fp8_or_ds_fp8=False)
        self.step_s = step_s

    def get_parameters(self) -> list:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def get_main_grads_for_grad_norm(self) -> list:
        return [p.grad for p in self.get_parameters() if p.grad is not None]

    def get_grad_stats_parallel_group(self):
        return None  # the whole world: every pipeline rank's gradients count

    def prepare_grads(self) -> bool:
        return False  # fp32: the gradients are the main gradients, nothing to unscale

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step_with_ready_grads(self) -> bool:
        from ..runtime.deadline import wait_until

        wait_until(time.monotonic() + self.step_s)
        self.optimizer.step()
        return True

    def step(self) -> tuple:
        import torch
        import torch.distributed as dist
        from megatron.core.optimizer import clip_grads

        grads = self.get_main_grads_for_grad_norm()
        total = torch.zeros(1) + sum(float(g.double().pow(2).sum()) for g in grads)
        dist.all_reduce(total)  # the global synchronisation
        norm = float(total.item()) ** 0.5
        if self.config.clip_grad > 0 and self.config.clip_grad / (norm + 1.0e-6) < 1.0:
            clip_grads.clip_grad_by_total_norm_fp32(self.get_parameters(), max_norm=self.config.clip_grad,
                                                    total_norm=norm)
        self.step_with_ready_grads()
        return True, norm, None
