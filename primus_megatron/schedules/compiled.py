"""The compiled form of a schedule: its ops checked once and turned into flat per-rank rows.

Every op of a rank is one of few kinds on one of few chunks, and everything
about it but its microbatch depends on (rank, kind, chunk) alone: its stage,
the result it waits for and where that result comes from, the results it
makes and where they go. `rule_table` works that out once per pipeline
layout from the dependency rule (`deps`); `compile_schedule` checks a schedule's ops
and gives, per rank, each op's `Rule` and microbatch. The simulator, the
completeness check, the lowering and the rendezvous check read these rows (the
post-validation prefix reads the lowering). The list scheduler builds an order
rather than reading one: it takes its dependencies from `deps` directly and times
the order as it grows with the simulator's arithmetic (`test_schedule_listsched`
checks that its scores equal the simulator's).

Results are numbered: result (kind, mb, stage) has the key
`mb * stride + offset` with `offset = stage * 3 + index of kind in (F, B, W)`
and `stride = 3 * num_stages`, so a flat list indexed by key holds one entry
per result.
"""
from __future__ import annotations

import operator
import weakref
from dataclasses import dataclass
from functools import lru_cache, partial
from operator import attrgetter, itemgetter
from typing import NamedTuple, Sequence

from .deps import RESULT_KINDS, consumer_stage, input_of, outputs_of
from .errors import ScheduleError
from .ir import COMPUTE_KINDS, Op, Schedule, owner_of, stage_of


class Rule(NamedTuple):
    """What an op of one kind on one chunk of one rank waits for and makes.

    Offsets are `stage * 3 + result index` (module doc); -1 where there is none."""

    slot: int  # position in its rank's `rule_table` list: chunk * 4 + index of kind in COMPUTE_KINDS
    kind: str
    chunk: int
    stage: int
    need: int  # offset of the result the op waits for
    src: int  # the stage making that result
    recv_from: int  # the rank sending it, where that is another rank
    out: int  # offset of the result the op makes
    out2: int  # offset of a second result (BW's weight gradient)
    dst: int  # the stage on another rank that waits for the op's result
    send_to: int  # the rank holding `dst`
    to_stage: int  # the stage that waits for the op's result, on this rank (the V turn) or another; -1: none

    @property
    def recv_kind(self) -> str:
        """Message kind of what the op receives: F (an activation) or B (a gradient)."""
        return RESULT_KINDS[self.need % 3]

    @property
    def send_kind(self) -> str:
        return RESULT_KINDS[self.out % 3]


class RankRules(NamedTuple):
    """One rank's rules: `by_op[(kind, chunk)]`, and the same rules as a list in slot order."""

    by_op: dict
    slots: tuple


RuleTable = tuple[RankRules, ...]


@lru_cache(maxsize=64)
def rule_table(pp: int, chunks: int, placement: str) -> RuleTable:
    """Per rank, the `Rule` of every (kind, chunk), from the dependency rule and the placement."""
    n = pp * chunks
    table = []
    for r in range(pp):
        slots = []
        for c in range(chunks):
            s = stage_of(placement, pp, r, c)
            for kind in COMPUTE_KINDS:
                slots.append(_rule(len(slots), kind, c, s, n, r, placement, pp))
        table.append(RankRules({(rule.kind, rule.chunk): rule for rule in slots}, tuple(slots)))
    return tuple(table)


def _rule(slot: int, kind: str, chunk: int, stage: int, n: int, rank: int, placement: str, pp: int) -> Rule:
    need = input_of(kind, stage, n)
    need_off = src = recv_from = -1
    if need is not None:
        src = need[1]
        need_off = src * 3 + RESULT_KINDS.index(need[0])
        owner = owner_of(placement, pp, src)[0]
        recv_from = owner if owner != rank else -1
    outs = [stage * 3 + RESULT_KINDS.index(k) for k in outputs_of(kind)]
    consumer = consumer_stage(outputs_of(kind)[0], stage, n)
    dst = send_to = -1
    if consumer is not None:
        owner = owner_of(placement, pp, consumer)[0]
        if owner != rank:
            dst, send_to = consumer, owner
    return Rule(slot, kind, chunk, stage, need_off, src, recv_from, outs[0], outs[1] if len(outs) > 1 else -1,
                dst, send_to, -1 if consumer is None else consumer)


@dataclass(frozen=True)
class Compiled:
    """A schedule's ops as rows: `rules[r][i]` and `mbs[r][i]` describe `schedule.ranks[r][i]`."""

    schedule: Schedule
    rules: tuple[list[Rule], ...]
    mbs: tuple[list[int], ...]
    table: RuleTable

    @property
    def stride(self) -> int:
        return 3 * self.schedule.num_stages


def compile_schedule(schedule: Schedule) -> Compiled:
    """Check the schedule's ops and build its rows (once per schedule object: `_ROWS`).

    Raises ScheduleError naming the first op, in rank and op order, that is not
    a compute op of a known kind with a microbatch and a chunk in range; a
    schedule with more op lists than ranks; a placement that cannot hold its
    chunks. A schedule with fewer op lists than ranks runs nothing on the others."""
    table = schedule_rule_table(schedule)
    rows = _ROWS.get(schedule)
    if rows is None:
        rows = _ROWS.put(schedule, _compile_rows(schedule, table))
    return Compiled(schedule, rows[0], rows[1], table)


def schedule_rule_table(schedule: Schedule) -> RuleTable:
    """The rule table of the schedule's layout; raises ScheduleError for a placement that
    cannot hold its chunks."""
    schedule.stage_table  # noqa: B018 (raises for a placement that cannot hold the chunks)
    return rule_table(schedule.pp, schedule.chunks_per_rank, schedule.placement)


def _compile_rows(schedule: Schedule, table: RuleTable) -> tuple[tuple[list[Rule], ...], tuple[list[int], ...]]:
    pp, m, chunks = schedule.pp, schedule.microbatches, schedule.chunks_per_rank
    if len(schedule.ranks) > pp:
        raise ScheduleError(f"schedule {schedule.name!r} has {len(schedule.ranks)} op lists for {pp} pipeline ranks")
    rules, mbs = [], []
    for r in range(pp):
        ops = schedule.ranks[r] if r < len(schedule.ranks) else ()
        row_rules, row_mbs = op_rows(r, ops, table[r].by_op, m, chunks)
        rules.append(row_rules)
        mbs.append(row_mbs)
    return tuple(rules), tuple(mbs)


class _RowsBySchedule:
    """The compiled rows of each live schedule, keyed by the schedule object itself.

    The simulator, the completeness check and the lowering each compile the
    schedule they are given; validating one compiles it once. A schedule's
    fields are frozen, so its rows never go stale; a copy (`dataclasses.replace`,
    `with_ranks`) is another object and is compiled afresh. An entry refers to its
    schedule weakly and goes when the schedule does (the rows do not refer back)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, tuple]] = {}

    def get(self, schedule: Schedule) -> "tuple | None":
        entry = self._entries.get(id(schedule))
        if entry is None or entry[0]() is not schedule:
            return None
        return entry[1]

    def put(self, schedule: Schedule, rows: tuple) -> tuple:
        key = id(schedule)
        self._entries[key] = (weakref.ref(schedule, partial(self._drop, key)), rows)
        return rows

    def _drop(self, key: int, ref: weakref.ref) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            del self._entries[key]


_ROWS = _RowsBySchedule()


_KIND_CHUNK, _MB, _CHUNK = itemgetter(0, 2), attrgetter("mb"), attrgetter("chunk")


def op_rows(rank: int, ops: Sequence, rules: dict, m: int, chunks: int) -> tuple[list[Rule], list[int]]:
    """The rule and the microbatch of every op of one rank (module doc), checking each op.

    The planner compiles every candidate order it scores (the simulator reads these rows),
    so the common case, plain ops with int fields, is checked and looked up in whole-list
    passes; anything else goes op by op (`_checked_rows`), which names the first bad op."""
    if _plain_ops(ops):
        row = list(map(rules.get, map(_KIND_CHUNK, ops)))  # None for an unknown kind or chunk
        mbs = list(map(_MB, ops))
        if None not in row and (not mbs or (min(mbs) >= 0 and max(mbs) < m)):
            return row, mbs
    return _checked_rows(rank, ops, rules, m, chunks)


def _plain_ops(ops: Sequence) -> bool:
    """Every op is an `Op` whose microbatch and chunk are of type int (not bool, not a
    numpy integer: those take the op-by-op path)."""
    return ({Op}.issuperset(map(type, ops)) and {int}.issuperset(map(type, map(_MB, ops)))
            and {int}.issuperset(map(type, map(_CHUNK, ops))))


def _checked_rows(rank: int, ops: Sequence, rules: dict, m: int, chunks: int) -> tuple[list[Rule], list[int]]:
    """`op_rows` op by op: names the first bad op; accepts any integer type for mb and chunk."""
    row, mbs = [], []
    for op in ops:
        if not isinstance(op, Op) or op.kind not in COMPUTE_KINDS:
            raise ScheduleError(f"rank {rank} has {op!r}, which is not a compute op (kinds {', '.join(COMPUTE_KINDS)})")
        mb, chunk = _integer(op.mb), _integer(op.chunk)
        if mb is None or not 0 <= mb < m:
            raise ScheduleError(f"rank {rank} op {op} names microbatch {op.mb}; the schedule has microbatches 0..{m - 1}")
        if chunk is None or not 0 <= chunk < chunks:
            raise ScheduleError(f"rank {rank} op {op} names chunk {op.chunk}; ranks hold chunks 0..{chunks - 1}")
        row.append(rules[(op.kind, chunk)])
        mbs.append(mb)
    return row, mbs


def _integer(value) -> int | None:
    try:
        return operator.index(value)
    except TypeError:
        return None
