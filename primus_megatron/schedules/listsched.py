"""The list scheduler behind every cost-driven and block-based schedule.

Time is simulated while the order is built. Whenever a rank is free it looks
at its candidates: the next F of each chunk whose input has arrived and whose
activation fits in memory, the next B of each chunk whose gradient has
arrived, and its pending W. It runs the candidate with the smallest
`Policy.key`, unless a candidate with a smaller key will be ready before that
op would end: then it waits for it (so a W fills a gap only when the gap is
long enough, as in the zero-bubble paper's heuristic). Arrival times of inputs
whose producer has not started yet are estimated by a critical-path lower
bound.

Memory admission keeps room for one later-chunk activation whenever a new
microbatch enters a rank, so a rank holding several chunks never starves its
own deeper chunk.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

from .costs import StageCosts
from .errors import ScheduleError
from .ir import B, BW, F, W, Op, stage_of

INF = float("inf")
EPS = 1e-9

# key(kind, mb, chunk, stage, state) -> sortable; smaller runs first.
KeyFn = Callable[[str, int, int, int, "RankState"], tuple]


@dataclass
class RankState:
    """What a key function may look at for the rank deciding."""

    rank: int
    f_count: int = 0
    b_count: int = 0
    f_total: int = 0  # F ops this rank runs in all

    @property
    def cooldown(self) -> bool:
        return self.f_count >= self.f_total


@dataclass(frozen=True)
class Policy:
    key: KeyFn
    split: bool = True  # False: one BW instead of B then W
    name: str = ""
    # May a ready op of this kind run ahead of a smaller-key op that is not ready?
    backfill: Callable[[str, "RankState"], bool] = lambda kind, state: True
    reserve: bool = True  # keep room for a later chunk when a microbatch enters a rank


def list_schedule(pp: int, m: int, chunks: int, placement: str, sc: StageCosts,
                  memory_limit: Optional[float], policy: Policy) -> list[list[Op]]:
    n = pp * chunks
    stages = [[stage_of(placement, pp, r, c) for c in range(chunks)] for r in range(pp)]
    where = {stages[r][c]: (r, c) for r in range(pp) for c in range(chunks)}
    limit = INF if memory_limit is None else memory_limit + EPS
    headroom = [max(sc.mem[F][s] for s in stages[r][1:]) if chunks > 1 and policy.reserve else 0.0 for r in range(pp)]
    bkind = B if policy.split else BW

    next_f = [[0] * chunks for _ in range(pp)]
    next_b = [[0] * chunks for _ in range(pp)]
    pending_w: list[list[deque]] = [[deque() for _ in range(chunks)] for _ in range(pp)]
    state = [RankState(r, f_total=m * chunks) for r in range(pp)]
    mem = [0.0] * pp
    free = [0.0] * pp
    end_of: dict[tuple[str, int, int], float] = {}  # (F|B, mb, stage) -> end time
    out: list[list[Op]] = [[] for _ in range(pp)]
    remaining = [(3 if policy.split else 2) * m * chunks] * pp
    wake = [0.0] * pp
    heap = [(0.0, r) for r in range(pp)]

    def arrival(kind: str, mb: int, src: int, dst: int) -> float:
        end = end_of.get((kind, mb, src))
        if end is None:
            return INF
        return end + (sc.comm[src] if where[src][0] != where[dst][0] else 0.0)

    def ready_at(r: int, kind: str, c: int) -> float:
        """When the input of rank r's next `kind` on chunk c is there (INF: unknown)."""
        s = stages[r][c]
        if kind == F:
            mb = next_f[r][c]
            return INF if mb >= m else (0.0 if s == 0 else arrival(F, mb, s - 1, s))
        mb = next_b[r][c]
        if mb >= m or mb >= next_f[r][c]:
            return INF
        return end_of.get((F, mb, s), INF) if s == n - 1 else arrival(B, mb, s + 1, s)

    now = [0.0, 0]  # decision time and deciding rank

    def bound(kind: str, mb: int, s: int, depth: int = 0) -> float:
        """Lower bound on the end of (kind, mb, stage s) given what is scheduled;
        INF if it waits on the deciding rank itself (waiting would not help)."""
        if (kind, mb, s) in end_of:
            return end_of[(kind, mb, s)]
        r, c = where[s]
        if r == now[1] or depth > 2 * n:
            return INF
        if kind == F:
            start = 0.0 if s == 0 else bound(F, mb, s - 1, depth + 1) + sc.comm[s - 1]
        elif s == n - 1:
            start = bound(F, mb, s, depth + 1)
        else:
            start = bound(B, mb, s + 1, depth + 1) + sc.comm[s + 1]
        return max(start, free[r], now[0]) + sc.duration(kind, s)

    def eta(r: int, kind: str, c: int) -> float:
        t = ready_at(r, kind, c)
        if t < INF:
            return t
        s = stages[r][c]
        mb = next_f[r][c] if kind == F else next_b[r][c]
        if mb >= m or (kind != F and mb >= next_f[r][c] and s != n - 1):
            return INF
        if kind == F:
            return bound(F, mb, s - 1) + sc.comm[s - 1]
        return bound(F, mb, s) if s == n - 1 else bound(B, mb, s + 1) + sc.comm[s + 1]

    # Memory a B will still add (mem_b > 0) for microbatches whose F ran and B did not:
    # an F is admitted only if those B can run later without exceeding the limit.
    owed = [0.0] * pp

    def fits(r: int, c: int) -> bool:
        s = stages[r][c]
        return mem[r] + owed[r] + sc.mem[F][s] + max(0.0, sc.mem[B][s]) + (headroom[r] if c == 0 else 0.0) <= limit

    def run(r: int, t: float, kind: str, mb: int, c: int) -> None:
        s = stages[r][c]
        end = t + sc.duration(kind, s)
        out[r].append(Op(kind, mb, c))
        remaining[r] -= 1
        free[r] = end
        mem[r] += sc.memory(kind, s)
        if kind == F:
            owed[r] += max(0.0, sc.mem[B][s])
        elif kind in (B, BW):
            owed[r] -= max(0.0, sc.mem[B][s])
        if kind == F:
            next_f[r][c] += 1
            state[r].f_count += 1
            end_of[(F, mb, s)] = end
            consumer = where[s + 1][0] if s + 1 < n else r
        elif kind == W:
            pending_w[r][c].popleft()
            consumer = None
        else:
            next_b[r][c] += 1
            state[r].b_count += 1
            end_of[(B, mb, s)] = end
            if kind == B:
                pending_w[r][c].append(mb)
            consumer = where[s - 1][0] if s > 0 else None
        for q in {r, consumer} - {None}:
            t_q = max(free[q], end if q == r else arrival(kind if kind != BW else B, mb, s, s + 1 if kind == F else s - 1))
            if t_q < wake[q]:
                wake[q] = t_q
                heapq.heappush(heap, (t_q, q))

    while heap:
        t, r = heapq.heappop(heap)
        if t != wake[r] or remaining[r] == 0:
            continue
        wake[r] = INF
        t = max(t, free[r])
        now[0], now[1] = t, r
        st = state[r]
        ready, later = [], []
        for c in range(chunks):
            s = stages[r][c]
            if next_f[r][c] < m and fits(r, c):
                key = policy.key(F, next_f[r][c], c, s, st)
                (ready if ready_at(r, F, c) <= t + EPS else later).append((key, F, next_f[r][c], c))
            if next_b[r][c] < m:
                key = policy.key(bkind, next_b[r][c], c, s, st)
                (ready if ready_at(r, B, c) <= t + EPS else later).append((key, bkind, next_b[r][c], c))
            if pending_w[r][c]:
                mb = pending_w[r][c][0]
                ready.append((policy.key(W, mb, c, s, st), W, mb, c))
        head = min(later, default=None)
        if ready:
            key, kind, mb, c = min(ready)
            if head is not None and head[0] < key and not policy.backfill(kind, st):
                ready = []  # strict order: wait for the head
        if ready:
            end = t + sc.duration(kind, stages[r][c])
            soon = [eta(r, k if k != BW else B, cc) for kk, k, _, cc in later if kk < key]
            soon = [x for x in soon if x < end - EPS]
            if not soon:
                run(r, t, kind, mb, c)
                continue
            nxt = max(min(soon), t)
            if nxt <= t + EPS:
                run(r, t, kind, mb, c)  # cannot wait for nothing: take the best ready op
                continue
            wake[r] = nxt
            heapq.heappush(heap, (nxt, r))
            continue
        known = [ready_at(r, k if k != BW else B, cc) for _, k, _, cc in later]
        nxt = min(known, default=INF)
        if nxt < INF:
            wake[r] = max(nxt, t)
            heapq.heappush(heap, (wake[r], r))
    stuck = [r for r in range(pp) if remaining[r]]
    if stuck:
        what = f"the memory limit {memory_limit:g}" if memory_limit is not None else "this policy"
        raise ScheduleError(f"{what} leaves rank {stuck[0]} unable to schedule all {m} microbatches "
                            f"(policy {policy.name or 'custom'})")
    return out
