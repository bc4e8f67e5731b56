"""1F1B: the classic non-interleaved schedule (Megatron's default)."""
from __future__ import annotations

from ..ir import BW, F, Op
from ..registry import register


@register("1f1b", order=10, memory="1x", description="one-forward-one-backward, full backward (Megatron's default)",
          splits_backward=False)
def one_f_one_b(pp: int, microbatches: int, **_) -> list[list[Op]]:
    m = microbatches
    ranks = []
    for r in range(pp):
        warmup = min(pp - 1 - r, m)
        ops = [Op(F, i) for i in range(warmup)]                    # warm-up:   F F F
        for i in range(m - warmup):                                 # steady:    F BW F BW
            ops += [Op(F, warmup + i), Op(BW, i)]
        ops += [Op(BW, i) for i in range(m - warmup, m)]            # cool-down: BW BW BW
        ranks.append(ops)
    return ranks
