"""`--pipeline-schedule auto` in the training script: profile, then choose.

A few forward-backward passes run with a provisional schedule (zb-h1: loop
placement, one chunk) and no optimizer step; the runtime measures each stage's
F, B, W, p2p time and activation memory. A few more with 1f1b on the same
stages measure a backward run as one op, which costs less than B + W apart. Per-layer, embedding and head costs
fitted to them time every registered schedule the layer split fits (even or
uneven) on its own stages (under V the head is on rank 0), memory as measured
per rank; the fastest that fits --pipeline-memory-limit wins and the table is logged.
If it needs another placement or chunk count the model is built again, with
the same initial weights (they depend only on the seed and the layer number).
"""
from __future__ import annotations

import argparse
from typing import Callable

from .. import schedules as S
from .loop import forward_step, log0

PROVISIONAL = "zb-h1"


def _profile(args: argparse.Namespace, model: list, train_data, configure: Callable[[list], None], schedule: str):
    """A few forward-backward passes of `schedule` on `model` (no optimizer step):
    the runner's measured per-stage costs and its plan."""
    from megatron.core import parallel_state as ps

    from ..runtime import get_forward_backward_func
    from . import data as D

    steps = args.pipeline_profile_steps
    runner = get_forward_backward_func(schedule, profile_steps=(1, steps + 1),
                                       chunks=args.pipeline_chunks if S.info(schedule).chunks != 1 else None,
                                       p2p_timeout_s=args.pipeline_p2p_timeout)
    configure(model)
    it = D.batch_iterator(train_data, args.micro_batch_size, ps.get_data_parallel_rank(),
                          ps.get_data_parallel_world_size())
    for _ in range(steps + 1):  # the first pass warms up, the next `steps` are measured
        for chunk in model:
            chunk.zero_grad_buffer()
        runner(forward_step_func=forward_step, data_iterator=it, model=model if len(model) > 1 else model[0],
               num_microbatches=args.num_microbatches, seq_length=args.seq_length,
               micro_batch_size=args.micro_batch_size, decoder_seq_length=args.seq_length)
    for chunk in model:
        chunk.zero_grad_buffer()
    costs, summary = runner.measured
    return costs, summary, runner.plan(args.pipeline_model_parallel_size, args.num_microbatches)[0]


def _with_unsplit_backward(args: argparse.Namespace, model: list, train_data, configure: Callable[[list], None],
                           fitted, costs: S.Costs, candidates: list):
    """`fitted` with a backward run as one op (1f1b's BW) timed as measured, where a candidate
    runs BW ops and the profile had none: it costs less than its B and W apart (one autograd
    pass, no deferred closure), and a few passes of 1f1b on the same stages measure it."""
    from dataclasses import replace

    from ..megatron_lm.args import splits_weight_gradients
    from ..schedules import balance

    if costs.bw is not None or all(splits_weight_gradients(S.info(n)) for n in candidates):
        return fitted
    unsplit, _, _ = _profile(args, model, train_data, configure, "1f1b")
    return replace(fitted, fused=balance.fused_ratio(unsplit, costs))


def choose_schedule(args: argparse.Namespace, model: list, rebuild: Callable[[], list], train_data,
                    configure: Callable[[list], None]) -> list:
    """Profile with the provisional schedule, set args.pipeline_schedule to the
    best one, return the model for it (`model` itself or a rebuilt one)."""
    from ..megatron_lm.args import split_fits
    from ..runtime.profiler import per_rank_costs
    from ..schedules import balance
    from ..schedules.layer_split import LayerSplit

    pp = args.pipeline_model_parallel_size
    costs, summary, plan = _profile(args, model, train_data, configure, PROVISIONAL)
    shares = per_rank_costs(costs, plan)
    # Each candidate timed on its own stages: per-layer, embedding and head costs fitted to the
    # measured stages, so under V the head counts on rank 0 (memory as measured, per rank).
    split = LayerSplit.from_args(args)
    usable = [n for n in S.names() if split_fits(args, n)]
    fitted = _with_unsplit_backward(args, model, train_data, configure, balance.fit(costs, split, pp, plan.chunks_per_rank),
                                    costs, usable)

    def placed(name: str) -> S.Costs:
        return balance.retimed(shares, fitted, split, pp, S.info(name).chunks)

    best, rows = S.auto.choose(pp, args.num_microbatches, placed, args.pipeline_memory_limit,
                               post_validation=args.optimizer_post_validation, candidates=usable)
    ms = lambda xs: ", ".join(f"{1e3 * x:.2f}" for x in xs)  # noqa: E731
    log0(f"auto: measured per-rank costs (ms) F [{ms(shares.f)}] B [{ms(shares.b)}] W [{ms(shares.w)}] "
         f"p2p {1e3 * summary['comm']:.3f}; per layer F {1e3 * fitted.layer.f:.2f} B {1e3 * fitted.layer.b:.2f} "
         f"W {1e3 * fitted.layer.w:.2f}, head F {1e3 * fitted.head.f:.2f} B {1e3 * fitted.head.b:.2f} "
         f"W {1e3 * fitted.head.w:.2f}; a backward run as one op / B + W {fitted.fused:.3f}; simulated iteration times (ms) for {args.num_microbatches} "
         f"microbatches, each on its own stages:\n" + S.auto.table([_in_ms(r) for r in rows], best))
    log0(f"auto: chose {best}")
    entry = S.info(best)
    args.pipeline_schedule = entry.name
    args.pipeline_chunks_resolved = entry.chunks
    # Planned from the costs it was chosen under (the V schedules use them too), so what
    # runs is what was simulated; schedules that ignore costs are unaffected.
    args.pipeline_costs_measured = placed(entry.name)
    if entry.placement == S.info(PROVISIONAL).placement and entry.chunks == S.info(PROVISIONAL).chunks:
        return model
    del model
    return rebuild()


def _in_ms(row):
    from dataclasses import replace

    return replace(row, iteration=None if row.iteration is None else 1e3 * row.iteration)


def balance_split(args: argparse.Namespace, model: list, rebuild: Callable[[], list], train_data,
                  configure: Callable[[list], None], *, choose_schedule_too: bool) -> list:
    """--pipeline-balance auto: profile `args.pipeline_schedule` (the provisional one
    when the schedule is chosen too) on the current split, fit per-layer, embedding
    and head costs, set the fastest split (and schedule) in `args`, and return the
    model for it (rebuilt when anything changed)."""
    from ..megatron_lm.args import apply_balance
    from ..schedules import balance
    from ..schedules.layer_split import LayerSplit

    before = (args.pipeline_schedule, _split_of(args))
    costs, _, plan = _profile(args, model, train_data, configure, args.pipeline_schedule)
    split = LayerSplit.from_args(args)
    fitted = balance.fit(costs, split, plan.pp, plan.chunks_per_rank)
    if choose_schedule_too:
        fitted = _with_unsplit_backward(args, model, train_data, configure, fitted, costs, S.names())
        args.pipeline_schedule = "auto"
    log0(apply_balance(args, fitted, plan.pp, args.num_microbatches,
                       source=f"measured over {args.pipeline_profile_steps} steps of {plan.name}"))
    entry = S.info(args.pipeline_schedule)
    args.pipeline_chunks_resolved = entry.chunks
    if (args.pipeline_schedule, _split_of(args)) == before:
        return model
    del model
    return rebuild()


def _split_of(args: argparse.Namespace) -> tuple:
    return (args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers,
            bool(args.account_for_embedding_in_pipeline_split), bool(args.account_for_loss_in_pipeline_split),
            args.pipeline_model_parallel_layout)
