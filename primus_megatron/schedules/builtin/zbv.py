"""ZB-V: V-shaped zero-bubble schedule at 1F1B's activation memory (Qi et al., 2024, sec. 6)."""
from __future__ import annotations

from ..costs import StageCosts
from ..ir import B, F, V, W, Op
from ..registry import register
from ..pairing import paired_order
from ..variants import best_of, objective, score
from ..w_balance import balance_w


@register("zbv", order=60, placement=V, chunks=2, memory="1x", uses_costs=True,
          description="V-shape zero bubble, 2 chunks per rank, 1F1B memory",
          splits_backward=True)
def zbv(pp: int, microbatches: int, *, costs: StageCosts, post_validation: bool = False, **_) -> list[list[Op]]:
    # The paper's fixed pattern, with its W re-placed from the costs where that
    # is faster at no more memory (unequal F/B/W or a p2p latency leave gaps);
    # with an expert-parallel all-to-all in the costs, its F-then-B neighbours
    # run as overlapped pairs where that is faster (`pairing`).
    if costs.one_slot:
        return zbv_pattern(pp, microbatches)
    order = best_of([("pattern", lambda: zbv_pattern(pp, microbatches))], pp=pp, m=microbatches, chunks=2,
                    placement=V, sc=costs, memory_limit=None, what="zbv", fill=True, post_validation=post_validation)
    if post_validation:
        order = _balanced(pp, microbatches, costs, order)
    return paired_order("zbv", order, pp=pp, m=microbatches, chunks=2, placement=V, sc=costs)


def _balanced(pp: int, m: int, sc: StageCosts, order: list[list[Op]]) -> list[list[Op]]:
    """Under post-validation (no optimizer barrier): `order`, or its W re-placed to balance the
    ranks' idle time (`w_balance`) where that gives a shorter longest span at no more memory."""
    rank = objective(True)
    mine = score(pp, m, 2, V, sc, order)
    other = balance_w(pp, m, 2, V, sc, order, mine[2])
    return other.ranks if rank(other.score) < rank(mine) else order


def zbv_pattern(pp: int, microbatches: int) -> list[list[Op]]:
    """The fixed ZB-V order: phases of the V, each with its op pattern."""
    # The phases need 2p-1 microbatches to fill the V; with fewer, build for
    # 2p-1 and drop the extra ones (dropping microbatches keeps an order valid).
    n = max(microbatches, 2 * pp - 1)
    ranks = []
    for r in range(pp):
        ops: list[Op] = []
        nf, nb, nw = [0, 0], [0, 0], [0, 0]

        def f(c: int) -> None:
            ops.append(Op(F, nf[c], c))
            nf[c] += 1

        def b(c: int, w: bool) -> None:
            ops.append(Op(B, nb[c], c))
            nb[c] += 1
            if w:
                ops.append(Op(W, nw[c], c))
                nw[c] += 1

        for _ in range(2 * (pp - r) - 1):   # warm-up 1: F.0 ...           (fill the down arm)
            f(0)
        for _ in range(r):                  # warm-up 2: F.1 F.0 ...       (first microbatches turn)
            f(1)
            f(0)
        for _ in range(pp - r):             # warm-up 3: F.1 B.1 W.1 ...   (chunk 1 reaches steady state)
            f(1)
            b(1, True)
        while nf[1] < nf[0] or nf[0] < n:   # steady:    F.0 B.0 W.0 F.1 B.1 W.1
            if nf[0] < n:
                f(0)
            b(0, True)
            f(1)
            b(1, True)
        for _ in range(r):                  # cool-down 1: B.0 B.1        (W deferred to fill the tail)
            b(0, False)
            b(1, False)
        for _ in range(pp - r):             # cool-down 2: B.0 W.0
            b(0, False)
            ops.append(Op(W, nw[0], 0))
            nw[0] += 1
        ops += [Op(W, i, 1) for i in range(nw[1], n)]   # flush: W.1 ... W.0 ...
        ops += [Op(W, i, 0) for i in range(nw[0], n)]
        ranks.append([op for op in ops if op.mb < microbatches])
    return ranks
