"""The hang check: a lowered schedule cannot hang on NCCL/RCCL, under either communicator init.

It runs every rank's items under the p2p semantics of NCCL/RCCL as PyTorch's
ProcessGroupNCCL drives them (REFERENCE.md "NCCL/RCCL semantics"), not gloo's:

- The host walks its items in order. A send, a receive or a `Batch` is posted
  without waiting: it joins the rank's p2p queue. A compute op waits until the
  receive of its input has completed. (On a GPU the compute stream waits and the
  host runs ahead; waiting on the host is stricter, so what passes here passes
  there.)
- The queue: one per process group, run in posting order (eager init: the
  group's one NCCL stream). The lowered schedule's `p2p_groups` says how many
  (`p2p_groups`): one, or with a group per direction two per rank, what is sent
  towards a higher rank on one and towards a lower rank on the other (a posting
  over both is one entry per group, group 0's first, both posted at its place). Its head is the oldest unfinished posting, a lone
  send or receive or a whole batch, whose operations are under way together
  (one NCCL group). The next posting starts only when the head has finished, so
  an unmatched receive at the head holds every later send and receive.
- A send and its receive complete together, once both are under way (each at
  the head of its rank's queue): a rendezvous, at least as strict as NCCL,
  whose sends may also finish early into the peer's buffer.
- Between two ranks, the k-th send matches the k-th receive (FIFO); they must
  carry the same message.
- Lazy init (no `device_id`) adds host-side waits: a rank's first operation
  with each peer first creates their two-rank communicator, blocking both until
  both get there (in each rank's order of first contact); and a rank's first
  batch blocks until every rank of the group has posted its first batch
  (batched p2p runs on the group's communicator, created by the first such call
  with all ranks: torch 2.13 `batch_isend_irecv` docstring, distributed_c10d.py
  lines 3033-3037; ProcessGroupNCCL::pointToPoint keys batched p2p by device).
  Real lazy init runs unbatched p2p of each pair on its own stream; keeping one
  queue is stricter. With a group per direction each group has its own
  communicators (pairs' and the group's); the second group's is made at
  start-up (runtime/p2p_groups.py warms it), so its first batch waits for no one. Lazy only adds waits, so a schedule that passes lazy
  passes eager (the tests check it): `check_channels` runs lazy first and
  names eager only when eager fails too.

Nothing in this system ever chooses: each host's order, each queue's order and
each FIFO match are fixed, and whatever may happen stays possible until it
does. So one run in any order finds the one outcome, and with costs attached
the same run gives every item's time (`run_p2p`): a compute op takes its
duration, a send/receive pair its message's `comm`.

The ROCm stall (`run_p2p`'s `recv_stall`, PyTorch #172668): on ROCm a posted
receive that has not completed slows the compute of its rank. The model: a
compute op that starts while a receive posted earlier on its rank has not
completed takes `recv_stall` times its duration, the whole op. Why this shape:
one number, decided from what the queue model knows at the op's start (no rate
to integrate over the receive's lifetime), and it never rewards a receive that
completes mid-op, so it charges early receives at least what a pro-rata model
would. Whether a posted receive is still pending at an op's start may be
unknown when the run gets there (the peer has not got that far): the op waits.
When nothing else moves, the waiting rank with the earliest clock counts its
unknown receives as pending: every end still unknown comes after some host's
next move, and no host moves before that clock. So the stall changes times
only, never which runs end (a hang is the same hang).

A run that stops early is a hang. Every stuck rank waits for some other rank
(the peer of an unmatched operation at its queue's head, or the peer of a
communicator creation it waits in), so following those waits from the lowest
stuck rank reaches a cycle, which the error names hop by hop. Simpler problems
(an op with no receive posted before it, a message received out of order, a
send never received, ...) are named before the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from .compiled import op_rows, rule_table
from .costs import StageCosts
from .deps import RESULT_KINDS, describe
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import Op
from .lowering import Batch, Lowered, Message, Recv, Send
from .p2p_groups import GROUP_NAMES, group_count, split

EAGER, LAZY = "eager", "lazy"
MODE_NAMES = {
    EAGER: "eager communicator init (init_process_group with device_id)",
    LAZY: "lazy communicator init (no device_id)",
}


def _barrier(g: int) -> int:
    """The `waiting_init` value of a host waiting in group g's communicator creation."""
    return -2 - g


@gc_paused
def check_channels(lowered: Lowered, *, modes: tuple = (EAGER, LAZY)) -> None:
    """Raise ScheduleError if the lowered schedule can hang under any of `modes` (module doc),
    naming eager init's hang where both modes hang."""
    net = Network(lowered)
    if LAZY in modes and not _Run(net, None, lazy_init=True).stuck():
        return  # lazy init only adds waits: eager init passes too
    for mode in (EAGER, LAZY):
        if mode in modes:
            run = _Run(net, None, lazy_init=mode == LAZY)
            if run.stuck():
                raise run.hang_error()


@dataclass(frozen=True)
class P2PRun:
    """A lowered schedule run with costs under the queue semantics (`run_p2p`)."""

    spans: list  # per rank, (op, start, end) of every compute op in order
    finish: list  # per rank, when its last op and its last p2p operation have ended

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)


@gc_paused
def run_p2p(lowered: Lowered, sc: StageCosts, *, lazy_init: bool = False, recv_stall: float = 1.0) -> P2PRun:
    """Every compute op's start and end when each op takes its duration and each
    send/receive pair its message's `comm` once both ends are under way; raises like
    `check_channels` where the schedule hangs. `recv_stall` >= 1: the ROCm stall (module
    doc), the factor on an op that starts while a receive of its rank is pending."""
    if not recv_stall >= 1.0:
        raise ScheduleError(f"the receive stall factor must be at least 1, got {recv_stall}")
    run = _Run(Network(lowered), sc, lazy_init=lazy_init, recv_stall=recv_stall)
    if run.stuck():
        raise run.hang_error()
    return P2PRun(run.spans, run.finish_times())


# The static part: items checked and numbered -------------------------------------------------

class Network:
    """A lowered schedule as the run reads it, checked for problems that need no run.

    Per rank, `steps[r]` follows its items: a compute op (`Op`) or a posting (the index
    of a queue entry, `units[r][index]`: the ids of its sends and receives); a posting
    whose messages go on two process groups is one entry per group (`p2p_groups.split`),
    consecutive steps of one item (`item_at[r][step]`: the item's index). Entry u goes on
    queue `queue[r][u]` (`qunits[r][g]`: queue g's entries in posting order, `prev[r][u]`
    the one before u there). Operation `c` is `ops[c]` (Send or Recv) of rank `rank[c]` in
    entry `unit[c]`, matched with `partner[c]`. A compute op that receives its input waits
    for entry `waits[r][i]`."""

    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered
        self.schedule = sched = lowered.schedule
        self.pp = sched.pp
        self.layout = lowered.p2p_groups
        self.groups = group_count(self.layout)
        if len(lowered.ranks) != self.pp:
            raise ScheduleError(f"lowered schedule {sched.name!r} has {len(lowered.ranks)} item lists "
                                f"for {self.pp} pipeline ranks")
        self.ops: list[Union[Send, Recv]] = []
        self.rank: list[int] = []
        self.unit: list[int] = []
        self.partner: list[int] = []
        self.steps: list[list] = []
        self.item_at: list[list[int]] = []
        self.units: list[list[list[int]]] = []
        self.queue: list[list[int]] = []
        self.qunits: list[list[list[int]]] = []
        self.prev: list[list[int]] = []
        self.is_batch: list[list[bool]] = []
        self.waits: list[list[int]] = []
        self.stages: list[list[int]] = []  # per rank and step: the op's stage (-1 for a posting)
        self.needs: list[list] = []  # per rank and step: the message the op receives, or None
        for r, items in enumerate(lowered.ranks):
            self._add_rank(r, items)
        self._match()

    def _add_rank(self, r: int, items: tuple) -> None:
        """Number rank r's postings and check its items in order: well-formed postings, each
        op's input received (or computed on this rank) before it, each send after the op
        making its message, nothing sent or received twice. A posting is one queue entry per
        process group it uses (`p2p_groups.split`), each a step. (Messages are looked up as
        plain tuples, which equal and hash like the `Message` they stand for.)"""
        sched, pp, one = self.schedule, self.pp, self.groups == 1
        compute = [item for item in items if type(item) not in _POSTINGS]
        table = rule_table(sched.pp, sched.chunks_per_rank, sched.placement)[r]
        rules, mbs = op_rows(r, compute, table.by_op, sched.microbatches, sched.chunks_per_rank)
        stride = 3 * sched.num_stages
        rows = steps, item_at, waits, stages, needs, units, queue, prev, is_batch = [], [], [], [], [], [], [], [], []
        qunits: list[list[int]] = [[] for _ in range(self.groups)]
        received: dict[tuple, int] = {}  # message -> its queue entry
        made: set = set()  # messages made by this rank's ops so far
        sent: set = set()
        done: set = set()  # results computed on this rank so far (keyed as in `compiled`)
        ops, rank, unit = self.ops, self.rank, self.unit
        k = 0
        for at, item in enumerate(items):
            if type(item) in _POSTINGS:
                posted, first = _posted(r, item), len(units)
                for op in posted:
                    if type(op.peer) is not int or not 0 <= op.peer < pp or op.peer == r:
                        raise ScheduleError(f"rank {r} posts '{op}', but its peers are ranks "
                                            f"{', '.join(str(q) for q in range(pp) if q != r)}")
                    if type(op) is Send:
                        if op.msg in sent or op.msg not in made:
                            raise _bad_send(r, op, sent)
                        sent.add(op.msg)
                    elif op.msg in received:
                        raise ScheduleError(f"rank {r} receives {op.msg} twice")
                    else:
                        received[op.msg] = first
                for u, (g, part) in enumerate(((0, posted),) if one else split(self.layout, r, posted, _is_send), first):
                    if u != first:
                        received.update((op.msg, u) for op in part if type(op) is Recv)
                    units.append(list(range(len(ops), len(ops) + len(part))))
                    ops += part
                    rank += [r] * len(part)
                    unit += [u] * len(part)
                    prev.append(qunits[g][-1] if qunits[g] else -1)
                    qunits[g].append(u)
                    queue.append(g)
                    is_batch.append(type(item) is Batch)
                    steps.append(u)
                    item_at.append(at)
                    waits.append(-1)
                    stages.append(-1)
                    needs.append(None)
                continue
            rule, mb = rules[k], mbs[k]
            k += 1
            wait, msg = -1, None
            base = mb * stride
            if rule.recv_from >= 0:
                msg = (RESULT_KINDS[rule.need % 3], mb, rule.src, rule.stage)
                wait = received.get(msg, -1)
                if wait < 0:
                    raise ScheduleError(f"rank {r} op {item} needs {Message(*msg)} but posts no receive for it "
                                        f"before the op")
            elif rule.need >= 0 and base + rule.need not in done:
                key = (RESULT_KINDS[rule.need % 3], mb, rule.src)
                raise ScheduleError(f"rank {r} op {item} runs before {describe(key)}, which this rank computes later")
            done.add(base + rule.out)
            if rule.out2 >= 0:
                done.add(base + rule.out2)
            if rule.send_to >= 0:
                made.add((RESULT_KINDS[rule.out % 3], mb, rule.stage, rule.dst))
            steps.append(item)
            item_at.append(at)
            waits.append(wait)
            stages.append(rule.stage)
            needs.append(msg)
        self.partner += [-1] * (len(ops) - len(self.partner))
        for name, row in zip(("steps", "item_at", "waits", "stages", "needs", "units", "queue", "prev", "is_batch"),
                             rows):
            getattr(self, name).append(row)
        self.qunits.append(qunits)

    def _match(self) -> None:
        """Pair the k-th send from a to b with the k-th receive of b from a (FIFO)."""
        sends: dict[tuple[int, int], list[int]] = {}
        recvs: dict[tuple[int, int], list[int]] = {}
        for c, (op, r) in enumerate(zip(self.ops, self.rank)):
            if type(op) is Send:
                sends.setdefault((r, op.peer), []).append(c)
            else:
                recvs.setdefault((op.peer, r), []).append(c)
        for src, dst in sorted(sends.keys() | recvs.keys()):
            out, into = sends.get((src, dst), []), recvs.get((src, dst), [])
            for s, v in zip(out, into):
                if self.ops[s].msg != self.ops[v].msg:
                    raise ScheduleError(f"rank {dst}'s next receive from rank {src} is {self.ops[v].msg} "
                                        f"but that rank's next send to it is {self.ops[s].msg}: messages between "
                                        f"two ranks must be received in the order they are sent")
                self.partner[s], self.partner[v] = v, s
            if len(out) != len(into):
                extra = self.ops[(out if len(out) > len(into) else into)[min(len(out), len(into))]]
                owner = src if len(out) > len(into) else dst
                raise ScheduleError(f"rank {owner} posts '{extra}', which is never matched: rank {src} sends "
                                    f"{len(out)} messages to rank {dst}, which receives {len(into)} from it")


_POSTINGS = (Send, Recv, Batch)
_P2P = (Send, Recv)
_P2P_TYPES = frozenset(_P2P)


def _bad_send(r: int, op: Send, sent: set) -> ScheduleError:
    if op.msg in sent:
        return ScheduleError(f"rank {r} sends {op.msg} twice")
    return ScheduleError(f"rank {r} posts '{op}' before any op of that rank makes it")


def _is_send(op) -> bool:
    return type(op) is Send


def _posted(r: int, item) -> tuple:
    """The sends and receives an item posts (none for a compute op); raises for a malformed posting."""
    if type(item) in _P2P:
        return (item,)
    if type(item) is Batch:
        if not item.items or not _P2P_TYPES.issuperset(map(type, item.items)):
            raise ScheduleError(f"rank {r} posts '{item}': a batch holds one or more sends and receives")
        return item.items
    return ()


# The run -------------------------------------------------------------------------------------

class _Run:
    """Runs a `Network` to the end or until nothing can move (module doc); with costs
    `sc` it times every step, without them it only finds whether the run ends."""

    def __init__(self, net: Network, sc: Optional[StageCosts], *, lazy_init: bool,
                 recv_stall: float = 1.0) -> None:
        self.net, self.sc, self.lazy = net, sc, lazy_init
        self.stall = recv_stall if sc is not None else 1.0
        pp, groups = net.pp, net.groups
        self.pos = [0] * pp  # the host's next step
        self.clock = [0.0] * pp  # when the host gets there
        self.qhead = [[0] * groups for _ in range(pp)]  # per queue: its oldest unfinished entry (in qunits)
        self.qposted = [[0] * groups for _ in range(pp)]  # per queue: entries posted
        self.under_way = [[False] * len(u) for u in net.units]  # entries that have reached their queue's head
        self.left = [[len(u) for u in units] for units in net.units]  # unfinished operations per entry
        self.post_time = [[0.0] * len(u) for u in net.units]
        self.start_time = [[0.0] * len(u) for u in net.units]
        self.end_time = [[0.0] * len(u) for u in net.units]
        self.matched = [False] * len(net.ops)
        self.spans: list[list] = [[] for _ in range(pp)]
        # lazy init: communicators keyed per group (g * pp + peer for a pair's)
        self.contacted = [set() for _ in range(pp)]
        self.waiting_init = [-1] * pp  # the key of the pair communicator a host waits in, or _barrier(g)
        self.in_group = [[False] * pp for _ in range(groups)]  # has posted its first batch on the group
        # per-direction: the runtime makes group 1's communicator at start-up (runtime/p2p_groups.py)
        self.group_ready = [False] + [True] * (groups - 1)
        self.settled = [not lazy_init] * pp  # lazy init: its groups ready and in touch with every peer it has
        self.peers = [{net.queue[r][u] * pp + net.ops[c].peer for u, entry in enumerate(units) for c in entry}
                      for r, units in enumerate(net.units)]
        self.batch_groups = [{net.queue[r][u] for u, b in enumerate(batch) if b} for r, batch in enumerate(net.is_batch)]
        # the stall model: per rank, whether each entry holds a receive, the latest end of a completed
        # one, the ranks waiting to learn whether a receive is pending, and the one told it is
        self.has_recv = [[any(type(net.ops[c]) is Recv for c in entry) for entry in units] for units in net.units] \
            if self.stall != 1.0 else None  # not needed (nor paid for) without the stall
        self.recv_end = [0.0] * pp
        self.undecided: set = set()
        self.forced = [False] * pp
        self.todo = list(range(pp))
        while True:
            while self.todo:
                self._advance(self.todo.pop())
            if not self.undecided:
                break
            r = min(self.undecided, key=lambda q: (self.clock[q], q))  # module doc: it counts them pending
            self.undecided.discard(r)
            self.forced[r] = True
            self.todo.append(r)

    # -- moving one rank as far as it goes -------------------------------------------------
    def _advance(self, r: int) -> None:
        """Move rank r's queue heads and host as far as they go. Only rank r's own state
        changes here (and its partners' entries, as pairs meet), so it is held in locals."""
        net, sc, lazy = self.net, self.sc, self.lazy
        steps, waits, stages, queue = net.steps[r], net.waits[r], net.stages[r], net.queue[r]
        left, post_time, spans, qposted, qhead = self.left[r], self.post_time[r], self.spans[r], self.qposted[r], \
            self.qhead[r]
        i, clock = self.pos[r], self.clock[r]
        for g in range(net.groups):
            self._drain(r, g)
        while i < len(steps):
            step = steps[i]
            if type(step) is int:  # a posting
                if lazy and not self.settled[r]:
                    self.clock[r] = clock
                    ready = self._communicators_ready(r, step)
                    clock = self.clock[r]
                    if not ready:
                        break
                post_time[step] = clock
                g = queue[step]
                qposted[g] += 1
                if qhead[g] == qposted[g] - 1:  # its queue was empty: it is the head now
                    self._drain(r, g)
            else:  # a compute op
                wait = waits[i]
                if wait >= 0:
                    if left[wait]:
                        break  # its receive has not completed
                    if self.end_time[r][wait] > clock:
                        clock = self.end_time[r][wait]
                if sc is not None:
                    factor = 1.0 if self.stall == 1.0 else self._stall_at(r, clock)
                    if factor == 0.0:
                        break  # whether a receive is pending is not known yet (module doc)
                    start, clock = clock, clock + factor * sc.duration(step.kind, stages[i], step.mb)
                    spans.append((step, start, clock))
            i += 1
        self.pos[r], self.clock[r] = i, clock

    def _drain(self, r: int, g: int) -> None:
        """Move rank r's queue g: each new head gets under way, each completed one leaves."""
        qunits, qhead, posted = self.net.qunits[r][g], self.qhead[r], self.qposted[r][g]
        left, under_way, h = self.left[r], self.under_way[r], qhead[g]
        while h < posted:
            u = qunits[h]
            if not under_way[u]:
                self._start_entry(r, u)
            if left[u]:
                break
            if self.stall != 1.0 and self.has_recv[r][u] and self.end_time[r][u] > self.recv_end[r]:
                self.recv_end[r] = self.end_time[r][u]
            h += 1
        qhead[g] = h

    def _pending(self, r: int) -> list[int]:
        """Rank r's posted entries that have not completed, queue by queue."""
        qunits, qhead, qposted = self.net.qunits[r], self.qhead[r], self.qposted[r]
        return [u for g in range(self.net.groups) for u in qunits[g][qhead[g]:qposted[g]]]

    def _stall_at(self, r: int, clock: float) -> float:
        """The factor on rank r's op starting at `clock` with its posted entries not all
        completed: the stall if a receive is pending, 1 if none is, 0 if not known yet."""
        self.undecided.discard(r)
        if self.forced[r]:
            self.forced[r] = False
            return self.stall
        if self.recv_end[r] > clock:
            return self.stall
        if any(self.has_recv[r][u] for u in self._pending(r)):
            self.undecided.add(r)
            return 0.0
        return 1.0

    def _start_entry(self, r: int, u: int) -> None:
        """Entry u of rank r is at the head of its queue: put its operations under way and
        complete each whose partner is under way too."""
        net, under_way, left, end_time = self.net, self.under_way, self.left, self.end_time
        under_way[r][u] = True
        begin = self.post_time[r][u]
        prev = net.prev[r][u]
        if prev >= 0 and end_time[r][prev] > begin:
            begin = end_time[r][prev]
        self.start_time[r][u] = end_time[r][u] = begin
        for c in net.units[r][u]:
            p = net.partner[c]
            q, v = net.rank[p], net.unit[p]
            if under_way[q][v] and not self.matched[p]:  # both under way: they meet
                end = max(begin, self.start_time[q][v])
                if self.sc is not None:
                    end += self.sc.comm[net.ops[c].msg.src_stage]
                self.matched[c] = self.matched[p] = True
                left[r][u] -= 1
                left[q][v] -= 1
                if end > end_time[r][u]:
                    end_time[r][u] = end
                if end > end_time[q][v]:
                    end_time[q][v] = end
                if left[q][v] == 0:
                    self.todo.append(q)

    def _communicators_ready(self, r: int, u: int) -> bool:
        """Lazy init, before rank r posts entry u on queue g: the group's communicator (first
        batch) and a two-rank communicator with each peer it has not yet talked to on that
        group, in order. False while the host waits in one of those creations."""
        net, pp = self.net, self.net.pp
        g = net.queue[r][u]
        if net.is_batch[r][u] and not self.group_ready[g]:
            in_group = self.in_group[g]
            if not in_group[r]:
                in_group[r] = True
                if all(in_group):
                    self.group_ready[g] = True
                    start = max(self.clock)
                    for q in range(pp):
                        if self.waiting_init[q] == _barrier(g):
                            self.waiting_init[q] = -1
                            self.clock[q] = max(self.clock[q], start)
                            self.todo.append(q)
                    self.clock[r] = max(self.clock[r], start)
            if not self.group_ready[g]:
                self.waiting_init[r] = _barrier(g)
                return False
        for c in net.units[r][u]:
            q = net.ops[c].peer
            if g * pp + q in self.contacted[r]:
                continue
            if self.waiting_init[q] != g * pp + r:
                self.waiting_init[r] = g * pp + q
                return False
            self.contacted[r].add(g * pp + q)
            self.contacted[q].add(g * pp + r)
            self.waiting_init[q] = self.waiting_init[r] = -1
            self.clock[r] = self.clock[q] = max(self.clock[r], self.clock[q])
            self.todo.append(q)
        self.settled[r] = all(self.group_ready[h] for h in self.batch_groups[r]) \
            and len(self.contacted[r]) == len(self.peers[r])
        return True

    # -- the outcome -------------------------------------------------------------------------
    def stuck(self) -> list[int]:
        """The ranks that did not get to the end of their items and their queues."""
        net = self.net
        return [r for r in range(net.pp) if self.pos[r] < len(net.steps[r])
                or any(self.qhead[r][g] < len(net.qunits[r][g]) for g in range(net.groups))]

    def finish_times(self) -> list[float]:
        return [max([self.clock[r]] + [self.end_time[r][q[-1]] for q in self.net.qunits[r] if q])
                for r in range(self.net.pp)]

    def _head(self, r: int, g: int) -> int:
        """The entry at the head of rank r's queue g, or -1 where nothing posted there is left."""
        h = self.qhead[r][g]
        return self.net.qunits[r][g][h] if h < self.qposted[r][g] else -1

    def _stuck_head(self, r: int) -> int:
        """The queue head a stuck rank r waits on: that of the receive its host waits for, else
        its first queue's that holds anything (-1: none)."""
        net, i = self.net, self.pos[r]
        if i < len(net.steps[r]) and net.waits[r][i] >= 0 and self.left[r][net.waits[r][i]]:
            head = self._head(r, net.queue[r][net.waits[r][i]])
            if head >= 0:
                return head
        return next((u for u in (self._head(r, g) for g in range(net.groups)) if u >= 0), -1)

    def _queue_name(self, r: int, u: int) -> str:
        return "" if self.net.groups == 1 else f" on {GROUP_NAMES[self.net.queue[r][u]]}"

    def _wait_of(self, r: int) -> Optional[tuple[str, int, str]]:
        """(where rank r is stuck, the rank it waits for, why that rank does not answer),
        or None for a rank that is not stuck."""
        net, pp = self.net, self.net.pp
        key = self.waiting_init[r]
        if key <= -2:
            g = -2 - key
            q = next(q for q in range(pp) if not self.in_group[g][q])
            group = "the group's" if net.groups == 1 else f"{GROUP_NAMES[g]}'s"
            return (f"its first batch (lazy init creates {group} communicator there, with every rank)", q,
                    f"which has not posted its first batch: it {self._host_state(q)}")
        if key >= 0:
            peer = key % pp
            return (f"'{self._item(r, self.pos[r])}', its first contact with rank {peer} (lazy init creates "
                    f"their communicator there, with both)", peer,
                    f"which has not got to its first contact with rank {r}: it {self._host_state(peer)}")
        u = self._stuck_head(r)
        if u < 0:
            return None
        c = next(c for c in net.units[r][u] if not self.matched[c])
        p = net.partner[c]
        q, v = net.rank[p], net.unit[p]
        g = net.queue[q][v]
        if net.qunits[q][g].index(v) >= self.qposted[q][g]:
            why = f"which has not posted '{net.ops[p]}': it {self._host_state(q)}"
        else:
            why = f"whose '{net.ops[p]}' is queued behind '{self._head_op(q, g)}'"
        host = ""
        if self.pos[r] < len(net.steps[r]) and type(net.steps[r][self.pos[r]]) is not int:
            host = f"; its host waits at op {net.steps[r][self.pos[r]]}"
        return f"'{net.ops[c]}' (the head of its p2p queue{self._queue_name(r, u)}{host})", q, why

    def held_receives(self) -> list[tuple[int, Recv, int]]:
        """Where a stuck run waits on a receive that is not under way: for each unmatched
        operation at a stuck rank's queue head whose partner is a Recv not at the head of its
        own queue, (that rank q, the Recv, the index in q's items of what holds it: the head
        of the queue the Recv goes on, or, where that queue is empty, the item q's host waits at)."""
        net, out = self.net, []
        for r in self.stuck():
            for u in (self._head(r, g) for g in range(net.groups)):
                if u < 0:
                    continue
                for c in net.units[r][u]:
                    p = net.partner[c]
                    if self.matched[c] or type(net.ops[p]) is not Recv:
                        continue
                    q = net.rank[p]
                    head = self._head(q, net.queue[q][net.unit[p]])
                    out.append((q, net.ops[p], net.item_at[q][net.steps[q].index(head) if head >= 0 else self.pos[q]]))
        return out

    def _head_op(self, q: int, g: int) -> Union[Send, Recv]:
        return next(self.net.ops[c] for c in self.net.units[q][self._head(q, g)] if not self.matched[c])

    def _item(self, q: int, i: int):
        """Rank q's item at its step i."""
        return self.net.lowered.ranks[q][self.net.item_at[q][i]]

    def _host_state(self, q: int) -> str:
        net = self.net
        i = self.pos[q]
        if i == len(net.steps[q]):
            return "has posted all its items"
        step = net.steps[q][i]
        if type(step) is int:
            return f"waits to post '{self._item(q, i)}'"
        return f"waits at op {step} for {Message(*net.needs[q][i])}"

    def hang_error(self) -> ScheduleError:
        """The wait-for cycle (or chain) from the lowest stuck rank, hop by hop."""
        stuck = self.stuck()
        hops: list[tuple[int, str, int, str]] = []
        seen: dict[int, int] = {}
        r = stuck[0]
        while r not in seen:
            wait = self._wait_of(r)
            if wait is None:
                break
            seen[r] = len(hops)
            hops.append((r, *wait))
            r = wait[1]
        name = self.net.schedule.name
        mode = MODE_NAMES[LAZY if self.lazy else EAGER]
        if r in seen:  # a cycle: start it at its lowest rank
            cycle = hops[seen[r]:]
            first = min(range(len(cycle)), key=lambda k: cycle[k][0])
            cycle = cycle[first:] + cycle[:first]
            path = " -> ".join(str(h[0]) for h in cycle) + f" -> {cycle[0][0]}"
            what = f"wait-for cycle {path}"
        else:  # ends at a rank that waits for nobody (it has finished)
            cycle = hops
            path = " -> ".join(str(h[0]) for h in cycle) + f" -> {r}"
            what = f"wait-for chain {path}, where rank {r} has finished"
        detail = "; ".join(f"rank {rank} at {where} waits for rank {q}, {why}"
                           for rank, where, q, why in cycle)
        return ScheduleError(f"schedule {name!r} can hang under NCCL/RCCL with {mode}: {what}: {detail}")
