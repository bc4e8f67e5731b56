"""A global batch's plan: which replica runs which samples, packed into which microbatches.

`plan_batch` is what `--pipeline-balance-data` chooses between:

  off      contiguous split + next_fit            (megatron's plain data path)
  sorted   snake split by cost + first_fit_decreasing
  lb-mini  karmarkar_karp + refinement + first_fit_decreasing   (ODC's LB-Mini)

both packing at least as many microbatches per replica as the pipeline has stages, where the
replica has that many samples (`min_microbatches`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from .cost import SampleCost
from .packing import first_fit_decreasing, next_fit
from .split import contiguous, karmarkar_karp, snake

MODES = ("off", "sorted", "lb-mini")


@dataclass(frozen=True)
class BatchPlan:
    """Per replica a tuple of microbatches, each a tuple of global sample indices into `lengths`."""

    lengths: Tuple[int, ...]
    cap: int
    replicas: Tuple[Tuple[Tuple[int, ...], ...], ...]

    def __post_init__(self) -> None:
        # a plan that drops, repeats or overfills a sample would train on the wrong data
        seen = sorted(i for r in self.replicas for mb in r for i in mb)
        if seen != list(range(len(self.lengths))):
            raise ValueError("a batch plan must hold every sample of the batch exactly once")
        for r, mbs in enumerate(self.replicas):
            if not mbs or not all(mbs):
                raise ValueError(f"replica {r} of the plan has no microbatch or an empty one")
            for mb in mbs:
                if sum(self.lengths[i] for i in mb) > self.cap:
                    raise ValueError(f"a microbatch of replica {r} holds more than the cap of {self.cap} tokens")

    @property
    def counts(self) -> Tuple[int, ...]:
        """Microbatches per replica."""
        return tuple(len(r) for r in self.replicas)

    def microbatch_costs(self, replica: int, cost: SampleCost) -> Tuple[float, ...]:
        return tuple(cost.of_microbatch(self.lengths[i] for i in mb) for mb in self.replicas[replica])

    def replica_costs(self, cost: SampleCost) -> Tuple[float, ...]:
        return tuple(sum(self.microbatch_costs(r, cost)) for r in range(len(self.replicas)))

    def factors(self, replica: int, cost: SampleCost) -> Tuple[float, ...]:
        """Each microbatch's cost over the plan's mean microbatch cost: what a simulator multiplies
        a replica's op times by (the plan's factors average 1, so a mean op time stays the same)."""
        mean = sum(self.replica_costs(cost)) / sum(self.counts)
        return tuple(c / mean for c in self.microbatch_costs(replica, cost))

    def fingerprint(self) -> str:
        """A short stable hash of the lengths, the cap and the assignment (not of the mode that made it)."""
        text = json.dumps([list(self.lengths), self.cap, [[list(mb) for mb in r] for r in self.replicas]],
                          separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_batch(lengths: Sequence[int], dp: int, cap: int, mode: str, cost: SampleCost, *,
               min_microbatches: int = 1, documents: Optional[Sequence[Sequence[int]]] = None) -> BatchPlan:
    """Splits the global batch over dp replicas and packs each replica's share under cap tokens;
    `sorted` and `lb-mini` pack at least `min_microbatches` per replica where it has that many samples
    (the pipeline's stages: `packing.first_fit_decreasing`). `documents`: each sample's document
    lengths, where a sample holds several that attend only within themselves (cu_seqlens): it then costs
    the sum of its documents' costs, not cost.of(its length)."""
    if mode not in MODES:
        raise ValueError(f"--pipeline-balance-data must be one of {', '.join(MODES)}, not {mode!r}")
    lengths = tuple(lengths)
    weights = None if documents is None else document_costs(lengths, documents, cost)
    if mode == "off":
        replicas = tuple(next_fit(r, lengths, cap) for r in contiguous(lengths, dp))
    else:
        split = (snake(lengths, dp, cost, weights=weights) if mode == "sorted"
                 else karmarkar_karp(lengths, dp, cost, weights=weights))
        replicas = tuple(first_fit_decreasing(r, lengths, cap, cost, at_least=min_microbatches, weights=weights)
                         for r in split)
    return BatchPlan(lengths, cap, replicas)


def document_costs(lengths: Sequence[int], documents: Sequence[Sequence[int]], cost: SampleCost) -> Tuple[float, ...]:
    """Each sample's cost as the sum of its documents' (their lengths must add up to the sample's)."""
    if len(documents) != len(lengths):
        raise ValueError(f"document lengths for {len(documents)} samples, but {len(lengths)} samples")
    for i, (n, docs) in enumerate(zip(lengths, documents)):
        if sum(docs) != n or any(d < 1 for d in docs):
            raise ValueError(f"sample {i}'s documents {tuple(docs)} do not make up its {n} tokens")
    return tuple(sum(cost.of(d) for d in docs) for docs in documents)
