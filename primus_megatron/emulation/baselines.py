"""The baselines a launch runs beside our schedule, in the same processes on the same emulated
chunks: megatron-core's own 1F1B and interleaved 1F1B (its `forward_backward_func`),
megatron's combined 1F1B (`--overlap-moe-expert-parallel-comm`) and torch.distributed.pipelining's
zero-bubble schedules (their stages: `torch_stages`). Here: their names, their plans (torch's compute
order as our Schedule, for the simulation), and why a shape is skipped (the constraint of megatron's or
torch's it breaks).

megatron's combined 1F1B cannot run on emulated chunks (its combined step needs a GPTModel's schedule
plan): `megatron-combined-1f1b` is its order with its pairs written in our IR
(`builtin.interleaved.combined_1f1b`), run by our runtime, whose pairs on emulated chunks take the
pair's time (`chunks`). torch's ScheduleDualPipeV (torch 2.13) runs its OVERLAP_F_B actions as the F
then the full backward, one after the other (`_PipelineScheduleRuntime._step_microbatches`: the
sub-actions in turn, unless a function is registered for OVERLAP_F_B with `register_custom_function`,
which this baseline does not): each half takes its whole time, and its plan here has no pairs."""
from __future__ import annotations

import warnings
from typing import Optional

from .. import schedules as S
from .variants import Variant, make_variant

MEGATRON_1F1B = "megatron-1f1b"
MEGATRON_INTERLEAVED = "megatron-interleaved"
MEGATRON_COMBINED = "megatron-combined-1f1b"  # its order and pairs as our schedule, run by our runtime (module doc)
# torch.distributed.pipelining's zero-bubble schedules (SCHEDULES)
TORCH_BASELINES = ("torch-interleaved-zb", "torch-zbv", "torch-dualpipev")
BASELINES = (MEGATRON_1F1B, MEGATRON_INTERLEAVED, MEGATRON_COMBINED, *TORCH_BASELINES)

# our label -> (torch class, placement of its stages, chunks per rank)
SCHEDULES = {
    "torch-interleaved-zb": ("ScheduleInterleavedZeroBubble", "loop", 2),
    "torch-zbv": ("ScheduleZBVZeroBubble", "v", 2),
    "torch-dualpipev": ("ScheduleDualPipeV", "v", 2),
}
_KINDS = {"F": "F", "I": "B", "W": "W", "B": "BW"}


def torch_order(label: str, pp: int, microbatches: int):
    """torch's compute order for `label` as our Schedule (for the simulation; its I is our B). ValueError:
    torch refuses the shape (its own message: the constraint it breaks)."""
    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    from ..schedules import ir

    cls_name, placement, chunks = SCHEDULES[label]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = get_schedule_ops(getattr(ts, cls_name), pp, microbatches, num_stages_per_rank=chunks)
    ranks = []
    for rank, row in enumerate(rows):
        actions = [a for a in row if a is not None]
        flat = [sub for a in actions for sub in (a.sub_actions or (a,))]  # DualPipeV's OVERLAP_F_B: F then B
        ops = []
        for a in flat:
            owner, chunk = ir.owner_of(placement, pp, a.stage_index)
            if owner != rank:
                raise ValueError(f"torch puts stage {a.stage_index} on rank {rank}, not on {owner}")
            ops.append(ir.Op(_KINDS[a.computation_type.value], a.microbatch_index, chunk))
        ranks.append(tuple(ops))
    return ir.Schedule(label, pp, microbatches, chunks, placement, tuple(ranks))


def torch_variant(label: str, pp: int, microbatches: int, costs: S.Costs, *, scale: float) -> Variant:
    """torch's `label` schedule as a baseline, or a skipped variant saying which of torch's constraints
    this shape breaks (torch's own message)."""
    try:
        order = torch_order(label, pp, microbatches)
    except ValueError as exc:
        return Variant(label, S.generate("1f1b", pp, microbatches), False, [], {}, torch=True,
                       skipped=f"torch's {SCHEDULES[label][0]} refuses pp={pp}, {microbatches} microbatches: {exc}")
    return make_variant(label, order, costs, scale=scale, torch=True)


def baseline_variant(base: str, sched: S.Schedule, pp: int, microbatches: int, costs: S.Costs, *,
                     chunks: Optional[int], scale: float) -> Variant:
    """Baseline `base` of a launch whose own plan is `sched` (`planning.plan`): megatron's 1F1B, its
    interleaved 1F1B or combined 1F1B (`chunks` per rank where 2 or more are given, else 2) or torch's
    `base`; a skipped variant where this shape breaks the baseline's constraints."""
    if base == MEGATRON_1F1B:
        return make_variant(base, S.generate("1f1b", pp, microbatches), costs, scale=scale, megatron=True)
    if base in TORCH_BASELINES:
        return torch_variant(base, pp, microbatches, costs, scale=scale)
    n = chunks if chunks and chunks >= 2 else 2
    if microbatches % pp:
        # megatron-core 0.16.1 schedules.py:995-1015 (groups of pp microbatches per virtual stage)
        return Variant(base, sched, True, [], {}, skipped=f"megatron's interleaved schedule needs the "
                       f"microbatch count to be a multiple of pp ({microbatches} is not of {pp})")
    if base == MEGATRON_COMBINED:
        from ..schedules.builtin.interleaved import combined_1f1b

        return make_variant(base, combined_1f1b(pp, microbatches, chunks=n), costs, scale=scale)
    return make_variant(base, S.generate("interleaved-1f1b", pp, microbatches, chunks=n), costs, scale=scale,
                        megatron=True)
