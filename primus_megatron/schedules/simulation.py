"""Timing and memory of a schedule under a cost model.

Each rank runs its ops in order; an op starts when the rank is free and its
input is available (p2p latency `comm` added when producer and consumer sit on
different ranks). Communication is modelled as latency only: the executor
posts receives early and never blocks on a send, which `validation` proves
hang-free separately.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from functools import partial, wraps
from itertools import accumulate, repeat
from operator import attrgetter, getitem, itemgetter
from typing import Callable, NamedTuple, Optional, TypeVar

from .costs import UNIT, Costs, StageCosts
from .deps import Key, describe, needs, produces
from .errors import ScheduleError
from .ir import B, BW, COMPUTE_KINDS, F, W, Op, Schedule


T = TypeVar("T")


def gc_paused(fn: Callable[..., T]) -> Callable[..., T]:
    """Run `fn` with the cyclic garbage collector off (if it was on).

    The planner's loops build hundreds of thousands of small tuples and lists that
    live until the call returns; each collection would traverse all of them again,
    which cost up to half the run time. They form no reference cycles, so reference
    counting frees everything as usual."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper


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
        # delta[op.kind][stages_r[op.chunk]] per op, in C: same lookups in the same order (so the same
        # errors for a malformed op), and accumulate adds left to right exactly like a running sum.
        steps = map(getitem, map(delta.__getitem__, map(_KIND, ops)), map(stages_r.__getitem__, map(_CHUNK, ops)))
        peaks.append(max(accumulate(steps, initial=0.0)))  # max keeps the first of equal values
    return peaks


def score_of(spans: list[tuple[float, float]], peaks: list[float]) -> tuple[float, float, float]:
    """(makespan, longest per-rank span, max peak memory) from per-rank (first start,
    last end) and peak memory: how candidate orders are compared (`variants`)."""
    return max(end for _, end in spans), max(end - start for start, end in spans), max(peaks)


def well_formed(schedule: Schedule) -> bool:
    """True when `ranks` has pp rows of plain `Op`s of a known kind with int microbatch and chunk
    in range. The fast paths below assume it; anything else goes through the reference paths,
    which raise the documented errors (this check itself only uses set operations, in C)."""
    m, chunks = schedule.microbatches, schedule.chunks_per_rank
    if type(m) is not int or type(chunks) is not int or len(schedule.ranks) != schedule.pp:
        return False
    universe = {Op(k, mb, c) for k in COMPUTE_KINDS for mb in range(m) for c in range(chunks)}
    for ops in schedule.ranks:
        # Equality alone would accept Op("F", 1.0, 0) or a plain tuple: check the types too.
        if not (universe.issuperset(ops) and _OP_TYPE.issuperset(map(type, ops))
                and _INT_TYPE.issuperset(map(type, map(_MB, ops))) and _INT_TYPE.issuperset(map(type, map(_CHUNK, ops)))):
            return False
    return True


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
_KIND, _MB, _CHUNK = attrgetter("kind"), attrgetter("mb"), attrgetter("chunk")
_KIND_CHUNK = itemgetter(0, 2)
_OP_TYPE, _INT_TYPE = frozenset({Op}), frozenset({int})
_span = partial(tuple.__new__, Span)  # Span(*fields) without the Python-level __new__ (same object)


@gc_paused
def _run(schedule: Schedule, sc: StageCosts, *, record: bool | str, clean: Optional[bool] = None):
    """Each rank runs its ops in order, an op starting when the rank is free and
    its input has arrived. Results are keyed by ints ((mb * n + stage) * 3 + kind).

    `record`: True for Spans, "ends" for end times, False for (first start, last end)
    per rank. `clean`: the caller's `well_formed(schedule)` if it has it."""
    if not (well_formed(schedule) if clean is None else clean):
        return _run_reference(schedule, sc, record=record)
    pp, n, m = schedule.pp, schedule.num_stages, schedule.microbatches
    table, owner = schedule.stage_table, schedule.owner_table
    comm = sc.comm
    stride = 3 * n  # key = mb * stride + per-(kind, stage) offset

    # Everything about an op but its microbatch depends on (kind, chunk) only: one tuple
    # per rank and (kind, chunk) of (input key offset or -1, latency added to the input's
    # end, duration, output key offset, second output offset or -1, stage). The producer of
    # a result always sits on the owner of its stage, so the latency is known up front.
    info: list[list[tuple]] = []
    mbs: list[list[int]] = []
    for r, ops in enumerate(schedule.ranks):
        tab = {}
        for c, s in enumerate(table[r]):
            me = s * 3
            for kind in (F, B, W, BW):
                if kind == F:
                    src, need, outs = s - 1, (s - 1) * 3 + _FWD, (me + _FWD, -1)
                elif kind == W:
                    src, need, outs = s, me + _BWD, (me + _WGT, -1)
                else:
                    src, need = (s, me + _FWD) if s == n - 1 else (s + 1, (s + 1) * 3 + _BWD)
                    outs = (me + _BWD, -1) if kind == B else (me + _BWD, me + _WGT)
                if src < 0:
                    need, extra = -1, 0.0
                else:
                    extra = comm[src] if owner[src] != r else 0.0  # x + 0.0 == x: ends are never -0.0
                tab[(kind, c)] = (need, extra, sc.duration(kind, s), *outs, s)
        info.append(list(map(tab.__getitem__, map(_KIND_CHUNK, ops))))
        mbs.append(list(map(_MB, ops)))

    done: list[Optional[float]] = [None] * (stride * m)  # result key -> end time
    starts: list[list[float]] = [[] for _ in range(pp)]
    ends: list[list[float]] = [[] for _ in range(pp)]
    free = [0.0] * pp
    ptr = [0] * pp
    waiting: dict[int, list[int]] = {}
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        info_r, mb_r, starts_r, ends_r = info[r], mbs[r], starts[r], ends[r]
        i, count = ptr[r], len(info_r)
        t_free = free[r]
        while i < count:
            need, extra, dur, out, out2, _ = info_r[i]
            base = mb_r[i] * stride
            ready = t_free
            if need >= 0:
                end = done[base + need]
                if end is None:
                    waiting.setdefault(base + need, []).append(r)
                    break
                end += extra
                if end > ready:
                    ready = end
            t_free = ready + dur
            starts_r.append(ready)
            ends_r.append(t_free)
            i += 1
            out += base
            while True:  # once, or twice for BW (its B result, then its W result)
                if done[out] is not None:
                    op = schedule.ranks[r][i - 1]
                    raise ScheduleError(f"rank {r} op {op} computes {describe(_key(out, n))} a second time")
                done[out] = t_free
                if out in waiting:
                    todo.extend(waiting.pop(out))
                if out2 < 0:
                    break
                out, out2 = base + out2, -1
        ptr[r] = i
        free[r] = t_free
    _raise_if_stuck(schedule, ptr)
    if record is True:
        return [list(map(_span, zip(repeat(r), ops, map(itemgetter(5), info[r]), starts[r], ends[r])))
                for r, ops in enumerate(schedule.ranks)]
    if record:
        return ends
    return [(starts[r][0] if starts[r] else 0.0, free[r]) for r in range(pp)]


def _raise_if_stuck(schedule: Schedule, ptr: list[int]) -> None:
    n = schedule.num_stages
    stuck = [r for r in range(schedule.pp) if ptr[r] < len(schedule.ranks[r])]
    if stuck:
        parts = []
        for r in stuck:
            op = schedule.ranks[r][ptr[r]]
            key = needs(op, schedule.stage(r, op), n)[0]
            owner = schedule.owner(key[2])[0] if 0 <= key[2] < n else None
            parts.append(f"rank {r} op {op} waits for {describe(key)}" + (f" (rank {owner})" if owner is not None else ""))
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(parts))


def _run_reference(schedule: Schedule, sc: StageCosts, *, record: bool | str):
    """`_run` for schedules that are not `well_formed` (foreign op types, out-of-range
    fields): the plain per-op loop, whose errors are the documented ones."""
    pp, n = schedule.pp, schedule.num_stages
    table = schedule.stage_table
    dur = {k: [sc.duration(k, s) for s in range(n)] for k in (F, B, W, BW)}
    comm = sc.comm
    done: dict[int, tuple[float, int, int]] = {}  # result -> (end, rank, stage)
    free = [0.0] * pp
    first = [None] * pp
    ptr = [0] * pp
    timeline: list[list] = [[] for _ in range(pp)]
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
    _raise_if_stuck(schedule, ptr)
    if record:
        return timeline
    return [(first[r] or 0.0, free[r]) for r in range(pp)]


def _key(code: int, n: int) -> Key:
    kind = (F, B, W)[code % 3]
    code //= 3
    return kind, code // n, code % n


@gc_paused
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
