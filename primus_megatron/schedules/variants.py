"""Try several candidate orders, keep the fastest that fits in memory.

The paper's automatic scheduler tries variants of its heuristic and keeps the
best; block-based schedules try squeezed and reordered forms of their block.
Both go through here, scored by the simulator under the same cost model.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Union

from .costs import StageCosts
from .errors import ScheduleError
from .ir import Op, Schedule, flatten_pairs
from .listsched import Scored
from .gc_pause import gc_paused
from .simulation import peak_memory, rank_spans, score_of
from .w_fill import fill_w

# A candidate builds an order, or an order with its score when it has one already
# (`listsched.Scored`, computed for the same pp, microbatches, placement and costs).
Candidate = Callable[[], Union[list[list[Op]], Scored]]


def score(pp: int, m: int, chunks: int, placement: str, sc: StageCosts, ranks: list[list]) -> tuple[float, float, float]:
    """(makespan, longest per-rank span, max peak memory) of an order (its items ops or overlapped pairs)."""
    flat = [flatten_pairs(row) for row in ranks]
    sched = Schedule("candidate", pp, m, chunks, placement, tuple(ops for ops, _ in flat), {},
                     tuple(starts for _, starts in flat))
    return score_of(rank_spans(sched, sc), peak_memory(sched, sc))


@gc_paused
def best_of(candidates: Iterable[tuple[str, Candidate]], *, pp: int, m: int, chunks: int, placement: str,
            sc: StageCosts, memory_limit: Optional[float], what: str, fill: bool = False,
            post_validation: bool = False) -> list[list[Op]]:
    """The candidate with the smallest (makespan, span, memory) within `memory_limit`, or
    with `post_validation` the smallest (span, makespan, memory): the iteration time of a
    run with an optimizer barrier, or of one without (each rank starts its next iteration
    when it ends this one, `objective`). With `fill`, the winner's W ops are then re-placed
    from the costs (`w_fill`) where that scores better at no more memory than the winner's
    (not under one-slot costs, the cost model the fixed patterns are built for)."""
    rank = objective(post_validation)
    best, best_score, lowest = None, None, None
    for _, make in candidates:
        try:
            made = make()
            if isinstance(made, Scored):
                ranks, s = made
            else:
                ranks, s = made, score(pp, m, chunks, placement, sc, made)
        except ScheduleError:
            continue
        lowest = s[2] if lowest is None else min(lowest, s[2])
        if memory_limit is not None and s[2] > memory_limit + 1e-9:
            continue
        if best_score is None or rank(s) < rank(best_score):
            best, best_score = ranks, s
    if best is None:
        if lowest is None:
            raise ScheduleError(f"no valid {what} schedule exists for pp={pp} and {m} microbatches")
        raise ScheduleError(f"memory limit {memory_limit:g} is too small for {what} with pp={pp} and {m} microbatches: "
                            f"it needs at least {lowest:g} activation units")
    if fill and not sc.one_slot:  # under one-slot costs a pattern's W already sit where they should
        ranks, s = fill_w(pp, m, chunks, placement, sc, best, best_score[2])
        if rank(s) < rank(best_score):
            best, best_score = ranks, s
    return best


def objective(post_validation: bool) -> Callable[[tuple[float, float, float]], tuple[float, float, float]]:
    """How a (makespan, longest per-rank span, peak memory) score ranks: by the makespan when an
    optimizer barrier ends every iteration, by the longest span under post-validation (no barrier:
    the iteration period is the longest rank's span, the simulator's async bubble)."""
    if post_validation:
        return lambda s: (s[1], s[0], s[2])
    return lambda s: s
