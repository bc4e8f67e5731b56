"""Split weight gradients out of megatron-core's linear layers.

ColumnParallelLinear and RowParallelLinear call the module-level
`linear_with_grad_accumulation_and_async_allreduce` of
`megatron.core.tensor_parallel.layers` at every forward. `install()` replaces
that name with `deferrable_linear`, whose autograd function runs megatron's
own forward and, outside a capture, megatron's own backward (bitwise the same
behaviour). Inside a capture (a B op) the backward computes the input gradient
(with its tensor-parallel all-reduce or sequence-parallel reduce-scatter) and
the bias gradient now, and queues the weight gradient for the W op:

* with gradient-accumulation fusion it is added into `weight.main_grad`
  (fp32) and `grad_added_to_main_grad` is set, as megatron's DDP expects;
* otherwise it is accumulated into `weight.grad` through autograd's own
  AccumulateGrad node, so DDP's gradient hooks fire exactly as they would
  have in an undivided backward.

With sequence parallelism the gathered input for W is gathered into a fresh
tensor, never megatron's shared "mpu" buffer, which later ops overwrite.
"""
from __future__ import annotations

from typing import Optional

import torch

from .wgrad_store import get_store

_ORIGINAL = None


def _megatron_linear_fn():
    from megatron.core.tensor_parallel import layers

    return layers.LinearWithGradAccumulationAndAsyncCommunication


def _reduce_scatter(output, input, group) -> None:
    # torch 2.13 renamed reduce_scatter_tensor (still there, deprecated)
    fn = getattr(torch.distributed, "reduce_scatter_single", None) or torch.distributed.reduce_scatter_tensor
    fn(output, input, group=group)


def _accumulate_into_param(weight: torch.Tensor, grad: torch.Tensor) -> None:
    """Give `grad` to `weight` the way autograd would (hooks included)."""
    torch.autograd.backward(weight.expand_as(weight), grad_tensors=grad.to(weight.dtype))


def _weight_grad_closure(weight, grad_output, total_input, fusion: bool, main_grad):
    def run() -> None:
        go = grad_output.reshape(-1, grad_output.shape[-1])
        ti = total_input.reshape(-1, total_input.shape[-1])
        if fusion:
            target = main_grad if main_grad is not None else weight.main_grad
            target.add_(go.t().matmul(ti).to(target.dtype))
            if hasattr(weight, "grad_added_to_main_grad"):
                weight.grad_added_to_main_grad = True
                # Let megatron's DDP hook see that this parameter's grad is ready.
                _accumulate_into_param(weight, torch.zeros_like(weight))
        else:
            _accumulate_into_param(weight, go.t().matmul(ti))

    return run


class DeferrableLinear(torch.autograd.Function):
    """Megatron's linear autograd function with an optional deferred weight gradient."""

    @staticmethod
    def forward(ctx, input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad, sequence_parallel,
                grad_output_buffer, wgrad_deferral_limit, tp_group):
        # Megatron's forward sets up ctx exactly as its backward expects.
        return _megatron_linear_fn().forward(ctx, input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad,
                                             sequence_parallel, grad_output_buffer, wgrad_deferral_limit, tp_group)

    @staticmethod
    def backward(ctx, grad_output):
        store = get_store()
        if not store.capturing or ctx.grad_output_buffer is not None:
            return _megatron_linear_fn().backward(ctx, grad_output)
        input, weight = ctx.saved_tensors
        tp_group = ctx.tp_group
        if ctx.sequence_parallel:
            shape = list(input.shape)
            shape[0] *= tp_group.size()
            total_input = torch.empty(shape, dtype=input.dtype, device=input.device)  # fresh: W runs later
            torch.distributed.all_gather_into_tensor(total_input, input.contiguous(), group=tp_group)
        else:
            total_input = input
        grad_input = grad_output.matmul(weight)
        if ctx.allreduce_dgrad:
            torch.distributed.all_reduce(grad_input, group=tp_group)
        if ctx.sequence_parallel:
            sub = torch.empty(list(input.shape), dtype=input.dtype, device=input.device)
            _reduce_scatter(sub, grad_input.contiguous(), group=tp_group)
            grad_input = sub
        grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(dim=0) if ctx.use_bias else None
        store.defer(_weight_grad_closure(weight, grad_output, total_input, ctx.gradient_accumulation_fusion, ctx.main_grad),
                    tensors=(grad_output, total_input))
        return grad_input, None, grad_bias, None, None, None, None, None, None


def deferrable_linear(input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad, sequence_parallel,
                      grad_output_buffer=None, wgrad_deferral_limit=0, async_grad_allreduce=None, tp_group=None):
    """Drop-in for megatron's `linear_with_grad_accumulation_and_async_allreduce`."""
    from megatron.core.utils import get_tensor_model_parallel_group_if_none

    if async_grad_allreduce is not None:
        allreduce_dgrad = async_grad_allreduce
    tp_group = get_tensor_model_parallel_group_if_none(tp_group)
    return DeferrableLinear.apply(input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad, sequence_parallel,
                                  grad_output_buffer, wgrad_deferral_limit, tp_group)


def install() -> None:
    """Route megatron-core's parallel linear layers through `deferrable_linear` (idempotent)."""
    global _ORIGINAL
    from megatron.core.tensor_parallel import layers

    if layers.linear_with_grad_accumulation_and_async_allreduce is not deferrable_linear:
        _ORIGINAL = layers.linear_with_grad_accumulation_and_async_allreduce
        layers.linear_with_grad_accumulation_and_async_allreduce = deferrable_linear


def uninstall() -> None:
    global _ORIGINAL
    from megatron.core.tensor_parallel import layers

    if _ORIGINAL is not None:
        layers.linear_with_grad_accumulation_and_async_allreduce = _ORIGINAL
        _ORIGINAL = None


# -- TransformerEngine ----------------------------------------------------------------------------
# TE's linear layers (te.pytorch.Linear, LayerNormLinear, LayerNormMLP, GroupedLinear) accept
# `delay_wgrad_compute=True`: their backward then stores the weight-gradient GEMM and
# `module.backward_dw()` runs the oldest stored one. Untested on GPU here (TE does not
# install on this machine); unit-tested with a stand-in module.


def te_delayed_modules(module: torch.nn.Module) -> list[torch.nn.Module]:
    """TE modules in `module` that delay their weight gradient."""
    return [m for m in module.modules() if callable(getattr(m, "backward_dw", None))
            and getattr(m, "delay_wgrad_compute", None) is True]


def defer_te_wgrads(modules: list[torch.nn.Module]) -> None:
    """Queue one `backward_dw()` per delayed TE module into the active capture.

    Called right after a captured B: each module's backward queued exactly one
    weight-gradient GEMM, and W ops of a chunk run in the order of its B ops,
    matching TE's first-in-first-out store."""
    store = get_store()
    for m in modules:
        store.defer(m.backward_dw)


def te_layers_present(module: torch.nn.Module) -> Optional[str]:
    """Name of a TE layer that cannot delay its weight gradient, if any."""
    for name, m in module.named_modules():
        if type(m).__module__.startswith("transformer_engine") and callable(getattr(m, "backward_dw", None)) \
                and getattr(m, "delay_wgrad_compute", None) is not True:
            return name
    return None
