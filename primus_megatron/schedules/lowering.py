"""Lowering: insert the p2p sends and receives a schedule needs, from its placement.

Every pipeline edge that crosses ranks becomes a `Message`. A send goes right
after the op that produces the message. Messages between two ranks travel on
one ordered channel (NCCL/RCCL run the p2p ops of a pair in issue order), so
both ends must list that pair's sends and receives in the same order: we order
each pair's messages by their simulated send time (ties broken the same way on
both ends) and post every receive as early as that order allows, right after
the previous item of the same pair. Posting receives early means a sender
never waits for its receiver to reach the consumer.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import attrgetter, getitem, itemgetter
from typing import NamedTuple, Optional, Union

from .costs import UNIT
from .ir import B, BW, F, W, Op, Schedule
from .simulation import end_times, gc_paused


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


Item = Union[Op, Send, Recv]
_FIRST = itemgetter(0)


@dataclass(frozen=True)
class Lowered:
    """A schedule with its communication: `ranks[r]` mixes Op, Send and Recv."""

    schedule: Schedule
    ranks: tuple[tuple[Item, ...], ...]


def outgoing(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message `op` on `rank` must send, if its consumer lives on another rank."""
    s = schedule.stage(rank, op)
    if op.kind == F and s + 1 < schedule.num_stages:
        dst = s + 1
    elif op.kind in (B, BW) and s > 0:
        dst = s - 1
    else:
        return None
    if schedule.owner(dst)[0] == rank:
        return None
    return Message(F if op.kind == F else B, op.mb, s, dst)


def incoming(schedule: Schedule, rank: int, op: Op) -> Optional[Message]:
    """The message `op` on `rank` must receive before it runs, if any."""
    s = schedule.stage(rank, op)
    if op.kind == F and s > 0:
        src = s - 1
    elif op.kind in (B, BW) and s + 1 < schedule.num_stages:
        src = s + 1
    else:
        return None
    if schedule.owner(src)[0] == rank:
        return None
    return Message(F if op.kind == F else B, op.mb, src, s)


_message = partial(tuple.__new__, Message)  # Message(*fields) without the Python-level __new__ (same object)
_send = partial(tuple.__new__, Send)
_recv = partial(tuple.__new__, Recv)
_KIND, _CHUNK = attrgetter("kind"), attrgetter("chunk")


@gc_paused
def lower(schedule: Schedule, ends: Optional[list] = None) -> Lowered:
    """Insert Send/Recv items into every rank's op list (see module doc).

    `ends` are the unit-cost end times of every op (`simulation.end_times`) if
    the caller has them."""
    # Channel order comes from a unit-cost run: any complete run gives both
    # ends the same order, and unit costs keep every op's duration positive.
    if ends is None:
        ends = end_times(schedule, UNIT.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement))
    n = schedule.num_stages
    owner = schedule.owner_table
    table = schedule.stage_table

    # Per rank, kind and chunk: (message kind, stage, destination stage, peer) of the
    # message the op sends, and (message kind, source stage, stage, peer) of the one
    # it receives; None where the neighbour stage is missing or on the same rank.
    def edges(r: int, kind: str) -> tuple:
        row = []
        for stage in table[r]:
            dst = src = None
            if kind == F:
                dst, src = (stage + 1 if stage + 1 < n else None), (stage - 1 if stage > 0 else None)
            elif kind in (B, BW):
                dst, src = (stage - 1 if stage > 0 else None), (stage + 1 if stage + 1 < n else None)
            mkind = F if kind == F else B
            out = (mkind, stage, dst, owner[dst]) if dst is not None and owner[dst] != r else None
            into = (mkind, src, stage, owner[src]) if src is not None and owner[src] != r else None
            row.append(None if out is None and into is None else (out, into))
        return tuple(row)

    # Pass 1: every message, built once and keyed by itself, with its place in its
    # pair's channel: (send end time, sender, position); per rank and peer, the
    # messages its ops send or receive. A receive looks its message up by fields.
    sent: dict[tuple, tuple[tuple, Message]] = {}  # message -> (channel key, message)
    channels: list[dict[int, list[tuple]]] = []  # per rank: peer -> messages
    tables: list[tuple[dict, tuple]] = []  # per rank: the edge tables above
    for r, ops in enumerate(schedule.ranks):
        by_kind = {kind: edges(r, kind) for kind in (F, B, W, BW)}
        nothing = by_kind[W]  # no messages (what any other kind maps to as well)
        tables.append((by_kind, nothing))
        ends_r = ends[r]
        mine: dict[int, list[tuple]] = {}
        # by_kind.get(op.kind, nothing)[op.chunk] for every op, in C
        rules = map(getitem, map(by_kind.get, map(_KIND, ops), repeat(nothing)), map(_CHUNK, ops))
        for pos, e in enumerate(rules):
            if e is None:
                continue
            out, into = e
            mb = ops[pos].mb
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

    # Pass 2, per rank: each pair's channel in key order (keys are unique; a key
    # naming this rank is a send, from the position it names). A send goes right
    # after its op; a receive right after the previous send of its channel, or
    # before the first op if there is none (then receives of several channels go
    # in key order). Only one message leaves an op, so the receives behind a send
    # are all of its channel.
    ranks = []
    for r, ops in enumerate(schedule.ranks):
        leading: list[tuple[tuple, Item]] = []  # (key, Recv) posted before ops[0]
        after: dict[int, list[Item]] = {}  # position -> items posted right after ops[position]
        for peer, messages in channels[r].items():
            try:
                chan = list(map(sent.__getitem__, messages))
            except KeyError:  # an op receives a message no op sends
                _raise_unsent(ops, *tables[r], sent)
            chan.sort(key=_FIRST)
            tail: Optional[list[Item]] = None
            for key, msg in chan:
                if key[1] == r:
                    tail = after[key[2]] = [_send((msg, peer))]
                elif tail is not None:
                    tail.append(_recv((msg, peer)))
                else:
                    leading.append((key, _recv((msg, peer))))
        if len(channels[r]) > 1:
            leading.sort(key=_FIRST)
        out: list[Item] = [item for _, item in leading]
        done = 0
        for pos in sorted(after):
            out += ops[done:pos + 1]
            out += after[pos]
            done = pos + 1
        out += ops[done:]
        ranks.append(tuple(out))
    return Lowered(schedule, tuple(ranks))


def _raise_unsent(ops: tuple, by_kind: dict, nothing: tuple, sent: dict) -> None:
    """KeyError naming (kind, mb, source stage) of the first message, in op order,
    that an op receives and no op sends."""
    for op in ops:
        e = by_kind.get(op.kind, nothing)[op.chunk]
        if e is not None and e[1] is not None:
            mkind, src, stage, _ = e[1]
            if (mkind, op.mb, src, stage) not in sent:
                raise KeyError((mkind, op.mb, src))
