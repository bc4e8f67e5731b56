"""Data-parallel replicas that run different microbatch counts (`--pipeline-balance-data`).

With balanced minibatches (ODC's LB-Mini) each data-parallel replica of the pipeline gets its own
number of packed microbatches per step. Then two things the fixed-count path takes for granted
need a check of their own, before any p2p of the step:

* the ranks of one pipeline must run the same count (they plan it from the same global batch, but
  a rank fed other data would deadlock its neighbours): compared every step, since a count new to
  one pipeline may be one another pipeline has already planned and checked;
* replicas meet only in DDP's gradient reduce (and the distributed optimizer's parameter gather),
  which launch a chunk's buckets when its last backward / first forward runs: every replica must
  reach its chunks in the same order, whatever its count (`replica_fingerprint`). Expert and
  context parallel peers exchange inside ops, so they must be the same replica (expert
  parallelism with balanced data is refused where the options are checked).

One all-gather of three integers over the world per step carries both checks.
"""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist

from .. import schedules as S
from .collectives import collective_device
from .planner import ScheduleMismatch, gather_before_step, schedule_fingerprint

_MASK = (1 << 62) - 1


def replica_fingerprint(schedule: S.Schedule) -> str:
    """What every data-parallel replica must share whatever its microbatch count: the schedule, its
    layout, and per rank the order in which its chunks run their first forward (the parameter
    gather's order) and finish their last gradient op (the gradient reduce's order)."""
    orders = []
    for ops in schedule.ranks:
        first_f: list = []
        last_grad: dict = {}
        for i, op in enumerate(ops):
            if op.kind == S.F and op.chunk not in first_f:
                first_f.append(op.chunk)
            if op.kind in (S.W, S.BW):  # where a chunk's weight gradients are complete
                last_grad[op.chunk] = i
        orders.append((tuple(first_f), tuple(sorted(last_grad, key=last_grad.get))))
    text = repr((schedule.name, schedule.pp, schedule.chunks_per_rank, schedule.placement, tuple(orders)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_step(schedule: S.Schedule, replica: int, rank: int, timeout_s: float) -> None:
    """Before the step's first op: the ranks of data-parallel replica `replica` (its pipeline, tensor
    and context parallel ranks: they share the data) run the same plan, and every replica's plan
    reduces gradients in the same chunk order (module doc). ScheduleMismatch in one sentence, or
    PipelineTimeout naming who waited for what (`rank`: the pipeline rank)."""
    mine = [replica, schedule.microbatches, int(schedule_fingerprint(schedule), 16) & _MASK,
            int(replica_fingerprint(schedule), 16) & _MASK]
    value = torch.tensor(mine, dtype=torch.long, device=collective_device())
    values = gather_before_step(value, None, rank, timeout_s,
                                "before its step for every rank to compare its microbatch count")
    rows = [[int(x) for x in v.tolist()] for v in values]
    for each in sorted({row[0] for row in rows}):  # every rank judges every replica: all raise together
        peers = [g for g, row in enumerate(rows) if row[0] == each]
        if len({tuple(rows[g][1:3]) for g in peers}) > 1:
            listing = ", ".join(f"global rank {g} {rows[g][1]}" for g in peers)
            raise ScheduleMismatch(f"the ranks of data-parallel replica {each} would run different plans or "
                                   f"microbatch counts ({listing}); every rank of a replica must plan its "
                                   f"microbatches from the same global batch")
    if len({row[3] for row in rows}) > 1:
        odd = next(g for g, row in enumerate(rows) if row[3] != rows[0][3])
        raise ScheduleMismatch(
            f"data-parallel replicas would reduce gradients in different chunk orders ({schedule.name} with "
            f"{rows[0][1]} microbatches on global rank 0 against {rows[odd][1]} on global rank {odd}); "
            f"--pipeline-balance-data needs a schedule whose chunk order does not depend on the microbatch count")
