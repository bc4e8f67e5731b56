"""Activation offload as part of a plan: what goes to host memory, when it comes back.

An offload plan names, per rank, the (microbatch, chunk) pairs whose F's saved
activations leave the device when the F ends and come back before their B (or
BW), and the W shares (key (microbatch, chunk, "W")): what a B keeps for its W
(the weight gradient's share, -mem_w of an F's activations), leaving the device
when the B ends and coming back before the W (a BW op keeps nothing for a W).
For each it names the op at whose start the reload is issued. The op order is
the schedule's, untouched: offload adds copies, never moves an op.

Timing (`simulate_offload`: the simulator's own loop, `simulation._run`, with the
lanes as its hook): each rank has one copy lane per direction (device-to-host,
host-to-device) of `bandwidth` activation units per time unit (the cost model's
units: an F of one rank's full layer share adds 1), so copies overlap compute and
each other, and copies in one direction queue (F's activations and W shares
alike). The copy out starts when its producer (the F; the B for a W share)
ends; the copy back starts when its issuing op starts, the lane is free and the
copy out has finished; its consumer (the B or BW; the W) waits for it. Memory is
device-resident activation: an F's activations count from its end until their
copy out ends (the runtime hands the device copy back to the allocator, which
reuses it once the copy has run), and again from the start of the op that issues
their reload (the buffer is allocated then, in the compute stream's order,
whenever the lane starts the copy) until the B and W free them as without
offload; a W share likewise from its B's end to its copy out's end, and from its
reload's issue until its W frees it.

The reload is issued just in time: at the start of the latest op before the
consumer whose op times (the cost model's, idle left out: waiting only adds
time) cover the copy back, never before the op after the producer. Idle time
only makes it earlier than needed, so with a free lane the consumer does not wait.

An overlapped pair (`Schedule.pairs`) is one op here as in the simulator: its halves
start and end together, so its F half's activations (its B half's W share) go out
when the pair ends, a reload its B half needs must end before the pair starts, and
the walk back covers a copy with the pair's own time (`StageCosts.pair_duration`),
issuing at the pair's first half; a pair never reloads what it produces itself.

`choose` picks a plan for any schedule: `off`, `all`, or `auto`, the fastest
plan within a memory limit (PipeOffload's selective offload: F's activations and
W shares are taken in order of how well their lifespan, F end to B start or B end
to W start, hides the round trip, and every prefix of that order is scored; `all`
is one of them, so `auto` is never
slower than `all` under the same limit, and within the limit whenever `off` or
`all` is); with a time budget (`max_slowdown`) instead, the least memory among
the plans at most that much slower than `off`. Where the copy lanes cannot carry
everything, one order's prefixes spend them on activations that are not resident
when a rank peaks, so `auto` also searches from the peak (for the least memory, or
where no prefix fits the limit): it offloads what is resident at the largest
rank's peak moment, halving that batch until it costs no peak and stays within
the time budget, and repeats. `all` offloads every F's activations and every W
share. `check_offload` is the validator: every copy back ends before the op that
uses it, every copy starts after what it copies exists.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .costs import UNIT, Costs, StageCosts
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import B, BW, F, W, Op, Schedule
from .simulation import op_times

OFF, ALL, AUTO = "off", "all", "auto"
MODES = (OFF, ALL, AUTO)
EPS = 1e-9

Key = tuple  # (microbatch, chunk): an F's activations; (microbatch, chunk, "W"): a W share
WSHARE = W  # the third element of a W share's key


def is_wshare(key: tuple) -> bool:
    """True for a W share's key (microbatch, chunk, "W"), false for an F's (microbatch, chunk)."""
    return len(key) == 3


@dataclass(frozen=True)
class OffloadPlan:
    """Per rank: the offloaded keys ((mb, chunk): an F's activations; (mb, chunk, "W"): a W share)
    and, for each, the op whose start issues its reload."""

    mode: str
    bandwidth: float
    reload_at: tuple  # per rank: {key: Op issuing its reload}
    sizes: tuple = ()  # per rank: {key: activation units copied}, where make_plan made it

    def copy_time(self, rank: int, key: tuple) -> float:
        """Time units one copy of `key` takes on a lane of rank `rank` (0 where sizes are unknown)."""
        size = self.sizes[rank].get(key, 0.0) if rank < len(self.sizes) else 0.0
        return _transfer(size, self.bandwidth)

    @property
    def keys(self) -> tuple:
        return tuple(frozenset(per_rank) for per_rank in self.reload_at)

    def reloads_before(self, rank: int) -> dict:
        """{Op: [(mb, chunk), ...]}: the reloads rank `rank` issues as that op starts (the runtime's form)."""
        out: dict = {}
        for key, op in sorted(self.reload_at[rank].items()):
            out.setdefault(op, []).append(key)
        return out

    @property
    def count(self) -> int:
        """Copies out planned, F activations and W shares."""
        return sum(len(per_rank) for per_rank in self.reload_at)

    @property
    def count_w(self) -> int:
        """W shares planned."""
        return sum(is_wshare(key) for per_rank in self.reload_at for key in per_rank)


class Copy(tuple):
    """One copy on a lane: (rank, direction 'D2H' or 'H2D', key, start, end); key (mb, chunk) for an
    F's activations, (mb, chunk, "W") for a W share."""

    __slots__ = ()

    def __new__(cls, rank: int, direction: str, key: Key, start: float, end: float) -> "Copy":
        return tuple.__new__(cls, (rank, direction, key, start, end))

    rank = property(lambda self: self[0])
    direction = property(lambda self: self[1])
    key = property(lambda self: self[2])
    start = property(lambda self: self[3])
    end = property(lambda self: self[4])


@dataclass
class OffloadResult:
    """A schedule timed with its offload plan."""

    schedule: Schedule
    plan: OffloadPlan
    timeline: list  # per rank: Spans of compute ops
    copies: list  # per rank: Copy items, both directions
    makespan: float
    peak_memory: list  # per rank: peak device-resident activation
    stall: list = field(default_factory=list)  # per rank: time its B ops waited for reloads
    peak_at: list = field(default_factory=list)  # per rank: when its peak is first reached

    @property
    def max_peak_memory(self) -> float:
        return max(self.peak_memory, default=0.0)

    @property
    def busy(self) -> list:
        return [sum(span.end - span.start for span in row) for row in self.timeline]

    @property
    def bubble_sync(self) -> float:
        total, pp = sum(self.busy), self.schedule.pp
        return max(0.0, 1.0 - total / (pp * self.makespan)) if self.makespan > 0 else 0.0

    @property
    def bubble_async(self) -> float:
        period = max(((row[-1].end - row[0].start) for row in self.timeline if row), default=0.0)
        return max(0.0, 1.0 - sum(self.busy) / (self.schedule.pp * period)) if period > 0 else 0.0

    def stats(self) -> dict:
        return {"offload": self.plan.mode, "offloaded": self.plan.count, "w_shares": self.plan.count_w,
                "bandwidth": self.plan.bandwidth,
                "makespan": round(self.makespan, 6), "peak_memory": [round(x, 6) for x in self.peak_memory],
                "stall": [round(x, 6) for x in self.stall]}


def _resolve(schedule: Schedule, costs: Optional[Costs]) -> StageCosts:
    return (costs or schedule.meta.get("costs") or UNIT).resolve(schedule.pp, schedule.chunks_per_rank,
                                                                schedule.placement, schedule.microbatches)


def _transfer(size: float, bandwidth: float) -> float:
    return 0.0 if math.isinf(bandwidth) else size / bandwidth


def check_bandwidth(bandwidth: float) -> float:
    if not (isinstance(bandwidth, (int, float)) and bandwidth > 0 and not math.isnan(bandwidth)):
        raise ScheduleError(f"offload bandwidth must be a positive number (activation units per time unit), "
                            f"got {bandwidth!r}")
    return float(bandwidth)


def share_size(sc: StageCosts, stage: int, key: tuple) -> float:
    """Activation units one copy of `key` moves: an F's activations, or what its B keeps for W."""
    return -sc.memory(W, stage) if is_wshare(key) else sc.memory(F, stage)


def _positions(ops) -> tuple:
    """Per (mb, chunk): the index of its F, of its B or BW, of its B (only), of its W."""
    f_at, back_at, b_at, w_at = {}, {}, {}, {}
    for i, op in enumerate(ops):
        key = (op.mb, op.chunk)
        if op.kind == F:
            f_at[key] = i
        elif op.kind in (B, BW):
            back_at[key] = i
            if op.kind == B:
                b_at[key] = i
        elif op.kind == W:
            w_at[key] = i
    return f_at, back_at, b_at, w_at


def _items(schedule: Schedule, r: int) -> list[int]:
    """Per op position of rank `r`, the index of the item it runs in: an overlapped pair's two halves
    share one (they start and end together, so nothing can happen between them)."""
    paired, out, item = schedule.paired(r), [], -1
    for i in range(len(schedule.ranks[r])):
        if i - 1 not in paired:
            item += 1
        out.append(item)
    return out


def make_plan(schedule: Schedule, keys: Iterable, bandwidth: float, costs: Optional[Costs] = None, *,
              mode: str = "custom") -> OffloadPlan:
    """The plan offloading `keys` ((rank, mb, chunk): an F's activations; (rank, mb, chunk, "W"): a W
    share), each reload issued just in time (module doc). With overlapped pairs the walk goes item by
    item: a pair covers the copy with its own time and issues its reloads at its first half, as it starts;
    a reload is never issued by the pair that produces what it copies back."""
    bandwidth = check_bandwidth(bandwidth)
    sc = _resolve(schedule, costs)
    wanted: list[set] = [set() for _ in range(schedule.pp)]
    for rank, *key in keys:
        wanted[rank].add(tuple(key))
    reload_at, sizes = [], []
    for r, ops in enumerate(schedule.ranks):
        where, size_of = {}, {}
        f_at, back_at, b_at, w_at = _positions(ops)
        item_of, paired = (_items(schedule, r) if wanted[r] else []), schedule.paired(r)
        starts = [i for i, item in enumerate(item_of) if i == 0 or item_of[i - 1] != item]  # item -> first op
        table = schedule.stage_table[r]
        for key in sorted(wanted[r]):
            pair = key[:2]
            if is_wshare(key):
                if key[2] != WSHARE or pair not in b_at or pair not in w_at:
                    raise ScheduleError(f"offload plan names the W share of microbatch {key[0]} chunk {key[1]} on rank "
                                        f"{r}, which has no B and W for it (a BW keeps nothing for a W)")
                produced, used = b_at[pair], w_at[pair]
            else:
                if pair not in f_at or pair not in back_at:
                    raise ScheduleError(f"offload plan names microbatch {key[0]} chunk {key[1]} on rank {r}, which has "
                                        f"no F and B (or BW) for it")
                produced, used = f_at[pair], back_at[pair]
            size = size_of[key] = share_size(sc, table[key[1]], key)
            need = _transfer(size, bandwidth)
            k, made = item_of[used], item_of[produced]
            covered = 0.0
            # walk back from the consumer's item while the items in between do not cover the copy back
            while k - 1 > made and covered < need - EPS:
                k -= 1
                op = ops[starts[k]]
                if starts[k] in paired:  # a pair: its own time
                    b = ops[starts[k] + 1]
                    covered += sc.pair_duration(table[op.chunk], b.kind, table[b.chunk], op.mb, b.mb)
                else:
                    covered += sc.duration(op.kind, table[op.chunk], op.mb)
            where[key] = ops[starts[k]]
        reload_at.append(where)
        sizes.append(size_of)
    while len(reload_at) < schedule.pp:
        reload_at.append({})
        sizes.append({})
    return OffloadPlan(mode, bandwidth, tuple(reload_at), tuple(sizes))


def check_given_plan(plan: OffloadPlan, schedule: Schedule) -> OffloadPlan:
    """`plan`, when it fits `schedule`: one entry per rank, and every offloaded key reloaded by an op of
    its rank that runs after the key's producer (the F; the B for a W share) and no later than its
    consumer (the B or BW; the W), a pair's halves counting as one op (either half issues the reload as
    the pair starts). A plan chosen elsewhere (once for every rank) is checked so."""
    if not isinstance(plan, OffloadPlan):
        raise ScheduleError(f"offload: expected a mode ({', '.join(MODES)}) or an OffloadPlan, got "
                            f"{type(plan).__name__}")
    if len(plan.reload_at) != schedule.pp:
        raise ScheduleError(f"the given offload plan has {len(plan.reload_at)} ranks, the schedule {schedule.pp}")
    check_bandwidth(plan.bandwidth)
    for r, ops in enumerate(schedule.ranks):
        f_at, back_at, b_at, w_at = _positions(ops)
        item_of = _items(schedule, r)
        index = {op: item_of[i] for i, op in enumerate(ops)}  # a pair's halves: the pair's item
        for key, op in plan.reload_at[r].items():
            pair = key[:2]
            produced, used = ((b_at.get(pair), w_at.get(pair)) if is_wshare(key) else
                              (f_at.get(pair), back_at.get(pair)))
            at = index.get(op)
            if produced is None or used is None or at is None or not item_of[produced] < at <= item_of[used]:
                raise ScheduleError(f"the given offload plan reloads {key} on rank {r} at {op}, which is not "
                                    f"between its producer and its consumer in schedule {schedule.name!r}")
    return plan


def empty_plan(schedule: Schedule, bandwidth: float = math.inf) -> OffloadPlan:
    return OffloadPlan(OFF, check_bandwidth(bandwidth), tuple({} for _ in range(schedule.pp)))


def offloadable(schedule: Schedule) -> list[tuple[int, int, int]]:
    """(rank, mb, chunk) of every F whose activations a later B (or BW) uses."""
    out = []
    for r, ops in enumerate(schedule.ranks):
        backward = {(op.mb, op.chunk) for op in ops if op.kind in (B, BW)}
        out.extend((r, op.mb, op.chunk) for op in ops if op.kind == F and (op.mb, op.chunk) in backward)
    return out


def w_shares(schedule: Schedule, costs: Optional[Costs] = None) -> list[tuple[int, int, int, str]]:
    """(rank, mb, chunk, "W") of every B whose W frees something (mem_w < 0): what it keeps for the W."""
    sc = _resolve(schedule, costs)
    out = []
    for r, ops in enumerate(schedule.ranks):
        weights = {(op.mb, op.chunk) for op in ops if op.kind == W}
        out.extend((r, op.mb, op.chunk, WSHARE) for op in ops if op.kind == B and (op.mb, op.chunk) in weights
                   and -sc.memory(W, schedule.stage_table[r][op.chunk]) > EPS)
    return out


class _Lanes:
    """The copy lanes as a hook of the simulator's loop (`simulation._run`): reloads issued as their
    op starts, a consumer (B or BW; W for a W share) waiting for its reload, a copy out queued as its
    producer (F; B for a W share) ends (module doc)."""

    def __init__(self, schedule: Schedule, plan: OffloadPlan, sc: StageCosts) -> None:
        pp = schedule.pp
        self.schedule, self.plan, self.sc = schedule, plan, sc
        self.issue = [plan.reloads_before(r) for r in range(pp)]
        self.marked = []
        for r in range(pp):
            ops, offl, issue = schedule.ranks[r] if r < len(schedule.ranks) else (), plan.reload_at[r], self.issue[r]
            self.marked.append([op in issue or ((op.mb, op.chunk) in offl and op.kind in (F, B, BW))
                                or ((op.mb, op.chunk, WSHARE) in offl and op.kind in (B, W)) for op in ops])
        self.d2h_free, self.h2d_free = [0.0] * pp, [0.0] * pp
        self.out_end: list[dict] = [{} for _ in range(pp)]
        self.back_end: list[dict] = [{} for _ in range(pp)]
        self.copies: list = [[] for _ in range(pp)]
        self.issued: list = [{} for _ in range(pp)]  # op index -> (issue time, copy back), in issue order
        self.stall = [0.0] * pp

    def size(self, r: int, key: tuple) -> float:
        return share_size(self.sc, self.schedule.stage_table[r][key[1]], key)

    def start(self, r: int, i: int, ready: float) -> float:
        op = self.schedule.ranks[r][i]
        for key in self.issue[r].get(op, ()):  # reloads issued as this op starts
            start = max(ready, self.h2d_free[r], self.out_end[r][key])
            self.h2d_free[r] = self.back_end[r][key] = start + _transfer(self.size(r, key), self.plan.bandwidth)
            copy = Copy(r, "H2D", key, start, self.h2d_free[r])
            self.copies[r].append(copy)
            self.issued[r].setdefault(i, []).append((ready, copy))  # its buffer is allocated as issued
        if op.kind in (B, BW):
            key = (op.mb, op.chunk)
        elif op.kind == W:
            key = (op.mb, op.chunk, WSHARE)
        else:
            return ready
        if key in self.plan.reload_at[r]:
            if key not in self.back_end[r]:
                raise ScheduleError(f"rank {r} op {op} runs before the op {self.plan.reload_at[r][key]} that issues "
                                    f"its reload")
            if self.back_end[r][key] > ready:
                self.stall[r] += self.back_end[r][key] - ready
                ready = self.back_end[r][key]
        return ready

    def end(self, r: int, i: int, end: float) -> None:
        op = self.schedule.ranks[r][i]
        if op.kind == F:
            key = (op.mb, op.chunk)
        elif op.kind == B:
            key = (op.mb, op.chunk, WSHARE)
        else:
            return
        if key in self.plan.reload_at[r]:
            start = max(end, self.d2h_free[r])
            self.d2h_free[r] = self.out_end[r][key] = start + _transfer(self.size(r, key), self.plan.bandwidth)
            self.copies[r].append(Copy(r, "D2H", key, start, self.d2h_free[r]))

    def peaks(self, timeline: list) -> tuple:
        """Per rank, the peak of device-resident activation: each op's memory at its end, a copy back's
        as its op issues it, a copy out's release at its end; equal times in the order they happen.
        Also, per rank, when that peak is first reached."""
        out, when = [], []
        for r, spans in enumerate(timeline):
            events = []
            offl = self.plan.reload_at[r]
            for i, span in enumerate(spans):
                events.extend((issued, self.size(r, c.key)) for issued, c in self.issued[r].get(i, ()))
                events.append((span.end, self.sc.memory(span.op.kind, span.stage)))
                kind = span.op.kind
                key = (span.op.mb, span.op.chunk) if kind == F else (span.op.mb, span.op.chunk, WSHARE) \
                    if kind == B else None
                if key is not None and key in offl:
                    events.append((self.out_end[r][key], -self.size(r, key)))
            live = peak = at = 0.0
            for t, delta in sorted(events, key=lambda e: e[0]):  # stable
                live += delta
                if live > peak:
                    peak, at = live, t
            out.append(peak)
            when.append(at)
        return out, when


@gc_paused
def simulate_offload(schedule: Schedule, plan: Optional[OffloadPlan] = None,
                     costs: Optional[Costs] = None) -> OffloadResult:
    """Time `schedule` with `plan`'s copies on per-rank lanes (module doc): the simulator's own loop
    (`simulation._run`) with the lanes as its hook."""
    plan = plan or empty_plan(schedule)
    sc = _resolve(schedule, costs)
    lanes = _Lanes(schedule, plan, sc)
    timeline = op_times(schedule, sc, lanes)
    makespan = max((row[-1].end for row in timeline if row), default=0.0)
    peaks, peak_at = lanes.peaks(timeline)
    result = OffloadResult(schedule, plan, timeline, lanes.copies, makespan, peaks, lanes.stall, peak_at)
    check_offload(result)
    return result


def check_offload(result: OffloadResult) -> None:
    """The validator's offload check: on every rank, each copy out starts after its producer (the F;
    the B for a W share) ends, each copy back after its copy out ends and ends before its consumer
    (the B or BW; the W for a W share) starts; copies in one lane never overlap."""
    for r, (spans, copies) in enumerate(zip(result.timeline, result.copies)):
        made, used = {}, {}  # key -> its producer's end; key -> (its consumer's start, the consumer)
        for s in spans:
            pair, kind = (s.op.mb, s.op.chunk), s.op.kind
            if kind == F:
                made[pair] = s.end
            elif kind in (B, BW):
                used[pair] = (s.start, s.op)
                if kind == B:
                    made[(*pair, WSHARE)] = s.end
            elif kind == W:
                used[(*pair, WSHARE)] = (s.start, s.op)
        out_end = {}
        for c in sorted(copies, key=lambda c: (c.direction != "D2H", c.start)):
            what = f"the W share of microbatch {c.key[0]} chunk {c.key[1]}" if is_wshare(c.key) else \
                f"microbatch {c.key[0]} chunk {c.key[1]}"
            if c.direction == "D2H":
                if c.start < made[c.key] - EPS:
                    raise ScheduleError(f"rank {r} copies {what} to host at {c.start:g}, before its "
                                        f"{'B' if is_wshare(c.key) else 'F'} ends at {made[c.key]:g}")
                out_end[c.key] = c.end
                continue
            if c.key not in out_end or c.start < out_end[c.key] - EPS:
                raise ScheduleError(f"rank {r} reloads {what} before its copy to host has ended")
            start, op = used[c.key]
            if c.end > start + EPS:
                raise ScheduleError(f"rank {r} op {op} starts at {start:g} but the reload of its "
                                    f"{'W share' if is_wshare(c.key) else 'activations'} ends at {c.end:g}")
        for direction in ("D2H", "H2D"):
            lane = sorted((c for c in copies if c.direction == direction), key=lambda c: c.start)
            for a, b in zip(lane, lane[1:]):
                if b.start < a.end - EPS:
                    raise ScheduleError(f"rank {r}'s {direction} lane runs two copies at once "
                                        f"(microbatches {a.key[0]} and {b.key[0]})")


def lifespans(schedule: Schedule, costs: Optional[Costs] = None) -> dict:
    """Without offload: (rank, mb, chunk) -> time from the F's end to its B's (or BW's) start, and
    (rank, mb, chunk, "W") -> time from the B's end to its W's start."""
    result = simulate_offload(schedule, None, costs)
    out = {}
    for r, spans in enumerate(result.timeline):
        f_end, b_end = {}, {}
        for s in spans:
            pair = (s.op.mb, s.op.chunk)
            if s.op.kind == F:
                f_end[pair] = s.end
            elif s.op.kind in (B, BW):
                if pair in f_end:
                    out[(r, *pair)] = s.start - f_end[pair]
                if s.op.kind == B:
                    b_end[pair] = s.end
            elif s.op.kind == W and pair in b_end:
                out[(r, *pair, WSHARE)] = s.start - b_end[pair]
    return out


def choose(schedule: Schedule, mode: str, *, bandwidth: float = math.inf, costs: Optional[Costs] = None,
           memory_limit: Optional[float] = None, max_candidates: int = 48,
           max_slowdown: Optional[float] = None) -> OffloadResult:
    """The plan `mode` asks for, timed (module doc). `auto` scores at most `max_candidates` + 2 prefixes,
    then, for the least memory or where no prefix fits the limit, at most 2 x `max_candidates` plans of a
    peak-directed search (`_at_the_peak`), and takes the best.
    With `max_slowdown` (a share, e.g. 0.02), `auto` takes the least memory among the plans at most that
    much slower than without offload (then the fastest), instead of the fastest within `memory_limit`."""
    if mode not in MODES:
        raise ScheduleError(f"offload must be one of {', '.join(MODES)}, got {mode!r}")
    bandwidth = check_bandwidth(bandwidth)
    if mode == OFF:
        return simulate_offload(schedule, empty_plan(schedule, bandwidth), costs)
    candidates = offloadable(schedule) + w_shares(schedule, costs)
    if mode == ALL:
        return simulate_offload(schedule, make_plan(schedule, candidates, bandwidth, costs, mode=ALL), costs)
    sc = _resolve(schedule, costs)
    life = lifespans(schedule, costs)

    def slack(k: tuple) -> float:
        size = share_size(sc, schedule.stage_table[k[0]][k[2]], k[1:])
        return life[k] - 2 * _transfer(size, bandwidth)

    order = sorted(candidates, key=lambda k: (-slack(k), k))
    n = len(order)
    sizes = sorted({0, n, *(round(j * n / max_candidates) for j in range(max_candidates + 1))})
    limit = math.inf if memory_limit is None else memory_limit + EPS
    budget = None

    def score(result: OffloadResult, count: int) -> tuple:
        if max_slowdown is not None:
            # within the time budget first (or, when nothing is, the fastest); then the least memory
            fast = result.makespan <= budget
            return (not fast, 0.0 if fast else round(result.makespan, 9), round(result.max_peak_memory, 9),
                    result.makespan, count)
        fits = result.max_peak_memory <= limit
        # within the limit first (or, when nothing is, the least memory); then the fastest; then the least
        # memory; then the fewest copies
        return (not fits, 0.0 if fits else round(result.max_peak_memory, 9), round(result.makespan, 9),
                result.max_peak_memory, count)

    best = None
    for size in sizes:
        result = simulate_offload(schedule, make_plan(schedule, order[:size], bandwidth, costs, mode=AUTO), costs)
        if budget is None:  # size 0: without offload
            budget = result.makespan * (1 + max_slowdown) + EPS if max_slowdown is not None else math.inf
            plain = result
        if best is None or score(result, size) < best[0]:
            best = (score(result, size), result)
    if best[0][0] or max_slowdown is not None:  # nothing fits the limit, or the least memory is asked for
        found, count = _at_the_peak(schedule, plain, candidates, slack, bandwidth, costs, budget,
                                    -math.inf if max_slowdown is not None else limit, 2 * max_candidates)
        if score(found, count) < best[0]:
            best = (score(found, count), found)
    return best[1]


def _windows(spans) -> dict:
    """(mb, chunk) and (mb, chunk, "W") -> (when it is made, when it is used) on one rank's timeline."""
    made, out = {}, {}
    for s in spans:
        pair, kind = (s.op.mb, s.op.chunk), s.op.kind
        if kind == F:
            made[pair] = s.end
        elif kind in (B, BW):
            if pair in made:
                out[pair] = (made[pair], s.start)
            if kind == B:
                made[(*pair, WSHARE)] = s.end
        elif kind == W and (*pair, WSHARE) in made:
            out[(*pair, WSHARE)] = (made[(*pair, WSHARE)], s.start)
    return out


def _at_the_peak(schedule: Schedule, plain: OffloadResult, candidates: list, slack, bandwidth: float,
                 costs: Optional[Costs], budget: float, limit: float, sims: int) -> tuple:
    """A peak-directed search for `auto`, where one order's prefixes spend the copy lanes on activations
    that are not resident at the peak: from no offload, repeatedly take the rank with the largest peak
    and offload what is resident there at its peak moment (not yet tried, slack > 0; the most slack
    first), halving that batch until no peak rises, within `budget` (time); stop once within `limit`
    (memory), when nothing is left to try, or after `sims` simulations. (result, copies planned)."""
    by_rank: dict = {}
    for k in candidates:
        by_rank.setdefault(k[0], []).append(k)
    chosen: list = []
    tried: set = set()
    current = plain
    while sims > 0 and current.max_peak_memory > limit:
        r = max(range(schedule.pp), key=lambda q: current.peak_memory[q])
        t = current.peak_at[r]
        windows = _windows(current.timeline[r])
        batch = [k for k in by_rank.get(r, ()) if k not in tried and slack(k) > 0
                 and windows[k[1:]][0] - EPS <= t <= windows[k[1:]][1] + EPS]
        if not batch:
            break
        batch.sort(key=lambda k: (-slack(k), k))
        while batch and sims > 0:
            sims -= 1
            trial = simulate_offload(schedule, make_plan(schedule, chosen + batch, bandwidth, costs, mode=AUTO), costs)
            # accepted unless it is too slow or raises a peak (a peak held at several moments falls once
            # each of them is covered)
            if trial.makespan <= budget and trial.peak_memory[r] <= current.peak_memory[r] + EPS \
                    and trial.max_peak_memory <= current.max_peak_memory + EPS:
                chosen += batch
                current = trial
                break
            if len(batch) == 1:
                break
            batch = batch[:len(batch) // 2]
        tried.update(batch)
    return current, len(chosen)
