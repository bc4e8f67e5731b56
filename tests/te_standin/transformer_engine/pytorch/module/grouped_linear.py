"""Stand-in for TE v2.11 ``pytorch/module/grouped_linear.py`` (commit c188b533) in plain torch on CPU:
``GroupedLinear`` (constructor 588-711 with TE's signature, ``set_meta_tensor`` 713-724,
``reset_parameters`` 726-749, forward 752-847, ``backward_dw`` 849-872, the quantizers 874-970) and
``_GroupedLinear`` (forward 66-303, backward 305-525): per-group GEMMs through
``general_grouped_gemm``, ``fuse_wgrad_accumulation`` into each weight's ``main_grad`` (the first
microbatch overwriting it, 373-378 and 461-465), megatron's ``grad_added_to_main_grad`` dummy
(480-507), biases (in the GEMM, or returned with ``return_bias``), ``save_original_input`` and the
delayed weight gradient: ``put([inputmats, grad_output, wgrad_list], grouped_gemm_wgrad)``
(466-468), after which autograd is still handed ``wgrad_list`` (504-507): unfused, tensors only the
delayed GEMM fills (TE allocates them with ``torch.empty``, 422-425; here they hold NaN until then,
so a gradient read before its GEMM ran shows), and no bias gradient without FP8 (511-516).

FP8 (the per-tensor recipes, as Linear's; quantization.py): three forward quantizers per GEMM
(input, weight, output: ``3 i``, ``3 i + 1``) and two backward (grad_output ``2 i``, grad_input).
The forward casts each expert's rows with its own input quantizer (``tex.split_quantize``, 146:
Float8Tensors, the input quantizers not being internal, 951-953; column-wise data kept for the
weight-gradient GEMM, 109-116 and 226-233) and each weight into its cached workspace
(``weight{i}``, 157-172); the backward computes each expert's bias gradient in B with its grad_output
cast (``bgrad_quantize``, 331-357, both usages), runs the dgrad GEMM on the weights' transposes
(393-409), and hands ``put`` the quantized inputs and grad outputs: the delayed GEMM (``backward_dw``)
reads them as saved in B and casts nothing, so no amax is recorded in W; the first module of the
autocast reduces and updates the backward amaxes as its backward ends (518-519). Under FP8 the bias
gradients go to autograd in B even when delayed (514). An expert whose rows are not a multiple of 16
fails TE's leading-dimension check in the weight-gradient GEMM (``cpp_extensions/gemm.py``): megatron
pads them under FP8 (``Fp8Padding``, or the router with ``--moe-router-padding-for-fp8``). An expert
given no rows runs no GEMM: its weight gradient is zero (or main_grad untouched when accumulating).

Not reproduced (raise): tensor parallelism over more than one rank, debug quantizers, CPU offload,
FP8 calibration, quantized (FP8) parameters."""
from __future__ import annotations

import functools
from typing import Callable, Optional, Union

import torch

from ..cpp_extensions import bgrad_quantize, general_grouped_gemm, split_quantize
from ..distributed import (get_distributed_world_size, in_fp8_activation_recompute_phase,
                           is_fp8_activation_recompute_enabled, set_tensor_model_parallel_attributes)
from ..quantization import FP8GlobalStateManager
from ..quantized_tensor import QuantizedTensorStorage, prepare_for_saving, restore_from_saved
from ..tensor.float8_tensor import Float8Quantizer
from ._common import WeightGradStore
from ._gemms import first_fp8_module_updates_backward
from .base import TransformerEngineBaseModule, cpu_device, get_dummy_wgrad

GemmParallelModes = ("row", "column", None)  # TE constants.py


class _GroupedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp: torch.Tensor, non_tensor_args: tuple, *weights_and_biases) -> torch.Tensor:
        (m_splits, use_bias, is_first_microbatch, fp8, wgrad_store, quantizers, fuse_wgrad_accumulation,
         activation_dtype, is_grad_enabled, module, save_original_input) = non_tensor_args
        input_quantizers, weight_quantizers, grad_output_quantizers = quantizers
        num_gemms = len(m_splits)
        weights, biases = weights_and_biases[:num_gemms], weights_and_biases[num_gemms:]
        weight_requires_grad = weights[0].requires_grad
        if fp8:
            _set_forward_usages(input_quantizers, weight_quantizers, inp, is_grad_enabled=is_grad_enabled,
                                weight_requires_grad=weight_requires_grad, save_original_input=save_original_input)
        in_features = weights[0].size(-1)
        if inp.size(-1) != in_features:  # lines 137-142
            raise ValueError(f"Input tensor (shape={tuple(inp.size())}) is not compatible with "
                             f"weight tensor (shape={tuple(weights[0].size())})")
        inp_view = inp.reshape(-1, in_features)
        if fp8:  # lines 145-146, 159-172: each expert's rows and weight cast
            inputmats = split_quantize(inp_view, m_splits, input_quantizers)
            update_workspace = is_first_microbatch is None or is_first_microbatch
            weights_c = [module.get_weight_workspace(
                tensor=weights[i], quantizer=weight_quantizers[i],
                cache_name=None if is_first_microbatch is None else f"weight{i}", update_workspace=update_workspace,
                workspace_dtype=activation_dtype) for i in range(num_gemms)]
        else:
            inputmats = torch.split(inp_view.to(activation_dtype), m_splits)  # line 152
            weights_c = [w.to(activation_dtype) for w in weights]  # line 175
        bias_dtype = torch.bfloat16 if fp8 and activation_dtype == torch.float32 else activation_dtype  # 178-180
        biases = [b.to(bias_dtype) for b in biases] if use_bias else biases  # line 181
        out = torch.empty([sum(m_splits), weights_c[0].size(0)], dtype=activation_dtype, device=inp.device)
        general_grouped_gemm(weights_c, inputmats, [out], [None] * num_gemms, activation_dtype, single_output=True,
                             m_splits=m_splits, bias=biases, use_bias=use_bias)  # lines 197-208
        if is_grad_enabled:
            ctx.weights_shape_1 = weights[0].shape[1]
            if weight_requires_grad:
                if save_original_input:  # lines 227-229
                    inputmats = [None] * num_gemms
                    inputmats[0] = inp
                else:  # lines 231-233: the wgrad GEMM reads the column-wise data only
                    for inputmat in inputmats:
                        if isinstance(inputmat, QuantizedTensorStorage):
                            inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)
            else:
                inputmats = [None] * num_gemms
            tensors, ctx.tensor_objects = prepare_for_saving(*inputmats, *weights_c, *weights, *biases)  # 250-257
            ctx.save_for_backward(*tensors)
            _save_context(ctx, weights=weights, m_splits=m_splits, fp8=fp8, use_bias=use_bias,
                          is_first_microbatch=is_first_microbatch, wgrad_store=wgrad_store,
                          fuse_wgrad_accumulation=fuse_wgrad_accumulation, activation_dtype=activation_dtype,
                          inp=inp, save_original_input=save_original_input, input_quantizers=input_quantizers,
                          grad_output_quantizers=grad_output_quantizers)
            ctx.reduce_and_update_bwd_fp8_tensors = first_fp8_module_updates_backward(  # lines 291-296
                fp8, inp, weights[0], biases[0])
        return out.view(-1, *inp.shape[1:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        saved = restore_from_saved(ctx.tensor_objects, ctx.saved_tensors)  # line 309
        ctx.tensor_objects = None
        n = ctx.num_gemms
        inputmats = list(saved[:n])
        weights = saved[n:2 * n]
        origin_weights = list(saved[2 * n:3 * n])
        biases = saved[3 * n:4 * n]
        main_grads = [main_grad_func() for main_grad_func in ctx.main_grad_funcs]
        if ctx.fuse_wgrad_accumulation:  # lines 323-325
            for i in range(n):
                origin_weights[i].main_grad = main_grads[i]
        grad_output, grad_biases = _grad_output_preprocess(ctx, grad_output)
        if ctx.is_first_microbatch is not None:  # lines 373-378
            accumulate_wgrad_into_param_main_grad = ctx.fuse_wgrad_accumulation and not ctx.is_first_microbatch
        else:
            accumulate_wgrad_into_param_main_grad = ctx.fuse_wgrad_accumulation
        dgrad = None
        if ctx.requires_dgrad:  # lines 380-409: the weights' transposes for the NN GEMM
            dgrad = torch.empty((sum(ctx.m_splits), ctx.weights_shape_1), dtype=ctx.activation_dtype,
                                device=ctx.device)
            for weight in weights:
                if isinstance(weight, QuantizedTensorStorage):
                    weight.update_usage(columnwise_usage=True)
            general_grouped_gemm(weights, grad_output, [dgrad], [None] * n, ctx.activation_dtype, single_output=True,
                                 layout="NN", m_splits=ctx.m_splits, grad=True)
        if ctx.weights_requires_grad:
            wgrad_list, grad_biases = _wgrad(ctx, inputmats, grad_output, grad_biases, main_grads, biases,
                                             weights, accumulate_wgrad_into_param_main_grad)
            wgrad_list = [_handle_custom_ddp_from_mcore(ctx, w, g) for w, g in zip(origin_weights, wgrad_list)]
        else:
            wgrad_list = [None] * n
        if not ctx.use_bias or (ctx.wgrad_store is not None and ctx.wgrad_store.delay_wgrad_compute()
                                and not ctx.fp8):  # lines 511-516
            grad_biases = [None] * n
        if ctx.reduce_and_update_bwd_fp8_tensors:  # lines 518-519
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        return (dgrad.view(ctx.inp_shape) if ctx.requires_dgrad else None, None, *wgrad_list, *grad_biases)


def _set_forward_usages(input_quantizers, weight_quantizers, inp, *, is_grad_enabled: bool,
                        weight_requires_grad: bool, save_original_input: bool) -> None:
    """Lines 106-131: the inputs' column-wise data only for the weight-gradient GEMM, the weights'
    transposes only for the input gradient (or an FP8 activation recompute's first forward)."""
    if save_original_input and isinstance(input_quantizers[0], Float8Quantizer):  # lines 107-108
        raise ValueError("DelayedScaling recipe is not supported with save_original_input")
    for input_quantizer in input_quantizers:
        input_quantizer.set_usage(rowwise=True,
                                  columnwise=is_grad_enabled and weight_requires_grad and not save_original_input)
    columnwise_usage = is_grad_enabled and inp.requires_grad
    if not columnwise_usage:
        columnwise_usage = is_fp8_activation_recompute_enabled() and not in_fp8_activation_recompute_phase()
    for weight_quantizer in weight_quantizers:
        weight_quantizer.set_usage(rowwise=True, columnwise=columnwise_usage)


def _save_context(ctx, *, weights, m_splits, fp8: bool, use_bias: bool, is_first_microbatch, wgrad_store,
                  fuse_wgrad_accumulation: bool, activation_dtype, inp, save_original_input: bool,
                  input_quantizers, grad_output_quantizers) -> None:
    """The ctx fields of lines 259-300."""
    num_gemms = len(m_splits)
    ctx.weights_requires_grad = weights[0].requires_grad
    if fuse_wgrad_accumulation and ctx.weights_requires_grad:  # lines 264-276
        ctx.main_grad_funcs = [lambda j=i: weights[j].main_grad for i in range(num_gemms)]
    else:
        ctx.main_grad_funcs = [lambda: None for _ in range(num_gemms)]
    ctx.device = inp.device
    ctx.m_splits = m_splits
    ctx.num_gemms = num_gemms
    ctx.activation_dtype = activation_dtype
    ctx.fp8 = fp8
    ctx.fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
    ctx.fuse_wgrad_accumulation = fuse_wgrad_accumulation
    ctx.is_first_microbatch = is_first_microbatch
    ctx.use_bias = use_bias
    ctx.inp_shape = inp.shape
    ctx.requires_dgrad = inp.requires_grad
    ctx.wgrad_store = wgrad_store
    ctx.save_original_input = save_original_input
    ctx.input_quantizers = input_quantizers
    ctx.grad_output_quantizers = grad_output_quantizers


def _grad_output_preprocess(ctx, grad_output: torch.Tensor) -> tuple:
    """Lines 327-371: (each expert's grad_output, its bias gradient or None). Under FP8 each expert's
    slice is cast by its own quantizer (both usages: dgrad and wgrad GEMMs), the bias gradient fused
    with the cast (``bgrad_quantize``, the per-tensor recipes); without, split only: the bias gradient
    comes with the weight-gradient GEMM."""
    grad_output_view = grad_output.contiguous().view(-1, grad_output.shape[-1])
    grad_biases = [None] * ctx.num_gemms
    if not ctx.fp8:
        return torch.split(grad_output_view.to(ctx.activation_dtype), ctx.m_splits), grad_biases
    if not ctx.use_bias:
        return split_quantize(grad_output_view, ctx.m_splits, ctx.grad_output_quantizers), grad_biases
    grad_output = [None] * ctx.num_gemms
    for i, mat in enumerate(torch.split(grad_output_view, ctx.m_splits)):
        grad_biases[i], grad_output[i] = bgrad_quantize(mat, ctx.grad_output_quantizers[i])
    return grad_output, grad_biases


def _wgrad(ctx, inputmats, grad_output, grad_biases, main_grads, biases, weights, accumulate: bool) -> tuple:
    """Lines 411-478: the weight-gradient GEMM, run now or handed to ``put``; returns (what autograd is
    handed for the weights before the mcore DDP rule, the bias gradients)."""
    n = ctx.num_gemms
    if ctx.fuse_wgrad_accumulation:  # lines 419-425
        wgrad_list = main_grads
    else:  # uninitialised in TE (torch.empty): NaN here until the GEMM fills them
        wgrad_list = [torch.full(w.size(), float("nan"), dtype=ctx.activation_dtype, device=ctx.device)
                      for w in weights]
    if ctx.save_original_input:  # lines 427-449: the input cast again, now
        inp = inputmats[0]
        inp_view = inp.reshape(-1, inp.shape[-1])
        if ctx.fp8:
            for input_quantizer in ctx.input_quantizers:
                input_quantizer.set_usage(rowwise=True, columnwise=True)  # (per-tensor quantizers, 433-436)
            inputmats = split_quantize(inp_view, ctx.m_splits, ctx.input_quantizers)
        else:
            inputmats = torch.split(inp_view.to(ctx.activation_dtype), ctx.m_splits)
    grouped_gemm_wgrad = functools.partial(  # lines 450-465
        general_grouped_gemm, quantization_params=[None] * n, out_dtype=ctx.activation_dtype,
        layout="NT", grad=True, m_splits=ctx.m_splits,
        use_bias=ctx.use_bias if grad_biases[0] is None else None, bias=biases,
        accumulate=accumulate if not getattr(weights[0], "overwrite_main_grad", False) else False)
    if ctx.wgrad_store is not None and ctx.wgrad_store.delay_wgrad_compute():  # lines 466-468
        ctx.wgrad_store.put([inputmats, grad_output, wgrad_list], grouped_gemm_wgrad)
    else:  # lines 469-478
        _, grad_biases_, _ = grouped_gemm_wgrad(inputmats, grad_output, wgrad_list)
        grad_biases = [grad_biases_[i] if grad_biases[i] is None else grad_biases[i] for i in range(n)]
    return wgrad_list, grad_biases


def _handle_custom_ddp_from_mcore(ctx, weight, wgrad):
    """Lines 480-502."""
    if ctx.fuse_wgrad_accumulation and hasattr(weight, "grad_added_to_main_grad"):
        weight.grad_added_to_main_grad = True
        return get_dummy_wgrad(list(weight.main_grad.shape), weight.dtype, zero=getattr(weight, "zero_out_wgrad", False))
    if ctx.fuse_wgrad_accumulation:
        return None
    return wgrad


class GroupedLinear(TransformerEngineBaseModule):
    def __init__(self, num_gemms: int, in_features: int, out_features: int, sequence_parallel: bool = False,
                 fuse_wgrad_accumulation: bool = False, tp_group=None, tp_size: int = 1,
                 get_rng_state_tracker: Optional[Callable] = None, rng_tracker_name: Optional[str] = None,
                 init_method: Optional[Callable] = None, bias: bool = True, return_bias: bool = False,
                 params_dtype: Optional[torch.dtype] = None, parallel_mode: Optional[str] = None,
                 device: Union[torch.device, str] = "cuda", ub_overlap_rs: bool = False,
                 ub_overlap_ag: bool = False, ub_name: Optional[str] = None, delay_wgrad_compute: bool = False,
                 save_original_input: bool = False, name: Optional[str] = None) -> None:
        """TE's signature (lines 588-611)."""
        super().__init__()
        device = cpu_device(device)
        params_dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
        self.num_gemms = num_gemms
        self.in_features, self.out_features = in_features, out_features
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.use_bias = bias
        self.return_bias = return_bias
        self.apply_bias = bias and not return_bias  # lines 619-621
        self.ub_overlap_rs, self.ub_overlap_ag, self.ub_name = ub_overlap_rs, ub_overlap_ag, ub_name
        self.save_original_input = save_original_input
        assert not ub_overlap_rs and not ub_overlap_ag, "GroupedLinear doesn't support Userbuffer overlap."  # 626-628
        self.get_rng_state_tracker = get_rng_state_tracker
        self.rng_tracker_name = rng_tracker_name
        self.name = name
        self.wgrad_store = WeightGradStore(delay_wgrad_compute)  # line 633
        if tp_group is None:  # lines 636-645
            self.tp_size = tp_size
            if tp_size == 1:
                self.set_tensor_parallel_group(tp_group)
        else:
            self.tp_size = get_distributed_world_size(tp_group)
            self.set_tensor_parallel_group(tp_group)
        if self.tp_size > 1:
            raise NotImplementedError("the TransformerEngine stand-in's GroupedLinear has no tensor parallelism")
        self.parallel_mode = parallel_mode
        assert self.parallel_mode in GemmParallelModes, f"parallel_mode {parallel_mode} not supported"
        self.sequence_parallel = (self.tp_size > 1) and sequence_parallel
        for i in range(self.num_gemms):  # lines 668-700
            self.register_parameter(f"weight{i}", torch.nn.Parameter(
                torch.empty(self.out_features, self.in_features, device=device, dtype=params_dtype)),
                init_fn=init_method, get_rng_state_tracker=get_rng_state_tracker)
            if self.use_bias:
                self.register_parameter(f"bias{i}", torch.nn.Parameter(
                    torch.empty(self.out_features, device=device, dtype=params_dtype)),
                    init_fn=lambda t: torch.nn.init.zeros_(t))  # init_method_constant(0.0)
            else:
                setattr(self, f"bias{i}", torch.Tensor().to(dtype=params_dtype, device=device))
        self.reset_parameters(defer_init=device.type == "meta")
        if self.wgrad_store.delay_wgrad_compute():  # lines 707-711
            for pname, param in self.named_parameters():
                for i in range(self.num_gemms):
                    if pname in (f"weight{i}", f"bias{i}"):
                        param.skip_backward_post_hook = True

    def reset_parameters(self, defer_init=False):
        """lines 726-749: the tensor-parallel attributes megatron-core reads."""
        super().reset_parameters(defer_init=defer_init)
        if defer_init:
            return
        for i in range(self.num_gemms):
            set_tensor_model_parallel_attributes(getattr(self, f"weight{i}"), True,
                                                 1 if self.parallel_mode == "row" else 0, 1)
        if self.use_bias:
            for i in range(self.num_gemms):
                if self.parallel_mode == "row":
                    setattr(getattr(self, f"bias{i}"), "sequence_parallel", self.sequence_parallel)
                elif self.parallel_mode == "column":
                    set_tensor_model_parallel_attributes(getattr(self, f"bias{i}"), True, 0, 1)

    def _customize_quantizers_float8_current_scaling(self, fwd: bool, recipe) -> None:
        """``set_meta_tensor`` (713-724: the base's, base.py, which calls this) and lines 874-903: each GEMM's input and weight quantizers (forward), grad_output's (backward)
        take the recipe's power-of-2 and epsilon settings; no amax reduction (no tensor parallelism)."""
        assert not self.tp_size > 1, ("GroupedLinear doesn't support TP > 1 with Float8 current scaling. "
                                      "Because the TP communication is handled outside of this module.")  # 720-723
        for i in range(self.num_gemms):
            if fwd:
                q_in, q_w = self.quantizers["scaling_fwd"][3 * i], self.quantizers["scaling_fwd"][3 * i + 1]
                q_in.force_pow_2_scales, q_in.amax_epsilon = (recipe.fp8_quant_fwd_inp.power_2_scale,
                                                              recipe.fp8_quant_fwd_inp.amax_epsilon)
                q_w.force_pow_2_scales, q_w.amax_epsilon = (recipe.fp8_quant_fwd_weight.power_2_scale,
                                                            recipe.fp8_quant_fwd_weight.amax_epsilon)
            else:
                q_g = self.quantizers["scaling_bwd"][2 * i]
                q_g.force_pow_2_scales, q_g.amax_epsilon = (recipe.fp8_quant_bwd_grad.power_2_scale,
                                                            recipe.fp8_quant_bwd_grad.amax_epsilon)

    def _get_quantizers(self) -> tuple:
        """Lines 919-970: (input, weight, grad_output) quantizers per GEMM, Nones without FP8. The
        weights' are internal, the inputs' not (Float8Tensors, 951-953), grad_output's internal."""
        n = self.num_gemms
        if not self.fp8:
            return [None] * n, [None] * n, [None] * n
        fwd, bwd = self.quantizers["scaling_fwd"], self.quantizers["scaling_bwd"]
        input_quantizers, weight_quantizers = [fwd[3 * i] for i in range(n)], [fwd[3 * i + 1] for i in range(n)]
        grad_output_quantizers = [bwd[2 * i] for i in range(n)] if torch.is_grad_enabled() else [None] * n
        for q in weight_quantizers:
            q.internal = True
        for q in input_quantizers:
            q.internal = False
        for q in grad_output_quantizers:
            if q is not None:
                q.internal = True
        return input_quantizers, weight_quantizers, grad_output_quantizers

    def forward(self, inp: torch.Tensor, m_splits: list, is_first_microbatch: Optional[bool] = None):
        debug = self.is_debug_iter()
        assert not debug
        assert not isinstance(inp, QuantizedTensorStorage), "GroupedLinear doesn't support input tensor in FP8."
        assert len(m_splits) == self.num_gemms, "Number of splits should match number of GEMMs."  # line 786
        is_grad_enabled = torch.is_grad_enabled()
        with self.prepare_forward(inp, num_gemms=self.num_gemms) as inp:
            if self.fp8_calibration:
                raise NotImplementedError("the TransformerEngine stand-in does not reproduce FP8 calibration")
            weight_tensors = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
            bias_tensors = [getattr(self, f"bias{i}") for i in range(self.num_gemms)]
            non_tensor_args = (m_splits, self.apply_bias, is_first_microbatch, self.fp8, self.wgrad_store,
                               self._get_quantizers(), self.fuse_wgrad_accumulation, self.activation_dtype,
                               is_grad_enabled, self, self.save_original_input)  # lines 820-842
            if is_grad_enabled:
                out = _GroupedLinear.apply(inp, non_tensor_args, *weight_tensors, *bias_tensors)
            else:
                out = _GroupedLinear.forward(None, inp, non_tensor_args, *weight_tensors, *bias_tensors)
        if self.return_bias:  # lines 845-847
            return out, [b.to(self.activation_dtype) for b in bias_tensors]
        return out

    def backward_dw(self) -> None:
        """lines 849-872: the oldest delayed GEMM; each weight's .grad replaced when not fused, each
        bias's .grad set only when empty, then every registered hook."""
        if not self.need_backward_dw():
            return
        (_, grad_biases_, _), tensor_list = self.wgrad_store.pop()
        wgrad_list = tensor_list[2]
        weight_params = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        bias_params = [getattr(self, f"bias{i}") for i in range(self.num_gemms)]
        if not self.fuse_wgrad_accumulation:
            for i in range(self.num_gemms):
                weight_params[i].grad = wgrad_list[i].to(weight_params[i].dtype)
        if self.use_bias:
            for i in range(self.num_gemms):
                if bias_params[i].grad is None:
                    bias_params[i].grad = grad_biases_[i].to(bias_params[i].dtype)
        del grad_biases_, wgrad_list, tensor_list
        for hook in self.wgrad_accumulation_and_reduce_hooks:
            hook()
