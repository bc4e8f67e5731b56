"""The process groups of `--pipeline-p2p-groups` (schedules/p2p_groups.py says which message goes where).

`one`: the pipeline's own group carries every send and receive of the step.
`per-direction`: it carries those sent towards a higher pipeline rank, and a twin
(a second group of the same ranks) those sent towards a lower one.

The twins are made once, at the runner's first step, before any p2p:
- Group creation is collective over the whole job (`torch.distributed.new_group`
  without local synchronisation names each group by a counter that every rank
  must advance alike), so every rank makes every pipeline's twin, in one order.
  That order is the same everywhere because it is computed from the same data:
  every rank's pipeline rank list, gathered over the world (`all_gather_object`,
  the same list on every rank), deduplicated and sorted.
- Each rank then runs one small all-reduce on its own twin. Under NCCL/RCCL's lazy
  initialisation (no `device_id`) that creates the twin's communicator now, with
  every rank of the pipeline, instead of at its first batched send or receive,
  which only the ranks that use the twin would reach (an interleaved forward-only
  step sends towards a lower rank only on the wrap, rank pp-1 to rank 0): the
  queue model counts the twin's communicator as made (`rendezvous`).

Cost: one more process group per pipeline (world / pp groups in the job, one per
rank), so one more NCCL/RCCL communicator per rank (docs/megatron-core.md).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..schedules.p2p_groups import ONE, check_layout
from .collectives import collective_device

_TWINS: dict = {}  # pipeline group -> its towards-lower-ranks twin, for the process's lifetime


def direction_groups(group: Any, layout: str) -> tuple:
    """The groups carrying the step's p2p: (group,) for `one`, (group, its twin) for
    `per-direction`; the twins are made at the first call (module doc), so every rank of the job
    must make that call at the same point of its program (the runner's first step)."""
    check_layout(layout)
    if layout == ONE:
        return (group,)
    key = group if group is not None else dist.group.WORLD
    if key not in _TWINS:
        _TWINS[key] = _make_twin(key)
    return key, _TWINS[key]


def _make_twin(group: Any) -> Any:
    """Every pipeline's twin made on every rank, in the gathered order; this rank's warmed."""
    mine = dist.get_process_group_ranks(group)
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    backend = dist.get_backend(group)
    twin = None
    # `every` is the same list on every rank, so this is the same sequence of (collective) creations
    for ranks in sorted({tuple(r) for r in every}):
        made = dist.new_group(list(ranks), backend=backend)
        if list(ranks) == mine:
            twin = made
    if twin is None:  # our own list was gathered: it is among them
        raise RuntimeError("per-direction p2p groups: this rank's pipeline group was not among the gathered ones")
    dist.all_reduce(torch.zeros(1, device=collective_device(twin)), group=twin)  # its communicator, now
    return twin
