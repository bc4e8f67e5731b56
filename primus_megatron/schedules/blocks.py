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

from collections import deque

from .costs import StageCosts
from .ir import B, F, V, W, Op, owner_of
from .listsched import Policy

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
        pending: deque = deque()
        placed, t = 0, 0
        while placed < 2 * m:
            if t in taken:
                kind, j, stage = taken[t]
                if kind == B:
                    pending.append((j, stage))
            elif pending:
                j, stage = pending.popleft()
                slots[(W, j, stage)] = t
                placed += 1
            t += 1
    return slots


def memory_profile(pp: int, slots: Slots, sc: StageCosts) -> list[list[float]]:
    """Activation memory on each rank at each slot (ops at a slot count)."""
    horizon = max(slots.values()) + 1
    delta = [[0.0] * (horizon + 1) for _ in range(pp)]
    for (kind, _, stage), t in slots.items():
        delta[owner_of(V, pp, stage)[0]][t] += sc.mem[kind][stage]
    for row in delta:
        for t in range(1, len(row)):
            row[t] += row[t - 1]
    return delta


def compact(pp: int, slots: Slots, sc: StageCosts) -> Slots:
    """Move every op to the earliest free slot after its inputs, in slot
    order, unless that would raise its rank above the steady-state peak."""
    n = 2 * pp
    mem = memory_profile(pp, slots, sc)
    cap = max(max(row) for row in mem) + 1e-9
    occupied = [set() for _ in range(pp)]
    for (_, _, stage), t in slots.items():
        occupied[owner_of(V, pp, stage)[0]].add(t)
    out: Slots = {}
    for (kind, j, s), t in sorted(slots.items(), key=lambda kv: kv[1]):
        r = owner_of(V, pp, s)[0]
        deps = [(kind, j - 1, s)] if j else []  # one chunk runs microbatches in order
        if kind == F and s > 0:
            deps.append((F, j, s - 1))
        elif kind == B:
            deps.append((F, j, s) if s == n - 1 else (B, j, s + 1))
        elif kind == W:
            deps.append((B, j, s))
        earliest = max((out[d] + 1 for d in deps), default=0)
        grow = sc.mem[kind][s]
        for c in range(earliest, t):
            if c in occupied[r] or (grow > 0 and max(mem[r][c:t]) + grow > cap):
                continue
            occupied[r].discard(t)
            occupied[r].add(c)
            for x in range(c, t):
                mem[r][x] += grow
            t = c
            break
        out[(kind, j, s)] = t
    return out


def slot_policy(slots: Slots, *, cooldown_b_first: bool = True) -> Policy:
    """List-scheduler policy following the slots; B and W (which never add
    memory) may run ahead into gaps, and in cool-down B go before W."""

    def key(kind: str, mb: int, chunk: int, stage: int, state) -> tuple:
        k = B if kind == "BW" else kind
        late_w = cooldown_b_first and state.cooldown and k == W
        return (late_w, slots[(k, mb, stage)])

    return Policy(key, backfill=lambda kind, state: kind != F, reserve=False, name="block")


def slot_order(pp: int, slots: Slots) -> list[list[Op]]:
    """Each rank's ops sorted by slot: the squeezed schedule."""
    ranks: list[list[tuple[int, Op]]] = [[] for _ in range(pp)]
    for (kind, j, s), t in slots.items():
        r, c = owner_of(V, pp, s)
        ranks[r].append((t, Op(kind, j, c)))
    return [[op for _, op in sorted(row)] for row in ranks]
