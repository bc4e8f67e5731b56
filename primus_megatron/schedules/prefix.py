"""The part of a step each rank may run before the previous optimizer step is
validated (post-validation, see primus_megatron/optim).

A rank's prefix is its leading forward ops with the postings between them: it
ends before its first B/W/BW and before its first posting (a batch is one
posting, so a prefix never ends inside one) that receives a message the sender
sends only after its own prefix. So within the prefixes every posted receive is
matched by a send of the peer's prefix; if validation fails every rank drains
exactly what was sent to it, posting those receives as one batch in the order
of its lowered list, throws the prefix away and starts the step again with
nothing left in flight. The prefixes followed by the drains are run through the
hang check (`rendezvous`; eager semantics only: a prefix runs from the second
step on, when every communicator exists whatever the init mode); where they
could hang, no rank runs anything before validation. All of it follows from the lowered op
lists; nothing is timed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ScheduleError
from .ir import F, Op
from .lowering import Batch, Lowered, Message, Recv, Send, p2p_ops
from .rendezvous import EAGER, check_channels


@dataclass(frozen=True)
class Prefixes:
    ends: tuple[int, ...]  # per rank: items[:end] run before validation
    drain: tuple[tuple[Message, ...], ...]  # per rank: messages sent in a prefix, received after this rank's own

    def drain_batch(self, lowered: Lowered, rank: int) -> Batch | None:
        """The one batch of receives that drains `rank` (None when nothing was sent to it)."""
        msgs = self.drain[rank]
        if not msgs:
            return None
        return Batch(tuple(Recv(m, lowered.schedule.owner(m.src_stage)[0]) for m in msgs))


def prefixes(lowered: Lowered) -> Prefixes:
    send_at: dict[Message, tuple[int, int]] = {}  # message -> (rank, index of the item posting its send)
    for r, items in enumerate(lowered.ranks):
        for i, item in enumerate(items):
            for op in p2p_ops(item):
                if type(op) is Send:
                    send_at[op.msg] = (r, i)

    ends = [next((i for i, it in enumerate(items) if isinstance(it, Op) and it.kind != F), len(items))
            for items in lowered.ranks]
    changed = True
    while changed:  # a prefix stops at a posting that receives what the sender sends beyond its prefix
        changed = False
        for r, items in enumerate(lowered.ranks):
            for i in range(ends[r]):
                if any(type(op) is Recv and _beyond(send_at[op.msg], ends) for op in p2p_ops(items[i])):
                    ends[r] = i
                    changed = True
                    break
    drain = []
    for r, items in enumerate(lowered.ranks):
        drain.append(tuple(op.msg for item in items[ends[r]:] for op in p2p_ops(item)
                           if type(op) is Recv and not _beyond(send_at[op.msg], ends)))
    result = Prefixes(tuple(ends), tuple(drain))
    try:  # the abandoned path (prefixes, then the drain) must not hang either
        check_channels(Lowered(lowered.schedule, tuple(
            tuple(items[:end]) + ((result.drain_batch(lowered, r),) if result.drain[r] else ())
            for r, (items, end) in enumerate(zip(lowered.ranks, ends))), lowered.p2p_groups), modes=(EAGER,))
    except ScheduleError:
        return Prefixes((0,) * len(ends), ((),) * len(ends))  # validate before anything: correct, no overlap
    return result


def _beyond(at: tuple[int, int], ends: list[int]) -> bool:
    """True when the posting at (rank, index) lies beyond that rank's prefix."""
    return at[1] >= ends[at[0]]
