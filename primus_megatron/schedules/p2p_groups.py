"""Which process group carries each pipeline message (`--pipeline-p2p-groups one|per-direction`).

ONE: every send and receive of the step goes on the pipeline's process group (one
NCCL/RCCL queue per rank). PER_DIRECTION: two groups of the same ranks, so two
queues per rank: group 0 (the pipeline's own) carries the messages sent towards a
higher pipeline rank, group 1 (made once at start-up) those sent towards a lower
one (PyTorch moved torch.distributed.pipelining to a communicator per direction
for the same reason: #186173, #195760).

"Direction" is the rank order of the message's two ranks, not its stage order:
both ends know both ranks, so both pick the same group; on every linear placement
it is the stage order (next stage = higher rank); under a V placement the same
two ranks exchange both ways (down the V and back up), and by rank order what
rank r sends to r+1 and what r+1 sends to r never share a queue, whichever stage
sent it. The interleaved wrap (last rank to rank 0, the next chunk's first stage)
goes towards a lower rank, with the gradients.

A posting that holds messages of both groups (a batch of receives from both
neighbours) is posted as one batch per group, group 0's first: torch's
`batch_isend_irecv` takes the ops of one group only. The queue model (`rendezvous`)
and the runtime (`runtime/p2p.py`) both split by `split`, so they agree.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

ONE, PER_DIRECTION = "one", "per-direction"
P2P_GROUPS = (ONE, PER_DIRECTION)
GROUP_NAMES = ("the towards-higher-ranks group (the pipeline's)", "the towards-lower-ranks group")


def group_count(layout: str) -> int:
    """How many process groups (queues per rank) the layout uses."""
    check_layout(layout)
    return 1 if layout == ONE else 2


def check_layout(layout: str) -> str:
    if layout not in P2P_GROUPS:
        raise ValueError(f"p2p_groups must be one of {', '.join(P2P_GROUPS)}, got {layout!r}")
    return layout


def group_of(layout: str, src: int, dst: int) -> int:
    """The group index carrying a message from pipeline rank `src` to `dst` (module doc)."""
    return 0 if layout == ONE or dst > src else 1


def group_of_op(layout: str, rank: int, peer: int, send: bool) -> int:
    """The group of a send to `peer` (send) or a receive from `peer`, posted on `rank`."""
    return group_of(layout, rank, peer) if send else group_of(layout, peer, rank)


def split(layout: str, rank: int, ops: Sequence, is_send: Callable[[Any], bool]) -> list[tuple[int, list]]:
    """`ops` of one posting on `rank` as (group, its ops in order), group 0's first; `is_send(op)`
    says whether an op is a send and `op.peer` names its peer."""
    if layout == ONE:
        return [(0, list(ops))]
    by_group: dict[int, list] = {}
    for op in ops:
        by_group.setdefault(group_of_op(layout, rank, op.peer, is_send(op)), []).append(op)
    return sorted(by_group.items())
