"""Timing and memory of a schedule under a cost model.

Each rank runs its ops in order; an op starts when the rank is free and its
input is available (p2p latency `comm` added when producer and consumer sit on
different ranks). An overlapped pair (`Schedule.pairs`) starts when both halves'
inputs are there and ends, both halves at once, `StageCosts.pair_duration` later. Communication is modelled as latency only; how a lowered
schedule runs on NCCL/RCCL's p2p queues, and that it cannot hang there, is
`rendezvous` (its `run_p2p` times a lowered schedule under those semantics). Ops and their dependencies come from the compiled form
(`compiled`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, repeat
from operator import attrgetter
from typing import NamedTuple, Optional

from .compiled import Compiled, compile_schedule
from .costs import UNIT, Costs, StageCosts
from .deps import RESULT_KINDS, Key, describe
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import Op, Schedule


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


_SLOT = attrgetter("slot")
_span = partial(tuple.__new__, Span)  # Span(*fields) without the Python-level __new__ (same object)


def peak_memory(schedule: Schedule, sc: StageCosts) -> list[float]:
    """Per-rank peak of the running activation-memory sum, in op order."""
    compiled = compile_schedule(schedule)
    peaks = []
    for table, rules in zip(compiled.table, compiled.rules):
        delta = [sc.memory(rule.kind, rule.stage) for rule in table.slots]
        # the running sum, added left to right; max keeps the first of equal values
        peaks.append(max(accumulate(map(delta.__getitem__, map(_SLOT, rules)), initial=0.0)))
    return peaks


def score_of(spans: list[tuple[float, float]], peaks: list[float]) -> tuple[float, float, float]:
    """(makespan, longest per-rank span, max peak memory) from per-rank (first start,
    last end) and peak memory: how candidate orders are compared (`variants`)."""
    return max(end for _, end in spans), max(end - start for start, end in spans), max(peaks)


def op_times(schedule: Schedule, sc: StageCosts, hook=None) -> list[list[Span]]:
    """Start/end of every op; raises ScheduleError if some rank can never proceed. `hook`: `_run`'s."""
    compiled = compile_schedule(schedule)
    starts, ends, _ = _run(compiled, sc, hook)
    return [list(map(_span, zip(repeat(r), ops, map(attrgetter("stage"), rules), starts[r], ends[r])))
            for r, (ops, rules) in enumerate(zip(_ranks(compiled), compiled.rules))]


def rank_spans(schedule: Schedule, sc: StageCosts) -> list[tuple[float, float]]:
    """(first start, last end) per rank, without building the timeline (scoring)."""
    starts, _, free = _run(compile_schedule(schedule), sc)
    return [(row[0] if row else 0.0, end) for row, end in zip(starts, free)]


def end_times(schedule: Schedule, sc: StageCosts) -> list[list[float]]:
    """Per rank, the end time of each op in order (what lowering needs; no Span objects)."""
    return _run(compile_schedule(schedule), sc)[1]


def _ranks(compiled: Compiled) -> list:
    ranks = compiled.schedule.ranks
    return [ranks[r] if r < len(ranks) else () for r in range(compiled.schedule.pp)]


def _op_info(compiled: Compiled, sc: StageCosts) -> list[list[tuple]]:
    """Per rank and op: (input key offset or -1, latency added to the input's end, duration,
    output key offset, second output offset or -1). The producer of a result always
    sits on the owner of its stage, so the latency is known up front. With per-microbatch
    factors (`costs.mb_scale`) the duration is the op's microbatch's (`StageCosts.duration`)."""
    info = []
    for table, rules, mbs in zip(compiled.table, compiled.rules, compiled.mbs):
        # x + 0.0 == x: ends are never -0.0
        per_slot = [(rule.need, sc.comm[rule.src] if rule.recv_from >= 0 else 0.0,
                     sc.duration(rule.kind, rule.stage), rule.out, rule.out2) for rule in table.slots]
        row = list(map(per_slot.__getitem__, map(_SLOT, rules)))
        if sc.mb_scale is not None:
            sc.check_microbatches(compiled.schedule.microbatches)
            row = [(need, lag, sc.duration(rule.kind, rule.stage, mb), out, out2)
                   for (need, lag, _, out, out2), rule, mb in zip(row, rules, mbs)]
        info.append(row)
    return info


@gc_paused
def _run(compiled: Compiled, sc: StageCosts, hook=None,
         stopped: Optional[list] = None) -> tuple[list[list[float]], list[list[float]], list[float]]:
    """Each rank runs its ops in order, an op starting when the rank is free and its
    input has arrived: (per rank the start and the end of each op, per rank its last end).
    Results are keyed as in the compiled form (`compiled`).

    `hook` (optional) times what the ops wait for besides their inputs (the offload copy lanes,
    `offload.simulate_offload`): `hook.marked[r][i]` is true for the ops it cares about, and for
    those `hook.start(r, i, ready)` returns when the op may start and `hook.end(r, i, end)` hears
    when it ended. Unmarked ops run as without a hook. `stopped` (optional) receives, per rank,
    the position of the first op it did not run (its length if it ran them all)."""
    pp, stride = compiled.schedule.pp, compiled.stride
    info = _op_info(compiled, sc)
    done: list[Optional[float]] = [None] * (stride * compiled.schedule.microbatches)  # result key -> end time
    starts: list[list[float]] = [[] for _ in range(pp)]
    ends: list[list[float]] = [[] for _ in range(pp)]
    free = [0.0] * pp
    ptr = [0] * pp
    waiting: dict[int, list[int]] = {}
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        info_r, mb_r, starts_r, ends_r = info[r], compiled.mbs[r], starts[r], ends[r]
        marked = hook.marked[r] if hook is not None else None
        i, count = ptr[r], len(info_r)
        t_free = free[r]
        pairs_r = compiled.schedule.paired(r)
        while i < count:
            need, extra, dur, out, out2 = info_r[i]
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
            if pairs_r and i in pairs_r:  # an overlapped pair: both halves' inputs, one start, one end
                ready = _pair_ready(info_r[i + 1], mb_r[i + 1] * stride, ready, done)
                if ready is None:
                    need2 = info_r[i + 1][0] + mb_r[i + 1] * stride
                    waiting.setdefault(need2, []).append(r)
                    break
                ready, t_free = _run_pair(compiled, sc, hook, (r, i), ready, info_r, mb_r, done, waiting, todo)
                starts_r.extend((ready, ready))
                ends_r.extend((t_free, t_free))
                i += 2
                continue
            if marked is None or not marked[i]:
                t_free = ready + dur
            else:
                ready = hook.start(r, i, ready)
                t_free = ready + dur
                hook.end(r, i, t_free)
            starts_r.append(ready)
            ends_r.append(t_free)
            i += 1
            out += base
            while True:  # once, or twice for BW (its B result, then its W result)
                if done[out] is not None:
                    _raise_twice(compiled, r, i - 1, out)
                done[out] = t_free
                if out in waiting:
                    todo.extend(waiting.pop(out))
                if out2 < 0:
                    break
                out, out2 = base + out2, -1
        ptr[r] = i
        free[r] = t_free
    if stopped is not None:
        stopped[:] = ptr
    _raise_if_stuck(compiled, ptr)
    return starts, ends, free


def _pair_ready(info_b: tuple, base_b: int, ready: float, done: list) -> Optional[float]:
    """When a pair whose first half may start at `ready` may start, given its second half's input
    (`info_b`, `_op_info`'s tuple); None while that input has not been made."""
    need, extra = info_b[0], info_b[1]
    if need < 0:
        return ready
    end = done[base_b + need]
    if end is None:
        return None
    return max(ready, end + extra)


def _run_pair(compiled: Compiled, sc: StageCosts, hook, at: tuple, ready: float, info_r: list, mb_r: list,
              done: list, waiting: dict, todo: list) -> tuple[float, float]:
    """Run the pair starting at position at[1] of rank at[0] from `ready` (the hook's copy lanes may
    hold either half back): publish both halves' results at its end; (its start, its end)."""
    r, i = at
    rules, stride = compiled.rules[r], compiled.stride
    if hook is not None:
        for j in (i, i + 1):
            if hook.marked[r][j]:
                ready = hook.start(r, j, ready)
    end = ready + sc.pair_duration(rules[i].stage, rules[i + 1].kind, rules[i + 1].stage, mb_r[i], mb_r[i + 1])
    for j in (i, i + 1):
        if hook is not None and hook.marked[r][j]:
            hook.end(r, j, end)
        base, out, out2 = mb_r[j] * stride, info_r[j][3], info_r[j][4]
        for key in (base + out,) if out2 < 0 else (base + out, base + out2):
            if done[key] is not None:
                _raise_twice(compiled, r, j, key)
            done[key] = end
            if key in waiting:
                todo.extend(waiting.pop(key))
    return ready, end


def stuck_positions(schedule: Schedule, sc: StageCosts) -> list[int]:
    """Per rank, the position of the first op a run of `schedule` never starts (-1: it ran them all)."""
    stopped: list = []
    try:
        _run(compile_schedule(schedule), sc, stopped=stopped)
    except ScheduleError:
        pass
    return [p if p < len(ops) else -1 for p, ops in zip(stopped, _ranks(compile_schedule(schedule)))]


def result_key(code: int, stride: int) -> Key:
    """(kind, mb, stage) of a result key of the compiled form."""
    mb, offset = divmod(code, stride)
    return RESULT_KINDS[offset % 3], mb, offset // 3


def _raise_twice(compiled: Compiled, r: int, i: int, out: int) -> None:
    op = compiled.schedule.ranks[r][i]
    raise ScheduleError(f"rank {r} op {op} computes {describe(result_key(out, compiled.stride))} a second time")


def _raise_if_stuck(compiled: Compiled, ptr: list[int]) -> None:
    schedule = compiled.schedule
    stuck = [r for r, ops in enumerate(_ranks(compiled)) if ptr[r] < len(ops)]
    if stuck:
        parts = []
        for r in stuck:
            rule, mb = compiled.rules[r][ptr[r]], compiled.mbs[r][ptr[r]]
            key = (rule.recv_kind, mb, rule.src)
            owner = schedule.owner(rule.src)[0]
            parts.append(f"rank {r} op {schedule.ranks[r][ptr[r]]} waits for {describe(key)} (rank {owner})")
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(parts))


@gc_paused
def simulate(schedule: Schedule, costs: Costs | None = None) -> SimResult:
    """Makespan, per-rank busy/idle, peak memory and sync/async bubble rates."""
    sc = (costs or schedule.meta.get("costs") or UNIT).resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement,
                                                                schedule.microbatches)
    timeline = op_times(schedule, sc)
    pp = schedule.pp
    # an overlapped pair's two halves share one span of time: counted once
    busy = [sum(s.end - s.start for i, s in enumerate(spans) if i - 1 not in schedule.paired(r))
            for r, spans in enumerate(timeline)]
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
