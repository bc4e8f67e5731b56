"""Post-training-shaped batches for examples/pretrain_gpt.py under `--pipeline-balance-data`.

Each step's global batch is `--global-batch-size` samples whose lengths follow the long-tail model of
`balancing.lengths` (LongAlign's mean and maximum, scaled to `--seq-length`), their tokens the first
tokens of the training split's next samples (the pretraining corpus standing in for SFT data: no
package ships an SFT dataset that installs offline here). Every rank of every replica draws the same
lengths (a seed per step) and makes the same `BatchPlan` (`balancing.plan_batch` with the mode), so
each replica knows its own microbatch count without a message; the runner then checks the counts
before the step (`runtime.replica_counts`). Samples are packed into `--seq-length` tokens per
microbatch (`packed_batch.pack`).

Inside a replica the packed microbatches cost different amounts; with one of our schedules they
run in the order `schedules.mb_order.choose_order` simulates fastest among its fixed candidates
(identity, heaviest / lightest first, light at both ends; no swap search: a few milliseconds per
step), each microbatch's op times scaled by its cost over the plan's mean (`BatchPlan.factors`).

The split weighs samples by `SampleCost`: `--pipeline-balance-cost A,B` (a*s^2 + b*s), or the
model's FLOP ratio by default: per layer and token a forward costs ~24h^2 in its linear layers and
~4hs in attention over s tokens, so a = 1 / (6h) with b = 1.
"""
from __future__ import annotations

import argparse
from typing import Callable, Iterator, Optional, Sequence

import torch

from ..balancing import BatchPlan, SampleCost, longalign_batch, plan_batch
from .packed_batch import pack


def sample_cost(args: argparse.Namespace) -> SampleCost:
    """The cost the split balances: given, or the model's FLOP ratio (module doc)."""
    given = getattr(args, "pipeline_balance_cost", None)
    if given:
        a, b = (float(x) for x in given.split(","))
        return SampleCost(a=a, b=b)
    return SampleCost(a=1.0 / (6 * args.hidden_size), b=1.0)


class BalancedBatches:
    """The packed microbatches of this data-parallel replica, step by step (module doc)."""

    def __init__(self, dataset, args: argparse.Namespace, dp_rank: int, dp_size: int, start_sample: int = 0, *,
                 order: Optional[Callable[[Sequence[float]], Sequence[int]]] = None) -> None:
        self.dataset, self.args = dataset, args
        self.order = order  # the microbatch order for a replica's factors (None: as packed)
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.mode, self.cost = args.pipeline_balance_data, sample_cost(args)
        self.global_batch, self.seq = args.global_batch_size, args.seq_length
        self.consumed = start_sample
        self.last_plan: Optional[BatchPlan] = None
        self.summaries: dict[int, tuple] = {}  # step -> (microbatches per replica, trained tokens): the log's

    def plan(self, step: int) -> BatchPlan:
        """Step `step`'s global batch split and packed (the same on every rank)."""
        lengths = longalign_batch(self.global_batch, self.seq, seed=self.args.seed * 1_000_003 + step, min_len=2)
        return plan_batch(lengths, self.dp_size, self.seq, self.mode, self.cost,
                          min_microbatches=getattr(self.args, "pipeline_model_parallel_size", 1) or 1)

    def step(self, step: int) -> tuple[int, Iterator[dict]]:
        """(this replica's microbatch count, its packed microbatches; on a rank without data, their
        masks and positions around zero tokens: every stage's attention needs them)."""
        plan = self.last_plan = self.plan(step)
        self.summaries = {k: v for k, v in self.summaries.items() if k >= step - 4}  # post-validation logs late
        self.summaries[step] = (plan.counts, sum(plan.lengths))
        first = self.consumed
        self.consumed += self.global_batch
        mine = plan.replicas[self.dp_rank]
        if self.order is not None and len(mine) > 1:
            mine = tuple(mine[i] for i in self.order(plan.factors(self.dp_rank, self.cost)))

        def sample(i: int) -> torch.Tensor:  # n + 1 tokens train n positions
            n = plan.lengths[i]
            if self.dataset is None:  # a middle stage: its attention needs the packing, not the tokens
                return torch.zeros(n + 1, dtype=torch.long)
            item = self.dataset[(first + i) % len(self.dataset)]
            return torch.cat([torch.as_tensor(item["tokens"])[:n], torch.as_tensor(item["labels"])[n - 1:n]])
        return len(mine), iter([pack([sample(i) for i in mb], self.seq) for mb in mine])


def schedule_order(runner, pp: int) -> Callable[[Sequence[float]], Sequence[int]]:
    """The order function for our runner's schedule: its current spec (measured costs once
    re-planned) with the microbatches' factors (module doc)."""
    import dataclasses

    from ..schedules.costs import Costs
    from ..schedules.mb_order import choose_order

    def order(factors: Sequence[float]) -> Sequence[int]:
        spec = runner.spec
        costs = dataclasses.replace(spec.costs or Costs(), mb_scale=tuple(factors))
        return choose_order(spec.name, pp, costs, memory_limit=spec.memory_limit, chunks=spec.chunks,
                            post_validation=spec.post_validation, budget=0)[0]
    return order
