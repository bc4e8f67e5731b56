"""The schedule IR: ops, placements and the per-rank op lists.

An op is (kind, microbatch, chunk): F (forward), B (input gradient), W (weight
gradient) or BW (the full backward of 1F1B-style schedules). An overlapped pair
(`Pair`) is an F of one microbatch and chunk with a B or BW of another, run as one
op (DualPipe's overlapped F&B: one half's communication hidden under the other's
compute); a schedule keeps its two halves as consecutive ops of the rank, each
with its own inputs and outputs (the one dependency rule), and names the pairs
in `Schedule.pairs`. A placement maps
(rank, chunk) to a global virtual stage: `loop` puts chunk c of rank r at
stage c * pp + r (Megatron's interleaved layout); `v` puts chunk 0 at stage r
and chunk 1 at stage 2 * pp - 1 - r (rank 0 holds the first and the last).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Iterator, NamedTuple

from .errors import ScheduleError

F, B, W, BW = "F", "B", "W", "BW"
COMPUTE_KINDS = (F, B, W, BW)

LOOP, V = "loop", "v"
PLACEMENTS = (LOOP, V)


class Op(NamedTuple):
    """One compute op on one rank: `kind` of microbatch `mb` on local `chunk`."""

    kind: str
    mb: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}" + (f".{self.chunk}" if self.chunk else "")


# Op(*fields) without the Python-level __new__ (the same object; for the planner's hot loops)
new_op = partial(tuple.__new__, Op)


class Pair(NamedTuple):
    """An overlapped F&B op, as a generator writes it into a rank's list: the F of one (microbatch,
    chunk) and the B or BW of another, started together and ended together."""

    f: Op
    b: Op

    def __str__(self) -> str:
        return f"{self.f}&{self.b}"


def pair_items(ops, starts) -> list:
    """`ops` with the pair starting at each position in `starts` as one `Pair` (inverse of `flatten_pairs`)."""
    out, i = [], 0
    while i < len(ops):
        if i in starts:
            out.append(Pair(ops[i], ops[i + 1]))
            i += 2
        else:
            out.append(ops[i])
            i += 1
    return out


def flatten_pairs(items) -> tuple[tuple[Op, ...], frozenset]:
    """A rank's list of Ops and Pairs as its ops and the positions where a pair starts."""
    ops: list = []
    starts = set()
    for item in items:
        if type(item) is Pair:
            starts.add(len(ops))
            ops.extend(item)
        else:
            ops.append(item)
    return tuple(ops), frozenset(starts)


def stage_of(placement: str, pp: int, rank: int, chunk: int) -> int:
    """Global virtual stage held by `rank`'s local `chunk`."""
    if placement == LOOP:
        return chunk * pp + rank
    if placement == V:
        if chunk not in (0, 1):
            raise ScheduleError(f"V placement has chunks 0 and 1 only, got chunk {chunk}")
        return rank if chunk == 0 else 2 * pp - 1 - rank
    raise ScheduleError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")


def owner_of(placement: str, pp: int, stage: int) -> tuple[int, int]:
    """(rank, chunk) holding global virtual `stage`; inverse of `stage_of`."""
    if placement == LOOP:
        return stage % pp, stage // pp
    if placement == V:
        return (stage, 0) if stage < pp else (2 * pp - 1 - stage, 1)
    raise ScheduleError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")


@lru_cache(maxsize=64)
def stage_table(placement: str, pp: int, chunks: int) -> tuple[tuple[int, ...], ...]:
    """table[rank][chunk] -> global stage of a layout (a pure function, remembered per layout)."""
    return tuple(tuple(stage_of(placement, pp, r, c) for c in range(chunks)) for r in range(pp))


@dataclass(frozen=True)
class Schedule:
    """One training step of a pipeline: an ordered op list per rank.

    `ranks[r]` is what rank r computes, in order; communication is not part of
    it (see `lowering.lower`). `pairs[r]` holds the positions p where `ranks[r][p]` (an F)
    and `ranks[r][p + 1]` (a B or BW) run as one overlapped op (`Pair`); empty: none.
    """

    name: str
    pp: int
    microbatches: int
    chunks_per_rank: int
    placement: str
    ranks: tuple[tuple[Op, ...], ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    pairs: tuple[frozenset, ...] = ()

    def paired(self, rank: int) -> frozenset:
        """Positions of rank `rank` where an overlapped pair starts."""
        return self.pairs[rank] if rank < len(self.pairs) else frozenset()

    @property
    def has_pairs(self) -> bool:
        return any(self.pairs)

    def items(self, rank: int) -> list:
        """Rank `rank`'s ops with each overlapped pair as one `Pair`."""
        return pair_items(self.ranks[rank], self.paired(rank))

    @property
    def num_stages(self) -> int:
        return self.pp * self.chunks_per_rank

    @property
    def stage_table(self) -> tuple[tuple[int, ...], ...]:
        """stage_table[rank][chunk] -> global stage."""
        return stage_table(self.placement, self.pp, self.chunks_per_rank)

    def stage(self, rank: int, op: Op) -> int:
        return self.stage_table[rank][op.chunk]

    def owner(self, stage: int) -> tuple[int, int]:
        return owner_of(self.placement, self.pp, stage)

    @property
    def splits_backward(self) -> bool:
        """True when backward is split into B and W (weight gradients deferred)."""
        return any(op.kind == W for ops in self.ranks for op in ops)

    def ops(self) -> Iterator[tuple[int, int, Op]]:
        """(rank, position, op) for every op."""
        for r, ops in enumerate(self.ranks):
            for i, op in enumerate(ops):
                yield r, i, op

    def with_ranks(self, ranks: list[list[Op]] | tuple[tuple[Op, ...], ...], pairs: tuple = ()) -> "Schedule":
        """The same schedule with other op lists; pairs only where given (positions move with the ops)."""
        return Schedule(self.name, self.pp, self.microbatches, self.chunks_per_rank,
                        self.placement, tuple(tuple(r) for r in ranks), dict(self.meta), tuple(pairs))
