"""How far simulated schedules are from the optimum the integer program finds.

Each schedule is compared with the shortest order of the same pipeline (same
placement, chunks and costs) that fits in the schedule's own peak memory:
`builtin/optimal.solve`, warm-started from the fastest schedule sharing that
memory, so one solve serves every schedule with the same layout and peak. Where
the solver proves its order optimal the distance is exact. Where its time limit
ends first, the gap to its best order is a lower bound of the distance; its
own lower bound (big-M orderings relax badly) is too loose to be worth printing.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from .builtin.optimal import MAX_OPS_PER_RANK, solve
from .costs import Costs
from .errors import ScheduleError
from .ir import B, BW, W, Op
from .simulation import SimResult


class Distance(NamedTuple):
    """The schedule's makespan over the best order the solver found, minus one: the
    distance to the optimum where it was `proven` optimal, else a lower bound of it
    (the solver stopped at `limit` seconds); or why there is no number (`note`)."""

    gap: Optional[float] = None
    proven: bool = False
    limit: float = 0.0
    note: str = ""

    def __str__(self) -> str:
        if self.note:
            return self.note
        return f"{self.gap:+.1%}" if self.proven else f">= {self.gap:+.1%} (not proven in {self.limit:g} s)"


def distances(results: list[SimResult], costs: Costs, time_limit: float, *,
              post_validation: bool = False) -> dict[str, Distance]:
    """Distance to the optimum per schedule name (module doc): in makespan, or with
    `post_validation` in the longest per-rank span (no optimizer barrier)."""
    length = (lambda r: max(r.span)) if post_validation else (lambda r: r.makespan)
    groups: dict[tuple, list[SimResult]] = {}
    for res in results:
        sched = res.schedule
        key = (sched.chunks_per_rank, sched.placement, round(res.max_peak_memory, 9))
        groups.setdefault(key, []).append(res)
    out: dict[str, Distance] = {}
    # The program has no fused kind: with a BW cost of its own, a schedule of BW ops is not comparable.
    unsplit_costs_differ = costs.bw is not None
    for (chunks, placement, peak), members in groups.items():
        sched = members[0].schedule
        if 3 * sched.microbatches * chunks > MAX_OPS_PER_RANK:
            out.update((r.schedule.name, Distance(note="too large for the ILP")) for r in members)
            continue
        warm = min(members, key=length).schedule
        try:
            found = solve(sched.pp, sched.microbatches, costs.resolve(sched.pp, chunks, placement, sched.microbatches), peak,
                          chunks=chunks, placement=placement, time_limit=time_limit, warm=_split(warm.ranks),
                          post_validation=post_validation)
        except ScheduleError as exc:
            out.update((r.schedule.name, Distance(note=str(exc).split(":")[0])) for r in members)
            continue
        for r in members:
            if unsplit_costs_differ and any(op.kind == BW for row in r.schedule.ranks for op in row):
                out[r.schedule.name] = Distance(note="the ILP times a backward as B + W, not as the given BW")
            elif found is None:
                out[r.schedule.name] = Distance(note=f"no order found in {time_limit:g} s")
            else:
                out[r.schedule.name] = Distance(length(r) / found.makespan - 1.0, proven=found.optimal,
                                                limit=time_limit)
    return out


def _split(ranks) -> list[list[Op]]:
    """An order with each fused BW written as its B then its W: the same timing where BW costs
    B + W, in the program's ops (it has no fused kind)."""
    return [[part for op in row for part in ((Op(B, op.mb, op.chunk), Op(W, op.mb, op.chunk))
                                             if op.kind == BW else (op,))] for row in ranks]
