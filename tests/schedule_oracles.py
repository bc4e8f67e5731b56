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

from primus_megatron.schedules import Batch, Lowered, Message, Op, Recv, Schedule, ScheduleError, Send
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


# Rendezvous: NCCL/RCCL p2p semantics -------------------------------------------------------------

def _ops_of(item) -> tuple:
    if type(item) is Batch:
        return item.items
    if type(item) in (Send, Recv):
        return (item,)
    return ()


def _incoming(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message an op receives: its input, when another rank computes it."""
    stage = schedule.stage(rank, op)
    need = _input(op.kind, stage, schedule.num_stages)
    if need is None or need[1] == stage or schedule.owner(need[1])[0] == rank:
        return None
    return Message(need[0], op.mb, need[1], stage)


def _outgoing(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message an op sends: its result, when the stage that uses it is on another rank."""
    stage, n = schedule.stage(rank, op), schedule.num_stages
    made = _outputs(op.kind)[0]
    for other in (stage - 1, stage + 1):
        if 0 <= other < n and schedule.owner(other)[0] != rank and any(
                _input(kind, other, n) == (made, stage) for kind in (F, B, W)):
            return Message(made, op.mb, stage, other)
    return None


def op_messages_reference(schedule: Schedule, rank: int, op: Op) -> tuple:
    """(takes, takes_from, gives, gives_to) of an op, as `lowering.OpIO` states them: the message
    it consumes (its input, made at another stage) and the rank sending it, -1 where that stage
    is on this rank; the message it makes for another stage and where it goes, likewise."""
    stage, n = schedule.stage(rank, op), schedule.num_stages
    takes = takes_from = None
    need = _input(op.kind, stage, n)
    if need is not None and need[1] != stage:
        takes = Message(need[0], op.mb, need[1], stage)
        owner = schedule.owner(need[1])[0]
        takes_from = owner if owner != rank else -1
    gives = gives_to = None
    made = _outputs(op.kind)[0]
    for other in (stage - 1, stage + 1):
        if 0 <= other < n and any(_input(kind, other, n) == (made, stage) for kind in (F, B, W)):
            gives = Message(made, op.mb, stage, other)
            owner = schedule.owner(other)[0]
            gives_to = owner if owner != rank else -1
    return takes, -1 if takes_from is None else takes_from, gives, -1 if gives_to is None else gives_to


def _static_problem(lowered: Lowered) -> Optional[str]:
    """The first problem that needs no run: per rank in item order (a malformed posting, a
    send before its op, a message sent or received twice, an op with no receive before it
    or before its own rank's input), then per (sender, receiver) pair the FIFO match."""
    sched = lowered.schedule
    pp = sched.pp
    if len(lowered.ranks) != pp:
        return f"lowered schedule {sched.name!r} has {len(lowered.ranks)} item lists for {pp} pipeline ranks"
    for r, items in enumerate(lowered.ranks):
        for item in items:
            if type(item) is Batch and (not item.items or not all(type(x) in (Send, Recv) for x in item.items)):
                return f"rank {r} posts '{item}': a batch holds one or more sends and receives"
            for x in _ops_of(item):
                if type(x.peer) is not int or not 0 <= x.peer < pp or x.peer == r:
                    return f"rank {r} posts '{x}', but its peers are ranks {', '.join(str(q) for q in range(pp) if q != r)}"
        for item in items:
            if not _ops_of(item) and not (isinstance(item, Op) and item.kind in COMPUTE_KINDS):
                return f"rank {r} has {item!r}, which is not a compute op (kinds {', '.join(COMPUTE_KINDS)})"
        made, sent, received, done = set(), set(), set(), set()
        for item in items:
            for x in _ops_of(item):
                if type(x) is Send:
                    if x.msg in sent:
                        return f"rank {r} sends {x.msg} twice"
                    if x.msg not in made:
                        return f"rank {r} posts '{x}' before any op of that rank makes it"
                    sent.add(x.msg)
                else:
                    if x.msg in received:
                        return f"rank {r} receives {x.msg} twice"
                    received.add(x.msg)
            if _ops_of(item):
                continue
            stage = sched.stage(r, item)
            msg = _incoming(sched, r, item)
            need = _input(item.kind, stage, sched.num_stages)
            if msg is not None:
                if msg not in received:
                    return f"rank {r} op {item} needs {msg} but posts no receive for it before the op"
            elif need is not None and (need[0], item.mb, need[1]) not in done:
                return f"rank {r} op {item} runs before {describe((need[0], item.mb, need[1]))}, which this rank computes later"
            done.update((kind, item.mb, stage) for kind in _outputs(item.kind))
            out = _outgoing(sched, r, item)
            if out is not None:
                made.add(out)
    for a in range(pp):
        for b in range(pp):
            sends = [x for item in lowered.ranks[a] for x in _ops_of(item) if type(x) is Send and x.peer == b]
            recvs = [x for item in lowered.ranks[b] for x in _ops_of(item) if type(x) is Recv and x.peer == a]
            for s, v in zip(sends, recvs):
                if s.msg != v.msg:
                    return (f"rank {b}'s next receive from rank {a} is {v.msg} but that rank's next send to it is "
                            f"{s.msg}: messages between two ranks must be received in the order they are sent")
            if len(sends) != len(recvs):
                extra = (sends if len(sends) > len(recvs) else recvs)[min(len(sends), len(recvs))]
                owner = a if len(sends) > len(recvs) else b
                return (f"rank {owner} posts '{extra}', which is never matched: rank {a} sends {len(sends)} "
                        f"messages to rank {b}, which receives {len(recvs)} from it")
    return None


def p2p_reference(lowered: Lowered, *, lazy_init: bool) -> tuple[str, object]:
    """NCCL/RCCL semantics, stepped in rounds over explicit per-rank state (the product runs
    a work list over numbered tables): ("ok", None), ("error", the first static problem) or
    ("hang", {rank: set of ranks it waits for}) over the ranks left stuck.

    Each round every rank's host takes one step if it can (post an item to its queue, with
    lazy init's communicator creations first; or run a compute op whose received input has
    completed), then every pair of queue heads is matched: a send and its receive complete
    together once both sit in the heads of their queues (a batch is one head, its ops under
    way together); a head whose ops have all completed leaves the queue."""
    problem = _static_problem(lowered)
    if problem is not None:
        return "error", problem
    sched = lowered.schedule
    pp = sched.pp
    items = lowered.ranks
    host = [0] * pp
    queue: list[list[list]] = [[] for _ in range(pp)]  # per rank: posted entries, each [[op, done], ...]
    completed: list[set] = [set() for _ in range(pp)]  # messages whose receive's entry has completed
    contacted = [set() for _ in range(pp)]
    at_contact = [None] * pp  # the peer a host waits to meet, or "group"
    joined = [False] * pp

    def contacts_needed(r, item):
        need = []
        if type(item) is Batch and not all(joined):
            need.append("group")
        need += [x.peer for x in _ops_of(item) if x.peer not in contacted[r]]
        return need

    changed = True
    while changed:
        changed = False
        for r in range(pp):  # hosts
            if host[r] == len(items[r]):
                continue
            item = items[r][host[r]]
            if _ops_of(item):
                if lazy_init:
                    pending = contacts_needed(r, item)
                    if pending:
                        first = pending[0]
                        if first == "group":
                            joined[r] = True
                            at_contact[r] = "group"
                            if all(joined):
                                at_contact = [None if w == "group" else w for w in at_contact]
                                changed = True
                            continue
                        at_contact[r] = first
                        if at_contact[first] == r:
                            contacted[r].add(first)
                            contacted[first].add(r)
                            at_contact[r] = at_contact[first] = None
                            changed = True
                        continue
                    at_contact[r] = None
                queue[r].append([[x, False] for x in _ops_of(item)])
                host[r] += 1
                changed = True
            else:
                msg = _incoming(sched, r, item)
                if msg is None or msg in completed[r]:
                    host[r] += 1
                    changed = True
        for r in range(pp):  # queues: a send meets the receive of its message (FIFO order is checked statically)
            if not queue[r]:
                continue
            for pair in queue[r][0]:
                x, done = pair
                if done or type(x) is not Send:
                    continue
                q = x.peer
                if not queue[q]:
                    continue
                for other in queue[q][0]:
                    y, ydone = other
                    if type(y) is Recv and y.peer == r and not ydone and y.msg == x.msg:
                        pair[1] = other[1] = True
                        changed = True
                        break
        for r in range(pp):  # a head whose ops have all completed leaves; its receives are then complete
            while queue[r] and all(done for _, done in queue[r][0]):
                completed[r].update(x.msg for x, _ in queue[r].pop(0) if type(x) is Recv)
                changed = True
    stuck = [r for r in range(pp) if host[r] < len(items[r]) or queue[r]]
    if not stuck:
        return "ok", None
    waits = {}
    for r in stuck:
        if at_contact[r] == "group":
            waits[r] = {q for q in range(pp) if not joined[q]}
        elif at_contact[r] is not None:
            waits[r] = {at_contact[r]}
        else:
            waits[r] = {x.peer for x, done in (queue[r][0] if queue[r] else []) if not done}
    return "hang", waits


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


# Lowerings built on the test side -----------------------------------------------------------------

def unbatched(lowered: Lowered) -> Lowered:
    """The same postings, every batch opened into lone sends and receives in its order."""
    return Lowered(lowered.schedule, tuple(tuple(x for item in items for x in (_ops_of(item) or (item,)))
                                           for items in lowered.ranks))


def hoisted_lowering(schedule: Schedule, ends: list) -> Lowered:
    """The lowering the product had before issue #28, which hangs under NCCL/RCCL: per pair of
    ranks one channel ordered by send time (`ends`: every op's end time in a complete run),
    each send right after its op, each receive as early as its own pair's channel allows
    (right after the previous item of that pair, or before the first op), lone items.
    So a rank's receives from a peer it has not talked to yet come before its first op."""
    key = {}
    for r, ops in enumerate(schedule.ranks):
        for i, op in enumerate(ops):
            out = _outgoing(schedule, r, op)
            if out is not None:
                key[out] = (ends[r][i], r, i)
    ranks = []
    for r, ops in enumerate(schedule.ranks):
        channels: dict[int, list] = {}
        for op in ops:
            out, into = _outgoing(schedule, r, op), _incoming(schedule, r, op)
            if out is not None:
                peer = schedule.owner(out.dst_stage)[0]
                channels.setdefault(peer, []).append((key[out], Send(out, peer)))
            if into is not None:
                peer = schedule.owner(into.src_stage)[0]
                channels.setdefault(peer, []).append((key[into], Recv(into, peer)))
        leading, after = [], {}
        for peer, channel in channels.items():
            channel.sort(key=lambda x: x[0])
            tail = None
            for k, item in channel:
                if type(item) is Send:
                    tail = after[k[2]] = [item]
                elif tail is not None:
                    tail.append(item)
                else:
                    leading.append((k, item))
        leading.sort(key=lambda x: x[0])
        out_items = [item for _, item in leading]
        for i, op in enumerate(ops):
            out_items.append(op)
            out_items += after.get(i, [])
        ranks.append(tuple(out_items))
    return Lowered(schedule, tuple(ranks))


def queue_order_conflict(lowered: Lowered) -> Optional[tuple]:
    """None when one global order of messages agrees with every rank's queue (each posting's
    messages after all of the rank's earlier postings'), the invariant that makes a lowering
    hang-free; else a message on a cycle of "posted before" (two ranks order it both ways).
    A rank's postings form a chain, so linking each to the next is enough."""
    after: dict = {}  # message -> messages some rank posts right after it
    for items in lowered.ranks:
        previous: list = []
        for item in items:
            msgs = [x.msg for x in _ops_of(item)]
            if not msgs:
                continue
            for e in previous:
                after.setdefault(e, set()).update(msgs)
            previous = msgs
    indegree: dict = {}
    for targets in after.values():
        for m in targets:
            indegree[m] = indegree.get(m, 0) + 1
    ready = [m for m in after if not indegree.get(m)]
    seen = 0
    while ready:  # Kahn's topological sort: what is left over lies on a cycle
        m = ready.pop()
        seen += 1
        for n in after.get(m, ()):
            indegree[n] -= 1
            if indegree[n] == 0:
                ready.append(n)
    left = [m for m, d in indegree.items() if d > 0]
    return (left[0],) if left else None
