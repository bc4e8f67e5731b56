"""V-Min: V-shape schedule at about 1/3 of 1F1B's activation memory."""
from __future__ import annotations

from ..blocks import compact, repeat, slot_order, slot_policy, v_min_block
from ..ir import V, Op
from ..listsched import list_schedule
from ..registry import register
from ..variants import best_of


@register("v-min", order=80, placement=V, chunks=2, memory="~1/3x",
          description="V-shape, minimal memory (~1/3 of 1F1B), bubble ~2/3 of 1F1B's")
def v_min(pp: int, microbatches: int, *, costs, memory_limit=None, **_) -> list[list[Op]]:
    return v_family(pp, microbatches, v_min_block(pp), costs, memory_limit, "v-min")


def v_family(pp: int, m: int, block, sc, memory_limit, what: str) -> list[list[Op]]:
    """Shared by the block-based V schedules: the squeezed block, its compacted
    form, and both list-scheduled with B/W allowed into gaps."""
    slots = repeat(pp, m, block)
    packed = compact(pp, slots, sc)
    return best_of([
        ("squeezed", lambda: slot_order(pp, slots)),
        ("compacted", lambda: slot_order(pp, packed)),
        ("squeezed+gaps", lambda: list_schedule(pp, m, 2, V, sc, None, slot_policy(slots))),
        ("compacted+gaps", lambda: list_schedule(pp, m, 2, V, sc, None, slot_policy(packed))),
    ], pp=pp, m=m, chunks=2, placement=V, sc=sc, memory_limit=memory_limit, what=what)
