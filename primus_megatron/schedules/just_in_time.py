"""The just-in-time receive policy: each receive posted right before the op that consumes it.

Why: on ROCm a pending receive stalls unrelated compute that shares the fabric
(PyTorch #172668), so receives posted early (`lowering`'s default) can put back
the bubbles a schedule removes. AMD's fix in torch.distributed.pipelining (PR
#178815, `overlap_pp_comm` off) defers each receive to its consumer.

Deferring breaks the one global message order that makes the early lowering
hang-free: two neighbours that both send and then both receive wait on each
other (a send completes only once its receive is under way). AMD's answer is
rank parity (the lower rank of a pair posts its deferred receives from that peer
before its sends to it); here the global order decides instead, and the queue
model has the last word:

1. Every rank's items start as the early lowering's (ops, sends and receives in
   the global order), and each receive gets a slot: the early position of the
   item it is posted right before, at first its consumer (an overlapped pair's
   first half) but no later than the rank's first send that comes after it in
   the global order (then it shares that send's batch, as megatron's
   send_forward_recv_backward does). So on every rank each send and receive
   keep their global order (two peers never both send before they receive);
   only receives between two sends may swap, and one peer's messages stay in the
   order sent (FIFO: a receive moves its peer's earlier receives with it). Items
   sort by slot (a receive right before the item of its slot, receives of one
   slot in global order); the postings between two ops are batched as the early
   lowering batches them.
2. The queue model (`rendezvous`, lazy init: it only adds waits to eager init)
   runs the result. Where it hangs, every receive that a stuck rank's queue head
   waits for and that sits behind its own rank's queue head (or its host's wait)
   is hoisted right before that head; where that moves nothing, every deferred
   receive of a stuck rank goes back to its early slot, and failing that every
   deferred receive does. For the registered schedules tried (pp 4-16) rule 1
   alone passed: the loop is what makes the rule complete, not its usual path.
3. Complete: each round moves at least one slot strictly earlier, never before
   the receive's early slot, so the rounds end; with every slot early the items
   are the early lowering itself, which is hang-free under both inits
   (`lowering`'s argument). So the loop always ends with a lowering the hang
   check passes, as deferred as the rounds left it.
"""
from __future__ import annotations

from typing import Optional

from .ir import Op, Schedule
from .lowering import Lowered, Recv, _Post, early_gaps, items_of, p2p_ops
from .p2p_groups import ONE
from .rendezvous import Network, _Run

_RECEIVE, _OTHER = -1, 0  # the middle of a sort key: a receive sorts before the item of its slot


class _Rank:
    """One rank's items as slots over its early order (module doc): `seq` is the early order
    (op indices and posts), `slot` each receive's current slot, keyed by its message."""

    def __init__(self, ops: tuple, posts: list[_Post]) -> None:
        self.ops = ops
        self.seq: list = []  # an int: op index; else a _Post
        for g, posted in enumerate(early_gaps(len(ops), posts)):
            self.seq.extend(posted)
            if g < len(ops):
                self.seq.append(g)
        at_op = {x: i for i, x in enumerate(self.seq) if type(x) is int}
        self.op_key = {ops[g]: (i, _OTHER, i) for g, i in at_op.items()}
        self.early: dict = {}  # receive message -> its early position
        self.slot: dict = {}  # receive message -> its slot (at first its consumer's early position)
        self.send_key: dict = {}  # send message -> its sort key
        self.sends: dict = {}  # peer -> messages sent to it, in order
        self.recvs: dict = {}  # peer -> messages received from it, in order (FIFO: slots never decrease)
        self.fifo: dict = {}  # receive message -> (its peer, its place in recvs[peer])
        for i, post in enumerate(self.seq):
            if type(post) is int:
                continue
            item = post.item
            if type(item) is Recv:
                self.early[item.msg], self.slot[item.msg] = i, at_op[post.consumer]
                self.fifo[item.msg] = (item.peer, len(self.recvs.setdefault(item.peer, [])))
                self.recvs[item.peer].append(item.msg)
            else:
                self.send_key[item.msg] = (i, _OTHER, i)
                self.sends.setdefault(item.peer, []).append(item.msg)
        for msgs in self.recvs.values():  # one peer's messages are received in the order sent
            for k in range(len(msgs) - 2, -1, -1):
                self.slot[msgs[k]] = min(self.slot[msgs[k]], self.slot[msgs[k + 1]])

    def key(self, x) -> tuple:
        """The sort key of an op, a Send or a Recv."""
        if isinstance(x, Op):
            return self.op_key[x]
        if type(x) is Recv:
            return self.slot[x.msg], _RECEIVE, self.early[x.msg]
        return self.send_key[x.msg]

    def items(self, ends: list) -> tuple:
        order = sorted(range(len(self.seq)), key=self._key_at)
        gaps: list[list[_Post]] = [[]]
        for i in order:
            x = self.seq[i]
            if type(x) is int:
                gaps.append([])
            else:
                gaps[-1].append(x)
        return items_of(self.ops, gaps, ends)

    def _key_at(self, i: int) -> tuple:
        x = self.seq[i]
        if type(x) is not int and type(x.item) is Recv:
            return self.slot[x.item.msg], _RECEIVE, i
        return i, _OTHER, i

    def hoist(self, msg, before: Optional[tuple]) -> bool:
        """Move a receive's slot right before the item keyed `before` (None: to its early slot),
        never before its early slot, and the same peer's earlier receives with it (FIFO);
        True if it moved."""
        early, now = self.early[msg], self.slot[msg]
        target = early
        if before is not None:
            slot = before[0] if (before[0], _RECEIVE, early) < before else before[0] - 1
            target = max(early, slot)
        if target >= now:
            return False
        peer, k = self.fifo[msg]
        for m in self.recvs[peer][k::-1]:
            if self.slot[m] <= target:
                break
            self.slot[m] = max(self.early[m], target)
        return True

    def deferred(self) -> list:
        return [m for m, s in self.slot.items() if s > self.early[m]]


def _before_later_sends(rank: _Rank) -> None:
    """Rule 1's bound (module doc): a receive goes no later than the rank's first send that
    comes after it in the global order."""
    first_later: dict = {}  # receive message -> its early position's next send
    upcoming = None
    for i in range(len(rank.seq) - 1, -1, -1):
        post = rank.seq[i]
        if type(post) is int:
            continue
        if type(post.item) is Recv:
            if upcoming is not None:
                first_later[post.item.msg] = upcoming
        else:
            upcoming = rank.send_key[post.item.msg]
    for msg, key in first_later.items():
        rank.hoist(msg, key)


def lower_just_in_time(schedule: Schedule, posts: list[list[_Post]], ends: list, p2p_groups: str = ONE) -> Lowered:
    """The just-in-time lowering of `schedule` from its posts and end times (module doc), its
    queues run under the group layout `p2p_groups`."""
    ranks = [_Rank(schedule.ranks[r], sorted(posts[r])) for r in range(schedule.pp)]
    for rank in ranks:
        _before_later_sends(rank)
    while True:
        lowered = Lowered(schedule, tuple(rank.items(ends[r]) for r, rank in enumerate(ranks)), p2p_groups)
        run = _Run(Network(lowered), None, lazy_init=True)
        if not run.stuck():
            return lowered
        if not _mend(run, lowered, ranks):
            raise run.hang_error()  # every receive early: the early lowering's own hang


def _mend(run: _Run, lowered: Lowered, ranks: list[_Rank]) -> bool:
    """One round of rule 2 (module doc); False when nothing is left to hoist."""
    moved = False
    for q, recv, at in run.held_receives():
        item = lowered.ranks[q][at]
        first = p2p_ops(item)[0] if p2p_ops(item) else item
        moved |= ranks[q].hoist(recv.msg, ranks[q].key(first))
    if moved:
        return True
    for r in run.stuck():
        for msg in ranks[r].deferred():
            moved |= ranks[r].hoist(msg, None)
    if moved:
        return True
    for rank in ranks:
        for msg in rank.deferred():
            moved |= rank.hoist(msg, None)
    return moved
