"""Replay an executed order: each rank's ops in the order they ran, each taking a given time.

The simulator (`simulation`) times a schedule from per-stage costs; this times what one run
executed from each op's own duration, with the same rules: a rank runs its ops one after another,
and an op starts when its rank is free and its input exists (`deps.input_of`), `comm` later when
the input was made on another rank. Given the CPU time each op used, it shows what the run would
have taken with a core per rank (the executed order without the waits of ranks that time-share
cores).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from .deps import input_of, outputs_of
from .ir import B, BW, F, W, Op
from .simulation import Span

_KINDS = (F, B, W, BW)


def replay(order: Sequence[Iterable[tuple[Op, int, float]]], num_stages: int, comm: float = 0.0) -> list[list[Span]]:
    """`order[rank]`: that rank's (op, stage, duration) in executed order (ops other than F, B, W
    and BW are left out). Returns each rank's spans, starting at time 0. Raises ValueError when
    an op's input is made by no op of the order (the order is not one step of a schedule)."""
    queues = [[(op, stage, d) for op, stage, d in ops if op.kind in _KINDS] for ops in order]
    made: dict[tuple[str, int, int], tuple[int, float]] = {}  # (result, mb, stage) -> (rank, time)
    free = [0.0] * len(queues)
    nxt = [0] * len(queues)
    out: list[list[Span]] = [[] for _ in queues]
    remaining = sum(map(len, queues))
    while remaining:
        progressed = False
        for rank, ops in enumerate(queues):
            while nxt[rank] < len(ops):
                op, stage, duration = ops[nxt[rank]]
                ready = _ready(made, op, stage, num_stages, rank, comm)
                if ready is None:
                    break
                start = max(free[rank], ready)
                free[rank] = end = start + duration
                out[rank].append(Span(rank, op, stage, start, end))
                for result in outputs_of(op.kind):
                    made[(result, op.mb, stage)] = (rank, end)
                nxt[rank] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [f"rank {r}: {queues[r][nxt[r]][0]}" for r in range(len(queues)) if nxt[r] < len(queues[r])]
            raise ValueError(f"the order cannot be replayed: no rank can go on ({'; '.join(stuck)})")
    return out


def _ready(made: dict, op: Op, stage: int, num_stages: int, rank: int, comm: float) -> Optional[float]:
    """When `op`'s input exists on `rank` (0.0 without one); None while it is not made yet."""
    needs = input_of(op.kind, stage, num_stages)
    if needs is None:
        return 0.0
    producer = made.get((needs[0], op.mb, needs[1]))
    if producer is None:
        return None
    made_on, at = producer
    return at + (comm if made_on != rank else 0.0)
