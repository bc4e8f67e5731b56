"""ZB-auto: the zero-bubble paper's automatic scheduler, driven by measured costs.

Candidates, the fastest within the memory limit kept (`variants.best_of`, by the
makespan, or by the longest per-rank span under post-validation):
- the list scheduler (`listsched`) with warm-up depths from 1F1B's up, stage i
  one or two F deeper than stage i + 1, W filling gaps;
- the paper's own heuristic over its free parameters (`auto_heuristic`): with its
  profiled costs and memory model it gives its ZB-1p and ZB-2p;
- the handcrafted zb-h1 and zb-h2, so auto is never worse than them at their memory.
"""
from __future__ import annotations

import math
from typing import Optional

from ..auto_heuristic import candidates as paper_candidates
from ..costs import StageCosts
from ..errors import ScheduleError
from ..ir import B, BW, F, LOOP, Op
from ..listsched import Policy, RankState, list_schedule_scored
from ..registry import register
from ..variants import best_of
from .zb_h1 import zb_h1
from .zb_h2 import zb_h2


def heuristic(warmup: list[int]) -> Policy:
    """Warm up with `warmup[r]` F, then B before F before W; W only fills gaps."""

    def key(kind: str, mb: int, chunk: int, stage: int, st: RankState) -> tuple:
        if kind == F:
            return (-1 if st.f_count < warmup[st.rank] else 1, mb)
        if kind in (B, BW):
            return (0, mb)
        return (2, mb)

    return Policy(key, name=f"warmup={warmup[0]}..{warmup[-1]}")


@register("zb-auto", order=50, memory="limit", cost_driven=True,
          description="automatic zero bubble from measured costs under a memory limit (default: 1F1B's)",
          splits_backward=True)
def zb_auto(pp: int, microbatches: int, *, costs: StageCosts, memory_limit: Optional[float] = None,
            post_validation: bool = False, **_) -> list[list[Op]]:
    m = microbatches
    limit = _one_f_one_b_peak(pp, m, costs) if memory_limit is None else memory_limit
    unit = max(f + max(0.0, b) for f, b in zip(costs.mem[F], costs.mem[B]))  # one microbatch's peak
    if limit < unit - 1e-9:
        raise ScheduleError(f"memory limit {limit:g} is below one microbatch's activations ({unit:g}); zb-auto needs at least that")
    # F a rank may hold before its first W: up to 2m, fewer only if the limit binds
    # (no division when activations take no memory, or so little that limit / unit overflows)
    most = 2 * m if limit >= 2 * m * unit else max(1, min(2 * m, math.floor(limit / unit + 1e-9)))
    candidates = []
    # Warm-up depths for the list scheduler: stage i runs one (or two) more warm-up F than
    # stage i+1, as many as memory allows, from 1F1B's depth up.
    for top in _spread(sorted({min(most, k) for k in range(pp, 2 * pp + 1)}), LIST_BUDGET // (2 * pp * m)):
        for step in (1, 2):
            warm = [max(1, min(most, top - step * r)) for r in range(pp)]
            candidates.append((f"warmup {warm}", lambda w=warm: list_schedule_scored(pp, m, 1, LOOP, costs, limit, heuristic(w))))
    # The handcrafted schedules are candidates too, so auto is never worse.
    candidates.append(("zb-h1", lambda: zb_h1(pp, m)))
    candidates.append(("zb-h2", lambda: zb_h2(pp, m)))
    # The paper's heuristic last: an equal score keeps the earlier candidates' order.
    candidates += paper_candidates(pp, m, costs, limit)
    return best_of(candidates, pp=pp, m=m, chunks=1, placement=LOOP, sc=costs, memory_limit=limit, what="zb-auto",
                   post_validation=post_validation)


# Ops the list-scheduled candidates may take in all (pp x microbatches per run): every warm-up
# depth while they are few, evenly spread ones on large pipelines, so that the planner stays
# under a second at pp=32, m=256 (benchmarks/planner_speed.py); the paper's heuristic and the
# handcrafted orders are tried whatever the budget.
LIST_BUDGET = 16384


def _spread(values: list[int], count: int) -> list[int]:
    """At most `count` (at least 1) of `values`, evenly spread, the last (deepest) always kept."""
    count = max(1, count)
    if len(values) <= count:
        return values
    if count == 1:
        return values[-1:]
    return sorted({values[round(i * (len(values) - 1) / (count - 1))] for i in range(count)})


def _one_f_one_b_peak(pp: int, m: int, costs: StageCosts) -> float:
    """The default memory limit: what 1F1B holds on its fullest rank under these costs,
    at least pp units (1F1B's depth at unit costs). Where ranks' activations differ
    (uneven layer splits) a heavier rank holds more than pp units in 1F1B itself."""
    from ..ir import Schedule
    from ..simulation import peak_memory
    from .one_f_one_b import one_f_one_b

    ranks = tuple(map(tuple, one_f_one_b(pp, m)))
    return max(float(pp), max(peak_memory(Schedule("1f1b", pp, m, 1, LOOP, ranks), costs)))
