"""Packing one replica's samples into microbatches of at most `cap` tokens.

  next_fit              arrival order; a sample that does not fit closes the microbatch (the
                        plain baseline: what a sequential packer does)
  first_fit_decreasing  heaviest first by cost, each into the first microbatch with room (fewer,
                        fuller microbatches, and the heavy ones first, as LB-Mini does)

A microbatch is a tuple of global sample indices. A sample longer than cap is refused: the caller
clips lengths to the sequence length.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from .cost import SampleCost

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
                         cost: SampleCost) -> Microbatches:
    """Heaviest sample first (ties by index), each into the earliest microbatch with room."""
    _check(indices, lengths, cap)
    out: List[List[int]] = []
    used: List[int] = []
    for i in sorted(indices, key=lambda i: (-cost.of(lengths[i]), i)):
        k = next((k for k, u in enumerate(used) if u + lengths[i] <= cap), len(out))
        if k == len(out):
            out.append([])
            used.append(0)
        out[k].append(i)
        used[k] += lengths[i]
    return tuple(tuple(mb) for mb in out)
