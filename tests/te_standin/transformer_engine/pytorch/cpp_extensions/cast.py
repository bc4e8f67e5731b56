"""Stand-ins for the ``transformer_engine_torch`` casts GroupedLinear calls (TE v2.11, commit
c188b533): ``split_quantize`` (``csrc/extensions/cast.cpp`` lines 913-1054: the input split along
its first dimension, each split cast by its own quantizer; an empty split is allocated but not cast,
so its quantizer records no amax, 278-280 and 503-505 of ``csrc/quantizer.cpp``) and
``bgrad_quantize`` (``csrc/extensions/bias.cpp`` lines 22-104: the bias gradient, the column sums in
the gradient's dtype accumulated in fp32, and the quantized gradient; zeros for an empty one)."""
from __future__ import annotations

from typing import List, Sequence

import torch


def split_quantize(tensor: torch.Tensor, split_sections: Sequence[int], quantizer_list: Sequence) -> List:
    if len(quantizer_list) != len(split_sections):
        raise RuntimeError(f"Expected {len(split_sections)} quantizers, but got {len(quantizer_list)}")  # 920-921
    tensor = tensor.contiguous()
    if sum(split_sections) > tensor.shape[0]:  # 945-947
        raise RuntimeError(f"Attempted to split tensor with shape={list(tensor.shape)} along dim 0 with "
                           f"split_sections={list(split_sections)}")
    parts = torch.split(tensor[:sum(split_sections)], list(split_sections))
    return [quantizer(part) for part, quantizer in zip(parts, quantizer_list)]


def bgrad_quantize(grad_output: torch.Tensor, quantizer) -> list:
    grad_output = grad_output.contiguous()
    flat = grad_output.reshape(-1, grad_output.shape[-1])
    if flat.numel() == 0:  # lines 51-55
        return [torch.zeros(grad_output.shape[-1], dtype=grad_output.dtype, device=grad_output.device),
                quantizer(grad_output)]
    return [flat.sum(dim=0), quantizer(grad_output)]
