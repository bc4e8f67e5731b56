"""ZB-H2: zero-bubble schedule at about twice 1F1B's activation memory."""
from __future__ import annotations

from ..ir import Op
from ..registry import register
from .zb_h1 import delayed_w_order


@register("zb-h2", order=40, memory="2x",
          description="handcrafted zero bubble at ~2x memory: extra warm-up F, W shifted into a parallelogram",
          splits_backward=True)
def zb_h2(pp: int, microbatches: int, **_) -> list[list[Op]]:
    # Rank r's first gradient arrives 2(p-1-r)+1 op slots after its first F: fill
    # them all with F so no rank idles before its first B; W trails B by 2r so
    # every rank ends its span busy (a parallelogram).
    return delayed_w_order(pp, microbatches, warmup=lambda r: 2 * (pp - r) - 1, delay=lambda r: 2 * r)
