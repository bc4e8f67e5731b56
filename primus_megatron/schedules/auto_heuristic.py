"""The zero-bubble paper's automatic-scheduling heuristic (Qi et al., ICLR 2024, section 3.2).

One chunk per rank, loop placement (rank r holds stage r). Ops are placed one at
a time and timed as they are placed, with the simulator's rule (an op starts when
its rank is free and its input has arrived, `comm` later across ranks):

* warm-up: every rank runs microbatch 0's F; then, from the last rank back, each
  rank takes as many further F as fit in memory and in the time until its first
  gradient can arrive, and rank r runs at least one F more than rank r + 1;
* steady state, one microbatch at a time: an F on every rank that still has one
  (rank r only if every later rank takes one too), then that microbatch's B on
  every rank from the last back. Before each F or B a rank runs its oldest
  pending W while memory demands it or while the W ends before the op's input
  arrives; then one more into what is left of the wait (it may end after the
  input arrives), unless that wait is short (no longer than the pipeline's
  largest idle time so far beyond this rank's own) and the knobs say leave it;
  rank 0 runs every pending W before its B once it has no F left;
* the W left over run last.

Its free parameters (`Knobs`) are searched by trying every combination;
`candidates` hands them to `variants.best_of` with the rest of zb-auto's. A run
records which knobs decided anything (`_Placement.decided`): a combination that
differs from one already run only in knobs that decided nothing there places
every op the same way, so it is not run again.
Everything is computed as it is placed, so an order comes back scored
(`listsched.Scored`). Per-stage costs and p2p latencies are honoured; memory is
the cost model's (what F, B and W add), bounded by the limit.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple, Optional

from .costs import StageCosts
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import B, F, W, Op, new_op
from .listsched import Scored
from .simulation import score_of

EPS = 1e-9


class Knobs(NamedTuple):
    """The heuristic's free parameters."""

    # warm-up: stop adding F once the next would end after the first gradient arrives
    # (False: once the F already placed keep the rank busy until then)
    warmup_to_arrival: bool
    # steady state: a rank running 2 or more F ahead of the next skips its F when the next
    # rank's F and B come first, unless the F fits before them
    yield_to_b: bool
    # fill a short wait (shorter than the pipeline's largest idle time) with a W as well
    fill_short_waits: bool


KNOBS = tuple(Knobs(*flags) for flags in itertools.product((True, False), repeat=3))


def candidates(pp: int, m: int, sc: StageCosts, memory_limit: Optional[float]) -> list:
    """(name, candidate) per combination of the knobs, for `variants.best_of` (which builds
    them in turn): a combination whose order an earlier run already gave returns that."""
    done: list[tuple[Knobs, Scored, frozenset]] = []  # (knobs, result, the knobs that decided something)

    def build(k: Knobs) -> Scored:
        for ran, result, decided in done:
            if all(a == b or name not in decided for name, a, b in zip(Knobs._fields, k, ran)):
                return result
        run = _place(pp, m, sc, memory_limit, k)
        done.append((k, run.result(), frozenset(run.decided)))
        return done[-1][1]

    return [(f"paper heuristic {k}", lambda k=k: build(k)) for k in KNOBS]


def paper_order(pp: int, m: int, sc: StageCosts, memory_limit: Optional[float], knobs: Knobs) -> Scored:
    """Each rank's order under the heuristic (module doc) and its score; ScheduleError
    where the memory limit leaves a rank no op it may run."""
    return _place(pp, m, sc, memory_limit, knobs).result()


@gc_paused
def _place(pp: int, m: int, sc: StageCosts, memory_limit: Optional[float], knobs: Knobs) -> "_Placement":
    run = _Placement(pp, m, sc, memory_limit)
    run.warm_up(knobs)
    for mb in range(1, m):
        run.steady(mb, knobs)
    for j in range(pp):
        while run.w[j] < m:
            run.put(j, W)
    return run


class _Placement:
    """Ops placed so far, their simulated times and each rank's memory."""

    def __init__(self, pp: int, m: int, sc: StageCosts, memory_limit: Optional[float]) -> None:
        self.pp, self.m = pp, m
        self.limit = float("inf") if memory_limit is None else memory_limit + EPS
        self.dur = {k: list(sc.time[k][:pp]) for k in (F, B, W)}
        self.scale = sc.mb_scale  # per-microbatch factors on `dur` (None: every microbatch the same)
        self.grow = {k: list(sc.mem[k][:pp]) for k in (F, B, W)}
        self.comm = list(sc.comm[:pp])
        self.f, self.b, self.w = [0] * pp, [0] * pp, [0] * pp  # ops placed per kind
        self.free = [0.0] * pp  # when the rank's last placed op ends
        self.first: list = [None] * pp
        self.mem, self.peak = [0.0] * pp, [0.0] * pp
        self.idle = [0.0] * pp  # waiting time after the rank's first F
        self.most_idle = 0.0  # max(idle): idle times only grow
        self.end = {F: [[0.0] * m for _ in range(pp)], B: [[0.0] * m for _ in range(pp)]}
        self.out: list[list[Op]] = [[] for _ in range(pp)]
        self.decided: set[str] = set()  # the knobs whose setting changed a placement in this run

    def arrival(self, j: int, kind: str, mb: int) -> float:
        """When the input of `kind` for microbatch `mb` reaches rank j (0.0 if it needs none from
        another rank): F waits for rank j - 1's F, B for rank j + 1's B."""
        if kind == F and j > 0:
            return self.end[F][j - 1][mb] + self.comm[j - 1]
        if kind == B and j < self.pp - 1:
            return self.end[B][j + 1][mb] + self.comm[j + 1]
        return 0.0

    def put(self, j: int, kind: str) -> None:
        """Place the rank's next op of `kind`: it starts when the rank is free and its input has
        arrived (`arrival`; written out here, the planner's hottest loop)."""
        free = self.free[j]
        if kind == F:
            counts = self.f
            mb = counts[j]
            start = free
            if j > 0:
                ready = self.end[F][j - 1][mb] + self.comm[j - 1]
                if ready > start:
                    start = ready
        elif kind == B:
            counts = self.b
            mb = counts[j]
            start = free
            if j < self.pp - 1:
                ready = self.end[B][j + 1][mb] + self.comm[j + 1]
                if ready > start:
                    start = ready
        else:
            counts = self.w
            mb = counts[j]
            start = free
        if self.first[j] is None:
            self.first[j] = start
        elif start > free and self.f[j]:
            idle = self.idle[j] = self.idle[j] + (start - free)
            if idle > self.most_idle:
                self.most_idle = idle
        dur = self.dur[kind][j]
        if self.scale is not None:
            dur *= self.scale[mb]
        end = self.free[j] = start + dur
        if kind != W:
            self.end[kind][j][mb] = end
        mem = self.mem[j] = self.mem[j] + self.grow[kind][j]
        if mem > self.peak[j]:
            self.peak[j] = mem
        counts[j] = mb + 1
        self.out[j].append(new_op((kind, mb, 0)))

    def time(self, kind: str, j: int, mb: int) -> float:
        """The time of rank j's op of `kind` for microbatch `mb` (its factor applied)."""
        return self.dur[kind][j] if self.scale is None or mb >= self.m else self.dur[kind][j] * self.scale[mb]

    def make_room(self, j: int, kind: str) -> None:
        """Run pending W until the op's activation fits under the limit."""
        while self.mem[j] + self.grow[kind][j] > self.limit:
            if self.w[j] >= self.b[j]:
                raise ScheduleError(f"the memory limit leaves rank {j} no room for its next {kind} "
                                    f"(paper heuristic, {self.m} microbatches)")
            self.put(j, W)

    def fill(self, j: int, ready: float, knobs: Knobs) -> None:
        """Before an op whose input arrives at `ready`: W that end by then, and one more into
        the remaining wait unless that wait is short and the knobs say leave it."""
        while self.w[j] < self.b[j] and self.free[j] + self.time(W, j, self.w[j]) <= ready + EPS:
            self.put(j, W)
        if self.w[j] < self.b[j] and self.free[j] < ready - EPS:
            short = ready - self.free[j] <= self.most_idle - self.idle[j] + EPS
            if short:
                self.decided.add("fill_short_waits")
            if knobs.fill_short_waits or not short:
                self.put(j, W)

    def warm_up(self, knobs: Knobs) -> None:
        pp = self.pp
        for j in range(pp):
            self.put(j, F)
        extra = self._warm_up_depths(knobs.warmup_to_arrival)
        if extra != self._warm_up_depths(not knobs.warmup_to_arrival):
            self.decided.add("warmup_to_arrival")
        for j in range(pp):  # in pipeline order, so each F's input is placed before it
            for _ in range(extra[j]):
                self.make_room(j, F)
                self.put(j, F)
        for j in range(pp - 1, -1, -1):
            self.make_room(j, B)
            self.put(j, B)

    def _warm_up_depths(self, to_arrival: bool) -> list[int]:
        """F each rank adds to its warm-up after microbatch 0's (module doc)."""
        pp, m = self.pp, self.m
        extra = [0] * pp
        # When rank j's first gradient could arrive: from the last rank back, each B after
        # the F its rank runs first (estimated back to back from its first F's end).
        grad = self.end[F][pp - 1][0] + self.time(B, pp - 1, 0)
        for j in range(pp - 2, -1, -1):
            mem, busy = self.mem[j], self.free[j]
            arrives = grad + self.comm[j + 1]
            while self.f[j] + extra[j] < m and mem + self.grow[F][j] <= self.limit:
                f = self.time(F, j, self.f[j] + extra[j])
                if (busy + f > arrives + EPS) if to_arrival else (busy >= arrives - EPS):
                    break
                mem += self.grow[F][j]
                busy += f
                extra[j] += 1
            grad = max(busy, arrives) + self.time(B, j, 0)
        for j in range(1, pp):  # rank j runs fewer warm-up F than rank j - 1
            while extra[j] > 0 and extra[j] >= extra[j - 1] and self.f[j] + extra[j] < m:
                extra[j] -= 1
        return extra

    def steady(self, mb: int, knobs: Knobs) -> None:
        pp, m = self.pp, self.m
        take = [self.f[j] < m and not (self._yields(j) and knobs.yield_to_b) for j in range(pp)]
        for j in range(pp - 2, -1, -1):
            take[j] = take[j] and take[j + 1]
        for j in range(pp):
            if not take[j]:
                continue
            self.make_room(j, F)
            if j > 0:
                self.fill(j, self.arrival(j, F, self.f[j]), knobs)
            self.put(j, F)
        for j in range(pp - 1, -1, -1):
            if self.b[j] != mb or self.f[j] <= mb:
                raise ScheduleError(f"paper heuristic: rank {j} has no F of microbatch {mb} before its B")
            self.make_room(j, B)
            if j < pp - 1:
                self.fill(j, self.arrival(j, B, mb), knobs)
            if j == 0 and self.f[j] == m:
                while self.w[j] < self.b[j]:
                    self.put(j, W)
            self.put(j, B)

    def _yields(self, j: int) -> bool:
        """With `yield_to_b`: rank j, two or more F ahead of rank j + 1, leaves its F out this
        round when it is busy until rank j + 1's next F and B (and the hop back) end, or when the
        F (with the W memory would make it run first) does not end by then and the wait it leaves
        is no longer than the pipeline's largest idle time beyond rank j's own."""
        if j + 1 >= self.pp or self.f[j] < self.f[j + 1] + 2:
            return False
        nxt = (self.free[j + 1] + self.time(F, j + 1, self.f[j + 1]) + self.time(B, j + 1, self.b[j + 1])
               + self.comm[j + 1])
        if self.free[j] >= nxt - EPS:
            self.decided.add("yield_to_b")
            return True
        extra_w, mem, w = 0.0, self.mem[j] + self.grow[F][j], self.w[j]
        while mem > self.limit and w < self.b[j]:
            extra_w += self.time(W, j, w)
            mem += self.grow[W][j]
            w += 1
        if self.free[j] + self.time(F, j, self.f[j]) + extra_w <= nxt + EPS:
            return False
        if nxt - self.free[j] <= self.most_idle - self.idle[j] + EPS:
            self.decided.add("yield_to_b")
            return True
        return False

    def result(self) -> Scored:
        spans = [(0.0 if first is None else first, end) for first, end in zip(self.first, self.free)]
        return Scored([list(r) for r in self.out], score_of(spans, self.peak))
