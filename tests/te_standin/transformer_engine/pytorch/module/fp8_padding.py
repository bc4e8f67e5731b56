"""Stand-in for TE v2.11 ``pytorch/module/fp8_padding.py`` and ``fp8_unpadding.py`` (commit
c188b533): ``Fp8Padding`` pads each group's rows of a grouped GEMM's input with zero rows up to
the recipe's alignment (``get_align_size_for_quantization``: 16, 32 for MXFP8), ``Fp8Unpadding``
drops them again; each one's backward is the other's forward on the gradient. Nothing is copied
when every split is already aligned (what megatron's ``--moe-router-padding-for-fp8`` arranges by
routing extra tokens). ``tex.fused_multi_row_padding`` / ``fused_multi_row_unpadding``
(``common/util/padding.cu``) write the padding rows as zeros."""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from ..quantization import FP8GlobalStateManager, get_align_size_for_quantization


def _resplit(inp: torch.Tensor, splits: List[int], new_splits: List[int]) -> torch.Tensor:
    """``tex.fused_multi_row_padding`` (splits -> padded splits: each split's rows, then zero rows) and
    ``fused_multi_row_unpadding`` (padded -> unpadded: each split's first rows), one copy loop."""
    out = torch.zeros([sum(new_splits), inp.shape[-1]], dtype=inp.dtype, device=inp.device)
    src = dst = 0
    for m, new in zip(splits, new_splits):
        rows = min(m, new)
        out[dst:dst + rows] = inp[src:src + rows]
        src, dst = src + m, dst + new
    return out


class _Resplit(torch.autograd.Function):
    """``_Fp8Padding`` (fp8_padding.py lines 20-71) and ``_Fp8Unpadding`` (fp8_unpadding.py 20-69): the
    forward re-splits the rows, the backward re-splits the gradient the other way."""

    @staticmethod
    def forward(ctx, inp: torch.Tensor, non_tensor_args: Tuple) -> torch.Tensor:
        splits, new_splits, is_grad_enabled = non_tensor_args
        out = _resplit(inp.view(-1, inp.shape[-1]), splits, new_splits)
        if is_grad_enabled:
            ctx.splits, ctx.new_splits, ctx.requires_dgrad = splits, new_splits, inp.requires_grad
        return out

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_input = None
        if ctx.requires_dgrad:
            grad_output = grad_output.contiguous()
            grad_input = _resplit(grad_output.view(-1, grad_output.shape[-1]), ctx.new_splits, ctx.splits)
        return grad_input, None


class _Padding(torch.nn.Module):
    def __init__(self, num_gemms: int, align_size: Optional[int] = None) -> None:
        super().__init__()
        self.num_gemms = num_gemms
        self.align_size = align_size

    def _padded(self, m_splits: List[int]) -> List[int]:
        """fp8_padding.py lines 115-123: the alignment from the recipe at the first forward."""
        assert len(m_splits) == self.num_gemms, "Number of splits should match number of GEMMs."
        if self.align_size is None:
            self.align_size = get_align_size_for_quantization(FP8GlobalStateManager.get_fp8_recipe())
        return [(m + self.align_size - 1) // self.align_size * self.align_size for m in m_splits]

    @staticmethod
    def _run(inp: torch.Tensor, splits: List[int], new_splits: List[int]) -> torch.Tensor:
        is_grad_enabled = torch.is_grad_enabled()
        args = (splits, new_splits, is_grad_enabled)
        return _Resplit.apply(inp, args) if is_grad_enabled else _Resplit.forward(None, inp, args)


class Fp8Padding(_Padding):
    def forward(self, inp: torch.Tensor, m_splits: List[int]) -> Tuple[torch.Tensor, List[int]]:
        """fp8_padding.py lines 99-144."""
        padded_m_splits = self._padded(m_splits)
        if m_splits == padded_m_splits:
            return inp, m_splits
        return self._run(inp, m_splits, padded_m_splits), padded_m_splits


class Fp8Unpadding(_Padding):
    def forward(self, inp: torch.Tensor, m_splits: List[int]) -> torch.Tensor:
        """fp8_unpadding.py lines 97-142."""
        padded_m_splits = self._padded(m_splits)
        if m_splits == padded_m_splits:
            return inp
        return self._run(inp, padded_m_splits, m_splits)
