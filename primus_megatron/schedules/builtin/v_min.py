"""V-Min: V-shape schedule at about 1/3 of 1F1B's activation memory."""
from __future__ import annotations

from ..blocks import compact, repeat, slot_order, slot_policy, v_min_block
from ..ir import V, Op
from ..listsched import list_schedule_scored
from ..registry import register
from ..variants import best_of


@register("v-min", order=80, placement=V, chunks=2, memory="~1/3x",
          description="V-shape, minimal memory (~1/3 of 1F1B), bubble ~2/3 of 1F1B's")
def v_min(pp: int, microbatches: int, *, costs, memory_limit=None, **_) -> list[list[Op]]:
    # V-Min's block has no slack: letting B/W into gaps never helped (measured
    # over pp 4..32, comm 0 and 0.1), so only the squeezed orders are tried.
    return v_family(pp, microbatches, v_min_block(pp), costs, memory_limit, "v-min", gaps=False)


def v_family(pp: int, m: int, block, sc, memory_limit, what: str, *, gaps: bool = True) -> list[list[Op]]:
    """Shared by the block-based V schedules: the squeezed block, its compacted
    form and, with `gaps`, one of them list-scheduled with B/W allowed into gaps
    (the compacted block without communication cost, the plain one with it:
    compaction packs slots assuming messages are free)."""
    slots = repeat(pp, m, block)
    packed = compact(pp, slots, sc)
    candidates = [("squeezed", lambda: slot_order(pp, slots)), ("compacted", lambda: slot_order(pp, packed))]
    if gaps:
        base = packed if max(sc.comm) == 0 else slots
        candidates.append(("list-scheduled", lambda: list_schedule_scored(pp, m, 2, V, sc, None, slot_policy(base))))
    return best_of(candidates, pp=pp, m=m, chunks=2, placement=V, sc=sc, memory_limit=memory_limit, what=what)
