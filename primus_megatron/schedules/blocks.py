"""Building blocks: a schedule as one microbatch's op pattern repeated every period.

Following "Pipeline Parallelism with Controllable Memory" (Qi et al., 2024):
lay out the F and B ops of one microbatch (the block), repeat it every
period without two ops of a rank colliding, let each W take the first free
slot after its B, then squeeze. Peak activation memory follows from how long
each activation lives in the block. Warm-up and cool-down leave memory
unused, so ops there may move into earlier free slots as long as no rank
exceeds the steady-state peak (`compact`).

Times are in slots of one chunk op; with two chunks a rank does 6 slots per
microbatch, which is the period.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter, deque
from itertools import accumulate
from operator import itemgetter
from typing import Optional

from .costs import StageCosts
from .deps import input_of
from .errors import ScheduleError
from .ir import B, F, V, W, Op, new_op, owner_of
from .listsched import Policy
from .gc_pause import gc_paused

PERIOD = 6
Slots = dict[tuple[str, int, int], int]  # (kind, mb, stage) -> slot


def v_min_block(pp: int) -> list[tuple[int, int, int, int]]:
    """Per rank (F chunk 0, F chunk 1, B chunk 1, B chunk 0) slots: the V
    traversed without gaps (shortest lifespans: ~1/3 of 1F1B's memory)."""
    d = 2 if pp % 3 == 0 else 0  # shift the return leg so ops do not collide mod 6
    return [(i, 2 * pp - 1 - i, 2 * pp + d + i, 4 * pp + d - 1 - i) for i in range(pp)]


def v_half_block(pp: int) -> list[tuple[int, int, int, int]]:
    """As `v_min_block`, with one idle slot between hops on the down arm of the
    forward and of the chunk-1 backward (~1/2 of 1F1B's memory, ~1/2 its bubble)."""
    d = 3 if pp % 2 == 0 else 0
    return [(2 * i, 3 * pp - 2 - i, 3 * pp + d - 1 + 2 * i, 6 * pp + d - 2 - i) for i in range(pp)]


@gc_paused
def repeat(pp: int, m: int, block: list[tuple[int, int, int, int]]) -> Slots:
    """Repeat a V block for m microbatches; W ops fill each rank's first free
    slots after their B, oldest first."""
    n = 2 * pp
    slots: Slots = {}
    for r, (f0, f1, b1, b0) in enumerate(block):
        taken: dict[int, tuple[str, int, int]] = {}
        for j in range(m):
            for kind, stage, at in ((F, r, f0), (F, n - 1 - r, f1), (B, n - 1 - r, b1), (B, r, b0)):
                slots[(kind, j, stage)] = taken_at = j * PERIOD + at
                taken[taken_at] = (kind, j, stage)
        # Walk the taken slots in order, handing the free slots before each to the
        # pending W (as a slot-by-slot walk would, without visiting every slot).
        pending: deque = deque()
        free = 0  # first slot not yet looked at
        for t in sorted(taken):
            while pending and free < t:
                slots[(W, *pending.popleft())] = free
                free += 1
            kind, j, stage = taken[t]
            if kind == B:
                pending.append((j, stage))
            free = t + 1
        while pending:
            slots[(W, *pending.popleft())] = free
            free += 1
    return slots


def memory_profile(pp: int, slots: Slots, sc: StageCosts) -> list[list[float]]:
    """Activation memory on each rank at each slot (ops at a slot count)."""
    rank = _ranks(pp)
    horizon = max(slots.values()) + 1
    delta = [[0.0] * (horizon + 1) for _ in range(pp)]
    for (kind, _, stage), t in slots.items():
        delta[rank[stage]][t] += sc.mem[kind][stage]
    return [list(accumulate(row)) for row in delta]  # the running sum, left to right


@gc_paused
def compact(pp: int, slots: Slots, sc: StageCosts, keep: tuple[int, int] = (0, -1)) -> Slots:
    """Move every op to the earliest free slot after its inputs, in slot
    order, unless that would raise its rank above the steady-state peak.
    Ops in slots keep[0]..keep[1] stay where they are (`steady_window`: packing
    only warm-up and cool-down keeps the block's slack for p2p latency).

    Ops move far (up to ~pp slots), so updating a per-slot memory profile on every
    move costs O(pp) each; when the memory sums are exact (`_sums_are_exact`) the
    peak over a window is read from the few ops placed in it instead."""
    n = 2 * pp
    rank = _ranks(pp)
    mem = memory_profile(pp, slots, sc)
    cap = max(max(row) for row in mem) + 1e-9
    occupied: list[set[int]] = [set() for _ in range(pp)]
    for (_, _, stage), t in slots.items():
        occupied[rank[stage]].add(t)
    exact = _sums_are_exact(slots, sc)
    # With exact sums, the memory of rank r at a slot x < t (t: the op being moved)
    # is the sum of the deltas of the ops already processed and placed at or before
    # x, a step function: kept as the placed slots (sorted) and their nonzero deltas.
    placed: list[list[int]] = [[] for _ in range(pp)]
    deltas: list[list[float]] = [[] for _ in range(pp)]
    total = [0.0] * pp  # sum of the deltas of the ops processed so far
    # Where each processed op went, by ((kind, stage) base + mb): a list, not a dict
    # keyed by tuples. An op's inputs: the same op of the previous microbatch (one
    # chunk runs microbatches in order), then the op producing its input.
    span = max(j for _, j, _ in slots) + 1
    base = {kind: [(i * n + s) * span for s in range(n)] for i, kind in enumerate((F, B, W))}
    inputs = {kind: [input_of(kind, s, n) for s in range(n)] for kind in (F, B, W)}
    feed = {kind: [-1 if src is None else base[src[0]][src[1]] for src in row] for kind, row in inputs.items()}
    went: list[Optional[int]] = [None] * (3 * n * span)
    items = sorted(slots.items(), key=_SLOT)
    final: list[int] = []
    for (kind, j, s), t in items:
        r = rank[s]
        me = base[kind][s] + j
        earliest = 0
        if j:
            if went[me - 1] is None:
                raise _unplaced((kind, j - 1, s), (kind, j, s))
            earliest = went[me - 1] + 1
        src = feed[kind][s]
        if src >= 0:
            if went[src + j] is None:
                raise _unplaced((inputs[kind][s][0], j, inputs[kind][s][1]), (kind, j, s))
            if went[src + j] >= earliest:
                earliest = went[src + j] + 1
        grow = sc.mem[kind][s]
        occ = occupied[r]
        stays = keep[0] <= t <= keep[1]
        for c in range(earliest, earliest if stays else t):  # the new slot is nearly always within a few of `earliest`
            if c in occ:
                continue
            if grow > 0:
                if exact:
                    # max(mem[c:t]): the memory just before c (c is free), then after each
                    # op placed in (c, t), usually a handful.
                    i = bisect_right(placed[r], c)
                    after = deltas[r][i:]
                    peak = max(accumulate(after, initial=total[r] - sum(after)))
                else:
                    peak = max(mem[r][c:t])
                if peak + grow > cap:
                    continue
            occ.discard(t)
            occ.add(c)
            if not exact and grow:  # adding 0.0 would change nothing (no slot holds -0.0)
                row = mem[r]
                row[c:t] = [v + grow for v in row[c:t]]
            t = c
            break
        if exact and grow:  # an op adding nothing changes no sum
            i = bisect_right(placed[r], t)
            placed[r].insert(i, t)
            deltas[r].insert(i, grow)
            total[r] += grow
        went[me] = t
        final.append(t)
    return dict(zip(map(_FIRST, items), final))


def _unplaced(missing: tuple[str, int, int], op: tuple[str, int, int]) -> ScheduleError:
    """The error for slots that place an op but not an op it follows (its input, or the same
    op of the previous microbatch); keys are (kind, microbatch, stage)."""
    kind, mb, stage = op
    return ScheduleError(f"block slots place {kind} of microbatch {mb} at stage {stage} but not "
                         f"{missing[0]} of microbatch {missing[1]} at stage {missing[2]}, which it follows")


def steady_window(slots: Slots, m: int) -> tuple[int, int]:
    """Slots of the repeated block's steady state: from rank 0's first chunk-0 B
    (the first microbatch has come back) to its last chunk-0 F (the last one enters)."""
    return slots[(B, 0, 0)], slots[(F, m - 1, 0)]


def _sums_are_exact(slots: Slots, sc: StageCosts) -> bool:
    """True when every sum of the ops' memory deltas is exact in floating point: all
    are multiples of one power of two and no sum reaches 2**53 of those units. Then
    the order of additions cannot matter (unit costs: multiples of 1/chunks)."""
    values = [v for kind in (F, B, W) for v in sc.mem[kind]]
    if not all(map(math.isfinite, values)):
        return False
    unit = max(float(v).as_integer_ratio()[1] for v in values)  # a power of two
    if unit > 2 ** 50:
        return False  # tiny (even subnormal) deltas: sums would round
    uses = Counter(map(_KIND_STAGE, slots))  # (kind, stage) -> how many ops
    mass = sum(abs(sc.mem[kind][stage]) * count for (kind, stage), count in uses.items())
    return mass * unit < 2.0 ** 50  # margin for the rounding of `mass` itself


def slot_policy(slots: Slots, *, cooldown_b_first: bool = True) -> Policy:
    """List-scheduler policy following the slots; B and W (which never add
    memory) may run ahead into gaps, and in cool-down B go before W."""

    def key(kind: str, mb: int, chunk: int, stage: int, state) -> tuple:
        k = B if kind == "BW" else kind
        late_w = cooldown_b_first and k == W and state.cooldown  # a bool either way; cheap tests first
        return (late_w, slots[(k, mb, stage)])

    return Policy(key, backfill=lambda kind, state: kind != F, reserve=False, name="block")


@gc_paused
def slot_order(pp: int, slots: Slots) -> list[list[Op]]:
    """Each rank's ops sorted by slot: the squeezed schedule."""
    where = [owner_of(V, pp, s) for s in range(2 * pp)]
    ranks: list[list[tuple[int, Op]]] = [[] for _ in range(pp)]
    for (kind, j, s), t in slots.items():
        r, c = where[s]
        ranks[r].append((t, new_op((kind, j, c))))
    return [[op for _, op in sorted(row)] for row in ranks]


def _ranks(pp: int) -> list[int]:
    """Rank holding each stage of a V pipeline."""
    return [owner_of(V, pp, s)[0] for s in range(2 * pp)]


_FIRST, _SLOT, _KIND_STAGE = itemgetter(0), itemgetter(1), itemgetter(0, 2)
