"""A parameter's dummy gradient that holds no weight-sized memory.

Megatron's DDP grad-ready hook (megatron-core 0.16.1
`distributed/distributed_data_parallel.py:427-446`) asserts `param.grad is not
None` under `overlap_grad_reduce`, adds `param.grad.data` to `main_grad` only
when the gradient was not added there already (or with `zero_out_wgrad`),
then sets `param.grad = None`. When a W has put the weight gradient into
`main_grad` itself, the hook still needs some `.grad` of the parameter's
shape and dtype to look at: megatron's fused backward hands it
`get_dummy_wgrad` (TE's cached buffer, one per shape) or a fresh
`torch.empty` (`tensor_parallel/layers.py:581-610`), both weight-sized.

The hook only reads the value (and only adds it when it is zeros), so a zero
scalar expanded to the parameter's shape (stride 0: one element of storage)
serves. Nothing writes into it in place: the callers set it only on an empty
`.grad` for the duration of the hook call and take it back when no hook
consumed it.
"""
from __future__ import annotations

import torch


def zero_grad_view(param: torch.Tensor) -> torch.Tensor:
    """Zeros of `param`'s shape, dtype and device, backed by one element."""
    return torch.zeros((), dtype=param.dtype, device=param.device).expand(param.shape)
