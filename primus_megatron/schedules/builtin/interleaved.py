"""Interleaved 1F1B: Megatron's virtual pipeline (loop placement, >= 2 chunks per rank)."""
from __future__ import annotations

from ..ir import BW, LOOP, F, Op, Pair, Schedule, flatten_pairs
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
    return _interleaved(pp, microbatches, chunks, combined=False)


def combined_1f1b(pp: int, microbatches: int, *, chunks: int = 2) -> Schedule:
    """megatron-core's combined 1F1B for interleaved pipelining (`overlap_moe_expert_parallel_comm`) as
    our schedule, with its overlapped pairs; not a registered schedule (megatron's, run as a baseline:
    emulation/baselines.py). megatron-core 0.16.1, pipeline_parallel/schedules.py: with the flag, one
    warm-up forward more than interleaved 1F1B's (get_pp_rank_microbatches, 775-779: "the forward and
    backward computations are independent in all 1f1b steps"); each steady-state step k runs forward
    k + warm-up and backward k as one call of forward_backward_helper_wrapper (1717-1734), which with
    the flag is combined_1f1b_schedule_for_interleaved_pipelining (1322-1345; combined_1f1b.py:111-234,
    one combined_forward_backward_step with both halves); warm-up forwards (1459) and cool-down
    backwards (1839) run alone (the other half None)."""
    ranks = _interleaved(pp, microbatches, chunks, combined=True)
    flat = [flatten_pairs(r) for r in ranks]
    return Schedule("megatron-combined-1f1b", pp, microbatches, chunks, LOOP, tuple(ops for ops, _ in flat),
                    {}, tuple(starts for _, starts in flat))


def _interleaved(pp: int, microbatches: int, chunks: int, *, combined: bool) -> list[list]:
    fwd = _virtual_order(pp, microbatches, chunks, True)
    bwd = _virtual_order(pp, microbatches, chunks, False)
    total = len(fwd)
    ranks = []
    for r in range(pp):
        # Megatron's warm-up depth: the first backward of chunk v-1 needs the
        # first group to cross every earlier virtual stage (combined: one more, combined_1f1b's doc)
        group = len(_groups(pp, microbatches)[0])
        warmup = min(total, (pp - r - 1) * 2 + (chunks - 1) * group + (1 if combined else 0))
        ops: list = [Op(F, mb, c) for mb, c in fwd[:warmup]]         # warm-up:   F F F
        for i in range(total - warmup):                               # steady:    F BW (combined: one Pair)
            f, b = Op(F, *fwd[warmup + i]), Op(BW, *bwd[i])
            ops += [Pair(f, b)] if combined else [f, b]
        ops += [Op(BW, mb, c) for mb, c in bwd[total - warmup:]]      # cool-down: BW BW
        ranks.append(ops)
    return ranks
