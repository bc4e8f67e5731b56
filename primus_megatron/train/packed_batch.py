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
only when none is); TransformerEngine's attention with a causal mask type ignores it, and needs the
`thd` format with `cu_seqlens` (`PackedSeqParams`) instead, which the TE stand-in does not
reproduce yet: packed data is refused with TE layers where the options are checked.
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
    return {"tokens": tokens[None], "labels": labels[None], "loss_mask": loss_mask[None],
            "attention_mask": masked[None, None], "position_ids": position_ids[None]}


def _block(masked: torch.Tensor, position_ids: torch.Tensor, start: int, n: int) -> int:
    """Positions [start, start + n) as one causal sequence: returns where the next one starts."""
    end = start + n
    masked[start:end, start:end] = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    position_ids[start:end] = torch.arange(n)
    return end


def alone(sample: torch.Tensor) -> dict:
    """`sample` as a microbatch of its own (the reference a packed run must equal)."""
    return pack([sample], len(sample) - 1)
