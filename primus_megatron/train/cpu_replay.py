"""The executed iteration replayed from each op's CPU time: what the schedule did, seen through
ranks that time-share CPU cores.

When more rank processes than cores run on a host, an op's wall time also counts the time the
operating system gave to other ranks, and the measured timeline is mostly that switching, not
the schedule. On CPU the executor records each op's CPU time beside its wall time
(`runtime.profiler.HostCpuClock`): the work the op did on its rank's one thread. Replaying the
executed order, every op taking its own CPU time and every message the measured p2p latency
(`schedules.replay`), shows the run as one core per rank would have run it: the same order,
the same ops, measured, without the waits for a core.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ..schedules import B, BW, F, W

_WORK = (F, B, W, BW)


class ExecutedOp(NamedTuple):
    """One executed op of a gathered timeline: wall-clock start and end (seconds, or ms once
    shifted), and the CPU seconds (or ms) it used, None where the clock had none (a GPU)."""

    rank: int
    op: Any
    stage: int
    start: float
    end: float
    cpu: Optional[float] = None


def cpu_seconds(record) -> Optional[float]:
    """The CPU time of an executor `OpRecord`, when its clock kept one."""
    clock = getattr(record, "clock", None)
    if clock is None or not hasattr(clock, "cpu_elapsed"):
        return None
    return clock.cpu_elapsed(record.start_mark, record.end_mark)


def p2p_latency(timeline: list[list]) -> float:
    """The shortest gap between an activation's F on one rank and the next stage's F of the same
    microbatch on another: the p2p latency one iteration shows (0 where no message crossed ranks)."""
    ends = {(r.op.mb, r.stage): (r.rank, r.end) for tl in timeline for r in tl if r.op.kind == F}
    gaps = [r.start - ends[(r.op.mb, r.stage - 1)][1] for tl in timeline for r in tl
            if r.op.kind == F and (r.op.mb, r.stage - 1) in ends and ends[(r.op.mb, r.stage - 1)][0] != r.rank]
    return max(0.0, min(gaps)) if gaps else 0.0


def replayed(timeline: list[list[ExecutedOp]]) -> Optional[list[list]]:
    """Each rank's executed ops, in their order, each taking its CPU time, messages the measured
    latency (`p2p_latency`); in the timeline's unit, from 0. None where an op has no CPU time."""
    from ..schedules.replay import replay

    work = [[r for r in tl if r.op.kind in _WORK] for tl in timeline]
    if not any(work) or any(r.cpu is None for tl in work for r in tl):
        return None
    num_stages = 1 + max(r.stage for tl in work for r in tl)
    return replay([[(r.op, r.stage, r.cpu) for r in tl] for tl in work], num_stages, p2p_latency(timeline))


def as_it_ran(timeline: list[list[ExecutedOp]], time_sharing: Optional[tuple[int, int]]) -> tuple[list[list], bool]:
    """The executed iteration as the log and the picture show it, and whether it is replayed: where ranks
    time-share cores (`time_sharing`: (ranks, cores)) the executed order replayed from each op's CPU time
    (the wall clock there is mostly the operating system switching between ranks), else as measured."""
    again = replayed(timeline) if time_sharing else None
    return (again, True) if again is not None else (timeline, False)


def bubble(timeline: list[list]) -> float:
    """1 - busy / (ranks x makespan) of one iteration's timeline (the simulator's sync bubble)."""
    spans = [r for tl in timeline for r in tl]
    if not spans:
        return float("nan")
    start, end = min(r.start for r in spans), max(r.end for r in spans)
    busy = sum(r.end - r.start for r in spans)
    return max(0.0, 1.0 - busy / (len(timeline) * (end - start))) if end > start else 0.0
