"""Stand-in for TE v2.11 ``pytorch/module/base.py`` (commit c188b533): the
base module's weight-gradient API (lines 600-630, 1463-1502) and
``get_dummy_wgrad`` (lines 79-92), plus the weight-gradient half of the linear
backwards, which TE writes out in each module (``linear.py`` 826-960,
``layernorm_linear.py`` 846-1010) and which is the same in both."""
from __future__ import annotations

from typing import Callable, Optional

import torch

_dummy_wgrads: dict = {}


def get_dummy_wgrad(shape: list, dtype: torch.dtype, zero: bool = False) -> torch.Tensor:
    """One cached uninitialised tensor per (shape, dtype); zeroed on request; returned detached."""
    assert len(shape) == 2
    key = (shape[0], shape[1], dtype)
    if key not in _dummy_wgrads:
        _dummy_wgrads[key] = torch.empty(shape, dtype=dtype, requires_grad=False)
    if zero:
        _dummy_wgrads[key].fill_(0)
    return _dummy_wgrads[key].detach()


class TransformerEngineBaseModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wgrad_accumulation_and_reduce_hooks: list[Callable[[], None]] = []
        self.wgrad_store = None

    def register_wgrad_accumulation_and_reduce_hooks(self, wgrad_accumulation_and_reduce_hook) -> None:
        self.wgrad_accumulation_and_reduce_hooks.append(wgrad_accumulation_and_reduce_hook)

    def need_backward_dw(self) -> bool:
        return self.wgrad_store is not None and self.wgrad_store.delay_wgrad_compute()

    def backward_dw(self) -> None:
        """Run the oldest delayed weight gradient, as TE does: the weight's .grad is
        replaced (not accumulated) when not fused, the bias's .grad set only when
        empty, then every registered hook is called."""
        if not self.need_backward_dw():
            return
        (wgrad, bgrad), _ = self.wgrad_store.pop()
        if not self.fuse_wgrad_accumulation:
            weight = getattr(self, self.weight_names[0])
            weight.grad = wgrad.to(weight.dtype)
        if self.use_bias:
            bias = getattr(self, self.bias_names[0])
            if bias.grad is None:
                bias.grad = bgrad.to(bias.dtype)
        del wgrad, bgrad
        for hook in self.wgrad_accumulation_and_reduce_hooks:
            hook()

    def _mark_delayed_params(self) -> None:
        # What the constructors do when delayed (linear.py 1306-1309): DDP then hooks the module.
        if self.wgrad_store.delay_wgrad_compute():
            for name, param in self.named_parameters():
                if name in self.weight_names or name in self.bias_names:
                    param.skip_backward_post_hook = True


def weight_grad_in_backward(ctx, weight: torch.Tensor, inputmat_total: torch.Tensor, grad_output: torch.Tensor,
                            bias: Optional[torch.Tensor]):
    """The weight-gradient part of TE's linear backwards (no FP8: the bias
    gradient is fused into the wgrad GEMM, see base.py grad_output_preprocess).

    Returns (what autograd gets for the weight, grad_bias for autograd)."""
    main_grad = ctx.main_grad_func() if ctx.fuse_wgrad_accumulation else None
    if ctx.fuse_wgrad_accumulation:
        weight.main_grad = main_grad
    if ctx.is_first_microbatch is not None:
        accumulate = ctx.fuse_wgrad_accumulation and not ctx.is_first_microbatch
    else:
        accumulate = ctx.fuse_wgrad_accumulation
    if getattr(weight, "overwrite_main_grad", False):
        accumulate = False
    fuse, activation_dtype = ctx.fuse_wgrad_accumulation, ctx.activation_dtype

    def wgrad_gemm(x: torch.Tensor, dy: torch.Tensor):
        # general_gemm(x, dy, layout="NT", out=main_grad|None, accumulate=..., bias=bias|None)
        dw = dy.t().matmul(x)
        db = dy.sum(dim=0) if bias is not None else None
        if fuse:
            if accumulate:
                main_grad.add_(dw.to(main_grad.dtype))
            else:
                main_grad.copy_(dw)
            dw = main_grad
        else:
            dw = dw.to(activation_dtype)
        return dw, db

    wgrad, grad_bias = None, None
    if ctx.wgrad_store is not None and ctx.wgrad_store.delay_wgrad_compute():
        ctx.wgrad_store.put([inputmat_total, grad_output], wgrad_gemm)
    else:
        wgrad, grad_bias = wgrad_gemm(inputmat_total, grad_output)
    # "Handle custom DDP from mcore."
    if fuse and hasattr(weight, "grad_added_to_main_grad"):
        weight.grad_added_to_main_grad = True
        wgrad = get_dummy_wgrad(list(weight.main_grad.shape), weight.dtype,
                                zero=getattr(weight, "zero_out_wgrad", False))
    elif fuse:
        wgrad = None
    return wgrad, grad_bias


def save_main_grad_func(ctx, weight: torch.Tensor, fuse_wgrad_accumulation: bool) -> None:
    # main_grad is read in backward, never saved (it is modified in place)
    if fuse_wgrad_accumulation and weight.requires_grad:
        ctx.main_grad_func = lambda: weight.main_grad
