"""Stand-in for TE v2.11 ``pytorch/module/layernorm_linear.py`` (commit c188b533):
``LayerNormLinear`` (constructor lines 1135-1419 with TE's signature, ``reset_parameters``
1437-1460, forward 1464-1620) and ``_LayerNormLinear`` (forward 92-540, backward 542-1034), in
plain torch on CPU: the norm (LayerNorm / RMSNorm, ``zero_centered_gamma``), the normalised input
all-gathered for a column-parallel sequence-parallel layer (kept for the delayed GEMM:
``put([ln_out_total, grad_output], wgrad_gemm)``, line 914), the GEMMs of _gemms.py, and the
norm's own gradients computed in the backward from the (reduce-scattered) input gradient.
Not reproduced (raise): ``return_layernorm_output``, userbuffers, ``parameters_split``."""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from ..distributed import gather_along_first_dim, get_distributed_world_size, set_tensor_model_parallel_attributes
from ..quantized_tensor import prepare_for_saving, restore_from_saved
from ._common import WeightGradStore
from ._gemms import (assert_dim_for_fp8_exec, first_fp8_module_updates_backward, gemm_forward,
                     linear_backward_gemms, quantize_gemm_input, quantize_weight, save_linear_context)
from .base import TransformerEngineBaseModule, cpu_device
from .linear import GemmParallelModes, divide


def _norm(x, gamma, beta, normalization: str, eps: float, zero_centered_gamma: bool):
    g = gamma + 1 if zero_centered_gamma else gamma
    if normalization == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g
    return torch.nn.functional.layer_norm(x, x.shape[-1:], g, beta, eps)


class _LayerNormLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, ln_weight, ln_bias, weight, bias, non_tensor_args):
        (eps, normalization, zero_centered_gamma, is_first_microbatch, fp8, wgrad_store, quantizers,
         fuse_wgrad_accumulation, tp_group, tp_size, sequence_parallel, activation_dtype, parallel_mode,
         ub_bulk_wgrad, module) = non_tensor_args
        in_features = ln_weight.numel()
        assert inp.shape[-1] == in_features, "GEMM not possible"
        inputmat = inp.reshape(-1, in_features)
        with_gather = parallel_mode == "column" and sequence_parallel
        weightmat = weight
        if fp8:  # lines 160-206, 296-318: the norm's output cast by the norm kernel (no rounding between)
            assert_dim_for_fp8_exec(inputmat, weight)
            ln_out = _norm(inputmat.float(), ln_weight.float(), None if ln_bias is None else ln_bias.float(),
                           normalization, eps, zero_centered_gamma)
            ln_out = quantize_gemm_input(ln_out, quantizers, backward_needs_input=ctx is not None and weight.requires_grad,
                                         with_gather=with_gather)
            weightmat = quantize_weight(module, weight, quantizers.weight, is_first_microbatch=is_first_microbatch,
                                        columnwise=ctx is not None)
        else:
            ln_out = _norm(inputmat, ln_weight, ln_bias, normalization, eps, zero_centered_gamma).to(activation_dtype)
        if with_gather:  # lines 246-283: the normalised input gathered
            if fp8:
                quantizers.input.set_usage(rowwise=True, columnwise=False)
            ln_out_total, _ = gather_along_first_dim(ln_out, tp_group, quantizer=quantizers.input if fp8 else None)
        else:
            ln_out_total = ln_out
        out = gemm_forward(weightmat, ln_out_total, bias, activation_dtype)
        if ctx is not None:
            saved_ln_out = ln_out if weight.requires_grad else None
            if fp8 and saved_ln_out is not None and not with_gather:
                saved_ln_out.update_usage(rowwise_usage=False, columnwise_usage=True)
            tensors, ctx.tensor_objects = prepare_for_saving(inputmat, ln_weight, ln_bias, saved_ln_out, weightmat,
                                                             weight, bias)
            ctx.save_for_backward(*tensors)
            ctx.eps, ctx.normalization, ctx.zero_centered_gamma = eps, normalization, zero_centered_gamma
            save_linear_context(ctx, weight=weight, is_first_microbatch=is_first_microbatch, fp8=fp8,
                                wgrad_store=wgrad_store, quantizers=quantizers,
                                fuse_wgrad_accumulation=fuse_wgrad_accumulation, tp_group=tp_group,
                                tp_size=tp_size, sequence_parallel=sequence_parallel,
                                activation_dtype=activation_dtype, parallel_mode=parallel_mode,
                                use_bias=bias is not None, inp_shape=inp.shape, requires_dgrad=True,
                                ub_bulk_wgrad=ub_bulk_wgrad)
            ctx.reduce_and_update_bwd_fp8_tensors = first_fp8_module_updates_backward(
                fp8, inp, ln_weight, ln_bias, weight, bias)  # layernorm_linear.py 518-525
        return out.view(-1, *inp.shape[1:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        inputmat, ln_weight, ln_bias, ln_out, weight_fp8, weight, bias = restore_from_saved(
            ctx.tensor_objects, ctx.saved_tensors)
        ctx.tensor_objects = None
        wgrad, d_ln_out, grad_bias = linear_backward_gemms(ctx, grad_output, ln_out, weight, bias, weight_fp8)
        # the norm's gradients (TE: tex.layernorm_bwd / rmsnorm_bwd, lines 965-990), here by autograd on a
        # recomputation of the norm from its saved input
        with torch.enable_grad():
            xr = inputmat.detach().requires_grad_(True)
            g = ln_weight.detach().requires_grad_(True)
            b = ln_bias.detach().requires_grad_(True) if ln_bias is not None else None
            y = _norm(xr, g, b, ctx.normalization, ctx.eps, ctx.zero_centered_gamma)
            grads = torch.autograd.grad(y, [xr, g] + ([b] if b is not None else []), d_ln_out.to(y.dtype))
        dgrad, dgamma = grads[0], grads[1]
        dbeta = grads[2] if b is not None else None
        return dgrad.view(ctx.inp_shape), dgamma, dbeta, wgrad, grad_bias, None


class LayerNormLinear(TransformerEngineBaseModule):
    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5, sequence_parallel: bool = False,
                 fuse_wgrad_accumulation: bool = False, tp_group=None, tp_size: int = 1,
                 get_rng_state_tracker: Optional[Callable] = None, init_method: Optional[Callable] = None,
                 bias: bool = True, normalization: str = "LayerNorm", return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 return_layernorm_output: bool = False, return_layernorm_output_gathered: bool = False,
                 parameters_split=None, zero_centered_gamma: bool = False,
                 device: Union[torch.device, str] = "cuda", ub_overlap_ag: bool = False, ub_overlap_rs: bool = False,
                 ub_overlap_rs_dgrad: bool = False, ub_bulk_wgrad: bool = False, ub_bulk_dgrad: bool = False,
                 ub_name: Optional[str] = None, delay_wgrad_compute: bool = False,
                 symmetric_ar_type: Optional[str] = None, name: str = None) -> None:
        super().__init__()
        device = cpu_device(device)
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.in_features, self.out_features = in_features, out_features
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.normalization = normalization
        assert normalization in ["LayerNorm", "RMSNorm"], "Unsupported normalization type!"
        self.use_bias = bias
        self.return_bias = return_bias
        self.apply_bias = self.use_bias and not return_bias
        if return_layernorm_output:
            raise NotImplementedError("the TransformerEngine stand-in does not return the layernorm output")
        self.return_layernorm_output = False
        self.zero_centered_gamma = zero_centered_gamma
        self.symmetric_ar_type = symmetric_ar_type
        self.wgrad_store = WeightGradStore(delay_wgrad_compute, ub_bulk_wgrad)  # line 1184
        self.name = name
        if tp_group is None:
            self.tp_size = tp_size
            if tp_size == 1:
                self.set_tensor_parallel_group(tp_group)
        else:
            self.tp_size = get_distributed_world_size(tp_group)
            self.set_tensor_parallel_group(tp_group)
        self.parallel_mode = parallel_mode
        assert self.parallel_mode in GemmParallelModes, f"parallel_mode {parallel_mode} not supported"
        if self.parallel_mode == "column":
            self.out_features = divide(self.out_features, self.tp_size)
        elif self.parallel_mode == "row":
            self.in_features = divide(self.in_features, self.tp_size)
        self.sequence_parallel = (self.tp_size > 1) and sequence_parallel
        if ub_overlap_ag or ub_overlap_rs or ub_overlap_rs_dgrad or ub_bulk_dgrad:
            raise NotImplementedError("the TransformerEngine stand-in has no userbuffers (tensor-parallel "
                                      "communication overlap)")
        self.ub_bulk_wgrad = self.parallel_mode == "column" and self.sequence_parallel and ub_bulk_wgrad  # 1218-1223
        self.ub_name = ub_name
        if parameters_split is not None:
            raise NotImplementedError("the TransformerEngine stand-in does not split a LayerNormLinear's parameters")
        self.eps = eps
        self.register_parameter("layer_norm_weight", torch.nn.Parameter(
            torch.empty(self.in_features, device=device, dtype=params_dtype)),
            init_fn=lambda t: torch.nn.init.constant_(t, float(not self.zero_centered_gamma)))
        if self.normalization != "RMSNorm":
            self.register_parameter("layer_norm_bias", torch.nn.Parameter(
                torch.empty(self.in_features, device=device, dtype=params_dtype)),
                init_fn=lambda t: torch.nn.init.zeros_(t))
        else:
            self.layer_norm_bias = None
        self.weight_names, self.bias_names = ["weight"], ["bias"]
        self.register_parameter("weight", torch.nn.Parameter(
            torch.empty(self.out_features, self.in_features, device=device, dtype=params_dtype)),
            init_fn=init_method, get_rng_state_tracker=get_rng_state_tracker)
        if self.use_bias:
            self.register_parameter("bias", torch.nn.Parameter(
                torch.empty(self.out_features, device=device, dtype=params_dtype)),
                init_fn=lambda t: torch.nn.init.zeros_(t))
        else:
            self.bias = torch.Tensor().to(dtype=params_dtype, device=device)
        self.reset_parameters(defer_init=device.type == "meta")
        self.gemm_bias_unfused_add = self.parallel_mode == "row" and self.apply_bias  # lines 1388-1393
        self._mark_delayed_params()  # lines 1402-1406

    def reset_parameters(self, defer_init=False):
        super().reset_parameters(defer_init=defer_init)
        if not defer_init:
            setattr(self.layer_norm_weight, "sequence_parallel", self.sequence_parallel)
            if self.normalization != "RMSNorm":
                setattr(self.layer_norm_bias, "sequence_parallel", self.sequence_parallel)
            set_tensor_model_parallel_attributes(self.weight, True, 1 if self.parallel_mode == "row" else 0, 1)
            if self.use_bias:
                if self.parallel_mode == "row":
                    setattr(self.bias, "sequence_parallel", self.sequence_parallel)
                elif self.parallel_mode == "column":
                    set_tensor_model_parallel_attributes(self.bias, True, 0, 1)

    def forward(self, inp: torch.Tensor, is_first_microbatch: Optional[bool] = None, fp8_output: Optional[bool] = False,
                fp8_grad: Optional[bool] = False):
        if fp8_output or fp8_grad:
            raise NotImplementedError("the TransformerEngine stand-in has no FP8 outputs")
        assert not self.is_debug_iter()
        with self.prepare_forward(inp, allow_different_data_and_param_types=False) as inp:
            bias = self.bias if self.use_bias else None
            args = (self.eps, self.normalization, self.zero_centered_gamma, is_first_microbatch, self.fp8,
                    self.wgrad_store, self.get_gemm_quantizers(torch.is_grad_enabled()),
                    self.fuse_wgrad_accumulation, self.tp_group, self.tp_size, self.sequence_parallel,
                    self.activation_dtype, self.parallel_mode, self.ub_bulk_wgrad, self)
            gemm_bias = bias if (self.apply_bias and not self.gemm_bias_unfused_add) else None
            tensors = (inp, self.layer_norm_weight, self.layer_norm_bias, self.weight, gemm_bias)
            out = _LayerNormLinear.apply(*tensors, args) if torch.is_grad_enabled() \
                else _LayerNormLinear.forward(None, *tensors, args)
        if self.gemm_bias_unfused_add:
            out = out + bias.to(self.activation_dtype)
        if self.return_bias:
            return out, bias.to(self.activation_dtype)
        return out
