"""The hang check: a lowered schedule cannot hang on NCCL/RCCL, under either communicator init.

It runs every rank's items under the p2p semantics of NCCL/RCCL as PyTorch's
ProcessGroupNCCL drives them (REFERENCE.md "NCCL/RCCL semantics"), not gloo's:

- The host walks its items in order. A send, a receive or a `Batch` is posted
  without waiting: it joins the rank's p2p queue. A compute op waits until the
  receive of its input has completed. (On a GPU the compute stream waits and the
  host runs ahead; waiting on the host is stricter, so what passes here passes
  there.)
- The queue: one per process group, run in posting order (eager init: the
  group's one NCCL stream). Its head is the oldest unfinished posting, a lone
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
  queue is stricter. Lazy only adds waits, so a schedule that passes lazy
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

EAGER, LAZY = "eager", "lazy"
MODE_NAMES = {
    EAGER: "eager communicator init (init_process_group with device_id)",
    LAZY: "lazy communicator init (no device_id)",
}
_BARRIER = -2  # `waiting_init` value: waiting in the group communicator's creation


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
    of a queue entry, `units[r][index]`: the ids of its sends and receives). Operation
    `c` is `ops[c]` (Send or Recv) of rank `rank[c]` in entry `unit[c]`, matched with
    `partner[c]`. A compute op that receives its input waits for entry `waits[r][i]`."""

    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered
        self.schedule = sched = lowered.schedule
        self.pp = sched.pp
        if len(lowered.ranks) != self.pp:
            raise ScheduleError(f"lowered schedule {sched.name!r} has {len(lowered.ranks)} item lists "
                                f"for {self.pp} pipeline ranks")
        self.ops: list[Union[Send, Recv]] = []
        self.rank: list[int] = []
        self.unit: list[int] = []
        self.partner: list[int] = []
        self.steps: list[list] = []
        self.units: list[list[list[int]]] = []
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
        making its message, nothing sent or received twice. (Messages are looked up as
        plain tuples, which equal and hash like the `Message` they stand for.)"""
        sched = self.schedule
        compute = [item for item in items if type(item) not in _POSTINGS]
        table = rule_table(sched.pp, sched.chunks_per_rank, sched.placement)[r]
        rules, mbs = op_rows(r, compute, table.by_op, sched.microbatches, sched.chunks_per_rank)
        stride = 3 * sched.num_stages
        steps, units, is_batch, waits, stages, needs = [], [], [], [], [], []
        received: dict[tuple, int] = {}  # message -> its queue entry
        made: set = set()  # messages made by this rank's ops so far
        sent: set = set()
        done: set = set()  # results computed on this rank so far (keyed as in `compiled`)
        ops, rank, unit = self.ops, self.rank, self.unit
        k = 0
        for item in items:
            kind = type(item)
            if kind in _POSTINGS:
                entry = []
                for op in _posted(r, item):
                    if type(op.peer) is not int or not 0 <= op.peer < self.pp or op.peer == r:
                        raise ScheduleError(f"rank {r} posts '{op}', but its peers are ranks "
                                            f"{', '.join(str(q) for q in range(self.pp) if q != r)}")
                    if type(op) is Send:
                        if op.msg in sent:
                            raise ScheduleError(f"rank {r} sends {op.msg} twice")
                        if op.msg not in made:
                            raise ScheduleError(f"rank {r} posts '{op}' before any op of that rank makes it")
                        sent.add(op.msg)
                    else:
                        if op.msg in received:
                            raise ScheduleError(f"rank {r} receives {op.msg} twice")
                        received[op.msg] = len(units)
                    entry.append(len(ops))
                    ops.append(op)
                    rank.append(r)
                    unit.append(len(units))
                steps.append(len(units))
                units.append(entry)
                is_batch.append(kind is Batch)
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
            waits.append(wait)
            stages.append(rule.stage)
            needs.append(msg)
        self.partner += [-1] * (len(ops) - len(self.partner))
        self.steps.append(steps)
        self.units.append(units)
        self.is_batch.append(is_batch)
        self.waits.append(waits)
        self.stages.append(stages)
        self.needs.append(needs)

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
        pp = net.pp
        self.pos = [0] * pp  # the host's next step
        self.clock = [0.0] * pp  # when the host gets there
        self.posted = [0] * pp  # queue entries posted
        self.head = [0] * pp  # the oldest unfinished entry
        self.started = [0] * pp  # entries whose operations have been put under way
        self.left = [[len(u) for u in units] for units in net.units]  # unfinished operations per entry
        self.post_time = [[0.0] * len(u) for u in net.units]
        self.start_time = [[0.0] * len(u) for u in net.units]
        self.end_time = [[0.0] * len(u) for u in net.units]
        self.matched = [False] * len(net.ops)
        self.spans: list[list] = [[] for _ in range(pp)]
        # lazy init
        self.contacted = [set() for _ in range(pp)]
        self.waiting_init = [-1] * pp  # the peer whose first contact a host waits in, or _BARRIER
        self.in_group = [False] * pp  # has posted its first batch (joined the group communicator)
        self.group_ready = False
        self.settled = [not lazy_init] * pp  # lazy init: in the group and in touch with every peer it has
        self.peers = [{net.ops[c].peer for entry in units for c in entry} for units in net.units]
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
        """Move rank r's queue head and host as far as they go. Only rank r's own state
        changes here (and its partners' entries, as pairs meet), so it is held in locals."""
        net, sc, lazy = self.net, self.sc, self.lazy
        steps, waits, stages = net.steps[r], net.waits[r], net.stages[r]
        left, post_time, end_time, spans = self.left[r], self.post_time[r], self.end_time[r], self.spans[r]
        head, posted, i, clock = self.head[r], self.posted[r], self.pos[r], self.clock[r]
        while True:
            if head < posted:
                if self.started[r] == head:  # a new head: its operations get under way
                    self._start_entry(r, head)
                if left[head] == 0:
                    if self.stall != 1.0 and self.has_recv[r][head] and end_time[head] > self.recv_end[r]:
                        self.recv_end[r] = end_time[head]
                    head += 1
                    continue
            if i == len(steps):
                break
            step = steps[i]
            if type(step) is int:  # a posting
                if lazy and not self.settled[r]:
                    self.clock[r] = clock
                    ready = self._communicators_ready(r, step)
                    clock = self.clock[r]
                    if not ready:
                        break
                post_time[step] = clock
                posted += 1
            else:  # a compute op
                wait = waits[i]
                if wait >= 0:
                    if head <= wait:
                        break  # its receive has not completed
                    if end_time[wait] > clock:
                        clock = end_time[wait]
                if sc is not None:
                    factor = 1.0 if self.stall == 1.0 else self._stall_at(r, head, posted, clock)
                    if factor == 0.0:
                        break  # whether a receive is pending is not known yet (module doc)
                    start, clock = clock, clock + factor * sc.duration(step.kind, stages[i], step.mb)
                    spans.append((step, start, clock))
            i += 1
        self.head[r], self.posted[r], self.pos[r], self.clock[r] = head, posted, i, clock

    def _stall_at(self, r: int, head: int, posted: int, clock: float) -> float:
        """The factor on rank r's op starting at `clock` with queue entries [head, posted) not
        completed: the stall if a receive is pending, 1 if none is, 0 if not known yet."""
        self.undecided.discard(r)
        if self.forced[r]:
            self.forced[r] = False
            return self.stall
        if self.recv_end[r] > clock:
            return self.stall
        if any(self.has_recv[r][u] for u in range(head, posted)):
            self.undecided.add(r)
            return 0.0
        return 1.0

    def _start_entry(self, r: int, u: int) -> None:
        """Entry u of rank r is at the head of its queue: put its operations under way and
        complete each whose partner is under way too."""
        net, head, started, left, end_time = self.net, self.head, self.started, self.left, self.end_time
        started[r] = u + 1
        begin = self.post_time[r][u]
        if u > 0 and end_time[r][u - 1] > begin:
            begin = end_time[r][u - 1]
        self.start_time[r][u] = end_time[r][u] = begin
        for c in net.units[r][u]:
            p = net.partner[c]
            q, v = net.rank[p], net.unit[p]
            if head[q] == v and started[q] == v + 1:  # both under way: they meet
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
        """Lazy init, before rank r posts entry u: the group's communicator (first batch)
        and a two-rank communicator with each peer it has not yet talked to, in order.
        False while the host waits in one of those creations."""
        if self.net.is_batch[r][u] and not self.group_ready:
            if not self.in_group[r]:
                self.in_group[r] = True
                if all(self.in_group):
                    self.group_ready = True
                    start = max(self.clock)
                    for q in range(self.net.pp):
                        if self.waiting_init[q] == _BARRIER:
                            self.waiting_init[q] = -1
                            self.clock[q] = max(self.clock[q], start)
                            self.todo.append(q)
                    self.clock[r] = max(self.clock[r], start)
            if not self.group_ready:
                self.waiting_init[r] = _BARRIER
                return False
        for c in self.net.units[r][u]:
            q = self.net.ops[c].peer
            if q in self.contacted[r]:
                continue
            if self.waiting_init[q] != r:
                self.waiting_init[r] = q
                return False
            self.contacted[r].add(q)
            self.contacted[q].add(r)
            self.waiting_init[q] = self.waiting_init[r] = -1
            self.clock[r] = self.clock[q] = max(self.clock[r], self.clock[q])
            self.todo.append(q)
        self.settled[r] = self.group_ready and len(self.contacted[r]) == len(self.peers[r])
        return True

    # -- the outcome -------------------------------------------------------------------------
    def stuck(self) -> list[int]:
        """The ranks that did not get to the end of their items and their queue."""
        net = self.net
        return [r for r in range(net.pp) if self.pos[r] < len(net.steps[r]) or self.head[r] < len(net.units[r])]

    def finish_times(self) -> list[float]:
        return [max(self.clock[r], self.end_time[r][-1] if self.end_time[r] else 0.0) for r in range(self.net.pp)]

    def _wait_of(self, r: int) -> Optional[tuple[str, int, str]]:
        """(where rank r is stuck, the rank it waits for, why that rank does not answer),
        or None for a rank that is not stuck."""
        net = self.net
        peer = self.waiting_init[r]
        if peer == _BARRIER:
            q = next(q for q in range(net.pp) if not self.in_group[q])
            return ("its first batch (lazy init creates the group's communicator there, with every rank)", q,
                    f"which has not posted its first batch: it {self._host_state(q)}")
        if peer >= 0:
            return (f"'{net.lowered.ranks[r][self.pos[r]]}', its first contact with rank {peer} (lazy init creates "
                    f"their communicator there, with both)", peer,
                    f"which has not got to its first contact with rank {r}: it {self._host_state(peer)}")
        u = self.head[r]
        if u >= self.posted[r]:
            return None
        c = next(c for c in net.units[r][u] if not self.matched[c])
        p = net.partner[c]
        q, v = net.rank[p], net.unit[p]
        if v >= self.posted[q]:
            why = f"which has not posted '{net.ops[p]}': it {self._host_state(q)}"
        else:
            why = f"whose '{net.ops[p]}' is queued behind '{self._head_op(q)}'"
        host = ""
        if self.pos[r] < len(net.steps[r]) and type(net.steps[r][self.pos[r]]) is not int:
            host = f"; its host waits at op {net.steps[r][self.pos[r]]}"
        return f"'{net.ops[c]}' (the head of its p2p queue{host})", q, why

    def held_receives(self) -> list[tuple[int, Recv, int]]:
        """Where a stuck run waits on a receive that is not under way: for each unmatched
        operation at a stuck rank's queue head whose partner is a Recv not at the head of its
        own rank's queue, (that rank q, the Recv, the index in q's items of what holds it:
        q's queue head, or, where q's queue is empty, the item q's host waits at)."""
        net, out = self.net, []
        for r in self.stuck():
            u = self.head[r]
            if u >= self.posted[r]:
                continue
            for c in net.units[r][u]:
                p = net.partner[c]
                if self.matched[c] or type(net.ops[p]) is not Recv:
                    continue
                q = net.rank[p]
                held = self.head[q] < self.posted[q]
                out.append((q, net.ops[p], net.steps[q].index(self.head[q]) if held else self.pos[q]))
        return out

    def _head_op(self, q: int) -> Union[Send, Recv]:
        return next(self.net.ops[c] for c in self.net.units[q][self.head[q]] if not self.matched[c])

    def _host_state(self, q: int) -> str:
        net = self.net
        i = self.pos[q]
        if i == len(net.steps[q]):
            return "has posted all its items"
        step = net.steps[q][i]
        if type(step) is int:
            return f"waits to post '{net.lowered.ranks[q][i]}'"
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
