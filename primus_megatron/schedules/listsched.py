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
from operator import itemgetter
from typing import Callable, NamedTuple, Optional

from .costs import StageCosts
from .errors import ScheduleError
from .ir import B, BW, F, W, Op, new_op, stage_of
from .gc_pause import gc_paused
from .simulation import score_of

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


class Scored(NamedTuple):
    """An order and what `variants.score` says of it: (makespan, longest per-rank span, max peak memory)."""

    ranks: list[list[Op]]
    score: tuple[float, float, float]


def list_schedule(pp: int, m: int, chunks: int, placement: str, sc: StageCosts,
                  memory_limit: Optional[float], policy: Policy) -> list[list[Op]]:
    """Each rank's ops in the order the list scheduler runs them (module doc)."""
    return list_schedule_scored(pp, m, chunks, placement, sc, memory_limit, policy).ranks


@gc_paused
def list_schedule_scored(pp: int, m: int, chunks: int, placement: str, sc: StageCosts,
                         memory_limit: Optional[float], policy: Policy) -> Scored:
    """`list_schedule` with the order's score, computed on the way: candidates
    that come from here need no separate simulation (`variants.best_of`)."""
    n = pp * chunks
    stages = [[stage_of(placement, pp, r, c) for c in range(chunks)] for r in range(pp)]
    own = [0] * n  # stage -> rank
    for r in range(pp):
        for c in range(chunks):
            own[stages[r][c]] = r
    limit = INF if memory_limit is None else memory_limit + EPS
    headroom = [max(sc.mem[F][s] for s in stages[r][1:]) if chunks > 1 and policy.reserve else 0.0 for r in range(pp)]
    split = policy.split
    bkind = B if split else BW
    key_of = policy.key
    comm = sc.comm
    # Per stage: durations, memory terms, and the latency an input adds on arrival
    # (0.0 from the same rank; `end + 0.0` is what the arrival time always was).
    dur = {k: [sc.duration(k, s) for s in range(n)] for k in (F, B, W, BW)}
    grow = {k: [sc.memory(k, s) for s in range(n)] for k in (F, B, W, BW)}
    mem_f = list(sc.mem[F])
    owe = [max(0.0, sc.mem[B][s]) for s in range(n)]  # what a B will still add after its F ran
    lag_f = [comm[s - 1] if s > 0 and own[s - 1] != own[s] else 0.0 for s in range(n)]  # F input from s - 1
    lag_b = [comm[s + 1] if s + 1 < n and own[s + 1] != own[s] else 0.0 for s in range(n)]  # gradient from s + 1
    last = n - 1

    next_f = [[0] * chunks for _ in range(pp)]
    next_b = [[0] * chunks for _ in range(pp)]
    pending_w: list[list[deque]] = [[deque() for _ in range(chunks)] for _ in range(pp)]
    state = [RankState(r, f_total=m * chunks) for r in range(pp)]
    mem = [0.0] * pp
    free = [0.0] * pp
    end_f: list[list[Optional[float]]] = [[None] * m for _ in range(n)]  # [stage][mb] -> end of F
    end_b: list[list[Optional[float]]] = [[None] * m for _ in range(n)]  # [stage][mb] -> end of B (or BW)
    out: list[list[Op]] = [[] for _ in range(pp)]
    remaining = [(3 if split else 2) * m * chunks] * pp
    wake = [0.0] * pp
    heap = [(0.0, r) for r in range(pp)]
    # Memory a B will still add (mem_b > 0) for microbatches whose F ran and B did not:
    # an F is admitted only if those B can run later without exceeding the limit.
    owed = [0.0] * pp
    # The simulator's timing of the order as it grows (`simulation._run`, same
    # arithmetic): decisions use list-scheduling time, which may idle longer.
    sim_f: list[list[float]] = [[0.0] * m for _ in range(n)]
    sim_b: list[list[float]] = [[0.0] * m for _ in range(n)]
    sim_free = [0.0] * pp
    first: list[Optional[float]] = [None] * pp
    peak = [0.0] * pp
    started = 0  # ops run so far, all ranks
    eta_waited = [-1] * pp  # `started` when a rank last waited on an estimated arrival

    def bound(kind: str, mb: int, s: int, now_t: float, now_r: int) -> float:
        """Lower bound on the end of (kind, mb, stage s) given what is scheduled;
        INF if it waits on the deciding rank itself (waiting would not help).
        Walks the chain of inputs back to a known end, then adds up forward:
        start = the input's bound (+ comm), end = max(start, free, now) + duration."""
        frames = []  # (stage, kind, how the start follows from the input's bound)
        depth = 0
        while True:
            known = (end_f if kind == F else end_b)[s][mb]
            if known is not None:
                value = known
                break
            if own[s] == now_r or depth > 2 * n:
                return INF  # and so is everything that waits on it
            if kind == F:
                if s == 0:
                    frames.append((s, F, _ZERO))
                    value = 0.0
                    break
                frames.append((s, F, comm[s - 1]))
                s -= 1
            elif s == last:
                frames.append((s, B, _SAME))
                kind = F
            else:
                frames.append((s, B, comm[s + 1]))
                s += 1
            depth += 1
        for s, kind, link in reversed(frames):
            start = 0.0 if link is _ZERO else value if link is _SAME else value + link
            value = max(start, free[own[s]], now_t) + (dur[F][s] if kind == F else dur[B][s])
        return value

    reserve = [[headroom[r] if c == 0 else 0.0 for c in range(chunks)] for r in range(pp)]
    backfill = policy.backfill
    heappush, heappop = heapq.heappush, heapq.heappop
    while heap:
        t, r = heappop(heap)
        if t != wake[r] or remaining[r] == 0:
            continue
        wake[r] = INF
        if free[r] > t:
            t = free[r]
        st = state[r]
        stages_r, next_f_r, next_b_r, pending_r, reserve_r = stages[r], next_f[r], next_b[r], pending_w[r], reserve[r]
        base = mem[r] + owed[r]
        t_eps = t + EPS
        ready, later = [], []  # candidates (key, kind, mb, chunk), later ones with when they are ready
        for c in range(chunks):
            s = stages_r[c]
            nf = next_f_r[c]
            if nf < m and base + mem_f[s] + owe[s] + reserve_r[c] <= limit:
                key = key_of(F, nf, c, s, st)
                if s == 0:
                    at = 0.0
                else:
                    at = end_f[s - 1][nf]
                    at = INF if at is None else at + lag_f[s]
                if at <= t_eps:
                    ready.append((key, F, nf, c))
                else:
                    later.append((key, F, nf, c, at))  # (kind, mb, c) differ: `at` never decides a min
            nb = next_b_r[c]
            if nb < m:
                key = key_of(bkind, nb, c, s, st)
                if nb >= nf:
                    at = INF
                elif s == last:
                    at = end_f[s][nb]
                    at = INF if at is None else at
                else:
                    at = end_b[s + 1][nb]
                    at = INF if at is None else at + lag_b[s]
                if at <= t_eps:
                    ready.append((key, bkind, nb, c))
                else:
                    later.append((key, bkind, nb, c, at))
            if pending_r[c]:
                mb = pending_r[c][0]
                ready.append((key_of(W, mb, c, s, st), W, mb, c))
        if not ready:
            nxt = min(map(_AT, later), default=INF)
            if nxt < INF:
                wake[r] = max(nxt, t)
                heappush(heap, (wake[r], r))
            continue
        key, kind, mb, c = min(ready) if len(ready) > 1 else ready[0]
        if later and min(later)[0] < key and not backfill(kind, st):  # strict order: wait for the head
            nxt = min(map(_AT, later))
            if nxt < INF:
                wake[r] = max(nxt, t)
                heappush(heap, (wake[r], r))
            continue
        s = stages_r[c]
        end = t + dur[kind][s]
        # When do the better (smaller-key) later candidates become ready? Known
        # arrivals, else a lower bound (eta); wait for one that beats this op's end.
        soon = soon_eta = INF
        for kk, k, mb_k, cc, at in later:
            if kk < key:
                if at == INF:
                    # The input's producer has not run: it cannot end before t plus its
                    # own duration (then one hop), and a bound that late is not soon.
                    sk = stages_r[cc]
                    if k == F:
                        if sk > 0 and t + dur[F][sk - 1] + comm[sk - 1] >= end - EPS:
                            continue
                    elif sk != last and t + dur[B][sk + 1] + comm[sk + 1] >= end - EPS:
                        continue
                    at = _eta(k, mb_k, sk, next_f_r[cc], m, last, comm, bound, t, r)
                    if at < end - EPS and at < soon_eta:
                        soon_eta = at
                elif at < end - EPS and at < soon:
                    soon = at
        if soon_eta < soon:
            # An estimate is only a bound: ranks waiting on each other's estimates
            # would wait forever. Wait on one again only if some op started since
            # this rank's last such wait; otherwise wait for known arrivals only.
            # (This can also cut a second futile wait that would have ended: the
            # registered schedules' orders did not change; rare hand-made policies'
            # did, never for the worse in a random sample.)
            if eta_waited[r] != started:
                eta_waited[r] = started
                soon = soon_eta
        if soon != INF and max(soon, t) > t_eps:
            wake[r] = nxt = max(soon, t)  # wait for it
            heappush(heap, (nxt, r))
            continue

        # Run the op (when nothing better comes soon, or cannot wait for nothing).
        started += 1
        out[r].append(new_op((kind, mb, c)))
        remaining[r] -= 1
        free[r] = end
        mem[r] += grow[kind][s]
        if mem[r] > peak[r]:
            peak[r] = mem[r]
        start = sim_free[r]
        if kind == F:
            if s:
                at = sim_f[s - 1][mb] + lag_f[s]
                if at > start:
                    start = at
            owed[r] += owe[s]
            next_f_r[c] += 1
            st.f_count += 1
            end_f[s][mb] = end
            consumer = own[s + 1] if s + 1 < n else r
        elif kind == W:
            at = sim_b[s][mb]
            if at > start:
                start = at
            pending_r[c].popleft()
            consumer = r
        else:
            at = sim_f[s][mb] if s == last else sim_b[s + 1][mb] + lag_b[s]
            if at > start:
                start = at
            owed[r] -= owe[s]
            next_b_r[c] += 1
            st.b_count += 1
            end_b[s][mb] = end
            if kind == B:
                pending_r[c].append(mb)
            consumer = own[s - 1] if s > 0 else r
        if first[r] is None:
            first[r] = start
        sim_free[r] = sim_end = start + dur[kind][s]
        if kind == F:
            sim_f[s][mb] = sim_end
        elif kind != W:
            sim_b[s][mb] = sim_end
        wake[r] = end  # free again when it ends (wake[r] was INF)
        heappush(heap, (end, r))
        if consumer != r:  # the consumer's input arrives one hop later
            t_q = max(free[consumer], end + comm[s])
            if t_q < wake[consumer]:
                wake[consumer] = t_q
                heappush(heap, (t_q, consumer))
    stuck = [r for r in range(pp) if remaining[r]]
    if stuck:
        what = f"the memory limit {memory_limit:g}" if memory_limit is not None else "this policy"
        raise ScheduleError(f"{what} leaves rank {stuck[0]} unable to schedule all {m} microbatches "
                            f"(policy {policy.name or 'custom'})")
    spans = [(0.0 if start is None else start, end) for start, end in zip(first, sim_free)]
    return Scored(out, score_of(spans, peak))


_AT = itemgetter(4)
_ZERO, _SAME = object(), object()  # how a start follows from its input in `bound`: 0.0, or the input's end


def _eta(kind: str, mb: int, s: int, nf: int, m: int, last: int, comm, bound, now_t: float, now_r: int) -> float:
    """Lower bound on when a candidate whose input time is unknown becomes ready."""
    if kind == F:
        return INF if mb >= m else bound(F, mb, s - 1, now_t, now_r) + comm[s - 1]
    if mb >= m or (mb >= nf and s != last):
        return INF
    return bound(F, mb, s, now_t, now_r) if s == last else bound(B, mb, s + 1, now_t, now_r) + comm[s + 1]
