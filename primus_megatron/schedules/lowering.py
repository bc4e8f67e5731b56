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
from typing import NamedTuple, Optional, Union

from .costs import UNIT
from .ir import B, BW, F, Op, Schedule
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


Item = Union[Op, Send, Recv]


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

    def edge_out(kind: str, stage: int) -> Optional[int]:
        """Stage the result of this op goes to (None: nowhere / the loss)."""
        if kind == F:
            return stage + 1 if stage + 1 < n else None
        if kind in (B, BW):
            return stage - 1 if stage > 0 else None
        return None

    def edge_in(kind: str, stage: int) -> Optional[int]:
        if kind == F:
            return stage - 1 if stage > 0 else None
        if kind in (B, BW):
            return stage + 1 if stage + 1 < n else None
        return None

    table = schedule.stage_table
    # Each message is built once: its place in the pair's channel is (send end time, sender, position).
    sent: dict[tuple, tuple] = {}  # (kind, mb, src_stage) -> (key, Message)
    for r, ops in enumerate(schedule.ranks):
        stages_r, ends_r = table[r], ends[r]
        for pos, op in enumerate(ops):
            kind, stage = op.kind, stages_r[op.chunk]
            dst = edge_out(kind, stage)
            if dst is not None and owner[dst] != r:
                mkind = F if kind == F else B
                sent[(mkind, op.mb, stage)] = ((ends_r[pos], r, pos), Message(mkind, op.mb, stage, dst))

    ranks = []
    for r, ops in enumerate(schedule.ranks):
        stages_r = table[r]
        # Per peer channel: (key, slot, item); slot i means "posted before ops[i]".
        channels: dict[int, list[tuple[tuple, Optional[int], Item]]] = {}
        for pos, op in enumerate(ops):
            kind, stage = op.kind, stages_r[op.chunk]
            mkind = F if kind == F else B
            dst = edge_out(kind, stage)
            if dst is not None and owner[dst] != r:
                key, msg = sent[(mkind, op.mb, stage)]
                channels.setdefault(owner[dst], []).append((key, pos + 1, Send(msg, owner[dst])))
            src = edge_in(kind, stage)
            if src is not None and owner[src] != r:
                key, msg = sent[(mkind, op.mb, src)]
                channels.setdefault(owner[src], []).append((key, None, Recv(msg, owner[src])))
        slots: dict[int, list[tuple[tuple, Item]]] = {}
        for chan in channels.values():
            chan.sort(key=lambda t: t[0])
            slot = 0
            for key, send_slot, item in chan:
                if send_slot is not None:
                    slot = send_slot  # a receive may not overtake an earlier send
                slots.setdefault(slot, []).append((key, item))
        out: list[Item] = []
        for pos in range(len(ops) + 1):
            bucket = slots.get(pos)
            if bucket:
                out.extend(item for _, item in sorted(bucket, key=lambda t: t[0]))
            if pos < len(ops):
                out.append(ops[pos])
        ranks.append(tuple(out))
    return Lowered(schedule, tuple(ranks))
