"""The GEMM half of the backward of TE v2.11's ``_Linear`` and ``_LayerNormLinear`` (commit
c188b533; TE writes it out in each: ``linear.py`` 495-983, ``layernorm_linear.py`` 542-1034, the
same steps): grad_output preprocessing (base.py), the input all-gather of a column-parallel
sequence-parallel layer (kept, with a row-parallel layer's gathered grad_output, for the delayed
GEMM), the dgrad GEMM and its tensor-parallel all-reduce / reduce-scatter, the wgrad GEMM
closure handed to ``wgrad_store.put`` when delayed, and what the backward returns for the weight
(a dummy with megatron's ``grad_added_to_main_grad``, None when fused otherwise).

Under FP8 (the per-tensor recipes) the forward half is here too: the input quantized (row-wise
for the GEMM, column-wise kept for the wgrad GEMM), the weight's workspace (cached across
microbatches with ``is_first_microbatch``), the bias cast to bf16 for an fp32 FP8 GEMM
(``linear.py`` 287-291); and in the backward the quantized weight saved in the forward is the
dgrad GEMM's operand, grad_output is quantized once in B (both usages: dgrad and wgrad), the
wgrad GEMM reads the quantized input and grad_output as saved (nothing re-quantized when it is
delayed to ``backward_dw``), and the module that ran first in the autocast updates the backward
tensors' amax histories and scales as its backward ends (``linear.py`` 478-485, 968-972)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..cpp_extensions import general_gemm
from ..distributed import allreduce, gather_along_first_dim, reduce_scatter_along_first_dim
from ..quantization import FP8GlobalStateManager
from ..quantized_tensor import QuantizedTensorStorage
from .base import TransformerEngineBaseModule, get_dummy_wgrad


def assert_dim_for_fp8_exec(*tensors) -> None:
    """TE ``pytorch/utils.py`` lines 439-447."""
    for tensor in tensors:
        assert math.prod(tensor.shape[:-1]) % 8 == 0 and tensor.shape[-1] % 16 == 0, (
            "FP8 execution requires the product of all dimensions except the last to be divisible"
            " by 8 and the last dimension to be divisible by 16, but got tensor with"
            f" dims={list(tensor.size())}")


def quantize_gemm_input(inputmat: torch.Tensor, quantizers, *, backward_needs_input: bool, with_gather: bool):
    """linear.py 184-240 (layernorm_linear.py 200-206): the input cast for the forward GEMM; its
    column-wise data made now unless it is all-gathered (FP8 gathers row-wise data only)."""
    quantizers.input.set_usage(rowwise=True, columnwise=backward_needs_input and not with_gather)
    return quantizers.input(inputmat)


def quantize_weight(module, weight: torch.Tensor, quantizer, *, columnwise: bool, is_first_microbatch):
    """linear.py 252-278 (layernorm_linear.py 296-318): the weight's workspace."""
    quantizer.set_usage(rowwise=True, columnwise=columnwise)
    weightmat = module.get_weight_workspace(
        tensor=weight, quantizer=quantizer, cache_name=None if is_first_microbatch is None else "weight",
        update_workspace=is_first_microbatch is None or is_first_microbatch)
    weightmat.update_usage(rowwise_usage=True)
    return weightmat


def first_fp8_module_updates_backward(fp8: bool, *tensors) -> bool:
    """linear.py 478-485: True for the first FP8 module of the autocast (consumed here)."""
    needs_grad = any(t is not None and t.requires_grad for t in tensors)
    return fp8 and needs_grad and FP8GlobalStateManager.is_first_fp8_module()


def save_linear_context(ctx, *, weight, is_first_microbatch, fp8: bool, wgrad_store, quantizers,
                        fuse_wgrad_accumulation: bool, tp_group, tp_size: int, sequence_parallel: bool,
                        activation_dtype, parallel_mode, use_bias: bool, inp_shape, requires_dgrad: bool,
                        ub_bulk_wgrad: bool) -> None:
    """The ctx fields TE's forwards set (linear.py 381-486, layernorm_linear.py 440-540)."""
    ctx.fp8, ctx.debug = fp8, False
    ctx.quantizers = quantizers
    ctx.fuse_wgrad_accumulation = fuse_wgrad_accumulation
    if fuse_wgrad_accumulation and weight.requires_grad:
        ctx.main_grad_func = lambda: weight.main_grad  # read in backward, never saved (modified in place)
    ctx.is_first_microbatch = is_first_microbatch
    ctx.use_bias = use_bias
    ctx.sequence_parallel = sequence_parallel
    ctx.inp_shape = inp_shape
    ctx.parallel_mode = parallel_mode
    ctx.tp_group, ctx.tp_size = tp_group, tp_size
    ctx.activation_dtype = activation_dtype
    ctx.requires_dgrad = requires_dgrad
    ctx.requires_wgrad = weight.requires_grad
    ctx.wgrad_store = wgrad_store
    ctx.ub_bulk_wgrad = ub_bulk_wgrad
    ctx.reduce_and_update_bwd_fp8_tensors = False  # set by the forward (first_fp8_module_updates_backward)
    ctx.backward_input_needs_gather = weight.requires_grad and parallel_mode == "column" and sequence_parallel


def linear_backward_gemms(ctx, grad_output: torch.Tensor, inputmat, weight: torch.Tensor,
                          bias: Optional[torch.Tensor], weight_fp8=None):
    """Returns (weight gradient for autograd, dgrad [flattened], bias gradient)."""
    main_grad = ctx.main_grad_func() if ctx.fuse_wgrad_accumulation and ctx.requires_wgrad else None
    if ctx.requires_wgrad and ctx.fuse_wgrad_accumulation:
        weight.main_grad = main_grad
    q = ctx.quantizers
    if q is not None:  # linear.py 577-597: both usages of the quantized gradient (dgrad and wgrad GEMMs)
        q.grad_output.set_usage(rowwise=True, columnwise=True)
        if not ctx.use_bias and not ctx.requires_wgrad:
            q.grad_output.set_usage(columnwise=False)
    grad_output, grad_bias = TransformerEngineBaseModule.grad_output_preprocess(
        ctx, grad_output, ctx.parallel_mode == "row", q.grad_output if q is not None else None)

    inputmat_total = None
    if ctx.requires_wgrad and not ctx.fp8 and isinstance(inputmat, QuantizedTensorStorage):
        inputmat = inputmat.dequantize(dtype=ctx.activation_dtype)
    if ctx.backward_input_needs_gather:  # linear.py 649-672: re-gathered for the wgrad GEMM
        if ctx.fp8:  # lines 651-658: per-tensor FP8 is gathered row-wise, transposed after (778)
            q.input.set_usage(rowwise=True, columnwise=False)
        inputmat_total, _ = gather_along_first_dim(inputmat, ctx.tp_group,
                                                   quantizer=q.input if ctx.fp8 else None)
    else:
        inputmat_total = inputmat

    dgrad = None
    if ctx.requires_dgrad:  # linear.py 687-760 (reduce-scatter 748, all-reduce 754)
        if ctx.fp8:  # lines 689-695: the weight quantized in the forward, its transpose for NN
            grad_output.update_usage(rowwise_usage=True)
            weight_fp8.update_usage(columnwise_usage=True)
        dgrad, *_ = general_gemm(weight_fp8 if ctx.fp8 else weight.to(ctx.activation_dtype), grad_output,
                                 layout="NN", grad=True, out_dtype=ctx.activation_dtype)
        if ctx.parallel_mode == "column" and ctx.tp_size > 1:
            if ctx.sequence_parallel:
                dgrad, _ = reduce_scatter_along_first_dim(dgrad, ctx.tp_group)
            else:
                dgrad, _ = allreduce(dgrad, ctx.tp_group)

    wgrad = None
    if ctx.requires_wgrad:  # linear.py 768-930
        if ctx.fp8:
            if isinstance(inputmat_total, QuantizedTensorStorage):
                inputmat_total.update_usage(columnwise_usage=True)
            else:
                q.input.set_usage(rowwise=False, columnwise=True)
                inputmat_total = q.input(inputmat_total)
            if isinstance(grad_output, QuantizedTensorStorage):
                grad_output.update_usage(columnwise_usage=True)
            else:
                q.grad_output.set_usage(rowwise=False, columnwise=True)
                grad_output = q.grad_output(grad_output)
        if ctx.is_first_microbatch is not None:
            accumulate = ctx.fuse_wgrad_accumulation and not ctx.is_first_microbatch
        else:
            accumulate = ctx.fuse_wgrad_accumulation
        kwargs = {
            "out_dtype": main_grad.dtype if ctx.fuse_wgrad_accumulation else ctx.activation_dtype,
            "accumulate": accumulate if not getattr(weight, "overwrite_main_grad", False) else False,
            "layout": "NT",
            "out": main_grad if ctx.fuse_wgrad_accumulation else None,
            "bias": bias if (grad_bias is None and not ctx.fp8) else None,  # linear.py 861: fused bgrad
            "grad": True,
        }

        def wgrad_gemm(x, dy):
            """dw = dy^T x, with the bias gradient when fused (linear.py 870-882)."""
            dw, db, *_ = general_gemm(x, dy, **kwargs)
            return dw, db

        if ctx.wgrad_store is not None and ctx.wgrad_store.delay_wgrad_compute():
            if ctx.ub_bulk_wgrad:  # linear.py 885-898
                raise NotImplementedError("Delayed weight grad computation is not supported "
                                          "with Userbuffers (tensor-parallel communication overlapping)")
            ctx.wgrad_store.put([inputmat_total, grad_output], wgrad_gemm)  # linear.py 899 (layernorm_linear.py 914)
        else:
            wgrad, grad_bias_ = wgrad_gemm(inputmat_total, grad_output)
            if grad_bias is None:
                grad_bias = grad_bias_
    if not ctx.use_bias:
        grad_bias = None

    if ctx.reduce_and_update_bwd_fp8_tensors:  # linear.py 968-972
        FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
    if ctx.requires_wgrad:  # linear.py 944-966: "Handle custom DDP from mcore."
        if ctx.fuse_wgrad_accumulation and hasattr(weight, "grad_added_to_main_grad"):
            weight.grad_added_to_main_grad = True
            wgrad = get_dummy_wgrad(list(weight.main_grad.shape), weight.dtype,
                                    zero=getattr(weight, "zero_out_wgrad", False))
        elif ctx.fuse_wgrad_accumulation:
            wgrad = None
    else:
        wgrad = None
    return wgrad, dgrad, grad_bias


def gemm_forward(weightmat, inputmat_total, bias: Optional[torch.Tensor], activation_dtype):
    """linear.py 286-334: an FP8 GEMM with an fp32 output takes a bf16 bias (cuBLASLt has no FP8
    GEMM with an fp32 bias)."""
    quantized = isinstance(weightmat, QuantizedTensorStorage)
    bias_dtype = torch.bfloat16 if quantized and activation_dtype == torch.float32 else activation_dtype
    out, *_ = general_gemm(weightmat if quantized else weightmat.to(activation_dtype), inputmat_total,
                           layout="TN", bias=bias.to(bias_dtype) if bias is not None else None,
                           out_dtype=activation_dtype)
    return out


def reduce_row_output(out: torch.Tensor, parallel_mode, tp_size: int, sequence_parallel: bool, tp_group):
    """linear.py 343-364: a row-parallel layer's output is reduce-scattered (sequence parallel) or
    all-reduced across the tensor-parallel group."""
    if parallel_mode == "row" and tp_size > 1:
        if sequence_parallel:
            out, _ = reduce_scatter_along_first_dim(out, tp_group)
        else:
            out, _ = allreduce(out, tp_group)
    return out
