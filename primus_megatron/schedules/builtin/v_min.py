"""V-Min: V-shape schedule at ceil(p/3)+1 microbatches' activation memory (1/3 of 1F1B's as p grows)."""
from __future__ import annotations

from ..blocks import v_min_block
from ..ir import V, Op
from ..registry import register
from ..v_family import v_family


@register("v-min", order=80, placement=V, chunks=2, memory="ceil(p/3)+1", uses_costs=True,
          description="V-shape, minimal memory (0.50x of 1F1B's at p=8, 0.38x at p=16-32, 1/3 as p grows), "
                      "bubble ~2/3 of 1F1B's",
          splits_backward=True)
def v_min(pp: int, microbatches: int, *, costs, memory_limit=None, post_validation: bool = False,
          **_) -> list[list[Op]]:
    # V-Min's block has no slack for B or W to move into, so only the squeezed orders are tried.
    return v_family(pp, microbatches, v_min_block(pp), costs, memory_limit, "v-min", gaps=False,
                    post_validation=post_validation)
