"""Interleaved zero bubble: Megatron's virtual-pipeline order with the backward
split into B and W, and W delayed as in ZB-H1 (loop placement, 1F1B memory)."""
from __future__ import annotations

from ..ir import B, F, W, Op
from ..registry import register
from .interleaved import _groups, _virtual_order


@register("interleaved-zb", order=25, chunks=2, variable_chunks=True, memory="1x",
          description="interleaved 1F1B order, backward split, W delayed to fill bubbles (loop placement)",
          splits_backward=True)
def interleaved_zb(pp: int, microbatches: int, *, chunks: int, **_) -> list[list[Op]]:
    fwd = _virtual_order(pp, microbatches, chunks, True)
    bwd = _virtual_order(pp, microbatches, chunks, False)
    total = len(fwd)
    group = len(_groups(pp, microbatches)[0])
    ranks = []
    for r in range(pp):
        # One F per later rank (not Megatron's two): W, not F, fills the wait for gradients.
        warmup = min(total, (pp - r - 1) + (chunks - 1) * group)
        delay = r  # rank r may hold r more activations than rank 0 (ZB-H1's rule)
        ops = [Op(F, mb, c) for mb, c in fwd[:warmup]]                   # warm-up:   F F F
        for i in range(total):                                            # steady:    F B W
            if warmup + i < total:
                ops.append(Op(F, *fwd[warmup + i]))
            ops.append(Op(B, *bwd[i]))
            if i >= delay:
                ops.append(Op(W, *bwd[i - delay]))
        ops += [Op(W, mb, c) for mb, c in bwd[max(0, total - delay):]]   # flush:     W W W
        ranks.append(ops)
    return ranks
