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
from .deps import consumer_stage, input_of, outputs_of
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
    run = _Run(pp, m, chunks, placement, sc, memory_limit, policy)
    run.loop()
    return run.result()


_AT = itemgetter(4)
_ZERO, _SAME = object(), object()  # how a start follows from its input: 0.0, or the input's end


class _Run:
    """One list-scheduling run. Two clocks advance together: list-scheduling time
    (`free`, `end`), on which decisions are made and which may idle longer, and the
    simulator's timing of the order as it grows (`sim_*`, `simulation`'s arithmetic),
    which scores it."""

    def __init__(self, pp: int, m: int, chunks: int, placement: str, sc: StageCosts,
                 memory_limit: Optional[float], policy: Policy) -> None:
        n = pp * chunks
        self.pp, self.m, self.chunks, self.n, self.last = pp, m, chunks, n, n - 1
        self.memory_limit, self.policy = memory_limit, policy
        self.stages = [[stage_of(placement, pp, r, c) for c in range(chunks)] for r in range(pp)]
        own = self.own = [0] * n  # stage -> rank
        for r in range(pp):
            for c in range(chunks):
                own[self.stages[r][c]] = r
        self.limit = INF if memory_limit is None else memory_limit + EPS
        self.split, self.bkind = policy.split, (B if policy.split else BW)
        self.comm = comm = sc.comm
        self.dur = {k: [sc.duration(k, s) for s in range(n)] for k in (F, B, W, BW)}
        self.scale = sc.mb_scale  # per-microbatch factors on `dur` (None: every microbatch the same)
        self.grow = {k: [sc.memory(k, s) for s in range(n)] for k in (F, B, W, BW)}
        self.mem_f = list(sc.mem[F])
        self.owe = [max(0.0, sc.mem[B][s]) for s in range(n)]  # what a B will still add after its F ran
        # The dependency rule per (kind, stage): the result it waits for, how its start follows
        # from that result in the critical-path bound (`chain`), and the latency the input
        # adds on arrival (`lag`: 0.0 from the same rank, so `end + 0.0` is the arrival).
        self.src = {k: [input_of(k, s, n) for s in range(n)] for k in (F, B, W, BW)}
        self.chain = {k: [_link(src, s, comm) for s, src in enumerate(self.src[k])] for k in (F, B, BW)}
        self.lag = {k: [0.0 if src is None or own[src[1]] == own[s] else comm[src[1]]
                        for s, src in enumerate(self.src[k])] for k in (F, B, W, BW)}
        self.consumer = {k: [consumer_stage(k, s, n) for s in range(n)] for k in (F, B)}
        headroom = [max(sc.mem[F][s] for s in self.stages[r][1:]) if chunks > 1 and policy.reserve else 0.0
                    for r in range(pp)]
        reserve = [[headroom[r] if c == 0 else 0.0 for c in range(chunks)] for r in range(pp)]
        self._init_state()  # once: `slots` and `sim_input` below hold its lists
        # Per rank and chunk, what `_candidates` reads: memory an F needs admitted (its
        # activation, what its B will add, the room kept for a later chunk), and the lists of
        # input ends (by microbatch) an F and a B wait on, with their lags.
        end, bkind = self.end, self.bkind
        self.slots = [[(c, s, self.mem_f[s] + self.owe[s] + reserve[r][c],
                        *self._input_list(end, F, s), *self._input_list(end, bkind, s))
                       for c, s in enumerate(self.stages[r])] for r in range(pp)]
        # Per (kind, stage), what `_run_op` reads: the simulated ends of its input and the lag.
        self.sim_input = {k: [self._input_list(self.sim, k, s) for s in range(n)] for k in (F, B, W, BW)}

    def _input_list(self, ends: dict, kind: str, s: int) -> tuple[Optional[list], float]:
        src = self.src[kind][s]
        return (None, 0.0) if src is None else (ends[src[0]][src[1]], self.lag[kind][s])

    def _init_state(self) -> None:
        pp, m, n, chunks = self.pp, self.m, self.n, self.chunks
        self.next_f = [[0] * chunks for _ in range(pp)]
        self.next_b = [[0] * chunks for _ in range(pp)]
        self.pending_w: list[list[deque]] = [[deque() for _ in range(chunks)] for _ in range(pp)]
        self.state = [RankState(r, f_total=m * chunks) for r in range(pp)]
        self.mem, self.free = [0.0] * pp, [0.0] * pp
        # [stage][mb] -> end of F, and of B (or BW), in list-scheduling time
        self.end = {F: [[None] * m for _ in range(n)], B: [[None] * m for _ in range(n)]}
        self.out: list[list[Op]] = [[] for _ in range(pp)]
        self.remaining = [(3 if self.split else 2) * m * chunks] * pp
        self.wake = [0.0] * pp
        self.heap = [(0.0, r) for r in range(pp)]
        # Memory a B will still add (mem_b > 0) for microbatches whose F ran and B did not:
        # an F is admitted only if those B can run later without exceeding the limit.
        self.owed = [0.0] * pp
        self.sim = {F: [[0.0] * m for _ in range(n)], B: [[0.0] * m for _ in range(n)]}
        self.sim_free = [0.0] * pp
        self.first: list[Optional[float]] = [None] * pp
        self.peak = [0.0] * pp
        self.started = 0  # ops run so far, all ranks
        self.eta_waited = [-1] * pp  # `started` when a rank last waited on an estimated arrival

    def loop(self) -> None:
        """Whenever a rank is free, run its best candidate or wait for a better one."""
        heap, wake, remaining, free = self.heap, self.wake, self.remaining, self.free
        while heap:
            t, r = heapq.heappop(heap)
            if t != wake[r] or remaining[r] == 0:
                continue
            wake[r] = INF
            if free[r] > t:
                t = free[r]
            ready, later = self._candidates(r, t)
            pick = self._pick(r, t, ready, later)
            if pick is not None:
                self._run_op(r, t, *pick)

    def _candidates(self, r: int, t: float) -> tuple[list, list]:
        """(key, kind, mb, chunk) of the rank's ready candidates, and of the later ones
        with the time their input arrives (INF where its producer has not run)."""
        st, m, limit, key_of, bkind = self.state[r], self.m, self.limit, self.policy.key, self.bkind
        next_f_r, next_b_r, pending_r = self.next_f[r], self.next_b[r], self.pending_w[r]
        base = self.mem[r] + self.owed[r]
        t_eps = t + EPS
        ready, later = [], []
        for c, s, need, f_in, lag_f, b_in, lag_b in self.slots[r]:
            nf = next_f_r[c]
            if nf < m and base + need <= limit:
                key = key_of(F, nf, c, s, st)
                if f_in is None:
                    at = 0.0
                else:  # inlined: this loop is the scheduler's hot path
                    at = f_in[nf]
                    at = INF if at is None else at + lag_f
                if at <= t_eps:
                    ready.append((key, F, nf, c))
                else:
                    later.append((key, F, nf, c, at))  # (kind, mb, c) differ: `at` never decides a min
            nb = next_b_r[c]
            if nb < m:
                key = key_of(bkind, nb, c, s, st)
                at = INF if nb >= nf else b_in[nb]  # a B follows its own F (deps.runs_after)
                at = INF if at is None else at + lag_b
                if at <= t_eps:
                    ready.append((key, bkind, nb, c))
                else:
                    later.append((key, bkind, nb, c, at))
            if pending_r[c]:
                mb = pending_r[c][0]
                ready.append((key_of(W, mb, c, s, st), W, mb, c))
        return ready, later

    def _pick(self, r: int, t: float, ready: list, later: list) -> Optional[tuple[str, int, int]]:
        """The op to run now, or None after queueing the rank to wake when a better one
        (or any, if none is ready) can run."""
        if not ready:
            return self._wait(r, t, min(map(_AT, later), default=INF))
        key, kind, mb, c = min(ready) if len(ready) > 1 else ready[0]
        if later and min(later)[0] < key and not self.policy.backfill(kind, self.state[r]):
            return self._wait(r, t, min(map(_AT, later)))  # strict order: wait for the head
        dur = self.dur[kind][self.stages[r][c]]
        if self.scale is not None:
            dur *= self.scale[mb]
        soon = self._better_soon(r, t, key, t + dur, later)
        if soon != INF and max(soon, t) > t + EPS:
            return self._wait(r, t, soon)
        return kind, mb, c  # nothing better comes soon, or it cannot wait for nothing

    def _wait(self, r: int, t: float, until: float) -> None:
        if until < INF:
            self.wake[r] = max(until, t)
            heapq.heappush(self.heap, (self.wake[r], r))
        return None

    def _better_soon(self, r: int, t: float, key: tuple, end: float, later: list) -> float:
        """When a smaller-key later candidate becomes ready before `end` (INF if none):
        its known arrival, else a lower bound (eta)."""
        soon = soon_eta = INF
        dur, chain, stages_r, scale = self.dur, self.chain, self.stages[r], self.scale
        for kk, k, mb_k, cc, at in later:
            if kk >= key:
                continue
            if at == INF:
                # The input's producer has not run: it cannot end before t plus its own
                # duration (then one hop), and a bound that late is not soon.
                k2, s2, link = chain[k][stages_r[cc]]
                if link is not _SAME and link is not _ZERO and \
                        t + (dur[k2][s2] if scale is None else dur[k2][s2] * scale[mb_k]) + link >= end - EPS:
                    continue
                at = self._eta(k, mb_k, stages_r[cc], self.next_f[r][cc], t, r)
                if at < end - EPS and at < soon_eta:
                    soon_eta = at
            elif at < end - EPS and at < soon:
                soon = at
        # An estimate is only a bound: ranks waiting on each other's estimates would wait
        # forever. Wait on one again only if some op started since this rank's last such
        # wait; otherwise wait for known arrivals only. (This can also cut a second futile
        # wait that would have ended: the registered schedules' orders did not change.)
        if soon_eta < soon and self.eta_waited[r] != self.started:
            self.eta_waited[r] = self.started
            soon = soon_eta
        return soon

    def _eta(self, kind: str, mb: int, s: int, nf: int, now_t: float, now_r: int) -> float:
        """Lower bound on when a candidate whose input time is unknown becomes ready."""
        if mb >= self.m or (kind != F and mb >= nf and s != self.last):
            return INF
        k2, s2, link = self.chain[kind][s]
        value = self._bound(k2, s2, mb, now_t, now_r)
        return value if link is _SAME else value + link

    def _bound(self, kind: str, s: int, mb: int, now_t: float, now_r: int) -> float:
        """Lower bound on the end of (kind, mb, stage s) given what is scheduled; INF if it
        waits on the deciding rank itself (waiting would not help). Walks the chain of
        inputs back to a known end, then adds up forward: start = the input's bound
        (+ comm), end = max(start, free, now) + duration."""
        frames = []  # (stage, kind, how the start follows from the input's bound)
        own, end, chain = self.own, self.end, self.chain
        depth = 0
        while True:
            known = end[kind][s][mb]
            if known is not None:
                value = known
                break
            if own[s] == now_r or depth > 2 * self.n:
                return INF  # and so is everything that waits on it
            k2, s2, link = chain[kind][s]
            frames.append((s, kind, link))
            if link is _ZERO:
                value = 0.0
                break
            kind, s = k2, s2
            depth += 1
        free, dur, factor = self.free, self.dur, 1.0 if self.scale is None else self.scale[mb]
        for s, kind, link in reversed(frames):
            start = 0.0 if link is _ZERO else value if link is _SAME else value + link
            value = max(start, free[own[s]], now_t) + dur[kind][s] * factor
        return value

    def _run_op(self, r: int, t: float, kind: str, mb: int, c: int) -> None:
        """Append the op to the rank's order; advance both clocks; wake its consumer."""
        s = self.stages[r][c]
        dur = self.dur[kind][s]
        if self.scale is not None:
            dur *= self.scale[mb]
        end = t + dur
        self.started += 1
        self.out[r].append(new_op((kind, mb, c)))
        self.remaining[r] -= 1
        self.free[r] = end
        mem = self.mem[r] = self.mem[r] + self.grow[kind][s]
        if mem > self.peak[r]:
            self.peak[r] = mem
        sim_in, lag = self.sim_input[kind][s]
        start = self.sim_free[r]
        if sim_in is not None and sim_in[mb] + lag > start:
            start = sim_in[mb] + lag
        if self.first[r] is None:
            self.first[r] = start
        self.sim_free[r] = start + dur
        if kind == W:
            self.pending_w[r][c].popleft()
            dst = None
        else:
            result = outputs_of(kind)[0]  # the result other ops wait for
            self.sim[result][s][mb] = start + dur
            self._account(r, c, s, kind, mb, end)
            dst = self.consumer[result][s]
        self.wake[r] = end  # free again when it ends (wake[r] was INF)
        heapq.heappush(self.heap, (end, r))
        consumer = r if dst is None else self.own[dst]
        if consumer != r:  # the consumer's input arrives one hop later
            t_q = max(self.free[consumer], end + self.comm[s])
            if t_q < self.wake[consumer]:
                self.wake[consumer] = t_q
                heapq.heappush(self.heap, (t_q, consumer))

    def _account(self, r: int, c: int, s: int, kind: str, mb: int, end: float) -> None:
        """Counters and memory owed after an F, or a B / BW."""
        st = self.state[r]
        if kind == F:
            self.owed[r] += self.owe[s]
            self.next_f[r][c] += 1
            st.f_count += 1
            self.end[F][s][mb] = end
            return
        self.owed[r] -= self.owe[s]
        self.next_b[r][c] += 1
        st.b_count += 1
        self.end[B][s][mb] = end
        if kind == B:
            self.pending_w[r][c].append(mb)

    def result(self) -> Scored:
        stuck = [r for r in range(self.pp) if self.remaining[r]]
        if stuck:
            limit = self.memory_limit
            what = f"the memory limit {limit:g}" if limit is not None else "this policy"
            raise ScheduleError(f"{what} leaves rank {stuck[0]} unable to schedule all {self.m} microbatches "
                                f"(policy {self.policy.name or 'custom'})")
        spans = [(0.0 if start is None else start, end) for start, end in zip(self.first, self.sim_free)]
        return Scored(self.out, score_of(spans, self.peak))


def _link(src: Optional[tuple[str, int]], s: int, comm) -> tuple:
    """(input kind, input stage, how a start follows from the input's end) for the bound:
    _ZERO (no input), _SAME (same stage: no hop) or the input stage's comm (every hop
    counted, even within a rank: the bound only needs to be cheap and stable)."""
    if src is None:
        return None, None, _ZERO
    return src[0], src[1], (_SAME if src[1] == s else comm[src[1]])

