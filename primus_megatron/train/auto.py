"""`--pipeline-schedule auto` and `--pipeline-balance auto` in the training script: profile, then choose.

A few forward-backward passes run with a provisional schedule (zb-h1: loop
placement, one chunk) and no optimizer step; the runtime measures each stage's
F, B, W, p2p time and activation memory. A few more with 1f1b on the same
stages measure a backward run as one op, which costs less than B + W apart. Per-layer, embedding and head costs
fitted to them time every registered schedule the layer split fits (even or
uneven) on its own stages (under V the head is on rank 0), memory as measured
per rank; the fastest that fits --pipeline-memory-limit wins and the table is logged.
If it needs another placement or chunk count the model is built again, with
the same initial weights (they depend only on the seed and the layer number).
Each choice is a new PipelineSpec; the arguments are not changed.
"""
from __future__ import annotations

import argparse
from typing import Callable

from .. import options
from .. import schedules as S
from ..options import PipelineSpec
from .forward_step import TrainingSteps
from .setup import log0

Rebuild = Callable[[PipelineSpec], list]  # the model for a spec (same initial weights)


def _profile(args: argparse.Namespace, spec: PipelineSpec, model: list, train_data,
             configure: Callable[[list], None], steps: TrainingSteps):
    """A few forward-backward passes of `spec`'s schedule on `model` (no optimizer step):
    the runner's measured per-stage costs and its plan."""
    from megatron.core import parallel_state as ps

    from ..runtime import get_forward_backward_func
    from . import data as D

    count = spec.profile_steps
    runner = get_forward_backward_func(spec.name, profile_steps=(1, count + 1), chunks=spec.chunks,
                                       p2p_timeout_s=spec.p2p_timeout_s)
    configure(model)
    it = D.batch_iterator(train_data, args.micro_batch_size, ps.get_data_parallel_rank(),
                          ps.get_data_parallel_world_size())
    for _ in range(count + 1):  # the first pass warms up, the next `count` are measured
        for chunk in model:
            chunk.zero_grad_buffer()
        runner(forward_step_func=steps.forward_step, data_iterator=it, model=model if len(model) > 1 else model[0],
               num_microbatches=args.num_microbatches, seq_length=args.seq_length,
               micro_batch_size=args.micro_batch_size, decoder_seq_length=args.seq_length)
    for chunk in model:
        chunk.zero_grad_buffer()
    costs, summary = runner.measured
    return costs, summary, runner.plan(args.pipeline_model_parallel_size, args.num_microbatches)[0]


def _with_unsplit_backward(args: argparse.Namespace, spec: PipelineSpec, model: list, train_data,
                           configure: Callable[[list], None], steps: TrainingSteps, fitted, costs: S.Costs,
                           candidates: list):
    """`fitted` with a backward run as one op (1f1b's BW) timed as measured, where a candidate
    runs BW ops and the profile had none: it costs less than its B and W apart (one autograd
    pass, no deferred closure), and a few passes of 1f1b on the same stages measure it."""
    from dataclasses import replace

    from ..schedules import balance

    if costs.bw is not None or all(S.info(n).splits_backward for n in candidates):
        return fitted
    unsplit, _, _ = _profile(args, spec.with_schedule("1f1b"), model, train_data, configure, steps)
    return replace(fitted, fused=balance.fused_ratio(unsplit, costs))


def choose_schedule(args: argparse.Namespace, spec: PipelineSpec, model: list, rebuild: Rebuild, train_data,
                    configure: Callable[[list], None], steps: TrainingSteps) -> tuple[PipelineSpec, list]:
    """Profile with the provisional schedule (`spec.entry`); the spec of the best schedule,
    planned from the costs it was chosen under, and the model for it (`model` itself or a
    rebuilt one)."""
    from ..runtime.profiler import per_rank_costs
    from ..schedules import balance

    pp = args.pipeline_model_parallel_size
    costs, summary, plan = _profile(args, spec, model, train_data, configure, steps)
    shares = per_rank_costs(costs, plan)
    # Each candidate timed on its own stages: per-layer, embedding and head costs fitted to the
    # measured stages, so under V the head counts on rank 0 (memory as measured, per rank).
    split = spec.layer_split(args)
    usable = [n for n in S.names() if options.split_fits(args, n)]
    fitted = _with_unsplit_backward(args, spec, model, train_data, configure, steps,
                                    balance.fit(costs, split, pp, plan.chunks_per_rank), costs, usable)

    def placed(name: str) -> S.Costs:
        return balance.retimed(shares, fitted, split, pp, S.info(name).chunks)

    best, rows = S.auto.choose(pp, args.num_microbatches, placed, spec.memory_limit,
                               post_validation=spec.post_validation, candidates=usable)
    ms = lambda xs: ", ".join(f"{1e3 * x:.2f}" for x in xs)  # noqa: E731
    log0(f"auto: measured per-rank costs (ms) F [{ms(shares.f)}] B [{ms(shares.b)}] W [{ms(shares.w)}] "
         f"p2p {1e3 * summary['comm']:.3f}; per layer F {1e3 * fitted.layer.f:.2f} B {1e3 * fitted.layer.b:.2f} "
         f"W {1e3 * fitted.layer.w:.2f}, head F {1e3 * fitted.head.f:.2f} B {1e3 * fitted.head.b:.2f} "
         f"W {1e3 * fitted.head.w:.2f}; a backward run as one op / B + W {fitted.fused:.3f}; simulated iteration times (ms) for {args.num_microbatches} "
         f"microbatches, each on its own stages:\n" + S.auto.table([_in_ms(r) for r in rows], best))
    log0(f"auto: chose {best}")
    # Planned from the costs it was chosen under (the V schedules use them too), so what
    # runs is what was simulated; schedules that ignore costs are unaffected.
    chosen = spec.with_schedule(best, costs=placed(best))
    return chosen, _model_for(chosen, spec, model, rebuild)


def _model_for(chosen: PipelineSpec, before: PipelineSpec, model: list, rebuild: Rebuild) -> list:
    """`model` where the chosen spec builds the same chunks, else the model rebuilt for it."""
    same = (chosen.placement, chosen.chunks, chosen.split) == (before.placement, before.chunks, before.split)
    if same:
        return model
    del model
    return rebuild(chosen)


def _in_ms(row):
    from dataclasses import replace

    return replace(row, iteration=None if row.iteration is None else 1e3 * row.iteration)


def balance_split(args: argparse.Namespace, spec: PipelineSpec, model: list, rebuild: Rebuild, train_data,
                  configure: Callable[[list], None], steps: TrainingSteps) -> tuple[PipelineSpec, list]:
    """--pipeline-balance auto: profile the spec's schedule (the provisional one when the
    schedule is chosen too) on the current split, fit per-layer, embedding and head costs;
    the spec on the fastest split (and schedule), and the model for it (rebuilt when anything
    changed)."""
    from ..schedules import balance

    costs, _, plan = _profile(args, spec, model, train_data, configure, steps)
    fitted = balance.fit(costs, spec.layer_split(args), plan.pp, plan.chunks_per_rank)
    if spec.choose:
        fitted = _with_unsplit_backward(args, spec, model, train_data, configure, steps, fitted, costs, S.names())
    chosen, text = options.apply_balance(spec, fitted, plan.pp, args.num_microbatches, args.num_layers,
                                         source=f"measured over {spec.profile_steps} steps of {plan.name}")
    log0(text)
    if chosen.name == spec.name and chosen.split == spec.layer_split(args):
        return chosen, model  # the same schedule on the same split: the model as built
    del model
    return chosen, rebuild(chosen)
