"""Lowering: insert the p2p sends and receives a schedule needs, from its placement.

Every pipeline edge that crosses ranks becomes a `Message` (which edges those
are comes from the compiled form, `compiled`). On a GPU a rank's p2p operations
run in posting order on one NCCL/RCCL stream, and a send completes only when
its receive is under way on the peer (`rendezvous` states the model). So the
lowering puts every rank's communication in one order that all ranks agree on:
messages ordered by when a complete run of the schedule sends them (a run
under the schedule's costs, `ordering_costs`, unless the caller gives end
times; ties broken by sender rank and position). A send goes right after the op that produces it; a receive goes
as early as that global order allows on its rank (right after the rank's
previous item in that order), so it is under way when the send arrives and the
sender is not held. Since every rank's queue follows the one global order, the
earliest unfinished message is at the head of both its ends' queues, and
nothing can wait in a cycle (`rendezvous` checks it anyway). With a process
group per direction (`p2p_groups`) each of a rank's two queues holds a part of
that order, in order, so the argument holds queue by queue.

An overlapped pair (`Schedule.pairs`) is one op for communication: nothing is
posted between its halves, so the second half's receive goes before the first
half and the first half's send after the second (a pair starts with both inputs
there and ends with both outputs made).

Items posted between two compute ops go out in batches (`Batch`, one
`batch_isend_irecv`): neighbouring receives in the order are grouped, so they
progress together rather than one after the other, except that a receive some
upcoming op needs is never held back by a message sent after that op would
start; a send goes alone (`_batches` says why). Every
group is a `Batch`, even a single operation: batched p2p uses the process
group's own communicator (one stream) under both communicator init modes.

Where receives go is a policy (`lower`'s `recv_policy`): EARLY, as above, the
default; or JUST_IN_TIME, each receive right before the op that consumes it
unless the hang check needs it earlier (`just_in_time` states the rule and why
it is complete): on ROCm a pending receive stalls unrelated compute (PyTorch
#172668), so there early receives can cost the bubbles a schedule removes.
Sends go right after their op under both.

The executor reads each compute op's messages from here too (`Lowered.op_io`):
what it takes and gives, from and to which rank, or on its own rank (the V
turn), from the same rules the postings were placed by.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Iterator, NamedTuple, Optional, Union

from .compiled import compile_schedule, rule_table, schedule_rule_table
from .costs import UNIT, Costs, StageCosts
from .deps import RESULT_KINDS
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import F, Op, Schedule
from .p2p_groups import ONE, check_layout
from .simulation import end_times


class Message(NamedTuple):
    """An activation (`F`, stage s -> s+1) or input gradient (`B`, s -> s-1)."""

    kind: str
    mb: int
    src_stage: int
    dst_stage: int

    def __str__(self) -> str:
        what = "activation" if self.kind == F else "gradient"
        return f"{what} mb{self.mb} stage {self.src_stage}->{self.dst_stage}"


class Send(NamedTuple):
    msg: Message
    peer: int

    def __str__(self) -> str:
        return f"send {self.msg} to rank {self.peer}"


class Recv(NamedTuple):
    msg: Message
    peer: int

    def __str__(self) -> str:
        return f"recv {self.msg} from rank {self.peer}"


class Batch(NamedTuple):
    """Sends and receives posted together, as one `torch.distributed.batch_isend_irecv`
    call (one NCCL/RCCL group): they progress together, and the batch completes when
    every one of them has. A lone Send or Recv item is posted on its own."""

    items: tuple  # of Send and Recv

    def __str__(self) -> str:
        return "batch [" + "; ".join(map(str, self.items)) + "]"


Item = Union[Op, Send, Recv, Batch]
_POSTINGS = (Send, Recv, Batch)


def p2p_ops(item) -> tuple:
    """The sends and receives an item posts: a Batch's items, a lone Send or Recv itself,
    nothing for a compute op."""
    if type(item) is Batch:
        return item.items
    if type(item) in (Send, Recv):
        return (item,)
    return ()


def flat_p2p(items) -> Iterator:
    """Every Send and Recv of a rank's items, in posting order (batches opened)."""
    for item in items:
        yield from p2p_ops(item)


class OpIO(NamedTuple):
    """A compute op of a lowered rank with the messages it exchanges (`Lowered.op_io`).

    `takes` is the activation (F) or input gradient (B, BW) the op consumes, made
    at the neighbouring stage; None where its input is made at its own stage (the
    first stage's F, the last stage's B or BW, every W). `takes_from` is the rank
    whose Send delivers it, or -1 where this rank makes it (the V turn hands it
    over locally). `gives` and `gives_to` are the message the op makes for the
    neighbouring stage and the rank it is sent to (-1: consumed on this rank)."""

    op: Op
    stage: int
    takes: Optional[Message]
    takes_from: int
    gives: Optional[Message]
    gives_to: int

    def label(self) -> str:
        """The op as timeout and hang messages name it."""
        return f"{self.op} (microbatch {self.op.mb}, chunk {self.op.chunk}, stage {self.stage})"


@dataclass(frozen=True)
class Lowered:
    """A schedule with its communication: `ranks[r]` mixes Op, Send, Recv and Batch."""

    schedule: Schedule
    ranks: tuple[tuple[Item, ...], ...]
    p2p_groups: str = ONE  # which process group carries each message (`p2p_groups`)

    def op_io(self, rank: int) -> tuple[Optional[OpIO], ...]:
        """Aligned with `ranks[rank]`: each compute op with the messages it takes and gives
        (the ones this lowering's Send and Recv items carry, or hands over on the rank),
        None for a posting. Raises ScheduleError for an item that is neither."""
        sched = self.schedule
        by_op = schedule_rule_table(sched)[rank].by_op
        out: list[Optional[OpIO]] = []
        for item in self.ranks[rank]:
            if type(item) in _POSTINGS:
                out.append(None)
                continue
            rule = by_op.get((item.kind, item.chunk)) if isinstance(item, Op) else None
            if rule is None:
                raise ScheduleError(f"rank {rank} has {item!r}, which is neither a compute op of chunks "
                                    f"0..{sched.chunks_per_rank - 1} nor a send, receive or batch")
            takes = gives = None
            if rule.src >= 0 and rule.src != rule.stage:
                takes = Message(rule.recv_kind, item.mb, rule.src, rule.stage)
            if rule.to_stage >= 0:
                gives = Message(rule.send_kind, item.mb, rule.stage, rule.to_stage)
            out.append(OpIO(item, rule.stage, takes, rule.recv_from, gives, rule.send_to))
        return tuple(out)


def _rule(schedule: Schedule, rank: int, op: Op):
    return rule_table(schedule.pp, schedule.chunks_per_rank, schedule.placement)[rank].by_op.get((op.kind, op.chunk))


def outgoing(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message `op` on `rank` must send, if its consumer lives on another rank."""
    rule = _rule(schedule, rank, op)
    if rule is None or rule.send_to < 0:
        return None
    return Message(rule.send_kind, op.mb, rule.stage, rule.dst)


def incoming(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message `op` on `rank` must receive before it runs, if any."""
    rule = _rule(schedule, rank, op)
    if rule is None or rule.recv_from < 0:
        return None
    return Message(rule.recv_kind, op.mb, rule.src, rule.stage)


class _Post(NamedTuple):
    """One send or receive of a rank, with its place in the global order (`key`: send
    time, sender rank, sender position), its message's send time, and, for a receive,
    the position of the op that consumes it (-1 for a send)."""

    key: tuple
    time: float
    item: Union[Send, Recv]
    after: int  # a send: the position of the op producing it; a receive: -1 (placed by the order)
    consumer: int


def ordering_costs(schedule: Schedule, costs: Optional[Costs] = None) -> StageCosts:
    """The costs whose run orders the messages: the schedule's own (`costs`, else its
    `meta["costs"]`), so the queues follow the order the messages will really be sent in
    (benchmarks/lowered_makespan.py: under unit costs the order costs interleaved and V
    schedules up to 16% of makespan on the paper's costs); unit costs where there are
    none or where some op takes no time (the order needs every op to end after it starts)."""
    chosen = costs or schedule.meta.get("costs")
    if chosen is not None:
        sc = chosen.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement, schedule.microbatches)
        durations = [t for times in sc.time.values() for t in times] + list(sc.fused or ())
        if min(durations, default=0.0) > 0:
            return sc
    return UNIT.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement)


EARLY, JUST_IN_TIME = "early", "just-in-time"
RECV_POLICIES = (EARLY, JUST_IN_TIME)


@gc_paused
def lower(schedule: Schedule, ends: Optional[list] = None, *, recv_policy: str = EARLY,
          p2p_groups: str = ONE) -> Lowered:
    """Insert batches of sends and receives into every rank's op list (see module doc).

    `ends` are the end times of every op in a complete run with positive op times
    (`simulation.end_times`) if the caller has them; else a run under `ordering_costs`.
    `recv_policy`: EARLY (each receive as early as the global order allows) or
    JUST_IN_TIME (each right before the op that consumes it, hoisted where it must be:
    `just_in_time`); the caller resolves "auto" (the planner knows no torch). `p2p_groups`:
    the group layout the queues run under (`p2p_groups`; the just-in-time hoisting runs it)."""
    if recv_policy not in RECV_POLICIES:
        raise ScheduleError(f"receive policy must be one of {', '.join(RECV_POLICIES)}, got {recv_policy!r}")
    try:
        check_layout(p2p_groups)
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None
    if ends is None:
        ends = end_times(schedule, ordering_costs(schedule))
    posts = _posts(schedule, ends)
    if recv_policy == JUST_IN_TIME:
        from .just_in_time import lower_just_in_time  # it runs the hang check, which imports this module

        return lower_just_in_time(schedule, posts, ends, p2p_groups)
    ranks = tuple(items_of(schedule.ranks[r], early_gaps(len(schedule.ranks[r]), sorted(posts[r])), ends[r])
                  for r in range(schedule.pp))
    return Lowered(schedule, ranks, p2p_groups)


# Built with tuple.__new__: the same objects as calling the classes, without their Python-level __new__
_message = partial(tuple.__new__, Message)
_send = partial(tuple.__new__, Send)
_recv = partial(tuple.__new__, Recv)
_post = partial(tuple.__new__, _Post)
_batch = partial(tuple.__new__, Batch)


def _posts(schedule: Schedule, ends: list) -> list[list[_Post]]:
    """Every rank's sends and receives, each keyed by its message's place in the global order."""
    compiled = compile_schedule(schedule)
    sent: dict[tuple, tuple] = {}  # message -> (key, send time)
    posts: list[list[_Post]] = [[] for _ in range(schedule.pp)]
    for r, (rules, mbs) in enumerate(zip(compiled.rules, compiled.mbs)):
        mine, ends_r, pairs_r = posts[r], ends[r], schedule.paired(r)
        for pos, (rule, mb) in enumerate(zip(rules, mbs)):
            if rule.send_to >= 0:
                msg = _message((RESULT_KINDS[rule.out % 3], mb, rule.stage, rule.dst))
                key = (ends_r[pos], r, pos)
                sent[msg] = (key, ends_r[pos])
                after = pos + 1 if pos in pairs_r else pos  # a pair's first half sends after its second
                mine.append(_post((key, ends_r[pos], _send((msg, rule.send_to)), after, -1)))
    for r, (rules, mbs) in enumerate(zip(compiled.rules, compiled.mbs)):
        mine, pairs_r = posts[r], schedule.paired(r)
        for pos, (rule, mb) in enumerate(zip(rules, mbs)):
            if rule.recv_from >= 0:
                msg = _message((RESULT_KINDS[rule.need % 3], mb, rule.src, rule.stage))
                if msg not in sent:
                    raise ScheduleError(f"rank {r} op {schedule.ranks[r][pos]} needs {msg}, which no op of rank "
                                        f"{rule.recv_from} makes")
                key, time = sent[msg]
                consumer = pos - 1 if pos - 1 in pairs_r else pos  # a pair's second half receives before its first
                mine.append(_post((key, time, _recv((msg, rule.recv_from)), -1, consumer)))
    return posts


def early_gaps(n_ops: int, posts: list[_Post]) -> list[list[_Post]]:
    """Where one rank's sends and receives (`posts`, in global order) go early: `gaps[g]`
    holds what is posted right before op g (g = n_ops: after the last op). A send goes
    right after its op; a receive into the gap of the item before it in the order (gap 0
    if none)."""
    gaps: list[list[_Post]] = [[] for _ in range(n_ops + 1)]
    gap = 0
    for post in posts:
        if post.after >= 0:
            gap = post.after + 1
        elif gap > post.consumer:  # cannot happen for end times of a complete run (module doc)
            raise ScheduleError(f"lowering: {post.item} would come after the op that needs it; "
                                f"the end times given are not those of a complete run")
        gaps[gap].append(post)
    return gaps


def items_of(ops: tuple, gaps: list[list[_Post]], ends: list) -> tuple:
    """One rank's items: its ops with each gap's posts, in batches (`_batches`), before them."""
    out: list = []
    for g, posted in enumerate(gaps):
        if posted:
            out.extend(_batch((tuple([p.item for p in group]),)) for group in _batches(posted, ends))
        if g < len(ops):
            out.append(ops[g])
    return tuple(out)


def _batches(posted: list[_Post], ends: list) -> list[list[_Post]]:
    """Split one gap's posts (in global order) into batches. The gap's send, if any, comes
    first (it is the message of the op before the gap, sent before any receive placed
    here) and goes alone: a receive batched with it would keep it out of a
    post-validation prefix (`prefix`) whenever the receive's message comes from beyond
    the sender's prefix. Receives join the current batch unless one in it is needed
    (its consumer may start: the rank's op before the consumer has ended) before the
    next one's message is sent."""
    groups: list[list[_Post]] = []
    needed_by = float("-inf")  # earliest time a receive of the current batch may be needed
    for post in posted:
        if post.time <= needed_by:
            groups[-1].append(post)
        else:
            groups.append([post])
            needed_by = float("inf")
        if post.consumer >= 0:
            needed_by = min(needed_by, ends[post.consumer - 1] if post.consumer > 0 else 0.0)
        else:
            needed_by = float("-inf")  # a send closes its batch
    return groups
