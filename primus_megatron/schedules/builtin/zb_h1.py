"""ZB-H1: zero-bubble schedule at 1F1B's activation memory (Qi et al., 2024)."""
from __future__ import annotations

from typing import Callable

from ..ir import B, F, W, Op
from ..registry import register


def delayed_w_order(pp: int, m: int, warmup: Callable[[int], int], delay: Callable[[int], int]) -> list[list[Op]]:
    """1F1B's shape with the backward split: rank r runs warmup(r) F, then
    B, W (of the microbatch delay(r) earlier), F; the delayed W close the step.
    ZB-H1 and ZB-H2 differ only in the two counts."""
    ranks = []
    for r in range(pp):
        first, lag = min(warmup(r), m), delay(r)
        ops = [Op(F, i) for i in range(first)]                        # warm-up: F F F
        for k in range(m):                                             # steady:  B W F
            ops.append(Op(B, k))
            if k >= lag:
                ops.append(Op(W, k - lag))
            if k + first < m:
                ops.append(Op(F, k + first))
        ops += [Op(W, k) for k in range(max(0, m - lag), m)]           # flush:   W W W
        ranks.append(ops)
    return ranks


@register("zb-h1", order=30, aliases=("zerobubble",), memory="1x",
          description="handcrafted zero bubble at 1F1B memory: W delayed to fill the cool-down",
          splits_backward=True)
def zb_h1(pp: int, microbatches: int, **_) -> list[list[Op]]:
    # 1F1B's warm-up; rank r may hold r more activations than 1F1B's p - r
    return delayed_w_order(pp, microbatches, warmup=lambda r: pp - r, delay=lambda r: r)
