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
from itertools import compress, count, repeat
from operator import attrgetter, eq, getitem, is_, itemgetter, not_
from typing import Optional

from .costs import UNIT, Costs
from .deps import describe, needs, produces
from .errors import ScheduleError
from .ir import B, BW, COMPUTE_KINDS, F, W, Op, Schedule
from .lowering import Lowered, Message, Recv, Send, incoming, lower
from .simulation import _run, gc_paused, peak_memory, well_formed

_KIND, _MB, _CHUNK, _MSG, _PEER = (attrgetter(a) for a in ("kind", "mb", "chunk", "msg", "peer"))
_KIND_CHUNK, _SECOND, _THIRD = itemgetter(0, 2), itemgetter(1), itemgetter(2)
_ITEM_TYPES, _INT_TYPE = frozenset({Op, Send, Recv}), frozenset({int})


def check_complete(schedule: Schedule) -> None:
    """Every (microbatch, stage) has one F and one B + one W, or one BW, on its owner
    (only the F for a forward-only schedule: `meta["forward_only"]`)."""
    if not _is_complete(schedule, well_formed(schedule)):
        _check_complete_reference(schedule)  # names the problem (or passes: the fast test is conservative)


def _is_complete(schedule: Schedule, clean: bool) -> bool:
    """Conservative fast test, by set and count operations in C: True only where
    `_check_complete_reference` passes. With well-formed ops, distinct ops on a rank
    are distinct (kind, mb, stage) results (no two ranks share a stage), so m * chunks
    distinct F (and B and W, or BW) on every rank cover every microbatch and stage.
    A schedule mixing BW and split backward takes the reference path."""
    schedule.stage_table  # raises as the reference does for a placement that cannot hold the chunks
    if not clean:
        return False
    forward_only = bool(schedule.meta.get("forward_only"))
    need = schedule.microbatches * schedule.chunks_per_rank
    for ops in schedule.ranks:
        if len(set(ops)) != len(ops):
            return False
        counts = Counter(map(_KIND, ops))
        if counts[F] != need:
            return False
        split, fused = (counts[B], counts[W]), counts[BW]
        if forward_only:
            if split != (0, 0) or fused:
                return False
        elif not ((split == (need, need) and not fused) or (split == (0, 0) and fused == need)):
            return False
    return True


def _check_complete_reference(schedule: Schedule) -> None:
    """`check_complete` op by op: finds and names the first problem."""
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


@gc_paused
def check_channels(lowered: Lowered) -> None:
    """Simulate rendezvous p2p (module doc); raise naming who waits for what if it hangs."""
    if not _channels_pass(lowered):
        _check_channels_reference(lowered)  # names the problem (or passes: the fast test is conservative)


def _channels_pass(lowered: Lowered) -> bool:
    """Conservative fast test: True only where `_check_channels_reference` passes.

    Posting never blocks and a pair's channel completes its items in order, so the
    k-th items the two ranks post to each other meet once both are posted, whatever
    else happens: the run completes exactly when (1) every such pair is one send and
    one receive of the same message, (2) every compute op finds its input computed
    earlier on its rank or received by a receive posted earlier on it, and (3) ranks
    progress when each op that needs a message waits until its sender has posted the
    matching send. (1) and (2) are static; (3) is a walk over the waiting ops only.
    Anything unusual (duplicate receives, foreign items) takes the reference path."""
    sched = lowered.schedule
    pp, n = sched.pp, sched.num_stages
    if len(lowered.ranks) != pp:
        return False
    table, owner = sched.stage_table, sched.owner_table
    stride = 3 * n
    chans: dict[tuple[int, int], list] = {}  # (rank, peer) -> items posted by rank to peer, in order
    where: dict[tuple[int, int], list[int]] = {}  # (rank, peer) -> their positions on rank
    wait_pos: list[list[int]] = []  # per rank: positions of the ops that wait for a message
    waits: list[list[tuple[int, int, int]]] = []  # ... and their receives' (position, peer, index in channel)
    for r, items in enumerate(lowered.ranks):
        types = list(map(type, items))
        if not _ITEM_TYPES.issuperset(types):
            return False
        # Split the items into compute ops and messages (in C), keeping their positions.
        is_op = list(map(is_, types, repeat(Op)))
        ops, op_pos = list(compress(items, is_op)), list(compress(count(), is_op))
        is_msg = list(map(not_, is_op))
        msgs, msg_pos = list(compress(items, is_msg)), list(compress(count(), is_msg))

        # The rank's channels, and where each of its receives sits: message -> (position, peer, index).
        received: dict[tuple, tuple[int, int, int]] = {}
        peers = list(map(_PEER, msgs))
        for peer in dict.fromkeys(peers):
            mine = list(map(eq, peers, repeat(peer)))
            chan, pos = chans[(r, peer)], where[(r, peer)] = list(compress(msgs, mine)), list(compress(msg_pos, mine))
            is_recv = list(map(is_, map(type, chan), repeat(Recv)))
            received.update(zip(map(_MSG, compress(chan, is_recv)),
                                zip(compress(pos, is_recv), repeat(peer), compress(count(), is_recv))))
        if len(received) != types.count(Recv):
            return False  # a message received twice

        # (2) per compute op: (cross-rank source stage or -1, message kind, same-rank input key
        # offset or -1, output key offset, second output offset or -1, stage); result keys are
        # mb * stride + offset (distinct for distinct (mb, offset), whatever the int mb).
        if not (_INT_TYPE.issuperset(map(type, map(_MB, ops))) and _INT_TYPE.issuperset(map(type, map(_CHUNK, ops)))):
            return False
        rules = {}
        for c, stage in enumerate(table[r]):
            me = stage * 3
            for kind, outs in ((F, (me, -1)), (B, (me + 1, -1)), (W, (me + 2, -1)), (BW, (me + 1, me + 2))):
                if kind == F:
                    src, need = (stage - 1, me - 3) if stage > 0 else (None, -1)
                elif kind == W:
                    src, need = None, me + 1
                else:
                    src, need = (stage + 1, me + 4) if stage + 1 < n else (None, me)
                cross = src if src is not None and owner[src] != r else -1
                rules[(kind, c)] = (cross, F if kind == F else B, need if cross < 0 else -1, *outs, stage)
        op_rules = list(map(rules.get, map(_KIND_CHUNK, ops)))
        if None in op_rules:
            return False  # unknown kind or chunk out of range
        done: set[int] = set()
        pos_r: list[int] = []
        waits_r: list[tuple[int, int, int]] = []
        for i, (cross, mkind, need, out, out2, stage), mb in zip(op_pos, op_rules, map(_MB, ops)):
            base = mb * stride
            if cross >= 0:
                got = received.get((mkind, mb, cross, stage))
                if got is None or got[0] > i:
                    return False
                pos_r.append(i)
                waits_r.append(got)
            elif need >= 0 and base + need not in done:
                return False
            done.add(base + out)
            if out2 >= 0:
                done.add(base + out2)
        wait_pos.append(pos_r)
        waits.append(waits_r)

    # (1) every pair of channels: same length, same messages, one send and one receive each time.
    for (a, b), chan in chans.items():
        other = chans.get((b, a))
        if other is None or len(other) != len(chan) or list(map(_MSG, chan)) != list(map(_MSG, other)) \
                or any(map(is_, map(type, chan), map(type, other))):
            return False

    # (3) progress: rank r gets past its waiting op at position i once rank q has posted
    # its item at position j, the k-th item of its channel to r (q's pointer is past j).
    wait_peer = [list(map(_SECOND, got)) for got in waits]
    wait_at = [list(map(getitem, map(where.__getitem__, zip(peers, repeat(r))), map(_THIRD, got)))
               for r, (peers, got) in enumerate(zip(wait_peer, waits))]
    sizes = list(map(len, lowered.ranks))
    ptr = [0] * pp  # items done (posted or run) per rank
    nxt = [0] * pp  # next waiting op per rank
    blocked: list[list[tuple[int, int]]] = [[] for _ in range(pp)]  # q -> (j, r): r waits for q to pass j
    work = list(range(pp))
    while work:
        r = work.pop()
        peers, at, k = wait_peer[r], wait_at[r], nxt[r]
        last = len(peers)
        while k < last and ptr[peers[k]] > at[k]:
            k += 1
        nxt[r] = k
        if k < last:
            i = wait_pos[r][k]
            blocked[peers[k]].append((at[k], r))
        else:
            i = sizes[r]
        if i > ptr[r]:
            ptr[r] = i
            if blocked[r]:
                still = []
                for j, q in blocked[r]:
                    if j < i:
                        work.append(q)
                    else:
                        still.append((j, q))
                blocked[r] = still
    return ptr == sizes


def _check_channels_reference(lowered: Lowered) -> None:
    """`check_channels` item by item: finds and names the first problem."""
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


@gc_paused
def validate(schedule: Schedule, *, costs: Optional[Costs] = None, memory_limit: Optional[float] = None) -> Lowered:
    """Run every check; return the lowered schedule that passed them."""
    clean = well_formed(schedule)  # once, for the fast paths of the checks below
    if not _is_complete(schedule, clean):
        _check_complete_reference(schedule)
    unit = UNIT.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement)
    ends = _run(schedule, unit, record="ends", clean=clean)  # order is satisfiable
    check_memory(schedule, costs, memory_limit)
    lowered = lower(schedule, ends)
    check_channels(lowered)
    return lowered
