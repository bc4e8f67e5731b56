"""DualPipeV: DeepSeek's V-shaped DualPipe (DeepSeek-V3 report, sec. 3.2.1; its "cut-in-half" V
variant), whose steady state runs the forward of one microbatch and the full backward of another as
one overlapped op, so that each one's expert-parallel all-to-all hides under the other's compute.

Facts from DeepSeek's description and torch.distributed.pipelining's `ScheduleDualPipeV` (torch
2.13; no code taken): V placement (chunk 0 at stage r, chunk 1 at stage 2p - 1 - r), at least 2p
microbatches (fewer: built for 2p, the rest dropped), and eight phases per rank whose lengths depend on the rank; backward ops run whole
(BW) except where the phases use the zero-bubble split (B now, W later), and each W pops the oldest
deferred weight gradient of the rank, whichever chunk it belongs to. The last rank's first
steady-state pair runs as two ops (it has nothing to hide behind yet).

With an all-to-all in the costs (`--cost-a2a`; not under one-slot costs, the cost model the pattern is
built for), the phases are also tried with every pair's backward split (F&B, its W deferred): the pair
hides the same all-to-all when B's compute covers it, ends sooner, and leaves its W to fill the gaps a
pair's wait opens (`w_fill`, which places W around pairs). The faster order within the memory limit
(`--pipeline-memory-limit`; by default the pattern's own peak, about 1F1B's) is kept.
"""
from __future__ import annotations

from typing import Optional

from ..costs import StageCosts
from ..ir import B, BW, F, V, W, Op, Pair
from ..registry import register
from ..variants import best_of, score
from ..w_fill import fill_w


@register("dualpipev", order=65, placement=V, chunks=2, memory="~1x",
          description="DeepSeek's DualPipeV: V shape, 2 chunks per rank, overlapped F&B pairs in the steady state",
          splits_backward=True)
def dualpipev(pp: int, microbatches: int, *, costs: StageCosts, memory_limit: Optional[float] = None,
              post_validation: bool = False, **_) -> list[list]:
    # The phases need 2p microbatches; with fewer, build for 2p and drop the extra ones (dropping
    # microbatches keeps an order valid; a pair that loses a half is its other half alone).
    n = max(microbatches, 2 * pp)

    def phases(split_pairs: bool) -> list[list]:
        return [_keep(_rank(pp, n, r, split_pairs), microbatches) for r in range(pp)]

    pattern = phases(False)
    if costs.one_slot or not any(costs.a2a or ()):
        return pattern
    split = phases(True)  # read, never changed, by the candidates below
    shape = dict(pp=pp, m=microbatches, chunks=2, placement=V, sc=costs)
    limit = memory_limit if memory_limit is not None else score(**shape, ranks=pattern)[2]
    return best_of([("pattern", lambda: pattern), ("split pairs", lambda: split),
                    ("split pairs, W in half-W gaps", lambda: fill_w(**shape, ranks=split, memory_limit=limit,
                                                                     fit=0.5))],
                   **shape, memory_limit=limit, what="dualpipev", fill=True, post_validation=post_validation)


def _keep(items: list, m: int) -> list:
    out: list = []
    for item in items:
        if type(item) is Pair:
            kept = [op for op in item if op.mb < m]
            out.extend([item] if len(kept) == 2 else kept)
        elif item.mb < m:
            out.append(item)
    return out


class _Ops:
    """One rank's list under construction: the next microbatch of each (op, chunk) and the W queue."""

    def __init__(self) -> None:
        self.items: list = []
        self.next = {(F, 0): 0, (F, 1): 0, (B, 0): 0, (B, 1): 0}
        self.deferred: list[Op] = []  # B ops whose W is still to run, oldest first

    def take(self, kind: str, chunk: int) -> Op:
        mb = self.next[(kind, chunk)]
        self.next[(kind, chunk)] = mb + 1
        return Op(kind, mb, chunk)

    def f(self, chunk: int) -> Op:
        return self.take(F, chunk)

    def b(self, chunk: int, split: bool) -> Op:
        """The chunk's next backward: B (its W deferred) when `split`, else BW."""
        op = self.take(B, chunk)
        if split:
            self.deferred.append(op)
            return op
        return Op(BW, op.mb, chunk)

    def w(self) -> None:
        if self.deferred:
            done = self.deferred.pop(0)
            self.items.append(Op(W, done.mb, done.chunk))

    def add(self, *items) -> None:
        self.items.extend(items)


def _rank(pp: int, m: int, r: int, split_pairs: bool = False) -> list:
    """Rank r's phases; `split_pairs`: the steady state's backward ops split, each W right after its op
    (where `w_fill` may move it)."""
    o = _Ops()

    def steady_b(chunk: int) -> Op:
        return o.b(chunk, split_pairs)

    def steady_w() -> None:
        if split_pairs:
            o.w()

    for _ in range(2 * (pp - r - 1)):            # 1. F0 ...                  (fill the down arm)
        o.add(o.f(0))
    for _ in range(r + 1):                       # 2. F0 F1 ...               (the first microbatches turn)
        o.add(o.f(0), o.f(1))
    for _ in range(pp - r - 1):                  # 3. B1 W1 F1 ...            (zero-bubble split)
        o.add(o.b(1, True))
        o.w()
        o.add(o.f(1))
    for i in range(m - 2 * pp + r + 1):          # 4. F0&BW1 F1&BW0 ...       (steady state: overlapped pairs;
        if i == 0 and r == pp - 1:               #    split: F0&B1 W F1&B0 W); the last rank's first: nothing
            o.add(o.f(0), steady_b(1))           #    to hide behind
        else:
            o.add(Pair(o.f(0), steady_b(1)))
        steady_w()
        o.add(Pair(o.f(1), steady_b(0)))
        steady_w()
    for _ in range(pp - r - 1):                  # 5. BW1 F1&BW0 ...          (split: B1 W F1&B0 W)
        o.add(steady_b(1))
        steady_w()
        o.add(Pair(o.f(1), steady_b(0)))
        steady_w()
    split = split_pairs
    for i in range(r + 1):                       # 6. B1 B0 ...               (split from the middle on;
                                                 #    split pairs: all split, for w_fill to place their W)
        split = split or (i == (r + 1) // 2 and r % 2 == 1)
        o.add(o.b(1, split))
        split = split or (i == (r + 1) // 2 and r % 2 == 0)
        o.add(o.b(0, split))
    for _ in range(pp - r - 1):                  # 7. W B0 ...
        o.w()
        o.add(o.b(0, split))
    while o.deferred:                            # 8. W ...                   (drain the deferred weights)
        o.w()
    return o.items
