"""Samples of different lengths packed into one fixed-length microbatch (`--pipeline-balance-data`).

A packed microbatch is megatron's GPT batch layout ([1, seq] tokens, labels, loss_mask,
position_ids and a [1, 1, seq, seq] boolean attention mask, True = masked) holding several samples
end to end, each seeing only itself: position ids restart at 0 at every sample and the mask is
causal inside each sample and blocks every other (what GPTDataset builds with
`reset_position_ids` and `reset_attention_mask`). A sample's per-token losses are then those of the
sample run alone, so with the loss normalised by the global token count (megatron's
`calculate_per_token_loss`) the gradients do not depend on how samples were packed or split over
the data-parallel replicas. The tail after the last sample is padding: loss_mask 0, and a causal
block of its own, so no row of the softmax is fully masked.

megatron-core's local attention applies the mask given (FusedScaleMaskSoftmax builds a causal one
only when none is). TransformerEngine's attention with a causal mask type ignores it: with TE layers
the same pack runs in megatron-core's `thd` format instead, `packed_seq_params(batch)` passed as
GPTModel.forward's `packed_seq_params` and no attention mask. The batch's `cu_seqlens` (int32)
bound every sample and then the padding, a sequence of its own: TE's attention (padding_causal,
which megatron-core's TEDotProductAttention picks for thd) keeps each one to itself, megatron-core's
RoPE restarts at each (position ids are read by a learned position embedding only), and every
backend returns all `seq_length` rows (TE v2.11's fp32 backend returns only `cu_seqlens[-1]` rows;
bf16's zeroes rows outside every sequence), the padding's included, as the local path does.
Examples/pretrain_gpt.py builds local layers; with TE layers this path serves megatron-core API
callers (the production matrix's `l-balance-*-te` rows), and `--pipeline-balance-data` still refuses
them where the options are checked.
"""
from __future__ import annotations

from typing import Sequence

import torch


def pack(samples: Sequence[torch.Tensor], seq_length: int) -> dict:
    """One packed microbatch of `samples` (1-D token tensors; a sample of n + 1 tokens trains n
    positions, token i predicting token i + 1) in `seq_length` positions."""
    lengths = [len(s) - 1 for s in samples]
    if min(lengths, default=0) < 1 or sum(lengths) > seq_length:
        raise ValueError(f"a packed microbatch holds samples of at least 2 tokens and at most {seq_length} "
                         f"trained positions in all, got lengths {lengths}")
    tokens = torch.zeros(seq_length, dtype=torch.long)
    labels = torch.zeros(seq_length, dtype=torch.long)
    loss_mask = torch.zeros(seq_length, dtype=torch.float)
    position_ids = torch.zeros(seq_length, dtype=torch.long)
    masked = torch.ones(seq_length, seq_length, dtype=torch.bool)
    start = 0
    for sample, n in zip(samples, lengths):
        tokens[start:start + n] = sample[:-1]
        labels[start:start + n] = sample[1:]
        loss_mask[start:start + n] = 1.0
        start = _block(masked, position_ids, start, n)
    if start < seq_length:
        _block(masked, position_ids, start, seq_length - start)  # padding, trained nowhere
    blocks = lengths + ([seq_length - start] if start < seq_length else [])
    cu_seqlens = torch.tensor([0] + blocks, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return {"tokens": tokens[None], "labels": labels[None], "loss_mask": loss_mask[None],
            "attention_mask": masked[None, None], "position_ids": position_ids[None],
            "cu_seqlens": cu_seqlens, "max_seqlen": max(blocks)}


def packed_seq_params(batch: dict):
    """megatron-core's PackedSeqParams of a packed microbatch: the `thd` format over its `cu_seqlens`
    (every sample, then the padding), for GPTModel.forward(..., attention_mask=None,
    packed_seq_params=...) with TransformerEngine layers (module doc)."""
    from megatron.core.packed_seq_params import PackedSeqParams

    cu, longest = batch["cu_seqlens"], int(batch["max_seqlen"])
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                           max_seqlen_q=longest, max_seqlen_kv=longest)


def _block(masked: torch.Tensor, position_ids: torch.Tensor, start: int, n: int) -> int:
    """Positions [start, start + n) as one causal sequence: returns where the next one starts."""
    end = start + n
    masked[start:end, start:end] = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    position_ids[start:end] = torch.arange(n)
    return end


def alone(sample: torch.Tensor) -> dict:
    """`sample` as a microbatch of its own (the reference a packed run must equal)."""
    return pack([sample], len(sample) - 1)
