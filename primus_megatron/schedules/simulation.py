"""Timing and memory of a schedule under a cost model.

Each rank runs its ops in order; an op starts when the rank is free and its
input is available (p2p latency `comm` added when producer and consumer sit on
different ranks). Communication is modelled as latency only: the executor
posts receives early and never blocks on a send, which `validation` proves
hang-free separately.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .costs import UNIT, Costs, StageCosts
from .deps import Key, describe, needs, produces
from .errors import ScheduleError
from .ir import B, BW, F, W, Op, Schedule


class Span(NamedTuple):
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
    n = schedule.num_stages
    delta = {k: [sc.memory(k, s) for s in range(n)] for k in (F, B, W, BW)}
    peaks = []
    for r, ops in enumerate(schedule.ranks):
        stages_r = schedule.stage_table[r]
        cur = peak = 0.0
        for op in ops:
            cur += delta[op.kind][stages_r[op.chunk]]
            if cur > peak:
                peak = cur
        peaks.append(peak)
    return peaks


def op_times(schedule: Schedule, sc: StageCosts) -> list[list[Span]]:
    """Start/end of every op; raises ScheduleError if some rank can never proceed."""
    return _run(schedule, sc, record=True)


def rank_spans(schedule: Schedule, sc: StageCosts) -> list[tuple[float, float]]:
    """(first start, last end) per rank, without building the timeline (scoring)."""
    return _run(schedule, sc, record=False)


def end_times(schedule: Schedule, sc: StageCosts) -> list[list[float]]:
    """Per rank, the end time of each op in order (what lowering needs; no Span objects)."""
    return _run(schedule, sc, record="ends")


_FWD, _BWD, _WGT = 0, 1, 2  # result kinds in the integer keys of _run


def _run(schedule: Schedule, sc: StageCosts, *, record: bool):
    """Each rank runs its ops in order, an op starting when the rank is free and
    its input has arrived. Results are keyed by ints ((mb * n + stage) * 3 + kind)."""
    pp, n = schedule.pp, schedule.num_stages
    table = schedule.stage_table
    dur = {k: [sc.duration(k, s) for s in range(n)] for k in (F, B, W, BW)}
    comm = sc.comm
    done: dict[int, tuple[float, int, int]] = {}  # result -> (end, rank, stage)
    free = [0.0] * pp
    first = [None] * pp
    ptr = [0] * pp
    timeline: list[list[Span]] = [[] for _ in range(pp)]
    waiting: dict[int, list[int]] = {}
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        ops = schedule.ranks[r]
        stages_r = table[r]
        line = timeline[r]
        i = ptr[r]
        t_free = free[r]
        while i < len(ops):
            op = ops[i]
            kind = op.kind
            stage = stages_r[op.chunk]
            base = op.mb * n
            if kind == F:
                key = (base + stage - 1) * 3 + _FWD if stage > 0 else -1
            elif kind == W:
                key = (base + stage) * 3 + _BWD
            else:
                key = (base + stage) * 3 + _FWD if stage == n - 1 else (base + stage + 1) * 3 + _BWD
            ready = t_free
            if key >= 0:
                got = done.get(key)
                if got is None:
                    waiting.setdefault(key, []).append(r)
                    break
                end, src_rank, src_stage = got
                if src_rank != r:
                    end += comm[src_stage]
                if end > ready:
                    ready = end
            if first[r] is None:
                first[r] = ready
            t_free = ready + dur[kind][stage]
            if record is True:
                line.append(Span(r, op, stage, ready, t_free))
            elif record:
                line.append(t_free)
            i += 1
            me = (base + stage) * 3
            outs = (me + _FWD,) if kind == F else (me + _WGT,) if kind == W else (me + _BWD,) if kind == B \
                else (me + _BWD, me + _WGT)
            for out in outs:
                if out in done:
                    raise ScheduleError(f"rank {r} op {op} computes {describe(_key(out, n))} a second time")
                done[out] = (t_free, r, stage)
                woken = waiting.pop(out, None)
                if woken:
                    todo.extend(woken)
        ptr[r] = i
        free[r] = t_free
    stuck = [r for r in range(pp) if ptr[r] < len(schedule.ranks[r])]
    if stuck:
        parts = []
        for r in stuck:
            op = schedule.ranks[r][ptr[r]]
            key = needs(op, schedule.stage(r, op), n)[0]
            owner = schedule.owner(key[2])[0] if 0 <= key[2] < n else None
            parts.append(f"rank {r} op {op} waits for {describe(key)}" + (f" (rank {owner})" if owner is not None else ""))
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(parts))
    if record:
        return timeline
    return [(first[r] or 0.0, free[r]) for r in range(pp)]


def _key(code: int, n: int) -> Key:
    kind = (F, B, W)[code % 3]
    code //= 3
    return kind, code // n, code % n


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
