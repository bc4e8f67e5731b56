"""Hand-built lowerings for the strict p2p tests, independent of what `schedules.lower()` emits.

`hoisted`: the lowering `lower()` produced before issue 28 (each pair's messages in the order
of their simulated send times; a receive posted right after the previous send of its pair, or
at the very front when there is none). Under NCCL's ordering it deadlocks `interleaved-1f1b`
at pp >= 3: rank 0 starts with four receives from rank 3, behind which its first forward's
send waits. `batched`: any lowering with each run of consecutive sends and receives posted as
one Batch (one batch_isend_irecv), to run Batch items through the executor.
Not a test module; tests and the harness import it.
"""
from __future__ import annotations

from primus_megatron import schedules as S
from primus_megatron.schedules.costs import UNIT
from primus_megatron.schedules.lowering import incoming, outgoing
from primus_megatron.schedules.simulation import end_times


def hoisted(schedule: S.Schedule) -> S.Lowered:
    ends = end_times(schedule, UNIT.resolve(schedule.pp, schedule.chunks_per_rank, schedule.placement))
    sent = {}  # message -> (send end time, sender, position): its place in its pair's order
    for r, ops in enumerate(schedule.ranks):
        for pos, op in enumerate(ops):
            msg = outgoing(schedule, r, op)
            if msg is not None:
                sent[msg] = (ends[r][pos], r, pos)
    ranks = []
    for r, ops in enumerate(schedule.ranks):
        channels: dict[int, list] = {}  # peer -> [(key, message, is a send of this rank)]
        for op in ops:
            for msg, mine in ((outgoing(schedule, r, op), True), (incoming(schedule, r, op), False)):
                if msg is not None:
                    peer = schedule.owner(msg.dst_stage if mine else msg.src_stage)[0]
                    channels.setdefault(peer, []).append((sent[msg], msg, mine))
        front, after = [], {}  # after: position -> items right after ops[position]
        for peer, chan in channels.items():
            tail = None
            for key, msg, mine in sorted(chan, key=lambda c: c[0]):
                if mine:
                    tail = after[key[2]] = [S.Send(msg, peer)]
                elif tail is not None:
                    tail.append(S.Recv(msg, peer))
                else:
                    front.append((key, S.Recv(msg, peer)))
        items = [recv for _, recv in sorted(front, key=lambda c: c[0])]
        for pos, op in enumerate(ops):
            items.append(op)
            items += after.get(pos, [])
        ranks.append(tuple(items))
    return S.Lowered(schedule, tuple(ranks))


def batched(lowered: S.Lowered) -> S.Lowered:
    ranks = []
    for items in lowered.ranks:
        out, run = [], []
        for item in list(items) + [None]:
            if isinstance(item, (S.Send, S.Recv)):
                run.append(item)
                continue
            if run:
                out.append(S.Batch(tuple(run)) if len(run) > 1 else run[0])
                run = []
            if item is not None:
                out.append(item)
        ranks.append(tuple(out))
    return S.Lowered(lowered.schedule, tuple(ranks))
