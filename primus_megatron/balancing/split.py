"""Splitting a global batch (one length per sample) over `dp` data-parallel replicas.

Each split returns, per replica, a tuple of global sample indices (ascending). Three splits:

  contiguous      megatron's plain split: replica r takes samples [r*G/dp, (r+1)*G/dp) in order
  sorted          samples by cost, heaviest first, dealt in snake order (0..dp-1, dp-1..0, ...)
  karmarkar_karp  multiway largest differencing on the costs, then a refinement that moves or
                  swaps single samples between the heaviest and the lightest replica while that
                  lowers the heavier of the two

Like ODC's LB-Mini, `sorted` and `karmarkar_karp` do not hold replicas to equal sample counts:
each replica runs its own number of microbatches, so only the work needs to match. Every replica
still gets at least one sample (one microbatch's worth), so the batch must have G >= dp samples.
Ties are broken by sample index, so a split is a function of its inputs.
"""
from __future__ import annotations

import heapq
import math
from typing import List, Optional, Sequence, Tuple

from .cost import SampleCost

Split = Tuple[Tuple[int, ...], ...]


def _check(lengths: Sequence[int], dp: int) -> None:
    if dp < 1:
        raise ValueError(f"a batch splits over dp >= 1 replicas, got dp={dp}")
    if len(lengths) < dp:
        raise ValueError(f"a global batch of {len(lengths)} samples cannot give each of {dp} replicas a sample")


def contiguous(lengths: Sequence[int], dp: int) -> Split:
    """megatron's split: equal counts, in arrival order."""
    _check(lengths, dp)
    g = len(lengths)
    if g % dp:
        raise ValueError(f"the contiguous split needs the global batch ({g} samples) to divide by dp={dp}")
    share = g // dp
    return tuple(tuple(range(r * share, (r + 1) * share)) for r in range(dp))


def sample_costs(lengths: Sequence[int], cost: SampleCost, weights: Optional[Sequence[float]] = None) -> List[float]:
    """Each sample's cost: `weights` where given (a sample of several documents costs the sum of theirs,
    attention staying within a document), else cost.of(its length)."""
    if weights is None:
        return [cost.of(s) for s in lengths]
    if len(weights) != len(lengths):
        raise ValueError(f"{len(weights)} sample costs for {len(lengths)} samples")
    return [float(w) for w in weights]


def snake(lengths: Sequence[int], dp: int, cost: SampleCost, *, weights: Optional[Sequence[float]] = None) -> Split:
    """Heaviest first, dealt 0..dp-1 then dp-1..0: each round's heavy pick goes to last round's light one."""
    _check(lengths, dp)
    costs = sample_costs(lengths, cost, weights)
    out: List[List[int]] = [[] for _ in range(dp)]
    for k, i in enumerate(sorted(range(len(lengths)), key=lambda i: (-costs[i], i))):
        turn, pos = divmod(k, dp)
        out[pos if turn % 2 == 0 else dp - 1 - pos].append(i)
    return tuple(tuple(sorted(r)) for r in out)


def _differencing(costs: Sequence[float], dp: int) -> List[List[int]]:
    """Multiway largest differencing: merge the two partitions whose spread (max - min) is largest,
    the first's heaviest subset with the second's lightest, until one partition is left."""
    # a partition: dp subsets, each (load, indices), heaviest first; heap key: (-spread, serial)
    heap = []
    for i, c in enumerate(costs):
        heap.append((-c, i, [(c, (i,))] + [(0.0, ())] * (dp - 1)))
    heapq.heapify(heap)
    serial = len(costs)
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        merged = [(x[0] + y[0], x[1] + y[1]) for x, y in zip(first, reversed(second))]
        merged.sort(key=lambda sub: (-sub[0], sub[1]))
        heapq.heappush(heap, (merged[-1][0] - merged[0][0], serial, merged))
        serial += 1
    return [list(sub[1]) for sub in heap[0][2]]


def _best_move(heavy: List[int], light: List[int], costs: Sequence[float], gap: float):
    """The single move (j is None) or swap that brings the pair's loads closest together, if any
    lowers the heavier: a shift d with 0 < d < gap does, and d nearest gap/2 lowers it most."""
    best = None
    for i in heavy:
        for j in [None] + light:
            if j is None and len(heavy) < 2:
                continue  # a replica keeps at least one sample
            d = costs[i] - (0.0 if j is None else costs[j])
            if 0 < d < gap * (1 - 1e-12):
                key = (abs(gap - 2 * d), i, -1 if j is None else j)
                if best is None or key < best[0]:
                    best = (key, i, j)
    return best


def refine(split: List[List[int]], costs: Sequence[float]) -> None:
    """Moves or swaps single samples between the heaviest and the lightest replica while that lowers
    the heavier of the two (in place). Each step lowers the sorted load vector, so it ends."""
    while True:
        loads = [math.fsum(costs[i] for i in r) for r in split]
        h = min(range(len(split)), key=lambda r: (-loads[r], r))
        lo = min(range(len(split)), key=lambda r: (loads[r], r))
        best = _best_move(split[h], split[lo], costs, loads[h] - loads[lo]) if h != lo else None
        if best is None:
            return
        _, i, j = best
        split[h].remove(i)
        split[lo].append(i)
        if j is not None:
            split[lo].remove(j)
            split[h].append(j)


def _fill_empty(split: List[List[int]], costs: Sequence[float]) -> None:
    """Gives an empty replica the cheapest sample of a replica holding several: the max cannot rise,
    since that sample costs no more than the replica it leaves."""
    for r in range(len(split)):
        if not split[r]:
            donors = [i for d in split if len(d) > 1 for i in d]
            i = min(donors, key=lambda i: (costs[i], i))
            next(d for d in split if i in d).remove(i)
            split[r].append(i)


def karmarkar_karp(lengths: Sequence[int], dp: int, cost: SampleCost, *, refined: bool = True,
                   weights: Optional[Sequence[float]] = None) -> Split:
    """LB-Mini's split: largest differencing on sample costs, then single-sample refinement."""
    _check(lengths, dp)
    costs = sample_costs(lengths, cost, weights)
    split = _differencing(costs, dp)
    _fill_empty(split, costs)
    if refined:
        refine(split, costs)
    return tuple(tuple(sorted(r)) for r in split)
