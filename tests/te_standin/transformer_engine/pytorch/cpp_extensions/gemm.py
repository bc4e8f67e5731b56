"""Stand-in for TE v2.11 ``pytorch/cpp_extensions/gemm.py`` ``general_gemm`` (lines 45-200 at
commit c188b533) in plain torch: cuBLAS's column-major layouts as TE's modules use them
(``"TN"``: B @ A^T, the forward; ``"NN"``: B @ A, the input gradient; ``"NT"``: B^T @ A, the
weight gradient), ``out`` with ``accumulate``, and ``bias``: added to the output in the forward,
its gradient (the column sums of B) returned as the second output when ``grad`` (the fused
bias gradient of the weight-gradient GEMM). Quantized operands are multiplied as their
dequantized values (exact here: tensor/float8_tensor.py). Returns (out, bias_grad, gelu_input,
extra_output) as TE does. Userbuffers, GELU fusion and quantized outputs are not reproduced."""
from __future__ import annotations

from typing import Optional

import torch


def _plain(x):
    from ..quantized_tensor import QuantizedTensorStorage

    return x.dequantize() if isinstance(x, QuantizedTensorStorage) else x


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
    tensors). Returns (out, grad_bias or bias, gelu_input: numel-0 tensors) as TE does."""
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
        gemm_bias = bias[i] if use_bias else None
        _, bias_or_grad, _, _ = general_gemm(A[i], B[i], layout=layout, accumulate=accumulate, out=outs[i],
                                             bias=gemm_bias, grad=grad)
        if grad and use_bias:
            grad_bias[i].copy_(bias_or_grad)
    return out, (grad_bias if grad else (bias if use_bias else empty_tensors)), empty_tensors
