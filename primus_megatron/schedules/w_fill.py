"""Cost-aware placement of the weight-gradient (W) ops of a given order.

A W depends only on its own B and frees memory, so where it runs is the one
decision a fixed pattern can leave to the costs. `fill_w` keeps each rank's F
and B in the order given and replays them in simulated time: before each F or
B, the rank runs its oldest pending W if the op would otherwise wait at least
`fit` times that W's duration for its input (the gap is filled), or if the
op's activation would not fit under `memory_limit` (memory demands it); the W
left at the end run last. Under unequal costs or a p2p latency this closes the
gaps a cost-blind pattern leaves, without raising peak memory above the limit.

An order may hold overlapped pairs (`ir.Pair`): a pair starts when both halves'
inputs are there and takes the pair's time (`StageCosts.pair_duration`), as the
simulator runs it, and stays a pair; W is placed around it as around an op.

Decisions depend only on simulated times already known, so replaying the ranks
in any order gives the same result; the replay is itself the simulation, and
the order comes back scored (`listsched.Scored`).
"""
from __future__ import annotations

from collections import deque

from .costs import StageCosts
from .deps import input_of, outputs_of
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import B, W, Op, Pair, new_op, stage_of
from .listsched import Scored
from .simulation import score_of

EPS = 1e-9


@gc_paused
def fill_w(pp: int, m: int, chunks: int, placement: str, sc: StageCosts, ranks: list[list[Op]],
           memory_limit: float, fit: float = 1.0) -> Scored:
    """`ranks` with its W ops re-placed (module doc), and the result's score."""
    replay = _Replay(pp, chunks, placement, sc, ranks, memory_limit, fit)
    replay.run()
    return replay.result(m)


class _Replay:
    def __init__(self, pp: int, chunks: int, placement: str, sc: StageCosts, ranks: list[list],
                 memory_limit: float, fit: float) -> None:
        n = pp * chunks
        self.pp, self.sc, self.limit, self.fit = pp, sc, memory_limit + EPS, fit
        self.stage = [[stage_of(placement, pp, r, c) for c in range(chunks)] for r in range(pp)]
        owner = {self.stage[r][c]: r for r in range(pp) for c in range(chunks)}

        def half(r: int, op: Op) -> tuple:
            s = self.stage[r][op.chunk]
            src = input_of(op.kind, s, n)
            key = None if src is None else (src[0], op.mb, src[1])
            lag = 0.0 if src is None or owner[src[1]] == r else sc.comm[src[1]]
            return op, s, key, lag

        # Per rank, its F/B items (an op, or a pair's two halves) as a tuple of (op, stage, input key
        # or None, latency the input adds) per half.
        self.todo = [[tuple(half(r, op) for op in (item if type(item) is Pair else (item,)))
                      for item in row if type(item) is Pair or item.kind != W] for r, row in enumerate(ranks)]
        self.total = sum(map(len, ranks))
        self.next = [0] * pp
        self.pending: list[deque] = [deque() for _ in range(pp)]  # (op, stage) of B whose W has not run
        self.out: list[list] = [[] for _ in range(pp)]
        self.free, self.mem, self.peak = [0.0] * pp, [0.0] * pp, [0.0] * pp
        self.first: list = [None] * pp
        self.end: dict = {}  # (kind, mb, stage) -> simulated end
        self.done = 0

    def run(self) -> None:
        """Advance every rank as far as known inputs allow, until all ops ran or none can."""
        moved = True
        while moved and self.done < self.total:
            moved = False
            for r in range(self.pp):
                while self._step(r):
                    moved = True

    def _step(self, r: int) -> bool:
        """Run the rank's next item (a W, or its next F/B op or pair); False when it must wait for another rank."""
        if self.next[r] == len(self.todo[r]):
            if not self.pending[r]:
                return False
            self._run_w(r)
            return True
        halves = self.todo[r][self.next[r]]
        grow = self.sc.memory(halves[0][0].kind, halves[0][1])  # a pair's F half first, as the simulator counts
        pending = self.pending[r]
        if pending and grow > 0 and self.mem[r] + grow > self.limit:
            self._run_w(r)  # memory demands it
            return True
        ready = 0.0  # a pair starts with both halves' inputs there
        for _op, _s, key, lag in halves:
            if key is None:
                continue
            if key not in self.end:
                return False  # input not simulated yet
            ready = max(ready, self.end[key] + lag)
        if pending and self._fills(r, ready - self.free[r]):
            self._run_w(r)  # the op would wait this long anyway
            return True
        self._run(r, tuple(h[:2] for h in halves), max(self.free[r], ready))
        self.next[r] += 1
        pending.extend((op, s) for op, s, _key, _lag in halves if op.kind == B)
        return True

    def _fills(self, r: int, wait: float) -> bool:
        """Whether the rank's oldest pending W runs now, before an op that would wait `wait`
        (`w_balance` adds a rule)."""
        op, s = self.pending[r][0]
        return wait >= self.fit * self.sc.duration(W, s, op.mb) - EPS

    def _run_w(self, r: int) -> None:
        op, s = self.pending[r].popleft()
        self._run(r, ((new_op((W, op.mb, op.chunk)), s),), self.free[r])

    def _run(self, r: int, halves: tuple, start: float) -> None:
        """Run an op, or a pair (both halves end together), given as ((op, stage), ...), from `start`."""
        end = self.free[r] = start + duration(self.sc, halves)
        for op, s in halves:
            self.end[(outputs_of(op.kind)[0], op.mb, s)] = end
            self.mem[r] += self.sc.memory(op.kind, s)
            self.peak[r] = max(self.peak[r], self.mem[r])
        if self.first[r] is None:
            self.first[r] = start
        self.out[r].append(halves[0][0] if len(halves) == 1 else Pair(halves[0][0], halves[1][0]))
        self.done += 1

    def result(self, m: int) -> Scored:
        if self.done < self.total:
            stuck = next(r for r in range(self.pp) if self.next[r] < len(self.todo[r]))
            raise ScheduleError(f"fill_w: the order deadlocks on rank {stuck} ({m} microbatches)")
        spans = [(0.0 if first is None else first, end) for first, end in zip(self.first, self.free)]
        return Scored(self.out, score_of(spans, self.peak))


def duration(sc: StageCosts, halves: tuple) -> float:
    """Time of an op ((op, stage),) or of an overlapped pair ((F, stage), (B or BW, stage))."""
    if len(halves) == 1:
        op, s = halves[0]
        return sc.duration(op.kind, s, op.mb)
    (f, fs), (b, bs) = halves
    return sc.pair_duration(fs, b.kind, bs, f.mb, b.mb)
