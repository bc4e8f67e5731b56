"""V-Half: V-shape schedule at about half of 1F1B's activation memory (ceil(p/2)+1 microbatches' worth)."""
from __future__ import annotations

from ..blocks import v_half_block
from ..ir import V, Op
from ..registry import register
from ..v_family import v_family


@register("v-half", order=70, placement=V, chunks=2, memory="ceil(p/2)+1", uses_costs=True,
          description="V-shape, about half memory (0.62x of 1F1B's at p=8, 0.53x at p=32), bubble ~1/2 of 1F1B's",
          splits_backward=True)
def v_half(pp: int, microbatches: int, *, costs, memory_limit=None, post_validation: bool = False,
           **_) -> list[list[Op]]:
    return v_family(pp, microbatches, v_half_block(pp), costs, memory_limit, "v-half", post_validation=post_validation)
