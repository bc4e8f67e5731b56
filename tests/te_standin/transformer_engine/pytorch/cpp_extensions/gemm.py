"""Stand-in for TE v2.11 ``pytorch/cpp_extensions/gemm.py`` ``general_gemm`` (lines 45-200 at
commit c188b533) in plain torch: cuBLAS's column-major layouts as TE's modules use them
(``"TN"``: B @ A^T, the forward; ``"NN"``: B @ A, the input gradient; ``"NT"``: B^T @ A, the
weight gradient), ``out`` with ``accumulate``, and ``bias``: added to the output in the forward,
its gradient (the column sums of B) returned as the second output when ``grad`` (the fused
bias gradient of the weight-gradient GEMM). Returns (out, bias_grad, gelu_input, extra_output)
as TE does. Userbuffers, GELU fusion and quantized outputs are not reproduced.

FP8 operands (Float8TensorStorage, both) go through ``torch._scaled_mm`` as cuBLASLt gets them
on a TN-only device (``common/gemm/cublaslt_gemm.cu`` ``CanonicalizeGemmInput``, lines 124-158
for A, 220-249 for B): an operand the layout does not transpose uses its column-wise data (the
transpose) instead, so every FP8 GEMM is TN on the float8 buffers, with each operand's
``scale_inv``; a missing usage and a leading dimension not a multiple of 16 raise TE's sentences.
On CPU, ``_scaled_mm``'s fp32 / bf16 result is the fp32 product of the dequantized operands plus
the bias, rounded once to the output dtype: cuBLASLt's accumulation order and fast accumulation
(``use_split_accumulator``) are not reproduced, so values match TE's to fp32 rounding, not bitwise.
That is torch's emulated CPU kernel; torch 2.13 (aten/src/ATen/native/Blas.cpp, ``_scaled_mm_out_cpu``)
takes oneDNN's instead on a CPU with AMX-INT8 while oneDNN is enabled, which has no FNUZ formats and
rounds in another order. The stand-in turns oneDNN off around the call, so one result on every CPU."""
from __future__ import annotations

from typing import Optional

import torch


def _plain(x):
    from ..quantized_tensor import QuantizedTensorStorage

    return x.dequantize() if isinstance(x, QuantizedTensorStorage) else x


def _is_fp8(x) -> bool:
    from ..tensor.storage.float8_tensor_storage import Float8TensorStorage

    return isinstance(x, Float8TensorStorage)


def _tn_operand(t, rowwise: bool, name: str) -> torch.Tensor:
    """The buffer cuBLASLt reads for one FP8 operand (cublaslt_gemm.cu 124-158, 220-249)."""
    if rowwise:
        if t._data is None:
            raise RuntimeError(f"Input {name} is missing row-wise usage")
        buf = t._data.reshape(-1, t._data.shape[-1])
    else:
        if t._transpose is None or t._transpose_invalid:
            raise RuntimeError(f"Input {name} is missing column-wise usage")
        buf = t._transpose
    if buf.shape[-1] % 16 != 0:  # lines 155-158, 246-249: lda / ldb = k in the TN layout
        raise RuntimeError(f"Leading dimension requirement on {name} for FP8 GEMM. Caller must pad.")
    return buf


def _emulated_scaled_mm(a, b, scale_a, scale_b, bias, dtype) -> torch.Tensor:
    """torch._scaled_mm through torch's emulated CPU kernel whatever the CPU (module doc)."""
    enabled = torch.backends.mkldnn.enabled  # not mkldnn.flags(): it also sets TF32 and warns each call
    torch.backends.mkldnn.enabled = False
    try:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=dtype)
    finally:
        torch.backends.mkldnn.enabled = enabled


def _fp8_gemm(A, B, layout: str, out_dtype, accumulate: bool, out, bias, grad: bool):
    if not (_is_fp8(A) and _is_fp8(B)):
        raise NotImplementedError("the TransformerEngine stand-in multiplies an FP8 operand only with another")
    if grad and bias is not None:
        raise NotImplementedError("the TransformerEngine stand-in has no bias gradient fused into an FP8 GEMM")
    a = _tn_operand(A, layout[0] == "T", "A")  # N x K
    b = _tn_operand(B, layout[1] == "N", "B")  # M x K
    dtype = out.dtype if out is not None else (out_dtype or torch.float32)
    result = _emulated_scaled_mm(b, a.t(), B._scale_inv.reshape(()).float(), A._scale_inv.reshape(()).float(),
                                 bias, dtype)
    if out is not None:
        if accumulate:
            out.add_(result)
        else:
            out.copy_(result)
        result = out
    return result, None, None, None


def general_gemm(A, B, out_dtype: Optional[torch.dtype] = None, quantization_params=None, gelu: bool = False,
                 gelu_in=None, alpha: float = 1.0, beta=None, accumulate: bool = False, layout: str = "TN",
                 out: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                 use_split_accumulator: bool = False, grad: bool = False, ub=None, ub_type=None,
                 extra_output=None, bulk_overlap: bool = False):
    assert layout in ("TN", "NN", "NT"), f"GEMM layout {layout} not supported."
    if ub is not None or ub_type is not None or extra_output is not None or bulk_overlap or gelu:
        raise NotImplementedError("the TransformerEngine stand-in has no userbuffers or GELU-fused GEMMs")
    if quantization_params is not None:
        raise NotImplementedError("the TransformerEngine stand-in does not quantize GEMM outputs")
    if out is not None and not out.is_contiguous():
        raise ValueError("Output tensor is not contiguous.")
    if _is_fp8(A) or _is_fp8(B):
        return _fp8_gemm(A, B, layout, out_dtype, accumulate, out, bias, grad)
    a, b = _plain(A), _plain(B)
    dtype = out.dtype if out is not None else (out_dtype or b.dtype)
    if layout == "TN":
        result = b.matmul(a.t())
    elif layout == "NN":
        result = b.matmul(a)
    else:
        result = b.t().matmul(a)
    result = result * alpha if alpha != 1.0 else result
    bias_grad = None
    if bias is not None:
        if grad:
            bias_grad = b.sum(dim=0).to(bias.dtype)
        else:
            result = result + bias.to(result.dtype)
    if out is not None:
        if accumulate:
            out.add_(result.to(out.dtype))
        else:
            out.copy_(result)
        result = out
    else:
        result = result.to(dtype)
    return result, bias_grad, None, None


def general_grouped_gemm(A: list, B: list, out: list, quantization_params: list, out_dtype: torch.dtype,
                         layout: str = "TN", m_splits: Optional[list] = None, gelu: bool = False, grad=False,
                         accumulate: bool = False, bias: Optional[list] = None, use_bias: bool = False,
                         use_split_accumulator: bool = False, D_dtype=None, single_output=False):
    """TE v2.11 lines 213-316: one GEMM per group with ``general_gemm``'s layouts; with
    ``single_output`` the groups write consecutive row blocks of ``out[0]`` (``m_splits`` rows each).
    With ``grad`` and ``use_bias`` the second result is each group's bias gradient (column sums of
    ``B[i]``, fresh tensors as TE allocates them, 248-251); else the biases given (or numel-0
    tensors). A group with an empty operand runs no GEMM: its output is zeroed (unless accumulating)
    and so is its bias gradient (``csrc/extensions/gemm.cpp`` 470-477). FP8 operands go through
    ``general_gemm``'s FP8 path with its leading-dimension check: a group whose rows are not a
    multiple of 16 fails the weight-gradient GEMM (its rows are that GEMM's k), which is why
    megatron pads the experts' splits under FP8 (Fp8Padding, --moe-router-padding-for-fp8).
    Returns (out, grad_bias or bias, gelu_input: numel-0 tensors) as TE does."""
    num_gemms = len(A)
    if gelu:
        raise NotImplementedError("the TransformerEngine stand-in has no GELU-fused grouped GEMM")
    if any(q is not None for q in quantization_params):
        raise NotImplementedError("the TransformerEngine stand-in does not quantize grouped GEMM outputs")
    empty_tensors = [torch.empty(0)] * num_gemms
    if grad and use_bias:
        grad_bias = [torch.empty(B[i].size(1), dtype=out[0].dtype) for i in range(num_gemms)]
    else:
        grad_bias = empty_tensors
    outs = out
    if single_output:
        starts = [sum(m_splits[:i]) for i in range(num_gemms)]
        outs = [out[0][s:s + m] for s, m in zip(starts, m_splits)]
    for i in range(num_gemms):
        if _numel(A[i]) == 0 or _numel(B[i]) == 0:  # csrc/extensions/gemm.cpp 470-477: skipped, outputs zeroed
            if outs[i].numel() and not accumulate:
                outs[i].zero_()
            if grad and use_bias:
                grad_bias[i].zero_()
            continue
        gemm_bias = bias[i] if use_bias else None
        _, bias_or_grad, _, _ = general_gemm(A[i], B[i], layout=layout, accumulate=accumulate, out=outs[i],
                                             bias=gemm_bias, grad=grad)
        if grad and use_bias:
            grad_bias[i].copy_(bias_or_grad)
    return out, (grad_bias if grad else (bias if use_bias else empty_tensors)), empty_tensors


def _numel(t) -> int:
    import math

    return math.prod(t.size())
