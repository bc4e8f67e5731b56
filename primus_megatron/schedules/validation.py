"""Validation: completeness, dependency order, memory, and hang-freedom.

The hang check simulates the p2p semantics of NCCL/RCCL rather than gloo's
more forgiving ones: each pair of ranks shares one ordered channel, a send
completes only when the matching receive is the peer's next item on that
channel (and vice versa), and per (src, dst) messages match in FIFO order. A
host posts sends and receives without blocking and blocks only where a
compute op needs a receive to have completed, and at the end of the step for
its own sends. A schedule that passes cannot hang on any backend.
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Optional

from .costs import UNIT, Costs
from .deps import describe, needs, produces
from .errors import ScheduleError
from .ir import B, BW, COMPUTE_KINDS, F, W, Op, Schedule
from .lowering import Lowered, Message, Recv, Send, incoming, lower
from .simulation import end_times, op_times, peak_memory


def check_complete(schedule: Schedule) -> None:
    """Every (microbatch, stage) has one F and one B + one W, or one BW, on its owner
    (only the F for a forward-only schedule: `meta["forward_only"]`)."""
    forward_only = bool(schedule.meta.get("forward_only"))
    m, chunks = schedule.microbatches, schedule.chunks_per_rank
    table = schedule.stage_table
    seen: Counter = Counter()
    where: dict = {}
    for r, ops in enumerate(schedule.ranks):
        stages_r = table[r]
        for op in ops:
            if type(op) is not Op and not (isinstance(op, Op)) or op.kind not in COMPUTE_KINDS:
                raise ScheduleError(f"rank {r} has {op!r}, which is not a compute op (kinds {', '.join(COMPUTE_KINDS)})")
            if not 0 <= op.mb < m:
                raise ScheduleError(f"rank {r} op {op} names microbatch {op.mb}; the schedule has microbatches 0..{m - 1}")
            if not 0 <= op.chunk < chunks:
                raise ScheduleError(f"rank {r} op {op} names chunk {op.chunk}; ranks hold chunks 0..{chunks - 1}")
            key = (op.kind, op.mb, stages_r[op.chunk])
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


def check_memory(schedule: Schedule, costs: Optional[Costs], memory_limit: Optional[float]) -> list[float]:
    """Per-rank peak activation memory; raises if a rank exceeds `memory_limit`."""
    sc = (costs or schedule.meta.get("costs") or UNIT).resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement)
    peaks = peak_memory(schedule, sc)
    if memory_limit is not None:
        for r, peak in enumerate(peaks):
            if peak > memory_limit + 1e-9:
                raise ScheduleError(f"schedule {schedule.name!r} needs {peak:g} activation units on rank {r}, "
                                    f"above the memory limit of {memory_limit:g}")
    return peaks


def check_channels(lowered: Lowered) -> None:
    """Simulate rendezvous p2p (module doc); raise naming who waits for what if it hangs."""
    sched = lowered.schedule
    pp, n = sched.pp, sched.num_stages
    table, owner = sched.stage_table, sched.owner_table
    ptr = [0] * pp
    chan: dict[tuple[int, int], deque] = {}  # (rank, peer) -> posted, uncompleted items
    received: list[set] = [set() for _ in range(pp)]
    posted_recv: list[set] = [set() for _ in range(pp)]
    done: list[set] = [set() for _ in range(pp)]  # keys computed on each rank
    work = deque(range(pp))

    def match(a: int, b: int) -> bool:
        qa, qb = chan.get((a, b)), chan.get((b, a))
        progressed = False
        while qa and qb:
            x, y = qa[0], qb[0]
            x_send, y_send = type(x) is Send, type(y) is Send
            if x_send == y_send:
                return progressed  # both send or both receive: neither can complete yet
            send, recv, dst = (x, y, b) if x_send else (y, x, a)
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
        stages_r = table[r]
        i = ptr[r]
        while i < len(items):
            item = items[i]
            cls = type(item)
            if cls is Send or cls is Recv:
                q = chan.get((r, item.peer))
                if q is None:
                    q = chan[(r, item.peer)] = deque()
                q.append(item)
                if cls is Recv:
                    posted_recv[r].add(item.msg)
                i += 1
                if match(r, item.peer):
                    work.append(item.peer)
                continue
            kind, stage = item.kind, stages_r[item.chunk]
            if kind == F:
                src = stage - 1 if stage > 0 else None
            elif kind == W:
                src = None
            else:
                src = stage + 1 if stage + 1 < n else None
            if src is not None and owner[src] != r:
                msg = Message(F if kind == F else B, item.mb, src, stage)
                if msg not in posted_recv[r]:
                    raise ScheduleError(f"rank {r} op {item} needs {msg} but posts no receive for it before the op")
                if msg not in received[r]:
                    break  # wait for the channel
            else:
                for key in needs(item, stage, n):
                    if key not in done[r]:
                        raise ScheduleError(f"rank {r} op {item} runs before {describe(key)}, which this rank computes later")
            done[r].update(produces(item, stage))
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
        msg = incoming(lowered.schedule, r, op)
        return f"rank {r} op {op} waits for {msg} from rank {lowered.schedule.owner(msg.src_stage)[0]}" + (f" ({heads[0]})" if heads else "")
    return f"rank {r} finished but waits for its sends: " + ", ".join(heads)


def validate(schedule: Schedule, *, costs: Optional[Costs] = None, memory_limit: Optional[float] = None) -> Lowered:
    """Run every check; return the lowered schedule that passed them."""
    check_complete(schedule)
    ends = end_times(schedule, UNIT.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement))  # order is satisfiable
    check_memory(schedule, costs, memory_limit)
    lowered = lower(schedule, ends)
    check_channels(lowered)
    return lowered
