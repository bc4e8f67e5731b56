"""Packing one replica's samples into microbatches of at most `cap` tokens.

  next_fit              arrival order; a sample that does not fit closes the microbatch (the
                        plain baseline: what a sequential packer does)
  first_fit_decreasing  heaviest first by cost (a sample's own, or the `weights` given), each into the first microbatch with room (fewer,
                        fuller microbatches, and the heavy ones first, as LB-Mini does); with a
                        floor on the count (a pipeline's stages: fewer microbatches than stages
                        leave stages idle in the fill and the drain), where it packs fewer, the
                        floor's count of microbatches of even cost instead (heaviest first into
                        the cheapest one with room)

A microbatch is a tuple of global sample indices. A sample longer than cap is refused: the caller
clips lengths to the sequence length.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .cost import SampleCost
from .split import sample_costs

Microbatches = Tuple[Tuple[int, ...], ...]


def _check(indices: Sequence[int], lengths: Sequence[int], cap: int) -> None:
    if cap < 1:
        raise ValueError(f"a microbatch cap must be at least 1 token, got {cap}")
    for i in indices:
        if lengths[i] > cap:
            raise ValueError(f"sample {i} has {lengths[i]} tokens, more than the microbatch cap of {cap}")


def next_fit(indices: Sequence[int], lengths: Sequence[int], cap: int) -> Microbatches:
    """Samples in the given order; a new microbatch whenever the next one does not fit."""
    _check(indices, lengths, cap)
    out: List[List[int]] = []
    used = cap  # forces a first microbatch
    for i in indices:
        if used + lengths[i] > cap:
            out.append([])
            used = 0
        out[-1].append(i)
        used += lengths[i]
    return tuple(tuple(mb) for mb in out)


def first_fit_decreasing(indices: Sequence[int], lengths: Sequence[int], cap: int,
                         cost: SampleCost, *, at_least: int = 1,
                         weights: Optional[Sequence[float]] = None) -> Microbatches:
    """Heaviest sample first (ties by index), each into the earliest microbatch with room; where that
    packs fewer than `at_least` microbatches (and there are that many samples), `at_least` microbatches
    of even cost: heaviest first into the cheapest one with room (a new one where none has)."""
    _check(indices, lengths, cap)
    weight = sample_costs(lengths, cost, weights)
    heaviest_first = sorted(indices, key=lambda i: (-weight[i], i))
    out: List[List[int]] = []
    used: List[int] = []
    for i in heaviest_first:
        k = next((k for k, u in enumerate(used) if u + lengths[i] <= cap), len(out))
        if k == len(out):
            out.append([])
            used.append(0)
        out[k].append(i)
        used[k] += lengths[i]
    floor = min(at_least, len(heaviest_first))
    if len(out) >= floor:
        return tuple(tuple(mb) for mb in out)
    out, used, costs = [[] for _ in range(floor)], [0] * floor, [0.0] * floor
    for i in heaviest_first:  # the first `floor` samples open one microbatch each (an empty one is cheapest)
        room = [k for k in range(len(out)) if used[k] + lengths[i] <= cap]
        if room:
            k = min(room, key=lambda k: (costs[k], k))
        else:
            k = len(out)
            out.append([])
            used.append(0)
            costs.append(0.0)
        out[k].append(i)
        used[k] += lengths[i]
        costs[k] += weight[i]
    return tuple(tuple(mb) for mb in out)
