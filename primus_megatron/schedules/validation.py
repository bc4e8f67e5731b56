"""Validation: completeness, W order, dependency order, memory, and hang-freedom.

`validate` compiles the schedule once (`compiled`: every op a compute op with
a microbatch and chunk in range), checks its overlapped pairs (`check_pairs`: an
F followed by a B or BW), that it is complete and that each
chunk's W ops run in microbatch order (`check_w_order`), runs it under its
costs (the order is satisfiable: no rank waits forever; the run also orders
the messages, `lowering.ordering_costs`), checks its peak memory, lowers it
to batches of sends and receives and proves those cannot hang on NCCL/RCCL
under either communicator init (`rendezvous`).
"""
from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Optional

from .compiled import Compiled, compile_schedule
from .costs import UNIT, Costs
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import B, BW, COMPUTE_KINDS, F, W, Schedule
from .lowering import EARLY, Lowered, lower, ordering_costs
from .p2p_groups import ONE
from .rendezvous import check_channels
from .simulation import end_times, peak_memory

__all__ = ["check_channels", "check_complete", "check_memory", "check_pairs", "check_w_order", "validate"]

_KIND, _STAGE = attrgetter("kind"), attrgetter("stage")


def check_pairs(schedule: Schedule) -> None:
    """Each overlapped pair (`Schedule.pairs`) is an F followed by a B or BW on the same rank, and no op
    belongs to two pairs. (A pair whose B half needs its own F half's result cannot start: the run,
    `end_times`, names it as a deadlock.)"""
    if schedule.pairs and len(schedule.pairs) != schedule.pp:
        raise ScheduleError(f"schedule {schedule.name!r} names overlapped pairs for {len(schedule.pairs)} ranks, "
                            f"not {schedule.pp}")
    for r, starts in enumerate(schedule.pairs):
        ops = schedule.ranks[r]
        for p in sorted(starts):
            if not 0 <= p < len(ops) - 1:
                raise ScheduleError(f"rank {r}: an overlapped pair at position {p} has no second op "
                                    f"({len(ops)} ops)")
            first, second = ops[p], ops[p + 1]
            if first.kind != F or second.kind not in (B, BW):
                raise ScheduleError(f"rank {r}: an overlapped pair must be an F and then a B or BW, got {first} and "
                                    f"{second} at positions {p}, {p + 1}")
            if p + 1 in starts:
                raise ScheduleError(f"rank {r}: op {second} (position {p + 1}) is in two overlapped pairs")


def check_complete(schedule: Schedule) -> None:
    """Every (microbatch, stage) has one F and one B + one W, or one BW, on its owner
    (only the F for a forward-only schedule: `meta["forward_only"]`). Raises naming the
    first problem: a malformed op (rank, then op order), an op run twice (the first
    such op, rank then op order), then a missing op (stage, then microbatch order)."""
    compiled = compile_schedule(schedule)
    m, chunks = schedule.microbatches, schedule.chunks_per_rank
    forward_only = bool(schedule.meta.get("forward_only"))
    need = m * chunks
    counts_ok = True
    for r, rules in enumerate(compiled.rules):
        ops = schedule.ranks[r] if r < len(schedule.ranks) else ()
        if len(set(ops)) != len(ops):
            _raise_twice(compiled, r)
        counts = Counter(map(_KIND, rules))
        if forward_only:
            counts_ok &= counts[F] == need and counts[B] == counts[W] == counts[BW] == 0
        else:  # each (microbatch, stage) its B and W, or its BW: a rank may mix them (DualPipeV does)
            counts_ok &= counts[F] == need and counts[B] == counts[W] and counts[B] + counts[BW] == need
    if not counts_ok:
        _raise_missing(compiled, forward_only)


def _raise_twice(compiled: Compiled, r: int) -> None:
    """Name the first op of rank r (in op order of first appearance) that runs more than once."""
    ops = compiled.schedule.ranks[r]
    first = {}
    for i, op in enumerate(ops):
        first.setdefault(op, i)
    for op, times in Counter(ops).items():
        if times > 1:
            stage = compiled.rules[r][first[op]].stage
            raise ScheduleError(f"rank {r} runs {op.kind} of microbatch {op.mb} at stage {stage} {times} times")


def _raise_missing(compiled: Compiled, forward_only: bool) -> None:
    """Name the first (stage, microbatch) whose ops are not one F and B + W, or BW."""
    schedule = compiled.schedule
    seen = set()
    for rules, mbs in zip(compiled.rules, compiled.mbs):
        seen.update(zip(map(_KIND, rules), mbs, map(_STAGE, rules)))
    for stage in range(schedule.num_stages):
        rank = schedule.owner(stage)[0]
        for mb in range(schedule.microbatches):
            has = {k for k in COMPUTE_KINDS if (k, mb, stage) in seen}
            if F not in has:
                raise ScheduleError(f"rank {rank} has no F for microbatch {mb} at stage {stage}")
            if forward_only:
                if has - {F}:
                    raise ScheduleError(f"forward-only schedule runs {', '.join(sorted(has - {F}))} for microbatch {mb} at stage {stage}")
                continue
            if has & {B, W, BW} not in ({B, W}, {BW}):
                got = ", ".join(sorted(has - {F})) or "nothing"
                raise ScheduleError(f"rank {rank} must run B and W, or BW, for microbatch {mb} at stage {stage}, but runs {got}")


def check_w_order(schedule: Schedule) -> None:
    """On every rank, each chunk's W ops run in microbatch order.

    Why: megatron passes `is_first_microbatch=True` to a TransformerEngine layer's
    first forward of a step, and that microbatch's weight-gradient GEMM then
    overwrites `main_grad` instead of adding to it (TE v2.11 `module/linear.py`
    834-838, `accumulate = not is_first_microbatch` with fuse_wgrad_accumulation);
    megatron resets the flag every step under FP8/FP4 (megatron-core 0.16.1
    `pipeline_parallel/schedules.py:404-405`). The W of microbatch 0 must be the
    chunk's first, and a rank that keeps microbatch order keeps it for every
    layer. Raises naming the rank, the chunk and the two microbatches of the
    first W that runs ahead of a smaller microbatch's."""
    for r, ops in enumerate(schedule.ranks):
        per_chunk: dict[int, list[int]] = {}
        for op in ops:
            if op.kind == W:
                per_chunk.setdefault(op.chunk, []).append(op.mb)
        for chunk, mbs in sorted(per_chunk.items()):
            in_order = sorted(mbs)
            if mbs == in_order:
                continue
            i = next(i for i, (mb, want) in enumerate(zip(mbs, in_order)) if mb != want)
            stage = schedule.stage_table[r][chunk]
            raise ScheduleError(f"rank {r} runs the W of microbatch {mbs[i]} before the W of microbatch "
                                f"{in_order[i]} on chunk {chunk} (stage {stage}): each chunk's W ops must run in "
                                f"microbatch order, since the first microbatch's weight-gradient GEMM of a "
                                f"TransformerEngine layer overwrites main_grad")


def check_memory(schedule: Schedule, costs: Optional[Costs], memory_limit: Optional[float]) -> list[float]:
    """Per-rank peak activation memory; raises if a rank exceeds `memory_limit`."""
    sc = (costs or schedule.meta.get("costs") or UNIT).resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement,
                                                                schedule.microbatches)
    peaks = peak_memory(schedule, sc)
    if memory_limit is not None:
        for r, peak in enumerate(peaks):
            if peak > memory_limit + 1e-9:
                raise ScheduleError(f"schedule {schedule.name!r} needs {peak:g} activation units on rank {r}, "
                                    f"above the memory limit of {memory_limit:g}")
    return peaks


@gc_paused
def validate(schedule: Schedule, *, costs: Optional[Costs] = None, memory_limit: Optional[float] = None,
             recv_policy: str = EARLY, p2p_groups: str = ONE) -> Lowered:
    """Run every check; return the lowered schedule that passed them, its receives posted
    as `recv_policy` says (`lowering.RECV_POLICIES`), proven hang-free with its messages on
    the process groups `p2p_groups` says (`p2p_groups.P2P_GROUPS`)."""
    check_pairs(schedule)
    check_complete(schedule)
    check_w_order(schedule)
    ends = end_times(schedule, ordering_costs(schedule, costs))  # raises where the order cannot run
    check_memory(schedule, costs, memory_limit)
    lowered = lower(schedule, ends, recv_policy=recv_policy, p2p_groups=p2p_groups)
    check_channels(lowered)
    return lowered
