"""The part of a step each rank may run before the previous optimizer step is
validated (post-validation, see primus_megatron/optim).

A rank's prefix is its leading forward ops: it ends before its first B/W/BW
and before its first receive of a message that the sender sends only after
its own prefix. So within the prefixes every posted receive is matched by a
send of the peer's prefix, in channel order; if validation fails every rank
drains exactly what was sent to it, throws the prefix away and starts the step
again with nothing left in flight. All of it follows from the lowered op
lists; nothing is timed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ScheduleError
from .ir import F, Op
from .lowering import Lowered, Message, Recv, Send
from .rendezvous import check_channels


@dataclass(frozen=True)
class Prefixes:
    ends: tuple[int, ...]  # per rank: items[:end] run before validation
    drain: tuple[tuple[Message, ...], ...]  # per rank: messages sent in a prefix, received after this rank's own


def prefixes(lowered: Lowered) -> Prefixes:
    send_at: dict[Message, tuple[int, int]] = {}
    for r, items in enumerate(lowered.ranks):
        for i, item in enumerate(items):
            if isinstance(item, Send):
                send_at[item.msg] = (r, i)

    ends = [next((i for i, it in enumerate(items) if isinstance(it, Op) and it.kind != F), len(items))
            for items in lowered.ranks]
    changed = True
    while changed:  # a prefix stops at a receive whose send lies beyond the sender's prefix
        changed = False
        for r, items in enumerate(lowered.ranks):
            for i in range(ends[r]):
                item = items[i]
                if isinstance(item, Recv):
                    src, j = send_at[item.msg]
                    if j >= ends[src]:
                        ends[r] = i
                        changed = True
                        break
    drain = []
    for r, items in enumerate(lowered.ranks):
        drain.append(tuple(item.msg for i, item in enumerate(items) if i >= ends[r] and isinstance(item, Recv)
                           and send_at[item.msg][1] < ends[send_at[item.msg][0]]))
    result = Prefixes(tuple(ends), tuple(drain))
    try:  # the abandoned path (prefixes, then the drain) must not hang either
        check_channels(Lowered(lowered.schedule, tuple(
            tuple(items[:end]) + tuple(Recv(m, lowered.schedule.owner(m.src_stage)[0]) for m in msgs)
            for items, end, msgs in zip(lowered.ranks, ends, drain))))
    except ScheduleError:
        return Prefixes((0,) * len(ends), ((),) * len(ends))  # validate before anything: correct, no overlap
    return result
