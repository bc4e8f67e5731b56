"""Interleaved 1F1B: Megatron's virtual pipeline (loop placement, >= 2 chunks per rank)."""
from __future__ import annotations

from ..ir import BW, F, Op
from ..registry import register


def _groups(pp: int, m: int) -> list[range]:
    """Microbatch groups that pass the chunks together: Megatron uses groups of
    pp; for counts that are not multiples of pp we spread the remainder over
    the groups, larger groups first (a smaller group ahead of a larger one, or
    a tiny trailing group, deadlocks the 1F1B pairing)."""
    count = max(1, m // pp)
    sizes = [m // count + (1 if i < m % count else 0) for i in range(count)]
    starts = [sum(sizes[:i]) for i in range(count)]
    return [range(a, a + n) for a, n in zip(starts, sizes)]


def _virtual_order(pp: int, m: int, chunks: int, forward: bool) -> list[tuple[int, int]]:
    """(microbatch, chunk) in Megatron's order: each group passes through
    chunk 0, 1, ... (forward) or ..., 1, 0 (backward)."""
    order = []
    for group in _groups(pp, m):
        for c in (range(chunks) if forward else reversed(range(chunks))):
            order += [(mb, c) for mb in group]
    return order


@register("interleaved-1f1b", order=20, chunks=2, variable_chunks=True, memory="~1.5x",
          description="Megatron's interleaved (virtual pipeline) 1F1B, full backward",
          splits_backward=False)
def interleaved_1f1b(pp: int, microbatches: int, *, chunks: int, **_) -> list[list[Op]]:
    fwd = _virtual_order(pp, microbatches, chunks, True)
    bwd = _virtual_order(pp, microbatches, chunks, False)
    total = len(fwd)
    ranks = []
    for r in range(pp):
        # Megatron's warm-up depth: the first backward of chunk v-1 needs the
        # first group to cross every earlier virtual stage.
        group = len(_groups(pp, microbatches)[0])
        warmup = min(total, (pp - r - 1) * 2 + (chunks - 1) * group)
        ops = [Op(F, mb, c) for mb, c in fwd[:warmup]]               # warm-up:   F F F
        for i in range(total - warmup):                               # steady:    F BW
            ops.append(Op(F, *fwd[warmup + i]))
            ops.append(Op(BW, *bwd[i]))
        ops += [Op(BW, mb, c) for mb, c in bwd[total - warmup:]]      # cool-down: BW BW
        ranks.append(ops)
    return ranks
