"""Lowering: insert the p2p sends and receives a schedule needs, from its placement.

Every pipeline edge that crosses ranks becomes a `Message` (which edges those
are comes from the compiled form, `compiled`). A send goes right after the op
that produces the message. Messages between two ranks travel on one ordered
channel (NCCL/RCCL run the p2p ops of a pair in issue order), so both ends
must list that pair's sends and receives in the same order: we order each
pair's messages by their simulated send time (ties broken the same way on
both ends) and post every receive as early as that order allows, right after
the previous item of the same pair. Posting receives early means a sender
never waits for its receiver to reach the consumer.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from operator import attrgetter, itemgetter
from typing import NamedTuple, Optional, Union

from .compiled import Compiled, compile_schedule, rule_table
from .costs import UNIT
from .gc_pause import gc_paused
from .ir import F, Op, Schedule
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


@dataclass(frozen=True)
class Lowered:
    """A schedule with its communication: `ranks[r]` mixes Op, Send, Recv and Batch."""

    schedule: Schedule
    ranks: tuple[tuple[Item, ...], ...]


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


_message = partial(tuple.__new__, Message)  # Message(*fields) without the Python-level __new__ (same object)
_send = partial(tuple.__new__, Send)
_recv = partial(tuple.__new__, Recv)
_FIRST, _SLOT = itemgetter(0), attrgetter("slot")


@gc_paused
def lower(schedule: Schedule, ends: Optional[list] = None) -> Lowered:
    """Insert Send/Recv items into every rank's op list (see module doc).

    `ends` are the unit-cost end times of every op (`simulation.end_times`) if
    the caller has them."""
    # Channel order comes from a unit-cost run: any complete run gives both
    # ends the same order, and unit costs keep every op's duration positive.
    if ends is None:
        ends = end_times(schedule, UNIT.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement))
    compiled = compile_schedule(schedule)
    sent, channels, edges = _messages(compiled, ends)
    ranks = [_interleave(r, ops, channels[r], sent, edges[r], compiled.mbs[r])
             for r, ops in enumerate(schedule.ranks)]
    return Lowered(schedule, tuple(ranks))


def _edges(compiled: Compiled, r: int) -> list:
    """Per op of rank r: None, or ((kind, stage, destination stage, peer) of the message it
    sends or None, (kind, source stage, stage, peer) of the one it receives or None)."""
    per_slot = []
    for rule in compiled.table[r].slots:
        out = (rule.send_kind, rule.stage, rule.dst, rule.send_to) if rule.send_to >= 0 else None
        into = (rule.recv_kind, rule.src, rule.stage, rule.recv_from) if rule.recv_from >= 0 else None
        per_slot.append(None if out is None and into is None else (out, into))
    return list(map(per_slot.__getitem__, map(_SLOT, compiled.rules[r])))


def _messages(compiled: Compiled, ends: list) -> tuple[dict, list, list]:
    """Every message, built once and keyed by itself, with its place in its pair's
    channel: (send end time, sender, position); per rank and peer, the messages
    its ops send or receive, in op order. A receive looks its message up by fields."""
    sent: dict[tuple, tuple[tuple, Message]] = {}  # message -> (channel key, message)
    channels: list[dict[int, list[tuple]]] = []  # per rank: peer -> messages
    all_edges = []
    for r, mbs in enumerate(compiled.mbs):
        edges = _edges(compiled, r)
        all_edges.append(edges)
        ends_r = ends[r]
        mine: dict[int, list[tuple]] = {}
        for pos, e in enumerate(edges):
            if e is None:
                continue
            out, into = e
            mb = mbs[pos]
            if out is not None:
                mkind, stage, dst, peer = out
                msg = _message((mkind, mb, stage, dst))
                sent[msg] = ((ends_r[pos], r, pos), msg)
                chan = mine.get(peer)
                if chan is None:
                    chan = mine[peer] = []
                chan.append(msg)
            if into is not None:
                mkind, src, stage, peer = into
                chan = mine.get(peer)
                if chan is None:
                    chan = mine[peer] = []
                chan.append((mkind, mb, src, stage))
        channels.append(mine)
    return sent, channels, all_edges


def _interleave(r: int, ops: tuple, channels: dict, sent: dict, edges: list, mbs: list) -> tuple:
    """Rank r's items: each pair's channel in key order (keys are unique; a key naming
    this rank is a send, from the position it names). A send goes right after its op;
    a receive right after the previous send of its channel, or before the first op if
    there is none (then receives of several channels go in key order). Only one
    message leaves an op, so the receives behind a send are all of its channel."""
    leading: list[tuple[tuple, Item]] = []  # (key, Recv) posted before ops[0]
    after: dict[int, list[Item]] = {}  # position -> items posted right after ops[position]
    for peer, messages in channels.items():
        try:
            chan = list(map(sent.__getitem__, messages))
        except KeyError:  # an op receives a message no op sends
            _raise_unsent(edges, mbs, sent)
        chan.sort(key=_FIRST)
        tail: Optional[list[Item]] = None
        for key, msg in chan:
            if key[1] == r:
                tail = after[key[2]] = [_send((msg, peer))]
            elif tail is not None:
                tail.append(_recv((msg, peer)))
            else:
                leading.append((key, _recv((msg, peer))))
    if len(channels) > 1:
        leading.sort(key=_FIRST)
    out: list[Item] = [item for _, item in leading]
    done = 0
    for pos in sorted(after):
        out += ops[done:pos + 1]
        out += after[pos]
        done = pos + 1
    out += ops[done:]
    return tuple(out)


def _raise_unsent(edges: list, mbs: list, sent: dict) -> None:
    """KeyError naming (kind, mb, source stage) of the first message, in op order,
    that an op receives and no op sends."""
    for e, mb in zip(edges, mbs):
        if e is not None and e[1] is not None:
            mkind, src, stage, _ = e[1]
            if (mkind, mb, src, stage) not in sent:
                raise KeyError((mkind, mb, src))
