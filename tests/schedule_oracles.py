"""Reference implementations of the planner's algorithms: test oracles, not product code.

Each is the plain, op-by-op (or item-by-item) form of an algorithm that
`primus_megatron.schedules` implements once, in its fast form: the simulator
(`simulation._run`), the peak-memory sum, the completeness check
(`validation.check_complete`) and the rendezvous check
(`rendezvous.check_channels`). They state the dependency rule themselves
(`_input` below), independently of the product's `deps` module, and they
accept any op, so `test_schedule_oracles.py` can check that the product
computes the same numbers and raises the same messages on random valid and
invalid schedules. They were the product's reference paths before issue #14.
"""
from __future__ import annotations

import operator
from collections import Counter, deque
from typing import Optional

from primus_megatron.schedules import Lowered, Message, Op, Recv, Schedule, ScheduleError, Send
from primus_megatron.schedules.ir import B, BW, COMPUTE_KINDS, F, W


def _input(kind: str, stage: int, n: int) -> Optional[tuple[str, int]]:
    """(result kind, stage) an op waits for: F needs the forward before it; B and BW the
    gradient after it, or at the last stage its own forward; W its own input gradient."""
    if kind == F:
        return (F, stage - 1) if stage > 0 else None
    if kind == W:
        return (B, stage)
    return (F, stage) if stage == n - 1 else (B, stage + 1)


def _outputs(kind: str) -> tuple[str, ...]:
    return (B, W) if kind == BW else (kind,)


def describe(key: tuple[str, int, int]) -> str:
    kind, mb, stage = key
    what = {F: "forward", B: "input gradient", W: "weight gradient"}[kind]
    return f"the {what} of microbatch {mb} at stage {stage}"


# Simulation -----------------------------------------------------------------------------------

def simulate_reference(schedule: Schedule, sc) -> list[list[tuple]]:
    """Per rank, (op, stage, start, end) of every op: each rank runs its ops in order, an op
    starting when the rank is free and its input has arrived (plus `comm` of the producing
    stage when the producer is another rank). Raises the product's messages for a result
    computed twice and for a deadlock."""
    pp, n = schedule.pp, schedule.num_stages
    table = schedule.stage_table
    done: dict[tuple, tuple[float, int, int]] = {}  # result -> (end, rank, stage)
    free, ptr = [0.0] * pp, [0] * pp
    timeline: list[list[tuple]] = [[] for _ in range(pp)]
    waiting: dict[tuple, list[int]] = {}
    todo = list(range(pp))
    while todo:
        r = todo.pop()
        ops = schedule.ranks[r]
        i, t_free = ptr[r], free[r]
        while i < len(ops):
            op = ops[i]
            stage = table[r][op.chunk]
            need = _input(op.kind, stage, n)
            ready = t_free
            if need is not None:
                key = (need[0], op.mb, need[1])
                if key not in done:
                    waiting.setdefault(key, []).append(r)
                    break
                end, src_rank, src_stage = done[key]
                if src_rank != r:
                    end += sc.comm[src_stage]
                ready = max(ready, end)
            t_free = ready + sc.duration(op.kind, stage)
            timeline[r].append((op, stage, ready, t_free))
            i += 1
            for kind in _outputs(op.kind):
                key = (kind, op.mb, stage)
                if key in done:
                    raise ScheduleError(f"rank {r} op {op} computes {describe(key)} a second time")
                done[key] = (t_free, r, stage)
                todo.extend(waiting.pop(key, ()))
        ptr[r], free[r] = i, t_free
    stuck = [r for r in range(pp) if ptr[r] < len(schedule.ranks[r])]
    if stuck:
        parts = []
        for r in stuck:
            op = schedule.ranks[r][ptr[r]]
            kind, src = _input(op.kind, table[r][op.chunk], n)
            parts.append(f"rank {r} op {op} waits for {describe((kind, op.mb, src))} (rank {schedule.owner(src)[0]})")
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(parts))
    return timeline


def peak_memory_reference(schedule: Schedule, sc) -> list[float]:
    """Per rank, the largest running sum of the ops' memory deltas (0 before the first op)."""
    peaks = []
    for r, ops in enumerate(schedule.ranks):
        mem = peak = 0.0
        for op in ops:
            mem += sc.memory(op.kind, schedule.stage(r, op))
            peak = max(peak, mem)
        peaks.append(peak)
    return peaks


# Completeness ---------------------------------------------------------------------------------

def check_complete_reference(schedule: Schedule) -> None:
    """Op by op: the first malformed op, then the first op run twice, then the first
    (stage, microbatch) without one F and B + W, or BW."""
    forward_only = bool(schedule.meta.get("forward_only"))
    m, chunks = schedule.microbatches, schedule.chunks_per_rank
    table = schedule.stage_table
    seen: Counter = Counter()
    where: dict = {}
    for r, ops in enumerate(schedule.ranks):
        for op in ops:
            if not isinstance(op, Op) or op.kind not in COMPUTE_KINDS:
                raise ScheduleError(f"rank {r} has {op!r}, which is not a compute op (kinds {', '.join(COMPUTE_KINDS)})")
            # an index must be an integer (what operator.index takes: int, bool, numpy integers)
            if not _is_index(op.mb) or not 0 <= op.mb < m:
                raise ScheduleError(f"rank {r} op {op} names microbatch {op.mb}; the schedule has microbatches 0..{m - 1}")
            if not _is_index(op.chunk) or not 0 <= op.chunk < chunks:
                raise ScheduleError(f"rank {r} op {op} names chunk {op.chunk}; ranks hold chunks 0..{chunks - 1}")
            key = (op.kind, op.mb, table[r][op.chunk])
            seen[key] += 1
            where[key] = r
    for key, count in seen.items():
        if count > 1:
            raise ScheduleError(f"rank {where[key]} runs {key[0]} of microbatch {key[1]} at stage {key[2]} {count} times")
    for stage in range(schedule.num_stages):
        rank = schedule.owner(stage)[0]
        for mb in range(m):
            has = {k for k in COMPUTE_KINDS if (k, mb, stage) in seen}
            if F not in has:
                raise ScheduleError(f"rank {rank} has no F for microbatch {mb} at stage {stage}")
            if forward_only:
                if has - {F}:
                    raise ScheduleError(f"forward-only schedule runs {', '.join(sorted(has - {F}))} for microbatch {mb} at stage {stage}")
                continue
            if has & {B, W, BW} not in ({B, W}, {BW}):
                got = ", ".join(sorted(has - {F})) or "nothing"
                raise ScheduleError(f"rank {rank} must run B and W, or BW, for microbatch {mb} at stage {stage}, but runs {got}")


# Rendezvous -----------------------------------------------------------------------------------

def _incoming(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message an op receives: its input, when another rank computes it."""
    stage = schedule.stage(rank, op)
    need = _input(op.kind, stage, schedule.num_stages)
    if need is None or need[1] == stage or schedule.owner(need[1])[0] == rank:
        return None
    return Message(need[0], op.mb, need[1], stage)


def check_channels_reference(lowered: Lowered) -> None:
    """Item by item: every rank posts sends and receives on per-peer FIFO channels without
    blocking, a send and a receive at the heads of a pair's channels complete together,
    and a compute op waits until its received input has arrived. Raises the first
    problem met (visiting ranks in a FIFO work queue) or names every rank left waiting."""
    sched = lowered.schedule
    pp = sched.pp
    ptr = [0] * pp
    chan: dict[tuple[int, int], deque] = {}  # (rank, peer) -> posted, uncompleted items
    received: list[set] = [set() for _ in range(pp)]
    posted_recv: list[set] = [set() for _ in range(pp)]
    done: list[set] = [set() for _ in range(pp)]  # results computed on each rank
    work = deque(range(pp))

    def match(a: int, b: int) -> bool:
        qa, qb = chan.get((a, b)), chan.get((b, a))
        progressed = False
        while qa and qb:
            x, y = qa[0], qb[0]
            if (type(x) is Send) == (type(y) is Send):
                return progressed  # both send or both receive: neither can complete yet
            send, recv, dst = (x, y, b) if type(x) is Send else (y, x, a)
            if send.msg != recv.msg:
                raise ScheduleError(f"rank {dst}'s next receive from rank {recv.peer} is {recv.msg} "
                                    f"but that rank's next send to it is {send.msg}: messages between two ranks "
                                    f"must be received in the order they are sent")
            qa.popleft()
            qb.popleft()
            received[dst].add(recv.msg)
            progressed = True
        return progressed

    while work:
        r = work.popleft()
        items = lowered.ranks[r]
        i = ptr[r]
        while i < len(items):
            item = items[i]
            if type(item) in (Send, Recv):
                chan.setdefault((r, item.peer), deque()).append(item)
                if type(item) is Recv:
                    posted_recv[r].add(item.msg)
                i += 1
                if match(r, item.peer):
                    work.append(item.peer)
                continue
            stage = sched.stage(r, item)
            msg = _incoming(sched, r, item)
            if msg is not None:
                if msg not in posted_recv[r]:
                    raise ScheduleError(f"rank {r} op {item} needs {msg} but posts no receive for it before the op")
                if msg not in received[r]:
                    break  # wait for the channel
            else:
                need = _input(item.kind, stage, sched.num_stages)
                if need is not None and (need[0], item.mb, need[1]) not in done[r]:
                    raise ScheduleError(f"rank {r} op {item} runs before {describe((need[0], item.mb, need[1]))}, "
                                        f"which this rank computes later")
            done[r].update((kind, item.mb, stage) for kind in _outputs(item.kind))
            i += 1
        ptr[r] = i

    stuck = [r for r in range(pp) if ptr[r] < len(lowered.ranks[r]) or any(chan.get((r, q)) for q in range(pp))]
    if stuck:
        raise ScheduleError(f"schedule {sched.name!r} can hang: " + "; ".join(_waiting(lowered, r, ptr, chan) for r in stuck))


def _waiting(lowered: Lowered, r: int, ptr: list[int], chan: dict) -> str:
    items = lowered.ranks[r]
    heads = [f"its channel to rank {q} is stuck at '{chan[(r, q)][0]}' while rank {q}'s is at "
             f"'{chan[(q, r)][0] if chan.get((q, r)) else 'nothing posted'}'"
             for q in range(lowered.schedule.pp) if chan.get((r, q))]
    if ptr[r] < len(items):
        op = items[ptr[r]]
        msg = _incoming(lowered.schedule, r, op)
        return f"rank {r} op {op} waits for {msg} from rank {lowered.schedule.owner(msg.src_stage)[0]}" + (f" ({heads[0]})" if heads else "")
    return f"rank {r} finished but waits for its sends: " + ", ".join(heads)


def topological_ranks(probe: Schedule, split: bool, pick) -> list[list[Op]]:
    """Per-rank op lists following one random topological sort of `probe`'s dependency graph
    (so they can run): `pick(n)` draws the index of the next op among the n ready ones."""
    n, m = probe.num_stages, probe.microbatches
    kinds = (F, B, W) if split else (F, BW)
    done, ranks = set(), [[] for _ in range(probe.pp)]
    todo = [(k, j, s) for s in range(n) for j in range(m) for k in kinds]

    def ready(op):
        k, j, s = op
        if k == F:
            return s == 0 or (F, j, s - 1) in done
        if k in (B, BW):
            back = (F, j, s) if s == n - 1 else ((B, j, s + 1) if split else (BW, j, s + 1))
            return (F, j, s) in done and back in done
        return (B, j, s) in done

    while todo:
        cands = [op for op in todo if ready(op)]
        op = cands[pick(len(cands))]
        todo.remove(op)
        done.add(op)
        r, c = probe.owner(op[2])
        ranks[r].append(Op(op[0], op[1], c))
    return ranks


def _is_index(value) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True
