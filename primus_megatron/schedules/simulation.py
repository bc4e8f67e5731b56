"""Timing and memory of a schedule under a cost model.

Each rank runs its ops in order; an op starts when the rank is free and its
input is available (p2p latency `comm` added when producer and consumer sit on
different ranks). Communication is modelled as latency only: the executor
posts receives early and never blocks on a send, which `validation` proves
hang-free separately.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .costs import UNIT, Costs, StageCosts
from .deps import Key, describe, needs, produces
from .errors import ScheduleError
from .ir import Op, Schedule


@dataclass(frozen=True)
class Span:
    """One executed op on the timeline."""

    rank: int
    op: Op
    stage: int
    start: float
    end: float


@dataclass
class SimResult:
    schedule: Schedule
    timeline: list[list[Span]]
    makespan: float
    busy: list[float]
    idle: list[float]
    span: list[float]
    peak_memory: list[float]
    bubble_sync: float
    bubble_async: float
    extra: dict = field(default_factory=dict)

    @property
    def max_peak_memory(self) -> float:
        return max(self.peak_memory)

    def stats(self) -> dict:
        """The JSON-friendly summary used by export and the CLI."""
        return {
            "makespan": round(self.makespan, 6),
            "bubble_sync": round(self.bubble_sync, 6),
            "bubble_async": round(self.bubble_async, 6),
            "busy": [round(x, 6) for x in self.busy],
            "idle": [round(x, 6) for x in self.idle],
            "peak_memory": [round(x, 6) for x in self.peak_memory],
        }


def peak_memory(schedule: Schedule, sc: StageCosts) -> list[float]:
    """Per-rank peak of the running activation-memory sum, in op order."""
    peaks = []
    for r, ops in enumerate(schedule.ranks):
        cur = peak = 0.0
        for op in ops:
            cur += sc.memory(op.kind, schedule.stage(r, op))
            peak = max(peak, cur)
        peaks.append(peak)
    return peaks


def op_times(schedule: Schedule, sc: StageCosts) -> list[list[Span]]:
    """Start/end of every op; raises ScheduleError if some rank can never proceed."""
    pp, n = schedule.pp, schedule.num_stages
    done: dict[Key, tuple[float, int, int]] = {}  # key -> (end, rank, stage)
    free = [0.0] * pp
    ptr = [0] * pp
    timeline: list[list[Span]] = [[] for _ in range(pp)]
    waiting: dict[Key, list[int]] = {}
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        ops = schedule.ranks[r]
        while ptr[r] < len(ops):
            op = ops[ptr[r]]
            stage = schedule.stage(r, op)
            ready = free[r]
            blocked = None
            for key in needs(op, stage, n):
                if key not in done:
                    blocked = key
                    break
                end, src_rank, src_stage = done[key]
                ready = max(ready, end + (sc.comm[src_stage] if src_rank != r else 0.0))
            if blocked is not None:
                waiting.setdefault(blocked, []).append(r)
                break
            end = ready + sc.duration(op.kind, stage)
            timeline[r].append(Span(r, op, stage, ready, end))
            free[r] = end
            ptr[r] += 1
            for key in produces(op, stage):
                if key in done:
                    raise ScheduleError(f"rank {r} op {op} computes {describe(key)} a second time")
                done[key] = (end, r, stage)
                todo.extend(waiting.pop(key, ()))
    stuck = [r for r in range(pp) if ptr[r] < len(schedule.ranks[r])]
    if stuck:
        parts = []
        for r in stuck:
            op = schedule.ranks[r][ptr[r]]
            key = needs(op, schedule.stage(r, op), n)[0]
            owner = schedule.owner(key[2])[0] if 0 <= key[2] < n else None
            parts.append(f"rank {r} op {op} waits for {describe(key)}" + (f" (rank {owner})" if owner is not None else ""))
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(parts))
    return timeline


def simulate(schedule: Schedule, costs: Costs | None = None) -> SimResult:
    """Makespan, per-rank busy/idle, peak memory and sync/async bubble rates."""
    sc = (costs or schedule.meta.get("costs") or UNIT).resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement)
    timeline = op_times(schedule, sc)
    pp = schedule.pp
    busy = [sum(s.end - s.start for s in spans) for spans in timeline]
    makespan = max((spans[-1].end for spans in timeline if spans), default=0.0)
    span = [(spans[-1].end - spans[0].start) if spans else 0.0 for spans in timeline]
    period = max(span, default=0.0)
    total = sum(busy)
    sync = 1.0 - total / (pp * makespan) if makespan > 0 else 0.0
    asyn = 1.0 - total / (pp * period) if period > 0 else 0.0
    return SimResult(
        schedule=schedule,
        timeline=timeline,
        makespan=makespan,
        busy=busy,
        idle=[makespan - b for b in busy],
        span=span,
        peak_memory=peak_memory(schedule, sc),
        bubble_sync=max(0.0, sync),
        bubble_async=max(0.0, asyn),
    )
