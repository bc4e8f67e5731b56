"""ZB-H2: zero-bubble schedule at about twice 1F1B's activation memory."""
from __future__ import annotations

from ..ir import B, F, W, Op
from ..registry import register


@register("zb-h2", order=40, memory="2x",
          description="handcrafted zero bubble at ~2x memory: extra warm-up F, W shifted into a parallelogram")
def zb_h2(pp: int, microbatches: int, **_) -> list[list[Op]]:
    m = microbatches
    ranks = []
    for r in range(pp):
        # Rank r's first gradient arrives 2(p-1-r)+1 op slots after its first F:
        # fill them all with F so no rank idles before its first B.
        warmup = min(2 * (pp - r) - 1, m)
        delay = 2 * r  # W trails B so every rank ends its span busy (parallelogram)
        ops = [Op(F, i) for i in range(warmup)]                       # warm-up: F x (2(p-r)-1)
        for k in range(m):                                            # steady:  B W F
            ops.append(Op(B, k))
            if k >= delay:
                ops.append(Op(W, k - delay))
            if k + warmup < m:
                ops.append(Op(F, k + warmup))
        ops += [Op(W, k) for k in range(max(0, m - delay), m)]        # flush:   W W W
        ranks.append(ops)
    return ranks
