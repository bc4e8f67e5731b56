"""Stand-in for TE v2.11 ``pytorch/module/layernorm_linear.py`` (commit c188b533):
``LayerNormLinear`` (constructor lines 1140-1410) and the backward of
``_LayerNormLinear`` (lines 560-1060: wgrad GEMM on the normalised input,
``wgrad_store.put([ln_out_total, grad_output], wgrad_gemm)`` at line 914, the
norm's own gradients computed in the backward), without FP8, userbuffers,
tensor parallelism or ``return_layernorm_output``."""
from __future__ import annotations

from typing import Optional

import torch

from ._common import WeightGradStore
from .base import TransformerEngineBaseModule, save_main_grad_func, weight_grad_in_backward


def _norm(x, gamma, beta, normalization: str, eps: float, zero_centered_gamma: bool):
    g = gamma + 1 if zero_centered_gamma else gamma
    if normalization == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g
    return torch.nn.functional.layer_norm(x, x.shape[-1:], g, beta, eps)


class _LayerNormLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, ln_weight, ln_bias, weight, bias, eps, is_first_microbatch, wgrad_store,
                fuse_wgrad_accumulation, activation_dtype, normalization, zero_centered_gamma):
        x = inp.reshape(-1, inp.shape[-1])
        ln_out = _norm(x, ln_weight, ln_bias, normalization, eps, zero_centered_gamma).to(activation_dtype)
        out = ln_out.matmul(weight.to(activation_dtype).t())
        if bias is not None:
            out = out + bias.to(activation_dtype)
        ctx.save_for_backward(x, ln_weight, ln_bias, ln_out, weight, bias)
        ctx.eps, ctx.normalization, ctx.zero_centered_gamma = eps, normalization, zero_centered_gamma
        ctx.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        save_main_grad_func(ctx, weight, fuse_wgrad_accumulation)
        ctx.is_first_microbatch = is_first_microbatch
        ctx.wgrad_store = wgrad_store
        ctx.activation_dtype = activation_dtype
        ctx.use_bias = bias is not None
        ctx.inp_shape = inp.shape
        ctx.requires_wgrad = weight.requires_grad
        return out.view(*inp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        x, ln_weight, ln_bias, ln_out, weight, bias = ctx.saved_tensors
        dy = grad_output.reshape(-1, grad_output.shape[-1]).contiguous().to(ctx.activation_dtype)
        d_ln_out = dy.matmul(weight.to(ctx.activation_dtype))
        wgrad, grad_bias = None, None
        if ctx.requires_wgrad:
            wgrad, grad_bias = weight_grad_in_backward(ctx, weight, ln_out, dy, bias if ctx.use_bias else None)
        if not ctx.use_bias:
            grad_bias = None
        # the norm's gradients (TE: tex.layernorm_bwd / rmsnorm_bwd), here by autograd on a recomputation
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            g = ln_weight.detach().requires_grad_(True)
            b = ln_bias.detach().requires_grad_(True) if ln_bias is not None else None
            y = _norm(xr, g, b, ctx.normalization, ctx.eps, ctx.zero_centered_gamma)
            wrt = [xr, g] + ([b] if b is not None else [])
            grads = torch.autograd.grad(y, wrt, d_ln_out.to(y.dtype))
        dgrad, dgamma = grads[0], grads[1]
        dbeta = grads[2] if b is not None else None
        return (dgrad.view(ctx.inp_shape), dgamma, dbeta, wgrad, grad_bias,
                None, None, None, None, None, None, None)


class LayerNormLinear(TransformerEngineBaseModule):
    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5, bias: bool = True, *,
                 normalization: str = "LayerNorm", return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 fuse_wgrad_accumulation: bool = False, zero_centered_gamma: bool = False,
                 delay_wgrad_compute: bool = False, ub_bulk_wgrad: bool = False, device="cpu",
                 init_method=None) -> None:
        super().__init__()
        assert normalization in ("LayerNorm", "RMSNorm"), "Unsupported normalization type!"
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.in_features, self.out_features, self.eps = in_features, out_features, eps
        self.normalization, self.zero_centered_gamma = normalization, zero_centered_gamma
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.use_bias = bias
        self.return_bias = return_bias
        self.apply_bias = bias and not return_bias
        self.parallel_mode = parallel_mode
        self.wgrad_store = WeightGradStore(delay_wgrad_compute, ub_bulk_wgrad)
        self.layer_norm_weight = torch.nn.Parameter(
            (torch.zeros if zero_centered_gamma else torch.ones)(in_features, dtype=params_dtype, device=device))
        if normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(in_features, dtype=params_dtype, device=device))
        else:
            self.layer_norm_bias = None
        self.weight_names, self.bias_names = ["weight"], ["bias"]
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=params_dtype, device=device))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=params_dtype, device=device))
        else:
            self.bias = torch.Tensor().to(dtype=params_dtype, device=device)
        (init_method or (lambda w: torch.nn.init.normal_(w, mean=0.0, std=0.023)))(self.weight.data)
        # row-parallel layers add the bias after their reduction, outside the GEMM (lines 1388-1393)
        self.gemm_bias_unfused_add = self.parallel_mode == "row" and self.apply_bias
        self._mark_delayed_params()

    def forward(self, inp: torch.Tensor, is_first_microbatch: Optional[bool] = None):
        activation_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else inp.dtype
        bias = self.bias if self.use_bias else None
        out = _LayerNormLinear.apply(inp, self.layer_norm_weight, self.layer_norm_bias, self.weight,
                                     bias if (self.apply_bias and not self.gemm_bias_unfused_add) else None,
                                     self.eps, is_first_microbatch, self.wgrad_store, self.fuse_wgrad_accumulation,
                                     activation_dtype, self.normalization, self.zero_centered_gamma)
        if self.gemm_bias_unfused_add:
            out = out + bias.to(activation_dtype)
        if self.return_bias:
            return out, bias.to(activation_dtype)
        return out
