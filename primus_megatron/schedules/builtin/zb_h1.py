"""ZB-H1: zero-bubble schedule at 1F1B's activation memory (Qi et al., 2024)."""
from __future__ import annotations

from ..ir import B, F, W, Op
from ..registry import register


@register("zb-h1", order=30, aliases=("zerobubble",), memory="1x",
          description="handcrafted zero bubble at 1F1B memory: W delayed to fill the cool-down")
def zb_h1(pp: int, microbatches: int, **_) -> list[list[Op]]:
    m = microbatches
    ranks = []
    for r in range(pp):
        warmup = min(pp - r, m)
        delay = r  # rank r may hold r more activations than 1F1B's p - r
        ops = [Op(F, i) for i in range(warmup)]                      # warm-up: F F F
        for k in range(m):                                            # steady:  B W F
            ops.append(Op(B, k))
            if k >= delay:
                ops.append(Op(W, k - delay))
            if k + warmup < m:
                ops.append(Op(F, k + warmup))
        ops += [Op(W, k) for k in range(max(0, m - delay), m)]        # flush:   W W W
        ranks.append(ops)
    return ranks
