"""Overlapped pairs for any order: where a rank runs an F right before a B or BW of another
microbatch or chunk, run the two as one overlapped op (`ir.Pair`), so that each one's expert-parallel
all-to-all hides under the other's compute (`costs.a2a`).

A pair starts only when both inputs are there, so a merge can make a rank wait that would not have
(or, across ranks, make two pairs wait for each other): `with_pairs` merges every candidate, runs the
result, unmerges the pairs the run shows stuck, and keeps the pairs only if the whole order runs and
is no slower than without them under the costs given.
"""
from __future__ import annotations

from .costs import StageCosts
from .errors import ScheduleError
from .ir import B, BW, F, Op, Schedule, pair_items
from .simulation import end_times, stuck_positions

__all__ = ["candidates", "paired_order", "with_pairs"]


def candidates(ops: list[Op]) -> list[int]:
    """Positions p where ops[p] is an F and ops[p + 1] a B or BW of another (microbatch, chunk), taken
    left to right without overlap."""
    out, p = [], 0
    while p < len(ops) - 1:
        a, b = ops[p], ops[p + 1]
        if a.kind == F and b.kind in (B, BW) and (a.mb, a.chunk) != (b.mb, b.chunk):
            out.append(p)
            p += 2
        else:
            p += 1
    return out


def with_pairs(ranks: list[list[Op]], schedule: Schedule, sc: StageCosts) -> list[list]:
    """`ranks` (plain ops) with every candidate pair that runs and helps, as `Pair` items; `ranks`
    unchanged where pairing gains nothing (no all-to-all to hide, or a slower order)."""
    if sc.a2a is None or not any(sc.a2a):
        return ranks
    pairs = [set(candidates(ops)) for ops in ranks]
    for _ in range(sum(map(len, pairs)) + 1):  # each round unmerges at least one pair
        trial = schedule.with_ranks(ranks, tuple(frozenset(p) for p in pairs))
        try:
            paired_end = max(max(e, default=0.0) for e in end_times(trial, sc))
            break
        except ScheduleError:
            stuck = _stuck_pairs(trial, sc)
            if not stuck:
                return ranks
            for r, p in stuck:
                pairs[r].discard(p)
    else:
        return ranks
    plain_end = max(max(e, default=0.0) for e in end_times(schedule.with_ranks(ranks), sc))
    if not any(pairs) or paired_end > plain_end * (1 + 1e-9):
        return ranks
    return [pair_items(ops, p) for ops, p in zip(ranks, pairs)]


def paired_order(name: str, ranks: list[list[Op]], *, pp: int, m: int, chunks: int, placement: str,
                 sc: StageCosts) -> list[list]:
    """`with_pairs` for a generator's own op lists (what it returns to the registry)."""
    plain = Schedule(name, pp, m, chunks, placement, tuple(map(tuple, ranks)))
    return with_pairs([list(ops) for ops in ranks], plain, sc)


def _stuck_pairs(schedule: Schedule, sc: StageCosts) -> list[tuple[int, int]]:
    """The pairs at which each stuck rank stopped (the run's first unfinished op, or the pair it is in)."""
    stopped = stuck_positions(schedule, sc)
    out = []
    for r, position in enumerate(stopped):
        starts = schedule.paired(r)
        if position in starts:
            out.append((r, position))
        elif position - 1 in starts:
            out.append((r, position - 1))
    return out

