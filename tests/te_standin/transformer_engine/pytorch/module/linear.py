"""Stand-in for TE v2.11 ``pytorch/module/linear.py`` (commit c188b533): ``Linear`` (constructor
lines 1072-1310 with TE's signature, forward 1347-1481) and ``_Linear`` (forward 88-493, backward
495-983 in _gemms.py), in plain torch on CPU: tensor parallelism (column / row, sequence
parallel: the all-gather of the input, the reduce-scatter or all-reduce of the output and of the
input gradient), ``fuse_wgrad_accumulation`` into ``main_grad`` with ``is_first_microbatch``,
``delay_wgrad_compute`` through ``wgrad_store``, and FP8 with the per-tensor recipes
(quantization.py, _gemms.py: the input, weight and grad_output quantized, the quantized weight
cached across microbatches with ``is_first_microbatch``, the bias gradient computed in B, the
column-wise input and the quantized grad_output handed to ``put`` as ``Float8TensorStorage``
objects). Not reproduced (raise): ``parameters_split`` with FP8,
userbuffers other than the ``ub_bulk_wgrad`` refusal, FP8 parameters, ONNX export."""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple, Union

import torch

from ..distributed import gather_along_first_dim, get_distributed_world_size, set_tensor_model_parallel_attributes
from ..quantized_tensor import prepare_for_saving, restore_from_saved
from ._common import WeightGradStore
from ._gemms import (assert_dim_for_fp8_exec, first_fp8_module_updates_backward, gemm_forward,
                     linear_backward_gemms, quantize_gemm_input, quantize_weight, reduce_row_output,
                     save_linear_context)
from .base import TransformerEngineBaseModule, cpu_device

GemmParallelModes = ("row", "column", None)  # TE constants.py


def divide(numerator: int, denominator: int) -> int:
    assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
    return numerator // denominator


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, inp, bias, non_tensor_args):
        (is_first_microbatch, fp8, wgrad_store, quantizers, fuse_wgrad_accumulation, tp_group, tp_size,
         sequence_parallel, activation_dtype, parallel_mode, ub_bulk_wgrad, module) = non_tensor_args
        out_features, in_features = weight.shape
        assert inp.shape[-1] == in_features, "GEMM not possible"
        with_gather = parallel_mode == "column" and sequence_parallel
        backward_needs_input = ctx is not None and weight.requires_grad
        weightmat = weight
        if fp8:  # lines 176-278: the input and the weight quantized
            assert_dim_for_fp8_exec(inp, weight)
            inputmat = quantize_gemm_input(inp.reshape(-1, in_features), quantizers,
                                           backward_needs_input=backward_needs_input, with_gather=with_gather)
            weightmat = quantize_weight(module, weight, quantizers.weight, is_first_microbatch=is_first_microbatch,
                                        columnwise=ctx is not None and inp.requires_grad)
        else:
            inputmat = inp.reshape(-1, in_features).to(activation_dtype)
        if with_gather:  # lines 207-221
            if fp8:
                quantizers.input.set_usage(rowwise=True, columnwise=False)
            inputmat_total, _ = gather_along_first_dim(inputmat, tp_group, quantizer=quantizers.input if fp8 else None)
        else:
            inputmat_total = inputmat
        out = gemm_forward(weightmat, inputmat_total, bias, activation_dtype)
        out = reduce_row_output(out, parallel_mode, tp_size, sequence_parallel, tp_group)
        if ctx is not None:  # lines 376-486: the local (not gathered) input is saved
            saved = inputmat if backward_needs_input else None
            if fp8 and saved is not None and not with_gather:
                saved.update_usage(rowwise_usage=False, columnwise_usage=True)  # lines 388-400: for the wgrad GEMM
            tensors, ctx.tensor_objects = prepare_for_saving(saved, weightmat, weight, bias)
            ctx.save_for_backward(*tensors)
            save_linear_context(ctx, weight=weight, is_first_microbatch=is_first_microbatch, fp8=fp8,
                                wgrad_store=wgrad_store, quantizers=quantizers,
                                fuse_wgrad_accumulation=fuse_wgrad_accumulation, tp_group=tp_group,
                                tp_size=tp_size, sequence_parallel=sequence_parallel,
                                activation_dtype=activation_dtype, parallel_mode=parallel_mode,
                                use_bias=bias is not None, inp_shape=inp.shape, requires_dgrad=inp.requires_grad,
                                ub_bulk_wgrad=ub_bulk_wgrad)
            ctx.reduce_and_update_bwd_fp8_tensors = first_fp8_module_updates_backward(fp8, inp, weight, bias)
        return out.view(-1, *inp.shape[1:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        inputmat, weight_fp8, weight, bias = restore_from_saved(ctx.tensor_objects, ctx.saved_tensors)
        ctx.tensor_objects = None
        wgrad, dgrad, grad_bias = linear_backward_gemms(ctx, grad_output, inputmat, weight, bias, weight_fp8)
        return wgrad, dgrad.view(ctx.inp_shape) if ctx.requires_dgrad else None, grad_bias, None


class Linear(TransformerEngineBaseModule):
    def __init__(self, in_features: int, out_features: int, sequence_parallel: bool = False,
                 fuse_wgrad_accumulation: bool = False, tp_group=None, tp_size: int = 1,
                 get_rng_state_tracker: Optional[Callable] = None, rng_tracker_name: Optional[str] = None,
                 init_method: Optional[Callable] = None, bias: bool = True, return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 parameters_split: Optional[Union[Tuple[str, ...], Dict[str, int]]] = None,
                 device: Union[torch.device, str] = "cuda", ub_overlap_ag: bool = False, ub_overlap_rs: bool = False,
                 ub_overlap_rs_dgrad: bool = False, ub_bulk_dgrad: bool = False, ub_bulk_wgrad: bool = False,
                 ub_name: Optional[str] = None, delay_wgrad_compute: bool = False,
                 symmetric_ar_type: Optional[str] = None, save_original_input: bool = False,
                 name: Optional[str] = None) -> None:
        super().__init__()
        device = cpu_device(device)
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.in_features, self.out_features = in_features, out_features
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.use_bias = bias
        self.return_bias = return_bias
        self.apply_bias = bias and not return_bias
        self.get_rng_state_tracker = get_rng_state_tracker
        self.rng_tracker_name = rng_tracker_name
        self.symmetric_ar_type = symmetric_ar_type
        self.save_original_input = save_original_input
        self.name = name
        self.wgrad_store = WeightGradStore(delay_wgrad_compute, ub_bulk_wgrad)  # line 1115
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
        # lines 1153-1158: bulk wgrad overlap only for a column-parallel sequence-parallel layer
        self.ub_bulk_wgrad = self.parallel_mode == "column" and self.sequence_parallel and ub_bulk_wgrad
        self.ub_name = ub_name
        if parameters_split is not None:
            raise NotImplementedError("the TransformerEngine stand-in does not split a Linear's parameters")
        self.weight_names, self.bias_names = ["weight"], ["bias"]
        self.register_parameter("weight", torch.nn.Parameter(
            torch.empty(self.out_features, self.in_features, device=device, dtype=params_dtype)),
            init_fn=init_method, get_rng_state_tracker=get_rng_state_tracker)
        if self.use_bias:
            self.register_parameter("bias", torch.nn.Parameter(
                torch.empty(self.out_features, device=device, dtype=params_dtype)),
                init_fn=lambda t: torch.nn.init.zeros_(t))  # init_method_constant(0.0)
        else:
            self.bias = torch.Tensor().to(dtype=params_dtype, device=device)
        self.reset_parameters(defer_init=device.type == "meta")
        # lines 1296-1302: a row-parallel layer adds its bias after the reduction
        self.gemm_bias_unfused_add = self.parallel_mode == "row" and self.apply_bias
        self._mark_delayed_params()  # lines 1305-1309

    def reset_parameters(self, defer_init=False):
        """lines 1325-1345: the tensor-parallel attributes megatron-core reads."""
        super().reset_parameters(defer_init=defer_init)
        if not defer_init:
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
        debug = self.is_debug_iter()
        assert not debug
        with self.prepare_forward(inp) as inp:
            weight, bias = self.weight, (self.bias if self.use_bias else None)
            args = (is_first_microbatch, self.fp8, self.wgrad_store, self.get_gemm_quantizers(torch.is_grad_enabled()),
                    self.fuse_wgrad_accumulation, self.tp_group, self.tp_size, self.sequence_parallel,
                    self.activation_dtype, self.parallel_mode, self.ub_bulk_wgrad, self)
            gemm_bias = bias if (self.apply_bias and not self.gemm_bias_unfused_add) else None
            if torch.is_grad_enabled():
                out = _Linear.apply(weight, inp, gemm_bias, args)
            else:
                out = _Linear.forward(None, weight, inp, gemm_bias, args)
        if self.gemm_bias_unfused_add:
            out = out + bias.to(self.activation_dtype)
        if self.return_bias:
            return out, bias.to(self.activation_dtype)
        return out
