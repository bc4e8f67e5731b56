"""W placement for post-validation: balance the ranks' idle time, not the makespan.

Without an optimizer barrier the iteration period is the longest per-rank span
(first op's start to last op's end: the simulator's async bubble), so what
counts is each rank's work plus the idle time after its first op, and the rank
with the most of it sets the period. `fill_w` runs a W only where an op would
wait at least that W's duration (or memory demands it); a shorter wait stays
idle and its W runs later, at the rank's end. `balance_w` replays the same F/B
order with one more rule: a rank also fills a shorter wait with its oldest
pending W when idling would make its work plus idle so far the largest of all
ranks' (the op then starts late by the rest of the W; a rank behind the
others idles, keeping its F and B early for the ranks that wait on them).

This is the balancing rule of the Zero Bubble authors' ZB-V generator (sail-sg,
`zbv.py`'s W placement, which counts each stage's idle time after its first op
and lets a stage idle while it is not the worst), restated for our replay and
per-rank work; the F/B order stays the one given. How far a rank has got
depends on the order ranks are replayed in, so two orders are tried, and the
better by the post-validation objective is kept:

- in rounds, the ranks from the last to the first each run their next F or B
  (with the W before it): the ranks advance about together, as in their
  generator;
- in time order: always the rank free earliest that can run.

On the ZB-V pattern at pp=4, 12 microbatches, f=b=w=1, comm 0.1 this gives the
longest span 37.4 (async bubble 0.0374) where `fill_w` gives 37.8 and the
pattern's own W placement 37.6 (tests/test_schedule_w_balance.py).
"""
from __future__ import annotations

from .costs import StageCosts
from .errors import ScheduleError
from .ir import Op, Pair
from .listsched import Scored
from .gc_pause import gc_paused
from .w_fill import EPS, _Replay, duration

ORDERS = ("rounds", "time")


@gc_paused
def balance_w(pp: int, m: int, chunks: int, placement: str, sc: StageCosts, ranks: list[list[Op]],
              memory_limit: float) -> Scored:
    """`ranks` with its W re-placed to balance the ranks' idle time (module doc), the better of
    the two replay orders by (longest span, makespan, peak memory)."""
    best = None
    for order in ORDERS:
        replay = _Balanced(pp, chunks, placement, sc, ranks, memory_limit, order)
        try:
            replay.run()
            made = replay.result(m)
        except ScheduleError:
            continue
        if best is None or _key(made.score) < _key(best.score):
            best = made
    if best is None:
        raise ScheduleError(f"balance_w: the order deadlocks ({m} microbatches)")
    return best


def _key(score: tuple[float, float, float]) -> tuple[float, float, float]:
    return score[1], score[0], score[2]


class _Balanced(_Replay):
    def __init__(self, pp: int, chunks: int, placement: str, sc: StageCosts, ranks: list[list[Op]],
                 memory_limit: float, order: str) -> None:
        super().__init__(pp, chunks, placement, sc, ranks, memory_limit, 1.0)
        if order not in ORDERS:
            raise ValueError(f"replay order {order!r}: one of {ORDERS}")
        self.order = order
        # each rank's work (all its ops, wherever its W run) and idle time after its first op
        self.work = [sum(duration(sc, tuple((op, self.stage[r][op.chunk]) for op in (item if type(item) is Pair
                                                                                       else (item,))))
                         for item in row) for r, row in enumerate(ranks)]
        self.idle = [0.0] * pp

    def run(self) -> None:
        if self.order == "time":
            self._run_in_time_order()
            return
        moved = True
        while moved and self.done < self.total:
            moved = False
            for r in reversed(range(self.pp)):
                moved |= self._advance(r)

    def _advance(self, r: int) -> bool:
        """Run the rank's W up to and including its next F or B (or its last W); False if it must wait."""
        at, moved = self.next[r], False
        while self.next[r] == at and self._step(r):
            moved = True
        return moved

    def _run_in_time_order(self) -> None:
        while self.done < self.total:
            for r in sorted(range(self.pp), key=self.free.__getitem__):
                if self._step(r):
                    break
            else:
                return  # no rank can move: result() names the deadlock

    def _fills(self, r: int, wait: float) -> bool:
        if super()._fills(r, wait):
            return True
        if wait <= EPS:
            return False
        lead = max(w + i for w, i in zip(self.work, self.idle))
        return self.work[r] + self.idle[r] + wait > lead + EPS

    def _run(self, r: int, halves: tuple, start: float) -> None:
        if self.first[r] is not None:
            self.idle[r] += start - self.free[r]
        super()._run(r, halves, start)
