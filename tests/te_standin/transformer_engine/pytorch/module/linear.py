"""Stand-in for TE v2.11 ``pytorch/module/linear.py`` (commit c188b533):
``Linear`` (constructor lines 1092-1310, forward 1347-1485) and the backward
of ``_Linear`` (lines 497-980), without FP8, userbuffers or tensor parallelism."""
from __future__ import annotations

from typing import Optional

import torch

from ._common import WeightGradStore
from .base import TransformerEngineBaseModule, save_main_grad_func, weight_grad_in_backward


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, inp, bias, is_first_microbatch, wgrad_store, fuse_wgrad_accumulation, activation_dtype):
        x = inp.reshape(-1, inp.shape[-1]).to(activation_dtype)
        out = x.matmul(weight.to(activation_dtype).t())
        if bias is not None:
            out = out + bias.to(activation_dtype)
        ctx.save_for_backward(x, weight, bias)
        ctx.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        save_main_grad_func(ctx, weight, fuse_wgrad_accumulation)
        ctx.is_first_microbatch = is_first_microbatch
        ctx.wgrad_store = wgrad_store
        ctx.activation_dtype = activation_dtype
        ctx.use_bias = bias is not None
        ctx.inp_shape = inp.shape
        ctx.requires_dgrad = inp.requires_grad
        ctx.requires_wgrad = weight.requires_grad
        return out.view(*inp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, bias = ctx.saved_tensors
        dy = grad_output.reshape(-1, grad_output.shape[-1]).contiguous().to(ctx.activation_dtype)
        dgrad = dy.matmul(weight.to(ctx.activation_dtype)).view(ctx.inp_shape) if ctx.requires_dgrad else None
        wgrad, grad_bias = None, None
        if ctx.requires_wgrad:
            wgrad, grad_bias = weight_grad_in_backward(ctx, weight, x, dy, bias if ctx.use_bias else None)
        if not ctx.use_bias:
            grad_bias = None
        return wgrad, dgrad, grad_bias, None, None, None, None


class Linear(TransformerEngineBaseModule):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 fuse_wgrad_accumulation: bool = False, delay_wgrad_compute: bool = False,
                 ub_bulk_wgrad: bool = False, device="cpu", init_method=None) -> None:
        super().__init__()
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.in_features, self.out_features = in_features, out_features
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.use_bias = bias
        self.return_bias = return_bias
        self.apply_bias = bias and not return_bias
        self.parallel_mode = parallel_mode
        self.wgrad_store = WeightGradStore(delay_wgrad_compute, ub_bulk_wgrad)
        self.weight_names, self.bias_names = ["weight"], ["bias"]
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=params_dtype, device=device))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=params_dtype, device=device))
        else:
            self.bias = torch.Tensor().to(dtype=params_dtype, device=device)
        (init_method or (lambda w: torch.nn.init.normal_(w, mean=0.0, std=0.023)))(self.weight.data)
        # row-parallel layers add the bias after their reduction, outside the GEMM
        self.gemm_bias_unfused_add = self.parallel_mode == "row" and self.apply_bias
        self._mark_delayed_params()

    def forward(self, inp: torch.Tensor, is_first_microbatch: Optional[bool] = None):
        activation_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else inp.dtype
        bias = self.bias if self.use_bias else None
        out = _Linear.apply(self.weight, inp, bias if (self.apply_bias and not self.gemm_bias_unfused_add) else None,
                            is_first_microbatch, self.wgrad_store, self.fuse_wgrad_accumulation, activation_dtype)
        if self.gemm_bias_unfused_add:
            out = out + bias.to(activation_dtype)
        if self.return_bias:
            return out, bias.to(activation_dtype)
        return out
